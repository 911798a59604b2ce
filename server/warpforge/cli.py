"""The ``warpforge`` command line: the same jobs as the editor, headless.

Human output by default (rich), ``--json`` for machines. Exit codes follow one contract for every command
(``exitcodes.ExitCode``: 0 done, 1 the job failed, 2 bad input, 3 cannot run here). Bad input is one clear
line on stderr — never a traceback: options and files are checked before any work starts, and anything
unexpected that still escapes a command is reduced to one line by ``main``, the net under those checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from . import __version__
from .commands.inputs import launch_limits, load_file, parse_failure, pick_kernel, unparsed_kernels
from .cuda import Kernel, KernelNotFound, SourceText
from .cuda.rewrite import apply_edits
from .exitcodes import CliError, ExitCode, error_json
from .gpu.tolerance import tolerance_text
from .spec import KernelSpec, SpecError, build_spec
from .spec.annotations import annotation_edits, has_annotation
from .spec.elsewhere import find_host, search_roots
from .spec.resolve import draft_spec

# The contract's codes under the names the commands have always imported.
EXIT_OK = ExitCode.OK
EXIT_FAILED = ExitCode.FAILED
EXIT_USAGE = ExitCode.USAGE
EXIT_UNAVAILABLE = ExitCode.UNAVAILABLE

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE", "CliError", "ExitCode", "main"]


def _out() -> Console:
    return Console(highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- kernels
def cmd_kernels(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    failed: list[CliError] = []
    for path in args.files:
        try:
            listed = _kernel_rows(path)
        except CliError as e:
            if not args.json:
                raise
            # --json: the good files' kernels are kept and the bad file is an error entry (docs/cli.md)
            print(f"warpforge: error: {e}", file=sys.stderr)
            rows.append({"file": path, "error": error_json(str(e), e.code, files=[path])})
            failed.append(e)
            continue
        rows.extend(listed)
    if args.json:
        print(json.dumps(rows, indent=2))
        return failed[0].code if failed else EXIT_OK
    return _print_kernels(rows)


def _kernel_rows(path: str) -> list[dict[str, Any]]:
    """The kernels of one file as rows (warnings about broken kernels on stderr); CliError when it has none
    because it does not parse, or cannot be read."""
    rows: list[dict[str, Any]] = []
    src, model = load_file(path)
    for k in model.kernels:
        pos = src.position(k.name_span.start)
        rows.append({
            "file": path,
            "kernel": k.name,
            "qualified_name": k.qualified_name,
            "line": pos.line + 1,
            "column": pos.character + 1,
            "end_line": k.end_line + 1,
            "params": [p.text for p in k.params],
            "template_params": [t.name for t in k.template_params],
            "launch_bounds": list(k.launch_bounds.args) if k.launch_bounds else None,
            "extern_c": k.extern_c,
            "annotated": k.comment_span is not None
            and has_annotation(src, k),
            "launch_sites": [s.line + 1 for s in model.launches_of(k.name)],
        })
    broken = unparsed_kernels(src, model)
    if broken and not model.kernels:
        # Nothing to list, and the reason is the file's syntax: that is the answer, not "no kernels".
        raise CliError(parse_failure(path, src, model, None) or f"{path}: no __global__ kernels found")
    for prob in model.problems:
        print(f"{path}:{prob.line + 1}: warning: {prob.message}; kernels elsewhere in the file are still "
              "listed", file=sys.stderr)
    for line, name in broken:
        print(f"{path}:{line}: warning: the kernel `{name}` does not parse and is not listed", file=sys.stderr)
    return rows


def _print_kernels(rows: list[dict[str, Any]]) -> int:
    con = _out()
    for r in rows:
        extra = []
        if r["template_params"]:
            extra.append("template<" + ", ".join(r["template_params"]) + ">")
        if r["launch_bounds"]:
            extra.append("__launch_bounds__(" + ", ".join(r["launch_bounds"]) + ")")
        if r["extern_c"]:
            extra.append('extern "C"')
        if r["annotated"]:
            extra.append("spec annotated")
        elif r["launch_sites"]:
            extra.append("launched at line " + ", ".join(map(str, r["launch_sites"])))
        params = ", ".join(r["params"])
        con.print(f"{r['file']}:{r['line']}:{r['column']}: [bold]{r['kernel']}[/]({params})"
                  + (f"  [dim]{'; '.join(extra)}[/]" if extra else ""))
    if not rows:
        con.print("no __global__ kernels found")
    return EXIT_OK


# --------------------------------------------------------------------------- spec
def _print_spec(spec: KernelSpec) -> None:
    con = _out()
    con.print(f"[bold]{spec.kernel}[/] in {spec.file}" + (f"  [dim]({'; '.join(spec.notes)})[/]" if spec.notes
                                                            else ""))
    r = spec.resolve()
    rp = spec.resolve(perturbed=True) if spec.symbolic else None
    t = Table(title="sizes", show_edge=False)
    for col in ("name", "expression", "value", "perturbed", "how", "from"):
        t.add_column(col)
    # The perturbed column is the value the odd-size run really uses, and "how" says why (a fixed size, one a
    # fixed size holds, a base size perturbed once, a size derived from perturbed ones, an odd= expression).
    how = spec.perturbation()
    for s in spec.sizes:
        pv = str(rp.sizes[s.name]) if rp is not None else str(r.sizes[s.name])
        t.add_row(s.name, s.expr, str(r.sizes[s.name]), pv, how[s.name], s.source)
    con.print(t)
    t = Table(title="arguments", show_edge=False)
    for col in ("name", "role", "dtype", "length / value", "data", "tolerance", "from"):
        t.add_column(col)
    for a, ra in zip(spec.args, r.args, strict=True):
        if a.is_buffer:
            tol = tolerance_text(*spec.tolerance_for(a))
            data = "poison" if a.distribution is None else str(a.distribution)
            t.add_row(a.name, a.role.value, a.dtype, f"{a.count} = {ra.count}", data,
                      tol if a.writable else "", a.source)
        else:
            t.add_row(a.name, "scalar", a.dtype, f"{a.value} = {ra.value}", "", "", a.source)
    con.print(t)
    smem = f", smem {spec.launch.smem} = {r.smem}" if spec.launch.smem != "0" else ""
    con.print(f"launch: grid {r.grid[:max(1, len(spec.launch.grid))]} block "
              f"{r.block[:max(1, len(spec.launch.block))]}{smem}  [dim]({spec.launch.source})[/]")
    for tun in spec.tunables:
        con.print(f"tunable {tun.name}: {', '.join(tun.values)} (default {tun.values[0]})")
    if spec.template_args:
        con.print(f"template arguments: <{', '.join(spec.template_args)}>")
    con.print(f"seeds: {', '.join(map(str, spec.seeds))}")


def _annotation_edit(src: SourceText, kernel: Kernel, block: str) -> str:
    """The file text with the kernel's @warpforge lines replaced by ``block`` (other comments kept)."""
    return apply_edits(src, annotation_edits(src, kernel, block))


