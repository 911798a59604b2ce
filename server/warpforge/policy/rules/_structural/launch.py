"""The spec side of a structural rewrite: types as instantiated, the candidate's body replaced, size
environments, whether a launch fits at every size of the spec, bounds written in spec terms.

Why a module of its own: a rule proposes a variant only when its launch evaluates to a legal grid and
block at the spec's size and its perturbed size; that judgement is the same for every rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from tree_sitter import Node

from ....cuda.model import Kernel
from ....cuda.parser import parse
from ....cuda.rewrite import apply_edits, replace_body
from ....cuda.text import SourceText
from ....cuda.tree import node_text, walk
from ....cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ....cuda.tree import written_names as written_names  # likewise
from ....cuda.types import file_aliases
from ....spec.ctypes import TypeScope
from ....spec.expr import Number
from ....spec.model import Role, canonical_dtype
from .._util import eval_expr, expr_names, kernel_body, size_env, strip_parens
from ..base import RuleContext
from .loops import Bound
from .mapping import Grid2D
from .syntax import all_names, declared_names, has_collective, render


def resolved_type(ctx: RuleContext, type_text: str) -> str:
    """A type as the kernel is instantiated and compiled: a template type parameter becomes the spec's argument
    for it (``T`` -> ``float``), and a type alias of the file or its headers what it names under the build's
    ``#if`` branches (llm.c's ``floatX`` -> ``__nv_bfloat16`` where ``ENABLE_BF16`` is defined); anything else
    is returned as written. Rules that accumulate in a type (a shuffle moves only some) must judge the type the
    compiler sees, not the name written. An alias that adds a pointer level (``typedef float* fptr``) is left."""
    k = ctx.cand_kernel
    t = " ".join(type_text.replace("const ", "").split())
    if k is not None and k.template_params:
        for p, a in zip(k.template_params, ctx.spec.template_args, strict=False):
            if p.kind == "type" and p.name == t:
                t = " ".join(a.split())
                break
    if not re.fullmatch(r"[A-Za-z_]\w*", t) or canonical_dtype(t) is not None:
        return t
    got, stars = TypeScope(aliases=_file_aliases(ctx.file, ctx.source.text)).resolve(t)
    return " ".join(got.split()) if stars == 0 else t


@lru_cache(maxsize=16)
def _file_aliases(file: str, text: str) -> dict[str, tuple[str, int]]:
    """The type aliases of ``file`` (``text``) and the headers it includes (cached: one file, many candidates)."""
    src = SourceText(text)
    return file_aliases(src, parse(src.data), file)


def with_body(ctx: RuleContext, body: str) -> str | None:
    """The candidate's definition with its body replaced (signature, qualifiers and linkage kept)."""
    k = ctx.cand_kernel
    if k is None:
        return None
    return apply_edits(ctx.cand_src, [replace_body(ctx.cand_src, k, body)])


def fresh_body(ctx: RuleContext, prefix: str, *, collectives_ok: bool = False) -> tuple[Kernel, Node, bytes] | None:
    """The candidate's kernel, body and bytes when a rule that moves code around may rewrite it.

    Not when it is a template, already holds names with the rule's ``prefix`` (rewritten already, or names
    ours would clash with), synchronizes (collectives; ``collectives_ok`` for a rule that analyses its
    atomics itself), has shared memory of its own, or declares a local that shadows a parameter: the
    rewrite moves code around and must know what every name means.
    """
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None or k.template_params:
        return None
    body, data = got
    if any(n.startswith(prefix) for n in all_names(body, data)) \
            or (not collectives_ok and has_collective(body, data)) or any(n.type == "__shared__" for n in walk(body)):
        return None
    if declared_names(body, data) & {p.name for p in k.params}:
        return None
    return k, body, data


def envs(ctx: RuleContext) -> list[dict[str, Number]] | None:
    """The spec's size environments (spec size and perturbed size) with the candidate's defines."""
    try:
        return [size_env(ctx, False), size_env(ctx, True)]
    except ValueError:
        return None


