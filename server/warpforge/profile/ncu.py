"""Nsight Compute collection: profile ONE launch of one kernel in a harness process, export CSV pages.

How a profile is taken:

- the kernel is built as everywhere else (``compiler.build.compile_cubin``: device code only, ``-lineinfo``, so
  samples map to the user's lines through the ``#line`` directives of the standalone translation unit);
- ``ncu`` wraps a small harness process (``python -m warpforge.profile.ncu --harness JOB``) that loads the
  cubin, allocates the spec's inputs with the worker's own machinery (``gpu.inputs``: the same seeds, the
  same poison), launches the kernel repeatedly for a fraction of a second to bring the clocks up (the GPU
  idles at a few hundred MHz and ``--clock-control none`` leaves clocks alone, as the house rules say),
  restores the inputs, and launches it once more between ``cuProfilerStart``/``cuProfilerStop``. With
  ``--profile-from-start off`` only that launch is profiled; ``--kernel-name`` (the mangled symbol, exact)
  and ``--launch-count 1`` make sure of it. The server process never touches CUDA;
- the report (``-o``) is then exported with ``ncu --import`` as CSV text, in parallel: the *details* page
  (section metrics and the guided-analysis rule results with their estimated speedups), the *raw* page
  (every collected metric by its counter name, for the numbers the sections do not show), and the *source*
  page with per-line warp-stall samples, excessive L2 sectors and shared-memory bank conflicts.

Why CSV export and not the ``ncu_report`` Python module that Nsight Compute ships: the module exists only
where Nsight Compute is installed (the GPU machine), is bound to that Nsight version's Python ABI, and
needs the binary ``.ncu-rep``; CSV text is what ``ncu`` prints everywhere, diffs and commits cleanly as
test fixtures, and lets the parsers (``ncu_parse``, pure functions) run in CI without Nsight or a GPU.
The cost is a few ``ncu --import`` calls (about a second each, run concurrently).

``python -m warpforge.profile.ncu record OUT FILE[:KERNEL]...`` runs the same collection for reference
kernels and keeps every exported page: it is how ``tests/fixtures/ncu/`` was recorded on the GPU machine.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# ``ncu_path``, ``missing_message`` and ``ProfilerUnavailable`` are this module's interface too: the profiler
# calls and catches them through it, and tests replace ``ncu_path`` here to run without (or with a fake) ncu.
from ..compiler.nsight import PERMISSION_CODE, permission_message, run_ncu
from ..compiler.nsight import ProfilerUnavailable as ProfilerUnavailable
from ..compiler.nsight import missing_message as missing_message
from ..compiler.nsight import ncu_path as ncu_path
from ..compiler.sandbox import run_tool
from ..compiler.toolchain import ToolMissing, UnsafeArgument, guard_argv
from ..gpu.oneshot import write_job

if TYPE_CHECKING:  # numpy's ~60 ms only where inputs are laid out (the editor and `hints` never do)
    from ..gpu.inputs import Layout

#: sections of a default profile: speed of light, launch and occupancy, memory and compute workload, the
#: warp-state and scheduler statistics behind the stall reasons, and the source counters behind the
#: per-line numbers. About a dozen replay passes: seconds for the reference kernels, unlike ``--set full``.
DEFAULT_SECTIONS: tuple[str, ...] = (
    "SpeedOfLight", "SpeedOfLight_RooflineChart", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis", "SchedulerStats", "WarpStateStats",
    "SourceCounters", "InstructionStats",
)

#: counters the sections above do not all show, asked for by name: the bytes and floating-point work of
#: the roofline, local-memory traffic (spills), active threads per warp (divergence), tensor-pipe use.
EXTRA_METRICS: tuple[str, ...] = (
    "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
)

#: the pages a profile exports (name -> ``ncu --import`` arguments after ``--csv``). The source page must be
#: printed as ``sass,cuda``: with ``cuda`` alone ncu prints nothing once the compiled file is gone (the
#: build's temporary folder), while the correlated view still gives every line number and its counters.
PAGES: dict[str, tuple[str, ...]] = {
    "details": ("--page", "details", "--print-units", "base"),
    "raw": ("--page", "raw", "--print-units", "base"),
    "source": ("--page", "source", "--print-source", "sass,cuda"),
}

HARNESS_TAG = "WARPFORGE_HARNESS "
#: a kernel symbol as ptxas names it (mangled or ``extern "C"``)
KERNEL_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a section identifier or a metric name (``dram__bytes_read.sum``, ``...avg.pct_of_peak_sustained_active``)
_NCU_NAME = re.compile(r"[A-Za-z0-9_.]+")


@dataclass
class NcuExport:
    """The exported text of one profiled launch, plus what the harness reported about the device."""

    pages: dict[str, str] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    profile_seconds: float = 0.0
    export_seconds: float = 0.0
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_sections_cache: dict[str, str] = {}


def available_sections(ncu: str) -> str | None:
    """``ncu --list-sections`` output (cached per executable), or None when it cannot be listed."""
    if ncu not in _sections_cache:
        try:
            proc = run_tool(guard_argv("ncu", [ncu, "--list-sections"]), tool="ncu", timeout=60)
        except (OSError, subprocess.TimeoutExpired, UnsafeArgument):
            return None
        if proc.returncode != 0:
            return None
        _sections_cache[ncu] = proc.stdout
    return _sections_cache[ncu]


_version_cache: dict[str, str] = {}


def ncu_version(ncu: str) -> str | None:
    """The version ``ncu --version`` prints (``2025.3.1.0``; cached per executable), or None when it does not
    answer: a profile made by another Nsight Compute is not reused (``profile.reuse``)."""
    if ncu not in _version_cache:
        try:
            proc = run_tool(guard_argv("ncu", [ncu, "--version"]), tool="ncu", timeout=60)
        except (OSError, subprocess.TimeoutExpired, UnsafeArgument):
            return None
        found = re.search(r"^Version\s+(\S+)", proc.stdout, re.MULTILINE) if proc.returncode == 0 else None
        if found is None:
            return None
        _version_cache[ncu] = found.group(1)
    return _version_cache[ncu]


def usable_sections(wanted: Sequence[str], listing: str | None) -> list[str]:
    """The wanted sections this Nsight version has (an unknown one would make ncu refuse the run)."""
    if listing is None:
        return list(wanted)
    return [s for s in wanted if re.search(rf"(^|\s){re.escape(s)}(\s|$)", listing, re.MULTILINE)]


def profile_command(ncu: str, report: str, symbol: str, job: str, *, sections: Sequence[str],
                    metrics: Sequence[str], python: str = sys.executable, marked: bool = True) -> list[str]:
    """The ``ncu`` command line that profiles the harness's one marked launch (or its first, unmarked).

    Raises ``UnsafeArgument`` unless ``symbol`` is a C++ identifier (ncu reads ``regex:...`` and other
    forms in ``--kernel-name``; a mangled or ``extern "C"`` name is always an identifier) and every part
    passes the same shell guard as nvcc's: ncu starts the harness from this argv, and how it does so
    (directly or through a shell) is not documented.
    """
    if not KERNEL_SYMBOL.fullmatch(symbol):
        raise UnsafeArgument("ncu", symbol, "is not a kernel symbol (a C++ identifier)")
    for name in (*sections, *metrics):
        if not _NCU_NAME.fullmatch(name):
            raise UnsafeArgument("ncu", name, "is not a section or metric name")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off" if marked else "on",
           "--kernel-name-base", "mangled",
           "--kernel-name", symbol, "--launch-count", "1", "--import-source", "yes", "--target-processes",
           "application-only", "-f", "-o", report]
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += [python, "-m", "warpforge.profile.ncu", "--harness", job]
    return guard_argv("ncu", cmd)


def _classify_failure(text: str, returncode: int) -> ProfilerUnavailable:
    if PERMISSION_CODE in text:
        return ProfilerUnavailable("permission", permission_message())
    errors = [ln.split("==ERROR==", 1)[1].strip() for ln in text.splitlines() if "==ERROR==" in ln]
    harness = [ln.strip() for ln in text.splitlines() if ln.startswith("warpforge harness:")]
    why = "; ".join((harness + errors)[:3]) or (text.strip().splitlines() or [f"exit code {returncode}"])[-1]
    return ProfilerUnavailable("failed", f"Nsight Compute could not profile the kernel: {why[:500]}")


def _harness_info(text: str) -> dict[str, Any]:
    for ln in text.splitlines():
        if ln.startswith(HARNESS_TAG):
            with contextlib.suppress(ValueError):
                info: dict[str, Any] = json.loads(ln[len(HARNESS_TAG):])
                return info
    return {}


def export_pages(ncu: str, report: str, pages: dict[str, tuple[str, ...]], timeout: float = 120.0) -> dict[str, str]:
    """``ncu --import REPORT --csv ...`` for each page, concurrently; a page that fails is left out."""

    def one(item: tuple[str, tuple[str, ...]]) -> tuple[str, str | None]:
        name, args = item
        try:
            proc = run_tool(guard_argv("ncu", [ncu, "--import", report, "--csv", *args]), tool="ncu", timeout=timeout)
        except (OSError, subprocess.TimeoutExpired, UnsafeArgument):
            return name, None
        if proc.returncode != 0 or not proc.stdout.strip():
            return name, None
        return name, proc.stdout

    out: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(pages))) as pool:
        for name, text in pool.map(one, pages.items()):
            if text is not None:
                out[name] = text
    return out


def collect(
    cubin: bytes,
    symbol: str,
    layout: Layout,
    launch: tuple[Sequence[int], Sequence[int], int],
    *,
    seed: int = 0,
    device: int = 0,
    sections: Sequence[str] = DEFAULT_SECTIONS,
    metrics: Sequence[str] = EXTRA_METRICS,
    pages: dict[str, tuple[str, ...]] | None = None,
    warmup_seconds: float = 0.25,
    timeout: float = 300.0,
    ncu: str | None = None,
    python: str = sys.executable,
    keep_report: str | Path | None = None,
) -> NcuExport:
    """Profile one launch of ``symbol`` from ``cubin`` on the spec's inputs; raises ``ProfilerUnavailable``.

    A metric this Nsight version does not know makes ``ncu`` refuse the whole run, so a failed run is
    retried without ``metrics`` (the sections alone) before giving up. ``timeout`` bounds all of it: every
    retry and the export get what is left of it (a share of an optimize job's budget, ``app.optimize``).
    """
    if not KERNEL_SYMBOL.fullmatch(symbol):
        raise ProfilerUnavailable("failed", f"Nsight Compute was not run: the kernel symbol {symbol[:80]!r} is "
                                            "not a C++ identifier")
    exe = ncu or ncu_path()
    if exe is None:
        raise ProfilerUnavailable("missing", missing_message())
    with tempfile.TemporaryDirectory(prefix="warpforge-ncu-") as tmp:
        job = Path(tmp) / "job.pkl"
        report = str(Path(tmp) / "profile")
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        t0 = time.perf_counter()
        log = ""
        sections = usable_sections(sections, available_sections(exe))
        # First the marked launch after a warm-up, with the extra metrics. Should the profiler API not reach
        # ncu ("No kernels were profiled"), the first launch, cold; should this Nsight refuse a metric, the
        # sections alone.
        use_metrics, marked = bool(metrics), True
        cmd: list[str] = []
        for _ in range(3):
            write_job(job, cubin, symbol, layout, launch, seed=seed, device=device,
                      warmup=warmup_seconds if marked else 0.0, marked=marked)
            try:
                cmd = profile_command(exe, report, symbol, str(job), sections=sections,
                                      metrics=list(metrics) if use_metrics else [], python=python, marked=marked)
            except UnsafeArgument as e:
                raise ProfilerUnavailable("failed", f"Nsight Compute was not run: {e}") from e
            left = timeout - (time.perf_counter() - t0)
            if left <= 0:
                raise ProfilerUnavailable("timeout", f"Nsight Compute did not finish within {timeout:.0f} s")
            proc = run_ncu(cmd, timeout=left, env=env)
            text = (proc.stdout or "") + "\n" + (proc.stderr or "")
            log += f"$ {' '.join(cmd)}\n{text}\n"
            if proc.returncode == 0 and Path(report + ".ncu-rep").is_file():
                break
            failure = _classify_failure(text, proc.returncode)
            if failure.kind == "permission" or "warpforge harness:" in text:
                raise failure
            if marked and "No kernels were profiled" in text:
                marked = False
            elif use_metrics:
                use_metrics = False
            else:
                raise failure
        else:
            raise _classify_failure(text, proc.returncode)
        profile_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        exported = export_pages(exe, report + ".ncu-rep", pages or PAGES,
                                timeout=max(5.0, min(120.0, timeout - (time.perf_counter() - t0))))
        export_seconds = time.perf_counter() - t1
        if "details" in (pages or PAGES) and "details" not in exported:
            raise ProfilerUnavailable("failed", "Nsight Compute wrote a report but could not export it")
        if keep_report is not None:
            with contextlib.suppress(OSError):
                shutil.copy(report + ".ncu-rep", keep_report)
        return NcuExport(exported, _harness_info(log), cmd, profile_seconds, export_seconds, log)


# --------------------------------------------------------------------------- the harness (runs under ncu)
#: device attributes the harness reports (pycuda's names), used for occupancy and waves
_ATTRS = ("MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_MULTIPROCESSOR", "MAX_REGISTERS_PER_MULTIPROCESSOR",
          "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "L2_CACHE_SIZE", "CLOCK_RATE", "MEMORY_CLOCK_RATE",
          "GLOBAL_MEMORY_BUS_WIDTH", "MAX_BLOCKS_PER_MULTIPROCESSOR", "WARP_SIZE")


def _profiler_api() -> Any:
    """libcuda's cuProfilerStart/Stop, or None where there is no driver library (CPU tests)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def harness(path: str) -> int:
    """Run under ``ncu``: warm the clocks up with the kernel itself, then launch it once, marked."""
    import numpy as np

    from ..gpu import device_inputs
    from ..gpu.inputs import scalar_format, scalar_value

    with open(path, "rb") as f:
        job: dict[str, Any] = pickle.load(f)
    import pycuda.driver as cuda

    cuda.init()
    dev = cuda.Device(int(job.get("device", 0)))
    ctx = dev.make_context()
    try:
        fn = cuda.module_from_buffer(job["cubin"]).get_function(job["symbol"])
        layout: Layout = job["layout"]
        grid_l, block_l, smem = job["launch"]
        grid = tuple(int(x) for x in [*grid_l, 1, 1][:3])
        block = tuple(int(x) for x in [*block_l, 1, 1][:3])
        if smem > 48 * 1024:
            fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        allocs = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        gen, _ = device_inputs.load(cuda, job.get("generator"),
                                    int(dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)))

        def fill() -> None:
            device_inputs.fill_buffers(cuda, layout, int(job.get("seed", 0)), allocs, gen)

        fill()
        fn.prepare("".join(np.dtype(np.uintp).char if a.is_buffer else scalar_format(a.dtype) for a in layout.args))
        args = [int(allocs[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args]
        t0 = time.monotonic()
        warm = 0
        while time.monotonic() - t0 < float(job.get("warmup", 0.25)) and warm < 100_000:
            fn.prepared_call(grid, block, *args, shared_size=smem)
            ctx.synchronize()
            warm += 1
        warm_s = time.monotonic() - t0
        fill()  # the profiled launch sees the spec's inputs, not what the warm-up launches left
        ctx.synchronize()
        api = _profiler_api() if job.get("marked", True) else None
        if api is not None:
            api.cuProfilerStart()
        fn.prepared_call(grid, block, *args, shared_size=smem)
        ctx.synchronize()
        if api is not None:
            api.cuProfilerStop()
        attrs: dict[str, int] = {}
        for name in _ATTRS:
            with contextlib.suppress(Exception):
                attrs[name.lower()] = int(dev.get_attribute(getattr(cuda.device_attribute, name)))
        info = {"gpu": str(dev.name()), "cc": list(dev.compute_capability()), "warmup_launches": warm,
                "warmup_seconds": round(warm_s, 3), "profiler_api": api is not None,
                "attributes": attrs}
        print(HARNESS_TAG + json.dumps(info), flush=True)
        return 0
    except cuda.Error as e:
        print(f"warpforge harness: CUDA error: {str(e).strip().splitlines()[0] if str(e).strip() else e}",
              file=sys.stderr)
        return 3
    finally:
        with contextlib.suppress(Exception):
            ctx.pop()


# --------------------------------------------------------------------------- recording fixtures
def _target(spec: str) -> tuple[str, str | None]:
    m = re.match(r"^(.*\.cuh?)(?::(\w+))?$", spec)
    if not m:
        return spec, None
    return m.group(1), m.group(2)


def record(out: Path, targets: Sequence[str], *, sections: Sequence[str] = DEFAULT_SECTIONS,
           arch: str | None = None, budget: float | None = None) -> list[dict[str, Any]]:
    """Profile each ``FILE[:KERNEL]`` and keep every page, the harness info and the build numbers.

    Writes ``OUT/<stem>/{details,raw,source,...}.csv`` and ``meta.json``; returns one summary per target.
    """
    from ..compiler.build import compile_cubin
    from ..cuda import KernelNotFound, parse
    from ..cuda.extract import standalone
    from ..cuda.text import SourceText
    from ..spec import build_spec

    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for t in targets:
        if budget is not None and time.perf_counter() - start > budget:
            rows.append({"file": t, "ok": False, "error": "skipped: recording budget spent"})
            print(json.dumps(rows[-1]), flush=True)
            continue
        file, name = _target(t)
        stem = Path(file).stem
        d = out / stem
        d.mkdir(parents=True, exist_ok=True)
        row: dict[str, Any] = {"file": file, "stem": stem}
        t0 = time.perf_counter()
        try:
            src = SourceText(Path(file).read_bytes())
            model = parse(src.data)
            k = model.require(name, file) if name else next(iter(model.kernels), None)
            if k is None:
                raise ValueError(f"{file}: no __global__ kernels")
            spec = build_spec(src, model, k, file)
            inst = tuple(spec.template_args) if k.template_params else None
            tu = standalone(src, model, k, filename=file, instantiate=inst)
            build = compile_cubin(tu, arch=arch, defines={tn.name: tn.values[0] for tn in spec.tunables},
                                  filename=file)
            res = build.resources_for(k.name)
            if not build.ok or res is None:
                raise ValueError(f"build failed: {build.log[-400:]}")
            from ..gpu.inputs import Layout

            resolved = spec.resolve()
            layout = Layout.from_resolved(resolved, "spec")
            exp = collect(build.cubin, res.mangled, layout, (resolved.grid, resolved.block, resolved.smem),
                          sections=sections)
            for page, text in exp.pages.items():
                (d / f"{page}.csv").write_text(text)
            meta = {"file": file, "kernel": k.name, "symbol": res.mangled, "arch": build.arch,
                    "grid": list(resolved.grid), "block": list(resolved.block), "smem": resolved.smem,
                    "sizes": dict(resolved.sizes), "flops": resolved.flops, "bytes": resolved.bytes,
                    "resources": asdict(res), "harness": exp.harness, "command": exp.command,
                    "profile_seconds": round(exp.profile_seconds, 2), "export_seconds": round(exp.export_seconds, 2)}
            (d / "meta.json").write_text(json.dumps(meta, indent=2))
            row.update(ok=True, kernel=k.name, profile_s=round(exp.profile_seconds, 2),
                       export_s=round(exp.export_seconds, 2), pages=sorted(exp.pages))
            (d / "ncu.log").write_text(exp.log[-200_000:])
        except (ProfilerUnavailable, ValueError, KernelNotFound, OSError, ToolMissing) as e:
            row.update(ok=False, error=f"{type(e).__name__}: {e}")
            (d / "error.txt").write_text(str(e))
        row["total_s"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpforge.profile.ncu")
    p.add_argument("--harness", metavar="JOB", help="(under ncu) run one pickled job: warm up, one marked launch")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("record", help="profile reference kernels and keep every exported page (fixtures)")
    r.add_argument("out")
    r.add_argument("targets", nargs="+", metavar="FILE[:KERNEL]")
    r.add_argument("--section", action="append", help="override the default sections")
    r.add_argument("--arch")
    r.add_argument("--budget", type=float, help="skip the remaining targets after this many seconds")
    args = p.parse_args(argv)
    if args.harness:
        return harness(args.harness)
    if args.cmd == "record":
        rows = record(Path(args.out), args.targets, sections=tuple(args.section or DEFAULT_SECTIONS), arch=args.arch,
                      budget=args.budget)
        return 0 if all(r["ok"] for r in rows) else 1
    p.error("--harness JOB or `record` is required")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
