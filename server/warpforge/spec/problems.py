"""Every problem of a kernel's annotation block at once, each at its line, with the edit that fixes it.

``build_spec`` stops at the first error, which is right for a job but slow for a person: five mistakes took
four rounds of edit-and-look. The editor asks here instead: every line that cannot be read, every name an
expression uses that is no size, tunable or ``#define`` (``arg w: in float[M]`` names ``M``), every element
type that is not the parameter's, and every parameter nothing gives a value, in one pass. ``build_spec`` runs
first (a good block costs one inference); when it fails and this pass finds nothing, its error is the one.
Two warnings that are no errors come from here too: a launch with fewer dimensions than the kernel indexes
(``blockIdx.y`` under a 1-D grid is always 0), and comment lines that look like a directive but are not read
(``// warpforge: size N = 4096``, ``// @warpfroge``, ``/* @warpforge ... */``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ..cuda.model import FileModel, Kernel
from ..cuda.text import SourceText
from ..cuda.types import file_enumerators
from .annotations import DIRECTIVES, MARK, is_directive_line, parse_annotation
from .ctypes import kernel_scope
from .expr import ExprError
from .expr import parse as expr_parse
from .infer import infer
from .limits import DEFAULT_LIMITS, LaunchLimits
from .model import C_SPELLING, KernelSpec, SpecError


@dataclass(frozen=True)
class LineFix:
    """An edit of one line that fixes a problem: ``replace`` the line with ``text``, or ``insert`` ``text`` as
    a new line before it."""

    title: str
    kind: str
    #: 1-based line
    line: int
    text: str


@dataclass(frozen=True)
class Problem:
    """One problem of a spec, at a 1-based line (None: the kernel's), with an optional fix."""

    line: int | None
    message: str
    fix: LineFix | None = None
    warning: bool = False


_NAME_OF_ARG = re.compile(r"@warpforge\s+arg\s+([A-Za-z_]\w*)")
_WRITE = re.compile(r"write `(?:// @warpforge )?((?:size|arg|launch|tol|tune|template|seeds|flops|bytes)\b[^`]*)`")


def _line_fix(e: SpecError, src: SourceText) -> LineFix | None:
    """The fix a ``SpecError`` spells out (``write `arg y: out float[N]```), as a replacement of its line; None
    when it is advice rather than a line (``...``, ``TYPE``)."""
    if e.line is None or not e.fix:
        return None
    m = _WRITE.search(e.fix)
    if m is None or "..." in m.group(1) or "TYPE" in m.group(1) or e.line > src.line_count:
        return None
    old = src.line_text(e.line - 1)
    if not is_directive_line(old):
        return None
    indent = old[: len(old) - len(old.lstrip())]
    return LineFix(f"Write `{m.group(1)}`", "replace", e.line, f"{indent}// {MARK} {m.group(1)}")


def _names(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        return sorted(expr_parse(text).names())
    except ExprError:
        return []


def annotation_problems(src: SourceText, model: FileModel, kernel: Kernel, file: str,
                        limits: LaunchLimits = DEFAULT_LIMITS) -> tuple[KernelSpec | None, list[Problem]]:
    """The spec (None when it has errors) and every problem of ``kernel``'s block (module docstring)."""
    from .resolve import build_spec, param_dtype  # resolve builds on this module's neighbours

    try:  # the usual case, a good block, costs one inference
        return build_spec(src, model, kernel, file, limits), []
    except SpecError as first:
        failed = first
    errors: list[SpecError] = []
    ann = parse_annotation(src, kernel, file, errors)
    problems = [Problem(e.line, _text(e), _line_fix(e, src)) for e in errors]
    failed_args = {m.group(1) for e in errors if e.line is not None
                   and (m := _NAME_OF_ARG.search(src.line_text(e.line - 1))) is not None}
    for e in errors:  # a launch line that failed (`launch` or a misspelling of it) is its own problem
        word = src.line_text(e.line - 1).split(MARK, 1)[-1].split()[:1] if e.line is not None else []
        if word and difflib.get_close_matches(word[0], ["launch"], cutoff=0.6):
            failed_args.add("launch")
    inf = infer(src, model, kernel, file, ann.template_args)
    known = {s.name for s in ann.sizes} | {s.name for s in inf.sizes} | {t.name for t in ann.tunables}
    known |= {n for n in inf.env.toplevel if inf.env.is_constant(n)}
    known |= set(file_enumerators(src, model, file))
    kline = kernel.start_line + 1
    block_first = src.line_of(kernel.comment_span.start) + 1 if kernel.comment_span is not None else kline

    def unknown(line: int | None, what: str, text: str | None) -> None:
        for n in _names(text):
            if n in known:
                continue
            at = line or kline
            problems.append(Problem(at, f"`{n}` in {what} is not a size, tunable or #define of this file",
                                    LineFix(f"Add `size {n}`", "insert", block_first,
                                            f"// {MARK} size {n} = 1 << 20  // guessed: edit")))
            known.add(n)  # named once, where it is first used

    for sz in ann.sizes:
        unknown(sz.line, f"size `{sz.name}`", sz.expr)
        unknown(sz.line, f"size `{sz.name}`", sz.odd)
    scope = kernel_scope(src, model, kernel, file, ann.template_args or inf.template_args)
    for a in ann.args.values():
        if a.is_buffer:
            unknown(a.line, f"the length of `{a.name}`", a.count)
            if a.distribution is not None:
                unknown(a.line, f"the distribution of `{a.name}`", a.distribution.a)
                unknown(a.line, f"the distribution of `{a.name}`", a.distribution.b)
            written = ann.types.get(a.name)
            dtype = a.dtype or (scope.dtype(written) if written else None)
            want = param_dtype(src, kernel, a.name, ann.template_args or inf.template_args, scope)
            role = a.role.value
            if dtype is None and written:
                fix = LineFix(f"Write `{C_SPELLING.get(want, want)}`", "replace", a.line or kline,
                              _retyped(src, a.line, written, C_SPELLING.get(want, want))) if want and a.line else None
                problems.append(Problem(a.line, f"unknown element type `{written}` for `{a.name}`"
                                        + (f": `{a.name}` holds {C_SPELLING.get(want, want)}" if want else ""),
                                        fix))
            elif dtype is not None and want is not None and dtype != want and a.line:
                problems.append(Problem(a.line, f"`{a.name}` holds {C_SPELLING.get(want, want)} elements, but its "
                                        f"annotation says {C_SPELLING.get(dtype, dtype)} ({role})",
                                        LineFix(f"Write `{C_SPELLING.get(want, want)}`", "replace", a.line,
                                                _retyped(src, a.line, written or C_SPELLING.get(dtype, dtype),
                                                         C_SPELLING.get(want, want)))))
        else:
            unknown(a.line, f"the value of `{a.name}`", a.value)
    if ann.launch is not None:
        for t in (*ann.launch.grid, *ann.launch.block, ann.launch.smem):
            unknown(ann.launch.line, "the launch", t)
    unknown(ann.lines.get("flops"), "flops", ann.flops)
    unknown(ann.lines.get("bytes"), "bytes", ann.bytes)
    if problems:
        # the parameters nothing gives a value (a line that failed above is its own problem), and the launch
        values = {n: a.value for n, a in (inf.args | ann.args).items() if not a.is_buffer and a.value}
        first_size = next((sz.name for sz in ann.sizes), None)
        for p in kernel.params:
            if p.name in ann.args or p.name in inf.args or p.name in failed_args:
                continue
            what = "length" if p.is_pointer else "value"
            line = None
            if p.name in inf.roles:
                bound = inf.bounds.get(p.name, ())
                count = " * ".join(values[b] for b in bound) if bound and all(b in values for b in bound) \
                    else first_size
                if count is not None:
                    ctype = C_SPELLING.get(inf.ctypes.get(p.name, ""), inf.ctypes.get(p.name, ""))
                    line = f"// {MARK} arg {p.name}: {inf.roles[p.name].value} {ctype or 'float'}[{count}]"
            problems.append(Problem(kline, f"no {what} for `{p.name}`: no annotation line gives it and "
                                    f"{inf.problems.get(p.name, 'inference cannot').split(': ', 1)[-1]}",
                                    None if line is None else LineFix(f"Add `arg {p.name}`", "insert", kline,
                                                                      line)))
        if ann.launch is None and inf.launch is None and "launch" not in failed_args:
            n = next((v for n, v in values.items() if (q := kernel.param(n)) is not None and not q.is_pointer),
                     first_size)
            why = inf.problems.get("launch", f"no launch of `{kernel.name}` in this file")
            problems.append(Problem(kline, f"no launch configuration for `{kernel.name}`: no annotation line gives "
                                    f"it and {why}",
                                    LineFix("Add a launch", "insert", kline, f"// {MARK} launch grid=cdiv({n}, 256), "
                                            "block=256  // guessed: one thread per element") if n else None))
        return None, problems
    return None, [Problem(failed.line, _text(failed), _line_fix(failed, src))]


def _retyped(src: SourceText, line: int | None, old: str, new: str) -> str:
    text = src.line_text((line or 1) - 1)
    return re.sub(rf"(:\s*\w+\s+){re.escape(old)}(\s*\[)", rf"\g<1>{new}\g<2>", text, count=1)


def _text(e: SpecError) -> str:
    return e.message + (f"; {e.fix}" if e.fix else "")


_AXIS = re.compile(r"\b(blockIdx|threadIdx)\s*\.\s*([yz])\b")


def launch_dimension_problems(src: SourceText, kernel: Kernel, spec: KernelSpec) -> list[Problem]:
    """A warning where the kernel reads ``blockIdx.y`` (``threadIdx.y``, ``.z``) and the launch gives the grid
    (the block) fewer dimensions: that index is always 0, so the kernel covers one row of its problem."""
    body = src.data[kernel.body_span.start : kernel.body_span.end].decode("utf-8", "replace")
    out: list[Problem] = []
    for var, axis in dict.fromkeys((m.group(1), m.group(2)) for m in _AXIS.finditer(body)):
        dims = spec.launch.grid if var == "blockIdx" else spec.launch.block
        need = 2 if axis == "y" else 3
        if len(dims) >= need:
            continue
        which = "grid" if var == "blockIdx" else "block"
        shown = dims[0] if len(dims) == 1 else f"({', '.join(dims)})"
        example = ", ".join([*dims, *["..."] * (need - len(dims))])
        out.append(Problem(spec.launch.line, f"`{kernel.name}` reads {var}.{axis} but its launch has a "
                           f"{len(dims)}-D {which} ({which}={shown}): {var}.{axis} is always 0",
                           warning=True) if spec.launch.line is not None else Problem(
            kernel.start_line + 1, f"`{kernel.name}` reads {var}.{axis} but its launch has a {len(dims)}-D {which} "
            f"({which}={shown}): {var}.{axis} is always 0; give the {which} {need} dimensions: "
            f"{which}=({example})", warning=True))
    return out


def guessed_values(src: SourceText, kernel: Kernel, spec: KernelSpec) -> list[Problem]:
    """One warning where a block still carries lines "Add benchmark spec" guessed (``// guessed:``): the spec
    runs, but at sizes nobody checked, so a speedup measured with it may not be the user's. At the first such
    line, naming them all; gone once the remarks are deleted."""
    if not spec.guessed or kernel.comment_span is None:
        return []
    first = src.line_of(kernel.comment_span.start)
    last = src.line_of(kernel.comment_span.end)
    at = next((i + 1 for i in range(first, last + 1)
               if is_directive_line(src.line_text(i)) and re.search(r"\s//\s*guessed\b", src.line_text(i))), None)
    if at is None:
        return []
    return [Problem(at, f"the spec of `{kernel.name}` has guessed values ({', '.join(spec.guessed)}): check them "
                    "(sizes, lengths, launch), then delete the `// guessed` remarks", warning=True)]


_DIRECTIVE_WORDS = "|".join(DIRECTIVES)
#: `// warpforge: size N = 4096`, `// warpforge size ...` (no @); `launch with`/`compile with` are the
#: remarks an accepted variant carries, not directives
_NO_AT = re.compile(rf"^\s*//+\s*warpforge\s*:?\s*(?P<rest>(?:{_DIRECTIVE_WORDS})\b(?!\s+with\b).*)$", re.I)
_AT_WORD = re.compile(r"^\s*//+\s*@\s*(?P<word>[A-Za-z_-]+)\s*:?\s*(?P<rest>.*)$")
_BLOCK = re.compile(r"^\s*/\*+\s*@?\s*warpforge\b\s*:?\s*(?P<rest>.*?)\s*\*+/\s*$", re.I)


def near_misses(src: SourceText, kernel: Kernel) -> list[Problem]:
    """Comment lines above ``kernel`` that look like a directive but are not read, each with "did you mean"
    and the line to write. The lines looked at are the comments directly above the kernel (its ``template``
    line, if any), up to a blank line."""
    out: list[Problem] = []
    idx = kernel.start_line - 1
    while idx >= 0:
        raw = src.line_text(idx)
        text = raw.strip()
        if not text or not (text.startswith("//") or text.startswith("/*") or text.startswith("*")):
            break
        rest: str | None = None
        if not is_directive_line(text):
            if (m := _BLOCK.match(text)) is not None or (m := _NO_AT.match(text)) is not None:
                rest = m.group("rest")
            elif (m := _AT_WORD.match(text)) is not None:
                word = m.group("word").lower()
                if word == "warpforge" or difflib.SequenceMatcher(None, word, "warpforge").ratio() >= 0.75:
                    rest = m.group("rest")
        if rest is not None:
            indent = raw[: len(raw) - len(raw.lstrip())]
            fixed = f"// {MARK} {rest}".rstrip()
            out.append(Problem(idx + 1, f"this line is not read as a spec directive: did you mean `{fixed}`?",
                               LineFix(f"Write `{fixed}`", "replace", idx + 1, indent + fixed), warning=True))
        idx -= 1
    return out[::-1]
