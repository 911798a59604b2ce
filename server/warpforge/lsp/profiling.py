"""Profile jobs in the language server: Nsight Compute on the kernel, findings that replace the static ones.

A profile runs on a snapshot of the document in the server's thread pool (ncu is a subprocess that takes
seconds). When it finishes, its measured findings replace that kernel's static ones in the editor until
the kernel's text changes, and ``warpforge/jobDone`` carries the bottleneck class. Without a GPU or ncu
the job still ends with the static findings and one notice saying what is missing. Cancelling stops the
progress at once and discards the result (ncu itself is not interrupted: it is one launch).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..profile.findings import Finding
from ..profile.profiler import ProfileReport, profile_kernel

if TYPE_CHECKING:
    from .server import WarpForgeServer

log = logging.getLogger(__name__)


@dataclass
class ProfileJob:
    id: str
    uri: str
    kernel: str
    token: str
    snapshot: str
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    state: str = "running"
    report: ProfileReport | None = None
    message: str = ""


class ProfileJobs:
    def __init__(self, server: WarpForgeServer, jobs_error: type[Exception]) -> None:
        self.server = server
        self.jobs: dict[str, ProfileJob] = {}
        self._ids = itertools.count(1)
        self._error = jobs_error

    def running_for(self, uri: str, kernel: str) -> ProfileJob | None:
        return next((j for j in self.jobs.values() if j.uri == uri and j.kernel == kernel and j.state == "running"),
                    None)

    def cancel(self, job_id: str) -> bool:
        job = self.jobs.get(job_id)
        if job is None:
            return False
        job.cancel.set()
        return True

    def cancel_token(self, token: Any) -> None:
        for j in self.jobs.values():
            if j.token == token:
                j.cancel.set()

    async def start(self, uri: str, kernel: str) -> ProfileJob:
        try:
            doc = self.server.workspace.get_text_document(uri)
            text = doc.source
        except Exception as e:
            raise self._error(f"document {uri} is not open") from e
        parse(text).require(kernel, doc.path or uri)
        if (running := self.running_for(uri, kernel)) is not None:
            raise self._error(f"`{kernel}` is already being profiled ({running.id})")
        job = ProfileJob(f"profile-{next(self._ids)}", uri, kernel, f"wfprofile-{os.getpid()}-{id(text)}",
                         text)
        self.jobs[job.id] = job
        asyncio.get_running_loop().create_task(self._run(job, doc.path or uri))
        return job

    async def _run(self, job: ProfileJob, path: str) -> None:
        s = self.server.settings
        progress = False
        caps = self.server.client_capabilities
        if caps.window and caps.window.work_done_progress:
            try:
                await self.server.work_done_progress.create_async(job.token)
                self.server.work_done_progress.begin(job.token, lsp.WorkDoneProgressBegin(
                    title=f"Profiling {job.kernel}", message="Nsight Compute on one launch", cancellable=True))
                progress = True
            except Exception:
                progress = False
        loop = asyncio.get_running_loop()
        work: asyncio.Future[Any] = loop.run_in_executor(self.server.thread_pool, lambda: profile_kernel(
            path, job.kernel, text=job.snapshot, arch=s.arch or None, nvcc=s.nvcc_path or None))
        cancelled: asyncio.Future[Any] = asyncio.ensure_future(job.cancel.wait())
        try:
            done, _ = await asyncio.wait([work, cancelled], return_when=asyncio.FIRST_COMPLETED)
            if cancelled in done:
                job.state, job.message = "cancelled", "cancelled"
            else:
                result: ProfileReport = work.result()
                job.report = result
                job.state = "done"
                job.message = f"{result.cls} ({job.kernel})" if result.cls else result.notice or "profiled"
                self._show(job, result)
        except Exception as e:
            log.exception("profile job %s failed", job.id)
            job.state, job.message = "failed", f"{type(e).__name__}: {e}"
        finally:
            cancelled.cancel()
            if progress:
                self.server.work_done_progress.end(job.token, lsp.WorkDoneProgressEnd(message=job.message))
            final = job.report
            self.server.protocol.notify("warpforge/jobDone", {
                "job": job.id, "kind": "profile", "uri": job.uri, "kernel": job.kernel, "state": job.state,
                "outcome": job.state, "message": job.message,
                "class": final.cls if final is not None else None,
                "notice": final.notice if final is not None else None,
                "findings": len(final.findings) if final is not None else 0,
            })

    def _show(self, job: ProfileJob, report: ProfileReport) -> None:
        show_profile(self.server, job.uri, job.kernel, job.snapshot, report)


def show_profile(server: WarpForgeServer, uri: str, kernel: str, snapshot: str, report: ProfileReport) -> list[Finding]:
    """Measured findings replace the kernel's static ones while its text is what was profiled.

    Shared by profile jobs and the profile step of optimize jobs; returns the findings shown (compiler
    findings are not among them: they stay live with the document).
    """
    measured = [f for f in report.findings if f.kernel in (None, kernel) and not f.code.startswith("WF0")]
    src = SourceText(snapshot)
    k = parse(src.data).kernel(kernel)
    if k is not None:
        server.diagnostics.set_profiled(uri, kernel, src.slice(k.span), measured)
    return measured
