"""``warpforge verify FILE --kernel K --candidate VARIANT.cu [--json]``: is a hand-written variant right, and
faster?

The variant file holds a kernel of the same name (and any new device helpers it needs); only its device
code is kept (host code and includes off the toolkit list are dropped and listed on stderr). It goes through
the whole evaluation: guards, build, differential checks against the original for every seed at the spec
size and the perturbed size, interleaved timing, a re-check with fresh inputs and, when it is faster,
compute-sanitizer. The report lists the evidence per seed and size. Neither file is written.

Timing is cold (L2 flushed and outputs reset before every launch) and the back-to-back ("hot") figure is
measured too, shown where it differs by more than the interval. ``--independent`` re-times both kernels with
a second, minimal harness that shares no timing code with WarpForge (``gpu.independent``: one launch per
sample, L2 flushed and every buffer reset before each, CUDA events) and prints both numbers.

The variant is built and launched the way its own file says (``spec.variant``): its ``// @warpforge launch``
and ``tune`` lines and its ``// warpforge: compile with ...`` / ``launch with ...`` comments, where they
differ from the original's spec. The report starts with the launch it used and where that came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.table import Table

from ..compiler.build import flag_problem
from ..compiler.toolchain import define_problem
from ..cuda import KernelNotFound
from ..cuda.candidate import Candidate, candidate_from_variant
from ..exitcodes import CliError, ExitCode
from ..gpu import independent, surgery
from ..gpu.confirm import Side
from ..gpu.evaluator import Backend, EngineSettings, Evaluator
from ..gpu.independent import IndependentTiming
from ..gpu.inputs import Layout
from ..gpu.reports import Evaluation
from ..gpu.timing import TimingSettings
from ..spec import KernelSpec, build_spec
from ..spec.variant import read_variant_directives
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
    p.add_argument("--independent", action="store_true",
                   help="also re-time both kernels with a second, minimal harness (one launch per sample, L2 "
                        "flushed before each, CUDA events) that shares no timing code with WarpForge")
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
    cand, used = with_variant_directives(cand, spec, variant.text, args.candidate)
    require_gpu("verify")
    # one measurement asked for: timed to the target even when slower (no early abandonment)
    # ... with the back-to-back figure beside the cold one
    settings = EngineSettings(timing=TimingSettings(max_seconds=args.seconds, hot=True), abandon_slower=False)
    sides: list[tuple[Side, Side, Layout, int]] = []

    async def job(progress: Callable[[str, str], None]) -> Evaluation:
        ev = Evaluator(args.file, kernel.name, text=src.text, spec=spec, settings=settings,
                       backend=Backend(devices=(args.device,)), progress=progress)
        try:
            result = await ev.evaluate(cand)
            if result.ok and (result.speedup or 0.0) > 1.0 and not args.no_sanitize:
                result = await ev.sanitize(cand)
            if args.independent and result.ok:
                sides.append(await ev.launch_sides(cand))
            return result
        finally:
            await ev.close()  # the workers leave the GPU to the independent harness

    outcome = run_with_progress("verify", f"verifying {kernel.name}", job, quiet=args.json)
    second: IndependentTiming | None = None
    if args.independent:
        if sides:
            base, var, layout, seed = sides[0]
            second = independent.measure(base, var, layout, seed=seed, device=args.device, seconds=args.seconds)
        else:
            second = IndependentTiming(note=f"the variant is not ok ({outcome.status}): nothing to re-time")
    if args.json:
        extra = {"independent": second.to_json()} if second is not None else {}
        print(json.dumps({**outcome.to_json(), "launch": used.to_json(), **extra}, indent=2, default=str))
    else:
        _print(outcome, args.candidate, used, second)
    return ExitCode.OK if outcome.ok else ExitCode.FAILED


@dataclass(frozen=True)
class UsedLaunch:
    """The launch and build a variant was verified with, at the spec size, and where each part came from."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    defines: dict[str, str]
    flags: tuple[str, ...]
    #: "the variant's `@warpforge launch` (v.cu:3)" or "the original's spec (k.cu:5)"
    launch_from: str
    build_from: str

    def text(self) -> str:
        smem = f", {self.smem} bytes of dynamic shared memory" if self.smem else ""
        build = " ".join([*(f"-D{k}={v}" for k, v in self.defines.items()), *self.flags])
        return (f"launch: grid {self.grid} block {self.block}{smem}, from {self.launch_from}"
                + (f"; build: {build}, from {self.build_from}" if build else ""))

    def to_json(self) -> dict[str, Any]:
        return {"grid": list(self.grid), "block": list(self.block), "smem": self.smem, "defines": self.defines,
                "flags": list(self.flags), "launch_from": self.launch_from, "build_from": self.build_from}


