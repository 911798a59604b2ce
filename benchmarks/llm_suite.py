"""LLM policy suite: optimize every reference kernel with the LLM + rules policy, report speedups and cost.

Run on the GPU machine with a real key:

    ANTHROPIC_API_KEY=... python benchmarks/llm_suite.py --out results/llm.json

For each kernel of ``kernels/`` it runs one optimize job (static findings first, then the search with
``MixedPolicy``: the model's structural rewrites plus WarpForge's rules, one candidate budget), with every
candidate verified and timed by the GPU evaluator, and reports per kernel: the best verified speedup and
its family, how many model-written variants were proposed / verified / best, tokens and dollars spent,
notices and recorded failures. Totals: geometric-mean speedup, total tokens and cost.

Honesty rules: a result is labelled ``live_api: true`` only when the requests went to Anthropic's API
(no ``--base-url``); the evaluator's name is in the report, and a synthetic evaluator (``--evaluator
python:MODULE:FN``, used by the CPU tests) is labelled as such by its own ``gpu_name``. Nothing in this
repository claims a live-API result unless this suite produced it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from warpforge.cuda import parse  # noqa: E402
from warpforge.policy.llm import Ledger, LLMConfig, policy_for_request  # noqa: E402
from warpforge.search.beam import BeamConfig  # noqa: E402
from warpforge.search.engine import Budget  # noqa: E402
from warpforge.search.optimize import OptimizeRequest, optimize  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def evaluator_factory(spec: str) -> Any:
    """``local`` (the GPU evaluator) or ``python:MODULE:FUNCTION`` returning ``f(req) -> evaluator``."""
    if spec.startswith("python:"):
        _, mod, fn = spec.split(":", 2)
        return getattr(importlib.import_module(mod), fn)
    if spec != "local":
        raise SystemExit(f"unknown evaluator `{spec}`: use local or python:MODULE:FUNCTION")
    ev = importlib.import_module("warpforge.gpu.evaluator")
    if hasattr(ev, "evaluator_for_job"):
        return ev.evaluator_for_job

    def make(req: OptimizeRequest) -> Any:
        return ev.Evaluator(req.file, req.kernel, text=req.text)

    return make


def static_findings(path: str, text: str, kernel: str) -> list[Any]:
    try:
        from warpforge.profile.hints import analyze_source

        return [f for f in analyze_source(path, text, kernels=[kernel]).findings if f.kernel in (None, kernel)]
    except Exception as e:  # hints are context for the planner, not a requirement
        log(f"{path}: static hints failed ({type(e).__name__}: {e}); planning without findings")
        return []


def _gpu_name(evaluator: Any, best: Any) -> str:
    name = getattr(evaluator, "gpu_name", None)
    if name:
        return str(name)
    ev = getattr(best, "evaluation", None)
    return str(getattr(ev, "gpu", "") or "unknown")


async def run_kernel(path: Path, args: argparse.Namespace, cfg: LLMConfig, ledger: Ledger, make_eval: Any,
                     index: Any) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    model = parse(text)
    if len(model.kernels) != 1:
        return {"file": path.name, "skipped": f"{len(model.kernels)} kernels in the file"}
    kernel = model.kernels[0].name
    findings = static_findings(str(path), text, kernel)
    req = OptimizeRequest(str(path), text, kernel, strategy=args.strategy,
                          budget=Budget(max_candidates=args.budget, wall_seconds=args.time),
                          findings=findings, arch=args.arch, beam=BeamConfig(rounds=args.rounds))
    notices: list[str] = []
    policy = policy_for_request(req, config=cfg, ledger=ledger, index=index, on_notice=notices.append)
    evaluator = make_eval(req)
    t0 = time.monotonic()
    try:
        outcome = await optimize(req, evaluator, policy=policy)
        await policy.reflect(outcome.result)
    finally:
        close = getattr(evaluator, "aclose", None)
        if close is not None:
            await close()
        await policy.aclose()
    r = outcome.result
    nodes = [n for n in r.nodes if n.parent is not None and n.evaluation is not None]
    llm_nodes = [n for n in nodes if n.candidate.family.startswith("llm:")]
    report = policy.llm.report()
    return {
        "file": path.name,
        "kernel": kernel,
        "gpu": _gpu_name(evaluator, r.best),
        "best_speedup": round(r.best_speedup, 4),
        "best_family": r.best.candidate.family if r.improved else None,
        "best_by_llm": bool(r.improved and r.best.candidate.family.startswith("llm:")),
        "evaluations": r.evaluations,
        "stopped": r.stopped,
        "llm_variants": len(llm_nodes),
        "llm_verified": sum(1 for n in llm_nodes if n.ok),
        "llm_faster": sum(1 for n in llm_nodes if n.ok and (n.speedup or 0) > 1.0),
        "seconds": round(time.monotonic() - t0, 1),
        "spend": report["spend"].get("job", {}),
        "notices": notices,
        "failures": report["failures"],
        "diff": outcome.diff() if r.improved else "",
    }


async def run_suite(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"capKernelUsd": args.cap_kernel, "capTotalUsd": args.cap_total}
    if args.model:
        settings["model"] = args.model
    if args.base_url:
        settings["baseUrl"] = args.base_url
    cfg = LLMConfig.from_sources(settings)
    if cfg.resolved_key() is None:
        raise SystemExit("llm_suite needs a real key: set ANTHROPIC_API_KEY (nothing was measured)")
    ledger = Ledger()
    make_eval = evaluator_factory(args.evaluator)
    index = None
    if args.index:
        from warpforge.rag.backends import open_index

        index = open_index("sqlite", path=args.index)
    files = sorted(Path(args.kernels).glob("*.cu"))
    if args.only:
        files = [f for f in files if f.stem in args.only or f.name in args.only]
    rows = []
    for f in files:
        log(f"{f.name}: optimizing (budget {args.budget} candidates, {args.time:g} s)")
        try:
            row = await run_kernel(f, args, cfg, ledger, make_eval, index)
        except Exception as e:
            row = {"file": f.name, "error": f"{type(e).__name__}: {e}"}
        log(f"{f.name}: {row.get('best_speedup', row.get('error', row.get('skipped')))}")
        rows.append(row)
    done = [r for r in rows if "best_speedup" in r]
    geo = math.exp(sum(math.log(r["best_speedup"]) for r in done) / len(done)) if done else None
    live = cfg.base_url is None and not os.environ.get("ANTHROPIC_BASE_URL")
    return {
        "suite": "llm",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "live_api": live,
        "endpoint": "api.anthropic.com" if live else (cfg.base_url or os.environ.get("ANTHROPIC_BASE_URL")),
        "evaluator": args.evaluator,
        "models": {r: cfg.model_for(r) for r in ("planner", "coder", "fixer", "reflector")},
        "strategy": args.strategy,
        "budget": {"candidates": args.budget, "seconds": args.time, "cap_kernel_usd": cfg.cap_kernel_usd,
                   "cap_total_usd": cfg.cap_total_usd},
        "kernels": rows,
        "geomean_speedup": round(geo, 4) if geo else None,
        "spend": ledger.summary()["total"],
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"LLM suite ({'live Anthropic API' if report['live_api'] else 'endpoint ' + str(report['endpoint'])}; "
          f"evaluator {report['evaluator']}; models {report['models']})")
    print(f"{'kernel':<14} {'speedup':>8} {'best family':<22} {'llm v/ok/faster':>16} {'tokens in/out':>16} "
          f"{'cost':>8}")
    for r in report["kernels"]:
        if "best_speedup" not in r:
            print(f"{r['file']:<14} {r.get('error') or r.get('skipped')}")
            continue
        sp = r["spend"]
        toks = f"{sp.get('input_tokens', 0) + sp.get('cache_read_tokens', 0) + sp.get('cache_write_tokens', 0)}/" \
               f"{sp.get('output_tokens', 0)}"
        llm = f"{r['llm_variants']}/{r['llm_verified']}/{r['llm_faster']}"
        print(f"{r['kernel']:<14} {r['best_speedup']:>7.2f}x {r['best_family'] or '-'!s:<22} {llm:>16} "
              f"{toks:>16} ${sp.get('usd', 0):>7.3f}")
    s = report["spend"]
    print(f"geomean {report['geomean_speedup']}x; total ${s['usd']:.3f} over {s['calls']} calls")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", default=str(ROOT / "kernels"))
    p.add_argument("--only", nargs="*", help="kernel files (stems) to run")
    p.add_argument("--budget", type=int, default=24, help="candidates per kernel")
    p.add_argument("--time", type=float, default=900.0, help="seconds per kernel")
    p.add_argument("--rounds", type=int, default=4, help="beam rounds")
    p.add_argument("--strategy", choices=("beam", "mcts"), default="beam")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--evaluator", default="local", help="local (GPU) or python:MODULE:FUNCTION")
    p.add_argument("--model", help="one model for every role")
    p.add_argument("--base-url", help="another Messages API endpoint (results are then not live-API results)")
    p.add_argument("--cap-kernel", type=float, default=10.0, help="USD per kernel (default 10)")
    p.add_argument("--cap-total", type=float, default=50.0, help="USD in total (default 50)")
    p.add_argument("--index", help="SQLite retrieval index to use (see `warpforge index add`)")
    p.add_argument("--out", help="write the JSON report here")
    args = p.parse_args(argv)
    report = asyncio.run(run_suite(args))
    print_table(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
