"""Kernel Tuner on the reference kernels' launch-parameter space: the peer WarpForge is compared with.

For each kernels/ kernel, the space Kernel Tuner (``lang="PYCUDA"``, brute force) can search without
rewriting code: the block size of 1D launches (32…1024), the block shape of 2D launches, or the spec's
tunables (e.g. ``BLOCK_SIZE``). The grid follows the block the way the spec computes it. Reports per
kernel: the time of the kernel's own configuration and of the best one (both in Kernel Tuner's harness, so
its speedup is a ratio within one harness, like WarpForge's), configurations tried, and time to the best.

    python benchmarks/kt_suite.py --out kt.json          (GPU machine, `gpu` + `bench` extras)

Each kernel runs in its own subprocess so one failing configuration space cannot stop the suite.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))

from warpforge.spec import load_spec  # noqa: E402
from warpforge.spec.expr import parse as parse_expr  # noqa: E402

_CDIV = re.compile(r"^\s*(?:cdiv|ceil_div)\s*\((.+),\s*([A-Za-z_]\w*|\d+)\s*\)\s*$")
_ROUND_UP = re.compile(r"^\s*\(\s*(.+?)\s*\+\s*(\d+)\s*\)\s*/\s*(\d+)\s*$")


def _problem(expr: str, block: str, env: dict[str, Any]) -> int | None:
    """X of a grid expression ``cdiv(X, B)`` or ``(X + B-1) / B`` where B is the block expression."""
    m = _CDIV.match(expr)
    if m and m.group(2).strip() == block.strip():
        return int(parse_expr(m.group(1)).evaluate(env))
    m = _ROUND_UP.match(expr)
    if m and m.group(3) == block.strip() and int(m.group(2)) == int(m.group(3)) - 1:
        return int(parse_expr(m.group(1)).evaluate(env))
    return None


def plan(path: Path) -> dict[str, Any] | None:
    text = path.read_text()
    from warpforge.cuda import parse

    kernel = parse(text).kernels[0].name
    spec = load_spec(path, kernel)
    r = spec.resolve()
    env = dict(r.sizes)
    grid, block = spec.launch.grid, spec.launch.block
    tunables = {t.name: list(t.values) for t in spec.tunables}
    if len(block) == 1 and block[0] in tunables:
        x = _problem(grid[0], block[0], env)
        div: list[str] = [block[0]]
        if x is None and block[0] not in grid[0]:
            x, div = int(parse_expr(grid[0]).evaluate(env)), []  # one block per row: the grid is the problem
        if x is None:
            return None
        return {"kernel": kernel, "problem": [x], "params": {block[0]: [int(v) for v in tunables[block[0]]]},
                "block_names": [block[0]], "grid_div": div, "default": {block[0]: int(tunables[block[0]][0])}}
    if len(block) == 1:
        x = _problem(grid[0], block[0], env)
        if x is None:
            return None
        return {"kernel": kernel, "problem": [x], "params": {"block_size_x": [32, 64, 128, 256, 512, 1024]},
                "block_names": None, "default": {"block_size_x": int(parse_expr(block[0]).evaluate(env))}}
    if len(block) == 2 and len(grid) == 2:
        x = _problem(grid[0], block[0], env)
        y = _problem(grid[1], block[1], env)
        if x is None or y is None:
            return None
        return {"kernel": kernel, "problem": [x, y],
                "params": {"block_size_x": [8, 16, 32, 64, 128], "block_size_y": [1, 2, 4, 8, 16, 32]},
                "block_names": None, "restrictions": ["32 <= block_size_x * block_size_y <= 1024"],
                "default": {"block_size_x": int(block[0]), "block_size_y": int(block[1])}}
    return None


def run_one(path: Path) -> dict[str, Any]:
    """In a subprocess: tune one kernel with Kernel Tuner."""
    import numpy as np
    from kernel_tuner import tune_kernel

    p = plan(path)
    if p is None:
        return {"file": path.name, "skipped": "launch space not derivable from the spec"}
    spec = load_spec(path, p["kernel"])
    r = spec.resolve()
    rng = np.random.default_rng(0)
    np_types = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "uint32": np.uint32,
                "int64": np.int64, "uint64": np.uint64, "float16": np.float16}
    args: list[Any] = []
    for a in r.args:
        t = np_types.get(a.dtype, np.float32)
        if a.count is None:
            args.append(t(a.value))
            continue
        d = a.distribution
        if d is None or d.kind == "zeros":
            arr = np.zeros(a.count, dtype=t)
        elif d.kind == "int":
            arr = rng.integers(int(d.a), int(d.b), a.count).astype(t)
        elif d.kind == "normal":
            arr = rng.normal(d.a, d.b, a.count).astype(t)
        elif d.kind == "const":
            arr = np.full(a.count, d.a, dtype=t)
        else:
            arr = rng.uniform(d.a, d.b, a.count).astype(t)
        args.append(arr)
    problem = tuple(p["problem"]) if len(p["problem"]) > 1 else p["problem"][0]
    kwargs: dict[str, Any] = {"lang": "PYCUDA", "verbose": False, "strategy": "brute_force"}
    if p.get("block_names"):
        kwargs["block_size_names"] = p["block_names"]
        kwargs["grid_div_x"] = p.get("grid_div", p["block_names"])
    if p.get("restrictions"):
        kwargs["restrictions"] = p["restrictions"]
    src = path.read_text()
    t0 = time.perf_counter()
    results, envinfo = tune_kernel(p["kernel"], src, problem, args, p["params"], **kwargs)
    wall = time.perf_counter() - t0
    ok = [x for x in results if isinstance(x.get("time"), (int, float))]
    best_i = min(range(len(ok)), key=lambda i: ok[i]["time"])
    default = next((x for x in ok if all(x.get(k) == v for k, v in p["default"].items())), None)
    # time to best: compile + verification + benchmark time of the configurations up to the best one
    spent = 0.0
    for x in ok[: best_i + 1]:
        spent += sum(float(x.get(k, 0.0) or 0.0) for k in ("compile_time", "verification_time", "benchmark_time",
                                                            "framework_time", "strategy_time"))
    return {"file": path.name, "kernel": p["kernel"], "configs": len(ok), "wall_s": round(wall, 2),
            "default_ms": default["time"] if default else None, "best_ms": ok[best_i]["time"],
            "best": {k: ok[best_i][k] for k in p["params"]},
            "speedup": (default["time"] / ok[best_i]["time"]) if default else None,
            "seconds_to_best": round(spent / 1000.0, 2), "verified": False,
            "version": envinfo.get("kernel_tuner_version")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="kt_suite.json")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(Path(args.one))))
        return
    rows = []
    for f in sorted((ROOT / "kernels").glob("*.cu")):
        try:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one", str(f)], capture_output=True, text=True,
                                  timeout=240)
            process_s = time.perf_counter() - t0  # Kernel Tuner's whole run, start-up (imports, data) included
            line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            row = json.loads(line) if line.startswith("{") else {"file": f.name, "error": proc.stderr[-500:]}
            row["process_s"] = round(process_s, 2)
        except subprocess.TimeoutExpired:
            row = {"file": f.name, "error": "timeout"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
