"""lane_remap: one warp per item instead of one thread, the item's contiguous loop split over the 32 lanes.

The first transformation that reads the kernel IR's summary rather than a text shape: whether it applies
is decided by ``policy.ir.remap.plan_lanes`` on the ``Summary`` of the candidate (its parallel index space,
serial loops, affine accesses and accumulators), so every spelling the IR lowers reads the same (a loop
variable declared before the ``for``, a guard around the work or an early exit, a macro bound, a global
accumulator ``y[i] += ...`` that the IR keeps in a register, a typedef'd element type).

Why it helps: with one thread per row, a warp's 32 threads read 32 rows ``stride`` elements apart, so
each load instruction touches 32 cache lines (a matrix-vector product, a per-row mean, a CSR row). With a
warp per row, its lanes read 32 neighbouring elements of one row per instruction (coalesced), and the
row's sums/maxima are per-lane partials combined by five ``__shfl_xor_sync`` steps. The rule proposes it
only where some access in the loop has the loop counter at stride 1 and ``threadIdx.x`` at another stride
than 0 or 1 (``A[4096*i + j]``): where neighbouring threads already read neighbouring elements (a naive
matmul's ``b[k*N + col]``) there is nothing to gain.

The rewrite (legality: see ``policy.ir.remap``):

* the item index ``i = blockIdx.x*blockDim.x + threadIdx.x`` becomes ``(...) / 32``, the warp's global
  index (``blockDim.x`` a multiple of 32 at every size of the spec), and ``lane = threadIdx.x % 32``; the
  guard on ``i`` is then the same for all lanes of a warp, so whole warps leave together and the full-mask
  shuffles are safe;
* ``for (j = a; j < b; j++)`` becomes ``for (j = a + lane; j < b; j += 32)``; a sum starts from 0 in each
  lane (its initial value is added once after the shuffles), a min/max keeps its initial value (idempotent);
* the statements after the loop run on lane 0 only (each item's stores happen once, as before).

Launch: the grid's x dimension times 32 (the same number of items, a warp each). Floating-point sums are
reassociated (the verifier's tolerances apply).

Beyond that one-loop plan (when ``plan_lanes`` declines for the form alone: several loops per item, a
grid-stride loop over the items), the rule takes ``policy.ir.remap_items.plan_items``'s plan where its loops
only read (a mean then a variance pass, a maximum then a sum, items walked by a grid-stride loop): every
loop is split over the lanes and its accumulators combined right after it, so the next loop sees the
item's totals (``element_remap.rewrite_items`` writes it). Loops that write memory are ``element_remap``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.atomic_helpers import atomic_helpers
from ..ir.passes import Kernel, splice
from ..ir.remap import LanePlan, NotLegal, plan_lanes, zero_of
from ..ir.remap_items import ItemPlan, plan_items
from ..ir.summary import Summary, summarize
from . import register
from ._structural import dims_values
from ._structural_rule import Launch, StructuralRule, analysed, fitting, ir_kernel
from .base import RuleContext
from .element_remap import group_launches, rewrite_items

PREFIX = "wfl_"
LANES = 32
_FULL = "0xffffffffu"



@dataclass(frozen=True)
class _Shape:
    kernel: Kernel
    summary: Summary
    plan: LanePlan | ItemPlan


def analysis(ctx: RuleContext) -> _Shape | NotLegal:
    """The candidate's IR summary and the lane plan on it, or why there is none."""
    got = ir_kernel(ctx, (PREFIX,), "already bound to lanes")
    if isinstance(got, NotLegal):
        return got
    k, targs = got
    s = summarize(k, targs)
    plan = plan_lanes(k, s, targs)
    if isinstance(plan, NotLegal):
        # the one-loop plan reads accesses off the summary, whose indices are affine in the thread's
        # coordinates; ``plan_items`` holds the item fixed, so a per-item local the summary cannot expand
        # (``k = id % c`` in ``in[i + h*w*(k + b*c)]``) is one value there: it may accept what this declined
        wider = plan_items(k, s, targs, atomic_helpers(ctx.source.text))
        if isinstance(wider, NotLegal):
            return wider if any(w in plan.reason for w in _FORMS) else plan
        if wider.writes:
            written = sorted({w for lp in wider.loops for w in lp.writes})
            return NotLegal(f"the loop writes `{'`, `'.join(written)}`: a write "
                            "loop is element_remap's", wider.line)
        if not wider.reductions:
            return NotLegal("the item's loops carry no accumulator", wider.line)
        return _Shape(k, s, wider)
    return _Shape(k, s, plan)


#: declines of the one-loop plan that are about its form only (``plan_items`` may accept the kernel)
_FORMS = ("more than one loop", "grid-stride loop", "loop writes", "not declared once", "declared after the loop",
          "written before the loop")


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why the remap does not apply to the candidate (None when it does): the "why not" hint's words."""
    got = analysis(ctx)
    if isinstance(got, NotLegal):
        return got
    blocks = dims_values(ctx, ctx.block)
    if blocks is None or any(b[0] % LANES for b in blocks):
        return NotLegal(f"the block's x size is not a multiple of {LANES} at every size of the spec")
    return None


