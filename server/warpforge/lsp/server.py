"""``warpforge serve``: the pygls 2.x language server.

The server object holds settings, the diagnostics manager and the job manager; features register their
handlers from their own modules. Errors a user can fix (unknown kernel, closed document, bad arguments)
are answered as JSON-RPC errors with a readable message; anything else is logged and answered as an
internal error — the server keeps running either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__
from ..app.errors import JobError
from ..compiler.includes import set_workspace_roots
from ..cuda.model import KernelNotFound
from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..spec.annotations import annotation_edits
from ..spec.model import SpecError
from . import actions, diagnostics, framing, hover, lenses, limits
from .diagnostics import Diagnostics
from .protocol import (
    GPU_STATUS_REQUEST,
    AddSpecResult,
    CancelResult,
    GpuStatus,
    OptimizeResult,
    ProfileResult,
    wire,
)
from .restricted import Trust
from .settings import Settings

if TYPE_CHECKING:
    from ..app.capabilities import Capabilities
    from .jobs import OptimizeJobs
    from .profiling import ProfileJobs

log = logging.getLogger("warpforge.lsp")

T = TypeVar("T")


class WarpForgeServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("warpforge", __version__)
        self.settings = Settings()
        self.trust = Trust()
        # Two small pools besides pygls' own (jobs): requests never queue behind analyses, and analyses
        # superseded by an edit before they start are dropped from the queue instead of piling up.
        #: code lens, code actions, commands that parse: what the user is waiting for
        self.interactive_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="wf-interactive")
        #: diagnostics runs (tree-sitter, analyzers, nvcc, nvdisasm)
        self.analysis_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="wf-analysis")
        self.diagnostics = Diagnostics(self)
        # The job managers (and with them search, the GPU pool, the LLM policy: ~0.3 s of imports) are made on
        # first use, so the first hints of a fresh server are not held up by machinery no hint needs.
        self._jobs: OptimizeJobs | None = None
        self._profiles: ProfileJobs | None = None
        #: why the connection was closed, when the client broke the framing (see ``framing``)
        self.framing_error: str | None = None
        #: the process's exit status once the connection is over
        self.exit_code = 0
        #: (backend, nvcc setting) -> what GPU work can run with them (``gpu_status``)
        self._gpu_status: dict[tuple[str, str], Capabilities] = {}

    @property
    def jobs(self) -> OptimizeJobs:
        """The optimize jobs, made (and their modules imported) on first use."""
        if self._jobs is None:
            from .jobs import OptimizeJobs

            self._jobs = OptimizeJobs(self)
        return self._jobs

    @property
    def profiles(self) -> ProfileJobs:
        """The profile jobs, made on first use."""
        if self._profiles is None:
            from .profiling import ProfileJobs

            self._profiles = ProfileJobs(self)
        return self._profiles

    @property
    def jobs_started(self) -> bool:
        """Whether any job manager exists yet: before that there is no job, running or finished, to show."""
        return self._jobs is not None or self._profiles is not None

    def workspace_root(self, path: str | None) -> Path | None:
        """The workspace folder holding ``path`` (the first folder, else the root, when none holds it): where
        the kernel's launch sites are looked for."""
        ws = self.workspace
        if ws is None:
            return None
        folders = [Path(p) for f in getattr(ws, "folders", {}).values() if (p := to_fs_path(f.uri))]
        if path:
            for f in folders:
                if Path(path).resolve().is_relative_to(f.resolve()):
                    return f
        if folders:
            return folders[0]
        return Path(ws.root_path) if ws.root_path else None

    def gpu_status(self) -> Capabilities:
        """What GPU work can run with the current settings; probed once per backend and nvcc setting (it runs
        nvidia-smi and nvcc: call it off the event loop)."""
        from ..app.capabilities import probe
        from .jobs import backend_name

        key = (backend_name(self.settings), str(self.settings.nvcc_path or ""))
        if key not in self._gpu_status:
            self._gpu_status[key] = probe(key[0], key[1] or None)
        return self._gpu_status[key]

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve LSP on stdio through ``framing`` (pygls' own reader can be wedged by a bad header)."""
        writer = framing.LockedWriter(stdout or sys.stdout.buffer)
        self.protocol.set_writer(writer)
        self._serve(framing.StreamChunks(stdin or sys.stdin.buffer), writer)

    def start_tcp(self, host: str, port: int) -> None:
        """One TCP connection (debugging), with the same framing as stdio."""
        async def main() -> None:
            done = asyncio.Event()

            async def connection(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                self.protocol.set_writer(w)
                try:
                    self.framing_error = await framing.pump(self.protocol, reader, w)
                finally:
                    done.set()

            srv = await asyncio.start_server(connection, host, port)
            log.info("serving LSP on %s:%s", host, port)
            async with srv:
                await done.wait()

        self._run(main())

    def _serve(self, source: framing.ChunkSource, writer: framing.Writer) -> None:
        async def main() -> None:
            self.framing_error = await framing.pump(self.protocol, source, writer)

        self._run(main())

    def _run(self, main: Coroutine[Any, Any, None]) -> None:
        try:
            asyncio.run(main)
        except SystemExit as e:  # the `exit` notification: 0 after `shutdown`, else 1 (the LSP rule)
            self.exit_code = e.code if isinstance(e.code, int) else 1
        except BrokenPipeError:
            log.error("the client closed the connection")
        except KeyboardInterrupt:
            pass
        self._closed()

    def _closed(self) -> None:
        """The connection is over: stop accepting work. ``serve`` then leaves without waiting for analyses
        still running in the thread pool (their results would answer nobody; a 5 MB parse takes seconds)."""
        if self.framing_error is not None:
            # The stream cannot be trusted any more: say why, where the editor shows it.
            reason = f"WarpForge: closing the connection, the client broke the LSP framing: {self.framing_error}"
            log.error("%s", reason)
            with contextlib.suppress(Exception):  # the client may be gone already
                self.protocol.writer.write(framing.frame({  # type: ignore[union-attr]
                    "jsonrpc": "2.0", "method": "window/logMessage", "params": {"type": 1, "message": reason}}))
            self.exit_code = framing.EXIT_FRAMING
        for pool in (self.thread_pool, self.interactive_pool, self.analysis_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def analyzable(self, uri: str) -> SourceText:
        """The open document's text, for a command that parses it; JobError when it is not open or the
        server does not analyze it (too large, not text)."""
        try:
            doc = self.workspace.get_text_document(uri)
            text = doc.source
        except Exception as e:
            raise JobError(f"document {uri} is not open") from e
        reason = limits.skip_reason(text, self.settings.max_document_bytes)
        if reason is not None:
            raise JobError(f"{doc.path or uri}: {reason}")
        return SourceText(text)

    def allowed(self, what: str) -> None:
        """JobError in Restricted Mode (see ``restricted``)."""
        reason = self.trust.check(what)
        if reason is not None:
            raise JobError(reason)

    async def off_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the interactive pool: parsing a document must not hold up other requests."""
        return await asyncio.get_running_loop().run_in_executor(self.interactive_pool, fn)

    def lenses_changed(self) -> None:
        caps = self.client_capabilities.workspace
        if caps is not None and caps.code_lens is not None and caps.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)


def trace_logging(value: Any) -> None:
    """Debug records (the tracebacks of users' mistakes, see ``app.prepared.log_failure``) go to the editor's
    log only while its trace is verbose (``warpforge.trace.server``); otherwise one line says what failed."""
    verbose = str(getattr(value, "value", value)) == "verbose"
    logging.getLogger("warpforge").setLevel(logging.DEBUG if verbose else logging.INFO)


class RefusalsInOneLine(logging.Filter):
    """pygls logs every request answered with an error with its traceback. A request refused with
    ``JsonRpcInvalidParams`` (``guarded``: the user's mistake, whose message the editor shows) becomes one line at
    info; the traceback is kept at debug, for the trace log. A message that does not fit its method's types is
    logged by ``framing.dispatch`` in one line, so pygls' traceback of it goes to debug only. Anything else (a
    bug) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Unable to deserialize message"):
            # A message whose fields have the wrong types: ``framing.dispatch`` logs it as one line naming
            # each wrong field; pygls' 30-line traceback of cattrs' exception groups is for the trace log.
            log.debug("%s", record.getMessage())
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, JsonRpcInvalidParams):
            log.debug("request refused", exc_info=record.exc_info)
            record.msg, record.args = "request refused: %s", (exc.message,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def guarded(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn user-facing errors into InvalidParams and bugs into logged InternalErrors."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (JobError, SpecError, KernelNotFound, KeyError, ValueError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            # A spec mistake has one fix the editor can offer as a button: Add/Edit benchmark spec.
            spec = isinstance(e, SpecError) or isinstance(e.__cause__, SpecError)
            raise JsonRpcInvalidParams(str(msg), data={"fix": "addSpec"} if spec else None) from e
        except JsonRpcInvalidParams:
            raise
        except Exception as e:
            log.exception("%s failed", fn.__name__)
            raise JsonRpcInternalError(f"WarpForge: {type(e).__name__}: {e}") from e

    return wrapper


def _say_rejected(ls: WarpForgeServer) -> None:
    """Show each setting value that was refused (``budget: "lots"``): the user sees why it has no effect."""
    for msg in ls.settings.take_rejected():
        ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Warning, message=f"WarpForge: {msg}"))


def create_server() -> WarpForgeServer:
    server = WarpForgeServer()
    diagnostics.register(server)
    lenses.register(server)
    actions.register(server)
    hover.register(server)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: WarpForgeServer, params: lsp.InitializeParams) -> None:
        trace_logging(params.trace)
        ls.settings.update(params.initialization_options)
        _say_rejected(ls)
        ls.trust.update(params.initialization_options)
        # The editor's workspace folders count as the workspace for the include check (compiler.includes).
        uris = [f.uri for f in params.workspace_folders or []] + ([params.root_uri] if params.root_uri else [])
        set_workspace_roots([p for u in uris if (p := to_fs_path(u))])
        log.info("settings: %s; workspace %s", ls.settings.public(),
                 "trusted" if ls.trust.trusted else "untrusted (Restricted Mode: nothing is compiled or run)")

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: WarpForgeServer, params: lsp.DidChangeConfigurationParams) -> None:
        changed = ls.settings.update(params.settings)
        _say_rejected(ls)
        if ls.trust.update(params.settings):
            changed.append("trusted")
        if {"arch", "nvcc_path", "max_document_bytes", "trusted"} & set(changed):
            for uri in list(ls.diagnostics.docs):
                ls.diagnostics.schedule(uri, 0.0)
        elif {"hints_exclude", "hints_min_severity"} & set(changed):
            for uri in list(ls.diagnostics.docs):  # the same findings, filtered anew: no analysis needed
                ls.diagnostics.publish(uri)
        if "code_lens_enabled" in changed:
            ls.lenses_changed()

    @server.feature(lsp.SET_TRACE)
    def set_trace(ls: WarpForgeServer, params: lsp.SetTraceParams) -> None:
        trace_logging(params.value)

    @server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def progress_cancel(ls: WarpForgeServer, params: lsp.WorkDoneProgressCancelParams) -> None:
        if ls.jobs_started:
            ls.jobs.cancel_token(params.token)
            ls.profiles.cancel_token(params.token)

    @server.command("warpforge.optimize")
    @guarded
    async def optimize(ls: WarpForgeServer, uri: str, kernel: str, strategy: str = "") -> dict[str, Any]:
        ls.allowed("Optimize")
        ls.analyzable(uri)
        status = await ls.off_loop(ls.gpu_status)
        if not status.can_optimize:  # said before anything starts (the editor checks first; other clients too)
            raise JobError(f"{kernel} cannot be optimized here: {status.reason}. To measure variants, "
                           f"{status.advice()}. Hints keep working without a GPU.")
        job = await ls.jobs.start(uri, kernel, strategy or ls.settings.strategy)
        ls.lenses_changed()
        return wire(OptimizeResult(job.id, job.token))  # type: ignore[no-any-return]

    @server.command("warpforge.profile")
    @guarded
    async def profile(ls: WarpForgeServer, uri: str, kernel: str) -> dict[str, Any]:
        ls.allowed("Profile")
        ls.analyzable(uri)
        job = await ls.profiles.start(uri, kernel)
        return wire(ProfileResult(job.id, job.token))  # type: ignore[no-any-return]

    @server.command("warpforge.cancel")
    @guarded
    async def cancel(ls: WarpForgeServer, job: str) -> dict[str, Any]:
        if not (ls.profiles.cancel(job) or ls.jobs.cancel(job)):
            raise JobError(f"no job `{job}`")
        return wire(CancelResult(job))  # type: ignore[no-any-return]

    @server.command("warpforge.accept")
    @guarded
    async def accept(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        return await ls.jobs.accept(job, candidate)

    @server.command("warpforge.acceptHunks")
    @guarded
    async def accept_hunks(ls: WarpForgeServer, job: str, candidate: str, hunks: list[int]) -> dict[str, Any]:
        if not isinstance(hunks, list):
            raise JobError("warpforge.acceptHunks needs [job, candidate, [hunk index, ...]]")
        return await ls.jobs.accept_hunks(job, candidate, hunks)

    @server.command("warpforge.reject")
    @guarded
    async def reject(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        return ls.jobs.reject(job, candidate)

    @server.command("warpforge.showCandidate")
    @guarded
    async def show_candidate(ls: WarpForgeServer, job: str, candidate: str) -> dict[str, Any]:
        return await ls.jobs.show_candidate(job, candidate)

    @server.command("warpforge.addSpec")
    @guarded
    async def add_spec(ls: WarpForgeServer, uri: str, kernel: str) -> dict[str, Any]:
        src = ls.analyzable(uri)
        doc = ls.workspace.get_text_document(uri)
        version = doc.version  # of the text being parsed: a later edit makes the client refuse these edits

        root = ls.workspace_root(doc.path)
        overlay = {Path(d.path): d.source for u, d in ls.workspace.text_documents.items() if d.path and u != uri}

        def edits_for() -> tuple[list[Any], str]:
            model = parse(src.data)
            k = model.require(kernel, doc.path or uri)
            draft = actions.spec_draft(src, k, doc.path or uri, model, root, overlay)
            return annotation_edits(src, k, draft.annotation()), draft.notice()

        edits, notice = await ls.off_loop(edits_for)
        result = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            label=f"WarpForge: benchmark spec for {kernel}", edit=actions._workspace_edit(uri, version, edits)))
        if notice and result is not None and result.applied:
            ls.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Info, f"WarpForge: `{kernel}`: {notice}"))
        return wire(AddSpecResult(bool(result.applied) if result is not None else False))  # type: ignore[no-any-return]

    @server.command(actions.NOTICE_COMMAND)
    async def spec_notice(ls: WarpForgeServer, message: str) -> None:
        """Run by the "Add benchmark spec" code action after its edit: where the values came from, and which
        lines are guesses (marked `// guessed:` in the block)."""
        ls.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Info, f"WarpForge: {message}"))

    @server.feature(GPU_STATUS_REQUEST)
    @guarded
    async def gpu_status(ls: WarpForgeServer, params: Any) -> dict[str, Any]:
        s = await ls.off_loop(ls.gpu_status)
        return wire(GpuStatus(s.summary(), s.can_optimize, s.can_profile, s.reason, s.advice(), s.backend,  # type: ignore[no-any-return]
                              list(s.gpus), s.driver, s.tools()))

    @server.feature("warpforge/searchTree")
    @guarded
    async def search_tree(ls: WarpForgeServer, params: Any) -> dict[str, Any]:
        job = getattr(params, "job", None) if not isinstance(params, dict) else params.get("job")
        if not isinstance(job, str):
            raise JobError("warpforge/searchTree needs {\"job\": JOB_ID}")
        return ls.jobs.tree(job)

    return server


def serve(tcp: tuple[str, int] | None = None) -> NoReturn:
    """Serve over stdio, or over TCP at ``tcp`` (host, port; checked by ``commands.serve.tcp_address``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)  # it logs every message at INFO
    logging.getLogger("pygls.protocol.json_rpc").addFilter(RefusalsInOneLine())
    server = create_server()
    if tcp is not None:
        server.start_tcp(*tcp)
    else:
        server.start_io()
    # Leave now: the non-daemon pool threads would otherwise be joined at exit, finishing work for nobody.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):  # `exit` closes stdout
            stream.flush()
    os._exit(server.exit_code)
