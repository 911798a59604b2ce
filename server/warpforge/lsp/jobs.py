"""Jobs in the language server: the lifecycle every job shares, and optimize jobs with accept and reject.

The work itself is ``app.OptimizeJob`` / ``app.ProfileJob``, the same jobs the CLI runs; this module only
gives them an editor life. ``JobManager`` is that life for both kinds: an id, a snapshot of the document
(the user keeps editing; one job per kernel and kind at a time), work-done progress, cancel by id or by
progress token, the job's events rendered as typed notifications (``protocol``), and ``warpforge/jobDone``
at the end. ``OptimizeJobs`` adds what only optimize jobs have: ``warpforge/candidate`` for each newly
verified faster variant, the search tree, View, Accept (``workspace/applyEdit``, only while the kernel's
text is what the job optimized; the server itself never writes files) and Reject.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from lsprotocol import types as lsp

from ..app import (
    CandidateFound,
    JobError,
    JobEvent,
    JobFailed,
    JobFinished,
    OptimizeJob,
    OptimizeSettings,
    PreparedKernel,
    Profiled,
    ProfileJob,
    Progress,
)
from ..app.backend import BackendChoice, make_evaluator
from ..app.backend import evaluator_factory as _evaluator_factory
from ..profile.findings import Finding
from ..profile.limit import Limit
from ..search.memory import SearchMemory, kernel_key
from ..search.optimize import WorkspaceChange, build_change
from ..search.tree import Node
from ..store import Store, StoreError
from . import hunks as diff_hunks
from . import protocol as wire_types
from .protocol import (
    AcceptResult,
    CandidateParams,
    CandidateTexts,
    JobDoneParams,
    RejectResult,
    SearchTree,
    wire,
)

if TYPE_CHECKING:
    from .server import WarpForgeServer

log = logging.getLogger(__name__)

__all__ = ["EditorJob", "JobError", "JobManager", "OptimizeJobs", "_evaluator_factory", "backend_name",
           "line_edits", "show_profile", "wire_limit"]

W = TypeVar("W", OptimizeJob, ProfileJob)


def backend_name(settings: Any) -> str:
    """The evaluation backend a job uses: the ``evaluationBackend`` setting, except that a ``rayAddress``
    with the default backend means Ray (the address is what a user sets to use a cluster)."""
    name = str(settings.backend or "local")
    if name == "local" and settings.ray_address:
        return "ray"
    return name


def line_edits(old: str, new: str) -> list[lsp.TextEdit]:
    """Minimal line-based edits turning ``old`` into ``new`` (undoable as one step in the editor)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    edits: list[lsp.TextEdit] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        start = lsp.Position(i1, 0)
        end = lsp.Position(i2, 0)
        if i2 == len(a) and a and not a[-1].endswith("\n"):
            end = lsp.Position(i2 - 1, len(a[-1].encode("utf-16-le")) // 2)
        edits.append(lsp.TextEdit(lsp.Range(start, end), "".join(b[j1:j2])))
    return edits


def wire_limit(limit: Limit | None) -> wire_types.PhysicalLimit | None:
    """A job's ``Limit`` as the protocol sends it."""
    if limit is None:
        return None
    return wire_types.PhysicalLimit(limit.text(), limit.bound, limit.pct_limit, limit.pct_copy_bw, limit.floor_ms)


def show_profile(server: WarpForgeServer, uri: str, prepared: PreparedKernel, findings: list[Finding]) -> None:
    """Measured findings replace the kernel's static ones while its text is what was profiled (profile jobs
    and the baseline profile of optimize jobs alike)."""
    server.diagnostics.set_profiled(uri, prepared.kernel.name, prepared.kernel_text, findings)


@dataclass
class EditorJob(Generic[W]):
    """A job as the editor knows it: the app job, where it came from, and its progress token."""

    id: str
    uri: str
    token: str
    work: W
    version: int | None = None
    progress: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "optimize" if isinstance(self.work, OptimizeJob) else "profile"

    @property
    def kernel(self) -> str:
        return self.work.kernel

    @property
    def prepared(self) -> PreparedKernel:
        return self.work.prepared

    @property
    def state(self) -> str:
        return self.work.state

    @property
    def message(self) -> str:
        return self.work.message


class JobManager(Generic[W]):
    """The lifecycle every editor job shares (see the module docstring); subclasses say what a job is."""

    #: job ids are ``{prefix}-N``
    id_prefix = "job"
    #: progress tokens are ``{token_prefix}{pid}-N`` (the client routes optimize progress by its prefix)
    token_prefix = wire_types.JOB_TOKEN_PREFIX
    #: "optimized" / "profiled", for the message refusing a second job on one kernel
    doing = "processed"

    def __init__(self, server: WarpForgeServer) -> None:
        self.server = server
        self.jobs: dict[str, EditorJob[W]] = {}
        self._ids = itertools.count(1)

    # ----------------------------------------------------------------- queries
    def get(self, job_id: str) -> EditorJob[W]:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobError(f"no job `{job_id}`")
        return job

    def running_for(self, uri: str, kernel: str) -> EditorJob[W] | None:
        return next((j for j in self.jobs.values() if j.uri == uri and j.kernel == kernel and j.state == "running"),
                    None)

    # ----------------------------------------------------------------- start / cancel
    async def snapshot(self, uri: str, kernel: str) -> tuple[PreparedKernel, int | None]:
        """The open document's text, parsed once, with the kernel's spec and its launch sites in the workspace:
        what the job will work on. The parse and the workspace scan run off the event loop (a large workspace
        must not hold up hovers and diagnostics); the text and the open buffers are read on it."""
        try:
            doc = self.server.workspace.get_text_document(uri)
            text, path, version = doc.source, doc.path, doc.version
        except Exception as e:
            raise JobError(f"document {uri} is not open") from e
        if (running := self.running_for(uri, kernel)) is not None:
            raise JobError(self._busy(kernel, running))
        overlay = self._overlay()
        prepared = await self.server.off_loop(
            lambda: self.with_launch_sites(PreparedKernel.from_text(path or uri, text, kernel), path, overlay))
        # checked again: another start of the same kernel may have registered while this one scanned
        if (running := self.running_for(uri, kernel)) is not None:
            raise JobError(self._busy(kernel, running))
        return prepared, version

    def _overlay(self) -> dict[Path, str]:
        """The editor's open buffers by file (read on the event loop, where the workspace changes)."""
        return {Path(d.path): d.source for d in list(self.server.workspace.text_documents.values())
                if d.path and d.uri.startswith("file://")}

    def workspace_root(self, path: str | None) -> Path | None:
        """The workspace folder holding ``path`` (see ``WarpForgeServer.workspace_root``)."""
        return self.server.workspace_root(path)

    def with_launch_sites(self, prepared: PreparedKernel, path: str | None,
                          overlay: dict[Path, str]) -> PreparedKernel:
        """``prepared`` with the kernel's launches in the other files of its workspace folder, read from the
        editor's buffers where they are open (``overlay``, ``_overlay``; ``cuda.workspace``). Blocking: the
        callers run it off the event loop."""
        root = self.workspace_root(path)
        if root is None or not path:
            return prepared
        try:
            found = prepared.with_workspace(root, overlay)
        except OSError as e:
            log.info("launch sites of %s not searched: %s", prepared.kernel.name, e)
            return prepared
        for why in found.skipped:
            log.info("launch sites of %s: %s", prepared.kernel.name, why)
        return found

    def _busy(self, kernel: str, running: EditorJob[W]) -> str:
        return f"`{kernel}` is already being {self.doing} ({running.id})"

    def launch(self, uri: str, version: int | None, make: Callable[[asyncio.Event, Callable[[JobEvent], None]], W],
               title: str) -> EditorJob[W]:
        """Register a job and run it as a task: progress begins, the job's events are rendered, jobDone ends."""
        n = next(self._ids)
        cancel = asyncio.Event()
        holder: list[EditorJob[W]] = []
        work = make(cancel, lambda event: self._render(holder[0], event))
        job = EditorJob(f"{self.id_prefix}-{n}", uri, f"{self.token_prefix}{os.getpid()}-{n}", work, version)
        holder.append(job)
        self.jobs[job.id] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job, title))
        return job

    def cancel(self, job_id: str) -> bool:
        """Ask a job to stop (False: no such job here)."""
        job = self.jobs.get(job_id)
        if job is None:
            return False
        job.work.cancel.set()
        return True

    def cancel_token(self, token: Any) -> None:
        for j in self.jobs.values():
            if j.token == token:
                j.work.cancel.set()

    async def _run(self, job: EditorJob[W], title: str) -> None:
        job.progress = await self._progress_begin(job, title)
        # A failure or a cancellation was said by the job's last event, rendered already.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await job.work.run()

    async def _progress_begin(self, job: EditorJob[W], title: str) -> bool:
        caps = self.server.client_capabilities
        if not (caps.window and caps.window.work_done_progress):
            return False
        try:
            await self.server.work_done_progress.create_async(job.token)
        except Exception:
            return False
        self.server.work_done_progress.begin(job.token, lsp.WorkDoneProgressBegin(
            title=title, message=self._first_message(job), cancellable=True, percentage=self._first_percentage()))
        return True

    def _first_message(self, job: EditorJob[W]) -> str:
        return ""

    def _first_percentage(self) -> int | None:
        return None

    # ----------------------------------------------------------------- events
    def _render(self, job: EditorJob[W], event: JobEvent) -> None:
        if isinstance(event, Progress) and job.progress:
            self.server.work_done_progress.report(job.token, lsp.WorkDoneProgressReport(
                message=event.message, percentage=event.percentage, cancellable=True))
        elif isinstance(event, Profiled):
            self._profiled(job, event)
        elif isinstance(event, CandidateFound):
            self._candidate(job, event)
        elif isinstance(event, JobFinished | JobFailed):
            if job.progress:
                self.server.work_done_progress.end(job.token, lsp.WorkDoneProgressEnd(message=event.message))
            self.server.protocol.notify(wire_types.JOB_DONE_NOTIFICATION, wire(self._done_params(job, event)))
            self.server.lenses_changed()

    def _profiled(self, job: EditorJob[W], event: Profiled) -> None:
        if event.findings:
            show_profile(self.server, job.uri, job.prepared, list(event.findings))

    def _candidate(self, job: EditorJob[W], event: CandidateFound) -> None:
        return None

    def _done_params(self, job: EditorJob[W], event: JobFinished | JobFailed) -> JobDoneParams:
        state = event.state if isinstance(event, JobFinished) else "failed"
        return JobDoneParams(job=job.id, kind=job.kind, uri=job.uri, kernel=job.kernel, state=state, outcome=state,
                             message=event.message, candidate=None, speedup=None, evaluations=0)


