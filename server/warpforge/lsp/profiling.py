"""Profile jobs in the language server: ``app.ProfileJob`` with an editor life (``jobs.JobManager``).

When a profile finishes, its measured findings replace that kernel's static ones in the editor until the
kernel's text changes, and ``warpforge/jobDone`` (kind "profile") carries the bottleneck class. Without a
GPU or ncu the job still ends with the static findings and one notice saying what is missing. Cancelling
stops the progress at once and discards the result. A complete profile is kept in the workspace store, where
the next optimize job on the same kernel, spec, build and GPU reuses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..app import JobEvent, JobFailed, JobFinished, Profiled, ProfileJob, ProfileSettings
from ..store import Store, StoreError
from .jobs import EditorJob, JobManager, show_profile
from .protocol import JobDoneParams


class ProfileJobs(JobManager[ProfileJob]):
    id_prefix = "profile"
    #: not the optimize prefix: the client shows these with the standard progress UI
    token_prefix = "wfprofile-"
    doing = "profiled"

    async def start(self, uri: str, kernel: str) -> EditorJob[ProfileJob]:
        """Start profiling; JobError (the message is for the user) when it cannot start."""
        prepared, version = await self.snapshot(uri, kernel)
        s = self.server.settings

        def make(cancel: asyncio.Event, on_event: Callable[[JobEvent], None]) -> ProfileJob:
            return ProfileJob(prepared, ProfileSettings(arch=s.arch or None, nvcc=s.nvcc_path or None),
                              on_event=on_event, pool=self.server.thread_pool, cancel=cancel, store=self._store())

        return self.launch(uri, version, make, f"Profiling {kernel}")

    def _store(self) -> Store | None:
        """The workspace's store (the one optimize jobs use), where a complete profile is kept for their reuse;
        None when it cannot be opened (the profile is shown all the same)."""
        root = self.server.workspace.root_path if self.server.workspace else None
        try:
            return Store.for_workspace(root or None, self.server.settings.store_path or None)
        except StoreError:
            return None

    def _first_message(self, job: EditorJob[ProfileJob]) -> str:
        return "Nsight Compute on one launch"

    def _profiled(self, job: EditorJob[ProfileJob], event: Profiled) -> None:
        # A profile job's findings always stand for the kernel, the notice saying what was missing included.
        show_profile(self.server, job.uri, job.prepared, list(event.findings))

    def _done_params(self, job: EditorJob[ProfileJob], event: JobFinished | JobFailed) -> JobDoneParams:
        base = super()._done_params(job, event)
        report = job.work.report
        return JobDoneParams(job=base.job, kind=base.kind, uri=base.uri, kernel=base.kernel, state=base.state,
                             outcome=base.outcome, message=base.message, candidate=None, speedup=None,
                             evaluations=0, cls=report.cls if report is not None else None,
                             notice=report.notice if report is not None else None,
                             findings=len(report.findings) if report is not None else 0)