def _indent_at(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    line = data[start:offset].decode("utf-8")
    return line[:len(line) - len(line.lstrip())]


def rewrite(k: Kernel, p: LanePlan) -> str:
    """The new body (braces included) of the kernel ``k`` for the plan ``p``."""
    b0 = k.body.start_byte
    data = k.data
    ind = _indent_at(data, p.loop_start)
    decl_ind = _indent_at(data, p.index_value[0])
    lane = f"{PREFIX}lane"
    value = data[p.index_value[0]:p.index_value[1]].decode("utf-8")
    init = data[p.init_value[0]:p.init_value[1]].decode("utf-8")
    sums = [r for r in p.reductions if r.combine == "sum"]
    pre = "".join(f"const {r.type} {PREFIX}init_{r.ident} = {r.name};\n{ind}{r.name} = {zero_of(r.type)};\n{ind}"
                  for r in sums)
    combine = [f"{r.name} = {r.name} + __shfl_xor_sync({_FULL}, {r.name}, {PREFIX}o);" if r.combine == "sum"
               else f"{r.name} = {r.combine}({r.name}, __shfl_xor_sync({_FULL}, {r.name}, {PREFIX}o));"
               for r in p.reductions]
    post = [f"for (int {PREFIX}o = {LANES // 2}; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
            *(f"    {c}" for c in combine), "}",
            *(f"{r.name} = {PREFIX}init_{r.ident} + {r.name};" for r in sums)]
    tail = data[p.loop_end:p.body_close].decode("utf-8")
    if p.tail:
        body_lines = tail.strip("\n").split("\n")
        moved = "\n".join(("    " + ln) if ln.strip() else ln for ln in body_lines)
        tail_text = f"\n{ind}if ({lane} == 0) {{\n{moved}\n{ind}}}\n"
    else:
        tail_text = tail
    edits = [
        (p.index_value[0], p.index_value[1], f"({value}) / {LANES}"),
        (p.index_stmt_end, p.index_stmt_end, f"\n{decl_ind}const int {lane} = threadIdx.x % {LANES};"),
        (p.loop_start, p.loop_start, pre),
        (p.init_value[0], p.init_value[1], f"{lane}" if init.strip() == "0" else f"({init}) + {lane}"),
        (p.update[0], p.update[1], f"{p.loop_var} += {LANES}"),
        (p.loop_end, p.body_close, "\n" + "\n".join(ind + ln for ln in post) + tail_text),
    ]
    rel = [(s - b0, e - b0, t) for s, e, t in edits]
    return splice(data[b0:k.body.end_byte], rel)


def _index_fits(ctx: RuleContext, lc: Launch, shape: _Shape) -> bool:
    """Whether the item index, computed in 32-bit before the division by 32, stays below 2^31 on the multiplied
    launch: the grid's x size times the block's, or the whole grid's where the index flattens a 2-D/3-D grid."""
    p = shape.plan
    value = shape.kernel.data[p.index_value[0]:p.index_value[1]].decode("utf-8")
    grids, blocks = dims_values(ctx, lc.grid or ctx.grid), dims_values(ctx, ctx.block)
    if grids is None or blocks is None:
        return False
    flat = "gridDim" in value
    return all((g[0] * g[1] * g[2] if flat else g[0]) * b[0] < 2**31 for g, b in zip(grids, blocks, strict=True))


class LaneRemap(StructuralRule[_Shape]):
    family = "lane_remap"
    structural = True
    motivated_by = ("uncoalesced_global", "coalescing", "memory_bound", "low_occupancy_work")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return analysed(analysis(ctx))

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        blocks = dims_values(ctx, ctx.block)
        if blocks is None or any(b[0] % LANES for b in blocks):
            return {}
        grid = (f"({ctx.grid[0]}) * {LANES}", *ctx.grid[1:])
        if isinstance(shape.plan, ItemPlan):
            got = {p: lc for p, lc in group_launches(ctx, shape.plan).items() if p == "warp"}
        else:
            got = fitting(ctx, {"warp": Launch(grid=grid)})
        return {p: lc for p, lc in got.items() if _index_fits(ctx, lc, shape)}

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        if isinstance(shape.plan, ItemPlan):
            return rewrite_items(shape.kernel, shape.plan, str(LANES))
        return rewrite(shape.kernel, shape.plan)

    def rationale(self, shape: _Shape, param: str) -> str:
        p = shape.plan
        if isinstance(p, ItemPlan):
            return (f"one warp per `{p.index}` instead of one thread: the lanes split each of its loops over "
                    f"{', '.join(f'`{lp.var}`' for lp in p.loops)}, so `{p.strided}` is read contiguously "
                    f"(coalesced) and {', '.join(r.name for r in p.reductions)} combined with warp shuffles")
        return (f"one warp per `{p.index}` instead of one thread: the lanes split the loop over `{p.loop_var}`, "
                f"so `{p.strided}` is read contiguously (coalesced) and "
                f"{', '.join(r.name for r in p.reductions)} combined with warp shuffles")


register(LaneRemap())
