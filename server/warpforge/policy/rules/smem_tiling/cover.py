"""How many outputs the tiled launch covers along x and y, and the bound a tiled kernel checks where the kernel
wrote none (split from the analysis: this part reads the spec and the launch, not the kernel's statements).

Why: a kernel with no bound written (``int row = ...; int col = ...; c[row * n + col] = ...``) relies on its launch
covering the matrix exactly. The tiled launch covers whole ``BM × BN`` tiles, so it may reach rows and columns the
original never computed: those must neither be loaded nor stored. The extent the original launch covers
(``grid × block`` along the axis) is the bound; the tiled kernel checks it in its own terms, so each size of the
spec is replaced by the integer parameter that carries it (``arg n = N``) or by its value where that is the same
at every size. Where neither is possible the rule declines: which rows exist cannot be told in the kernel.
"""

from __future__ import annotations

import re

from ....spec.model import Role
from .._structural import Bound, envs, resolved_type, scalar_value_expr
from .._util import eval_expr, expr_names
from ..base import RuleContext

#: the launch helpers a cover may use, as the tiled body spells them (``cdiv`` is defined there as a lambda)
CDIV = "wft_cdiv"
_FUNCTIONS = {"cdiv": CDIV, "min": "min", "max": "max"}
_INTEGER = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "size_t", "int64_t", "int32_t",
                      "unsigned long", "unsigned long long", "uint32_t", "uint64_t", "const int", "const size_t"})


def covered(ctx: RuleContext, axis: int) -> str | None:
    """How many threads the original launch runs along ``axis`` (0: x, 1: y), in spec terms."""
    if len(ctx.grid) <= axis or len(ctx.block) <= axis:
        return None
    return f"({ctx.grid[axis]}) * ({ctx.block[axis]})"


def in_kernel_terms(ctx: RuleContext, expr: str, written: set[str] | frozenset[str] = frozenset()) -> str | None:
    """A spec expression in the kernel's terms: each size the integer scalar parameter that carries it (one the
    kernel does not write: ``written``), or its value where that is the same at every size of the spec; None when
    a size is neither or the expression calls a function other than ``cdiv``, ``min`` and ``max``."""
    names = expr_names(expr)
    es = envs(ctx)
    if names is None or es is None:
        return None
    k = ctx.cand_kernel
    params = {p.name: p for p in k.params} if k is not None else {}
    carriers = {a.value.strip(): a.name for a in ctx.spec.args
                if a.role is Role.SCALAR and a.value is not None and re.fullmatch(r"[A-Za-z_]\w*", a.value.strip())
                and a.name in params and a.name not in written and not params[a.name].is_pointer
                and resolved_type(ctx, params[a.name].type) in _INTEGER}
    subst: dict[str, str] = {}
    for n in names:
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
            if word not in _FUNCTIONS:
                return None
            out.append(_FUNCTIONS[word] + "(")
        elif word in subst:
            out.append(f"({subst[word]})")
        else:
            return None
        pos = m.end()
    out.append(expr[pos:])
    return "(" + "".join(out) + ")"


def extent(ctx: RuleContext, b: Bound | None, data: bytes, axis: int) -> str | None:
    """How many outputs the tiled grid covers along ``axis`` in spec terms: the written bound (``b``), or without
    one what the original launch covered; None when the original launch covered fewer than the bound admits
    (the tiled grid would compute outputs the kernel never wrote) or it cannot be told."""
    cover = covered(ctx, axis)
    if b is None:
        return cover
    lim = scalar_value_expr(ctx, b.limit, data)
    if lim is None:
        return cover
    ext = f"{lim} + 1" if b.inclusive else lim
    es = envs(ctx)
    if cover is None or es is None:
        return None
    for env in es:
        e, c = eval_expr(ext, env), eval_expr(cover, env)
        if not isinstance(e, int) or not isinstance(c, int) or c < e:
            return None
    return ext
