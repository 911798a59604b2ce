"""``warpforge optimize FILE [--kernel K] [--strategy beam|mcts] [--budget N] [--gpus all|N|0,1]
[--ray-address ADDR] [--store PATH] [--json] [--report out.html] [--apply] [--keep-launch] [--fresh-profile]
[--workspace DIR]``:
the main job, headless.

Candidates are spread over every visible GPU of this machine (``--gpus``, default all, honouring
``CUDA_VISIBLE_DEVICES``), or over the GPUs of a Ray cluster (``--ray-address``); each speedup is still a
ratio measured on one GPU, and verification is the same everywhere.

Every option, the file and its spec are checked before anything runs (exit 2 and one line naming what is
wrong). On a machine without a GPU (or without Ray, with ``--ray-address``) it still does the useful part —
the static hints that would guide the search — and then says what needs a GPU, exiting 3 ("cannot run
here", ``ExitCode.UNAVAILABLE``): the hints are printed, but the job, a verified variant, was not done.
With a GPU it runs ``app.OptimizeJob``, the job the editor runs: the baseline is profiled beside the first
round (Nsight Compute where it is available, within a quarter of ``--time``; its measured findings order the
later rounds, and say so in a note), a rich progress bar (round, candidates, best verified speedup), then the best
verified variant as a unified diff with its speedup and interval, what was checked, and the findings that
motivated it, and a last line with the seconds of each phase and of the first verified improvement
(``phases`` and ``first_improvement_seconds`` in the JSON, ``app.phases``). ``--apply`` writes it (keeping a
backup); nothing is written otherwise.

The kernel's launches elsewhere in the workspace (``--workspace``, default the current folder when it holds
FILE, else FILE's folder; ``cuda.workspace``) are part of the result: a variant verified with another launch
rewrites each launch site in its own names, in the diff and with ``--apply`` (each file backed up); a site
where that is not mechanical is printed as ``file:line: old -> new (needs a launch change: why)`` and shown
in the diff without being written. ``--keep-launch`` searches only variants that keep the launch. Exit 0 when the search
ran (finding no faster variant is an answer), 1 when it could not: the original kernel could not be
evaluated, or the report or ``--apply`` could not be written (the result is printed all the same).

Evaluations, baseline profiles and search memory are kept in the user's cache, keyed by the current folder
(``--store`` names another file); evaluations replayed from there instead of measured now are counted in a line
of their own and in the JSON (``cached_evaluations``, ``evaluation.cached``), and their headline says so. A
baseline profile reused from there is said in its note and in ``baseline_profile.reused``; ``--fresh-profile``
measures it again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Progress_

from .. import defaults
from ..app import JobEvent, OptimizeJob, OptimizeSettings, PreparedKernel, Profiled, Progress
from ..app.backend import BackendChoice, make_evaluator
from ..exitcodes import CliError, ExitCode, error_json
from ..profile.findings import Finding
from ..profile.hints import analyze_source
from ..profile.limit import Limit
from ..search.engine import SearchResult
from ..search.memory import SearchMemory
from ..search.optimize import HostCodeRefused, OptimizeRequest, WorkspaceChange, build_change, candidate_notes
from ..search.report import ReportInfo, render
from ..search.tree import EvaluatorLike
from ..store import Store, StoreError, workspace_db
from . import inputs
from .hints import _format
from .inputs import load_file, pick_kernel


def register(sub: Any) -> None:
    p = sub.add_parser("optimize", help="search for a verified faster variant of a kernel (needs a GPU)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--strategy", choices=defaults.STRATEGIES, default=defaults.STRATEGY)
    p.add_argument("--budget", type=inputs.positive_int, default=defaults.BUDGET,
                   help=f"maximum candidates to evaluate (default {defaults.BUDGET})")
    p.add_argument("--time", type=inputs.positive_float, default=defaults.TIME_BUDGET,
                   help=f"wall-clock budget in seconds (default {defaults.TIME_BUDGET:g})")
    p.add_argument("--target", type=inputs.speedup, help="stop once a variant is this many times faster (above 1)")
    p.add_argument("--arch", type=inputs.arch, help="target architecture (default: the GPU's)")
    p.add_argument("--gpus", metavar="all|N|0,1",
                   help="GPUs of this machine to spread the search over: all visible ones (the default, honouring "
                        "CUDA_VISIBLE_DEVICES), the first N, or CUDA indices (one alone as `1,`)")
    p.add_argument("--device", type=inputs.index_int, help="one CUDA device index (same as --gpus D,)")
    p.add_argument("--ray-address", metavar="ADDR", type=inputs.ray_address,
                   help="evaluate on a Ray cluster: auto, HOST:PORT, ray://HOST:10001, or `local` to start one on "
                        "this machine (needs the ray extra)")
    p.add_argument("--api-key", help="Anthropic API key (default: $ANTHROPIC_API_KEY; without one, rules only)")
    p.add_argument("--report", metavar="OUT.html", help="write an HTML report (search tree, speedup curve, diff)")
    p.add_argument("--apply", action="store_true", help="write the best verified variant into FILE (backup kept)")
    p.add_argument("--store", metavar="PATH",
                   help="the evaluation cache and search memory: a SQLite file, or a folder for warpforge.db "
                        "(default: in the user cache, keyed by the current folder; never in the workspace)")
    p.add_argument("--fresh-profile", action="store_true",
                   help="profile the original kernel again even when the store holds its profile from an earlier "
                        "run on the same kernel, spec, build and GPU (the new profile replaces it)")
    p.add_argument("--keep-launch", action="store_true",
                   help="search only variants that launch the kernel as now (same grid, block, shared memory): "
                        "no host launch site changes")
    p.add_argument("--workspace", metavar="DIR",
                   help="where the kernel's other launch sites are looked for (default: the current folder when "
                        "it holds FILE, else FILE's folder); build folders, node_modules and .git are skipped")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def workspace_root(args: argparse.Namespace) -> Path:
    """Where the kernel's launch sites are looked for: ``--workspace``, else the current folder when it holds
    FILE, else FILE's own folder (never a home directory the file merely sits below)."""
    if args.workspace:
        root = Path(args.workspace)
        if not root.is_dir():
            raise CliError(f"--workspace {args.workspace}: not a folder")
        return root
    cwd = Path.cwd().resolve()
    file = Path(args.file).resolve()
    return cwd if file.is_relative_to(cwd) else file.parent


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
    if args.ray_address and (args.device is not None or isinstance(gpus, list)):
        raise CliError("with --ray-address, --gpus is all or a number: Ray chooses the GPUs")
    return [args.device] if args.device is not None else gpus


