"""Re-time the wide sample's winners with the independent harness (issue 28: "every reported speedup reproduces").

Why: WarpForge's speedups on other people's kernels are only worth what a second harness, sharing no timing code
with it, confirms. For every kernel a GPU sample run (``run_sample.sh``) improved, this applies the reported diff
to a copy of the unit (the variant file, spec lines included, exactly what the user would accept) and runs
``warpforge verify UNIT --candidate VARIANT --independent --json``: WarpForge verifies and times the pair again,
and ``gpu.independent`` re-times it (one launch per sample, L2 flushed before each by a memset and by a read,
CUDA events). The table compares the speedup the search claimed with both.

    python -m benchmarks.wide.retime prepare RESULTS_DIR SAMPLE_DIR OUT_DIR     (anywhere: applies the diffs)
    python -m benchmarks.wide.retime run OUT_DIR                                (GPU machine)
    python -m benchmarks.wide.retime table OUT_DIR

``RESULTS_DIR`` holds ``<id>.json`` (``optimize --json``) of a run; ``OUT_DIR/<id>/`` gets the unit's folder
copied and ``variant.cu`` beside the unit, and ``OUT_DIR/<id>/verify.json`` the verification.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: a re-timed ratio within this fraction of the claimed one agrees (issue 28: 3 %)
AGREE = 0.03


def prepare(results: Path, sample: Path, out: Path) -> list[str]:
    """One folder per improved kernel: the unit's folder and the variant made by applying the reported diff."""
    manifest = {e["id"]: e for e in json.loads((sample / "manifest.json").read_text())["entries"]}
    done: list[str] = []
    for f in sorted(results.glob("*.json")):
        if f.name.endswith(".bench.json"):
            continue
        try:
            d = json.loads(f.read_text())
        except ValueError:
            continue
        if not d.get("improved") or not d.get("diff"):
            continue
        rid = f.stem
        unit = sample / manifest[rid]["unit"] if rid in manifest else None
        if unit is None or not unit.is_file():
            print(f"{rid}: no unit in {sample}", file=sys.stderr)
            continue
        dest = out / rid
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(unit.parent, dest)
        variant = dest / ("variant" + unit.suffix)
        shutil.copyfile(dest / unit.name, variant)
        with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as p:
            p.write(d["diff"])
        proc = subprocess.run(["patch", "--silent", "--forward", str(variant), p.name], capture_output=True,
                              text=True, check=False)
        os.unlink(p.name)
        if proc.returncode != 0:
            print(f"{rid}: the diff does not apply: {proc.stdout.strip()} {proc.stderr.strip()}", file=sys.stderr)
            continue
        (dest / "claim.json").write_text(json.dumps({
            "id": rid, "unit": unit.name, "kernel": d.get("kernel"), "speedup": d.get("speedup"),
            "hot_speedup": d.get("hot_speedup"), "families": d.get("families")}, indent=2))
        done.append(rid)
    return done


def run(out: Path, seconds: float, shard: tuple[int, int] = (0, 1)) -> None:
    """On the GPU machine: verify and re-time every prepared pair, one after another (never side by side on one
    GPU); ``shard`` (k, n): only the k-th of every n pairs, for one process per GPU."""
    env = dict(os.environ)
    k, n = shard
    for i, claim_f in enumerate(sorted(out.glob("*/claim.json"))):
        if i % n != k:
            continue
        claim = json.loads(claim_f.read_text())
        d = claim_f.parent
        cmd = [sys.executable, "-m", "warpforge", "verify", str(d / claim["unit"]), "--kernel", claim["kernel"],
               "--candidate", str(d / ("variant" + Path(claim["unit"]).suffix)), "--independent", "--json",
               "--no-sanitize", "--seconds", f"{seconds:g}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
            (d / "verify.json").write_text(proc.stdout or json.dumps({"error": proc.stderr[-2000:]}))
            (d / "verify.log").write_text(proc.stderr)
        except subprocess.TimeoutExpired:
            (d / "verify.json").write_text(json.dumps({"error": "no answer in 300 s"}))
        print(f"{claim['id']} done", flush=True)


def rows(out: Path) -> list[dict[str, Any]]:
    got = []
    for claim_f in sorted(out.glob("*/claim.json")):
        claim = json.loads(claim_f.read_text())
        row: dict[str, Any] = {"id": claim["id"], "kernel": claim["kernel"], "claimed": claim["speedup"],
                               "families": claim.get("families")}
        v = claim_f.parent / "verify.json"
        try:
            res = json.loads(v.read_text()) if v.is_file() else {}
        except ValueError:
            res = {"error": v.read_text()[-300:]}
        row["status"] = res.get("status", res.get("error", "not run"))
        row["warpforge"] = res.get("speedup")
        ind = res.get("independent") or {}
        row["independent_memset"] = ind.get("written_ratio")
        row["independent_read"] = ind.get("ratio")
        row["note"] = ind.get("note") or ""
        c, i = row["claimed"], row["independent_memset"]
        row["within_3pct"] = bool(c and i and abs(i / c - 1.0) <= AGREE)
        got.append(row)
    return got


def table(out: Path) -> str:
    rs = rows(out)
    lines = [f"{'id':<6}{'kernel':<34}{'claimed':>9}{'again':>9}{'indep.':>9}{'read':>9}{'ind/claim':>10}  status"]
    for r in rs:
        def x(v: Any) -> str:
            return f"{v:.3f}" if isinstance(v, (int, float)) else "-"
        ratio = (r["independent_memset"] / r["claimed"]) if r["independent_memset"] and r["claimed"] else None
        lines.append(f"{r['id']:<6}{r['kernel'][:33]:<34}{x(r['claimed']):>9}{x(r['warpforge']):>9}"
                     f"{x(r['independent_memset']):>9}{x(r['independent_read']):>9}{x(ratio):>10}  {r['status']}")
    timed = [r for r in rs if r["independent_memset"] and r["claimed"]]
    if timed:
        def geo(k: str) -> float:
            return math.exp(sum(math.log(r[k]) for r in timed) / len(timed))
        lines.append(f"{len(timed)} re-timed: geomean claimed {geo('claimed'):.3f}x, independent (memset flush) "
                     f"{geo('independent_memset'):.3f}x; within 3 %: {sum(r['within_3pct'] for r in timed)} of "
                     f"{len(timed)}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("results", type=Path)
    p.add_argument("sample", type=Path)
    p.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--seconds", type=float, default=2.0)
    r.add_argument("--shard", default="0/1", help="K/N: the K-th of every N pairs (one process per GPU)")
    t = sub.add_parser("table")
    t.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.cmd == "prepare":
        print("\n".join(prepare(args.results, args.sample, args.out)))
    elif args.cmd == "run":
        k, _, n = args.shard.partition("/")
        run(args.out, args.seconds, (int(k), int(n)))
    else:
        print(table(args.out))


if __name__ == "__main__":
    main()
