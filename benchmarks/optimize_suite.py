"""`warpforge optimize` over the reference kernels on a GPU, with a fixed budget per kernel.

Records, per kernel: baseline and best times, verified speedup with its interval, % of the measured copy
bandwidth (memory-bound kernels, from the spec's compulsory bytes), evaluations, wall time, the winning
transformations. Run on the GPU machine (needs the `gpu` extra):

    python benchmarks/optimize_suite.py --seconds 40 --budget 32 --out results.json [--strategy beam|mcts]

No API key: the offline transformation library alone (the LLM policy is measured by llm_suite.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

_T_PROCESS = time.monotonic()  # the process's start-up (imports) counts on WarpForge's side of the KT comparison
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))

from warpforge.cuda import parse  # noqa: E402
from warpforge.gpu.evaluator import evaluator_for_job  # noqa: E402
from warpforge.policy.offline import offline_policy  # noqa: E402
from warpforge.profile.hints import analyze_source  # noqa: E402
from warpforge.search.engine import Budget  # noqa: E402
from warpforge.search.optimize import OptimizeRequest, optimize  # noqa: E402

IMPORT_S = time.monotonic() - _T_PROCESS


async def one(path: Path, strategy: str, budget: int, seconds: float, workspace: Path) -> dict[str, Any]:
    text = path.read_text()
    kernel = parse(text).kernels[0].name
    findings = list(analyze_source(str(path), text, kernels=[kernel]).findings)
    t0 = time.monotonic()
    # the budget counts from here, as a job's does (history times too): backend start, baseline, search, checks
    req = OptimizeRequest(str(path), text, kernel, strategy,
                          Budget(max_candidates=budget, wall_seconds=seconds, started=t0), findings=findings)
    ev = evaluator_for_job(req, workspace=workspace)
    try:
        out = await optimize(req, ev, policy=offline_policy(req))
    finally:
        await ev.close()
    wall = time.monotonic() - t0
    r = out.result
    best = r.best.evaluation
    timing = getattr(best, "timing", None)
    base_ms = timing.baseline.median if timing is not None and timing.baseline is not None else None
    best_ms = timing.candidate.median if timing is not None and timing.candidate is not None else None
    peak = timing.peak_gbps if timing is not None else 0.0
    gbps = timing.achieved_gbps if timing is not None else None
    sp = timing.speedup if timing is not None else None
    return {
        "kernel": kernel, "file": str(path.relative_to(ROOT)), "strategy": strategy,
        "baseline_ms": base_ms, "best_ms": best_ms if r.improved else base_ms,
        "speedup": r.best_speedup if r.improved else 1.0,
        "interval": [sp.low, sp.high] if sp is not None and r.improved else None,
        "families": list(r.best.families), "evaluations": r.evaluations, "wall_s": round(wall, 1),
        "stopped": r.stopped, "achieved_gbps": gbps, "peak_gbps": peak, "import_s": round(IMPORT_S, 2),
        "history": [[n, round(sp_, 4), round(t, 2)] for (n, sp_), t in zip(r.history, r.history_seconds, strict=False)],
        "pct_copy_bw": round(100 * gbps / peak, 1) if gbps and peak else None,
        "gpu": getattr(best, "gpu", ""), "headline": best.headline() if best is not None else "",
        "statuses": {s: sum(1 for n in r.nodes if n.status == s) for s in {n.status for n in r.nodes}},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--strategy", default="beam")
    ap.add_argument("--kernels", nargs="*", default=None)
    ap.add_argument("--out", default="optimize_suite.json")
    ap.add_argument("--workspace", type=Path, default=Path("/tmp/wf-optimize-suite"),
                    help="store and builds (one per process when several run side by side)")
    args = ap.parse_args()
    files = sorted((ROOT / "kernels").glob("*.cu"))
    if args.kernels:
        files = [f for f in files if f.stem in args.kernels]
    workspace = args.workspace
    rows = []
    for f in files:
        row = asyncio.run(one(f, args.strategy, args.budget, args.seconds, workspace))
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    speeds = [r["speedup"] for r in rows if r["speedup"]]
    geo = math.exp(sum(math.log(s) for s in speeds) / len(speeds)) if speeds else float("nan")
    print(f"\n{'kernel':<18}{'base ms':>9}{'best ms':>9}{'speedup':>9}{'%copyBW':>8}{'evals':>6}{'wall s':>7}  winner")
    for r in rows:
        pct = f"{r['pct_copy_bw']:.0f}" if r["pct_copy_bw"] else "-"
        base = f"{r['baseline_ms']:.4f}" if r["baseline_ms"] else "-"
        best = f"{r['best_ms']:.4f}" if r["best_ms"] else "-"
        print(f"{r['kernel']:<18}{base:>9}{best:>9}{r['speedup']:>8.2f}x{pct:>8}{r['evaluations']:>6}"
              f"{r['wall_s']:>7}  {'+'.join(r['families']) or '-'}")
    print(f"geomean speedup {geo:.2f}x over {len(rows)} kernels ({args.strategy}, budget {args.budget} candidates / "
          f"{args.seconds:.0f} s per kernel) on {rows[0]['gpu'] if rows else '?'}")


if __name__ == "__main__":
    main()