def _why_not_here(args: argparse.Namespace) -> str | None:
    """What this machine lacks for the search (None: nothing): Ray with ``--ray-address`` (the GPUs are the
    cluster's, so this machine needs neither a GPU nor pycuda), else a GPU with pycuda."""
    from ..gpu.supervisor import gpu_unavailable_reason, no_gpu_message

    if args.ray_address:
        from ..gpu.ray_backend import ray_available
        from ..install import install_hint

        return None if ray_available() else f"`warpforge optimize --ray-address` needs Ray: {install_hint('ray')}"
    why = gpu_unavailable_reason()
    return None if why is None else no_gpu_message("optimize", why)


def _static_only(args: argparse.Namespace, kernel: str, findings: list[Finding], msg: str) -> int:
    """Print what could be done here — the static findings — and what needs a GPU; exit "cannot run here"."""
    if args.json:
        # the result that could be had here, and the error contract's object for why the rest could not
        print(json.dumps({"file": args.file, "kernel": kernel, "gpu": None, "message": msg,
                          "findings": [f.to_json() for f in findings],
                          "error": error_json(msg, ExitCode.UNAVAILABLE)}, indent=2))
    else:
        for f in findings:
            print(_format(f))
        print(f"\n{len(findings)} static finding{'s' if len(findings) != 1 else ''} for `{kernel}` "
              "(compiler, SASS and source patterns: these guide the search).", file=sys.stderr)
        print(f"Measuring and verifying variants needs a GPU: {msg}.", file=sys.stderr)
    return ExitCode.UNAVAILABLE


def run(args: argparse.Namespace) -> int:
    from ..spec import build_spec

    # Everything the user gave is checked before any work: a mistake found after the search costs its GPU time.
    args.gpu_choice = _gpu_choice(args)
    if args.report:
        inputs.check_writable(args.report, "--report")
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel, src)
    if args.apply:
        inputs.check_writable(args.file, "--apply")
        inputs.check_writable(args.file + ".orig", "--apply (the backup)")
    args.store_file = _store_file(args)
    limits = inputs.launch_limits(args.arch, _device(args), local=not args.ray_address)
    spec = build_spec(src, model, kernel, args.file, limits)  # a bad spec is reported before anything runs
    prepared = PreparedKernel(args.file, src, model, kernel, spec)  # the job's one parse
    prepared = prepared.with_workspace(workspace_root(args))  # the kernel's launches in other files
    findings = _static(args.file, src.text, kernel.name, args.arch)
    why = _why_not_here(args)
    if why is not None:
        return _static_only(args, kernel.name, findings, why)
    return _optimize(args, prepared, findings)