class OptimizeJobs(JobManager[OptimizeJob]):
    id_prefix = "job"
    doing = "optimized"

    def __init__(self, server: WarpForgeServer) -> None:
        super().__init__(server)
        #: job id -> the fastest of its variants the user rejected (a variant no faster is the "next best")
        self.rejected: dict[str, float] = {}
        #: job id -> whether the user accepted a variant (or some of its hunks): the result is acted on
        self.accepted: set[str] = set()

    def _busy(self, kernel: str, running: EditorJob[OptimizeJob]) -> str:
        return f"`{kernel}` is already being optimized (job {running.id}); cancel it first"

    def _memory(self) -> SearchMemory | None:
        root = self.server.workspace.root_path if self.server.workspace else None
        try:
            return SearchMemory(Store.for_workspace(root or None, self.server.settings.store_path or None))
        except StoreError:
            return None

    async def start(self, uri: str, kernel: str, strategy: str) -> EditorJob[OptimizeJob]:
        """Start optimizing; JobError (the message is for the user) when it cannot start."""
        if strategy not in ("beam", "mcts"):
            raise JobError(f"unknown strategy `{strategy}`: use beam or mcts")
        prepared, version = await self.snapshot(uri, kernel)
        s = self.server.settings
        name = backend_name(s)
        root = self.server.workspace.root_path if self.server.workspace else None
        choice = BackendChoice(name, ray_address=s.ray_address or None, workspace=root, store=s.store_path or None)
        _evaluator_factory(name)  # an unknown backend is refused now, not as a failed job

        def make(cancel: asyncio.Event, on_event: Callable[[JobEvent], None]) -> OptimizeJob:
            work = OptimizeJob(
                prepared, OptimizeSettings(strategy, s.budget, s.time_budget, arch=s.arch or None,
                                           api_key=s.api_key or None, model=s.model or None,
                                           nvcc=s.nvcc_path or None, profile_baseline=not choice.plugin,
                                           keep_launch=s.keep_launch),
                lambda req: make_evaluator(choice, req),
                findings=[f for f in self.server.diagnostics.findings(uri) if f.kernel == kernel],
                memory=self._memory(), on_event=on_event, pool=self.server.thread_pool, cancel=cancel)
            try:
                work.start_evaluator()
            except JobError:
                raise
            except Exception as e:
                raise JobError(f"cannot start the evaluator: {e}") from e
            return work

        return self.launch(uri, version, make, f"Optimizing {kernel}")

    def _first_message(self, job: EditorJob[OptimizeJob]) -> str:
        return f"{job.work.settings.strategy} search: measuring the baseline"

    def _first_percentage(self) -> int | None:
        return 0

    def _profiled(self, job: EditorJob[OptimizeJob], event: Profiled) -> None:
        super()._profiled(job, event)
        for notice in ([event.report.notice] if event.report.notice and not event.findings else []):
            log.info("%s: baseline not profiled: %s", job.id, notice)

    def _candidate(self, job: EditorJob[OptimizeJob], event: CandidateFound) -> None:
        node, ev = event.node, event.evidence
        self.server.protocol.notify(wire_types.CANDIDATE_NOTIFICATION, wire(CandidateParams(
            job=job.id, uri=job.uri, kernel=job.kernel, candidate=node.candidate.hash, speedup=event.speedup,
            spread=ev.spread, gpu=job.work.gpu, family=node.candidate.family, families=list(node.families),
            rationale=node.candidate.rationale, diff=event.diff, evidence=wire_types.Evidence(
                headline=ev.headline, checked=ev.checked, seeds=ev.seeds, sizes=list(ev.sizes) or None,
                interval=list(ev.interval) if ev.interval is not None else None, hot=ev.hot),
            limit=wire_limit(event.limit), launch_changes=list(event.launch_changes) or None,
            needs_launch_change=event.needs_launch_change or None)))

    def _done_params(self, job: EditorJob[OptimizeJob], event: JobFinished | JobFailed) -> JobDoneParams:
        base = super()._done_params(job, event)
        outcome = job.work.outcome
        best = outcome.result.best if outcome is not None and outcome.result.improved else None
        return JobDoneParams(job=base.job, kind=base.kind, uri=base.uri, kernel=base.kernel, state=base.state,
                             outcome="improved" if best is not None else base.state, message=base.message,
                             candidate=best.candidate.hash if best is not None else None,
                             speedup=best.speedup if best is not None else None,
                             evaluations=outcome.result.evaluations if outcome is not None else 0,
                             stopped=outcome.result.stopped if outcome is not None else None,
                             limit=wire_limit(event.limit) if isinstance(event, JobFinished) else None,
                             withdrawn=[wire_types.Withdrawn(c, why) for c, why in event.withdrawn] or None
                             if isinstance(event, JobFinished) else None,
                             hot=event.hot if isinstance(event, JobFinished) else None)

    # ----------------------------------------------------------------- tree / view / accept / reject
    def node(self, job_id: str, candidate: str) -> tuple[EditorJob[OptimizeJob], Node]:
        job = self.get(job_id)
        node = job.work.node(candidate)
        if node is None:
            raise JobError(f"job {job_id} has no candidate `{candidate}`")
        return job, node

    def tree(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        work = job.work
        if work.outcome is not None:
            data = work.outcome.result.to_json()
        elif work.search is not None and work.search.root is not None:
            data = {"strategy": work.settings.strategy, "nodes": [n.to_json() for n in work.search.root.walk()],
                    "history": [{"evaluations": n, "best_speedup": s} for n, s in work.search.history]}
        else:
            data = {"strategy": work.settings.strategy, "nodes": [], "history": []}
        return wire(SearchTree.from_json(data, job=job.id, kernel=job.kernel, uri=job.uri, state=job.state,  # type: ignore[no-any-return]
                                         message=job.message))

    async def show_candidate(self, job_id: str, candidate: str) -> dict[str, Any]:
        """The whole file as the job saw it and with the candidate applied (for the diff editor), and the hunks
        between them (each can be accepted alone)."""
        job, node = self.node(job_id, candidate)
        variant = await self.server.off_loop(lambda: job.prepared.variant(node.candidate))
        return wire(CandidateTexts(  # type: ignore[no-any-return]
            job=job.id, candidate=node.candidate.hash, uri=job.uri, kernel=job.kernel, speedup=node.speedup,
            family=node.candidate.family, status=node.status, original=job.prepared.text, variant=variant,
            hunks=[wire_types.DiffHunk(h.index, h.old_start, h.old_end, h.new_start, h.new_end)
                   for h in diff_hunks.hunks(job.prepared.text, variant)]))

    async def accept(self, job_id: str, candidate: str) -> dict[str, Any]:
        job, node = self.node(job_id, candidate)
        if not node.verified:
            raise JobError(f"job {job_id} has no verified candidate `{candidate}`" + (
                " (its checks stopped after the first run: it was clearly slower than the best)" if node.ok else ""))
        try:
            doc = self.server.workspace.get_text_document(job.uri)
            current = doc.source
        except Exception as e:
            raise JobError(f"{job.uri} is not open") from e
        now = job.prepared.rebased(current)  # JobError when the kernel changed meanwhile
        # The launch sites as they are now (the user may have edited a launcher since the job started).
        overlay = self._overlay()
        now = await self.server.off_loop(lambda: self.with_launch_sites(now, doc.path, overlay))
        change = await self.server.off_loop(lambda: now.workspace_change(node.candidate))
        build = build_change(node.candidate)
        result = await self.server.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            label=f"WarpForge: {node.speedup:.2f}× faster {job.kernel}" + (f" — {build}" if build else ""),
            edit=lsp.WorkspaceEdit(document_changes=self.document_changes(job.uri, doc.version, change))))
        applied = bool(result.applied) if result is not None else False
        if applied:
            self._acted_on(job)
        manual = [c.message(change.root) for c in change.manual]
        done = [c.message(change.root) for c in change.changes if c.mechanical]
        for line in manual:
            log.warning("%s: %s", job.id, line)
        return wire(AcceptResult(applied, getattr(result, "failure_reason", None),  # type: ignore[no-any-return]
                                 launch_changes=done or None, needs_launch_change=manual or None,
                                 notice=build if applied else None))

    def document_changes(self, uri: str, version: int | None, change: WorkspaceChange) -> list[
            lsp.TextDocumentEdit | lsp.CreateFile | lsp.RenameFile | lsp.DeleteFile]:
        """One ``TextDocumentEdit`` per file the accepted variant changes: the kernel's document (at the
        version the edit was computed on), then every other file whose launches are rewritten (versioned
        when open in the editor, else unversioned: its text was read from disk)."""
        out: list[lsp.TextDocumentEdit | lsp.CreateFile | lsp.RenameFile | lsp.DeleteFile] = [
            lsp.TextDocumentEdit(text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                                 edits=list(line_edits(change.old_text, change.new_text)))]
        open_docs = {Path(d.path).resolve(): d for d in self.server.workspace.text_documents.values() if d.path}
        for path, (old, new) in sorted(change.files.items()):
            doc = open_docs.get(path.resolve())
            out.append(lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                    uri=doc.uri if doc is not None else path.as_uri(),
                    version=doc.version if doc is not None else None),
                edits=list(line_edits(old, new))))
        return out

    def _acted_on(self, job: EditorJob[OptimizeJob]) -> None:
        """The user took (part of) a variant: the variants of every job on that kernel describe the old text now,
        nothing is "ready" (the editor's status bar drops them too)."""
        for j in self.jobs.values():
            if j.uri == job.uri and j.kernel == job.kernel and j.state != "running":
                j.work.announced.clear()
                self.accepted.add(j.id)
        self.server.lenses_changed()

    async def accept_hunks(self, job_id: str, candidate: str, indices: list[int]) -> dict[str, Any]:
        """Apply only the hunks ``indices`` of the variant's diff (``show_candidate``'s ``hunks``), after checking
        that the document still holds what the diff showed and that the result is still a kernel (``hunks``);
        JobError saying why otherwise. The result is not verified: the editor says so."""
        job, node = self.node(job_id, candidate)
        if not node.verified:
            raise JobError(f"job {job_id} has no verified candidate `{candidate}`" + (
                " (its checks stopped after the first run: it was clearly slower than the best)" if node.ok else ""))
        if not indices or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            raise JobError("warpforge.acceptHunks needs [job, candidate, [hunk index, ...]]")
        try:
            doc = self.server.workspace.get_text_document(job.uri)
            current = doc.source
        except Exception as e:
            raise JobError(f"{job.uri} is not open") from e
        s = self.server.settings
        trusted = self.server.trust.trusted

        def splice() -> str:
            now = job.prepared.rebased(current)  # JobError when the kernel changed meanwhile
            shown = diff_hunks.hunks(job.prepared.text, job.prepared.variant(node.candidate))
            here = diff_hunks.hunks(current, now.variant(node.candidate))
            if any(i < 0 or i >= len(shown) for i in indices):
                raise JobError(f"the variant's diff has {len(shown)} changes; there is no change {max(indices) + 1}")
            if len(here) != len(shown) or any((a.old_text, a.new_text) != (b.old_text, b.new_text)
                                              for a, b in zip(here, shown, strict=True)):
                raise JobError("the file changed since the diff was made; open the variant again to pick changes")
            if (why := diff_hunks.coupled(here, indices)) is not None:
                raise JobError(f"not applied: {why}. Accept the whole variant (or all of its changes)")
            partial = diff_hunks.apply(current, [here[i] for i in sorted(set(indices))])
            why = diff_hunks.check(partial, job.kernel, job.prepared.file, before=current, nvcc=s.nvcc_path or None,
                                   arch=s.arch or None, compile=trusted,
                                   defines={t.name: str(t.values[0]) for t in job.prepared.spec.tunables})
            if why is not None:
                n = len(set(indices))
                raise JobError(f"not applied: with {'this change' if n == 1 else f'these {n} changes'} alone {why}. "
                               "Accept the whole variant, or pick more of its changes")
            return partial

        partial = await self.server.off_loop(splice)
        result = await self.server.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            label=f"WarpForge: part of the {node.speedup:.2f}× variant of {job.kernel}",
            edit=lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=job.uri, version=doc.version),
                edits=list(line_edits(current, partial)))])))
        applied = bool(result.applied) if result is not None else False
        if applied:
            self._acted_on(job)
        return wire(AcceptResult(applied, getattr(result, "failure_reason", None)))  # type: ignore[no-any-return]

    def reject(self, job_id: str, candidate: str) -> dict[str, Any]:
        job, node = self.node(job_id, candidate)
        mem = self._memory()
        if mem is not None:
            key = kernel_key(job.prepared.kernel_text, job.prepared.spec.spec_hash())
            mem.record_rejection(key, node.candidate.family)
        if job.work.announced.pop(node.candidate.hash, None) is not None:
            self.rejected[job.id] = max(self.rejected.get(job.id, 0.0), node.speedup or 0.0)
        self.server.lenses_changed()
        return wire(RejectResult(True))  # type: ignore[no-any-return]

    def last_result(self, uri: str, kernel: str) -> EditorJob[OptimizeJob] | None:
        """The newest finished job of ``kernel`` (its result stays on the lens until the user acts on it)."""
        done = [j for j in self.jobs.values() if j.uri == uri and j.kernel == kernel and j.state != "running"]
        return max(done, key=lambda j: int(j.id.rsplit("-", 1)[-1])) if done else None

    def ready(self, uri: str) -> dict[str, tuple[EditorJob[OptimizeJob], Node]]:
        """kernel -> (job, best announced node) for jobs with a variant still waiting."""
        out: dict[str, tuple[EditorJob[OptimizeJob], Node]] = {}
        for j in self.jobs.values():
            best = j.work.best_announced() if j.uri == uri else None
            if best is not None:
                out[j.kernel] = (j, best)
        return out

