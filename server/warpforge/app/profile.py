"""``ProfileJob``: one kernel profiled (Nsight Compute, else timing, else static findings), for CLI and editor.

The profile runs in a thread (``ncu`` is a subprocess that takes seconds and the timing fallback runs its
own event loop). Cancelling ends the job at once and discards the result; ncu itself is not interrupted:
it is one launch. A complete profile is kept in the workspace store when the job is given one (``store``),
for later optimize jobs on the same kernel to reuse (``profile.reuse``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from ..profile.findings import Finding
from ..profile.ncu import DEFAULT_SECTIONS
from ..profile.profiler import ProfileReport, profile_kernel
from ..profile.reuse import complete, profile_key, remember
from ..store import Store
from .events import JobEvent, JobFailed, JobFinished, JobStarted, OnEvent, Profiled
from .events import ignore as _ignore
from .prepared import PreparedKernel, log_failure

log = logging.getLogger(__name__)


def measured_findings(report: ProfileReport, kernel: str) -> list[Finding]:
    """The findings a profile speaks for about ``kernel`` (compiler findings, WF0xx, are left out: they stay
    live with the document)."""
    return [f for f in report.findings if f.kernel in (None, kernel) and not f.code.startswith("WF0")]


@dataclass(frozen=True)
class ProfileSettings:
    arch: str | None = None
    nvcc: str | None = None
    device: int = 0
    sections: tuple[str, ...] = DEFAULT_SECTIONS
    #: False: classify from timing alone, without Nsight Compute
    use_ncu: bool = True


@dataclass
class ProfileJob:
    """One profile job (see the module docstring). ``run`` once; ``report`` holds the result."""

    prepared: PreparedKernel
    settings: ProfileSettings = field(default_factory=ProfileSettings)
    on_event: OnEvent = _ignore
    pool: Executor | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    #: the workspace store a complete profile is kept in for later optimize jobs (None: not kept)
    store: Store | None = None
    report: ProfileReport | None = field(default=None, init=False)
    state: str = field(default="running", init=False)
    message: str = field(default="", init=False)

    @property
    def kernel(self) -> str:
        return self.prepared.kernel.name

    async def run(self) -> ProfileReport | None:
        """Profile; None when cancelled. Ends with ``JobFinished`` or ``JobFailed`` (then raises again)."""
        self._emit(JobStarted("profile", self.kernel, "Nsight Compute on one launch"))
        work: asyncio.Future[Any] = asyncio.get_running_loop().run_in_executor(self.pool, self._measure)
        cancelled: asyncio.Future[Any] = asyncio.ensure_future(self.cancel.wait())
        final: JobEvent
        error: BaseException | None = None
        try:
            done, _ = await asyncio.wait([work, cancelled], return_when=asyncio.FIRST_COMPLETED)
            if cancelled in done:
                final = JobFinished("cancelled", "cancelled")
            else:
                report = self.report = work.result()
                self._emit(Profiled(report, tuple(measured_findings(report, self.kernel))))
                final = JobFinished("done", f"{report.cls} ({self.kernel})" if report.cls
                                    else report.notice or "profiled")
        except Exception as e:
            log_failure(log, f"profile job for {self.kernel}", e)
            final, error = JobFailed(f"{type(e).__name__}: {e}", e), e
        finally:
            cancelled.cancel()
        self.state = final.state if isinstance(final, JobFinished) else "failed"
        self.message = final.message
        self._emit(final)
        if error is not None:
            raise error
        return self.report

    def _measure(self) -> ProfileReport:
        """Profile now (always: this job is how a user asks for a fresh profile) and keep a complete result in
        the store, so that the next optimize job on the same kernel, spec, build and GPU reuses it instead of
        profiling again (``profile.reuse``). Blocking: runs in the job's executor."""
        s, p = self.settings, self.prepared
        report = profile_kernel(p.file, p.kernel.name, text=p.text, arch=s.arch, nvcc=s.nvcc, device=s.device,
                                sections=s.sections, use_ncu=s.use_ncu, parsed=p.parts())
        if self.store is not None and complete(report):
            try:
                key = profile_key(p.file, p.text, p.parts(), arch=s.arch, nvcc=s.nvcc, device=s.device,
                                  sections=s.sections, max_bytes=None)
            except Exception as e:  # keeping it is an optimization: the profile itself stands
                log_failure(log, f"identifying the profile of {self.kernel}", e)
                key = None
            if key is not None:
                remember(self.store, key, report)
        return report

    def _emit(self, event: JobEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a front end's rendering bug must not lose the profile
            log.exception("rendering %s", type(event).__name__)
