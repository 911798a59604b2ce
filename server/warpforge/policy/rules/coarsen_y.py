"""coarsen_y: several outputs per thread along y for 2D/3D one-thread-per-output kernels.

Why it helps: stencils, pooling windows and direct convolutions launched one thread per output point read
overlapping neighbourhoods; a thread that computes ``R`` points of one column (``y``, ``y + By``, ... with
``By = blockDim.y``) makes a block cover an ``R``-times taller tile, so the rows shared by vertically
adjacent points are fetched from L1 instead of again from L2, the per-thread index arithmetic and bound
checks are paid once per ``R`` points, and the ``R`` independent bodies give the scheduler more loads in
flight. Points of one thread are ``By`` rows apart, so every warp still reads and writes the same
coalesced rows as before.

What the analysis requires (the kernel's names, types and body are free):

* a top-level declaration ``T y = blockIdx.y * M + threadIdx.y;`` (either order, casts allowed) that
  nothing writes; ``blockIdx.y``, ``threadIdx.y`` and ``gridDim.y`` appear nowhere else (their meaning
  changes; ``blockDim.y`` does not);
* threads that do not communicate: no barriers, shuffles, atomics or shared memory. Then the original
  threads of a column run one after another in one thread: without synchronization no original thread
  could read what another wrote (that would be a data race), so running them in sequence computes what
  running them concurrently did;
* what runs before the ``y`` declaration (kept once per thread) is declarations only, and nothing the loop
  body writes is declared there (each point starts from the same state it started from before);
* a bound on ``y`` at the top level: an early exit ``if (... || y >= L || ...) return;`` or a guard
  ``if (... && y < L && ...) { ... }`` as the last statement, preceded only by declarations that touch
  no memory and call nothing, with ``L`` a spec-known number the original launch covers
  (``grid.y * block.y >= L`` at both sizes). The new grid rounds ``grid.y / R`` up, so points past the
  original launch have ``y >= L`` and are excluded by that same bound;
* ``return`` only outside nested loops and switches: it ends one point, and becomes ``continue``.

The rewrite keeps the kernel text and wraps what follows the prelude in ``for (c = 0; c < R; ++c)``, with
``y = (blockIdx.y * R + c) * M + threadIdx.y``; the grid's y dimension becomes ``cdiv(G.y, R)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    Decl,
    _split,
    all_names,
    condition_of,
    declared_names,
    dims_values,
    envs,
    failing_bound,
    flush,
    global_index,
    has_collective,
    indent,
    is_builtin,
    is_return_only,
    launch_ok,
    render,
    scalar_value_expr,
    single_decl,
    statements,
    upper_bound,
    with_body,
    written_names,
)
from ._util import eval_expr, kernel_body
from ._why import Stage, declined
from .base import Rule, RuleContext

PREFIX = "wfy_"
FACTORS = {"y2": 2, "y4": 4}
_LOOPS = ("for_statement", "while_statement", "do_statement", "switch_statement", "for_range_loop")


@dataclass
class _Shape:
    decl: Decl
    mult: str
    prefix: list[Node]
    rest: list[Node]
    limit: Node


def _bound(rest: list[Node], data: bytes, y: str) -> Node | None:
    """The limit ``L`` of the top-level bound on ``y`` (see the module docstring), or None."""
    for at, st in enumerate(rest):
        if st.type == "if_statement" and st.child_by_field_name("alternative") is None:
            cond = condition_of(st)
            if cond is None:
                return None
            if is_return_only(st.child_by_field_name("consequence")):
                for term in _split(cond, data, "||") or []:
                    b = failing_bound(term, data, y)
                    if b is not None and not b.inclusive:
                        return b.limit
            if at == len(rest) - 1:
                for term in _split(cond, data, "&&") or []:
                    b = upper_bound(term, data, y)
                    if b is not None and not b.inclusive:
                        return b.limit
            return None
        if st.type != "declaration" or any(n.type in ("subscript_expression", "call_expression")
                                           or (n.type == "pointer_expression"
                                               and node_text(n, data).lstrip().startswith("*"))
                                           for n in walk(st)):
            return None
    return None


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return declined("the kernel is already coarsened along y", None, Stage.SCOPE)
    if not any(global_index(d.value, data, "y") is not None for st in statements(body)
               if (d := single_decl(st, data)) is not None and d.value is not None and not d.pointer):
        return declined("the kernel has no row index `blockIdx.y * blockDim.y + threadIdx.y`", None, Stage.SCOPE)
    if has_collective(body, data) or any(n.type == "__shared__" for n in walk(body)):
        return declined("the kernel uses shared memory, barriers or shuffles: a thread doing several rows would "
                        "change what the block exchanges", body, Stage.SHAPE)
    if declared_names(body, data) & {p.name for p in k.params}:
        return declined("a local has the name of a parameter", body, Stage.SHAPE)
    sts = statements(body)
    for at, st in enumerate(sts):
        d = single_decl(st, data)
        mult = global_index(d.value, data, "y") if d is not None and d.value is not None and not d.pointer else None
        if d is None or mult is None:
            continue
        prefix, rest = sts[:at], sts[at + 1:]
        inside = {n.id for n in walk(st)}
        for n in walk(body):
            if n.type == "field_expression" and n.id not in inside and any(
                    is_builtin(n, data, obj, "y") for obj in ("blockIdx", "threadIdx", "gridDim")):
                return declined(f"`{node_text(n, data)}` is used outside the row index `{d.name}`", n, Stage.SHAPE)
        written: set[str] = set()
        for r in rest:
            written |= written_names(r, data)
        if d.name in written:
            return declined(f"the row index `{d.name}` is changed after its declaration", st, Stage.LEGALITY)
        if any(p.type != "declaration" for p in prefix):
            return declined(f"a statement before the row index `{d.name}` is not a declaration", st, Stage.SHAPE)
        pre_names: set[str] = set()
        for p in prefix:
            pre_names |= declared_names(p, data)
        if pre_names & written:
            return declined(f"`{sorted(pre_names & written)[0]}`, declared before the row index, is changed after "
                            "it (each row must start from the same values)", st, Stage.LEGALITY)
        if any(_return_in_loop(r) or n.type in ("goto_statement", "labeled_statement")
               for r in rest for n in walk(r)):
            return declined("a `return` inside a loop or a `goto` (a row could end the thread's other rows)", st,
                            Stage.LEGALITY)
        limit = _bound(rest, data, d.name)
        if limit is None:
            return declined(f"the row index `{d.name}` has no top-level bound (`if ({d.name} < rows)` around the "
                            f"rest, or `if ({d.name} >= rows) return;`)", st, Stage.SHAPE)
        return _Shape(d, mult, prefix, rest, limit), data
    return declined("the kernel has no row index `blockIdx.y * blockDim.y + threadIdx.y`", None, Stage.SCOPE)


def _return_in_loop(node: Node) -> bool:
    def visit(n: Node, in_loop: bool) -> bool:
        if n.type == "return_statement" and in_loop:
            return True
        nested = in_loop or n.type in _LOOPS
        return any(visit(c, nested) for c in n.children)

    return visit(node, False)


class CoarsenY(Rule):
    family = "coarsen_y"
    structural = True

    def variants(self, ctx: RuleContext) -> list[str]:
        got = _analyse(ctx)
        if got is None:
            return []
        if len(ctx.grid) < 2 or len(ctx.block) < 2:
            declined("the launch has no y dimension", None, Stage.LAUNCH)
            return []
        shape, data = got
        lim = scalar_value_expr(ctx, shape.limit, data)
        g, b, es = dims_values(ctx, ctx.grid), dims_values(ctx, ctx.block), envs(ctx)
        if lim is None or g is None or b is None or es is None:
            declined(f"the row bound `{node_text(shape.limit, data)}` or the launch has no value at the spec's "
                     "sizes", None, Stage.LAUNCH)
            return []
        for gv, bv, env in zip(g, b, es, strict=True):
            lv = eval_expr(lim, env)
            if not isinstance(lv, int) or gv[1] * bv[1] < lv or gv[1] < 2:
                # the original launch does not cover the bound: the rounded-up grid could overshoot
                declined("the launch's y threads do not cover the row bound at every size of the spec, or the "
                         "grid has a single row of blocks", None, Stage.LAUNCH)
                return []
        return [p for p, r in FACTORS.items() if launch_ok(ctx, self._grid(ctx, r), ctx.block)]

    @staticmethod
    def _grid(ctx: RuleContext, r: int) -> tuple[str, ...]:
        g = ctx.grid
        return (g[0], f"cdiv({g[1]}, {r})", *g[2:])

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        r = FACTORS.get(param)
        got = _analyse(ctx)
        if r is None or got is None or param not in self.variants(ctx):
            return None
        shape, data = got

        def rep(n: Node) -> str | None:
            return "continue;" if n.type == "return_statement" else None

        d = shape.decl
        q = "const " if d.const else ""
        rest = "\n".join(flush(render(s, data, rep), s, data) for s in shape.rest)
        pre = "\n".join(flush(node_text(s, data), s, data) for s in shape.prefix)
        code = (f"{pre}\n#pragma unroll\nfor (int {PREFIX}c = 0; {PREFIX}c < {r}; ++{PREFIX}c) {{\n"
                f"    {q}{d.type} {d.name} = (blockIdx.y * {r} + {PREFIX}c) * ({shape.mult}) + threadIdx.y;\n"
                f"{indent(rest, '    ')}\n}}")
        code = "\n".join(ln for ln in code.split("\n") if ln.strip())
        definition = with_body(ctx, "{\n" + indent(code, "    ") + "\n}")
        if definition is None:
            return None
        why = (f"{r} points per thread along y, blockDim.y rows apart: a block covers a {r}x taller tile, rows "
               f"shared by neighbouring points come from L1; grid y divided by {r}")
        return ctx.derive(self.family, param, why, definition=definition, grid=self._grid(ctx, r))


register(CoarsenY())