def launch_ok(ctx: RuleContext, grid: tuple[str, ...], block: tuple[str, ...]) -> bool:
    """Whether a launch evaluates to positive integers (block within limits) at both sizes."""
    es = envs(ctx)
    if es is None:
        return False
    for env in es:
        threads = 1
        for e in grid:
            v = eval_expr(e, env)
            if not isinstance(v, int) or v < 1 or v > 2**31 - 1:
                return False
        for e in block:
            v = eval_expr(e, env)
            if not isinstance(v, int) or v < 1:
                return False
            threads *= v
        if threads > 1024:
            return False
    return True


def dims_values(ctx: RuleContext, exprs: tuple[str, ...]) -> list[tuple[int, ...]] | None:
    """Launch expressions evaluated at both sizes, padded to three dimensions."""
    es = envs(ctx)
    if es is None:
        return None
    out: list[tuple[int, ...]] = []
    for env in es:
        vals: list[int] = []
        for e in exprs:
            v = eval_expr(e, env)
            if not isinstance(v, int):
                return None
            vals.append(v)
        while len(vals) < 3:
            vals.append(1)
        out.append(tuple(vals))
    return out


def is_1d(ctx: RuleContext, exprs: tuple[str, ...]) -> bool:
    vals = dims_values(ctx, exprs)
    return vals is not None and all(v[1] == 1 and v[2] == 1 for v in vals)


def scalar_value_expr(ctx: RuleContext, node: Node, data: bytes,
                      defs: Mapping[str, Node] | None = None) -> str | None:
    """The spec expression of a kernel-side bound: a scalar parameter (its ``arg NAME = EXPR``), a literal,
    or a macro-free arithmetic of those; None when it cannot be expressed in spec terms.

    ``defs``: locals the caller knows are defined once from such values and never reassigned (``int hw = H *
    W;``), name -> the defining expression, substituted (a bound written through a local is still known)."""
    k = ctx.cand_kernel
    if k is None:
        return None
    params = {p.name for p in k.params if not p.is_pointer}
    seen: set[str] = set()

    def rep(n: Node) -> str | None:
        if n.type == "identifier":
            name = node_text(n, data)
            a = ctx.spec.arg(name)
            if name in params and a is not None and not a.is_buffer and a.value is not None:
                return f"({a.value})"
            if defs is not None and name in defs and name not in seen and name not in params:
                seen.add(name)  # a definition reached again through itself is a cycle: poison it
                sub = render(defs[name], data, rep)
                seen.discard(name)
                return f"({sub})"
            return "\x00"  # unknown name: poison
        return None

    out = render(node, data, rep)
    if "\x00" in out:
        return None
    out = strip_parens(out)
    es = envs(ctx)
    if es is None or any(not isinstance(eval_expr(out, env), int) for env in es):
        return None
    return out


def extents_2d(ctx: RuleContext, g: Grid2D, data: bytes) -> tuple[str, str] | None:
    """How many columns and rows a 2D one-thread-per-output kernel covers, in spec terms: what a 2D rule's
    new grid is sized from. None when the launch is not 2D (a z extent) or an extent cannot be said."""
    if not is_2d_launch(ctx):
        return None
    nx = extent_expr(ctx, g.x_bound, data, 0)
    ny = extent_expr(ctx, g.y_bound, data, 1)
    return (nx, ny) if nx is not None and ny is not None else None


def extent_expr(ctx: RuleContext, b: Bound, data: bytes, axis: int) -> str | None:
    """How many indices a bound admits, in spec terms; else what the original launch covered on ``axis``."""
    lim = scalar_value_expr(ctx, b.limit, data)
    if lim is not None:
        return f"{lim} + 1" if b.inclusive else lim
    if len(ctx.grid) > axis and len(ctx.block) > axis:
        return f"({ctx.grid[axis]}) * ({ctx.block[axis]})"
    return None


def is_2d_launch(ctx: RuleContext) -> bool:
    g = dims_values(ctx, ctx.grid)
    b = dims_values(ctx, ctx.block)
    return g is not None and b is not None and all(v[2] == 1 for v in g + b)


