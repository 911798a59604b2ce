"""``PreparedKernel``: a job's snapshot parsed once — source, model, kernel, spec — and what is derived from it.

Before, one optimize job parsed its file and rebuilt the spec about six times (the search, the evaluator,
the original candidate, each announced diff, View, Accept), each time under a different error policy.
A job now makes one ``PreparedKernel`` when it starts and hands it to everything; the one error a user
sees when that fails is ``JobError`` with a message naming the file and the kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..cuda.candidate import Candidate
from ..cuda.model import FileModel, Kernel, KernelNotFound
from ..cuda.parser import file_tree, parse
from ..cuda.text import SourceText
from ..cuda.workspace import SiteFile, find_launches
from ..search.optimize import WorkspaceChange, apply_candidate, apply_workspace, launch_changes
from ..spec.limits import LaunchLimits
from ..spec.model import KernelSpec, SpecError
from ..spec.resolve import build_spec
from .errors import JobError as JobError  # re-exported: callers import it from here


def log_failure(log: logging.Logger, what: str, e: BaseException) -> None:
    """Log a job's failure: one line for what the user can fix (a spec mistake, a kernel that is not there, no
    GPU, no nvcc or ncu: its message says what to do), the traceback only at debug level (the editor's trace
    log: ``warpforge.trace.server`` = verbose). A bug keeps its traceback at info, where it is seen and reported."""
    from ..compiler.nsight import ProfilerUnavailable
    from ..compiler.toolchain import ToolMissing
    from ..gpu.backends import GpuUnavailable  # the gpu package is heavier than the rest of prepared's imports

    if isinstance(e, JobError | SpecError | KernelNotFound | GpuUnavailable | ProfilerUnavailable | ToolMissing):
        log.info("%s failed: %s", what, e)
        log.debug("%s failed", what, exc_info=e)
    else:
        log.info("%s failed", what, exc_info=e)


@dataclass(frozen=True)
class PreparedKernel:
    """One kernel of one snapshot of a file, parsed and with its spec (immutable: jobs share it freely)."""

    file: str
    source: SourceText
    model: FileModel
    kernel: Kernel
    spec: KernelSpec
    #: the other files of the workspace that launch the kernel (``with_workspace``), and the workspace folder
    others: tuple[SiteFile, ...] = ()
    root: Path | None = None
    #: what the workspace scan left out (too large, another kernel of the same name), for the front end's log
    skipped: tuple[str, ...] = ()

    @classmethod
    def from_text(cls, file: str, text: str, kernel: str, limits: LaunchLimits | None = None) -> PreparedKernel:
        """Parse ``text`` and build ``kernel``'s spec; ``JobError`` naming the kernels present, or the spec's
        own message (file, line, what to do), when that cannot be done."""
        src = SourceText(text)
        model = parse(src.data, file_tree(src.data))  # the tree the job's other file-level readers share
        try:
            k = model.require(kernel, file)
        except KernelNotFound as e:
            raise JobError(str(e)) from e
        try:
            spec = build_spec(src, model, k, file, limits) if limits is not None else build_spec(src, model, k, file)
        except SpecError as e:
            raise JobError(str(e)) from e
        return cls(file, src, model, k, spec)

    @property
    def text(self) -> str:
        return self.source.text

    @property
    def kernel_text(self) -> str:
        """The kernel's definition as written (what Accept compares with the current text)."""
        return self.source.slice(self.kernel.span)

    def parts(self) -> tuple[SourceText, FileModel, Kernel, KernelSpec]:
        """What ``search.optimize.prepare`` would build (``OptimizeRequest.prepared``)."""
        return self.source, self.model, self.kernel, self.spec

    def original(self) -> Candidate:
        """The kernel as written: the oracle and the baseline of every search."""
        return Candidate(self.kernel.name, self.kernel_text, family="original", rationale="the kernel as written")

    def with_workspace(self, root: str | Path | None, overlay: Mapping[Path, str] | None = None) -> PreparedKernel:
        """This snapshot with the kernel's launch sites in the other files under ``root`` (``cuda.workspace``:
        bounded, build folders skipped; ``overlay`` holds the editor's unsaved texts). Accepting a variant then
        updates them too, and a variant whose launch cannot be written there is labelled."""
        if root is None:
            return self
        found = find_launches(root, self.kernel.name, overlay=overlay, exclude=self.file)
        return replace(self, others=tuple(found.files), root=found.root, skipped=tuple(found.skipped))

    @property
    def has_launch_sites(self) -> bool:
        """Does any host code (this file's or the workspace's) launch the kernel?"""
        return bool(self.others) or bool(self.model.launches_of(self.kernel.name))

    def variant(self, candidate: Candidate) -> str:
        """The whole file with ``candidate`` in place of the kernel (``HostCodeRefused`` when it may not be)."""
        return apply_candidate(self.text, self.kernel, candidate, self.spec, self.model)

    def workspace_change(self, candidate: Candidate) -> WorkspaceChange:
        """``candidate`` accepted across the workspace: this file, every other file whose launches change,
        and the launch sites that need a change by hand (``search.optimize.apply_workspace``)."""
        return apply_workspace(self.file, self.text, self.kernel, candidate, self.spec, self.model, self.others,
                               self.root)

    def launch_writable(self, candidate: Candidate) -> bool:
        """True when accepting ``candidate`` leaves no launch site to change by hand (it keeps the launch, or
        every site's new launch can be written mechanically)."""
        return all(c.mechanical for c in launch_changes(self.source, self.model, self.kernel, candidate, self.spec,
                                                         self.others))

    def diff(self, candidate: Candidate, name: str | None = None) -> str:
        """A unified diff of the file against the candidate's variant, labelled with ``name`` (default: file),
        then of every other file whose launches it changes, then the launch changes to make by hand."""
        return self.workspace_change(candidate).diff(name or self.file)

    def rebased(self, text: str) -> PreparedKernel:
        """This kernel in a newer ``text`` of the same file, provided the kernel itself is unchanged (a variant
        verified against this snapshot may then be applied there); ``JobError`` saying what to do otherwise."""
        src = SourceText(text)
        model = parse(src.data, file_tree(src.data))
        k = model.kernel(self.kernel.name)
        if k is None:
            raise JobError(f"`{self.kernel.name}` is no longer in the file; re-run Optimize")
        if src.slice(k.span) != self.kernel_text:
            raise JobError(f"`{self.kernel.name}` changed since the job started; the variant was verified against "
                           "the old text. Re-run Optimize (or undo your edits) to apply it")
        try:
            spec = build_spec(src, model, k, self.file)
        except SpecError:
            spec = self.spec  # the kernel is unchanged; a host edit broke inference, the job's spec still holds
        return PreparedKernel(self.file, src, model, k, spec, self.others, self.root, self.skipped)
