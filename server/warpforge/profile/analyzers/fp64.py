"""WF108: double-precision arithmetic the author did not ask for, in a float kernel.

C++ makes ``x * 0.5`` double when ``x`` is a float: the literal ``0.5`` is a double, so ``x`` is converted
(``F2F.F64.F32``), multiplied in FP64 (``DMUL``) and converted back. FP64 runs at 1/64 of the FP32 rate on
consumer and workstation GPUs (sm_86, sm_89, sm_120) and 1/2 on data-center ones (sm_80, sm_90), and the
conversions add latency on top — for a line in a hot loop that is the difference between FP32 and FP64
speed. The same happens with a double math function (``exp(x * 2.0)``), or a macro that expands to an
unsuffixed literal.

Why SASS is required (``needs=("sass",)``): the source alone over-reports. CUDA's headers overload
``sqrt``, ``exp``, ``tanh``... for float, so ``sqrt(x)`` on a float is the float function; and the
compiler folds exact cases (``x * 0.5`` is the same in float, so no DMUL is emitted). A line is reported
only when its SASS contains FP64 instructions *and* the source line shows the construct that causes
them — the message names it. Deliberate FP64 is left alone: a kernel with a ``double`` buffer, a line
using a variable declared ``double``, an explicit ``(double)`` cast, or a ``printf`` (varargs promote
floats to double).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tree_sitter import Node

from ...cuda.model import DeclKind
from ...cuda.text import Position
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..sass import categorize
from . import analyzer
from ._facts import KernelFacts, facts, in_kernel, line_opcodes, normalize_type

define("WF108", "double-precision arithmetic in a float kernel", Severity.INFO, "sass", "fp32_math")

#: FP64 throughput as a fraction of FP32 (non-tensor), by architecture
FP64_RATE = {"sm_60": "1/2", "sm_61": "1/32", "sm_70": "1/2", "sm_75": "1/32", "sm_80": "1/2", "sm_86": "1/64",
             "sm_87": "1/64", "sm_89": "1/64", "sm_90": "1/2", "sm_100": "1/2", "sm_120": "1/64"}

#: math functions with a float twin spelled with an ``f`` suffix
DOUBLE_FUNCTIONS = frozenset({
    "sqrt", "rsqrt", "cbrt", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "sin",
    "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
    "erfc", "erfinv", "hypot", "fmod", "remainder", "fma", "fdim", "fabs", "floor", "ceil", "round", "trunc",
    "fmin", "fmax", "lgamma", "tgamma", "normcdf", "sinpi", "cospi",
})

_FLOAT_LITERAL = re.compile(r"^(?:\d[\d']*\.[\d']*|\.\d[\d']*)(?:[eE][+-]?\d+)?$|^\d[\d']*[eE][+-]?\d+$")
_LINE_LITERAL = re.compile(r"(?<![\w.])(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?(?![\w.])|(?<![\w.])\d+[eE][+-]?\d+(?![\w.])")
_PROMOTING_OPS = frozenset({"+", "-", "*", "/", "<", ">", "<=", ">=", "==", "!="})


def is_double_literal(text: str) -> bool:
    """``0.5``, ``1e-6``, ``2.`` — a floating literal without an ``f``/``F`` (or ``L``) suffix."""
    return bool(_FLOAT_LITERAL.match(text))


def _strip_code(line: str) -> str:
    """A source line without its ``//`` comment and string literals (enough for literal spotting)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def _macro_literals(f: KernelFacts) -> dict[str, str]:
    """Macros whose body contains an unsuffixed floating literal: NAME -> the literal."""
    out: dict[str, str] = {}
    for name, body in f.macros.items():
        m = _LINE_LITERAL.search(_strip_code(body))
        if m and "double" not in body:
            out[name] = m.group(0)
    return out


