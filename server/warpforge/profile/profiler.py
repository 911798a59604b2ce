"""``profile_kernel``: the profile stage — static hints, one Nsight Compute profile, the class, WF2xx findings.

The pipeline for one kernel of one file:

1. static analysis (``hints.analyze_source``: compiler, SASS and source findings; cached per kernel);
2. build the kernel's cubin exactly as the evaluator does (same translation unit, defines and flags, so
   the build cache is shared), and its SASS line table;
3. ``ncu.collect``: one launch, profiled, in a harness process (``ncu`` runs only on a machine with the
   GPU and Nsight Compute; nothing in this process touches CUDA);
4. the GPU's ceilings (``roofline.ceilings_for``: measured once per GPU and driver, then read from the disk cache)
   and the bottleneck class (``roofline.classify``);
5. the profile-aware analyzers (``needs=("profile",)``, codes WF2xx), gated by the class (tool affinity);
6. the profiler-grounded findings *replace* the static ones on the same subject (WF103 coalescing, WF104
   vectorization, WF105 bank conflicts, WF012 local memory, WF010 registers): measured beats inferred.

Fallbacks, each said once (one WF299 finding and ``ProfileReport.notice``): without Nsight Compute, or
without permission to read the GPU's counters (ERR_NVGPUCTRPERM), the kernel is timed by the evaluation
engine instead and classified from the time, the spec's bytes and FLOPs and the measured ceilings;
without a GPU at all, the static findings are all there is.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.build import BuildResult, Resources, compile_cubin
from ..compiler.toolchain import ToolMissing, default_arch
from ..cuda import parse
from ..cuda.extract import standalone
from ..cuda.model import FileModel, Kernel, name_list
from ..cuda.text import SourceText
from ..gpu.supervisor import gpu_identity, gpu_unavailable_reason
from ..spec import build_spec
from ..spec.model import KernelSpec
from . import ncu as ncu_mod
from .analyzers import load
from .context import KernelContext
from .findings import Finding, Severity, define, make
from .hints import analyze_source
from .ncu_parse import NcuProfile, parse_profile
from .roofline import Ceilings, KernelProfile, ceilings_for, classify, from_ncu, perf_from_timing
from .sass import SassFunction, disassemble

define("WF299", "profiler unavailable: static findings and timing only", Severity.INFO, "profile", None)

#: the least time (s) a profile with a deadline must have left to time the kernel without Nsight Compute, or to
#: measure the GPU's ceilings for the first time (each takes a few seconds on the GPU)
FALLBACK_MIN_SECONDS = 5.0

#: static codes a profile speaks for with measurements (static code -> the profile code that replaces it)
REPLACED_BY_PROFILE: dict[str, str] = {"WF103": "WF205", "WF104": "WF210", "WF105": "WF206", "WF012": "WF207",
                                       "WF010": "WF201"}


@dataclass
class ProfileReport:
    """Everything ``warpforge profile`` shows: the class, the numbers, the findings, and what was missing."""

    file: str
    kernel: str
    profile: KernelProfile | None = None
    findings: list[Finding] = field(default_factory=list)
    notice: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    #: where a profile reused from the workspace store was measured ("2026-11-26 07:31 UTC on NVIDIA H100 ...",
    #: ``profile.reuse``); None when this run measured it
    reused: str | None = None

    @property
    def cls(self) -> str | None:
        return self.profile.cls if self.profile is not None else None

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        """The report as JSON. ``full`` (the default) is lossless, what ``from_json`` reads back to an equal
        report and what the workspace store keeps: the parsed Nsight Compute pages are in it and the seconds
        exact. ``full=False`` is the reader's document of ``warpforge profile --json``: the profile's summary
        only, seconds to the millisecond."""
        return {"file": self.file, "kernel": self.kernel, "class": self.cls,
                "profile": self.profile.to_json(full=full) if self.profile is not None else None,
                "notice": self.notice, "notes": self.notes,
                "seconds": dict(self.seconds) if full else {k: round(v, 3) for k, v in self.seconds.items()},
                "reused": self.reused,
                "findings": [f.to_json() for f in self.findings]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProfileReport:
        return cls(d["file"], d["kernel"],
                   KernelProfile.from_json(d["profile"]) if d.get("profile") is not None else None,
                   [Finding.from_json(f) for f in d.get("findings") or ()], d.get("notice"),
                   list(d.get("notes") or ()), {k: float(v) for k, v in (d.get("seconds") or {}).items()},
                   d.get("reused"))


@dataclass
class _Built:
    build: BuildResult
    resources: Resources
    sass: SassFunction | None
    sass_lines: dict[int, Counter[str]]


def _build(file: str, src: SourceText, kernel: Kernel, spec: KernelSpec, arch: str, nvcc: str | None) -> _Built | str:
    """The kernel's cubin, built as the evaluator builds it; a reason string when it does not build."""
    model = parse(src.data)
    inst = tuple(spec.template_args) if kernel.template_params else None
    tu = standalone(src, model, kernel, filename=file, instantiate=inst)
    try:
        build = compile_cubin(tu, arch=arch, defines={t.name: t.values[0] for t in spec.tunables}, filename=file,
                              nvcc=nvcc)
    except ToolMissing as e:
        return str(e)
    res = build.resources_for(kernel.name) if build.ok else None
    if not build.ok or res is None:
        first = next((m.text for m in build.messages if m.severity == "error"), "the build failed")
        return f"the kernel does not build: {first}"
    sass: SassFunction | None = None
    lines: dict[int, Counter[str]] = {}
    try:
        funcs = disassemble(build.cubin)
        sass = funcs.get(res.mangled)
        lines = sass.lines(file) if sass is not None else {}
    except ToolMissing:
        pass
    return _Built(build, res, sass, lines)


