"""`warpforge optimize` (offline rules only) over the kernel corpus on a GPU, against hand-optimized experts.

The reference kernels (``optimize_suite.py``) are the shapes the rules were written for; the corpus
(``benchmarks/corpus/*.cu``) is naive kernels written in many styles by others, so it measures how often the
rules apply to code they were not tuned on, and how close the result gets to what an expert writes
(``benchmarks/corpus/expert/<case>.cu``, a drop-in with the same kernel name and parameters).

Per case it records: which structural families produced a candidate that compiled (from the search tree:
evaluations whose build succeeded), the verified speedup with its 95 % interval, the winning families, the
winner's distance to the physical limit (memory-bound: the spec's compulsory ``bytes`` over the best time
against the measured copy bandwidth ``timing.peak_gbps``; compute-bound: the spec's ``flops`` over the best
time against the measured FP32 rate of ``profile.roofline``), and, where an expert exists, the expert
evaluated as a candidate by the same evaluator against the same naive original: verified (so a wrong
expert is flagged, not compared) and timed in the same harness, with ``expert_ms / best_ms`` (< 1: the
expert is faster than what WarpForge found). Run on the GPU machine (needs the ``gpu`` extra)::

    python benchmarks/corpus_suite.py --seconds 60 --budget 32 --out corpus_suite.json [--cases a b ...]

``--dry-run`` does everything up to the GPU on this machine (spec, findings, policy, proposals, builds of the
structural children and of the experts through the evaluator's build path, the spec's roofline numbers) and
writes the same JSON with the GPU fields empty: it checks a corpus and this script without a GPU.

No API key: the offline transformation library alone (the LLM policy is measured by llm_suite.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "server", ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import corpus_applicability as ca  # noqa: E402

from warpforge.cuda.candidate import Candidate, candidate_from_variant  # noqa: E402
from warpforge.gpu.evaluator import GpuUnavailable, evaluator_for_job  # noqa: E402
from warpforge.policy.offline import offline_policy  # noqa: E402
from warpforge.profile.hints import analyze_source  # noqa: E402
from warpforge.profile.limit import SpecWork, limit_reader, physical_limit, spec_work  # noqa: E402
from warpforge.profile.roofline import Ceilings, ceilings_for  # noqa: E402
from warpforge.search.engine import Budget  # noqa: E402
from warpforge.search.optimize import OptimizeRequest, optimize, prepare  # noqa: E402
from warpforge.search.tree import Node  # noqa: E402
from warpforge.spec.model import KernelSpec  # noqa: E402
from warpforge.spec.resolve import load_spec  # noqa: E402


@dataclass
class Options:
    seconds: float = 60.0
    budget: int = 32
    strategy: str = "beam"
    arch: str = ca.ARCH
    workspace: Path = Path("/tmp/wf-corpus-suite")
    ceilings: bool = True  # measure (once, cached per GPU) the FP32 peak for compute-bound cases
    sanitize_expert: bool = False


# ----------------------------------------------------------------------------------------------- the expert
_NAME = re.compile(r"\b([A-Za-z_]\w*)\b(?!\s*\()")


def expert_candidate(case_text: str, kernel: str, spec: KernelSpec, expert: Path) -> tuple[Candidate, list[str]]:
    """The expert file as a candidate of the naive case, and notes on what had to be adapted.

    Its text is reduced to device code the naive file lacks (``candidate_from_variant``: its own helpers,
    macros and includes come along, its host code does not), and its launch is its own spec's ``launch``
    line, because the expert is only correct with the launch it was written for. The evaluator evaluates
    launch expressions over the naive spec's sizes (that is what keeps the odd-size check meaningful), so a
    size only the expert's spec names is written into the expression as its number; the expert's tunables
    become defines at their first value.
    """
    etext = expert.read_text(encoding="utf-8")
    cand = candidate_from_variant(case_text, etext, kernel)
    espec = load_spec(expert, kernel, text=etext)
    notes: list[str] = []
    naive_sizes = spec.resolve().sizes
    expert_sizes = espec.resolve().sizes
    differ = sorted(n for n in naive_sizes.keys() & expert_sizes.keys() if naive_sizes[n] != expert_sizes[n])
    if differ:
        notes.append("the expert's spec has other sizes (" + ", ".join(
            f"{n}={expert_sizes[n]} vs {naive_sizes[n]}" for n in differ) + "): its launch uses the case's")
    known = set(naive_sizes) | {t.name for t in spec.tunables} | {t.name for t in espec.tunables}

    def rebase(expr: str) -> str:
        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in known or name not in expert_sizes:
                return name
            notes.append(f"launch: {name} = {expert_sizes[name]} (a size of the expert's spec only)")
            return str(expert_sizes[name])
        return _NAME.sub(sub, expr)

    defines = {t.name: t.values[0] for t in espec.tunables}
    lo = espec.launch
    cand = replace(cand, grid=tuple(rebase(g) for g in lo.grid), block=tuple(rebase(b) for b in lo.block),
                   smem=rebase(lo.smem), defines={**dict(cand.defines), **defines}, family="expert",
                   rationale=f"hand-optimized {expert.relative_to(ROOT) if expert.is_relative_to(ROOT) else expert}")
    notes.extend(f"dropped from the expert: {d}" for d in cand.dropped)
    return cand, notes


# ----------------------------------------------------------------------------------------------- roofline
def _limit_row(best_ms: float | None, work: SpecWork, peak_gbps: float, ceilings: Ceilings | None) -> dict[str, Any]:
    """The product's limit (``profile.limit``: which roof applies, fp64, a spec without bytes/flops) as the
    row's columns."""
    lim = physical_limit(best_ms, work, peak_gbps, ceilings)
    return {"bound": lim.bound, "pct_limit": lim.pct_limit, "pct_copy_bw": lim.pct_copy_bw,
            "floor_ms": lim.floor_ms, "intensity": lim.intensity, "limit_why": lim.why or None}


