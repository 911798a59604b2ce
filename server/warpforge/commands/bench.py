"""``warpforge bench FILE [--kernel K] [--json]``: time a kernel as it is, on the GPU.

Reports the median time with its spread over adaptive repetitions (cold: L2 flushed and outputs reset before
each launch; the back-to-back "hot" time, L2 warm, beside it), and what it
achieves against the spec's ``bytes`` and ``flops``, next to the GPU's measured peak copy bandwidth, so the
number says how far the kernel is from its memory roofline. The kernel's outputs are also checked for
determinism and for elements it never writes, since a benchmark of a kernel that does not do its job is
not worth reading.

``require_gpu`` and ``run_with_progress`` are shared with ``verify``: both GPU commands check their input
first (exit 2), then print the same one line when there is no GPU (exit 3, "cannot run here"), and show
progress the same way (on stderr, so ``--json`` stays clean).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..compiler.toolchain import ToolMissing
from ..exitcodes import CliError, ExitCode
from ..gpu.evaluator import EngineSettings, Evaluator, GpuUnavailable
from ..gpu.reports import Evaluation
from ..gpu.supervisor import gpu_unavailable_reason, no_gpu_message
from ..gpu.timing import TimingSettings
from ..spec import build_spec
from . import inputs
from .inputs import load_file, pick_kernel

T = TypeVar("T")


def require_gpu(command: str) -> None:
    """Fail with one clear line (exit 3, "cannot run here") when this machine cannot run GPU work."""
    why = gpu_unavailable_reason()
    if why is not None:
        raise CliError(no_gpu_message(command, why), ExitCode.UNAVAILABLE)


def run_with_progress(command: str, title: str, job: Callable[[Callable[[str, str], None]], Coroutine[Any, Any, T]],
                      quiet: bool) -> T:
    """Run ``job(progress_callback)`` on an event loop, showing a spinner with the current stage."""
    console = Console(stderr=True)
    try:
        if quiet or not console.is_terminal:
            return asyncio.run(job(lambda _cid, _stage: None))
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True) as progress:
            task = progress.add_task(title, total=None)

            def update(cid: str, stage: str) -> None:
                progress.update(task, description=f"{title}: {stage} [dim]({cid})[/]")

            return asyncio.run(job(update))
    except GpuUnavailable as e:
        raise CliError(no_gpu_message(command, str(e)), ExitCode.UNAVAILABLE) from e
    except ToolMissing as e:
        raise CliError(str(e), ExitCode.UNAVAILABLE) from e


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time a kernel as it is on the GPU (median, spread, GB/s, GFLOP/s)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--device", type=inputs.index_int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--seconds", type=inputs.positive_float, default=2.0, help="timing budget in seconds (default 2)")
    p.add_argument("--graph", action="store_true",
                   help="time the cold launches inside a CUDA graph (events around each launch in the graph) "
                        "instead of on the stream")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel, src)
    spec = build_spec(src, model, kernel, args.file, inputs.launch_limits(None, args.device))
    require_gpu("bench")
    # one measurement asked for: timed to the target even when slower (no early abandonment)
    settings = EngineSettings(timing=TimingSettings(max_seconds=args.seconds, graph=args.graph, hot=True),
                              abandon_slower=False)

    async def job(progress: Callable[[str, str], None]) -> Evaluation:
        from ..gpu.evaluator import Backend

        ev = Evaluator(args.file, kernel.name, text=src.text, spec=spec, settings=settings,
                       backend=Backend(devices=(args.device,)), progress=progress)
        try:
            return await ev.baseline()
        finally:
            await ev.close()

    e = run_with_progress("bench", f"benchmarking {kernel.name}", job, quiet=args.json)
    if args.json:
        print(json.dumps(_result(e), indent=2))
    else:
        _print(e)
    return ExitCode.OK if e.status in ("ok", "suspicious") else ExitCode.FAILED


def _result(e: Evaluation) -> dict[str, Any]:
    t = e.timing
    out: dict[str, Any] = {"kernel": e.kernel, "status": e.status, "reason": e.reason, "gpu": e.gpu,
                           "driver": e.driver, "notes": e.notes}
    if t is not None and t.candidate is not None:
        s = t.candidate
        out.update(
            median_ms=s.median, p25_ms=s.p25, p75_ms=s.p75, spread=s.spread, cv=s.cv, reps=s.n, ci_rel=s.ci_rel,
            achieved_gbps=t.achieved_gbps, achieved_gflops=t.achieved_gflops, peak_gbps=t.peak_gbps,
            fraction_of_peak=(t.achieved_gbps / t.peak_gbps) if t.achieved_gbps and t.peak_gbps else None,
            bytes=t.bytes, flops=t.flops, sm_clock_mhz=t.sm_clock_mhz, mode=t.mode,
            hot_median_ms=t.hot.baseline.median if t.hot is not None else None,
            hot_launches=t.hot.launches if t.hot is not None else None,
        )
    if e.build is not None:
        out["build"] = {"registers": e.build.registers, "spill_stores": e.build.spill_stores,
                        "spill_loads": e.build.spill_loads, "shared_bytes": e.build.shared_bytes}
    return out


def _print(e: Evaluation) -> None:
    con = Console(highlight=False, soft_wrap=True)
    t = e.timing
    if t is None or t.candidate is None:
        con.print(f"[bold]{e.kernel}[/]: {e.status}: {e.reason}")
        return
    s = t.candidate
    con.print(f"[bold]{e.kernel}[/] on {e.gpu} (driver {e.driver}"
              + (f", SM clock {t.sm_clock_mhz} MHz" if t.sm_clock_mhz else "") + ")")
    table = Table(show_edge=False, show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("median", f"{s.median * 1e3:.2f} µs (cold: L2 flushed before each launch)")
    if t.hot is not None:
        h = t.hot.baseline
        table.add_row("back-to-back", f"{h.median * 1e3:.2f} µs (hot: {t.hot.launches} launches in a row, L2 warm; "
                                      f"median ±{h.ci_rel * 100:.2f} %)")
    table.add_row("spread", f"p25 {s.p25 * 1e3:.2f} µs, p75 {s.p75 * 1e3:.2f} µs (IQR {s.spread * 100:.2f} %), "
                            f"CV {s.cv * 100:.2f} %, median ±{s.ci_rel * 100:.2f} % (95 %), {s.n} repetitions")
    if t.achieved_gbps is not None:
        frac = f" ({t.achieved_gbps / t.peak_gbps * 100:.0f} % of the measured peak)" if t.peak_gbps else ""
        table.add_row("bandwidth", f"{t.achieved_gbps:.0f} GB/s{frac}")
    if t.achieved_gflops is not None:
        table.add_row("compute", f"{t.achieved_gflops:.1f} GFLOP/s")
    table.add_row("peak copy", f"{t.peak_gbps:.0f} GB/s (device-to-device copy, read + write)")
    table.add_row("timing", t.mode)
    if e.build is not None:
        table.add_row("build", f"{e.build.registers} registers, {e.build.spill_stores} B spill stores, "
                               f"{e.build.shared_bytes} B static shared memory")
    con.print(table)
    if e.status != "ok":
        con.print(f"[yellow]{e.status}[/]: {e.reason}")
    for n in e.notes:
        con.print(f"[dim]note: {n}[/]")
