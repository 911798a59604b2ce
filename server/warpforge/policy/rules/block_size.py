"""block_size: launch the kernel with another block shape, recomputing the grid to cover the same work.

Why it helps: the block size sets how many warps an SM can keep resident (occupancy is limited per block
by registers and shared memory, and per SM by a block count), how much tail work the last wave wastes,
and the shape of each warp's accesses in 2D kernels (a 32-wide x dimension keeps a warp's row access in
one 128-byte line). The best size is kernel- and GPU-specific, so it is searched, not guessed.

When it is safe: only when the kernel does not care how many threads a block has — it computes its
indices from ``blockDim`` and has nothing sized by the block (no ``__shared__`` arrays, no power-of-two
literals or macros of 64 and above, no tunables or template values in the body, and a
``__launch_bounds__`` at least as large as the new block unless WarpForge's own ``launch_bounds`` step put
it there, in which case it is updated here). The grid must be recomputable: each grid dimension whose
block dimension changes must be written as a ceiling division by the block (``cdiv(N, 256)``,
``(N + 255) / 256``; also inside ``min(..., C)`` as the grid-stride rule writes it), which is checked
numerically at the spec size and the perturbed size before ``cdiv(N, NEW)`` replaces it — or the kernel
must already be a grid-stride loop, which covers any grid. A block size that is a spec tunable is left
to the ``tunables`` rule. A block written as a size name (``block=blockSize``) is searched like a literal when
the name is a fixed size of the spec that the kernel never names; a grid that divides the work by a multiple
of the block (``cdiv(W, 256 * 4)``: four elements a thread) is recomputed with the new block in that multiple
(``follow_grid``). Both forms were found on other people's kernels where Kernel Tuner, which varies any block
the grid follows, got 1.17-1.49x and this rule proposed nothing (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ...cuda.candidate import Candidate
from ...cuda.tree import node_text, walk
from ...spec.expr import Number
from . import register
from ._util import (
    MAX_BLOCK_THREADS,
    call_args,
    constant_block,
    eval_expr,
    expr_names,
    families,
    int_literal,
    kernel_body,
    macro_values,
    refresh_launch_bounds,
    size_env,
    strip_parens,
    tunable_names,
)
from .base import Rule, RuleContext

SIZES_1D = (64, 128, 256, 512, 1024)
SHAPES_2D = ((32, 8), (32, 16), (16, 16), (64, 4))
#: operators binding looser than `+`: a "work extent" containing one at top level is not ours to split
_LOOSE = re.compile(r"<<|>>|[<>=&|^?:]")


def _matching_paren(text: str) -> int | None:
    """Index of the ``)`` closing the ``(`` that starts ``text`` (None if it does not start with one)."""
    if not text.startswith("("):
        return None
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i
    return None


def _top_level(text: str) -> str:
    """``text`` with everything inside parentheses blanked (to look at top-level operators only)."""
    out = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        out.append(ch if depth == 0 else " ")
        if ch == ")":
            depth -= 1
    return "".join(out)


def work_extent(expr: str, block: int) -> str | None:
    """``W`` when a grid dimension is written as the ceiling division ``cdiv(W, block)``.

    Recognized: ``cdiv(W, B)`` and ``(W + B - 1) / B`` / ``(W + (B-1)) / B`` with ``B`` the constant block
    dimension. Plain ``W / B`` is not: it launches no thread for a remainder, so a larger block would drop
    work the kernel may have relied on the exact division to cover.
    """
    args = call_args(expr, "cdiv")
    if args is not None:
        if len(args) == 2 and eval_expr(args[1], {}) == block:
            return args[0]
        return None
    t = strip_parens(expr)
    close = _matching_paren(t)
    if close is None:
        return None
    rest = t[close + 1 :].strip()
    if not rest.startswith("/"):
        return None
    divisor = rest[1:].strip()
    # only a literal or a parenthesized constant: `(W + 255) / 256 * 2` is not a ceiling division by 256
    if not re.fullmatch(r"[0-9]+[uUlL]*|\(.*\)", divisor) or eval_expr(divisor, {}) != block:
        return None
    inner = strip_parens(t[: close + 1])
    itop = _top_level(inner)
    # `W + C` with C == block - 1 (one literal, `B - 1`, or a parenthesized constant)
    for m in re.finditer(r"\+", itop):
        w, c = inner[: m.start()].strip(), inner[m.end() :].strip()
        if w and not _LOOSE.search(_top_level(w)) and not _LOOSE.search(_top_level(c)) \
                and expr_names(c) == frozenset() and eval_expr(c, {}) == block - 1:
            return w
    return None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def derive_grid(expr: str, old: int, new: int, envs: Sequence[Mapping[str, Number]]) -> str | None:
    """The grid dimension for block dimension ``new`` covering what ``expr`` covered with ``old``.

    None unless ``expr`` is recognizably a ceiling division by ``old`` — and the recognition is checked by
    evaluating both at every environment in ``envs`` (spec size and perturbed size).
    """
    mins = call_args(expr, "min")
    if mins is not None:
        if len(mins) != 2:
            return None
        for i in (0, 1):
            if expr_names(mins[1 - i]) == frozenset():
                d = derive_grid(mins[i], old, new, envs)
                if d is not None:
                    return f"min({d}, {mins[1 - i]})"
        return None
    w = work_extent(expr, old)
    if w is None or "," in _top_level(w):
        return None
    for env in envs:
        g, wv = eval_expr(expr, env), eval_expr(w, env)
        if not isinstance(g, int) or not isinstance(wv, int) or g != _cdiv(wv, old):
            return None
    return f"cdiv({w}, {new})"


def _substitute(expr: str, token: str, old: int, new: int) -> str | None:
    """``expr`` with the block dimension ``token`` (a literal ``old`` — and ``old - 1`` beside it — or a size
    name) replaced by ``new``; None when ``expr`` does not name it."""
    if token.isdigit():
        out = re.sub(rf"(?<![\w.]){old - 1}(?![\w.])", f"({new} - 1)", expr) if old > 1 else expr
        out = re.sub(rf"(?<![\w.]){old}(?![\w.])", str(new), out)
    else:
        out = re.sub(rf"(?<![\w.]){re.escape(token)}(?![\w.])", str(new), expr)
    return out if out != expr else None


def follow_grid(expr: str, token: str, old: int, new: int, envs: Sequence[Mapping[str, Number]]) -> str | None:
    """The grid dimension for block dimension ``new`` where ``expr`` is a ceiling division of the work by a
    multiple of the block rather than by the block itself (``cdiv(B * T * C, 256 * 4)``: four elements a
    thread): the same work divided by the new block's share, which covers it by construction. Checked to
    evaluate to a grid at every environment of ``envs``. (A plain ``W / B`` stays refused, see
    ``work_extent``.)"""
    args = call_args(expr, "cdiv")
    if args is None or len(args) != 2 or _substitute(args[0], token, old, new) is not None:
        return None
    share = _substitute(args[1], token, old, new)
    if share is None:
        return None
    got = f"cdiv({args[0]}, {share})"
    for env in envs:
        g = eval_expr(got, env)
        if not isinstance(g, int) or g < 1:
            return None
    return got


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


class BlockSize(Rule):
    family = "block_size"
    motivated_by = ("WF201", "WF202", "occupancy", "tail_effect")

    def _hardcoded(self, ctx: RuleContext, dims: tuple[int, int, int]) -> str | None:
        """Why the kernel's body depends on the block size as written (None: it does not)."""
        k = ctx.cand_kernel
        got = kernel_body(ctx)
        if k is None or got is None:
            return "the kernel does not parse"
        body, data = got
        suspicious = {d for d in dims if d > 1} | {dims[0] * dims[1] * dims[2]}

        def bad_value(v: int) -> bool:
            return (v >= 64 and _is_pow2(v)) or v in suspicious

        macros = macro_values(ctx)
        blocked = tunable_names(ctx) | {p.name for p in k.template_params if p.kind == "value"}
        used: set[str] = set()
        for n in walk(body):
            if n.type == "comment":
                continue
            if n.type == "__shared__":
                return "it declares __shared__ memory (sized for a block, or indexed by thread)"
            if n.type == "number_literal":
                v = int_literal(node_text(n, data))
                if v is not None and bad_value(v):
                    return f"its body has the literal {v}"
            elif n.type in ("identifier", "type_identifier"):
                name = node_text(n, data)
                if name in blocked:
                    return f"its body uses the compile-time parameter {name}"
                if name in macros:
                    mv = eval_expr(macros[name], {}) if macros[name] else None
                    if isinstance(mv, int) and bad_value(mv):
                        return f"its body uses the macro {name} = {mv}"
            elif n.type == "field_expression":
                used.add(re.sub(r"\s+", "", node_text(n, data)))
        for axis, d in zip("xyz", dims, strict=True):
            if ({f"threadIdx.{axis}", f"blockIdx.{axis}"} & used) and f"blockDim.{axis}" not in used and d > 1:
                return f"it indexes by threadIdx.{axis}/blockIdx.{axis} without blockDim.{axis}"
        return None

    @staticmethod
    def _free_name(ctx: RuleContext, name: str, text: str) -> bool:
        """A block dimension written as a size name (``block=blockSize``) the search may change: the whole
        dimension, a size of the spec that no tunable sets and that the kernel never names (it reads the block
        through ``blockDim``)."""
        if text.strip() != name or name in tunable_names(ctx) or ctx.cand_kernel is None:
            return False
        got = kernel_body(ctx)
        if got is None:
            return False
        body = node_text(got[0], got[1])
        return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", body) is None

    def _plan(self, ctx: RuleContext) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """param -> (grid, block) for every block shape that applies safely."""
        k = ctx.cand_kernel
        if k is None or self.family in families(ctx):
            return {}
        named = [expr_names(b) for b in ctx.block]
        if any(n is None or len(n) > 1 or (n and not self._free_name(ctx, next(iter(n)), b))
               for n, b in zip(named, ctx.block, strict=True)):
            return {}  # a tunable (the tunables rule), an expression of sizes, a name the kernel uses: not ours
        dims = constant_block(ctx)
        if dims is None or dims[2] != 1 or self._hardcoded(ctx, dims) is not None:
            return {}
        tokens = [b.strip() if n else str(d) for b, n, d in zip(ctx.block, named, dims, strict=False)]
        fams = families(ctx)
        own_bounds = "launch_bounds" in fams
        lb_max: int | None = None
        if k.launch_bounds is not None:
            if len(k.launch_bounds.args) > 2:
                return {}
            if not own_bounds:
                v = eval_expr(k.launch_bounds.max_threads, {})
                if not isinstance(v, int):
                    return {}
                lb_max = v
        try:
            envs = [size_env(ctx, False), size_env(ctx, True)]
        except ValueError:
            return {}
        grid = list(ctx.grid)
        shapes: list[tuple[int, int]]
        if dims[1] == 1:
            shapes = [(s, 1) for s in SIZES_1D if s != dims[0]]
        else:
            shapes = [s for s in SHAPES_2D if s != (dims[0], dims[1])]
        out: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for shape in shapes:
            threads = shape[0] * shape[1]
            if threads > MAX_BLOCK_THREADS or (lb_max is not None and threads > lb_max):
                continue
            new_grid = list(grid)
            ok = True
            for axis in (0, 1):
                if shape[axis] == dims[axis]:
                    continue
                if axis >= len(grid):
                    ok = False
                    break
                # a block named by a size reads as its value: `(N + blockSize - 1) / blockSize` is a cdiv by 256
                literal = grid[axis] if tokens[axis].isdigit() else \
                    (_substitute(grid[axis], tokens[axis], dims[axis], dims[axis]) or grid[axis])
                d = derive_grid(literal, dims[axis], shape[axis], envs)
                if d is None:
                    d = follow_grid(grid[axis], tokens[axis], dims[axis], shape[axis], envs)
                if d is None and not (axis == 0 and dims[1] == 1 and "grid_stride" in fams):
                    ok = False
                    break
                if d is not None:
                    new_grid[axis] = d
            if not ok:
                continue
            block = list(ctx.block)
            block[0] = str(shape[0])
            if dims[1] != 1:
                block[1] = str(shape[1])
            if refresh_launch_bounds(ctx, ctx.candidate.definition, tuple(block)) is None:
                continue  # our own __launch_bounds__(T, MINBLOCKS) cannot hold this many threads
            param = str(shape[0]) if dims[1] == 1 else f"{shape[0]}x{shape[1]}"
            out[param] = (tuple(new_grid), tuple(block))
        return out

    def variants(self, ctx: RuleContext) -> list[str]:
        return list(self._plan(ctx))

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        plan = self._plan(ctx).get(param)
        k = ctx.cand_kernel
        if plan is None or k is None:
            return None
        grid, block = plan
        # Our own __launch_bounds__ promised the old block size: a larger block would fail to launch.
        definition = refresh_launch_bounds(ctx, ctx.candidate.definition, block)
        if definition is None:
            return None
        return ctx.derive(self.family, param,
                          f"launch {param.replace('x', ' x ')}-thread blocks (grid {', '.join(grid)})",
                          definition=definition, grid=grid, block=block)


register(BlockSize())