# ----------------------------------------------------------------------------------------------- the search tree
def _families(c: Candidate) -> set[str]:
    return {s.split(":", 1)[0] for s in c.steps} or ({c.family} if c.family else set())


def _compiled(n: Node) -> bool:
    build = getattr(n.evaluation, "build", None)
    return bool(build is not None and build.ok)


def _faster(n: Node) -> bool:
    """Verified and significantly faster (what the search counts as a win)."""
    sp = getattr(getattr(n.evaluation, "timing", None), "speedup", None)
    return n.ok and (n.speedup or 0.0) > 1.01 and (sp is None or sp.low > 1.0)


def tree_families(nodes: Iterable[Node], structural: frozenset[str]) -> dict[str, Any]:
    """Per structural family in the evaluated tree: statuses, whether a candidate compiled, whether one won.

    A candidate counts for every structural family on its path (``steps``): a composition that compiles
    shows the structural rewrite in it compiles.
    """
    statuses: dict[str, dict[str, int]] = {}
    compiled: set[str] = set()
    faster: set[str] = set()
    for n in nodes:
        if n.parent is None or n.evaluation is None:
            continue
        for fam in _families(n.candidate) & structural:
            per = statuses.setdefault(fam, {})
            per[n.status] = per.get(n.status, 0) + 1
            if _compiled(n):
                compiled.add(fam)
            if _faster(n):
                faster.add(fam)
    return {"structural_evaluated": sorted(statuses), "structural_compiled": sorted(compiled),
            "structural_faster": sorted(faster), "structural_statuses": statuses}


