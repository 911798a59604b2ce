"""Parse the ``// @warpforge`` annotation block above a kernel (format: docs/spec-format.md).

Every error names the file and line and says what to write instead, because the person reading it is
in the middle of writing the block.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace

from ..cuda.model import Kernel, Param
from ..cuda.rewrite import TextEdit, make_edit
from ..cuda.text import SourceText, Span
from .expr import ExprError, is_constant, parse
from .model import (
    TOL_KEYS,
    ArgSpec,
    Distribution,
    LaunchSpec,
    Role,
    SizeSpec,
    SpecError,
    Tunable,
    canonical_dtype,
    default_distribution,
    expr_message,
)

MARK = "@warpforge"
#: a directive line: the comment starts with the mark (prose that merely mentions it is not one)
_DIRECTIVE_LINE = re.compile(r"^\s*//+\s*@warpforge\b")


def is_directive_line(line: str) -> bool:
    """Whether a source line is a ``// @warpforge ...`` directive (and not prose that mentions the mark)."""
    return _DIRECTIVE_LINE.match(line) is not None
DIRECTIVES = ("size", "arg", "launch", "tol", "tune", "template", "seeds", "flops", "bytes")

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SIZE = re.compile(rf"^({_NAME})\s*=\s*(.+?)$")
_ARG_BUF = re.compile(rf"^({_NAME})\s*:\s*(\w+)\s+([A-Za-z_][\w ]*?)\s*\[(.*)\]\s*(.*)$")
_ARG_SCALAR = re.compile(rf"^({_NAME})\s*(?::\s*([A-Za-z_][\w :]*?))?\s*=\s*(.+)$")
_DIST = re.compile(r"^(uniform|normal|int|const|offsets)\s*\((.*)\)$|^(zeros)$")


@dataclass
class Annotation:
    """What the block says; fields left None/empty were not given."""

    sizes: list[SizeSpec] = field(default_factory=list)
    args: dict[str, ArgSpec] = field(default_factory=dict)
    launch: LaunchSpec | None = None
    tolerance: tuple[float, float, float] | None = None
    tunables: list[Tunable] = field(default_factory=list)
    template_args: tuple[str, ...] = ()
    seeds: tuple[int, ...] | None = None
    flops: str | None = None
    bytes: str | None = None
    present: bool = False
    #: the line of each single-line directive (``flops``, ``bytes``, ``template``, ``seeds``, ``tol``)
    lines: dict[str, int] = field(default_factory=dict)
    #: types written in the block that ``build_spec`` resolves through the file's typedefs, ``using``, enums and
    #: the template arguments (known only once the whole block and the launch are read): argument -> the type
    #: as written (``real`` of ``arg in: in real[N]``, ``int`` of ``arg nbins: int = 768``)
    types: dict[str, str] = field(default_factory=dict)
    #: the lines that still carry the ``// guessed: why`` remark "Add benchmark spec" wrote (``size N``,
    #: ``arg x``, ``launch``, ``template``): values nobody has checked yet, counted apart from exact ones
    #: (the line's key -> the remark's reason, which "Edit benchmark spec" writes back)
    guessed: dict[str, str] = field(default_factory=dict)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside parentheses/brackets."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _check_expr(text: str, file: str, line: int, what: str) -> str:
    try:
        parse(text)
    except ExprError as e:
        raise SpecError(file, line, f"{what}: {expr_message(e)}",
                        "write a C-like arithmetic expression, e.g. `(N + 255) / 256`") from e
    return text.strip()


