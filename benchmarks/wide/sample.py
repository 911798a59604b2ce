"""The wide yardstick's GPU sample: a seeded random set of kernels with specs, self-contained, and its results.

Why: the CPU funnel says what the rules propose; only the GPU says whether it is faster. ``prepare`` picks a
seeded random sample of kernels the funnel found a spec for, and writes each as a unit of its own (the
kernel and what it needs, ``cuda.extract.standalone``, with its spec as an annotation block above it, the
project headers it includes copied beside it) into a folder outside the repository, plus the vendor headers
(cuBLAS, cuRAND) the units include, a ``manifest.json`` and, where the project wrote an optimized version of
the same operation, that version as a unit too (``author_versions``). The folder is what the GPU machine
gets (copy it to ``/work/main/.wt/widesample``, which is git-ignored), and ``benchmarks/wide/run_sample.sh``
runs ``warpforge optimize --json`` on it, one shard per GPU. ``aggregate`` reads the results: geomean
speedup, how often a structural family is in the winner, and best ÷ author's optimized version::

    PYTHONPATH=server python -m benchmarks.wide.sample prepare --funnel /work/outside/wide-out \\
        --corpus /work/outside/wide --out /work/outside/widesample --n 48 --seed 27
    python -m benchmarks.wide.sample aggregate /work/outside/widesample RESULTS_DIR
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_NUMBERED = re.compile(r"^(.*?)_?(\d+)$")
#: name words that mark a first, simple version and an author's tuned one (checked case-insensitively)
_NAIVE = ("naive", "simple", "basic", "baseline")
_TUNED = ("optimized", "opt", "tiled", "shared", "smem", "coalesced", "nobankconflicts", "fast", "warp", "unrolled")


def author_versions(names: Sequence[str]) -> dict[str, str]:
    """naive kernel -> the author's optimized version of the same operation, among the kernels of one file.

    The mapping, stated: (1) numbered versions of one stem (``layernorm_forward_kernel1`` .. ``kernel6`` in
    llm.c's ``dev/cuda``, ``reduce0`` .. ``reduce6`` in the vendor samples): the lowest number is the naive
    version, the highest the author's latest; (2) a name holding a naive word (``transposeNaive``,
    ``matmul_naive``) pairs with the name of the same stem holding a tuned word (``transposeCoalesced``,
    ``matmul_tiled``), the last such in file order.
    """
    out: dict[str, str] = {}
    groups: dict[str, list[tuple[int, str]]] = {}
    for n in names:
        m = _NUMBERED.match(n)
        if m and m.group(1):
            groups.setdefault(m.group(1).rstrip("_").lower(), []).append((int(m.group(2)), n))
    for members in groups.values():
        if len(members) >= 2:
            members.sort()
            out[members[0][1]] = members[-1][1]

    def stem(n: str, words: Sequence[str]) -> str | None:
        low = n.lower()
        for w in words:
            if w in low:
                return low.replace(w, "").strip("_")
        return None

    for n in names:
        s = stem(n, _NAIVE)
        if s is None or n in out:
            continue
        tuned = [t for t in names if t != n and stem(t, _TUNED) == s]
        if tuned:
            out[n] = tuned[-1]
    return out


@dataclass
class Entry:
    id: str
    #: "sample" (the random sample), "pair" (a naive kernel with an author's version, outside the random
    #: sample: only for best ÷ author) or "author" (an author's optimized version, timed only)
    role: str
    project: str
    origin: str
    commit: str
    file: str
    kernel: str
    unit: str  # relative to the sample folder
    proposed: list[str] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    serial_or_reduction: bool = False
    author: str = ""  # the id of the author's optimized version, when there is one
    #: the spec's guessed lines (``--guessed``: a spec "Add benchmark spec" completed); empty for an exact spec
    spec_guessed: list[str] = field(default_factory=list)


#: an include, quoted or angled: an angled one is copied too when the project has it (``<helper_cuda.h>``)
_QUOTED = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]', re.M)
_LINE = re.compile(r"^#line .*\n", re.M)


def _copy_headers(text: str, search: list[Path], dest: Path, budget: list[int], depth: int = 0) -> None:
    """Copy the includes of ``text`` found along ``search`` (the project's folders) under ``dest`` at the path as
    written; system and toolkit headers are not in those folders and stay includes."""
    if depth > 8:
        return
    for inc in _QUOTED.findall(text):
        target = dest / inc
        if target.exists() or ".." in Path(inc).parts:
            continue
        found = next((d / inc for d in search if (d / inc).is_file()), None)
        if found is None or found.stat().st_size > budget[0]:
            continue
        budget[0] -= found.stat().st_size
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, target)
        htext = found.read_text(encoding="utf-8", errors="replace")
        _copy_headers(htext, [found.parent, *search], target.parent, budget, depth + 1)


@functools.lru_cache(maxsize=64)
def _hosts(root: str) -> dict[str, list[Path]]:
    from .funnel import host_index

    return host_index(Path(root))


def write_unit(corpus: Path, rec: dict[str, Any], dest: Path, specs: Path | None) -> str:
    """The kernel's unit with its spec above it under ``dest``; returns "" or why it cannot be written."""
    from warpforge.compiler.build import compile_cubin
    from warpforge.cuda import parse
    from warpforge.cuda.extract import instantiation, standalone
    from warpforge.cuda.text import SourceText
    from warpforge.spec.resolve import load_spec

    from .funnel import hand_spec
    from .stages import include_dirs, infer_spec, start_in

    root = corpus / rec["project"]
    file = root / rec["file"]
    text = file.read_text(encoding="utf-8", errors="replace")
    src = SourceText(text)
    model = parse(src.data)
    kernel = next((k for k in model.kernels if k.name == rec["kernel"] and k.start_line + 1 == rec["line"]), None)
    if kernel is None:
        return "kernel not found again"
    hosts = {k: v for k, v in _hosts(str(root)).items() if k == kernel.name}
    hand = hand_spec(specs, rec["project"], rec["file"], kernel.name) if specs else None
    sp = infer_spec(root, file, text, src, model, kernel, hosts, hand)
    if sp.spec is None:
        return f"no spec: {sp.error}"
    if sp.text is not None:  # the kernel's file as the spec read it, without a host file joined for its launch
        src = SourceText(sp.build_text(text))
        model = parse(src.data)
        at = start_in(sp, text, kernel.span.start)
        kernel = next(k for k in model.kernels if k.name == rec["kernel"] and k.span.start == at)
    unit = _LINE.sub("", standalone(src, model, kernel, filename=str(file)))
    ktext = src.slice(kernel.span)
    at = unit.rfind(ktext)
    if at < 0:
        return "kernel text not found in its unit"
    unit = unit[:at] + sp.spec.to_annotation() + unit[at:]
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / file.name if file.suffix == ".cu" else dest / (file.stem + ".cu")
    path.write_text(unit, encoding="utf-8")
    _copy_headers(unit, [file.parent, *include_dirs(root, file)], dest, [2_000_000])
    try:
        load_spec(path, kernel.name)
    except Exception as e:  # a unit whose spec does not read back is not sampled
        shutil.rmtree(dest, ignore_errors=True)
        return f"the unit's spec does not read back: {type(e).__name__}: {e}"
    # the original must build alone, as the evaluator builds it, or the GPU run measures nothing; not cached:
    # the build cache is keyed by source, and this build depends on the headers copied beside the unit
    # a template gets code only when instantiated: with the spec's arguments, as the evaluator's unit does
    built = path.read_text(encoding="utf-8")
    if kernel.template_params and sp.spec.template_args:
        built += "\n" + instantiation(kernel, sp.spec.template_args) + "\n"
    res = compile_cubin(built, arch="sm_90", filename=str(path), use_cache=False)
    if not res.ok or res.resources_for(kernel.name) is None:
        fatal = next((ln.strip() for ln in res.log.splitlines() if "fatal error" in ln or ": error" in ln), "")
        shutil.rmtree(dest, ignore_errors=True)
        why = fatal.replace(str(dest) + "/", "") if fatal else (
            "no code for the kernel in the cubin" if res.ok else (res.log.strip().splitlines() or ["nvcc failed"])[-1])
        return f"the unit does not build alone: {why[:200]}"
    return ""


def prepare(funnel: Path, corpus: Path, out: Path, n: int, seed: int, specs: Path | None,
            vendor: Sequence[Path], every_kernel: bool = False, pairs: bool = True,
            guessed: bool = False) -> list[Entry]:
    """Write the sample folder. The pool is the kernels with a spec that have a serial loop over global memory
    or a reduction (the funnel's denominator: an empty kernel or a timing helper has nothing to optimize), or
    every kernel with a spec with ``every_kernel``; the pool is shuffled with ``seed`` and taken in order.
    With ``pairs``, every other naive kernel that has an author's optimized version (both with specs) is added
    as a "pair" entry: measured for best ÷ author, not counted in the random sample's numbers. Kernels whose
    spec the funnel had to guess (``spec_guessed``) join only with ``guessed``: their sizes are nobody's choice,
    so a sample measured without them stays comparable with earlier ones."""
    if vendor:  # the units' builds here find the vendor headers as the GPU run will (run_sample.sh: CPATH)
        os.environ["CPATH"] = os.pathsep.join([str(v) for v in vendor] + [os.environ.get("CPATH", "")]).rstrip(
            os.pathsep)
    recs = [json.loads(line) for line in (funnel / "kernels.jsonl").read_text().splitlines() if line]
    if not guessed:
        recs = [dict(r, spec=False) if r.get("spec_guessed") else r for r in recs]
    meta = json.loads((funnel / "meta.json").read_text())
    proj = {p["name"]: p for p in meta["projects"]}
    with_spec = [r for r in recs if r["spec"] and (every_kernel or r["serial_or_reduction"])]
    pool = ("every kernel with a spec" if every_kernel else
            "kernels with a spec and a serial loop over global memory or a reduction") + f" ({len(with_spec)})"
    rng = random.Random(seed)
    order = with_spec[:]
    rng.shuffle(order)
    out.mkdir(parents=True, exist_ok=True)
    by_file: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in recs:
        by_file.setdefault((r["project"], r["file"]), []).append(r)
    entries: list[Entry] = []
    skipped: list[str] = []

    def tuned_of(r: dict[str, Any]) -> dict[str, Any] | None:
        siblings = by_file[(r["project"], r["file"])]
        tuned = author_versions([s["kernel"] for s in siblings]).get(r["kernel"])
        return next((s for s in siblings if s["kernel"] == tuned and s["spec"]), None)

    def add(r: dict[str, Any], role: str, num: int) -> bool:
        eid = f"{role[0]}{num:03d}"
        why = write_unit(corpus, r, out / "units" / eid, specs)
        if why:
            skipped.append(f"{r['project']}/{r['file']}:{r['kernel']}: {why}")
            return False
        p = proj[r["project"]]
        e = Entry(eid, role, r["project"], p["origin"], p["commit"], r["file"], r["kernel"],
                  str(next((out / "units" / eid).glob("*.cu")).relative_to(out)), r["proposed"], r["built"],
                  r["serial_or_reduction"], spec_guessed=list(r.get("spec_guessed") or []))
        entries.append(e)
        ar = tuned_of(r)
        aid = f"a{eid}"
        if ar is not None and not write_unit(corpus, ar, out / "units" / aid, specs):
            entries.append(Entry(aid, "author", r["project"], p["origin"], p["commit"], ar["file"], ar["kernel"],
                                 str(next((out / "units" / aid).glob("*.cu")).relative_to(out))))
            e.author = aid
        return True

    taken: set[tuple[str, str, str]] = set()
    for r in order:
        num = sum(e.role == "sample" for e in entries)
        if num >= n:
            break
        if add(r, "sample", num):
            taken.add((r["project"], r["file"], r["kernel"]))
    if pairs:  # every naive kernel with a spec whose author's version has one too, beyond the random sample
        for r in recs:
            if (r["spec"] and (r["project"], r["file"], r["kernel"]) not in taken and tuned_of(r) is not None
                    and tuned_of(r) is not r):
                add(r, "pair", sum(e.role == "pair" for e in entries))
    for v in vendor:
        shutil.copytree(v, out / "vendor", dirs_exist_ok=True)
    (out / "manifest.json").write_text(json.dumps({"seed": seed, "n": n, "funnel": str(funnel), "pool": pool,
                                                   "entries": [asdict(e) for e in entries], "skipped": skipped},
                                                  indent=2) + "\n")
    (out / "ids.txt").write_text("".join(f"{e.id} {e.role} {e.kernel} {e.unit}\n" for e in entries))
    return entries


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(x, 1e-9)) for x in xs) / len(xs)) if xs else float("nan")