class _Types:
    """Just enough type inference to tell a double expression from a float one."""

    def __init__(self, f: KernelFacts, macro_literals: dict[str, str]) -> None:
        self.f = f
        self.macro_literals = macro_literals

    def declared_double(self, name: str) -> bool:
        v = self.f.vars.get(name)
        if v is not None:
            return v.type == "double"
        p = self.f.params.get(name)
        return p is not None and normalize_type(p.type) == "double"

    def is_double(self, node: Node | None) -> bool:
        if node is None:
            return False
        t = node.type
        f = self.f
        if t == "number_literal":
            return is_double_literal(f.text(node))
        if t == "identifier":
            name = f.text(node)
            return self.declared_double(name) or name in self.macro_literals
        if t == "cast_expression":
            ty = node.child_by_field_name("type")
            return ty is not None and normalize_type(f.text(ty)) == "double"
        if t == "call_expression":
            name = f.call_name(node).split("::")[-1]
            return name in DOUBLE_FUNCTIONS and any(self.is_double(a) for a in f.call_args(node))
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            if op is not None and f.text(op) in ("&&", "||"):
                return False
            return self.is_double(node.child_by_field_name("left")) or self.is_double(
                node.child_by_field_name("right"))
        if t in ("parenthesized_expression", "unary_expression"):
            return any(self.is_double(c) for c in node.named_children)
        if t == "conditional_expression":
            return self.is_double(node.child_by_field_name("consequence")) or self.is_double(
                node.child_by_field_name("alternative"))
        return False


def _promotes(f: KernelFacts, lit: Node) -> bool:
    """Is this literal an operand that drags a float expression to double (not a harmless initializer)?"""
    node, parent = lit, lit.parent
    while parent is not None and parent.type == "parenthesized_expression":
        node, parent = parent, parent.parent
    if parent is None:
        return False
    if parent.type == "binary_expression":
        op = parent.child_by_field_name("operator")
        return op is not None and f.text(op) in _PROMOTING_OPS
    if parent.type == "assignment_expression":
        op = parent.child_by_field_name("operator")
        return op is not None and f.text(op) != "=" and parent.child_by_field_name("right") == node
    if parent.type == "argument_list" and parent.parent is not None and parent.parent.type == "call_expression":
        return f.call_name(parent.parent).split("::")[-1] in DOUBLE_FUNCTIONS
    if parent.type == "conditional_expression":
        return parent.child_by_field_name("condition") != node
    return False


Construct = tuple[str, str]  # (what causes it, the fix)


def _literal(text: str) -> Construct:
    return f"{_LITERAL_CAUSE}`{text}`", f"`{text}f`"


_LITERAL_CAUSE = "the unsuffixed literal "


def _macro(name: str, lit: str) -> Construct:
    return f"the macro `{name}` (= `{lit}`)", f"write `{lit}f` in `{name}`"


def _kernel_constructs(f: KernelFacts, types: _Types, line: int) -> tuple[list[Construct], bool]:
    """(accidental double constructs on a kernel line, whether the line uses deliberate FP64)."""
    ctx = f.ctx
    found: list[Construct] = []
    deliberate = False
    for n in f.nodes:
        if ctx.node_line(n) != line:
            continue
        t = n.type
        if t == "number_literal" and is_double_literal(f.text(n)) and _promotes(f, n):
            found.append(_literal(f.text(n)))
        elif t == "identifier":
            name = f.text(n)
            if types.declared_double(name):
                deliberate = True
            elif name in types.macro_literals and name not in f.vars:
                found.append(_macro(name, types.macro_literals[name]))
        elif t == "call_expression":
            name = f.call_name(n)
            short = name.split("::")[-1]
            if short == "printf":
                deliberate = True
            elif short in DOUBLE_FUNCTIONS and any(types.is_double(a) for a in f.call_args(n)):
                found.append((f"the double `{name}` (its argument is double)", f"use `{short}f`"))
        elif t == "cast_expression":
            ty = n.child_by_field_name("type")
            if ty is not None and normalize_type(f.text(ty)) == "double":
                deliberate = True
        elif t == "primitive_type" and f.text(n) == "double":
            deliberate = True
    return list(dict.fromkeys(found)), deliberate