def why_not(nodes: Iterable[Node], best: Node, structural: frozenset[str]) -> dict[str, Any]:
    """Why a case's numbers are what they are, in the evaluator's words.

    ``not_offered``: variants that verified and timed faster than the offered best but were turned down
    after the search (compute-sanitizer, or an Nsight Compute confirmation that disagrees), with the
    verdict; ``structural_rejections``: per structural family, the first reason a candidate of it was not
    verified (incorrect, racy, rejected, crashed). Without these a row says only that a family lost.
    """
    not_offered: list[dict[str, Any]] = []
    rejections: dict[str, str] = {}
    best_sp = best.speedup or 1.0
    for n in nodes:
        ev = n.evaluation
        if n.parent is None or ev is None:
            continue
        conf = getattr(getattr(ev, "timing", None), "confirmation", None)
        sanitizer_failed = getattr(getattr(ev, "sanitizer", None), "failed", None) is not None
        turned_down = getattr(conf, "agrees", None) is False or sanitizer_failed
        if turned_down and (n.speedup or 0.0) > best_sp:
            not_offered.append({"steps": list(n.candidate.steps), "status": n.status,
                                "speedup": n.speedup, "reason": ev.reason,
                                "verdict": conf.text() if conf is not None else ev.reason})
        if n.status not in ("ok", "pending"):
            for fam in sorted(_families(n.candidate) & structural):
                rejections.setdefault(fam, f"{n.status}: {ev.reason}"[:400])
    return {"not_offered": not_offered, "structural_rejections": rejections}


# ----------------------------------------------------------------------------------------------- one case
def _findings(path: Path, text: str, kernel: str, arch: str) -> list[Any]:
    """The static findings the CLI gives the policy (they order its proposals); none if analysis fails."""
    try:
        return list(analyze_source(str(path), text, kernels=[kernel], arch=arch).findings)
    except Exception as e:  # findings only order proposals: a failing analyzer must not lose the case
        print(f"  {path.stem}: static analysis failed ({type(e).__name__}: {e}); no findings", flush=True)
        return []


def _request(path: Path, opts: Options) -> OptimizeRequest:
    req = ca.case_request(path, arch=opts.arch, strategy=opts.strategy,
                          budget=Budget(max_candidates=opts.budget, wall_seconds=opts.seconds))
    req.findings = _findings(path, req.text, req.kernel, opts.arch)
    return req


def _ms(stats: Any) -> float | None:
    return float(stats.median) if stats is not None else None


def _base_row(path: Path) -> dict[str, Any]:
    return {"case": path.stem, "file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
            "kernel": None, "error": None, "expert": None}


EvaluatorFactory = Callable[[OptimizeRequest, Path], Any]
CeilingsFn = Callable[[str], Ceilings | None]


def _local_evaluator(req: OptimizeRequest, workspace: Path) -> Any:
    return evaluator_for_job(req, workspace=workspace)


