"""Which evaluator a job measures on: this machine's GPUs, a Ray cluster's, or a plug-in evaluator.

One choice (``BackendChoice``) made by each front end from its own inputs (``--gpus``/``--ray-address``,
the ``evaluationBackend``/``rayAddress`` settings), and one way to turn it into an evaluator and to check,
before the baseline costs anything, that the backend has a GPU at all.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..search.optimize import OptimizeRequest
from ..search.tree import EvaluatorLike
from .errors import JobError

log = logging.getLogger(__name__)

#: makes the evaluator of one optimize request
EvaluatorMaker = Callable[[OptimizeRequest], EvaluatorLike]


@dataclass(frozen=True)
class BackendChoice:
    """``name``: ``local`` (GPUs of this machine), ``ray`` (a Ray cluster's) or ``python:MODULE:FUNCTION`` (a
    plug-in evaluator factory called with the request). ``gpus``: for ``local`` all/a count/CUDA indices, for
    ``ray`` a count of GPU actors. ``ray_address``: None or "" starts a private Ray instance (loopback only)."""

    name: str = "local"
    gpus: str | int | list[int] | None = None
    ray_address: str | None = None
    #: the workspace the evaluation cache is kept for (in the user's cache, keyed by it); None: the file's folder
    workspace: str | Path | None = None
    #: the store's file (or folder) instead of the workspace's (``--store``, ``warpforge.storePath``)
    store: str | Path | None = None

    @property
    def plugin(self) -> bool:
        """A plug-in evaluator: not a GPU this job can also profile on (so the baseline is not profiled)."""
        return self.name.startswith("python:")


def evaluator_factory(name: str) -> Any:
    """Resolve ``python:MODULE:FUNCTION`` (a plug-in evaluator factory) or a built-in one: ``local`` (every
    GPU of this machine) or ``ray`` (the GPUs of a Ray cluster)."""
    if name.startswith("python:"):
        _, mod, fn = name.split(":", 2)
        return getattr(importlib.import_module(mod), fn)
    if name == "local":
        return importlib.import_module("warpforge.gpu.evaluator").evaluator_for_job
    if name == "ray":
        return importlib.import_module("warpforge.gpu.ray_backend").evaluator_for_job
    raise JobError(f"unknown evaluation backend `{name}`: use local, ray or python:MODULE:FUNCTION")


def make_evaluator(choice: BackendChoice, req: OptimizeRequest) -> EvaluatorLike:
    """The evaluator of ``req`` on ``choice`` (it owns its backend: closing it leaves no worker behind)."""
    factory = evaluator_factory(choice.name)
    if choice.name == "local":
        return factory(req, workspace=choice.workspace, store=choice.store,  # type: ignore[no-any-return]
                       gpus=choice.gpus if choice.gpus is not None else "all")
    if choice.name == "ray":
        return factory(req, workspace=choice.workspace, store=choice.store,  # type: ignore[no-any-return]
                       address=choice.ray_address or None,
                       gpus=choice.gpus if isinstance(choice.gpus, int) else None)
    return factory(req)  # type: ignore[no-any-return]


async def ready(evaluator: EvaluatorLike) -> None:
    """Start a Ray backend now and say at once when its cluster has no GPU (``GpuUnavailable``), not after the
    baseline; local backends start with their first evaluation."""
    from ..gpu.backends import GpuUnavailable
    from ..gpu.ray_backend import RayBackend  # Ray itself is imported only when a backend connects

    backend = getattr(evaluator, "backend", None)
    if not isinstance(backend, RayBackend):
        return
    await backend.start()
    if backend.device_count == 0:
        notes = "; ".join(backend.notes) or "none joined"
        raise GpuUnavailable(f"no GPU in the Ray cluster at {backend.address or 'this machine'}: {notes}")


async def close(evaluator: EvaluatorLike | None) -> None:
    """Close an evaluator (``aclose`` or ``close``, awaitable or not); a failure is logged, never raised: the
    job's result is already known."""
    fn = getattr(evaluator, "aclose", None) or getattr(evaluator, "close", None)
    if fn is None:
        return
    try:
        res = fn()
        if inspect.isawaitable(res):
            await res
    except Exception:
        log.exception("closing the evaluator")
