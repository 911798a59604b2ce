"""smem_transpose: stage a transpose through a padded shared-memory tile so that both sides coalesce.

Why it helps: a naive transpose reads along one index and writes along another, so whichever side the
threads of a warp walk at stride 1, the other side's 32 accesses land in 32 different 128-byte lines — 32
transactions where one would do. Loading a 32×32 block of the index space coalesced into shared memory,
synchronizing, then storing it with the thread roles swapped makes both sides coalesced. The tile's row is
padded to 33 elements so that reading a tile column hits 32 different banks.

Whether a kernel is a transpose, and how its names bind to a position of the tile, is decided on the lowered
kernel by ``policy.ir.transpose.plan_transpose`` (a 2-D grid in any spelling, a per-thread tile loop, a thread
per item with a loop over its fields, a flat index split by ``/`` and ``%``); every decline is a sentence
(``why_not``, the funnel and the editor's hint show it).

The rewrite: a block owns a 32×32 tile of the index space (u: the dimension the read is contiguous in, v: the
store's); with a 32×R thread block each thread walks ``r = threadIdx.y, threadIdx.y + R, ...``:

* load phase: position (u0 + threadIdx.x, v0 + r); the kernel's declarations and exits are re-run with its index
  names bound to that position (an exit becomes ``continue``), then ``tile[r][threadIdx.x] = <the read>``;
* ``__syncthreads()`` — outside every branch: all threads of the block reach it;
* store phase: position (u0 + r, v0 + threadIdx.x), the same declarations and exits, then the kernel's store
  with the read replaced by ``tile[threadIdx.x][r]``.

Every position the original covers is stored exactly once with the original expression; positions past the
original's are skipped by its own exits and guards, by the loop's bound, or by the row length of a flat index
(the launch covers ``cdiv(extent, 32)`` tiles, so a partial tile at any size is predicated). Where nothing in
the kernel bounds a grid dimension, its launch must cover a multiple of 32 at every size of the spec.
Launch: block (32, R), grid (cdiv(U, 32), cdiv(V, 32)) with U/V the extents in spec terms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import element_use, unparen, walk
from ...spec.model import Role
from ..ir.passes import Kernel, splice
from ..ir.probe import indices
from ..ir.remap import NotLegal
from ..ir.summary import params_of, summarize
from ..ir.transpose import Binding, TransposePlan, plan_transpose
from . import register
from ._structural import binary_parts, dims_values, envs, failing_bound, scalar_value_expr, upper_bound
from ._structural_rule import Launch, StructuralRule, analysed, fitting, ir_kernel
from ._util import eval_expr
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfx_"

#: param -> threads along y in a block (the tile is 32 x 32)
VARIANTS = {"b32x8": 8, "b32x16": 16}
_TILE = 32
_AXES = "xyz"
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


@dataclass(frozen=True)
class _Shape:
    kernel: Kernel
    plan: TransposePlan
    #: the extents of u and v in spec terms (the launch covers cdiv(extent, 32) tiles of each)
    extents: tuple[str, str]
    elem: str
    #: the grid's z extent a batch keeps ("" without a batch)
    batch: str = ""


def _spec_terms(ctx: RuleContext, expr: str) -> str | None:
    """A kernel expression (a loop bound, a row length) in spec terms: scalar parameters replaced by the spec's
    value for them; None when a name is neither a parameter with a value nor a name of the spec."""
    scalars = {a.name: str(a.value) for a in ctx.spec.args if a.role is Role.SCALAR and a.value is not None}

    def sub(m: re.Match[str]) -> str:
        return f"({scalars[m.group(0)]})" if m.group(0) in scalars else m.group(0)

    out = _WORD.sub(sub, expr)
    return out if dims_values(ctx, (out,)) is not None else None


def _coverage(ctx: RuleContext, b: Binding) -> str:
    a = _AXES.index(b.axis)
    grid = ctx.grid[a] if a < len(ctx.grid) else "1"
    if b.kind == "tile":
        return f"({grid}) * {b.block_coef}"
    block = ctx.block[a] if a < len(ctx.block) else "1"
    return f"({grid}) * ({block})"


def analysis(ctx: RuleContext) -> _Shape | NotLegal:
    """The candidate's transpose plan and its launch extents, or why there is none."""
    head = ir_kernel(ctx, (PREFIX,), "already staged through a tile")
    if isinstance(head, NotLegal):
        return head
    k, targs = head
    plan = plan_transpose(k, summarize(k, targs), targs)
    if isinstance(plan, NotLegal):
        return (_rows_moved(ctx, k) if "not affine" in plan.reason else None) or plan
    blocks, grids = dims_values(ctx, ctx.block), dims_values(ctx, ctx.grid)
    if blocks is None or grids is None:
        return NotLegal("the launch does not evaluate at the spec's sizes", stage=3)
    used = {b.axis for b in (plan.u, plan.v) if b.axis}
    if plan.batch and ("z" in used or any(b[2] != 1 for b in blocks)):
        return NotLegal(f"the batch index `{plan.batch}` is blockIdx.z, and z also indexes the tile or the block is "
                        "more than one deep", plan.line, stage=3)
    for n, ax in enumerate(_AXES):
        if ax not in used and not (ax == "z" and plan.batch) and any(
                g[n] > 1 or b[n] > 1 for g, b in zip(grids, blocks, strict=True)):
            return NotLegal(f"the launch has more than one thread along {ax}, which the kernel does not index: its "
                            "threads repeat the work", plan.line, stage=3)
    extents: list[str] = []
    for b, guarded in zip((plan.u, plan.v), plan.guarded, strict=True):
        got = _extent(ctx, k, plan, b, guarded, blocks)
        if isinstance(got, NotLegal):
            return got
        extents.append(got)
    params = params_of(k)[0]
    elem = next((t.replace("const ", "").strip() for n, t, ptr, _ in params if n == plan.src and ptr), "float")
    elem = targs.get(elem, elem)
    return _Shape(k, plan, (extents[0], extents[1]), elem, ctx.grid[2] if plan.batch and len(ctx.grid) > 2 else "")