def cmd_spec(args: argparse.Namespace) -> int:
    src, model = load_file(args.file)
    kernel = pick_kernel(args.file, model, args.kernel, src)
    # A kernel launched only from another file (ops.cu defines it, main.cu launches it): inference reads
    # that launch, found under the project root (bounded, nothing runs).
    host = None
    searched = False
    if not model.readable_launches_of(kernel.name):
        for root in search_roots(args.file):
            host = find_host(args.file, kernel.name, root)
            if host is not None:
                break
        searched = True
    if args.write:
        draft = draft_spec(src, model, kernel, args.file, host, searched)
        spec = draft.spec
        text = _annotation_edit(src, kernel, draft.annotation())
        try:
            Path(args.file).write_text(text, encoding="utf-8")
        except OSError as e:
            raise CliError(f"{args.file}: cannot write: {e.strerror}", EXIT_FAILED) from e
        guessed = "guessed: check every line" in spec.notes
        msg = (f"{args.file}:{kernel.start_line + 1}: wrote the spec of `{kernel.name}`"
               + (" (a starting point: sizes and lengths are guesses, edit them)" if guessed else ""))
        notice = draft.notice()
        if notice:  # which values came from another file, and which lines are guesses (`// guessed:`)
            print(f"note: {args.file}:{kernel.start_line + 1}: `{kernel.name}`: {notice}", file=sys.stderr)
        if args.json:
            print(json.dumps({"written": True, "guessed": guessed, "guesses": draft.guesses,
                              "launch_file": str(host.path) if host is not None else None,
                              "spec": spec.to_json()}, indent=2))
        else:
            print(msg)
        return EXIT_OK
    # Checked against this machine's GPU when it has one, as `optimize` will check it.
    spec = build_spec(src, model, kernel, args.file, launch_limits(None), host=host, searched=searched)
    if spec.guessed:  # lines "Add benchmark spec" guessed and nobody has checked (still marked `// guessed:`)
        print(f"note: {args.file}:{kernel.start_line + 1}: `{kernel.name}`: the spec has guessed values, check "
              f"them: {', '.join(f'`{g}`' for g in spec.guessed)} (delete `// guessed` once checked)", file=sys.stderr)
    if args.json:
        out = spec.to_json()
        out["guessed"] = list(spec.guessed)
        out["resolved"] = _resolved_json(spec, False)
        if spec.symbolic:
            out["perturbed"] = _resolved_json(spec, True)
        out["perturbation"] = spec.perturbation()
        out["spec_hash"] = spec.spec_hash()
        print(json.dumps(out, indent=2))
    else:
        _print_spec(spec)
    return EXIT_OK