def _store_file(args: argparse.Namespace) -> Path:
    """The store this run reads and writes, opened once now: a file that cannot be used is bad input (exit 2),
    not an error after the baseline."""
    path = workspace_db(Path.cwd(), args.store)
    try:
        Store(path).close()
    except StoreError as e:
        raise CliError(f"--store: {e}" if args.store else str(e)) from e
    return path


def _cached(result: Any) -> int:
    """How many of the search's evaluations were replayed from the store instead of measured now."""
    return sum(1 for n in result.root.walk() if getattr(n.evaluation, "cached", False))


def _device(args: argparse.Namespace) -> int:
    """The GPU the spec's limits and the baseline profile are taken from: the first chosen one."""
    choice = args.gpu_choice
    return choice[0] if isinstance(choice, list) else 0


def _evaluator(args: argparse.Namespace, req: OptimizeRequest, workspace: Path) -> EvaluatorLike:
    """The job's evaluator: a local pool over the chosen GPUs, or Ray's GPUs with ``--ray-address``."""
    choice = args.gpu_choice
    backend = BackendChoice("ray", gpus=choice, ray_address=args.ray_address, workspace=workspace, store=args.store) \
        if args.ray_address else BackendChoice("local", gpus=choice, workspace=workspace, store=args.store)
    return make_evaluator(backend, req)


def _baseline_note(event: Profiled) -> str:
    """The baseline profile in one line: what was measured, or why nothing was."""
    r = event.report
    if event.findings:
        cls = f"{r.cls}; " if r.cls else ""
        how = f"baseline profile reused from {r.reused} (--fresh-profile measures it again)" if r.reused \
            else "baseline profiled"
        return (f"{how}: {cls}{len(event.findings)} measured finding"
                f"{'s' if len(event.findings) != 1 else ''} guide the search")
    return f"baseline not profiled: {r.notice or 'no measurement'}"


