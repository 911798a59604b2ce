"""Optimize jobs in the language server: progress, cancellation, streamed candidates, accept and reject.

A job runs on a snapshot of the document (the user keeps editing); one job per kernel at a time. Each
newly verified faster variant is announced with ``warpforge/candidate``; the end with
``warpforge/jobDone``. Accept applies the variant with ``workspace/applyEdit`` only if the kernel's text
is still what the job optimized (it may have moved: then the edit follows it); the server itself never
writes files.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import inspect
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..policy.llm import policy_for_request
from ..profile.profiler import profile_kernel
from ..search.engine import Budget, SearchEngine, SearchEvent
from ..search.memory import SearchMemory, kernel_key
from ..search.optimize import OptimizeOutcome, OptimizeRequest, apply_candidate, kernel_diff, optimize
from ..search.tree import EvaluatorLike, Node
from ..store import Store, StoreError
from .profiling import show_profile

if TYPE_CHECKING:
    from .server import WarpForgeServer

log = logging.getLogger(__name__)


class JobError(Exception):
    """A request about jobs that cannot be honoured; the message is for the user."""


@dataclass
class Job:
    id: str
    kind: str
    uri: str
    kernel: str
    strategy: str
    token: str
    snapshot: str
    version: int | None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    state: str = "running"  # running | done | cancelled | failed
    message: str = ""
    outcome: OptimizeOutcome | None = None
    search: SearchEngine | None = None
    announced: dict[str, Node] = field(default_factory=dict)
    gpu: str = ""
    evaluator: EvaluatorLike | None = None

    def node(self, candidate: str) -> Node | None:
        if candidate in self.announced:
            return self.announced[candidate]
        root = self.search.root if self.search is not None else None
        if root is None:
            return None
        for n in root.walk():
            if n.candidate.hash == candidate or str(n.id) == candidate:
                return n
        return None


def _evaluator_factory(spec: str) -> Any:
    """Resolve ``python:MODULE:FUNCTION`` (a plug-in evaluator factory) or a built-in one: ``local`` (every
    GPU of this machine) or ``ray`` (the GPUs of a Ray cluster)."""
    if spec.startswith("python:"):
        _, mod, fn = spec.split(":", 2)
        return getattr(importlib.import_module(mod), fn)
    if spec == "local":
        return importlib.import_module("warpforge.gpu.evaluator").evaluator_for_job
    if spec == "ray":
        return importlib.import_module("warpforge.gpu.ray_backend").evaluator_for_job
    raise JobError(f"unknown evaluation backend `{spec}`: use local, ray or python:MODULE:FUNCTION")


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


class Jobs:
    def __init__(self, server: WarpForgeServer) -> None:
        self.server = server
        self.jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)

    # ----------------------------------------------------------------- helpers
    def _memory(self) -> SearchMemory | None:
        root = self.server.workspace.root_path if self.server.workspace else None
        try:
            return SearchMemory(Store.for_workspace(root or None))
        except StoreError:
            return None

    def running_for(self, uri: str, kernel: str) -> Job | None:
        for j in self.jobs.values():
            if j.uri == uri and j.kernel == kernel and j.state == "running":
                return j
        return None

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobError(f"no job `{job_id}`")
        return job

    # ----------------------------------------------------------------- start / cancel
    async def start_optimize(self, uri: str, kernel: str, strategy: str) -> Job:
        if strategy not in ("beam", "mcts"):
            raise JobError(f"unknown strategy `{strategy}`: use beam or mcts")
        try:
            doc = self.server.workspace.get_text_document(uri)
            text = doc.source
        except Exception as e:
            raise JobError(f"document {uri} is not open") from e
        parse(text).require(kernel, doc.path or uri)
        if (running := self.running_for(uri, kernel)) is not None:
            raise JobError(f"`{kernel}` is already being optimized (job {running.id}); cancel it first")
        s = self.server.settings
        req = OptimizeRequest(doc.path or uri, text, kernel, strategy,
                              Budget(max_candidates=s.budget, wall_seconds=s.time_budget),
                              findings=[f for f in self.server.diagnostics.findings(uri) if f.kernel == kernel],
                              arch=s.arch or "sm_90")
        job = Job(f"job-{next(self._ids)}", "optimize", uri, kernel, strategy, f"warpforge-{os.getpid()}-{id(req)}",
                  text, doc.version)
        backend = backend_name(s)
        factory = _evaluator_factory(backend)
        try:
            root = self.server.workspace.root_path if self.server.workspace else None
            if backend == "local":
                job.evaluator = factory(req, workspace=root)
            elif backend == "ray":
                # an empty address starts a private Ray instance on this machine (loopback only)
                job.evaluator = factory(req, workspace=root, address=s.ray_address or None)
            else:
                job.evaluator = factory(req)
        except JobError:
            raise
        except Exception as e:
            raise JobError(f"cannot start the evaluator: {e}") from e
        self.jobs[job.id] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job, req))
        return job

    def cancel(self, job_id: str) -> None:
        job = self.get(job_id)
        job.cancel.set()

    def cancel_token(self, token: Any) -> None:
        for j in self.jobs.values():
            if j.token == token:
                j.cancel.set()

    async def _progress_begin(self, job: Job) -> bool:
        caps = self.server.client_capabilities
        if not (caps.window and caps.window.work_done_progress):
            return False
        try:
            await self.server.work_done_progress.create_async(job.token)
        except Exception:
            return False
        self.server.work_done_progress.begin(job.token, lsp.WorkDoneProgressBegin(
            title=f"Optimizing {job.kernel}", message=f"{job.strategy} search: measuring the baseline",
            cancellable=True, percentage=0))
        return True

    async def _run(self, job: Job, req: OptimizeRequest) -> None:
        progress = await self._progress_begin(job)
        budget = req.budget.max_candidates or 0

        def on_event(ev: SearchEvent) -> None:
            if progress and ev.kind in ("evaluated", "round"):
                msg = f"round {ev.round} · {ev.evaluations} candidates · best {ev.best_speedup:.2f}×"
                pct = min(99, int(100 * ev.evaluations / budget)) if budget else None
                self.server.work_done_progress.report(job.token, lsp.WorkDoneProgressReport(
                    message=msg, percentage=pct, cancellable=True))
            if ev.kind == "improved" and ev.node is not None:
                self._announce(job, ev.node)

        memory = self._memory()

        def on_search(search: SearchEngine) -> None:
            job.search = search

        def on_notice(message: str) -> None:
            self.server.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Info, f"WarpForge: {message}"))

        policy = None
        try:
            assert job.evaluator is not None
            s = self.server.settings
            if not s.backend.startswith("python:"):
                await self._profile_baseline(job, req, progress)
            # The model (when a key is set) proposes structural rewrites, the rules tune: one budget. Without
            # a key the mixed policy says so once and runs the rules alone.
            policy = policy_for_request(req, api_key=s.api_key or None,
                                        settings={"model": s.model} if s.model else None, memory=memory,
                                        on_notice=on_notice, nvcc=s.nvcc_path or None)
            outcome = await optimize(req, job.evaluator, policy=policy, cancel=job.cancel, on_event=on_event,
                                     memory=memory, on_search=on_search)
            job.outcome = outcome
            await policy.reflect(outcome.result)
            r = outcome.result
            if job.cancel.is_set():
                job.state = "cancelled"
            else:
                job.state = "done"
            job.message = (f"{r.best_speedup:.2f}× faster (verified{self._on_gpu(job)})" if r.improved
                           else f"no verified faster variant ({r.stopped})")
        except asyncio.CancelledError:
            job.state = "cancelled"
            job.message = "cancelled"
        except Exception as e:
            log.exception("job %s failed", job.id)
            job.state = "failed"
            job.message = f"{type(e).__name__}: {e}"
        finally:
            if policy is not None:
                try:
                    await policy.aclose()
                except Exception:
                    log.exception("closing the policy of %s", job.id)
            close = getattr(job.evaluator, "aclose", None) or getattr(job.evaluator, "close", None)
            if close is not None:
                try:
                    res = close()
                    if inspect.isawaitable(res):
                        await res
                except Exception:
                    log.exception("closing the evaluator of %s", job.id)
            if progress:
                self.server.work_done_progress.end(job.token, lsp.WorkDoneProgressEnd(message=job.message))
            self._done(job)

    async def _profile_baseline(self, job: Job, req: OptimizeRequest, progress: bool) -> None:
        """Profile the original kernel first: its measured findings replace the static ones in the editor at
        once and guide the search (rules motivated by them go first). Best effort: without ncu or counter
        access the static findings stay and the search goes on."""
        if progress:
            self.server.work_done_progress.report(job.token, lsp.WorkDoneProgressReport(
                message="profiling the original kernel (Nsight Compute)", cancellable=True))
        s = self.server.settings
        loop = asyncio.get_running_loop()
        try:
            report = await loop.run_in_executor(self.server.thread_pool, lambda: profile_kernel(
                req.file, req.kernel, text=req.text, arch=s.arch or None, nvcc=s.nvcc_path or None))
        except Exception:
            log.exception("profiling %s before optimizing", job.kernel)
            return
        if report.profile is None:
            return  # no measurement (no ncu, no permission): keep the static findings
        measured = show_profile(self.server, job.uri, job.kernel, job.snapshot, report)
        req.findings = measured or req.findings

    def _on_gpu(self, job: Job) -> str:
        gpu = job.gpu or str(getattr(job.evaluator, "gpu_name", "") or "")
        return f" on {gpu}" if gpu else ""

    def _evidence(self, node: Node) -> dict[str, Any]:
        """What the editor shows next to a speedup: interval, GPU, what was checked (duck-typed: the local
        engine's Evaluation or a plug-in evaluator's)."""
        ev = node.evaluation
        out: dict[str, Any] = {}
        for attr in ("spread", "gpu", "evidence"):
            v = getattr(ev, attr, None)
            if v is not None:
                out[attr] = v
        headline = getattr(ev, "headline", None)
        if callable(headline):
            out["headline"] = headline()
        timing = getattr(ev, "timing", None)
        sp = getattr(timing, "speedup", None)
        if sp is not None:
            out["spread"] = [sp.low, sp.high]
        correctness = getattr(ev, "correctness", None)
        if correctness is not None and callable(getattr(correctness, "evidence", None)):
            out["checked"] = correctness.evidence()
            out["seeds"] = len(getattr(correctness, "seeds", []) or [])
            out["sizes_checked"] = list(getattr(correctness, "sizes_checked", []) or [])
        return out

    def _announce(self, job: Job, node: Node) -> None:
        if node.parent is None or node.speedup is None:
            return
        text = job.snapshot
        model = parse(text)
        kernel = model.kernel(job.kernel)
        if kernel is None:
            return
        from ..spec.resolve import build_spec

        try:
            spec = build_spec(SourceText(text), model, kernel, job.uri)
        except Exception:
            spec = None
        cid = node.candidate.hash
        job.announced[cid] = node
        ev = self._evidence(node)
        job.gpu = str(ev.get("gpu", job.gpu) or job.gpu)
        self.server.protocol.notify("warpforge/candidate", {
            "job": job.id, "uri": job.uri, "kernel": job.kernel, "candidate": cid, "speedup": node.speedup,
            "spread": ev.get("spread"), "gpu": job.gpu or str(getattr(job.evaluator, "gpu_name", "")),
            "family": node.candidate.family, "families": list(node.families), "rationale": node.candidate.rationale,
            "diff": kernel_diff(job.uri, text, kernel, node.candidate, spec), "evidence": ev,
        })

    def _done(self, job: Job) -> None:
        best = job.outcome.result.best if job.outcome is not None else None
        improved = job.outcome is not None and job.outcome.result.improved
        self.server.protocol.notify("warpforge/jobDone", {
            "job": job.id, "uri": job.uri, "kernel": job.kernel, "state": job.state,
            "outcome": "improved" if improved else job.state, "message": job.message,
            "candidate": best.candidate.hash if improved and best is not None else None,
            "speedup": best.speedup if improved and best is not None else None,
            "evaluations": job.outcome.result.evaluations if job.outcome else 0,
        })
        self.server.lenses_changed()

    # ----------------------------------------------------------------- tree / accept / reject
    def tree(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        if job.outcome is not None:
            data = job.outcome.result.to_json()
        elif job.search is not None and job.search.root is not None:
            data = {"strategy": job.strategy, "nodes": [n.to_json() for n in job.search.root.walk()],
                    "history": [{"evaluations": n, "best_speedup": s} for n, s in job.search.history]}
        else:
            data = {"strategy": job.strategy, "nodes": [], "history": []}
        data.update({"job": job.id, "kernel": job.kernel, "uri": job.uri, "state": job.state, "message": job.message})
        return data

    async def accept(self, job_id: str, candidate: str) -> dict[str, Any]:
        job = self.get(job_id)
        node = job.node(candidate)
        if node is None or not node.ok:
            raise JobError(f"job {job_id} has no verified candidate `{candidate}`")
        try:
            doc = self.server.workspace.get_text_document(job.uri)
        except Exception as e:
            raise JobError(f"{job.uri} is not open") from e
        current = doc.source
        snap_model = parse(job.snapshot)
        snap_kernel = snap_model.kernel(job.kernel)
        cur_model = parse(current)
        cur_kernel = cur_model.kernel(job.kernel)
        if snap_kernel is None or cur_kernel is None:
            raise JobError(f"`{job.kernel}` is no longer in the file; re-run Optimize")
        snap_src, cur_src = SourceText(job.snapshot), SourceText(current)
        if snap_src.slice(snap_kernel.span) != cur_src.slice(cur_kernel.span):
            raise JobError(f"`{job.kernel}` changed since the job started; the variant was verified against the "
                           "old text. Re-run Optimize (or undo your edits) to apply it")
        from ..spec.resolve import build_spec

        try:
            spec = build_spec(cur_src, cur_model, cur_kernel, job.uri)
        except Exception:
            spec = None
        new_text = apply_candidate(current, cur_kernel, node.candidate, spec)
        edits = line_edits(current, new_text)
        result = await self.server.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            label=f"WarpForge: {node.speedup:.2f}× faster {job.kernel}",
            edit=lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=job.uri, version=doc.version),
                edits=list(edits))])))
        applied = bool(result.applied) if result is not None else False
        if applied:
            # the job's variants describe the old text now: nothing is "ready" any more
            job.announced.clear()
            self.server.lenses_changed()
        return {"applied": applied, "reason": getattr(result, "failure_reason", None)}

    def reject(self, job_id: str, candidate: str) -> dict[str, Any]:
        job = self.get(job_id)
        node = job.node(candidate)
        if node is None:
            raise JobError(f"job {job_id} has no candidate `{candidate}`")
        mem = self._memory()
        if mem is not None and job.outcome is not None:
            mem.record_rejection(kernel_key(job.outcome.original_kernel_text, job.outcome.spec.spec_hash()),
                                 node.candidate.family)
        job.announced.pop(node.candidate.hash, None)
        self.server.lenses_changed()
        return {"rejected": True}

    def ready(self, uri: str) -> dict[str, tuple[Job, Node]]:
        """kernel -> (job, best announced node) for finished jobs with a variant still waiting."""
        out: dict[str, tuple[Job, Node]] = {}
        for j in self.jobs.values():
            if j.uri != uri or not j.announced:
                continue
            best = max(j.announced.values(), key=lambda n: n.speedup or 0)
            out[j.kernel] = (j, best)
        return out
