"""``warpforge optimize FILE [--kernel K] [--strategy beam|mcts] [--budget N] [--gpus all|N|0,1]
[--ray-address ADDR] [--json] [--report out.html] [--apply]``: the main job, headless.

Candidates are spread over every visible GPU of this machine (``--gpus``, default all, honouring
``CUDA_VISIBLE_DEVICES``), or over the GPUs of a Ray cluster (``--ray-address``); each speedup is still a
ratio measured on one GPU, and verification is the same everywhere.

On a machine without a GPU it still does the useful part — the static hints that would guide the search —
and says clearly that measuring and verifying variants needs an NVIDIA GPU (exit 0: the hints are the
result there). With a GPU: a rich progress bar (round, candidates, best verified speedup), then the best
verified variant as a unified diff with its speedup and interval, what was checked, and the findings that
motivated it. ``--apply`` writes it (keeping a backup); nothing is written otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..cli import EXIT_FAILED, EXIT_OK, CliError, load_file, pick_kernel
from ..profile.findings import Finding
from ..profile.hints import analyze_source
from ..search.engine import Budget, SearchEvent
from ..search.memory import SearchMemory
from ..search.optimize import HostCodeRefused, OptimizeOutcome, OptimizeRequest, candidate_notes, optimize
from ..search.report import ReportInfo, render
from .hints import _format

if TYPE_CHECKING:
    from ..gpu.evaluator import Evaluator


def register(sub: Any) -> None:
    p = sub.add_parser("optimize", help="search for a verified faster variant of a kernel (needs a GPU)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--strategy", choices=("beam", "mcts"), default="beam")
    p.add_argument("--budget", type=int, default=48, help="maximum candidates to evaluate (default 48)")
    p.add_argument("--time", type=float, default=300.0, help="wall-clock budget in seconds (default 300)")
    p.add_argument("--target", type=float, help="stop once a variant is this many times faster")
    p.add_argument("--arch", help="target architecture (default: the GPU's)")
    p.add_argument("--gpus", metavar="all|N|0,1",
                   help="GPUs of this machine to spread the search over: all visible ones (the default, honouring "
                        "CUDA_VISIBLE_DEVICES), the first N, or CUDA indices (one alone as `1,`)")
    p.add_argument("--device", type=int, help="one CUDA device index (same as --gpus D,)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="evaluate on a Ray cluster: auto, HOST:PORT, ray://HOST:10001, or `local` to start one on "
                        "this machine (needs the ray extra: pip install 'warpforge[ray]')")
    p.add_argument("--api-key", help="Anthropic API key (default: $ANTHROPIC_API_KEY; without one, rules only)")
    p.add_argument("--report", metavar="OUT.html", help="write an HTML report (search tree, speedup curve, diff)")
    p.add_argument("--apply", action="store_true", help="write the best verified variant into FILE (backup kept)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _static(path: str, text: str, kernel: str, arch: str | None) -> list[Finding]:
    return list(analyze_source(path, text, kernels=[kernel], arch=arch).findings)


def _gpu_choice(args: argparse.Namespace) -> str | int | list[int] | None:
    """``--gpus``/``--device`` checked before anything runs (a usage error is exit 2)."""
    from ..gpu.backends import GpuSelectionError, parse_gpus

    if args.device is not None and args.gpus is not None:
        raise CliError("give --device or --gpus, not both (--device D is --gpus D,)")
    try:
        gpus = parse_gpus(args.gpus) if args.gpus is not None else None
    except GpuSelectionError as e:
        raise CliError(str(e)) from e
    if args.ray_address:
        if args.device is not None or isinstance(gpus, list):
            raise CliError("with --ray-address, --gpus is all or a number: Ray chooses the GPUs")
        from ..gpu.ray_backend import RAY_HINT, ray_available

        if not ray_available():
            raise CliError(f"--ray-address needs Ray: {RAY_HINT}", EXIT_FAILED)
    return [args.device] if args.device is not None else gpus


def run(args: argparse.Namespace) -> int:
    from ..gpu.supervisor import gpu_unavailable_reason, no_gpu_message

    args.gpu_choice = _gpu_choice(args)
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel)
    from ..spec import build_spec

    build_spec(src, model, kernel, args.file)  # a bad spec is reported before anything runs
    findings = _static(args.file, src.text, kernel.name, args.arch)
    # With Ray the GPUs are the cluster's: this machine needs neither a GPU nor pycuda.
    why = None if args.ray_address else gpu_unavailable_reason()
    if why is not None:
        msg = no_gpu_message("optimize", why)
        if args.json:
            print(json.dumps({"file": args.file, "kernel": kernel.name, "gpu": None, "message": msg,
                              "findings": [f.to_json() for f in findings]}, indent=2))
        else:
            for f in findings:
                print(_format(f))
            print(f"\n{len(findings)} static finding{'s' if len(findings) != 1 else ''} for `{kernel.name}` "
                  "(compiler, SASS and source patterns: these guide the search).", file=sys.stderr)
            print(f"Measuring and verifying variants needs a GPU: {msg}.", file=sys.stderr)
        return EXIT_OK
    return _optimize(args, src.text, kernel.name, findings)


def _evaluator(args: argparse.Namespace, req: OptimizeRequest, workspace: Path) -> Evaluator:
    """The job's evaluator: a local pool over the chosen GPUs, or Ray's GPUs with ``--ray-address``."""
    from ..gpu.backends import GpuSelectionError
    from ..gpu.evaluator import evaluator_for_job

    choice = args.gpu_choice
    if args.ray_address:
        from ..gpu.ray_backend import RayBackend

        backend = RayBackend(args.ray_address, gpus=choice if isinstance(choice, int) else None)
        return evaluator_for_job(req, workspace=workspace, backend=backend)
    try:
        return evaluator_for_job(req, workspace=workspace, gpus=choice if choice is not None else "all")
    except GpuSelectionError as e:
        raise CliError(str(e), EXIT_FAILED) from e


def _optimize(args: argparse.Namespace, text: str, kernel: str, findings: list[Finding]) -> int:
    from ..gpu.evaluator import GpuUnavailable
    from ..gpu.supervisor import no_gpu_message
    from ..policy.llm import policy_for_request

    req = OptimizeRequest(args.file, text, kernel, args.strategy,
                          Budget(max_candidates=args.budget, wall_seconds=args.time, target_speedup=args.target),
                          findings=findings, arch=args.arch or "sm_90")
    workspace = Path.cwd()
    memory = SearchMemory(workspace / ".warpforge" / "warpforge.db")
    console = Console(stderr=True)
    notices: list[str] = []

    evaluator = _evaluator(args, req, workspace)
    backend = evaluator.backend

    async def job(on_event: Any) -> OptimizeOutcome:
        policy = policy_for_request(req, api_key=args.api_key, memory=memory, on_notice=notices.append)
        try:
            if args.ray_address:
                from ..gpu.ray_backend import RayBackend

                assert isinstance(backend, RayBackend)
                await backend.start()  # say at once when the cluster has no GPU, not after the baseline
                if backend.device_count == 0:
                    raise GpuUnavailable(f"no GPU in the Ray cluster at {args.ray_address}: "
                                         + ("; ".join(backend.notes) or "none joined"))
            outcome = await optimize(req, evaluator, policy=policy, on_event=on_event, memory=memory)
            await policy.reflect(outcome.result)
            return outcome
        finally:
            await policy.aclose()
            await evaluator.close()

    t0 = time.monotonic()
    try:
        if args.json or not console.is_terminal:
            outcome = asyncio.run(job(None))
        else:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                          TimeElapsedColumn(), console=console, transient=True) as bar:
                task = bar.add_task(f"optimizing {kernel}", total=args.budget, info="measuring the baseline")

                def on_event(ev: SearchEvent) -> None:
                    bar.update(task, completed=ev.evaluations,
                               info=f"round {ev.round} · {ev.evaluations} candidates · best {ev.best_speedup:.2f}×")

                outcome = asyncio.run(job(on_event))
    except GpuUnavailable as e:
        if args.ray_address:
            raise CliError(f"`warpforge optimize --ray-address`: {e}", EXIT_FAILED) from e
        raise CliError(no_gpu_message("optimize", str(e)), EXIT_FAILED) from e
    seconds = time.monotonic() - t0
    result = outcome.result
    best = result.best
    ev = best.evaluation
    headline = ev.headline() if ev is not None and hasattr(ev, "headline") else ""
    try:
        diff = outcome.diff() if result.improved else ""
    except HostCodeRefused as e:  # Accept's check: the variant would add host code to the file
        raise CliError(f"{args.file}: {e}") from e
    timing = getattr(ev, "timing", None)
    base_ms = timing.baseline.median if timing is not None and timing.baseline is not None else None
    best_ms = timing.candidate.median if timing is not None and timing.candidate is not None else None
    if args.report:
        info = ReportInfo(args.file, kernel, gpu=getattr(ev, "gpu", ""),
                          baseline_us=base_ms * 1e3 if base_ms else None, best_us=best_ms * 1e3 if best_ms else None,
                          diff=diff, evidence=[headline] if headline else [],
                          findings=[f"{f.code} line {f.line}: {f.message}" for f in findings], notes=notices)
        Path(args.report).write_text(render(result, info), encoding="utf-8")
    applied = None
    if args.apply and result.improved:
        backup = Path(args.file + ".orig")
        shutil.copyfile(args.file, backup)
        Path(args.file).write_text(outcome.new_text(), encoding="utf-8")
        applied = str(backup)
    if args.json:
        print(json.dumps({
            "file": args.file, "kernel": kernel, "improved": result.improved, "speedup": result.best_speedup,
            "headline": headline, "evaluation": ev.to_json() if ev is not None and hasattr(ev, "to_json") else None,
            "diff": diff, "needs": candidate_notes(best.candidate) if result.improved else [],
            "families": list(best.families), "search": result.to_json(), "seconds": round(seconds, 1),
            "applied_backup": applied, "notices": notices, "report": args.report, "backend": backend.summary(),
        }, indent=2))
        return EXIT_OK
    out = Console(highlight=False, soft_wrap=True)
    for n in notices + backend.notes:
        out.print(f"[dim]note: {n}[/]")
    if not result.improved:
        out.print(f"No verified faster variant of `{kernel}` ({result.evaluations} candidates, {result.stopped}).")
    else:
        out.print(f"[bold green]{headline}[/]  [dim]{' + '.join(best.families)}[/]")
        if base_ms is not None and best_ms is not None:
            sp = timing.speedup if timing is not None else None
            interval = f", 95% interval [{sp.low:.2f}, {sp.high:.2f}]" if sp is not None else ""
            out.print(f"{base_ms * 1e3:.1f} µs → {best_ms * 1e3:.1f} µs{interval}")
        out.print(diff, markup=False)
        motivating = [f for f in findings if f.action and f.action in best.families]
        for f in motivating:
            out.print(f"[dim]motivated by {f.code} (line {f.line}): {f.message}[/]")
        if applied:
            out.print(f"written to {args.file} (backup: {applied})")
        else:
            out.print("[dim]nothing was written: use --apply to write it[/]")
    where = f"{backend.device_count} GPU{'s' if backend.device_count != 1 else ''}" + (
        f" of the Ray cluster at {args.ray_address}" if args.ray_address else "")
    lost = f"; {backend.device_losses} lost mid-candidate, retried" if backend.device_losses else ""
    out.print(f"[dim]{result.strategy} search: {result.evaluations} candidates in {seconds:.0f} s on {where}{lost}; "
              f"stopped: {result.stopped}" + (f"; report: {args.report}" if args.report else "") + "[/]")
    return EXIT_OK