def parse_dims(text: str, file: str, line: int, what: str) -> tuple[str, ...]:
    t = text.strip()
    if t.startswith("(") and t.endswith(")"):
        inner = t[1:-1]
        parts = _split_top(inner)
        # `(N + 255) / 256` starts and ends with parens but is one expression: only a top-level comma
        # inside the outer parentheses makes a tuple, and the outer parens must match each other.
        if len(parts) > 1 and _balanced(inner):
            if len(parts) > 3:
                raise SpecError(file, line, f"{what} has {len(parts)} dimensions", "use at most 3: (x, y, z)")
            return tuple(_check_expr(p, file, line, what) for p in parts)
    if t.startswith("dim3(") and t.endswith(")") and _balanced(t[5:-1]):
        # `dim3(N)` is the 1-tuple `N`, not the expression `(N)`; `dim3(a, b)` a 2-tuple.
        parts = _split_top(t[5:-1])
        if not 1 <= len(parts) <= 3:
            raise SpecError(file, line, f"{what} has {len(parts)} dimensions", "use 1 to 3: dim3(x, y, z)")
        return tuple(_check_expr(p, file, line, what) for p in parts)
    return (_check_expr(t, file, line, what),)


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _number(text: str, file: str, line: int, what: str) -> float:
    try:
        return float(parse(text).evaluate({}))
    except ExprError as e:
        raise SpecError(file, line, f"{what}: expected a number, got `{text}`", f"write e.g. `{what}=1e-4`") from e


def parse_distribution(text: str, file: str, line: int) -> Distribution:
    m = _DIST.match(text.strip())
    if not m:
        raise SpecError(file, line, f"unknown value distribution `{text}`",
                        "write uniform(LO, HI), normal(MEAN, STD), int(LO, HI), offsets(LO, HI), const(V) or "
                        "zeros")
    if m.group(3):
        return Distribution("zeros")
    kind = m.group(1)
    params = _split_top(m.group(2))
    want = 1 if kind == "const" else 2
    if len(params) != want:
        raise SpecError(file, line, f"`{kind}` takes {want} number{'s' if want > 1 else ''}, got {len(params)}",
                        f"write e.g. {kind}({'0' if want == 1 else '0, 1'})")
    exprs = [_check_expr(p, file, line, kind) for p in params]
    if all(is_constant(e) for e in exprs):
        vals = [_number(e, file, line, kind) for e in exprs]
        if kind == "offsets" and vals[1] < vals[0]:
            raise SpecError(file, line, f"`offsets({params[0]}, {params[1]})` ends below its start",
                            "offsets rise from the first number to the second: write e.g. offsets(0, NNZ)")
        if kind in ("uniform", "int") and vals[1] <= vals[0]:
            raise SpecError(file, line, f"`{kind}({params[0]}, {params[1]})` is an empty range",
                            "the second number must be larger than the first")
        if kind == "normal" and vals[1] < 0:
            raise SpecError(file, line, f"`normal({params[0]}, {params[1]})` has a negative standard deviation",
                            f"write normal({params[0]}, {params[1].lstrip('-').strip()}) — STD must be >= 0")
    return Distribution(kind, exprs[0], exprs[1] if want == 2 else "0")


def parse_annotation(src: SourceText, kernel: Kernel, file: str,
                     errors: list[SpecError] | None = None) -> Annotation:
    """Parse the kernel's annotation block; an empty ``Annotation`` when there is none.

    With ``errors``, a line that cannot be read is appended there and skipped, and the other lines are still
    read: the editor shows every mistake of a block at once (``spec.problems``), not one per edit."""
    ann = Annotation()
    if kernel.comment_span is None:
        return ann
    first = src.line_of(kernel.comment_span.start)
    last = src.line_of(kernel.comment_span.end)
    params = {p.name: p for p in kernel.params}
    for lineno in range(first, last + 1):
        raw = src.line_text(lineno).strip()
        if not is_directive_line(raw):
            continue
        ann.present = True
        try:
            _directive(ann, raw, lineno + 1, file, params, kernel)
        except SpecError as e:
            if errors is None:
                raise
            errors.append(e)
    return ann