def _optimize(args: argparse.Namespace, prepared: PreparedKernel, findings: list[Finding]) -> int:
    from ..gpu.backends import GpuSelectionError, GpuUnavailable
    from ..gpu.supervisor import no_gpu_message

    kernel = prepared.kernel.name
    workspace = Path.cwd()
    console = Console(stderr=True)
    notes: list[str] = []
    if prepared.spec.guessed:  # measured at sizes nobody checked: the user should know before reading a speedup
        notes.append(f"the spec of `{kernel}` has guessed values ({', '.join(prepared.spec.guessed)}): "
                     "the speedup is measured at those sizes; check the `// guessed` lines")
    baseline: list[Profiled] = []
    bar_update: list[Callable[[Progress], None]] = []

    def on_event(ev: JobEvent) -> None:
        if isinstance(ev, Progress):
            for update in bar_update:
                update(ev)
        elif isinstance(ev, Profiled):
            baseline.append(ev)
            notes.append(_baseline_note(ev))

    job = OptimizeJob(prepared, OptimizeSettings(args.strategy, args.budget, args.time, args.target, args.arch,
                                                 api_key=args.api_key, device=_device(args),
                                                 keep_launch=args.keep_launch, fresh_profile=args.fresh_profile),
                      lambda req: _evaluator(args, req, workspace), findings=findings,
                      memory=SearchMemory(Store(args.store_file)), on_event=on_event)
    try:
        evaluator = job.start_evaluator()
    except GpuSelectionError as e:  # e.g. --gpus 4 on a machine with 2: fine input, the wrong machine
        return _static_only(args, kernel, findings, str(e))
    backend = getattr(evaluator, "backend", None)

    t0 = time.monotonic()
    try:
        if args.json or not console.is_terminal:
            outcome = asyncio.run(job.run())
        else:
            with Progress_(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                           TimeElapsedColumn(), console=console, transient=True) as bar:
                task = bar.add_task(f"optimizing {kernel}", total=args.budget, info="measuring the baseline")
                bar_update.append(lambda ev: bar.update(task, completed=ev.evaluations, info=ev.message))
                outcome = asyncio.run(job.run())
    except GpuUnavailable as e:
        msg = f"`warpforge optimize --ray-address`: {e}" if args.ray_address else no_gpu_message("optimize", str(e))
        return _static_only(args, kernel, findings, msg)
    except ConnectionError as e:
        if not args.ray_address:
            raise
        # Ray says so with an exception: an unreachable cluster is a machine that cannot run the job.
        return _static_only(args, kernel, findings, f"the Ray cluster at {args.ray_address} cannot be reached "
                            f"({' '.join(str(e).split())})")
    notices = job.notices
    findings = list(job.request.findings)  # the measured ones when the baseline was profiled
    seconds = time.monotonic() - t0
    result = outcome.result
    best = result.best
    ev = best.evaluation
    headline = ev.headline() if ev is not None and hasattr(ev, "headline") else ""
    try:
        change = prepared.workspace_change(best.candidate) if result.improved else None
    except HostCodeRefused as e:  # Accept's check: the variant would add host code to the file
        raise CliError(f"{args.file}: {e}") from e
    diff = change.diff(args.file) if change is not None else ""
    launch_lines = change.messages() if change is not None else []
    # the result against the kernel's physical limit: the best variant's time, and the original's
    limit = job.limit(best if best.ok else None)
    base_limit = job.limit(result.root if result.root.ok else None)
    timing = getattr(ev, "timing", None)
    base_ms = timing.baseline.median if timing is not None and timing.baseline is not None else None
    best_ms = timing.candidate.median if timing is not None and timing.candidate is not None else None
    # A write that fails after the search is said once, after the result is printed: the search is not lost.
    write_errors: list[str] = []
    if args.report:
        info = ReportInfo(args.file, kernel, gpu=getattr(ev, "gpu", ""),
                          baseline_us=base_ms * 1e3 if base_ms else None, best_us=best_ms * 1e3 if best_ms else None,
                          diff=diff, evidence=[headline] if headline else [],
                          findings=[f"{f.code} line {f.line}: {f.message}" for f in findings], notes=notices,
                          limit=_limit_line(limit, base_limit, result.improved))
        try:
            Path(args.report).write_text(render(result, info), encoding="utf-8")
        except OSError as e:
            write_errors.append(f"--report {args.report}: cannot write: {e.strerror or e}")
    applied = None
    if args.apply and change is not None:
        backup = Path(args.file + ".orig")
        try:
            shutil.copyfile(args.file, backup)
            Path(args.file).write_text(change.new_text, encoding="utf-8")
            applied = str(backup)
        except OSError as e:
            write_errors.append(f"--apply {args.file}: cannot write: {e.strerror or e}")
        write_errors.extend(_write_launchers(change) if applied else [])
    # The original kernel is the oracle and the baseline: without it nothing was searched.
    code = ExitCode.OK if result.root.ok and not write_errors else ExitCode.FAILED
    if args.json:
        print(json.dumps({
            "file": args.file, "kernel": kernel, "improved": result.improved, "speedup": result.best_speedup,
            # the back-to-back figure, named as such, where it differs from the (cold) speedup by more than its
            # interval
            "hot_speedup": timing.hot_ratio if timing is not None and result.improved else None,
            "headline": headline, "evaluation": ev.to_json() if ev is not None and hasattr(ev, "to_json") else None,
            "diff": diff, "needs": candidate_notes(best.candidate) if result.improved else [],
            "build_change": build_change(best.candidate) if result.improved else None,
            "families": list(best.families), "search": result.to_json(), "seconds": round(seconds, 1),
            "phases": job.phases.to_json(),
            "first_improvement_seconds": job.phases.to_json()["first_improvement_seconds"],
            "applied_backup": applied, "notices": notices, "report": args.report,
            "spec_guessed": list(prepared.spec.guessed),
            "backend": backend.summary() if backend is not None else None, "errors": write_errors,
            "baseline_profile": _baseline_json(baseline[0]) if baseline else None,
            "stopped": result.stopped,
            "limit": limit.to_json() if limit is not None else None,
            "baseline_limit": base_limit.to_json() if base_limit is not None else None,
            "store": str(args.store_file), "cached_evaluations": _cached(result),
            "evaluations": _evaluations(result),
            "launch_changes": launch_lines,
            "needs_launch_change": [c.message(change.root) for c in change.manual] if change is not None else [],
            "launch_files": [str(p) for p in change.files] if change is not None else [],
        }, indent=2))
        return _finish(write_errors, code)
    out = Console(highlight=False, soft_wrap=True)
    for n in notes + notices + (backend.notes if backend is not None else []):
        out.print(f"[dim]note: {n}[/]")
    replayed = _cached(result)
    if replayed:
        out.print(f"[yellow]{replayed} of {result.evaluations} evaluation{'s' if result.evaluations != 1 else ''} "
                  f"replayed from the evaluation cache ({escape(str(args.store_file))}), measured by an earlier run "
                  "on the same GPU model and driver; use --store with another file to measure afresh[/]")
    limit_line = _limit_line(limit, base_limit, result.improved)
    if not result.improved:
        out.print(f"No verified faster variant of `{kernel}` ({result.evaluations} candidates, {result.stopped}).")
        if limit_line:
            out.print(limit_line)
    else:
        out.print(f"[bold green]{headline}[/]  [dim]{' + '.join(best.families)}[/]")
        if base_ms is not None and best_ms is not None:
            sp = timing.speedup if timing is not None else None
            interval = f", 95% interval [{sp.low:.2f}, {sp.high:.2f}]" if sp is not None else ""
            out.print(f"{base_ms * 1e3:.1f} µs → {best_ms * 1e3:.1f} µs{interval} (cold: L2 flushed before each "
                      "launch)")
            hot = timing.hot if timing is not None else None
            if hot is not None and hot.speedup is not None and timing is not None and timing.hot_differs:
                out.print(f"[dim]{escape(hot.text())}; {hot.baseline.median * 1e3:.1f} µs → "
                          f"{hot.candidate.median * 1e3:.1f} µs (differs from the cold figure by more than its "
                          "interval; the claim is the cold one)[/]")
        if limit_line:
            out.print(limit_line)
        out.print(diff, markup=False)
        for line in launch_lines:
            style = "yellow" if "needs a launch change" in line else "dim"
            out.print(f"[{style}]launch: {escape(line)}[/]")
        build = build_change(best.candidate)
        if build is not None:
            out.print(f"[yellow]{escape(build)}[/]")
        motivating = [f for f in findings if f.action and f.action in best.families]
        for f in motivating:
            out.print(f"[dim]motivated by {f.code} (line {f.line}): {f.message}[/]")
        if applied:
            out.print(f"written to {args.file} (backup: {applied})")
        else:
            out.print("[dim]nothing was written: use --apply to write it[/]")
    count = backend.device_count if backend is not None else 1
    where = f"{count} GPU{'s' if count != 1 else ''}" + (
        f" of the Ray cluster at {args.ray_address}" if args.ray_address else "")
    losses = backend.device_losses if backend is not None else 0
    lost = f"; {losses} lost mid-candidate, retried" if losses else ""
    out.print(f"[dim]{result.strategy} search: {result.evaluations} candidates in {seconds:.0f} s on {where}{lost}; "
              f"stopped: {result.stopped}" + (f"; report: {args.report}" if args.report and not write_errors
                                              else "") + "[/]")
    out.print(f"[dim]{escape(job.phases.text())}[/]")
    return _finish(write_errors, code)


