"""``warpforge hints FILE... [--kernel K] [--json]``: static bottleneck hints, no GPU needed.

Printed in the compiler format editors and CI logs already understand
(``file:line:col: severity: message [WF123]``), with the evidence indented below.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..policy.whynot_hint import install as install_why_not
from ..profile.findings import Finding
from ..profile.hints import HintsReport, analyze_source
from . import inputs


def register(sub: Any) -> None:
    p = sub.add_parser("hints", help="static bottleneck hints (compiler, SASS, source patterns); no GPU needed")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--kernel", "-k", action="append", help="only this kernel (repeatable)")
    p.add_argument("--arch", type=inputs.arch,
                   help="target architecture, e.g. sm_90 (default: the local GPU's, else sm_90)")
    p.add_argument("--nvcc", help="path to nvcc (default: PATH, CUDA_HOME, /usr/local/cuda, pip)")
    p.add_argument("--no-compile", action="store_true", help="source patterns only (no nvcc/nvdisasm)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _format(f: Finding) -> str:
    lines = [f"{f.file}:{f.line}:{f.column}: {f.severity.value}: {f.message} [{f.code}]"]
    # folded findings (``evidence.merged``) are shown as their related notes below, not again here
    ev = f.evidence_text()
    if ev:
        lines.append(f"    evidence: {ev}")
    if f.gain is not None:
        lines.append(f"    estimated gain: {f.gain:.2f}x" + (f" ({f.gain_basis})" if f.gain_basis else ""))
    if f.action:
        lines.append(f"    suggested: {f.action}")
    for rng, msg in f.related:
        lines.append(f"    {f.file}:{rng.start.line + 1}: note: {msg}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..exitcodes import CliError, ExitCode, error_json
    from ..profile.hints import parse_file
    from .inputs import no_kernels, parse_failure, read_source, unparsed_kernels

    # Every file is read and checked before the first one is compiled: a bad one fails the run at once —
    # or, with --json, becomes an error entry in its place while the good files are still analyzed (a script
    # over many files keeps what could be done; the exit code is still the bad file's).
    failed: dict[str, CliError] = {}
    files = []
    for path in args.files:
        try:
            src = read_source(path)
            model = parse_file(path, src.data)  # with the qualifier macros of its headers (DEV float f())
            broken = unparsed_kernels(src, model)
            if not model.kernels:  # nothing to analyze is bad input, as for `spec` (an empty file included)
                raise CliError(parse_failure(path, src, model, None) or no_kernels(path, src))
        except CliError as e:
            if not args.json:
                raise
            failed[path] = e
            continue
        files.append((path, src, model, broken))
    reports: dict[str, HintsReport] = {}
    install_why_not()  # WF113: the closest structural rewrite and what blocked it
    for path, src, model, broken in files:
        report = analyze_source(path, src.data, kernels=args.kernel, arch=args.arch, nvcc=args.nvcc,
                                use_compiler=not args.no_compile, model=model)
        if args.kernel and not report.kernels:
            missing = CliError(parse_failure(path, src, model, args.kernel[0])
                               or f"{path}: no __global__ kernel named {', '.join(f'`{k}`' for k in args.kernel)}")
            if not args.json:
                raise missing
            failed[path] = missing
            continue
        report.notes.extend(f"{path}:{line}: the kernel `{name}` does not parse and is not analyzed"
                            for line, name in broken)
        reports[path] = report
    if args.json:
        out: list[dict[str, Any]] = []
        for path in dict.fromkeys(args.files):
            if path in failed:
                err = failed[path]
                out.append({"file": path, "error": error_json(str(err), err.code, files=[path])})
                print(f"warpforge: error: {err}", file=sys.stderr)
            else:
                r = reports[path]
                out.append({"file": r.file, "kernels": r.kernels, "notes": r.notes,
                            "findings": [f.to_json() for f in r.findings]})
        print(json.dumps(out, indent=2))
    else:
        for r in reports.values():
            for note in r.notes:
                print(f"note: {note}", file=sys.stderr)
            for f in r.findings:
                print(_format(f))
        total = sum(len(r.findings) for r in reports.values())
        kernels = sum(len(r.kernels) for r in reports.values())
        print(f"{total} finding{'s' if total != 1 else ''} in {kernels} kernel{'s' if kernels != 1 else ''}. "
              "Timing, verification and profiler-grounded hints need an NVIDIA GPU "
              "(`warpforge bench`, `warpforge profile`, `warpforge optimize`).", file=sys.stderr)
    if failed:
        return next(iter(failed.values())).code
    errors = any(f.severity.value == "error" for r in reports.values() for f in r.findings)
    return ExitCode.FAILED if errors else ExitCode.OK