def _directive(ann: Annotation, raw: str, line: int, file: str, params: dict[str, Param], kernel: Kernel) -> None:
    """Read one ``// @warpforge`` line into ``ann``."""
    # a remark after the directive (`// guessed: ...`, written by "Add benchmark spec") is no part of it
    after = raw.split(MARK, 1)[1].strip()
    body = re.sub(r"\s+//.*$", "", after)
    remark = re.search(r"\s//\s*guessed\b:?\s*(.*)$", after)
    guessed = remark is not None
    why = remark.group(1).strip() if remark is not None else ""
    directive, _, rest = body.partition(" ")
    rest = rest.strip()
    if directive not in DIRECTIVES:
        close = difflib.get_close_matches(directive, DIRECTIVES, n=1, cutoff=0.6)
        raise SpecError(file, line, f"unknown @warpforge directive `{directive}`"
                        + (f": did you mean `{close[0]}`?" if close else ""),
                        f"write `{close[0]} {rest}`" if close else
                        f"use one of: {', '.join(DIRECTIVES)} (see docs/spec-format.md)")
    if directive == "size":
        size = _size(rest, file, line)
        earlier = next((s for s in ann.sizes if s.name == size.name), None)
        if earlier is not None:
            # The later line would silently win; which one the user meant is theirs to say.
            raise SpecError(file, line, f"size `{size.name}` is defined twice (first at line {earlier.line})",
                            "keep one `@warpforge size` line per name")
        ann.sizes.append(replace(size, source="guessed") if guessed else size)
        if guessed:
            ann.guessed[f"size {size.name}"] = why
    elif directive == "arg":
        a, written = _arg(rest, file, line, params, kernel)
        if written is not None:
            ann.types[a.name] = written
        if a.name in ann.args:
            raise SpecError(file, line, f"argument `{a.name}` is described twice",
                            "keep one `@warpforge arg` line per argument")
        ann.args[a.name] = replace(a, source="guessed") if guessed else a
        if guessed:
            ann.guessed[f"arg {a.name}"] = why
    elif directive == "launch":
        ann.launch = _launch(rest, file, line)
        if guessed:
            ann.launch = replace(ann.launch, source="guessed")
            ann.guessed["launch"] = why
    elif directive == "tol":
        ann.tolerance = _tol(rest, file, line)
    elif directive == "tune":
        m = _SIZE.match(rest)
        if not m:
            raise SpecError(file, line, f"cannot read `tune {rest}`", "write `tune NAME = V1, V2, ...`")
        values = tuple(_tune_value(v, file, line, m.group(1)) for v in _split_top(m.group(2)) if v)
        if not values:
            raise SpecError(file, line, f"tunable `{m.group(1)}` has no values", "list at least one value")
        ann.tunables.append(Tunable(m.group(1), values, line))
    elif directive == "template":
        ann.template_args = _template(rest, kernel, file, line)
        ann.lines["template"] = line
        if guessed:
            ann.guessed["template"] = why
    elif directive == "seeds":
        try:
            ann.seeds = tuple(int(s) for s in _split_top(rest))
        except ValueError as e:
            raise SpecError(file, line, f"seeds must be integers, got `{rest}`", "write `seeds 0, 1, 2`") from e
        if not ann.seeds:
            raise SpecError(file, line, "no seeds given", "write `seeds 0, 1, 2`")
    elif directive == "flops":
        ann.flops = _check_expr(rest, file, line, "flops")
        ann.lines["flops"] = line
    elif directive == "bytes":
        ann.bytes = _check_expr(rest, file, line, "bytes")
        ann.lines["bytes"] = line


def _size(rest: str, file: str, line: int) -> SizeSpec:
    m = _SIZE.match(rest)
    if not m:
        raise SpecError(file, line, f"cannot read `size {rest}`", "write `size N = 1 << 20`")
    name, value = m.group(1), m.group(2).strip()
    fixed = False
    odd: str | None = None
    # Trailing options: `fixed`, `odd=EXPR`.
    om = re.search(r"\s+odd\s*=\s*(.+)$", value)
    if om:
        odd = _check_expr(om.group(1), file, line, f"odd size of `{name}`")
        value = value[: om.start()].strip()
    if re.search(r"\s+fixed$", value) or value == "fixed":
        fixed = True
        value = value[: -len("fixed")].strip()
    if not value:
        raise SpecError(file, line, f"size `{name}` has no value", f"write `size {name} = 4096`")
    return SizeSpec(name, _check_expr(value, file, line, f"size `{name}`"), fixed, odd, "annotation", line)


