"""``warpforge serve``: the pygls 2.x language server.

The server object holds settings, the diagnostics manager and the job manager; features register their
handlers from their own modules. Errors a user can fix (unknown kernel, closed document, bad arguments)
are answered as JSON-RPC errors with a readable message; anything else is logged and answered as an
internal error — the server keeps running either way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..cuda.model import KernelNotFound
from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..spec.model import SpecError
from . import actions, diagnostics, lenses
from .diagnostics import Diagnostics
from .jobs import JobError, Jobs
from .profiling import ProfileJobs
from .settings import Settings

log = logging.getLogger("warpforge.lsp")

T = TypeVar("T")


class WarpForgeServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("warpforge", __version__)
        self.settings = Settings()
        self.diagnostics = Diagnostics(self)
        self.jobs = Jobs(self)
        self.profiles = ProfileJobs(self, JobError)

    def lenses_changed(self) -> None:
        caps = self.client_capabilities.workspace
        if caps is not None and caps.code_lens is not None and caps.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)


def guarded(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn user-facing errors into InvalidParams and bugs into logged InternalErrors."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (JobError, SpecError, KernelNotFound, KeyError, ValueError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise JsonRpcInvalidParams(str(msg)) from e
        except JsonRpcInvalidParams:
            raise
        except Exception as e:
            log.exception("%s failed", fn.__name__)
            raise JsonRpcInternalError(f"WarpForge: {type(e).__name__}: {e}") from e

    return wrapper


def create_server() -> WarpForgeServer:
    server = WarpForgeServer()
    diagnostics.register(server)
    lenses.register(server)
    actions.register(server)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: WarpForgeServer, params: lsp.InitializeParams) -> None:
        ls.settings.update(params.initialization_options)
        log.info("settings: %s", ls.settings.public())

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: WarpForgeServer, params: lsp.DidChangeConfigurationParams) -> None:
        changed = ls.settings.update(params.settings)
        if {"arch", "nvcc_path"} & set(changed):
            for uri in list(ls.diagnostics.docs):
                ls.diagnostics.schedule(uri, 0.0)

    @server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def progress_cancel(ls: WarpForgeServer, params: lsp.WorkDoneProgressCancelParams) -> None:
        ls.jobs.cancel_token(params.token)
        ls.profiles.cancel_token(params.token)

    @server.command("warpforge.optimize")
    @guarded
    async def optimize(ls: WarpForgeServer, uri: str, kernel: str, strategy: str = "") -> dict[str, Any]:
        job = await ls.jobs.start_optimize(uri, kernel, strategy or ls.settings.strategy)
        ls.lenses_changed()
        return {"job": job.id, "token": job.token}

    @server.command("warpforge.profile")
    @guarded
    async def profile(ls: WarpForgeServer, uri: str, kernel: str) -> dict[str, Any]:
        job = await ls.profiles.start(uri, kernel)
        return {"job": job.id, "token": job.token}

    @server.command("warpforge.cancel")
    @guarded
    async def cancel(ls: WarpForgeServer, job: str) -> dict[str, Any]:
        if not ls.profiles.cancel(job):
            ls.jobs.cancel(job)
        return {"cancelled": job}

    @server.command("warpforge.accept")
    @guarded
    async def accept(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        return await ls.jobs.accept(job, candidate)

    @server.command("warpforge.reject")
    @guarded
    async def reject(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        return ls.jobs.reject(job, candidate)

    @server.command("warpforge.showCandidate")
    @guarded
    async def show_candidate(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        j = ls.jobs.get(job)
        node = j.node(candidate)
        if node is None:
            raise JobError(f"job {job} has no candidate `{candidate}`")
        text = j.snapshot
        model = parse(text)
        k = model.require(j.kernel, "the job's snapshot")
        from ..search.optimize import apply_candidate
        from ..spec.resolve import build_spec

        try:
            spec = build_spec(SourceText(text), model, k, j.uri)
        except SpecError:
            spec = None
        return {"job": job, "candidate": node.candidate.hash, "uri": j.uri, "kernel": j.kernel,
                "speedup": node.speedup, "family": node.candidate.family, "status": node.status,
                "original": text, "variant": apply_candidate(text, k, node.candidate, spec)}

    @server.command("warpforge.addSpec")
    @guarded
    async def add_spec(ls: WarpForgeServer, uri: str, kernel: str) -> dict[str, Any]:
        try:
            doc = ls.workspace.get_text_document(uri)
        except Exception as e:
            raise JobError(f"document {uri} is not open") from e
        src = SourceText(doc.source)
        model = parse(src.data)
        k = model.require(kernel, doc.path or uri)
        edits = actions.spec_edits(src, k, doc.path or uri, model)
        result = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            label=f"WarpForge: benchmark spec for {kernel}", edit=actions._workspace_edit(uri, doc.version, edits)))
        return {"applied": bool(result.applied) if result is not None else False}

    @server.feature("warpforge/searchTree")
    @guarded
    async def search_tree(ls: WarpForgeServer, params: Any) -> dict[str, Any]:
        job = getattr(params, "job", None) if not isinstance(params, dict) else params.get("job")
        if not isinstance(job, str):
            raise JobError("warpforge/searchTree needs {\"job\": JOB_ID}")
        return ls.jobs.tree(job)

    return server


def serve(tcp: str | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message at INFO
    server = create_server()
    if tcp:
        host, _, port = tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
