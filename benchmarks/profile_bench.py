"""Wall time of ``warpforge profile`` per reference kernel (default sections), and the class it finds.

Run on the GPU machine: ``python benchmarks/profile_bench.py --out DIR``. Each kernel is profiled by the
command line in a fresh process, as a user would run it (so the time includes Python start-up, the
static analysis, the build, Nsight Compute and its exports); the GPU's ceilings are measured by the first
run and read from the cache afterwards (the first row says so). Prints a Markdown table; writes each
run's ``--json`` output to DIR.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="profile-bench")
    p.add_argument("files", nargs="*")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(f) for f in args.files] or sorted((ROOT / "kernels").glob("*.cu"))
    rows: list[tuple[str, str, str, float, dict[str, float], list[str], str]] = []
    for f in files:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "warpforge", "profile", str(f.relative_to(ROOT)), "--json"],
                              capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        (out / f"{f.stem}.json").write_text(proc.stdout)
        (out / f"{f.stem}.err").write_text(proc.stderr)
        try:
            rep = json.loads(proc.stdout)
        except ValueError:
            rows.append((f.stem, "?", "", wall, {}, [], f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"))
            continue
        prof = rep.get("profile") or {}
        b = prof.get("bottleneck") or {}
        found = sorted({x["code"] for x in rep.get("findings", []) if x["code"].startswith("WF2")})
        rows.append((f.stem, rep.get("class") or "?", b.get("unit", ""), wall, rep.get("seconds", {}), found,
                     rep.get("notice") or ""))
    print("| kernel | class | wall s | static | build | ncu | export | ceilings | WF2xx findings |")
    print("|---|---|---|---|---|---|---|---|---|")
    for stem, cls, unit, wall, s, found, note in rows:
        u = f" ({unit})" if unit else ""
        stages = " | ".join(f"{s[k]:.1f}" if k in s else "-" for k in ("static", "build", "ncu", "export", "ceilings"))
        print(f"| {stem} | {cls}{u} | {wall:.1f} | {stages} | {', '.join(found)}{' ' + note if note else ''} |")
    (out / "summary.json").write_text(json.dumps([
        {"kernel": r[0], "class": r[1], "unit": r[2], "wall_s": round(r[3], 2), "seconds": r[4], "codes": r[5],
         "notice": r[6]} for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