def _bench_ms(data: dict[str, Any]) -> float | None:
    """The median time of a ``warpforge bench --json`` result, whatever its field is called."""
    for k in ("median_ms", "ms", "time_ms", "median"):
        v = data.get(k)
        if isinstance(v, int | float):
            return float(v)
    t = data.get("timing")
    if isinstance(t, dict):
        return _bench_ms(t)
    ev = data.get("evaluation")
    return _bench_ms(ev) if isinstance(ev, dict) else None


def aggregate(sample: Path, results: Path) -> str:
    """The sample's numbers: geomean, structural winners, best ÷ author's version (markdown)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "server"))
    from warpforge.policy.rules import load

    structural = {f for f, r in load().items() if r.structural}
    man = json.loads((sample / "manifest.json").read_text())
    entries = {e["id"]: e for e in man["entries"]}
    rows: list[str] = []
    speedups: list[float] = []
    structural_wins = 0
    failed: list[str] = []
    ratios: list[str] = []
    for eid, e in entries.items():
        if e["role"] not in ("sample", "pair"):
            continue
        f = results / f"{eid}.json"
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            failed.append(f"{eid} {e['kernel']}: no result")
            continue
        sp = data.get("speedup")
        if not isinstance(sp, int | float) or sp <= 0:
            why = str(data.get("message") or data.get("headline") or "no speedup")[:100]
            failed.append(f"{eid} {e['kernel']}: {why}")
            continue
        sp = float(sp) if data.get("improved") else 1.0
        fams = [str(x) for x in data.get("families") or []]
        won = bool(structural & set(fams))
        if e["role"] == "sample":  # pairs are outside the random sample: only their best ÷ author is read
            structural_wins += won
            speedups.append(sp)
        author = ""
        if e.get("author"):
            tn = _bench_ms(_read(results / f"{eid}.bench.json"))
            ta = _bench_ms(_read(results / f"{e['author']}.bench.json"))
            if tn and ta:
                a_sp = tn / ta
                author = f"{sp / a_sp:.2f} (author {a_sp:.2f}x)"
                ratios.append(f"{e['kernel']}: best {sp:.2f}x, author {a_sp:.2f}x, best/author {sp / a_sp:.2f}")
        rows.append(f"| {eid} | {e['origin']} | {e['kernel']} | {sp:.2f} | {' + '.join(fams) or '-'} | "
                    f"{'yes' if won else 'no'} | {author or '-'} |")
    n = len(speedups)
    lines = ["# Wide yardstick: GPU sample", "",
             f"{n} kernels measured of {sum(e['role'] == 'sample' for e in entries.values())} sampled "
             f"(seed {man['seed']}, from {man.get('pool', '?')}); geomean speedup **{_geomean(speedups):.2f}x**; "
             "structural family in the winner: "
             f"**{structural_wins}/{n}**" + (f" ({100 * structural_wins / n:.0f} %)" if n else ""), "",
             "| id | project | kernel | speedup | winner's families | structural | best ÷ author |",
             "|---|---|---|---|---|---|---|", *rows, ""]
    if ratios:
        lines += ["Best ÷ author's optimized version:", "", *(f"- {r}" for r in ratios), ""]
    if failed:
        lines += ["Not measured:", "", *(f"- {f}" for f in failed), ""]
    return "\n".join(lines)


def _read(p: Path) -> dict[str, Any]:
    try:
        d = json.loads(p.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write the sample folder")
    p.add_argument("--funnel", type=Path, required=True, help="the funnel's --out folder (kernels.jsonl)")
    p.add_argument("--corpus", type=Path, required=True, help="the outside folder of projects")
    p.add_argument("--out", type=Path, required=True, help="the sample folder to write (outside the repository)")
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--specs", type=Path, default=None, help="hand-written spec blocks, as for the funnel")
    p.add_argument("--no-pairs", action="store_true",
                   help="do not add the naive kernels with an author's version outside the random sample")
    p.add_argument("--every-kernel", action="store_true",
                   help="sample every kernel with a spec (default: those with a serial loop or a reduction)")
    p.add_argument("--vendor-include", type=Path, action="append", default=[],
                   help="vendor headers to ship as vendor/ (the run script puts it on CPATH)")
    p.add_argument("--guessed", action="store_true",
                   help="also sample kernels whose spec the funnel guessed (default: exact specs only)")
    a = sub.add_parser("aggregate", help="summarize a run's results")
    a.add_argument("sample", type=Path)
    a.add_argument("results", type=Path, help="the folder with <id>.json (and <id>.bench.json) results")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        entries = prepare(args.funnel, args.corpus, args.out, args.n, args.seed, args.specs, args.vendor_include,
                          args.every_kernel, not args.no_pairs, args.guessed)
        size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
        print(f"{sum(e.role == 'sample' for e in entries)} sampled kernels, {sum(e.role == 'pair' for e in entries)} "
              "naive kernels with an author's version beside them, "
              f"{sum(e.role == 'author' for e in entries)} author versions, {size / 1e6:.1f} MB in {args.out}")
        return 0
    text = aggregate(args.sample, args.results)
    print(text)
    (args.results / "summary.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