def with_variant_directives(cand: Candidate, spec: KernelSpec, variant_text: str,
                            variant_file: str) -> tuple[Candidate, UsedLaunch]:
    """``cand`` with the launch, tunable values and flags its own file gives (those that differ from the
    original's spec), and the launch it will run with at the spec size. A launch the spec cannot resolve or a
    flag WarpForge does not pass on is a ``CliError`` now (exit 2), before a GPU is asked for."""
    d = read_variant_directives(variant_text, cand.kernel, variant_file)
    changes: dict[str, Any] = {}
    if d.launch is not None:
        if d.launch.grid != spec.launch.grid:
            changes["grid"] = d.launch.grid
        if d.launch.block != spec.launch.block:
            changes["block"] = d.launch.block
        if d.launch.smem != spec.launch.smem:
            changes["smem"] = d.launch.smem
    base = {t.name: t.values[0] for t in spec.tunables}
    defines = {**dict(cand.defines), **{k: v for k, v in d.defines.items() if base.get(k) != v}}
    for name, value in defines.items():
        if (why := define_problem(name, value)) is not None:
            raise CliError(f"{variant_file}:{d.lines.get(f'define {name}', 0)}: {why}")
    if defines != dict(cand.defines):
        changes["defines"] = defines
    if d.flags:
        if (why := flag_problem(list(d.flags))) is not None:
            raise CliError(f"{variant_file}:{d.lines.get('flags', 0)}: {why}")
        changes["flags"] = (*cand.flags, *d.flags)
    cand = replace(cand, **changes) if changes else cand
    layout = Layout.from_resolved(spec.resolve(), "spec")  # the original's: a variant computes the same problem
    try:
        grid, block, smem = surgery.launch(spec, layout, cand, "spec")
    except surgery.Rejected as e:
        where = d.lines.get("launch")
        raise CliError(f"{variant_file}:{where}: {e.reason}" if where else f"{variant_file}: {e.reason}") from e
    if cand.overrides_launch:
        launch_from = f"the variant's own launch ({variant_file}:{d.lines['launch']})"
    else:
        launch_from = (f"the original's spec ({spec.file}:{spec.launch.line})" if spec.launch.line is not None
                       else f"the original's spec ({spec.launch.source} from {spec.file})")
    changed = sorted(k for k in d.lines if k.startswith("define ") and k[7:] in defines) + (
        ["flags"] if d.flags else [])
    build_from = (f"the variant's own lines ({', '.join(f'{variant_file}:{d.lines[k]}' for k in changed)})"
                  if changed else "the original's spec")
    used = UsedLaunch((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), smem,
                      surgery.defines(spec, cand), tuple(cand.flags), launch_from, build_from)
    return cand, used


def _print(e: Evaluation, variant: str, used: UsedLaunch, second: IndependentTiming | None = None) -> None:
    con = Console(highlight=False, soft_wrap=True)
    con.print(f"[bold]{e.kernel}[/] from {variant} on {e.gpu or 'the GPU'}")
    con.print(used.text(), markup=False)
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
        con.print(f"timing, cold ({t.mode}): original {t.baseline.median * 1e3:.2f} µs, candidate "
                  f"{t.candidate.median * 1e3:.2f} µs"
                  + (f", speedup {t.speedup.text()}" if t.speedup else ""), markup=False)
        if t.hot is not None:
            differs = "differs from the cold figure by more than its interval" if t.hot_differs else \
                "within the cold interval"
            con.print(f"timing, {t.hot.text()}; original {t.hot.baseline.median * 1e3:.2f} µs, candidate "
                      f"{t.hot.candidate.median * 1e3:.2f} µs ({differs})", markup=False)
    if second is not None:
        for line in second.lines():
            con.print(line, markup=False)
        if t is not None and t.speedup is not None:
            for what, ratio in (("L2 read", second.ratio), ("L2 written", second.written_ratio)):
                if ratio is not None:
                    con.print(f"WarpForge {t.speedup.ratio:.3f}x, independent ({what}) {ratio:.3f}x: "
                              f"{(ratio / t.speedup.ratio - 1.0) * 100:+.1f} %", markup=False)
    if e.sanitizer is not None:
        for tool in e.sanitizer.tools:
            state = "clean" if tool.ok and tool.ran else ("not run" if not tool.ran else f"{tool.errors} error(s)")
            detail = f" — {tool.first_error}" if tool.first_error else ""
            con.print(f"compute-sanitizer {tool.tool}: {state}{detail}")
    for n in e.notes:
        con.print(f"[dim]note: {n}[/]")
    color = "green" if e.ok else "red"
    con.print(f"[bold {color}]{e.headline()}[/]")