async def run_case(path: Path, opts: Options, make_evaluator: EvaluatorFactory = _local_evaluator,
                   ceilings_of: CeilingsFn | None = None) -> dict[str, Any]:
    """Optimize one case on the GPU and evaluate its expert with the same evaluator (one harness)."""
    t0 = time.monotonic()
    row = _base_row(path)
    structural = ca.structural_families()
    try:
        req = _request(path, opts)
        _src, _model, _kernel, spec = prepare(req)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
        row["wall_s"] = round(time.monotonic() - t0, 1)
        return row
    row["kernel"] = req.kernel
    ev = make_evaluator(req, opts.workspace)
    expert_eval: Any = None
    expert_notes: list[str] = []
    expert_error: str | None = None
    try:
        try:
            # the product's stop rule: a best within 5 % of its physical limit ends the case's search
            reader = limit_reader(spec_work(spec), ceilings_of or (lambda _gpu: None))
            out = await optimize(req, ev, policy=offline_policy(req), limit_of=reader)
        except GpuUnavailable:
            raise  # no case can run: stop the suite rather than record every case as failed
        except Exception as e:  # one broken case must not cost the others their numbers
            row["error"] = f"optimize: {type(e).__name__}: {e}"
            row["wall_s"] = round(time.monotonic() - t0, 1)
            return row
        search_s = time.monotonic() - t0
        expert = ca.expert_for(path)
        if expert is not None:
            try:
                cand, expert_notes = expert_candidate(req.text, req.kernel, spec, expert)
                expert_eval = await (ev.sanitize(cand) if opts.sanitize_expert else ev.evaluate(cand))
            except GpuUnavailable:
                raise
            except Exception as e:  # a malformed expert is the expert's failure, not the case's
                expert_error = f"{type(e).__name__}: {e}"
    finally:
        close = getattr(ev, "close", None) or getattr(ev, "aclose", None)
        if close is not None:
            await close()
    r = out.result
    best: Any = r.best.evaluation
    root: Any = r.root.evaluation
    timing = getattr(best, "timing", None)
    base_timing = getattr(root, "timing", None)
    base_ms = _ms(getattr(base_timing, "baseline", None)) or _ms(getattr(base_timing, "candidate", None))
    best_ms = _ms(getattr(timing, "candidate", None)) if r.improved else base_ms
    sp = getattr(timing, "speedup", None)
    peak = float(getattr(timing, "peak_gbps", 0.0) or getattr(base_timing, "peak_gbps", 0.0) or 0.0)
    gpu = str(getattr(best, "gpu", "") or getattr(root, "gpu", ""))
    work = spec_work(spec)
    spec_bytes, spec_flops = work.bytes, work.flops
    ceil = ceilings_of(gpu) if ceilings_of is not None and gpu else None
    winner_fams = sorted(_families(r.best.candidate)) if r.improved else []
    row.update({
        "baseline_ms": base_ms, "best_ms": best_ms,
        "speedup": r.best_speedup if r.improved else 1.0,
        "interval": [sp.low, sp.high] if sp is not None and r.improved else None,
        "verified_faster": bool(r.improved),
        "families": list(r.best.families) if r.improved else [],
        "steps": list(r.best.candidate.steps) if r.improved else [],
        "winner_structural": sorted(set(winner_fams) & structural),
        **tree_families(r.nodes, structural),
        "evaluations": r.evaluations, "stopped": r.stopped, "search_s": round(search_s, 1),
        "statuses": {s: sum(1 for n in r.nodes if n.status == s) for s in sorted({n.status for n in r.nodes})},
        "spec_bytes": spec_bytes, "spec_flops": spec_flops, "peak_gbps": peak or None,
        "fp32_gflops": ceil.fp32_gflops if ceil is not None else None,
        **_limit_row(best_ms, work, peak, ceil),
        "gpu": gpu, "headline": best.headline() if best is not None and hasattr(best, "headline") else "",
        "history": [[n, round(s, 4), round(t, 2)] for (n, s), t in zip(r.history, r.history_seconds, strict=False)],
        **why_not(r.nodes, r.best, structural),
    })
    if expert_error is not None or expert_eval is not None:
        row["expert"] = _expert_row(expert_eval, expert_error, expert_notes, best_ms, row["speedup"])
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


def _expert_row(ev: Any, error: str | None, notes: list[str], best_ms: float | None,
                best_speedup: float) -> dict[str, Any]:
    """What the expert's evaluation says, next to the search's best (ratios only for a verified expert)."""
    if ev is None:
        return {"expert_correct": False, "status": "error", "reason": error, "expert_ms": None,
                "expert_speedup": None, "expert_over_best": None, "expert_over_best_paired": None, "notes": notes}
    t = getattr(ev, "timing", None)
    ok = ev.status == "ok"
    e_ms = _ms(getattr(t, "candidate", None)) if ok else None
    e_sp = getattr(ev, "speedup", None) if ok else None
    sp = getattr(t, "speedup", None)
    return {
        "expert_correct": ok, "status": ev.status, "reason": ev.reason, "expert_ms": e_ms,
        "expert_speedup": e_sp, "expert_interval": [sp.low, sp.high] if ok and sp is not None else None,
        # expert_ms / best_ms from the two medians, and the same from the two ratios each paired with its own
        # baseline runs (less sensitive to clock drift between the two timings)
        "expert_over_best": round(e_ms / best_ms, 4) if e_ms and best_ms else None,
        "expert_over_best_paired": round(best_speedup / e_sp, 4) if e_sp else None,
        "notes": notes + list(getattr(ev, "notes", [])),
    }


