"""``warpforge selftest [--json]``: run the adversarial candidate suite on this machine's GPU.

Each candidate of ``warpforge.selftest`` cheats or fails in one way (skips elements, caches results,
reads the clock, races, drops a tail a tolerance would hide, hangs, ...); the table says which guard must
catch it. A user sees the verifier work on their own GPU, driver and toolkit, and a guard that does not hold
there is named. Exit codes: 0 every guard held, 1 at least one failed, 3 could not run here (no GPU; the
same "cannot run here" code every GPU command uses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from ..compiler.toolchain import ToolMissing
from ..exitcodes import CliError, ExitCode, error_json
from ..gpu.evaluator import Backend, GpuUnavailable
from ..gpu.supervisor import gpu_unavailable_reason
from ..install import install_hint
from ..selftest import CASES, Outcome, run_suite


def register(sub: Any) -> None:
    p = sub.add_parser("selftest", help="run the adversarial candidate suite on this GPU and show which guards held")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.set_defaults(func=cmd_selftest)


def _cannot_run(why: str, as_json: bool) -> int:
    msg = (f"warpforge selftest: cannot run here: {why}. The suite ({len(CASES)} adversarial candidates) needs an "
           f"NVIDIA GPU with its driver and pycuda ({install_hint('gpu')}).")
    if as_json:
        print(json.dumps({"ran": False, "reason": why, "cases": len(CASES),
                          "error": error_json(msg, ExitCode.UNAVAILABLE)}))
    print(msg, file=sys.stderr)
    return ExitCode.UNAVAILABLE


def cmd_selftest(args: argparse.Namespace) -> int:
    why = gpu_unavailable_reason()
    if why is not None:
        return _cannot_run(why, args.json)
    err = Console(stderr=True, highlight=False)

    def progress(o: Outcome) -> None:
        if not args.json:
            err.print(f"{'held' if o.held else 'FAILED'}  {o.file}")

    async def job() -> list[Outcome]:
        backend = Backend(devices=(args.device,))
        try:
            return await run_suite(backend, on_outcome=progress)
        finally:
            await backend.aclose()

    try:
        outcomes = asyncio.run(job())
    except GpuUnavailable as e:
        return _cannot_run(str(e), args.json)
    except ToolMissing as e:
        raise CliError(str(e), ExitCode.FAILED) from e
    failed = [o for o in outcomes if not o.held]
    if args.json:
        print(json.dumps({"ran": True, "held": len(outcomes) - len(failed), "failed": len(failed),
                          "cases": [o.to_json() for o in outcomes]}, indent=2))
    else:
        out = Console(highlight=False, soft_wrap=True)
        out.print(render(outcomes))
        out.print(f"{len(outcomes) - len(failed)} of {len(outcomes)} guards held")
    return ExitCode.OK if not failed else ExitCode.FAILED


def render(outcomes: list[Outcome]) -> Table:
    """The table a person reads: each candidate, the guard expected to catch it, the verdict, held or not."""
    table = Table(title="warpforge selftest: adversarial candidates")
    for col in ("candidate", "guard expected", "verdict", "held"):
        table.add_column(col)
    for o in outcomes:
        verdict = o.status if o.held else f"{o.status} (expected {o.expected}): {o.reason[:120]}"
        table.add_row(o.file, o.guard, verdict, "held" if o.held else "[red]FAILED[/]")
    return table