#: the integer types a size-carrying scalar parameter may have
INTEGER_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "size_t", "int64_t", "int32_t",
                           "unsigned long", "unsigned long long", "uint32_t", "uint64_t", "const int",
                           "const size_t"})


def in_kernel_terms(ctx: RuleContext, expr: str, written: set[str] | frozenset[str] = frozenset(),
                    functions: Mapping[str, str] | None = None) -> str | None:
    """A spec expression (a buffer length, a launch's extent) in the kernel's terms: each size the integer scalar
    parameter that carries it (``arg n = N``; one the kernel does not write: ``written``), or its value where that
    is the same at every size of the spec. A call is kept only for a name in ``functions``, spelled as it maps
    (``cdiv`` -> the rule's own helper). None when a size is neither, or a call is not allowed.

    Why one function: a bound the rewritten kernel checks must mean the same as the spec's at every size; the
    staging and the tiling rules each had a copy, and only one of them refused a carrier the kernel writes."""
    allowed = functions or {}
    k = ctx.cand_kernel
    params = {p.name: p for p in k.params} if k is not None else {}
    expr, carried = _carried_subexpressions(ctx, expr, params, written)
    names = expr_names(expr)
    es = envs(ctx)
    if names is None or es is None:
        return None
    carriers = {a.value.strip(): a.name for a in ctx.spec.args
                if a.role is Role.SCALAR and a.value is not None and re.fullmatch(r"[A-Za-z_]\w*", a.value.strip())
                and a.name in params and a.name not in written and not params[a.name].is_pointer
                and resolved_type(ctx, params[a.name].type) in INTEGER_TYPES}
    subst: dict[str, str] = {}
    for n in names:
        if n in carried:
            subst[n] = n
            continue
        if n in carriers:
            subst[n] = carriers[n]
            continue
        vals = {eval_expr(n, env) for env in es}
        if len(vals) != 1 or not isinstance(next(iter(vals)), int):
            return None
        subst[n] = str(next(iter(vals)))
    out: list[str] = []
    pos = 0
    for m in re.finditer(r"[A-Za-z_]\w*(\s*\()?", expr):
        out.append(expr[pos:m.start()])
        word = m.group(0).rstrip("( \t")
        if m.group(1):
            if word not in allowed:
                return None
            out.append(allowed[word] + "(")
        elif word in subst:
            out.append(f"({subst[word]})")
        else:
            return None
        pos = m.end()
    out.append(expr[pos:])
    return "(" + "".join(out) + ")"


def _carried_subexpressions(ctx: RuleContext, expr: str, params: Mapping[str, object],
                            written: set[str] | frozenset[str]) -> tuple[str, set[str]]:
    """``expr`` with each parenthesized sub-expression that is, word for word, the value an integer scalar
    parameter carries (``arg wA = 10 * 4 * matrixBlock``) written as that parameter: NVIDIA's samples size a
    launch from the same expression their scalar arguments carry (``grid = ((10 * 4 * matrixBlock) / 16)``),
    and no size there is carried by a parameter alone. Exact: the spec says the parameter holds that value at
    every size, and a whole parenthesized operand keeps its precedence. Also the parameters written in."""
    k = ctx.cand_kernel
    carried: set[str] = set()
    if k is None:
        return expr, carried
    out = expr
    for a in ctx.spec.args:
        p = next((q for q in k.params if q.name == a.name), None)
        if a.role is not Role.SCALAR or a.value is None or p is None or p.is_pointer or a.name in written \
                or a.name not in params or resolved_type(ctx, p.type) not in INTEGER_TYPES:
            continue
        value = " ".join(a.value.split())
        if re.fullmatch(r"[A-Za-z_]\w*|\d+", value) or not re.search(r"[A-Za-z_]", value):
            continue  # a name is the caller's own substitution; a number is a constant anyway
        got = re.sub(r"\(\s*" + r"\s*".join(re.escape(t) for t in value.split()) + r"\s*\)", f"({a.name})", out)
        if got != out and a.name not in _names(expr):
            carried.add(a.name)
            out = got
    return out, carried


def _names(expr: str) -> frozenset[str]:
    return expr_names(expr) or frozenset()