def _helper_constructs(ctx: KernelContext, macro_literals: dict[str, str], line: int) -> tuple[list[Construct],
                                                                                             bool]:
    """The same for a line of an inlined ``__device__`` helper (outside the kernel's tree): text only."""
    text = _strip_code(ctx.src.line_text(line - 1))
    if re.search(r"\bdouble\b|\bprintf\b", text):
        return [], True
    found = [_literal(m.group(0)) for m in _LINE_LITERAL.finditer(text)]
    for name, lit in macro_literals.items():
        if re.search(rf"\b{re.escape(name)}\b", text):
            found.append(_macro(name, lit))
    return list(dict.fromkeys(found)), False


def _reports_helper_line(ctx: KernelContext, line: int) -> bool:
    """A helper inlined into several kernels is reported once, by the first kernel (in file order) that
    calls it directly — not once per kernel at the same line."""
    offset = ctx.src.offset(Position(line - 1, 0))
    for d in ctx.model.declarations:
        if d.kind is DeclKind.DEVICE_FUNCTION and d.span.start <= offset < d.span.end:
            users = [k for k in ctx.model.kernels if set(d.names) & k.uses]
            return not users or users[0].name == ctx.kernel.name
    return True


def _has_double_buffer(ctx: KernelContext, f: KernelFacts) -> bool:
    targs: dict[str, str] = {}
    if ctx.kernel.template_params and ctx.spec is not None:
        targs = {tp.name: a for tp, a in zip(ctx.kernel.template_params, ctx.spec.template_args, strict=False)}
    return any(p.is_pointer and normalize_type(targs.get(p.type, p.type)) == "double" for p in ctx.kernel.params)


@analyzer("fp64", ("WF108",), needs=("source", "sass"))
def fp64(ctx: KernelContext) -> Iterator[Finding]:
    f = facts(ctx)
    if _has_double_buffer(ctx, f):
        return  # a double kernel: FP64 is the point
    macro_literals = _macro_literals(f)
    types = _Types(f, macro_literals)
    rate = FP64_RATE.get(ctx.arch.rstrip("af"))
    for line, mix in sorted(ctx.sass_lines.items()):
        n64 = mix.get("fp64", 0)
        if not n64:
            continue
        if in_kernel(ctx, line):
            found, deliberate = _kernel_constructs(f, types, line)
        elif _reports_helper_line(ctx, line):
            found, deliberate = _helper_constructs(ctx, macro_literals, line)
        else:
            continue
        if deliberate or not found:
            continue  # intended FP64, or a cause we cannot name: say nothing rather than guess
        ops = line_opcodes(ctx, line)
        fp64_ops = sorted({op for op in ops if "fp64" in categorize(op)})
        conversions = sum(1 for op in ops if op.startswith("F2F") and "F64" in op)
        causes, fixes = _summarize(found)
        speed = f"FP64 runs at {rate} of the FP32 rate on {ctx.arch}" if rate else "FP64 is slower than FP32"
        plural = "s" if n64 != 1 else ""
        yield make(
            "WF108", ctx.file, ctx.line_range(line),
            f"line {line} runs {n64} double-precision instruction{plural} in a float kernel because of {causes}: "
            f"{speed} and every float/double conversion adds latency; {fixes}",
            kernel=ctx.kernel.name,
            evidence={"fp64_instructions": n64, "causes": [c for c, _ in found], "conversions": conversions,
                      "opcodes": fp64_ops,
                      "arch": ctx.arch, "fp64_rate": rate, "in_kernel_body": in_kernel(ctx, line)},
        )


def _summarize(found: list[Construct]) -> tuple[str, str]:
    """One phrase for the causes (literals grouped: "the unsuffixed literals `0.1` and `1.0`"), one for the fixes."""
    literals = [c[len(_LITERAL_CAUSE):] for c, _ in found if c.startswith(_LITERAL_CAUSE)]
    others = [c for c, _ in found if not c.startswith(_LITERAL_CAUSE)]
    causes = list(others)
    if literals:
        causes.append(("the unsuffixed literals " if len(literals) > 1 else _LITERAL_CAUSE) + _join(literals))
    fixes = [x for c, x in found if not c.startswith(_LITERAL_CAUSE)]
    lit_fixes = [x for c, x in found if c.startswith(_LITERAL_CAUSE)]
    if lit_fixes:
        fixes.append("write " + _join(lit_fixes))
    return _join(causes), "; ".join(dict.fromkeys(fixes))


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
