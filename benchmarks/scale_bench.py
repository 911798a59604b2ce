"""Problem-scale benchmark (issue 17): how soon a real-sized kernel's original is verified and timed, and what a
whole optimize run does within its time budget.

For each case (a kernel of ``kernels/`` with its sizes replaced, e.g. the row softmax at 8192 x 50257, two
1.65 GB buffers), in a fresh process and a fresh backend (nothing reused but the compiler's disk cache):

1. **time to the baseline**: from creating the evaluator to the original's verified timing (worker start,
   build, inputs, 1 seed checked against itself, determinism, timing), with the evaluation's own time split;
2. **a whole optimize run** (``warpforge optimize --time T --json``, offline rules): wall time against the
   requested budget, candidates evaluated, the best speedup.

Usage (on the GPU machine): ``python benchmarks/scale_bench.py --out DIR [--time 60] [--cases softmax_big,...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

#: name -> (file in kernels/, kernel, sizes to set)
CASES: dict[str, tuple[str, str, dict[str, str]]] = {
    "softmax_8192x50257": ("softmax.cu", "softmax_rows", {"B": "8192", "C": "50257"}),
    "saxpy_64MB": ("saxpy.cu", "saxpy", {"N": "1 << 24"}),
    "gelu_64MB": ("gelu.cu", "gelu_forward", {"N": "1 << 24"}),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sized_copy(case: str, folder: Path) -> tuple[Path, str]:
    """The kernel's file with its ``@warpforge size`` lines set to the case's sizes."""
    file, kernel, sizes = CASES[case]
    text = (ROOT / "kernels" / file).read_text(encoding="utf-8")
    for name, value in sizes.items():
        text, n = re.subn(rf"(@warpforge size {name} =)\s*[^\n]*", rf"\g<1> {value}", text)
        assert n == 1, f"{file}: no size {name}"
    out = folder / f"{case}.cu"
    out.write_text(text, encoding="utf-8")
    return out, kernel


def baseline_child(path: str, kernel: str) -> None:
    """In a fresh process: time from nothing to the original's verified timing."""
    t0 = time.perf_counter()
    from warpforge.gpu.evaluator import Backend, Evaluator

    t_import = time.perf_counter() - t0

    async def go() -> dict[str, Any]:
        backend = Backend()
        try:
            ev = Evaluator(path, kernel, backend=backend)
            e = await ev.baseline()
            wall = time.perf_counter() - t0
            return {"wall_s": wall, "import_s": t_import, "status": e.status, "reason": e.reason[:300],
                    "median_ms": e.timing.candidate.median if e.timing and e.timing.candidate else None,
                    "time_split": e.time_split, "compare": backend.compare_note,
                    "bytes": sum(a.nbytes for a in ev.layouts["spec"].args)}
        finally:
            await backend.aclose()

    print("RESULT " + json.dumps(asyncio.run(go())), flush=True)


def optimize_run(path: Path, kernel: str, seconds: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    with tempfile.TemporaryDirectory() as store:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "warpforge", "optimize", str(path), "-k", kernel, "--time",
                            str(seconds), "--budget", "400", "--store", store, "--json"], capture_output=True,
                           text=True, env=env, cwd=path.parent, timeout=seconds * 3 + 300)
        wall = time.perf_counter() - t0
    out: dict[str, Any] = {"wall_s": wall, "requested_s": seconds, "rc": p.returncode}
    try:
        data = json.loads(p.stdout)
    except json.JSONDecodeError:
        out["error"] = (p.stderr or p.stdout)[-1500:]
        return out
    nodes = (data.get("search") or {}).get("nodes", [])
    out["statuses"] = {}
    for n in nodes:
        out["statuses"][str(n.get("status"))] = out["statuses"].get(str(n.get("status")), 0) + 1
    out["evaluated"] = sum(v for k, v in out["statuses"].items() if k not in ("pending", "None"))
    out["best_speedup"] = data.get("speedup")
    out["stopped"] = data.get("stopped")
    out["job_seconds"] = data.get("seconds")
    out["notices"] = data.get("notices")
    hist = (data.get("search") or {}).get("history") or []
    # seconds from the job's start: the first entry is the baseline verified (after the baseline's profile)
    out["history"] = [[h.get("evaluations"), round(float(h.get("best_speedup") or 0), 3), h.get("seconds")]
                      for h in hist]
    evs = data.get("evaluations") or []
    out["verified"] = sum(1 for e in evs if e.get("verified"))
    out["partly_checked"] = sum(1 for e in evs if e.get("status") == "ok" and not e.get("verified"))
    out["abandoned"] = sum(1 for e in evs if e.get("abandoned"))
    # per evaluation: seconds, and of them build wait / GPU held / worker busy / timing (where the budget went)
    out["evaluations"] = [[e.get("family"), e.get("status"), e.get("verified"), e.get("speedup"), e.get("seconds"),
                           {k: (e.get("time_split") or {}).get(k) for k in ("build", "queue", "gpu", "worker",
                                                                              "timing")}] for e in evs]
    out["profile_seconds"] = (data.get("baseline_profile") or {}).get("seconds")
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="scale-out")
    p.add_argument("--time", type=float, default=60.0)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--no-optimize", action="store_true")
    p.add_argument("--baseline-child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.baseline_child:
        baseline_child(*a.baseline_child)
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            path, kernel = sized_copy(case, Path(tmp))
            log(f"{case}: time to the baseline ...")
            env = dict(os.environ)
            env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
            r = subprocess.run([sys.executable, __file__, "--baseline-child", str(path), kernel], capture_output=True,
                               text=True, env=env, timeout=900)
            line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
            res[case] = {"baseline": json.loads(line[7:]) if line else {"error": (r.stderr or r.stdout)[-1500:]}}
            log(f"{case}: {res[case]['baseline']}")
            if not a.no_optimize:
                log(f"{case}: optimize --time {a.time:g} ...")
                res[case]["optimize"] = optimize_run(path, kernel, a.time)
                log(f"{case}: {res[case]['optimize']}")
            (out / "scale.json").write_text(json.dumps(res, indent=1))
    for case, r in res.items():
        b = r["baseline"]
        o = r.get("optimize", {})
        print(f"{case:22s} baseline {b.get('wall_s', float('nan')):6.2f} s ({b.get('status')}, "
              f"{b.get('median_ms')} ms)  optimize wall {o.get('wall_s', float('nan')):6.1f}/{o.get('requested_s')} s "
              f"evaluated {o.get('evaluated')} best {o.get('best_speedup')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