def _time_kernel(file: str, text: str, kernel: str, spec: KernelSpec, device: int, arch: str) -> tuple[float, str]:
    """(median ms, GPU name) of the kernel as it is, through the evaluation engine (verified, L2 flushed)."""
    from ..gpu.evaluator import Backend, EngineSettings, Evaluator
    from ..gpu.timing import TimingSettings

    settings = EngineSettings(seeds=(spec.seeds[0],) if spec.seeds else None, odd=False, determinism=False,
                              recheck=False, timing=TimingSettings(max_seconds=1.0), arch=arch)

    async def job() -> tuple[float, str]:
        ev = Evaluator(file, kernel, text=text, spec=spec, settings=settings, backend=Backend(devices=(device,)))
        try:
            e = await ev.baseline()
        finally:
            await ev.close()
        if e.timing is None or e.timing.candidate is None:
            raise RuntimeError(f"timing failed: {e.status}: {e.reason}")
        return float(e.timing.candidate.median), e.gpu

    return asyncio.run(job())


def _notice_finding(file: str, kernel: Kernel, src: SourceText, text: str) -> Finding:
    return make("WF299", file, src.range(kernel.name_span), text, kernel=kernel.name)


def run_profile_analyzers(ctx: KernelContext) -> tuple[list[Finding], list[str]]:
    """The profile-aware analyzers (``needs`` includes "profile") on a context carrying a profile."""
    have = {"source", "profile"}
    if ctx.spec is not None:
        have.add("spec")
    if ctx.resources is not None:
        have.add("ptxas")
    if ctx.sass is not None:
        have.add("sass")
    out: list[Finding] = []
    notes: list[str] = []
    for a in load().values():
        if "profile" not in a.needs or not a.needs <= have:
            continue
        try:
            out.extend(a.fn(ctx))
        except Exception as e:  # one broken analyzer must not hide the others' findings
            notes.append(f"analyzer {a.name} failed on `{ctx.kernel.name}`: {type(e).__name__}: {e}")
    return out, notes


def merge(static: list[Finding], profiled: list[Finding], *, measured: bool) -> list[Finding]:
    """Static findings plus profile findings; with a measured profile, the static ones it replaces go."""
    keep = [f for f in static if not (measured and f.code in REPLACED_BY_PROFILE)]
    return sorted(keep + profiled, key=Finding.sort_key)


_Prepared = tuple[SourceText, Kernel, KernelSpec, "ProfileReport", list[Finding], "_Built | str", str]
#: a file's parse with one kernel and its spec, made by the caller (``app.PreparedKernel.parts``)
Parsed = tuple[SourceText, FileModel, Kernel, KernelSpec]


