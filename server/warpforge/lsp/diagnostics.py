"""Static findings as diagnostics: on open and save at once, after edits debounced; stale runs dropped.

Analysis (tree-sitter, nvcc, nvdisasm) runs in the server's analysis pool, never on the event loop. A run
whose document changed meanwhile is discarded instead of publishing hints for text that no longer
exists; a newer edit cancels the pending debounced run. When a job has profiler-grounded findings for a
kernel, they replace that kernel's static ones until the kernel's text changes.

A document's analysis also depends on the headers it includes and on the project's build: saving an open
header, or the file watcher reporting a header, ``warpforge.toml`` or ``compile_commands.json`` changed,
analyzes the documents that depend on it again (their hint cache keys hold both, so nothing stale is
replayed). nvcc's output for each compile goes to the Output channel (``window/logMessage``, type Log).

In Restricted Mode only the source-pattern phase runs (see ``restricted``). A document over the size limit
or not text gets one notice instead of analysis (see ``limits``). Closing a document drops everything kept
for it and gives the memory back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from ..compiler.project import RefusedOption, project_build, reached_headers, refused_options
from ..cuda.text import Position, Range
from ..policy.whynot_hint import install as install_why_not
from ..profile.findings import Finding, Severity, make
from ..profile.hints import HintsReport, analyze_source
from . import limits
from .convert import diagnostic, ranked_severity
from .protocol import ANALYSIS_NOTIFICATION, AnalysisParams, wire

if TYPE_CHECKING:
    from .server import WarpForgeServer

log = logging.getLogger(__name__)


@dataclass
class DocState:
    version: int | None = None
    task: asyncio.Task[None] | None = None
    report: HintsReport | None = None
    #: kernel name -> its text when ``report`` was made
    kernel_texts: dict[str, str] = field(default_factory=dict)
    #: kernel name -> (kernel text, findings) from a profile; shown instead of static findings
    profiled: dict[str, tuple[str, list[Finding]]] = field(default_factory=dict)
    #: the headers the document reaches (its folder and the project's include folders): saving one of them,
    #: or the file watcher reporting a change, analyzes the document again
    headers: frozenset[Path] = frozenset()
    #: what the document compiles against changed (a header, ``warpforge.toml``, ``compile_commands.json``)
    #: since ``report``: its compiler findings are not carried into the next source phase (see ``_run_phases``)
    build_changed: bool = False


def _kernel_texts(text: str) -> dict[str, str]:
    from ..cuda.parser import parse

    data = text.encode("utf-8")
    return {k.name: data[k.span.start : k.span.end].decode("utf-8", "replace") for k in parse(data).kernels}


def _project_refusals(path: str) -> tuple[str, list[RefusedOption]] | None:
    """(the config file, its options not passed on) for the document at ``path``; None without a project build."""
    build = project_build(path)
    return None if build is None else (build.origin, refused_options(build))


class Diagnostics:
    def __init__(self, server: WarpForgeServer) -> None:
        self.server = server
        self.docs: dict[str, DocState] = {}
        #: config file -> what was last published on it (``publish_project``)
        self.project_published: dict[str, tuple[str, ...]] = {}

    def state(self, uri: str) -> DocState:
        return self.docs.setdefault(uri, DocState())

    def schedule(self, uri: str, delay: float) -> None:
        st = self.state(uri)
        if st.task is not None and not st.task.done():
            st.task.cancel()
        st.task = asyncio.get_running_loop().create_task(self._run(uri, delay))

    def forget(self, uri: str) -> None:
        st = self.docs.pop(uri, None)
        if st is not None and st.task is not None:
            st.task.cancel()
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        del st
        asyncio.get_running_loop().run_in_executor(self.server.analysis_pool, limits.release_memory)

    def _skip(self, uri: str, path: str, version: int | None, reason: str) -> None:
        """One notice instead of analysis (too big, not text): WF004, not WF002 (a missing toolchain)."""
        st = self.state(uri)
        st.version = version
        st.kernel_texts = {}
        st.report = HintsReport(path, findings=[make("WF004", path, Range(Position(0, 0), Position(0, 0)),
                                                     reason, severity=Severity.INFO)])
        self.publish(uri)

    def _say(self, uri: str, phase: str) -> None:
        """Tell the editor where this document's analysis is (its language status item shows it). A client that
        has gone away is not an error here: the analysis ends the same way."""
        try:
            self.server.protocol.notify(ANALYSIS_NOTIFICATION, wire(AnalysisParams(uri, phase)))
        except Exception:  # the connection is closing
            log.debug("could not send %s for %s", phase, uri)

    async def _run(self, uri: str, delay: float) -> None:
        try:
            await self._run_phases(uri, delay)
        finally:
            self._say(uri, "done")

    async def _run_phases(self, uri: str, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            doc = self.server.workspace.get_text_document(uri)
        except Exception:  # closed meanwhile
            return
        version = doc.version
        text = doc.source
        path = doc.path or uri
        s = self.server.settings
        skip = limits.skip_reason(text, self.server.settings.max_document_bytes)
        if skip is not None:
            self._skip(uri, path, version, skip)
            return
        loop = asyncio.get_running_loop()
        self.publish_project(await loop.run_in_executor(self.server.analysis_pool, _project_refusals, path))
        # Two phases: source-pattern hints in tens of milliseconds, then the compiler and SASS evidence
        # (nvcc + nvdisasm cost ~0.5 s even for one changed kernel). Each phase publishes only if the
        # document is still the text it analyzed. Restricted Mode stops after the first.
        phases = (False, True) if self.server.trust.trusted else (False,)
        self.server.trust.notice(self.server)

        def analyze(use_compiler: bool) -> tuple[HintsReport, dict[str, str], frozenset[Path]] | None:
            install_why_not()  # WF113 asks the rules, which sit above the analyzers' package
            report = analyze_source(path, text, arch=s.arch or None, nvcc=s.nvcc_path or None,
                                    use_compiler=use_compiler)
            kernel_texts = _kernel_texts(text)
            headers = frozenset(reached_headers(text, path)) if use_compiler else frozenset()
            if uri not in self.docs:
                # Closed while this ran (a running analysis cannot be abandoned): give its memory back now,
                # the release at close came too early for it.
                del report
                limits.release_memory()
                return None
            return report, kernel_texts, headers

        for use_compiler in phases:
            self._say(uri, "compiler" if use_compiler else "source")
            try:
                result = await loop.run_in_executor(self.server.analysis_pool, analyze, use_compiler)
            except Exception as e:
                log.exception("analysis of %s failed", uri)
                self.server.window_log_message(lsp.LogMessageParams(
                    lsp.MessageType.Error, f"WarpForge: analysis of {path} failed: {e}"))
                return
            if result is None:
                return  # closed meanwhile
            report, kernel_texts, headers = result
            try:
                current = self.server.workspace.get_text_document(uri)
            except Exception:
                return
            if current.version != version or current.source != text:
                return  # stale: a newer run is scheduled
            st = self.state(uri)
            if not use_compiler and st.report is not None and not st.build_changed:
                # Until phase two lands, keep the compiler/SASS findings of kernels whose text is unchanged
                # (no flicker); those of edited kernels are dropped, they may point at moved lines. Not when
                # the build changed under the document: a header now found must not stay an error until nvcc
                # has run again (cmake writing compile_commands.json showed WF000 again after it had cleared).
                report.findings.extend(
                    f for f in st.report.findings
                    if f.source in ("compiler", "sass") and f.kernel is not None
                    and st.kernel_texts.get(f.kernel) == kernel_texts.get(f.kernel))
                report.findings.sort(key=Finding.sort_key)
            st.kernel_texts = kernel_texts
            st.version = version
            st.report = report
            if use_compiler:
                st.headers = headers
                st.build_changed = False
            self.publish(uri)
            if use_compiler:
                self._log_build(path, report)

    def _log_build(self, path: str, report: HintsReport) -> None:
        """nvcc's own output for this analysis in the Output channel (window/logMessage), when it had any."""
        for log_text in report.logs:
            self.server.window_log_message(lsp.LogMessageParams(lsp.MessageType.Log,
                                                                f"WarpForge: nvcc for {path}:\n{log_text}"))

    def dependents(self, paths: Iterable[str]) -> list[str]:
        """The open documents that reach one of ``paths`` through their includes."""
        wanted: set[Path] = set()
        for p in paths:
            try:
                wanted.add(Path(p).resolve())
            except (OSError, ValueError):
                continue
        return [uri for uri, st in self.docs.items() if st.headers & wanted]

    def refresh(self, uris: Iterable[str]) -> None:
        """Analyze these documents again now (a header or the project's build changed under them)."""
        for uri in uris:
            if uri in self.docs:
                self.docs[uri].build_changed = True
                self.schedule(uri, 0.0)

    def findings(self, uri: str) -> list[Finding]:
        st = self.docs.get(uri)
        if st is None or st.report is None:
            return []
        out = list(st.report.findings)
        # The kernel texts of the last analysis stand for the document (no parse here: this runs on the loop).
        for name, (ktext, prof) in list(st.profiled.items()):
            if st.kernel_texts.get(name) != ktext:
                del st.profiled[name]  # the kernel changed: its profile no longer describes it
                continue
            out = [f for f in out if f.kernel != name or f.code.startswith("WF0")] + prof
        return out

    def shown(self, uri: str) -> list[Finding]:
        """The findings the user sees: those the settings do not filter out (``warpforge.hints.exclude``,
        ``warpforge.hints.minSeverity``, the severity ranked by estimated gain). Jobs still get every finding."""
        s = self.server.settings
        return [f for f in self.findings(uri) if s.shows(f.code, ranked_severity(f).value)]

    def publish(self, uri: str) -> None:
        st = self.docs.get(uri)
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri=uri, version=st.version if st else None,
            diagnostics=[diagnostic(f, uri) for f in self.shown(uri)]))

    def publish_project(self, got: tuple[str, list[RefusedOption]] | None) -> None:
        """The project build's options not passed on to nvcc, as warnings on the file that writes them
        (``warpforge.toml`` / ``compile_commands.json``, at the option's line); sent when they change."""
        if got is None:
            return
        origin, refused = got
        # The whole line that writes the option (the client clamps the end column to the line).
        diags = [lsp.Diagnostic(range=lsp.Range(lsp.Position(max(r.line - 1, 0), 0),
                                                lsp.Position(max(r.line - 1, 0), 10_000)),
                                message=f"`{r.option}` is not passed on to nvcc: {r.why}",
                                severity=lsp.DiagnosticSeverity.Warning, source="warpforge") for r in refused]
        key = tuple(d.message + str(d.range.start.line) for d in diags)
        if self.project_published.get(origin) == key:
            return
        self.project_published[origin] = key
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri=Path(origin).as_uri(), diagnostics=diags))

    def set_profiled(self, uri: str, kernel: str, kernel_text: str, findings: list[Finding]) -> None:
        self.state(uri).profiled[kernel] = (kernel_text, findings)
        self.publish(uri)


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: WarpForgeServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.diagnostics.schedule(params.text_document.uri, 0.0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: WarpForgeServer, params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.diagnostics.schedule(uri, 0.0)
        # A saved header changes what its includers compile (nvcc reads it from disk): analyze them again.
        path = to_fs_path(uri)
        if path:
            ls.diagnostics.refresh(u for u in ls.diagnostics.dependents([path]) if u != uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: WarpForgeServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        """The editor's file watcher: a header changed on disk (another editor, git, a build) refreshes the
        documents that include it; ``warpforge.toml`` or a ``compile_commands.json`` refreshes them all."""
        paths = [p for c in params.changes if (p := to_fs_path(c.uri))]
        if any(Path(p).name in ("warpforge.toml", "compile_commands.json") for p in paths):
            ls.diagnostics.refresh(list(ls.diagnostics.docs))
        else:
            ls.diagnostics.refresh(ls.diagnostics.dependents(paths))

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: WarpForgeServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.diagnostics.schedule(params.text_document.uri, ls.settings.debounce)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: WarpForgeServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.diagnostics.forget(params.text_document.uri)
