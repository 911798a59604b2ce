"""Scale-out benchmark: verified evaluations per minute on 1 vs 2 (vs more) GPUs, local pool and Ray.

Run on a machine with several GPUs (results go to benchmarks/RESULTS.md, section "Scale-out"):

    python benchmarks/scaleout_bench.py --out DIR [--gpus 1,2] [--backends local,ray] [--quick]

For each backend and GPU count, one backend is made and shared by one evaluator per reference kernel
(as a search shares one per job), and every GPU's worker is started and its bandwidth measured (this also
ramps the clocks up). The candidates: the launch/tunable/flag variants of every reference kernel and the
SGEMM block-size space (``engine_bench.py``'s), all submitted at once, each fully verified and timed
interleaved with its original on the GPU that evaluates it. They run twice: a warm pass (every GPU
generates its inputs and oracle outputs for each kernel, as a search's first candidates on a GPU do), then
the measured pass, the steady state of a search. Each pass compiles afresh (a pass-specific unused define
changes every source), so compile work is included alike everywhere; compile processes are the same
number in every configuration (one per core), so only the GPUs differ. No evaluation store.

Scaling efficiency = rate(N GPUs) / (N x rate(1 GPU)); the target is >= 85 %. The output JSON also says how
many candidates each GPU served, and two real ``warpforge optimize`` runs (``--gpus all`` and
``--ray-address local``) show one search spread over the GPUs end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine_bench import KERNELS, SETTINGS, SGEMM_SPACE, sgemm_candidates, variants  # noqa: E402

from warpforge.gpu.backends import EvaluationBackend, LocalBackend  # noqa: E402
from warpforge.gpu.evaluator import Evaluation, Evaluator  # noqa: E402
from warpforge.gpu.toolchain import default_arch  # noqa: E402
from warpforge.search.candidate import Candidate  # noqa: E402

#: where local workers write their profiles (``--profile-workers``)
PROFILE_DIR: Path | None = None
#: the engine settings of every evaluator (``--fixed-reps`` replaces the adaptive timing)
BENCH_SETTINGS = [SETTINGS]


def fixed_reps(n: int) -> Any:
    """Engine settings that time every side exactly ``n`` repetitions (no adaptive stopping).

    Adaptive timing repeats until the median is stable to 1 %, so a candidate's GPU work depends on how
    noisy the GPU was at that moment; the same candidates needed 30 repetitions per side in one run and
    108 in the next. Comparing evaluations/min across configurations needs the same work per candidate.
    """
    from dataclasses import replace

    return replace(SETTINGS, timing=replace(SETTINGS.timing, min_reps=n, max_reps=n, max_seconds=60.0))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def candidates(evs: dict[str, Evaluator], quick: bool, run: int) -> list[tuple[str, Candidate]]:
    jobs = [(f, c) for f, ev in evs.items() for c in variants(ev, quick)]
    jobs += [("sgemm.cu", c) for c in sgemm_candidates(evs["sgemm.cu"], SGEMM_SPACE[:8] if quick else SGEMM_SPACE)]
    # a fresh build for every configuration: same machine code, new source text
    return [(f, c.derive(defines={**c.defines, "WF_SCALEOUT_RUN": str(run)})) for f, c in jobs]


async def warm(backend: EvaluationBackend) -> list[dict[str, Any]]:
    """Start every device's worker and measure its bandwidth (which also brings its clocks up)."""
    handles: list[Any]
    if isinstance(backend, LocalBackend):
        handles = list(backend.pool.handles)
    else:
        from warpforge.gpu.ray_backend import RayBackend

        assert isinstance(backend, RayBackend)
        await backend.start()
        handles = [d for d in backend.devices if not d.dropped]
    facts = await asyncio.gather(*(backend.facts(h) for h in handles))
    return [{"key": h.key, "name": info.get("name"), "driver": info.get("driver"), "peak_copy_gbps": round(peak)}
            for h, (info, peak) in zip(handles, facts, strict=True)]


def watch(backend: EvaluationBackend) -> dict[str, Any]:
    """Record, per device, when the measured candidates held it (GPU busy time) and the first checkout."""
    rec: dict[str, Any] = {"busy": {}, "first": None, "on": False}
    acquire = backend.acquire

    @contextlib.asynccontextmanager
    async def timed() -> AsyncIterator[Any]:
        async with acquire() as dev:
            t = time.perf_counter()
            if rec["on"] and rec["first"] is None:
                rec["first"] = t
            try:
                yield dev
            finally:
                if rec["on"]:
                    rec["busy"][dev.key] = rec["busy"].get(dev.key, 0.0) + time.perf_counter() - t

    backend.acquire = timed  # type: ignore[method-assign]
    return rec