def dry_case(path: Path, opts: Options) -> dict[str, Any]:
    """Everything up to the GPU on this machine: the same request, policy and proposals as ``run_case``, the
    structural children and the expert through the evaluator's build path, the spec's roofline numbers."""
    t0 = time.monotonic()
    row = _base_row(path)
    structural = ca.structural_families()
    try:
        req = _request(path, opts)
        policy = offline_policy(req)
        builder = ca.EvaluatorBuild(policy, opts.arch)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
        row["wall_s"] = round(time.monotonic() - t0, 1)
        return row
    row["kernel"] = req.kernel
    original = builder.check(builder.original)
    children = policy.propose_sync(policy.root_candidate())
    fams = ca.family_builds(builder, children, structural)
    proposed: dict[str, int] = {}
    for c in children:
        proposed[c.family] = proposed.get(c.family, 0) + 1
    work = spec_work(policy.spec)
    spec_bytes, spec_flops = work.bytes, work.flops
    row.update({
        "original_builds": original.ok, "original_reason": original.reason, "proposed": proposed,
        "policy_errors": list(policy.errors),
        "structural_proposed": sorted(fams), "structural_compiled": sorted(f for f, r in fams.items() if r.built),
        "structural_failures": {f: r.failures[:3] for f, r in fams.items() if r.failures},
        "findings": len(req.findings), "spec_bytes": spec_bytes, "spec_flops": spec_flops,
        **_limit_row(None, work, 0.0, None),
        "baseline_ms": None, "best_ms": None, "speedup": None, "interval": None, "verified_faster": None,
        "families": [], "steps": [], "winner_structural": [], "evaluations": 0, "gpu": "",
    })
    expert = ca.expert_for(path)
    if expert is not None:
        try:
            cand, notes = expert_candidate(req.text, req.kernel, policy.spec, expert)
            got = builder.check(cand)
            row["expert"] = {"builds": got.ok, "stage": got.stage, "reason": got.reason, "notes": notes,
                             "launch": {"grid": cand.grid, "block": cand.block, "smem": cand.smem},
                             "expert_correct": None, "expert_ms": None, "expert_over_best": None}
        except Exception as e:
            row["expert"] = {"builds": False, "stage": "candidate", "reason": f"{type(e).__name__}: {e}",
                             "expert_correct": False, "expert_ms": None, "expert_over_best": None}
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


