"""``warpforge profile FILE [--kernel K] [--json] [--store PATH]``: profiler-grounded analysis of one kernel on the GPU.

Prints the bottleneck class and why, the speed-of-light numbers (each unit's throughput against its peak,
as Nsight Compute measures it), what the kernel achieves against this GPU's measured ceilings (copy
bandwidth, FP32 and tensor rates; arithmetic intensity against the ridge point), then the per-line
findings in the compiler format of ``warpforge hints`` — static and profiler-grounded together, the
measured ones replacing the static guesses on the same subject. Without Nsight Compute or permission to
read the GPU's counters it says so once and falls back to timing; without a GPU, to static findings, and
then exits 3 ("cannot run here"): the findings were printed, the profile was not made.

A live profile is always measured now; a complete one (Nsight Compute ran) is kept in the workspace store
that ``warpforge optimize`` uses from the same folder (``--store`` names another), so the next optimize of the
same kernel, spec, build and GPU reuses it instead of profiling its baseline again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ..app import PreparedKernel, ProfileJob, ProfileSettings
from ..cuda import KernelNotFound
from ..exitcodes import CliError, ExitCode
from ..gpu import supervisor
from ..profile.ncu import DEFAULT_SECTIONS
from ..profile.ncu_parse import load_profile
from ..profile.profiler import ProfileReport, render_profile
from ..profile.roofline import Ceilings, cached_ceilings
from ..spec import SpecError, build_spec
from ..store import Store, StoreError, workspace_db
from . import inputs
from .hints import _format
from .inputs import load_file, pick_kernel


def register(sub: Any) -> None:
    p = sub.add_parser("profile", help="profile a kernel on the GPU (Nsight Compute): bottleneck class, speed of "
                                       "light, per-line findings")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--device", type=inputs.index_int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--arch", type=inputs.arch, help="target architecture, e.g. sm_90 (default: the local GPU's)")
    p.add_argument("--section", action="append", metavar="NAME",
                   help=f"Nsight Compute section to collect (repeatable; default: {', '.join(DEFAULT_SECTIONS)})")
    p.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute: classify from timing alone")
    p.add_argument("--store", metavar="PATH",
                   help="where the profile is kept for later optimize runs: a SQLite file, or a folder for "
                        "warpforge.db (default: the store optimize uses, in the user cache, keyed by the current "
                        "folder)")
    p.add_argument("--from", dest="recorded", metavar="DIR",
                   help="render a recorded profile (details.csv, raw.csv, source.csv exported by `ncu --import`, "
                        "and ceilings.json here or one folder up) instead of profiling: no GPU needed")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    if args.recorded:
        text = inputs.read_source(args.file).text
        try:
            report = _render_recorded(args, text, args.arch)
        except (KernelNotFound, KeyError) as e:
            raise CliError(str(e.args[0]) if e.args else str(e)) from e
        except SpecError as e:
            raise CliError(str(e)) from e
    else:
        report = _profile(args)
    if args.json:
        print(json.dumps(report.to_json(full=False), indent=2, default=str))
    else:
        _print(report)
    if report.profile is not None:
        return ExitCode.OK
    # Without a GPU the static findings above are all this machine can give: the profile needs one.
    no_gpu = not args.recorded and supervisor.gpu_unavailable_reason() is not None
    return ExitCode.UNAVAILABLE if no_gpu else ExitCode.FAILED


def _profile(args: argparse.Namespace) -> ProfileReport:
    """A live profile: ``app.ProfileJob``, the job the editor's Profile Kernel runs, on the file parsed once."""
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel, src)
    try:
        spec = build_spec(src, model, kernel, args.file)
    except SpecError as e:
        raise CliError(str(e)) from e
    store = _store(args)
    try:
        job = ProfileJob(PreparedKernel(args.file, src, model, kernel, spec), ProfileSettings(
            arch=args.arch, device=args.device, sections=tuple(args.section) if args.section else DEFAULT_SECTIONS,
            use_ncu=not args.no_ncu), store=store)
        report = asyncio.run(job.run())
    finally:
        if store is not None:
            store.close()
    assert report is not None  # only a cancelled job has none, and nothing cancels this one
    return report


def _store(args: argparse.Namespace) -> Store | None:
    """The store the profile is kept in (optimize's, from this folder, unless ``--store``); opened before the
    profile, so a file that cannot be used is exit 2. None without ``--store`` where there is no GPU: there will
    be nothing to keep, so nothing is created in the user's cache."""
    if not args.store and (args.no_ncu or supervisor.gpu_unavailable_reason() is not None):
        return None
    try:
        return Store(workspace_db(Path.cwd(), args.store))
    except StoreError as e:
        raise CliError(f"--store: {e}" if args.store else str(e)) from e