def _resolved_json(spec: KernelSpec, perturbed: bool) -> dict[str, Any]:
    r = spec.resolve(perturbed=perturbed)
    return {
        "sizes": r.sizes,
        "grid": list(r.grid),
        "block": list(r.block),
        "smem": r.smem,
        "args": {a.name: (a.count if a.count is not None else a.value) for a in r.args},
        "defines": r.defines,
    }


# --------------------------------------------------------------------------- main
class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line like every other error (it prints the usage block and then
    the error; the usage is one ``--help`` away)."""

    #: ``--json`` was on the command line: an option error is also the JSON error object on stdout
    json_errors = False

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "optimize" of "warpforge optimize"
        text = f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)"
        print(f"warpforge: error: {text}", file=sys.stderr)
        if Parser.json_errors:
            print(json.dumps({"error": error_json(text, ExitCode.USAGE)}, indent=2))
        sys.exit(ExitCode.USAGE)


def _wanted(argv: Sequence[str] | None) -> str | None:
    """The command module a call needs: its command's, none for a bare ``--version``, all (None) for help,
    a typo or anything else (so argparse lists every command)."""
    args = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first is None:
        return "" if "--version" in args and not {"-h", "--help"} & set(args) else None
    if first in ("kernels", "spec"):
        return ""
    return first


def build_parser(argv: Sequence[str] | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The parser; with ``every=False`` only the command ``argv`` names is registered (its module imported)."""
    parser = Parser(
        prog="warpforge",
        description="Make the CUDA kernel under your cursor faster, and prove it.",
        epilog="Exit codes: 0 done, 1 the job failed, 2 bad input (fix it), 3 cannot run here (no GPU or tool: "
               "what could be done without it is printed first).",
    )
    parser.add_argument("--version", action="version", version=f"warpforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("kernels", help="list the __global__ kernels in CUDA files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser("spec", help="print (or --write) the benchmark spec of a kernel")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", "-k", help="kernel name (optional when the file has one kernel)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--write", action="store_true",
                   help="insert a filled-in `// @warpforge` annotation block above the kernel")
    p.set_defaults(func=cmd_spec)

    from .commands import register_all

    register_all(sub, None if every else _wanted(argv))
    return parser


def _input_files(args: argparse.Namespace) -> list[str]:
    """The files a command reads, to locate an error's ``FILE:LINE`` in its message."""
    out: list[str] = []
    for attr in ("file", "files", "candidate"):
        v = getattr(args, attr, None)
        out.extend(v if isinstance(v, list) else [v] if isinstance(v, str) else [])
    return out


def _fail(args: argparse.Namespace | None, message: str, code: int, *, prefix: str = "warpforge: error: ",
          file: str | None = None, line: int | None = None) -> int:
    """One line on stderr; with ``--json`` also the error object on stdout (``exitcodes.error_json``)."""
    print(f"{prefix}{message}", file=sys.stderr)
    if args is not None and getattr(args, "json", False):
        print(json.dumps({"error": error_json(message, code, files=_input_files(args), file=file, line=line)},
                         indent=2))
    return code


def _unexpected(args: argparse.Namespace, e: BaseException) -> int:
    """The last-resort net: an exception no check foresaw is still one line, and a bug report's traceback
    is one environment variable away."""
    if os.environ.get("WARPFORGE_DEBUG"):
        traceback.print_exc()
    detail = " ".join(str(e).split())[:300] or "(no message)"
    return _fail(args, f"unexpected {type(e).__name__}: {detail} (run with WARPFORGE_DEBUG=1 for the traceback)",
                 ExitCode.FAILED)


def main(argv: Sequence[str] | None = None) -> int:
    Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv, every=False)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CliError as e:
        return _fail(args, str(e), e.code)
    except SpecError as e:
        return _fail(args, str(e), ExitCode.USAGE, file=e.file, line=e.line)
    except KernelNotFound as e:
        return _fail(args, str(e), ExitCode.USAGE, file=e.file)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", ExitCode.INTERRUPTED, prefix="warpforge: ")
    except BrokenPipeError:
        return ExitCode.OK
    except MemoryError:
        return _fail(args, "out of memory (run with WARPFORGE_DEBUG=1 for the traceback)", ExitCode.FAILED)
    except Exception as e:
        return _unexpected(args, e)