def _static_and_build(file: str, body: str, kernel: str | None, arch: str | None, nvcc: str | None,
                      use_compiler: bool, build: bool = True, parsed: Parsed | None = None) -> _Prepared:
    """Parse, spec, static findings and the build: what both a live profile and a recorded one need.

    ``parsed`` is the caller's parse of ``body`` with the kernel's spec (a job's ``PreparedKernel.parts``):
    a job parses its file once."""
    if parsed is not None:
        src, model, k, spec = parsed
    else:
        src = SourceText(body)
        model = parse(src.data)
        if kernel:
            k = model.require(kernel, file)
        elif len(model.kernels) == 1:
            k = model.kernels[0]
        else:
            names = name_list([x.name for x in model.kernels]) or "none"
            raise KeyError(f"{file} has {len(model.kernels)} kernels ({names}): name one")
        spec = build_spec(src, model, k, file)
    report = ProfileReport(file, k.name)
    arch = default_arch(arch)
    t0 = time.perf_counter()
    static = analyze_source(file, body, kernels=[k.name], arch=arch, nvcc=nvcc, model=model,
                            use_compiler=use_compiler)
    report.notes.extend(static.notes)
    report.seconds["static"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    built = _build(file, src, k, spec, arch, nvcc) if use_compiler and build else "not built"
    report.seconds["build"] = time.perf_counter() - t0
    return src, k, spec, report, static.findings, built, arch


def _analyze(report: ProfileReport, file: str, src: SourceText, k: Kernel, spec: KernelSpec, arch: str,
             built: _Built | None, kp: KernelProfile, static: list[Finding], notice: str | None) -> ProfileReport:
    """Run the profile analyzers on a context carrying ``kp`` and merge their findings with the static ones."""
    if kp.ceilings is None:
        kp.notes.append("the GPU's ceilings could not be measured: achieved-vs-peak numbers are missing")
    report.profile = kp
    ctx = KernelContext(file, src, parse(src.data), k, arch=arch, spec=spec,
                        resources=built.resources if built else None, sass=built.sass if built else None,
                        sass_lines=built.sass_lines if built else {}, profile=kp)
    t0 = time.perf_counter()
    found, notes = run_profile_analyzers(ctx)
    report.notes.extend(notes)
    report.seconds["analyze"] = time.perf_counter() - t0
    findings = merge(static, found, measured=kp.ncu is not None)
    if notice is not None:
        report.notice = notice
        findings = sorted([*findings, _notice_finding(file, k, src, notice)], key=Finding.sort_key)
    report.findings = findings
    return report


def render_profile(file: str, kernel: str | None, ncu_profile: NcuProfile, ceilings: Ceilings | None, *,
                   text: str | None = None, arch: str | None = None, nvcc: str | None = None,
                   use_compiler: bool = True) -> ProfileReport:
    """A report from a recorded profile (pages exported earlier, e.g. the committed fixtures): the same
    class and findings as on the GPU machine, with no GPU. Without nvcc the SASS-dependent details
    (ptxas spill numbers, atomics) are missing; the profile's own counters are all there."""
    t_start = time.perf_counter()
    body = text if text is not None else Path(file).read_text(encoding="utf-8")
    src, k, spec, report, static, built, arch = _static_and_build(file, body, kernel, arch, nvcc, use_compiler)
    _analyze(report, file, src, k, spec, arch, built if not isinstance(built, str) else None,
             from_ncu(ncu_profile, ceilings), static, None)
    report.seconds["total"] = time.perf_counter() - t_start
    return report


def profiled_sizes(spec: KernelSpec, max_bytes: int | None) -> dict[str, int] | None:
    """The base sizes a profile capped at ``max_bytes`` runs at (``KernelSpec.small_sizes``), None for the
    spec's own: part of what a stored profile is keyed by (``profile.reuse``)."""
    return spec.small_sizes(max_bytes) if max_bytes is not None else None


def profile_kernel(
    file: str,
    kernel: str | None = None,
    *,
    text: str | None = None,
    arch: str | None = None,
    nvcc: str | None = None,
    device: int = 0,
    sections: tuple[str, ...] = ncu_mod.DEFAULT_SECTIONS,
    use_ncu: bool = True,
    measure: bool = True,
    timeout: float = 300.0,
    parsed: Parsed | None = None,
    max_bytes: int | None = None,
    deadline: float | None = None,
) -> ProfileReport:
    """Profile one kernel (see the module docstring). Raises ``KeyError`` for an unknown kernel and
    ``SpecError`` when the kernel has no usable spec; everything else degrades into the report.

    ``max_bytes``: profile a smaller problem of the same kernel when the spec's buffers hold more
    (``KernelSpec.small_sizes``). Nsight Compute replays the kernel once per metric pass; at 3.3 GB a
    90 ms kernel made the profile before an optimize run take 14 s of a 60 s budget. A problem many times
    the L2 size behaves as the large one does for what the findings read (memory, occupancy, stalls).

    ``deadline`` (``time.monotonic()``) bounds the GPU steps: Nsight Compute is stopped by it (its session
    killed), and the timing fallback and a first measurement of the ceilings are skipped, each said in a note,
    when less than ``FALLBACK_MIN_SECONDS`` is left. An optimize job gives its profile a share of its budget
    this way (``app.optimize``).

    Blocking (seconds: ``ncu`` runs in a subprocess, and the timing fallback runs its own event loop), so
    asynchronous callers run it in an executor thread, never on their event loop."""
    t_start = time.perf_counter()

    def left() -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    body = text if text is not None else Path(file).read_text(encoding="utf-8")
    why = gpu_unavailable_reason()
    src, k, spec, report, static, built, arch = _static_and_build(file, body, kernel, arch, nvcc, True,
                                                                  build=why is None, parsed=parsed)

    def finish(findings: list[Finding], notice: str | None) -> ProfileReport:
        if notice is not None:
            report.notice = notice
            findings = [*findings, _notice_finding(file, k, src, notice)]
        report.findings = sorted(findings, key=Finding.sort_key)
        report.seconds["total"] = time.perf_counter() - t_start
        return report

    if why is not None:
        return finish(static, f"profiling needs an NVIDIA GPU ({why}): static findings only")
    if isinstance(built, str):
        return finish(static, f"{built}: static findings only")
    from ..gpu.inputs import Layout  # numpy: only once a GPU will run the kernel (not for hints or the editor)

    reduced = profiled_sizes(spec, max_bytes)
    resolved = spec.resolve(base=reduced) if reduced else spec.resolve()
    layout = Layout.from_resolved(resolved, "spec")
    if reduced:
        full = Layout.from_resolved(spec.resolve(), "spec").nbytes
        report.notes.append(f"profiled at a reduced size ({layout.describe()}, {layout.nbytes / 1e6:.0f} MB of "
                            f"buffers; the spec's size holds {full / 1e9:.2f} GB)")
    ncu_profile: NcuProfile | None = None
    notice: str | None = None
    exe = ncu_mod.ncu_path() if use_ncu else None
    if use_ncu and exe is None:
        notice = ncu_mod.missing_message()
    elif exe is not None:
        t0 = time.perf_counter()
        try:
            exp = ncu_mod.collect(built.build.cubin, built.resources.mangled, layout,
                                  (resolved.grid, resolved.block, resolved.smem),
                                  seed=spec.seeds[0] if spec.seeds else 0, device=device, sections=sections,
                                  ncu=exe,
                                  timeout=timeout if deadline is None else max(0.0, min(timeout, left() or 0.0)))
            ncu_profile = parse_profile(exp.pages["details"], exp.pages.get("raw"), exp.pages.get("source"))
            report.seconds["ncu"] = exp.profile_seconds
            report.seconds["export"] = exp.export_seconds
            if exp.harness.get("warmup_launches") == 0:
                report.notes.append("the profiled launch ran cold (the profiler API did not reach ncu): clocks "
                                    "may not have ramped up")
        except ncu_mod.ProfilerUnavailable as e:
            notice = str(e)
        except (ValueError, KeyError) as e:
            notice = f"Nsight Compute's output could not be read ({e})"
        report.seconds.setdefault("ncu", time.perf_counter() - t0)
    if notice is not None:
        notice += "; profiler-grounded findings are off, showing static findings and timing only"
    median_ms: float | None = None
    gpu = ncu_profile.gpu if ncu_profile is not None else ""
    short = left()
    if ncu_profile is None and short is not None and short < FALLBACK_MIN_SECONDS:
        report.notes.append("no time was left in the profile's share of the budget to time the kernel instead")
        return finish(static, notice or "the profile ran out of its share of the time budget: static findings only")
    if ncu_profile is None:
        t0 = time.perf_counter()
        try:
            median_ms, gpu = _time_kernel(file, body, k.name, spec, device, arch)
        except Exception as e:  # the engine says why; the static findings still stand
            report.notes.append(f"timing failed: {type(e).__name__}: {e}")
            return finish(static, notice or "the kernel could not be timed: static findings only")
        report.seconds["timing"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ident = gpu_identity(device)
    remaining = left()
    may_measure = measure and (remaining is None or remaining >= FALLBACK_MIN_SECONDS)
    ceilings = ceilings_for(gpu or (ident or ("", ""))[0], device, measure=may_measure,
                            driver=ident[1] if ident is not None else None,
                            timeout=180.0 if remaining is None else max(1.0, remaining))
    if ceilings is None and measure and not may_measure:
        report.notes.append("the GPU's ceilings were not measured: no time was left in the profile's share of "
                            "the budget (the next profile on this GPU measures them once)")
    report.seconds["ceilings"] = time.perf_counter() - t0
    if ncu_profile is not None:
        kp = from_ncu(ncu_profile, ceilings)
    else:
        assert median_ms is not None
        grid = resolved.grid[0] * resolved.grid[1] * resolved.grid[2]
        perf = perf_from_timing(median_ms, spec_bytes=resolved.bytes, spec_flops=resolved.flops, grid_blocks=grid,
                                block_threads=resolved.threads, registers=built.resources.registers,
                                shared_bytes=built.resources.shared_bytes + resolved.smem, ceilings=ceilings)
        kp = KernelProfile(gpu, perf, classify(perf, ceilings), ceilings, None, median_ms)
    _analyze(report, file, src, k, spec, arch, built, kp, static, notice)
    report.seconds["total"] = time.perf_counter() - t_start
    return report
