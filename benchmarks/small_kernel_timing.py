"""A microsecond kernel's speedup by event timing, by CUDA-graph timing and by Nsight Compute (issue 14).

gelu at N = 2^18 (a few µs per launch) against two candidates: identical code (the truth is 1.0x) and a
block size of 128 instead of 256. Each ratio is measured with events around single cold launches (the default
since issue 28), with the same cold launches inside a CUDA graph (``graph=True``; before issue 28 this mode was
graph replays of back-to-back launches, now the hot figure), and by ``ncu``'s ``gpu__time_duration`` (7
launches each, alternating, caches warm and flushed). Run on the GPU machine:
``python benchmarks/small_kernel_timing.py --out OUT.json``; benchmarks/RESULTS.md has the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from warpforge.gpu.confirm import Side, judge, measure
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator
from warpforge.gpu.timing import TimingSettings

ROOT = Path(__file__).resolve().parents[1]


async def main_async(out: Path | None, repeats: int) -> list[dict[str, Any]]:
    text = (ROOT / "kernels" / "gelu.cu").read_text(encoding="utf-8").replace("size N = 1 << 25", "size N = 1 << 18")
    backend = Backend()
    rows: list[dict[str, Any]] = []
    try:
        modes = {"events": TimingSettings(max_seconds=1.0, graph_below_ms=0.0),
                 "graph": TimingSettings(max_seconds=1.0, graph=True)}
        evs = {m: Evaluator(ROOT / "kernels" / "gelu.cu", "gelu_forward", text=text, backend=backend,
                            settings=EngineSettings(timing=ts, sensitivity=False, recheck=False))
               for m, ts in modes.items()}
        for label, derive in (("identical", {"flags": ("-DWF_SAME=1",)}),
                              ("block 128", {"block": ("128",), "grid": ("cdiv(N, 128)",)})):
            for rep in range(repeats):
                row: dict[str, Any] = {"candidate": label, "repeat": rep}
                for mode, ev in evs.items():
                    cand = ev.original.derive(**derive, defines={"WF_REP": f"{mode}{rep}"})
                    e = await ev.evaluate(cand)
                    assert e.timing is not None and e.timing.speedup is not None, e.reason
                    sp = e.timing.speedup
                    row[mode] = {"ratio": sp.ratio, "low": sp.low, "high": sp.high, "mode": e.timing.mode,
                                 "baseline_us": e.timing.baseline.median * 1e3 if e.timing.baseline else None}
                    if mode == "graph":
                        base_b = await ev._baseline_built()
                        cand_b = await ev._build(cand)
                        sides = [Side(b.cubin, b.symbol, b.launches["spec"]) for b in (base_b, cand_b)]
                        for flush in (False, True):
                            b_ns, c_ns = measure(sides[0], sides[1], ev.layouts["spec"], flush=flush)
                            c = judge(sp, b_ns, c_ns, "flushed" if flush else "warm")
                            row["ncu_flushed" if flush else "ncu_warm"] = {
                                "ratio": c.ncu_ratio, "agrees_with_graph": c.agrees,
                                "baseline_us": sorted(c.baseline_us)[len(c.baseline_us) // 2]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for ev in evs.values():
            await ev.close()
        backend.close()
    if out is not None:
        out.write_text(json.dumps(rows, indent=2))
    print(f"{'candidate':<10} {'events':>24} {'graph':>24} {'ncu warm':>9} {'ncu flushed':>11}")
    for r in rows:
        def iv(d: dict[str, Any]) -> str:
            return f"{d['ratio']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"
        print(f"{r['candidate']:<10} {iv(r['events']):>24} {iv(r['graph']):>24} {r['ncu_warm']['ratio']:>9.3f} "
              f"{r['ncu_flushed']['ratio']:>11.3f}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    asyncio.run(main_async(args.out, args.repeats))


if __name__ == "__main__":
    main()