def _conjuncts(node: Node, data: bytes, op: str) -> list[Node]:
    n = unparen(node)
    if n.type == "condition_clause" and n.named_child_count == 1:
        n = unparen(n.named_children[0])
    parts = binary_parts(n, data)
    if parts is not None and parts[1] == op:
        return _conjuncts(parts[0], data, op) + _conjuncts(parts[2], data, op)
    return [n]


def _guard_bound(ctx: RuleContext, k: Kernel, plan: TransposePlan, local: str) -> str | None:
    """``local < E`` of a guard (or ``local >= E`` of an exit) with ``E`` in spec terms, else None."""
    for kind, (a, b) in plan.conditions:
        node = k.body.descendant_for_byte_range(a, b)
        if node is None:
            continue
        for part in _conjuncts(node, k.data, "&&" if kind == "guard" else "||"):
            got = (upper_bound if kind == "guard" else failing_bound)(part, k.data, local)
            lim = scalar_value_expr(ctx, got.limit, k.data) if got is not None else None
            if got is not None and lim is not None:
                return f"{lim} + 1" if got.inclusive else lim
    return None


def _rows_moved(ctx: RuleContext, k: Kernel) -> NotLegal | None:
    """For an index the affine reading cannot follow (a chain of ``/`` and ``%``): whether neighbouring threads
    store neighbouring elements and read neighbouring elements (a permutation of whole rows, llm.c's
    ``unpermute``), found by running the index arithmetic for a few threads at the spec's size (``ir.probe``)."""
    stores = [n for n in walk(k.body, ("subscript_expression",)) if element_use(n)[1]]
    if len(stores) != 1:
        return None
    st = stores[0]
    while st.parent is not None and st.type != "expression_statement":
        st = st.parent
    pointers = {n for n, _, ptr, _ in params_of(k)[0] if ptr}
    subs = [n for n in walk(st, ("subscript_expression",))
            if (a := n.child_by_field_name("argument")) is not None and k.t(unparen(a)) in pointers]
    exprs = [i.named_children[0] if i.type == "subscript_argument_list" else i
             for n in subs if (i := n.child_by_field_name("indices") or n.child_by_field_name("index")) is not None]
    blocks, grids, es = dims_values(ctx, ctx.block), dims_values(ctx, ctx.grid), envs(ctx)
    if len(exprs) < 2 or len(exprs) != len(subs) or blocks is None or grids is None or not es:
        return None
    env: dict[str, int] = {}
    for arg in ctx.spec.args:
        v = eval_expr(str(arg.value), es[0]) if arg.role is Role.SCALAR and arg.value is not None else None
        if isinstance(v, int):
            env[arg.name] = v
    for n, ax in enumerate(_AXES):
        env[f"blockDim.{ax}"], env[f"gridDim.{ax}"] = blocks[0][n], grids[0][n]
        env[f"threadIdx.{ax}"] = env[f"blockIdx.{ax}"] = 0
    steps: list[list[int]] = [[] for _ in exprs]
    for b in range(min(grids[0][0], 4)):
        for t in range(0, max(blocks[0][0] - 1, 0), max(blocks[0][0] // 16, 1)):
            got = [indices(k, st, exprs, {**env, "blockIdx.x": b, "threadIdx.x": t + d}) for d in (0, 1)]
            if got[0] is not None and got[1] is not None:
                for n, (x, y) in enumerate(zip(got[0], got[1], strict=True)):
                    steps[n].append(y - x)
    if not steps[0]:
        return None
    unit = [sum(1 for d in s if d == 1) * 4 >= len(s) * 3 for s in steps]
    names = ", ".join(f"`{k.t(unparen(a))}`" for n in subs if (a := n.child_by_field_name("argument")) is not None)
    if unit[0] != any(unit[1:]):
        return NotLegal(f"a transpose of more than two dimensions ({names}: neighbouring threads are neighbours on one "
                        "side only, evaluated at the spec's size) through a flat index the affine reading cannot "
                        "split into a row and a column: not staged", k.line(st), stage=1)
    if not all(unit):
        return None
    return NotLegal(f"neighbouring threads store and read neighbouring elements ({names}, evaluated at the spec's "
                    "size): the innermost index is the same on both sides, a permutation of whole rows, already "
                    "contiguous, not a transpose", k.line(st), stage=0)


def _extent(ctx: RuleContext, shape_kernel: Kernel, plan: TransposePlan, b: Binding, guarded: bool,
            blocks: list[tuple[int, ...]]) -> str | NotLegal:
    """The extent of one dimension in spec terms, or why the tile cannot cover exactly what the original does."""
    if b.kind == "loop":
        got = _spec_terms(ctx, b.bound)
        return got if got is not None else NotLegal(
            f"the loop bound `{b.bound}` is not an expression of the spec's sizes", plan.line, stage=3)
    a = _AXES.index(b.axis)
    if b.kind == "flat":
        e = _spec_terms(ctx, b.divisor)
        if e is None:
            return NotLegal(f"the row length `{b.divisor}` is not an expression of the spec's sizes", plan.line,
                            stage=3)
        if not guarded:
            return NotLegal(f"no exit or guard bounds the flat index `{b.local}`: the tiles would cover positions "
                            "past the launch's threads", plan.line)
        return e if b.bound else f"cdiv({_coverage(ctx, b)}, {e})"
    if b.block_coef != f"blockDim.{b.axis}":
        want = [blk[a] for blk in blocks] if b.kind == "grid" else None
        if b.kind == "grid" and (not b.block_coef.isdigit() or any(int(b.block_coef) != w for w in want or [])):
            return NotLegal(f"`{b.local}` steps by `{b.block_coef}` per block, not the block's extent along "
                            f"{b.axis}: blocks overlap or leave gaps", plan.line, stage=3)
    if b.kind == "tile":
        if not (b.block_coef.isdigit() and b.step.isdigit() and b.bound.isdigit()):
            return NotLegal(f"the tile loop over `{b.counter}` has a tile, step or bound that is not a number",
                            plan.line, stage=3)
        t, step, bound = int(b.block_coef), int(b.step), int(b.bound)
        if any(blk[a] != step for blk in blocks) or -(-bound // step) * step != t:
            return NotLegal(f"the tile loop over `{b.counter}` (step {step}, bound {bound}) does not cover the "
                            f"{t} rows of a block's tile once with the block's {b.axis} extent", plan.line, stage=3)
    cov = _coverage(ctx, b)
    vals = dims_values(ctx, (cov,))
    limit = _guard_bound(ctx, shape_kernel, plan, b.local)
    if limit is not None and vals is not None:
        bvals = dims_values(ctx, (limit,))
        if bvals is not None and all(x[0] <= c[0] for x, c in zip(bvals, vals, strict=True)):
            return limit  # the guard's bound, inside what the launch covered: the tiles cover it and no more
    if not guarded and (vals is None or any(v[0] % _TILE for v in vals)):
        return NotLegal(f"nothing in the kernel bounds `{b.local}` and the launch covers {cov} of it, not a multiple "
                        f"of {_TILE} at every size: a partial tile would store past the original's threads",
                        plan.line, stage=3)
    return cov


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why the tile does not apply to the candidate (None when it does): the "why not" hint's words."""
    got = analysis(ctx)
    if isinstance(got, NotLegal):
        return got
    if not _launches(ctx, got):
        return NotLegal(f"no launch fits: the grid of cdiv({got.extents[0]}, 32) x cdiv({got.extents[1]}, 32) tiles "
                        "is outside the limits", got.plan.line, stage=3)
    return None


def _launches(ctx: RuleContext, shape: _Shape) -> dict[str, Launch]:
    nu, nv = shape.extents
    grid = (f"cdiv({nu}, {_TILE})", f"cdiv({nv}, {_TILE})") + ((shape.batch,) if shape.batch else ())
    return fitting(ctx, {param: Launch(grid, (str(_TILE), str(rows))) for param, rows in VARIANTS.items()})


def _bind(b: Binding, value: str, other: Binding, other_value: str) -> tuple[dict[str, str], list[str]]:
    """(coordinate local -> its value, extra checks) for a dimension at ``value``."""
    if b.kind == "grid":
        return {b.local: value}, []
    if b.kind == "tile":
        return {b.local: value}, []
    if b.kind == "flat":
        if b.bound:  # the remainder (column): the quotient is the other dimension
            return {b.local: f"{other_value} * ({b.divisor}) + {value}"}, [f"{value} >= ({b.divisor})"]
        return {}, []
    return {}, []


def _phase(shape: _Shape, u: str, v: str, last: str, tiled: str = "") -> str:
    """The statements that re-run the kernel's declarations, exits and guards at position (u, v), then ``last``
    (``tiled``: what a read of the source becomes in the declarations, in the store phase)."""
    k, p = shape.kernel, shape.plan
    data = k.data
    values, checks = _bind(p.u, u, p.v, v)
    v_values, v_checks = _bind(p.v, v, p.u, u)
    values.update(v_values)
    checks += v_checks
    counters = {b.counter: (u if b is p.u else v) if b.kind == "loop" else "0" for b in (p.u, p.v) if b.counter}
    by_local = {span: values[name] for name, span in p.coordinate_values if name in values}

    def text(span: tuple[int, int]) -> str:
        edits = [(a - span[0], b - span[0], t) for (a, b), t in by_local.items() if span[0] <= a and b <= span[1]]
        edits += [(r.start_byte - span[0], r.end_byte - span[0], "continue;")
                  for r in walk(k.body, ("return_statement",)) if span[0] <= r.start_byte < span[1]]
        if tiled:
            edits += [(a - span[0], b - span[0], tiled) for a, b in p.reads if span[0] <= a and b <= span[1]]
        return splice(data[span[0]:span[1]], edits)

    lines = [f"if ({c}) continue;" for c in checks]
    lines += [text(s) for s in p.prelude]
    for kind, cond, inner in p.chain:
        if kind == "for":
            b = p.u if p.u.counter and p.u.kind in ("loop", "tile") else p.v
            lines.append(f"const {b.counter_type} {b.counter} = {counters[b.counter]};")
        lines.append(f"if (!({data[cond[0]:cond[1]].decode('utf-8')})) continue;")
        lines += [text(s) for s in inner]
    lines.append(last)
    return "\n".join(lines)


def _generate(shape: _Shape, rows: int) -> str:
    k, p = shape.kernel, shape.plan
    data = k.data
    x = PREFIX
    read = data[p.reads[0][0]:p.reads[0][1]].decode("utf-8")
    s0 = p.store[0]
    store = splice(data[s0:p.store[1]], [(a - s0, b - s0, f"{x}tile[threadIdx.x][{x}r]") for a, b in p.reads
                                         if s0 <= a and b <= p.store[1]])
    load = _phase(shape, f"{x}u", f"{x}v", f"{x}tile[{x}r][threadIdx.x] = {read};")
    put = _phase(shape, f"{x}u", f"{x}v", store, f"{x}tile[threadIdx.x][{x}r]")
    ind = "        "
    return "\n".join([
        "{",
        f"    __shared__ {shape.elem} {x}tile[{_TILE}][{_TILE + 1}];  // padded: a column read hits {_TILE} banks",
        f"    const int {x}u0 = blockIdx.x * {_TILE}, {x}v0 = blockIdx.y * {_TILE};",
        f"    for (int {x}r = threadIdx.y; {x}r < {_TILE}; {x}r += {rows}) {{  // the read, coalesced along u",
        f"        const int {x}u = {x}u0 + threadIdx.x, {x}v = {x}v0 + {x}r;",
        *(ind + ln for ln in load.split("\n")),
        "    }",
        "    __syncthreads();",
        f"    for (int {x}r = threadIdx.y; {x}r < {_TILE}; {x}r += {rows}) {{  // the store, coalesced along v",
        f"        const int {x}u = {x}u0 + {x}r, {x}v = {x}v0 + threadIdx.x;",
        *(ind + ln for ln in put.split("\n")),
        "    }",
        "}"])


class SmemTranspose(StructuralRule[_Shape]):
    family = "smem_transpose"
    structural = True
    motivated_by = ("WF103", "coalesce", "smem_transpose")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return analysed(analysis(ctx))

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        return _launches(ctx, shape)

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, VARIANTS[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        return (f"stage {_TILE}x{_TILE} tiles of `{shape.plan.src}` in padded shared memory ({_TILE}x{_TILE + 1}) "
                f"so that the stores to `{shape.plan.dst}` coalesce as well as the reads (block {_TILE}x"
                f"{VARIANTS[param]})")


register(SmemTranspose())