def _render_recorded(args: argparse.Namespace, text: str, arch: str | None) -> ProfileReport:
    folder = Path(args.recorded)
    try:
        prof = load_profile(folder)
    except FileNotFoundError as e:
        raise CliError(f"{args.recorded}: no recorded profile (details.csv) there") from e
    except ValueError as e:
        raise CliError(f"{args.recorded}: {e}") from e
    ceilings: Ceilings | None = None
    for cand in (folder / "ceilings.json", folder.parent / "ceilings.json"):
        if cand.is_file():
            try:
                ceilings = Ceilings.from_json(json.loads(cand.read_text()))
            except (ValueError, TypeError) as e:
                raise CliError(f"{cand}: not a ceilings file: {e}") from e
            break
    if ceilings is None:
        ceilings = cached_ceilings(prof.gpu)
    return render_profile(args.file, args.kernel, prof, ceilings, text=text, arch=arch)


def _f(v: float | None, fmt: str = "{:.1f}", none: str = "?") -> str:
    return fmt.format(v) if v is not None else none


def _print(r: ProfileReport) -> None:
    con = Console(highlight=False, soft_wrap=True)
    kp = r.profile
    if kp is not None:
        b, p, c = kp.bottleneck, kp.perf, kp.ceilings
        unit = f" ({b.unit})" if b.unit else ""
        con.print(f"[bold]{r.kernel}[/] on {kp.gpu or 'the GPU'}: [bold]{b.cls}[/]{unit}")
        con.print(f"  {b.reason}")
        src = "Nsight Compute, one launch" if kp.ncu is not None else "timing, no profile"
        dur = f"{p.duration_ns / 1e3:.1f} µs" if p.duration_ns else "?"
        rows: list[tuple[str, str]] = []
        levels = ", ".join(f"{k} {v:.1f} %" for k, v in p.units_pct.items())
        rows.append(("memory", f"{_f(b.memory_pct)} % of peak" + (f" ({levels})" if levels else "")))
        rows.append(("compute", f"{_f(b.compute_pct)} % of peak"))
        if b.achieved_gbps is not None:
            peak = f" of {c.bandwidth_gbps:.0f} GB/s measured copy" if c is not None else ""
            frac = f" ({b.bandwidth_fraction * 100:.1f} %{peak})" if b.bandwidth_fraction is not None else ""
            rows.append(("DRAM achieved", f"{b.achieved_gbps:.0f} GB/s{frac}"))
        if b.achieved_gflops is not None:
            peak = f" of {c.fp32_gflops / 1e3:.1f} TFLOP/s measured FP32" if c is not None and c.fp32_gflops else ""
            frac = f" ({b.compute_fraction * 100:.1f} %{peak})" if b.compute_fraction is not None else ""
            rows.append(("FP32 achieved", f"{b.achieved_gflops:.0f} GFLOP/s{frac}"))
        if b.arithmetic_intensity is not None:
            ridge = f" (ridge point {b.ridge:.1f})" if b.ridge else ""
            rows.append(("intensity", f"{b.arithmetic_intensity:.2f} FLOP per DRAM byte{ridge}"))
        occ = []
        if p.achieved_occupancy is not None:
            occ.append(f"{p.achieved_occupancy:.1f} % achieved")
        if p.theoretical_occupancy is not None:
            occ.append(f"{p.theoretical_occupancy:.1f} % theoretical")
        if occ:
            limited = (f", limited by {p.occupancy_limiter}" if p.occupancy_limiter
                       and (p.theoretical_occupancy or 100.0) < 100.0 else "")
            rows.append(("occupancy", " / ".join(occ) + limited))
        if p.grid_blocks is not None:
            waves = f", {p.waves:.2f} waves" if p.waves is not None else ""
            rows.append(("launch", f"{p.grid_blocks} blocks x {p.block_threads} threads{waves}"))
        if c is not None:
            tensor = f", tensor {c.tensor_gflops / 1e3:.0f} TFLOP/s ({c.tensor_kind})" if c.tensor_gflops else ""
            rows.append(("ceilings", f"copy {c.bandwidth_gbps:.0f} GB/s, FP32 {(c.fp32_gflops or 0) / 1e3:.1f} "
                                     f"TFLOP/s{tensor}, measured on this GPU"))
        con.print(f"speed of light ({src}, {dur}):")
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            con.print(f"  {k:<{width}}  {v}")
        for n in kp.notes:
            con.print(f"[dim]note: {n}[/]")
    for n in r.notes:
        print(f"note: {n}", file=sys.stderr)
    for f in r.findings:
        print(_format(f))
    total = r.seconds.get("total", 0.0)
    print(f"{len(r.findings)} finding{'s' if len(r.findings) != 1 else ''} for `{r.kernel}` in {total:.1f} s.",
          file=sys.stderr)
