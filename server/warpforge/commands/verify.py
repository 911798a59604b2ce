"""``warpforge verify FILE --kernel K --candidate VARIANT.cu [--json]``: is a hand-written variant right, and
faster?

The variant file holds a kernel of the same name (and any new device helpers it needs); only its device
code is kept (host code and includes off the toolkit list are dropped and listed on stderr). It goes through
the whole evaluation: guards, build, differential checks against the original for every seed at the spec
size and the perturbed size, interleaved timing, a re-check with fresh inputs and, when it is faster,
compute-sanitizer. The report lists the evidence per seed and size. Neither file is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from ..cuda import KernelNotFound
from ..cuda.candidate import candidate_from_variant
from ..exitcodes import CliError, ExitCode
from ..gpu.evaluator import Backend, EngineSettings, Evaluator
from ..gpu.reports import Evaluation
from ..gpu.timing import TimingSettings
from ..spec import build_spec
from . import inputs
from .bench import require_gpu, run_with_progress
from .inputs import load_file, pick_kernel


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check a hand-written variant of a kernel against the original and time it")
    p.add_argument("file", metavar="FILE", help="the original .cu file")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--candidate", "-c", required=True, metavar="VARIANT.cu",
                   help="a file with a kernel of the same name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--device", type=inputs.index_int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--no-sanitize", action="store_true", help="skip compute-sanitizer on a faster variant")
    p.add_argument("--seconds", type=inputs.positive_float, default=2.0, help="timing budget in seconds (default 2)")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    # Both files and the spec are checked before the GPU is asked for: bad input is exit 2 on any machine.
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel, src)
    spec = build_spec(src, model, kernel, args.file, inputs.launch_limits(None, args.device))
    variant = inputs.read_source(args.candidate)
    try:
        cand = candidate_from_variant(src.text, variant.text, kernel.name)
    except (KernelNotFound, KeyError) as e:
        raise CliError(f"{args.candidate}: {e.args[0]}") from e
    for d in cand.dropped:  # host code and off-list includes are never compiled: say so
        print(f"{args.candidate}: dropped {d}", file=sys.stderr)
    require_gpu("verify")
    settings = EngineSettings(timing=TimingSettings(max_seconds=args.seconds))

    async def job(progress: Callable[[str, str], None]) -> Evaluation:
        ev = Evaluator(args.file, kernel.name, text=src.text, spec=spec, settings=settings,
                       backend=Backend(devices=(args.device,)), progress=progress)
        try:
            result = await ev.evaluate(cand)
            if result.ok and (result.speedup or 0.0) > 1.0 and not args.no_sanitize:
                result = await ev.sanitize(cand)
            return result
        finally:
            await ev.close()

    outcome = run_with_progress("verify", f"verifying {kernel.name}", job, quiet=args.json)
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2, default=str))
    else:
        _print(outcome, args.candidate)
    return ExitCode.OK if outcome.ok else ExitCode.FAILED


def _print(e: Evaluation, variant: str) -> None:
    con = Console(highlight=False, soft_wrap=True)
    con.print(f"[bold]{e.kernel}[/] from {variant} on {e.gpu or 'the GPU'}")
    if e.correctness.runs:
        table = Table(show_edge=False)
        for col in ("size", "seed", "check", "buffers", "max abs err", "max rel err", "verdict"):
            table.add_column(col)
        for r in e.correctness.runs:
            names = ", ".join(b.name for b in r.buffers)
            verdict = "[green]match[/]" if r.ok else "[red]MISMATCH[/]"
            table.add_row(f"{r.variant} ({r.sizes})", str(r.seed), r.purpose, names,
                          f"{max((b.max_abs for b in r.buffers), default=0.0):.3g}",
                          f"{max((b.max_rel for b in r.buffers), default=0.0):.3g}", verdict)
        con.print(table)
        for r in e.correctness.runs:
            for b in r.buffers:
                if not b.ok:
                    con.print(f"  [red]{r.variant} seed {r.seed}[/]: {b.summary()}")
            for g in r.guard:
                con.print(f"  [red]{r.variant} seed {r.seed}[/]: {g}")
    det = e.correctness.determinism
    if det is not None:
        same = all(b.ok for b in det)
        con.print(f"determinism: two runs on the same inputs {'agree' if same else 'DIFFER'} "
                  f"(max abs diff {max((b.max_abs for b in det), default=0.0):.3g})")
    if e.correctness.timed_outputs:
        same = all(b.ok for b in e.correctness.timed_outputs)
        con.print(f"outputs of the timed launches: {'match' if same else 'DIFFER'}")
    t = e.timing
    if t is not None and t.candidate is not None and t.baseline is not None:
        con.print(f"timing ({t.mode}): original {t.baseline.median * 1e3:.2f} µs, candidate "
                  f"{t.candidate.median * 1e3:.2f} µs"
                  + (f", speedup {t.speedup.text()}" if t.speedup else ""))
    if e.sanitizer is not None:
        for tool in e.sanitizer.tools:
            state = "clean" if tool.ok and tool.ran else ("not run" if not tool.ran else f"{tool.errors} error(s)")
            detail = f" — {tool.first_error}" if tool.first_error else ""
            con.print(f"compute-sanitizer {tool.tool}: {state}{detail}")
    for n in e.notes:
        con.print(f"[dim]note: {n}[/]")
    color = "green" if e.ok else "red"
    con.print(f"[bold {color}]{e.headline()}[/]")