def _arg(rest: str, file: str, line: int, params: dict[str, Param], kernel: Kernel) -> tuple[ArgSpec, str | None]:
    """One ``arg`` line, and the type it writes when that is not a builtin one (resolved by ``build_spec``);
    such an argument's ``dtype`` is "" until then."""
    mb = _ARG_BUF.match(rest)
    ms = _ARG_SCALAR.match(rest) if not mb else None
    m = mb or ms
    name = m.group(1) if m else rest.split(":")[0].split("=")[0].strip()
    if name not in params:
        raise SpecError(file, line, f"`{name}` is not a parameter of `{kernel.name}`",
                        f"its parameters are: {', '.join(params) or '(none)'}")
    p = params[name]
    if mb:
        if not p.is_pointer:
            raise SpecError(file, line, f"`{name}` is a scalar parameter ({p.text})",
                            f"write `arg {name} = VALUE`")
        role_txt, dtype_txt, count, tail = mb.group(2), mb.group(3).strip(), mb.group(4), mb.group(5)
        try:
            role = Role(role_txt)
        except ValueError as e:
            raise SpecError(file, line, f"unknown role `{role_txt}` for `{name}`",
                            "write in, out or inout") from e
        if role is Role.SCALAR:
            raise SpecError(file, line, f"`{name}` is a pointer", "write in, out or inout")
        # a type of the file's own (`real`, an enum) is resolved with the whole spec (``Annotation.types``)
        dtype = canonical_dtype(dtype_txt) or ""
        count = _check_expr(count, file, line, f"length of `{name}`") if count.strip() else ""
        if not count:
            raise SpecError(file, line, f"`{name}` has no length", f"write `arg {name}: {role.value} {dtype_txt}[N]`")
        dist = None
        align = 16
        tol: tuple[float | None, float | None, float | None] | None = None
        tokens = _split_top(tail, " ") if tail.strip() else []
        if "tol" in tokens:
            # `tol rtol=R atol=A norm=N` ends the line: what follows `tol` is this output's tolerance.
            at = tokens.index("tol")
            tol = _arg_tol(tokens[at + 1:], name, role, file, line)
            tokens = tokens[:at]
        for tok in tokens:
            if tok.startswith("align="):
                try:
                    align = int(tok[6:])
                except ValueError as e:
                    raise SpecError(file, line, f"bad alignment `{tok}`", "write align=16") from e
                if align <= 0 or align & (align - 1):
                    raise SpecError(file, line, f"alignment {align} is not a power of two", "write align=16")
            else:
                dist = parse_distribution(tok, file, line)
                if dist.kind == "offsets" and dtype and dtype.startswith("float"):
                    raise SpecError(file, line, f"`{name}`: offsets are integers, but its elements are {dtype}",
                                    f"declare `{name}` with its integer type (e.g. `int[ROWS + 1]`)")
        if dist is not None and role is Role.OUT:
            raise SpecError(file, line, f"`{name}` is an output: its initial values are poison, not `{dist}`",
                            f"drop the distribution, or make it `inout` if the kernel reads `{name}` first")
        if dist is None and role is not Role.OUT and dtype:
            # The documented default, made explicit so the effective spec (and its hash) says what runs.
            dist = default_distribution(dtype)
        return (ArgSpec(name, role, dtype, count=count, distribution=dist, align=align, source="annotation",
                        line=line, tol=tol), dtype_txt if not dtype else None)
    if ms:
        if p.is_pointer:
            raise SpecError(file, line, f"`{name}` is a pointer parameter ({p.text})",
                            f"write `arg {name}: in|out|inout TYPE[COUNT]`")
        written = " ".join(ms.group(2).split()) if ms.group(2) else None
        # the parameter's type is resolved by ``build_spec`` (template arguments, typedefs, enums); "" until then
        dtype = canonical_dtype(written or p.type) or ""
        # a scoped enumerator (`Mode::Max`) is named by its last part; ``build_spec`` puts its value in
        value = _check_expr(re.sub(r"\b(?:[A-Za-z_]\w*\s*::\s*)+([A-Za-z_]\w*)", r"\1", ms.group(3)), file, line,
                            f"value of `{name}`")
        return (ArgSpec(name, Role.SCALAR, dtype, value=value, source="annotation", line=line),
                written if written is not None else None)
    hint = f"`arg {name}: in float[N]`" if p.is_pointer else f"`arg {name} = N`"
    raise SpecError(file, line, f"cannot read `arg {rest}`", f"write {hint}")