def prebuild(backend: EvaluationBackend) -> dict[tuple[Any, ...], Any]:
    """Serve the backend's builds from a table filled before the window (``--prebuilt``): GPUs alone."""
    table: dict[tuple[Any, ...], Any] = {}
    cpu = backend.cpu

    async def served(fn: Any, *args: Any) -> Any:
        key = (getattr(fn, "__name__", str(fn)), *[json.dumps(a, sort_keys=True, default=str) for a in args])
        if key not in table:
            table[key] = await cpu(fn, *args)
        return table[key]

    backend.cpu = served  # type: ignore[method-assign]
    return table


async def loop_lag(stop: asyncio.Event, out: list[float], period: float = 0.005) -> None:
    """How late this process's event loop wakes (it carries every device's request and every build result)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(period)
        out.append(loop.time() - t - period)


def split_means(results: list[Evaluation]) -> dict[str, float]:
    """Mean time split of the window's evaluations (``Evaluation.time_split``) and mean timing repetitions."""
    ok = [r for r in results if r.time_split]
    if not ok:
        return {}
    keys = sorted({k for r in ok for k in r.time_split})
    out = {k: round(sum(r.time_split.get(k, 0.0) for r in ok) / len(ok), 4) for k in keys}
    reps = [r.timing.candidate.n for r in ok if r.timing is not None and r.timing.candidate is not None]
    if reps:
        out["timing_reps"] = round(sum(reps) / len(reps), 1)
    out["own_overhead"] = round(out.get("gpu", 0.0) - out.get("worker", 0.0), 4)
    return out


def reps_by_kernel(results: list[Evaluation]) -> dict[str, float]:
    """Mean timing repetitions per side, by kernel (where the adaptive timing spends its repetitions)."""
    by: dict[str, list[int]] = {}
    for r in results:
        if r.timing is not None and r.timing.candidate is not None:
            by.setdefault(r.kernel, []).append(r.timing.candidate.n)
    return {k: round(sum(v) / len(v), 1) for k, v in sorted(by.items())}


