"""The build step of an evaluation, as it runs in a pool process: compile one translation unit, inspect its SASS.

``build_job`` is what ``EvaluationBackend.cpu`` ships to a CPU worker (a process-pool process, or a Ray
task), so it must be a picklable top-level function with picklable results (``BuildOut``). It sits in its
own module because both the evaluator (building candidates) and the backends (building the device
comparison kernels once per pool) call it, and neither may import the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compiler.build import compile_cubin
from ..compiler.toolchain import ToolMissing
from . import guards
from .reports import BuildStats


@dataclass
class BuildOut:
    """What a pool process sends back from a build: the cubin, its stats, and SASS guard findings."""

    stats: BuildStats
    cubin: bytes = b""
    sass: list[guards.GuardFinding] = field(default_factory=list)
    sass_note: str | None = None
    error: str = ""


def build_job(source: str, kernel: str, defines: dict[str, str], flags: list[str], filename: str, timeout: float,
              arch: str) -> BuildOut:
    """Compile one translation unit and inspect its SASS (runs in a pool process)."""
    try:
        res = compile_cubin(source, arch=arch, defines=defines, flags=flags, filename=filename, timeout=timeout)
    except ToolMissing as e:
        return BuildOut(BuildStats(False, arch=arch, messages=[str(e)]), error=str(e))
    msgs = [f"{m.file}:{m.line}: {m.severity}: {m.text}" if m.line else f"{m.severity}: {m.text}"
            for m in res.messages if m.severity == "error"]
    msgs += [f"{m.file}:{m.line}: {m.severity}: {m.text}" if m.line else f"{m.severity}: {m.text}"
             for m in res.messages if m.severity == "warning"][:10]
    r = res.resources_for(kernel) if res.ok else None
    stats = BuildStats(res.ok, res.seconds, res.cached, res.timed_out, res.arch, r.mangled if r else "",
                       r.registers if r else 0, r.spill_stores if r else 0, r.spill_loads if r else 0,
                       r.stack_frame if r else 0, r.shared_bytes if r else 0, msgs)
    if not res.ok:
        return BuildOut(stats)
    if r is None:
        return BuildOut(stats, error=f"the cubin has no entry function for kernel `{kernel}`")
    found, note = guards.sass_findings(res.cubin)
    return BuildOut(stats, res.cubin, found, note)