def _launch(rest: str, file: str, line: int) -> LaunchSpec:
    if not _balanced(rest):
        raise SpecError(file, line, f"unbalanced parentheses in `launch {rest}`",
                        "close every `(`: `launch grid=(N + 255) / 256, block=256`")
    fields: dict[str, str] = {}
    for part in _split_top(rest):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("grid", "block", "smem"):
            raise SpecError(file, line, f"cannot read `{part}` in launch",
                            "write `launch grid=(N + 255) / 256, block=256[, smem=BYTES]`")
        fields[key] = value.strip()
    for need in ("grid", "block"):
        if need not in fields:
            raise SpecError(file, line, f"launch has no {need}", "write `launch grid=..., block=...`")
    return LaunchSpec(
        parse_dims(fields["grid"], file, line, "grid"),
        parse_dims(fields["block"], file, line, "block"),
        _check_expr(fields.get("smem", "0"), file, line, "smem"),
        "annotation",
        line,
    )


def _arg_tol(parts: list[str], name: str, role: Role, file: str,
             line: int) -> tuple[float | None, float | None, float | None]:
    """One output's tolerance, the tail of its ``arg`` line: ``tol atol=2e-3`` or ``tol rtol=1e-3 atol=1e-4``
    (``norm=1e-5`` too). A component left out keeps the default for this argument (the spec-level ``tol``, else
    the dtype's)."""
    if role is Role.IN:
        raise SpecError(file, line, f"`{name}` is an input: it is never compared, so a tolerance means nothing",
                        f"drop `tol ...` from `arg {name}`, or make it `out`/`inout` if the kernel writes it")
    if not parts:
        raise SpecError(file, line, f"`tol` of `{name}` gives no tolerance",
                        f"write `arg {name}: ... tol atol=1e-3` (rtol=, atol=, norm= or any of them)")
    return _tol_parts(" ".join(parts), file, line)