async def measure(backend: EvaluationBackend, n: int, quick: bool, run: int, passes: int = 1,
                  prebuilt: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    if prebuilt:
        prebuild(backend)
    await backend.ensure_compare(default_arch())
    gpus = await warm(backend)
    evs = {f: Evaluator(ROOT / "kernels" / f, k, backend=backend, settings=BENCH_SETTINGS[0])
           for f, k in KERNELS.items()}
    # The warm pass: the same candidates under other source text. Each GPU generates its own inputs and
    # oracle outputs the first time it sees a kernel; a search pays that once per GPU and then runs for
    # dozens of candidates, so the measured pass is the steady state of every GPU.
    warm_jobs = candidates(evs, quick, run)
    warm_res = await asyncio.gather(*(evs[f].evaluate(c) for f, c in warm_jobs))
    setup_s = time.perf_counter() - t0
    jobs = [j for k in range(passes) for j in candidates(evs, quick, run + 1 + k)]
    unique = len({(f, c.hash) for f, c in jobs})  # a candidate proposed twice is evaluated once
    if prebuilt:  # every build of the window (and the originals') done before it starts
        await asyncio.gather(*(evs[f]._build(c) for f, c in jobs), *(ev._build(ev.original) for ev in evs.values()),
                             return_exceptions=True)
    lag: list[float] = []
    stop = asyncio.Event()
    lag_task = asyncio.ensure_future(loop_lag(stop, lag))
    before = dict(backend.served)
    rec = watch(backend)
    rec["on"] = True
    t1 = time.perf_counter()
    results: list[Evaluation] = list(await asyncio.gather(*(evs[f].evaluate(c) for f, c in jobs)))
    wall = time.perf_counter() - t1
    rec["on"] = False
    stop.set()
    await lag_task
    statuses: dict[str, int] = {}
    reasons: dict[str, int] = {}  # why evaluations were not ok (the first 160 characters of each reason)
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if not r.ok:
            why = f"{r.kernel}: {r.status}: {r.reason[:160]}"
            reasons[why] = reasons.get(why, 0) + 1
    served = {k: v - before.get(k, 0) for k, v in backend.served.items() if v - before.get(k, 0)}
    return {"gpus_used": n, "gpus": gpus, "candidates": len(jobs), "evaluations": unique, "wall_s": round(wall, 2),
            "evaluations_per_min": round(unique / wall * 60, 1), "statuses": statuses, "not_ok": reasons,
            "served": served,
            "gpu_busy_fraction": {k: round(v / wall, 3) for k, v in sorted(rec["busy"].items())},
            "first_gpu_s": round(rec["first"] - t1, 2) if rec["first"] else None,
            "setup_s": round(setup_s, 1), "warm_pass_ok": sum(r.ok for r in warm_res), "prebuilt": prebuilt,
            "time_split_mean_s": split_means(results), "timing_reps_by_kernel": reps_by_kernel(results),
            "timing": BENCH_SETTINGS[0].timing.to_json(),
            "loop_lag_ms": {"mean": round(1000 * sum(lag) / max(1, len(lag)), 2),
                            "p99": round(1000 * sorted(lag)[int(0.99 * (len(lag) - 1))], 2) if lag else None,
                            "max": round(1000 * max(lag), 1) if lag else None},
            "device_losses": backend.device_losses, "restarts": backend.restarts, "notes": backend.notes,
            "speedups": {f"{f}:{c.id}": r.speedup for (f, c), r in zip(jobs, results, strict=True) if r.ok}}


async def run_local(counts: list[int], quick: bool, run0: int, passes: int, compile_workers: int | None = None,
                    prebuilt: bool = False) -> list[dict[str, Any]]:
    out = []
    for i, n in enumerate(counts):
        env = None
        if PROFILE_DIR:
            where = PROFILE_DIR / f"{'prebuilt' if prebuilt else 'local'}-{n}"
            where.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "WARPFORGE_WORKER_PROFILE": str(where)}
        backend = LocalBackend(list(range(n)), compile_workers=compile_workers or os.cpu_count() or 4,
                               worker_env=env)
        try:
            log(f"local pool, {n} GPU(s){' (prebuilt)' if prebuilt else ''} ...")
            res = await measure(backend, n, quick, run0 + 10 * i, passes, prebuilt)
            res["compile_workers"] = backend.compile_workers
            log(f"  {res['evaluations_per_min']} evaluations/min ({res['evaluations']} in {res['wall_s']} s; "
                f"served {res['served']}; busy {res['gpu_busy_fraction']}; {res['statuses']})")
            log(f"  mean split {res['time_split_mean_s']}; loop lag {res['loop_lag_ms']}")
            out.append(res)
        finally:
            await backend.aclose()
    return out


async def run_ray(counts: list[int], quick: bool, run0: int, passes: int,
                  num_gpus: int | None = None) -> list[dict[str, Any]]:
    from warpforge.gpu.ray_backend import RayBackend

    # One cluster for all counts (started here, on loopback), held open by a backend without GPU actors.
    init: dict[str, Any] = {"num_cpus": os.cpu_count() or 4}
    if num_gpus is not None:
        init["num_gpus"] = num_gpus  # logical GPUs (dry runs on the CPU stand-in); default: Ray's detection
    anchor = RayBackend("local", gpus=0, init_kwargs=init)
    t0 = time.perf_counter()
    await anchor.start()
    log(f"Ray cluster up in {time.perf_counter() - t0:.1f} s")
    out = []
    try:
        for i, n in enumerate(counts):
            backend = RayBackend("local", gpus=n)
            try:
                log(f"Ray, {n} GPU actor(s) ...")
                res = await measure(backend, n, quick, run0 + 10 * i, passes)
                res["nodes"] = backend.summary().get("nodes")
                log(f"  {res['evaluations_per_min']} evaluations/min ({res['evaluations']} in {res['wall_s']} s; "
                    f"served {res['served']}; busy {res['gpu_busy_fraction']}; {res['statuses']})")
                log(f"  mean split {res['time_split_mean_s']}; loop lag {res['loop_lag_ms']}")
                out.append(res)
            finally:
                await backend.aclose()
    finally:
        await anchor.aclose()
    return out


def efficiency(rows: list[dict[str, Any]], reference: dict[str, Any] | None = None) -> dict[str, float]:
    """rate(N) / (N x rate(1)); the 1-GPU rate is this backend's own, else ``reference`` (the local pool's)."""
    one = next((r for r in rows if r["gpus_used"] == 1), reference)
    if one is None:
        return {}
    return {str(r["gpus_used"]): round(r["evaluations_per_min"] / (r["gpus_used"] * one["evaluations_per_min"]), 3)
            for r in rows}


