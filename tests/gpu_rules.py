"""The harness the per-rule GPU tests share (``test_rules_*_gpu.py``, ``test_unstage_gpu.py``).

Why a module: each of those files carried the same thirty lines — the module-level skip where no GPU is
present, an event loop, a backend per module, "the rule's candidates for this kernel text", and "every candidate
evaluated as the search evaluates it (verified against the original at the spec size and the perturbed size,
then timed)" — and a fix to one (a clearer assertion, a setting) reached the others only by copying. Each test
file keeps its kernels and its claims (which variants must exist, how much faster the best must be).

Import it at the top of the test module (importing it skips the module where no GPU is present); the
``gpu_backend`` fixture (one backend per module) is conftest's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason


def skip_without_gpu() -> None:
    """Skip the calling test module, with the reason, where no NVIDIA GPU and pycuda are present (CI)."""
    why = gpu_unavailable_reason()
    if why is not None:
        pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {why}", allow_module_level=True)


skip_without_gpu()

from warpforge.cuda import SourceText, parse  # noqa: E402
from warpforge.cuda.candidate import Candidate  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402
from warpforge.policy.offline import OfflinePolicy  # noqa: E402
from warpforge.spec.resolve import load_spec  # noqa: E402

T = TypeVar("T")
_LOOP = asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one evaluator call on the harness's event loop (one loop for the session: the backend's workers
    belong to it)."""
    return _LOOP.run_until_complete(coro)


def settings(kernel_timeout: float = 8.0, compile_timeout: float = 120.0, max_seconds: float = 1.0) -> EngineSettings:
    """The engine's settings for a rule test: the search's verification, a shorter timing."""
    return EngineSettings(kernel_timeout=kernel_timeout, compile_timeout=compile_timeout,
                          timing=TimingSettings(max_seconds=max_seconds))


def proposed(path: Path, text: str, kernel: str, families: set[str],
             keep: Callable[[Candidate], bool] | None = None) -> tuple[list[Candidate], list[str]]:
    """Write ``text`` to ``path`` and return the offline policy's candidates of ``families`` for ``kernel``
    (those ``keep`` accepts, by default those of the families asked for) and the policy's errors."""
    path.write_text(text, encoding="utf-8")
    src = SourceText(text)
    model = parse(src.data)
    k = model.require(kernel, str(path))
    pol = OfflinePolicy(str(path), src, model, k, load_spec(str(path), kernel, text=text), families=families)
    accept = keep if keep is not None else (lambda c: c.family in families)
    return [c for c in pol.propose_sync(pol.root_candidate()) if accept(c)], list(pol.errors)


def speedups(backend: Backend, path: Path, kernel: str, children: list[Candidate],
             engine: EngineSettings) -> dict[str, float]:
    """Evaluate every child against the original, as the search does; each must verify. Returns each child's
    measured speedup by its steps (a child whose timing stopped early, slower than the best so far, has
    none), and prints them (``pytest -s`` shows the numbers a GPU run measured)."""
    ev = Evaluator(path, kernel, backend=backend, settings=engine)
    base = run(ev.baseline())
    assert base.status == "ok", (base.status, base.reason)
    out: dict[str, float] = {}
    for child in children:
        e = run(ev.evaluate(child))
        assert e.status == "ok", (path.name, child.steps, e.status, e.reason, e.notes, child.definition)
        if e.speedup is not None:
            out["+".join(child.steps)] = e.speedup
    print(f"\n{path.stem}: " + ", ".join(f"{s} {x:.2f}x" for s, x in out.items()))
    return out
