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

from .._structural import Bound, envs, scalar_value_expr
from .._structural import in_kernel_terms as shared_terms
from .._util import eval_expr
from ..base import RuleContext

#: the launch helpers a cover may use, as the tiled body spells them (``cdiv`` is defined there as a lambda)
CDIV = "wft_cdiv"
_FUNCTIONS = {"cdiv": CDIV, "min": "min", "max": "max"}


def covered(ctx: RuleContext, axis: int) -> str | None:
    """How many threads the original launch runs along ``axis`` (0: x, 1: y), in spec terms."""
    if len(ctx.grid) <= axis or len(ctx.block) <= axis:
        return None
    return f"({ctx.grid[axis]}) * ({ctx.block[axis]})"


def in_kernel_terms(ctx: RuleContext, expr: str, written: set[str] | frozenset[str] = frozenset()) -> str | None:
    """A spec expression in the tiled kernel's terms (``_structural.in_kernel_terms``), ``cdiv``, ``min`` and
    ``max`` allowed: the tiled body defines its ``cdiv``."""
    return shared_terms(ctx, expr, written, _FUNCTIONS)


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