def _write_launchers(change: WorkspaceChange) -> list[str]:
    """``--apply``'s writes of the other files whose launches change (each backed up as ``FILE.orig``);
    the errors, said after the result like the others."""
    errors: list[str] = []
    for path, (_old, new) in sorted(change.files.items()):
        try:
            shutil.copyfile(path, str(path) + ".orig")
            path.write_text(new, encoding="utf-8")
        except OSError as e:
            errors.append(f"--apply {path}: cannot write its launch: {e.strerror or e}")
    return errors


def _limit_line(limit: Limit | None, base: Limit | None, improved: bool) -> str:
    """The result against the physical limit in one line ("" when the spec gives no bytes or flops)."""
    if limit is None:
        return ""
    if limit.pct_limit is None:
        return limit.text()
    if improved and base is not None and base.pct_limit is not None:
        return f"now at {limit.text()}; the original was at {base.pct_limit:.0f} %"
    return f"{'now' if improved else 'the original is'} at {limit.text()}"


def _baseline_json(event: Profiled) -> dict[str, Any]:
    return {"class": event.report.cls, "notice": event.report.notice, "reused": event.report.reused,
            "findings": [f.to_json() for f in event.findings],
            "seconds": {k: round(v, 3) for k, v in event.report.seconds.items()}}


def _evaluations(result: SearchResult) -> list[dict[str, Any]]:
    """Each evaluated node in evaluation order: its verdict, how fully it was checked, and where its time went
    (``Evaluation.time_split``): what a user reads to see why a budget bought as many candidates as it did."""
    out: list[dict[str, Any]] = []
    for n in sorted((n for n in result.nodes if n.evaluation is not None), key=lambda n: n.eval_index or 0):
        ev = n.evaluation
        timing = getattr(ev, "timing", None)
        out.append({"node": n.id, "family": n.candidate.family, "status": n.status, "verified": n.verified,
                    "speedup": n.speedup, "seconds": round(float(getattr(ev, "seconds", 0.0) or 0.0), 3),
                    "abandoned": bool(getattr(timing, "abandoned", False)),
                    "time_split": {k: round(float(v), 4) for k, v in (getattr(ev, "time_split", None) or {}).items()}})
    return out


def _finish(write_errors: list[str], code: int) -> int:
    for e in write_errors:
        print(f"warpforge: error: {e}", file=sys.stderr)
    return code