def _tol_parts(rest: str, file: str, line: int) -> tuple[float | None, float | None, float | None]:
    got: dict[str, float] = {}
    for part in _split_top(rest.replace(" ", ","), ","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in TOL_KEYS:
            raise SpecError(file, line, f"cannot read `{part}` in tol",
                            "write `tol rtol=1e-4 atol=1e-5` (and `norm=1e-5` for a long sum)")
        v = _number(value.strip(), file, line, key)
        if v < 0:
            raise SpecError(file, line, f"{key} must not be negative, got {value.strip()}",
                            f"write {key}={value.strip().lstrip('-')}")
        got[key] = v
    if not got:
        raise SpecError(file, line, "tol gives no tolerance", "write `tol rtol=1e-4 atol=1e-5`")
    return got.get("rtol"), got.get("atol"), got.get("norm")


def _tol(rest: str, file: str, line: int) -> tuple[float, float, float]:
    """The spec-level tolerance: a component left out is 0 (``tol atol=0`` is an exact comparison)."""
    rtol, atol, norm = _tol_parts(rest, file, line)
    return (rtol or 0.0, atol or 0.0, norm or 0.0)


#: a type name as a value: `float`, `__half`, `unsigned int`, `float4`, `T*` (identifiers, optional `*`s)
_TYPE_NAME = re.compile(r"[A-Za-z_]\w*(\s+[A-Za-z_]\w*)*(\s*\*)*")
#: a template argument may also be a qualified or templated type: `cuda::std::plus<float>`, `Vec<float, 4>`
_TEMPLATE_TYPE = re.compile(r"(::)?[A-Za-z_][\w\s:<>,*&]*")


def _tune_value(text: str, file: str, line: int, name: str) -> str:
    """A tunable's value, which becomes ``-DNAME=VALUE`` on nvcc's command line: an expression of the spec
    language or a type name, and nothing else. nvcc pastes -D values into shell commands, so free text here
    (`256 $(id)`) would run; and it splits -D values at commas, so a value may not hold one."""
    value = text.strip()
    if not _TYPE_NAME.fullmatch(value):
        try:
            parse(value)
        except ExprError as e:
            raise SpecError(file, line, f"tunable `{name}` takes numbers, expressions or type names: {expr_message(e)}",
                            "write a number, an expression such as `2 * 128`, or a type name such as "
                            "`float` or `unsigned int`") from e
    if "," in value:
        raise SpecError(file, line, f"tunable `{name}`: `{value}` holds a comma, which nvcc splits -D values at",
                        "write a value without a comma (compute it in the kernel, or list the results)")
    return value


def _template_value(text: str, file: str, line: int, name: str) -> str:
    """A template argument: an expression of the spec language or a type name (qualified or templated)."""
    value = text.strip()
    if _TEMPLATE_TYPE.fullmatch(value) and value.count("<") == value.count(">"):
        return value
    try:
        parse(value)
    except ExprError as e:
        raise SpecError(file, line, f"template argument {name} must be a type or an expression: {expr_message(e)}",
                        "write a number, an expression such as `2 * 128`, or a type such as `float`") from e
    return value


def _template(rest: str, kernel: Kernel, file: str, line: int) -> tuple[str, ...]:
    if not kernel.template_params:
        raise SpecError(file, line, f"`{kernel.name}` is not a template", "remove the `template` line")
    parts = _split_top(rest)
    names = [p.name for p in kernel.template_params]
    if all("=" in p for p in parts):
        given = {k.strip(): _template_value(v, file, line, f"`{k.strip()}`")
                 for k, _, v in (p.partition("=") for p in parts)}
        unknown = set(given) - set(names)
        if unknown:
            raise SpecError(file, line, f"unknown template parameter(s) {', '.join(sorted(unknown))}",
                            f"`{kernel.name}` has: {', '.join(names)}")
        out = []
        for tp in kernel.template_params:
            if tp.name in given:
                out.append(given[tp.name])
            elif tp.default is not None:
                out.append(tp.default)
            else:
                raise SpecError(file, line, f"template parameter `{tp.name}` has no value",
                                f"add `{tp.name}=...`")
        return tuple(out)
    if len(parts) != len(names):
        raise SpecError(file, line, f"`{kernel.name}` takes {len(names)} template arguments ({', '.join(names)})",
                        f"write `template {', '.join(n + '=...' for n in names)}`")
    return tuple(_template_value(p, file, line, f"{i + 1}") for i, p in enumerate(parts))


def has_annotation(src: SourceText, kernel: Kernel) -> bool:
    """Whether the kernel's comment block holds at least one ``// @warpforge`` directive."""
    if kernel.comment_span is None:
        return False
    return any(is_directive_line(ln) for ln in src.slice(kernel.comment_span).splitlines())


def annotation_edits(src: SourceText, kernel: Kernel, block: str) -> list[TextEdit]:
    """Edits replacing the kernel's directive lines with ``block`` (prose comment lines are kept).

    Shared by ``warpforge spec --write`` and the editor's "Add benchmark spec" action, so both write the
    same thing. No edits when the kernel's directive lines already say what ``block`` says (in any order,
    spaced as the user likes): a complete spec is left alone rather than rewritten into the same spec.
    """
    edits: list[TextEdit] = []
    if kernel.comment_span is not None:
        first, last = src.line_of(kernel.comment_span.start), src.line_of(kernel.comment_span.end)
        have = [src.line_text(ln) for ln in range(first, last + 1) if is_directive_line(src.line_text(ln))]
        if have and sorted(map(_normal, have)) == sorted(map(_normal, block.splitlines())):
            return []
    if kernel.comment_span is not None:
        first = src.line_of(kernel.comment_span.start)
        for ln in range(first, src.line_of(kernel.comment_span.end) + 1):
            if is_directive_line(src.line_text(ln)):
                start = src.line_starts[ln]
                end = src.line_starts[ln + 1] if ln + 1 < src.line_count else len(src.data)
                edits.append(make_edit(src, Span(start, end), ""))
    at = src.line_starts[kernel.start_line]
    edits.append(make_edit(src, Span(at, at), block))
    return edits


def _normal(line: str) -> str:
    """A directive line with its spacing normalized (``a=1`` and ``a = 1`` say the same), without a remark
    after it (``// guessed: ...``)."""
    line = re.sub(r"(@warpforge\b.*?)\s+//.*$", r"\1", line.strip())
    return " ".join(re.sub(r"\s*([=,:()\[\]*+])\s*", r" \1 ", line.strip()).split())