# ----------------------------------------------------------------------------------------------- report
def _geomean(xs: Iterable[float]) -> float | None:
    vals = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The corpus in a few numbers (see ``summary_line``)."""
    ok = [r for r in rows if not r.get("error")]
    n = len(ok)
    experts = [r["expert"] for r in ok if r.get("expert") and r["expert"].get("expert_correct")]
    mem = [r["pct_copy_bw"] for r in ok if r.get("bound") == "memory" and r.get("pct_copy_bw")]
    return {
        "cases": len(rows), "errors": len(rows) - n,
        "geomean_speedup": _geomean(r["speedup"] for r in ok if r.get("speedup")),
        "structural_compiled": sum(1 for r in ok if r.get("structural_compiled")),
        "structural_faster": sum(1 for r in ok if r.get("structural_faster")),
        "verified_faster": sum(1 for r in ok if r.get("verified_faster")),
        "experts": sum(1 for r in ok if r.get("expert")), "experts_correct": len(experts),
        "geomean_expert_over_best": _geomean(e["expert_over_best"] for e in experts if e.get("expert_over_best")),
        "memory_bound": len(mem), "geomean_pct_copy_bw": _geomean(mem),
    }


def _f(v: Any, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def summary_line(s: dict[str, Any], opts: Options, gpu: str) -> str:
    n = max(1, s["cases"] - s["errors"])
    return (f"geomean verified speedup {_f(s['geomean_speedup'], '.2f')}x over {s['cases'] - s['errors']} cases"
            f"{' (' + str(s['errors']) + ' not run)' if s['errors'] else ''}; structural candidate compiled in "
            f"{s['structural_compiled']}/{n}, verified faster in {s['structural_faster']}/{n} "
            f"(any win {s['verified_faster']}/{n}); geomean expert_ms/best_ms "
            f"{_f(s['geomean_expert_over_best'], '.2f')} "
            f"over {s['experts_correct']} correct of {s['experts']} experts; geomean % copy bandwidth "
            f"{_f(s['geomean_pct_copy_bw'], '.0f')} over {s['memory_bound']} memory-bound bests "
            f"({opts.strategy}, budget {opts.budget} / {opts.seconds:.0f} s per case, offline rules) on {gpu or '?'}")


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    w = max([len(r["case"]) for r in rows] + [4])
    print(f"\n{'case':<{w}} {'base ms':>9} {'best ms':>9} {'speedup':>8} {'interval':>13} {'bound':>7} "
          f"{'%limit':>6} {'%copy':>6} {'expert':>7} {'exp/best':>8} {'evals':>5} {'wall':>6}  structural compiled"
          " / winner")
    for r in rows:
        if r.get("error"):
            print(f"{r['case']:<{w}} ERROR {r['error']}")
            continue
        iv = r.get("interval")
        e = r.get("expert") or {}
        if not e:
            exp = "-"
        elif e.get("expert_correct") is None:  # dry run
            exp = "builds" if e.get("builds") else "NOBUILD"
        else:
            exp = _f(e.get("expert_ms"), ".4f") if e.get("expert_correct") else str(e.get("status", "?"))[:7]
        sp = r.get("speedup")
        print(f"{r['case']:<{w}} {_f(r.get('baseline_ms'), '9.4f', '-'):>9} {_f(r.get('best_ms'), '9.4f', '-'):>9} "
              f"{(_f(sp, '.2f') + 'x') if sp is not None else '-':>8} "
              f"{(f'{iv[0]:.2f}-{iv[1]:.2f}') if iv else '-':>13} {r.get('bound') or '-':>7} "
              f"{_f(r.get('pct_limit'), '.0f'):>6} {_f(r.get('pct_copy_bw'), '.0f'):>6} {exp:>7} "
              f"{_f(e.get('expert_over_best'), '.2f'):>8} {r.get('evaluations', 0):>5} {r.get('wall_s', 0):>6}  "
              f"{','.join(r.get('structural_compiled') or []) or '-'} / {'+'.join(r.get('families') or []) or '-'}")


# ----------------------------------------------------------------------------------------------- main
def _ceilings_cache(measure: bool) -> CeilingsFn:
    """The measured ceilings per GPU name, looked up (or measured, in a child process) once per run."""
    seen: dict[str, Ceilings | None] = {}

    def get(gpu: str) -> Ceilings | None:
        if gpu not in seen:
            seen[gpu] = ceilings_for(gpu, measure=measure)
        return seen[gpu]

    return get


async def _run_all(paths: Sequence[Path], opts: Options, one: Callable[[Path], Awaitable[dict[str, Any]]],
                   emit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    rows = []
    for p in paths:
        row = await one(p)
        rows.append(row)
        emit(row)
    return rows


def _shard(text: str, ap: argparse.ArgumentParser) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        ap.error(f"--shard {text!r}: want K/N with 0 <= K < N, e.g. 0/2 and 1/2 for two GPUs")
    return int(m.group(1)), int(m.group(2))


def merge_reports(parts: Sequence[Path], out: Path) -> int:
    """One report from the shards' reports (one process per GPU): cases in corpus order, summary recomputed.

    Shards run side by side, so the merged wall time is the longest shard's, not their sum; shards run on
    different GPU models are refused (their times are not comparable in one table).
    """
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in parts]
    gpus = {r.get("gpu") for r in reports if r.get("gpu")}
    if len(gpus) > 1:
        print(f"refusing to merge reports from different GPUs: {sorted(gpus)}", file=sys.stderr)
        return 2
    rows = sorted((row for r in reports for row in r["cases"]), key=lambda row: row["case"])
    first = reports[0]
    opts = Options(**{**first["options"], "workspace": Path(first["options"]["workspace"])})
    s = summary(rows)
    wall = max(float(r.get("wall_s") or 0) for r in reports)
    partial = [f"{p.name}: {r['partial']}" for p, r in zip(parts, reports, strict=True) if r.get("partial")]
    merged = {**{k: v for k, v in first.items() if k != "partial"}, "wall_s": wall, "shards": len(reports),
              "summary": s, "cases": rows, **({"partial": partial} if partial else {})}
    out.write_text(json.dumps(merged, indent=2, default=str) + "\n")
    print_table(rows)
    print(f"{summary_line(s, opts, next(iter(gpus), ''))}; {wall:.0f} s in all ({len(reports)} shards side by side)"
          + (f"; STOPPED EARLY: {'; '.join(partial)}" if partial else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="search time per case")
    ap.add_argument("--budget", type=int, default=32, help="candidates per case")
    ap.add_argument("--strategy", default="beam", choices=["beam", "mcts"])
    ap.add_argument("--cases", nargs="*", default=None, help="only these cases (file stems)")
    ap.add_argument("--corpus", type=Path, default=ca.CORPUS)
    ap.add_argument("--arch", default=ca.ARCH)
    ap.add_argument("--workspace", type=Path, default=Options.workspace,
                    help="evaluation cache (the workspace store); a fresh folder re-measures everything")
    ap.add_argument("--no-ceilings", action="store_true",
                    help="do not measure the FP32 peak (compute-bound cases then get no %% of limit)")
    ap.add_argument("--sanitize-expert", action="store_true", help="also run the experts under compute-sanitizer")
    ap.add_argument("--dry-run", action="store_true", help="everything up to the GPU, on this machine")
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="every N-th case from the K-th (0-based): one process per GPU, joined with --merge")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="JSON",
                    help="combine the reports of several shards into --out and print their table; runs nothing")
    ap.add_argument("--out", type=Path, default=Path("corpus_suite.json"))
    args = ap.parse_args(argv)
    if args.merge:
        return merge_reports(args.merge, args.out)
    opts = Options(args.seconds, args.budget, args.strategy, args.arch, args.workspace, not args.no_ceilings,
                   args.sanitize_expert)
    paths = ca.corpus_cases(args.corpus)
    if args.cases:
        unknown = sorted(set(args.cases) - {p.stem for p in paths})
        if unknown:
            ap.error(f"no such case in {args.corpus}: {', '.join(unknown)}")
        paths = [p for p in paths if p.stem in set(args.cases)]
    if args.shard:
        k, n = _shard(args.shard, ap)
        paths = paths[k::n]
    t0 = time.monotonic()

    done: list[dict[str, Any]] = []

    def write(rows: list[dict[str, Any]], wall: float, partial: bool) -> dict[str, Any]:
        s = summary(rows)
        gpu = next((r["gpu"] for r in rows if r.get("gpu")), "")
        report = {"dry_run": args.dry_run, "options": {**vars(opts), "workspace": str(opts.workspace)},
                  "gpu": gpu, "wall_s": round(wall, 1), "summary": s, "cases": rows,
                  **({"partial": f"{len(rows)} of {len(paths)} cases"} if partial else {})}
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        return report

    def emit(row: dict[str, Any]) -> None:
        # the report is rewritten after every case, so a run stopped by a time limit keeps what it measured
        done.append(row)
        write(done, time.monotonic() - t0, partial=len(done) < len(paths))
        print(json.dumps({k: v for k, v in row.items() if k != "history"}), flush=True)

    if args.dry_run:
        rows = []
        for p in paths:
            rows.append(dry_case(p, opts))
            emit(rows[-1])
    else:
        ceil = _ceilings_cache(opts.ceilings)

        async def one(p: Path) -> dict[str, Any]:
            return await run_case(p, opts, ceilings_of=ceil)

        rows = asyncio.run(_run_all(paths, opts, one, emit))
    wall = time.monotonic() - t0
    report = write(rows, wall, partial=False)
    s, gpu = report["summary"], report["gpu"]
    print_table(rows)
    if args.dry_run:
        n = len(rows) - s["errors"]
        experts = [r["expert"] for r in rows if r.get("expert")]
        print(f"DRY RUN (no GPU, nothing timed): structural candidate compiles in {s['structural_compiled']}/{n} "
              f"cases; {sum(1 for e in experts if e.get('builds'))}/{len(experts)} experts build as candidates"
              f"{'; ' + str(s['errors']) + ' cases in error' if s['errors'] else ''}; {wall:.0f} s in all")
    else:
        print(f"{summary_line(s, opts, gpu)}; {wall:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