def cli_run(extra: list[str], budget: int, out: Path, name: str) -> dict[str, Any]:
    """One real ``warpforge optimize`` in a fresh workspace (so no cached evaluation is reused)."""
    ws = Path(tempfile.mkdtemp(prefix=f"wf-{name}-"))
    cmd = [sys.executable, "-m", "warpforge", "optimize", str(ROOT / "kernels" / "softmax.cu"), "--budget",
           str(budget), "--time", "240", "--json", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ws, timeout=400)
    wall = time.perf_counter() - t0
    (out / f"cli_{name}.log").write_text(p.stderr[-20000:])
    try:
        data = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"command": " ".join(cmd[2:]), "rc": p.returncode, "error": (p.stderr or p.stdout)[-1500:]}
    search = data.get("search") or {}
    return {"command": " ".join(cmd[2:]), "rc": p.returncode, "wall_s": round(wall, 1),
            "evaluations": search.get("evaluations"), "stopped": search.get("stopped"),
            "speedup": data.get("speedup"), "headline": data.get("headline") or data.get("message"),
            "backend": data.get("backend")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpus", default="1,2", help="GPU counts to measure (default 1,2)")
    ap.add_argument("--ray-gpus", help="GPU counts for Ray (default: --gpus; without 1, Ray's efficiency is "
                                       "relative to the local pool's 1-GPU rate)")
    ap.add_argument("--passes", type=int, default=1, help="candidate sets in the measured window (default 1)")
    ap.add_argument("--backends", default="local,ray", help="local, ray, local-prebuilt (builds done before the "
                                                               "window: the GPUs' scaling alone)")
    ap.add_argument("--fixed-reps", type=int, help="time every side exactly N repetitions (same GPU work per "
                                                   "candidate in every configuration)")
    ap.add_argument("--profile-workers", action="store_true", help="profile the local GPU workers (cProfile, "
                                                                   "OUT/profiles; warm pass included)")
    ap.add_argument("--compile-workers", type=int, help="compile processes of the local pool (default: one per core)")
    ap.add_argument("--quick", action="store_true", help="fewer candidates per kernel")
    ap.add_argument("--ray-num-gpus", type=int, help="GPUs the local Ray cluster declares (default: detected)")
    ap.add_argument("--cli-budget", type=int, default=24, help="candidates of each `warpforge optimize` run (0: none)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in args.gpus.split(",")]
    if args.fixed_reps:
        BENCH_SETTINGS[0] = fixed_reps(args.fixed_reps)
    if args.profile_workers:
        global PROFILE_DIR
        PROFILE_DIR = args.out / "profiles"
    res: dict[str, Any] = {"counts": counts, "cpus": os.cpu_count(), "quick": args.quick, "passes": args.passes}
    t0 = time.perf_counter()
    for kind in args.backends.split(","):
        if kind in ("local", "local-prebuilt"):
            rows = asyncio.run(run_local(counts, args.quick, 100 if kind == "local" else 300, args.passes,
                                         args.compile_workers, prebuilt=kind == "local-prebuilt"))
            ref = None
        else:
            ray_counts = [int(x) for x in (args.ray_gpus or args.gpus).split(",")]
            rows = asyncio.run(run_ray(ray_counts, args.quick, 200, args.passes, args.ray_num_gpus))
            ref = next((r for r in res.get("local", {}).get("runs", []) if r["gpus_used"] == 1), None)
        res[kind] = {"runs": rows, "efficiency": efficiency(rows, ref)}
        log(f"{kind}: efficiency {res[kind]['efficiency']}")
        (args.out / "scaleout.json").write_text(json.dumps(res, indent=2))
    if args.cli_budget:
        for name, extra in (("gpus_all", ["--gpus", "all"]), ("ray", ["--ray-address", "local"])):
            log(f"warpforge optimize {' '.join(extra)} ...")
            res[f"cli_{name}"] = r = cli_run(extra, args.cli_budget, args.out, name)
            log(f"  {json.dumps({k: r.get(k) for k in ('rc', 'wall_s', 'evaluations', 'headline', 'backend')})}")
            (args.out / "scaleout.json").write_text(json.dumps(res, indent=2))
    res["total_s"] = round(time.perf_counter() - t0, 1)
    (args.out / "scaleout.json").write_text(json.dumps(res, indent=2))
    log(f"done in {res['total_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
