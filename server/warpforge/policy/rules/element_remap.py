"""element_remap: one thread per item -> a group of threads per item, each doing a few of its elements.

Why: "one thread per outer item, a serial loop writing the item's row" (an embedding row copy
``out[bt*C + c] = wte[ix*C + c] + wpe[t*C + c]``, a bias add per row, a softmax/layernorm row written back)
makes a warp's 32 threads write 32 rows ``C`` elements apart: every load and store instruction touches 32
cache lines, and only ``B*T`` threads run. With a warp (or a block) per item, the item's loops are split
over the group's threads at stride 1: 32 neighbouring elements per instruction, coalesced, and ``C`` times
more threads in flight. Whether that is legal is decided on the IR (``policy.ir.remap_items.plan_items``:
independent iterations, every written element owned by one lane); each decline is a sentence.

Variants (the search times them):

* ``warp``: a warp per item (``blockDim.x`` a multiple of 32): the item index divided by 32,
  ``lane = threadIdx.x % 32``, every loop ``for (j = a + lane; j < b; j += 32)``; sums and min/max carried
  by a loop are combined by a butterfly of ``__shfl_xor_sync`` right after it (every lane then holds the
  total, so later loops may use it), the statements after the last loop run on lane 0. Grid x times 32.
* ``block``: a block per item, loops strided by ``blockDim.x`` (only where no loop carries an accumulator:
  nothing to combine across warps). Grid x times the block's x size.

The writer (``rewrite_items``) is shared with ``lane_remap``, which uses it for the reading-only loops it
accepts beyond its one-loop plan (several loops per item, grid-stride items).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.atomic_helpers import atomic_helpers
from ..ir.passes import Kernel, splice
from ..ir.remap import NotLegal, zero_of
from ..ir.remap_items import ItemPlan, plan_items
from ..ir.summary import summarize
from . import register
from ._structural import dims_values
from ._structural_rule import Launch, StructuralRule, analysed, fitting, ir_kernel
from .base import RuleContext

PREFIX = "wfl_"
LANES = 32
_FULL = "0xffffffffu"



@dataclass(frozen=True)
class _Shape:
    kernel: Kernel
    plan: ItemPlan


def item_plan(ctx: RuleContext) -> tuple[Kernel, ItemPlan] | NotLegal:
    """The candidate's kernel and its item plan (``plan_items``), or why there is none."""
    got = ir_kernel(ctx, (PREFIX,), "already bound to lanes")
    if isinstance(got, NotLegal):
        return got
    k, targs = got
    plan = plan_items(k, summarize(k, targs), targs, atomic_helpers(ctx.source.text))
    return plan if isinstance(plan, NotLegal) else (k, plan)


def analysis(ctx: RuleContext) -> _Shape | NotLegal:
    got = item_plan(ctx)
    if isinstance(got, NotLegal):
        return got
    k, plan = got
    if not plan.writes:
        return NotLegal("the item's loops write no memory (a reading loop is lane_remap's)", plan.line)
    return _Shape(k, plan)


def group_launches(ctx: RuleContext, plan: ItemPlan) -> dict[str, Launch]:
    """``warp`` where the block's x size is a multiple of 32, ``block`` where nothing is combined; 1-D blocks."""
    blocks = dims_values(ctx, ctx.block)
    if blocks is None or any(b[1] != 1 or b[2] != 1 for b in blocks):
        return {}
    out: dict[str, Launch] = {}
    if all(b[0] % LANES == 0 for b in blocks):
        out["warp"] = Launch(grid=(f"({ctx.grid[0]}) * {LANES}", *ctx.grid[1:]))
    if not plan.reductions and all(b[0] > 1 for b in blocks):
        out["block"] = Launch(grid=(f"({ctx.grid[0]}) * ({ctx.block[0]})", *ctx.grid[1:]))
    # the item index is computed in 32-bit (``blockIdx.x * blockDim.x + threadIdx.x``) before the division:
    # the multiplied launch must keep it below 2^31 at every size of the spec
    fits: dict[str, Launch] = {}
    for name, lc in fitting(ctx, out).items():
        grids = dims_values(ctx, lc.grid or ctx.grid)
        if grids is not None and all(g[0] * b[0] < 2**31 for g, b in zip(grids, blocks, strict=True)):
            fits[name] = lc
    return fits


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why the remap does not apply to the candidate (None when it does): the "why not" hint's words."""
    got = analysis(ctx)
    if isinstance(got, NotLegal):
        return got
    if not group_launches(ctx, got.plan):
        return NotLegal(f"no launch fits: the block is not 1-D with an x size a multiple of {LANES}, or the "
                        "multiplied grid exceeds the limit")
    return None


def _indent_at(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    line = data[start:offset].decode("utf-8")
    return line[:len(line) - len(line.lstrip())]


def rewrite_items(k: Kernel, p: ItemPlan, group: str) -> str:
    """The new body (braces included) of ``k`` for the plan ``p`` with ``group`` threads per item (``"32"``:
    a warp, combines by shuffles; ``"blockDim.x"``: a block, no accumulators)."""
    data = k.data
    lane = f"{PREFIX}lane"
    lane_value = f"threadIdx.x % {LANES}" if group == str(LANES) else "threadIdx.x"

    def text(r: tuple[int, int]) -> str:
        return data[r[0]:r[1]].decode("utf-8")

    edits: list[tuple[int, int, str]] = [(p.index_value[0], p.index_value[1], f"({text(p.index_value)}) / {group}")]
    if p.step is not None:
        edits.append((p.step[0], p.step[1], f"({text(p.step)}) / {group}"))
    if p.form == "top":
        edits.append((p.lane_at, p.lane_at, f"\n{_indent_at(data, p.index_value[0])}const int {lane} = {lane_value};"))
    else:
        edits.append((p.lane_at, p.lane_at, f"const int {lane} = {lane_value};\n{_indent_at(data, p.lane_at)}"))
    for n, lp in enumerate(p.loops):
        ind = _indent_at(data, lp.start)
        sums = [r for r in lp.reductions if r.combine == "sum"]
        init = f"{PREFIX}init{n}_"
        pre = "".join(f"const {r.type} {init}{r.ident} = {r.name};\n{ind}{r.name} = {zero_of(r.type)};\n{ind}"
                      for r in sums)
        first = text(lp.init_value)
        edits += [(lp.start, lp.start, pre),
                  (lp.init_value[0], lp.init_value[1], lane if first.strip() == "0" else f"({first}) + {lane}"),
                  (lp.update[0], lp.update[1], f"{lp.var} += {group}")]
        if lp.reductions:
            combine = [f"{r.name} = {r.name} + __shfl_xor_sync({_FULL}, {r.name}, {PREFIX}o);" if r.combine == "sum"
                       else f"{r.name} = {r.combine}({r.name}, __shfl_xor_sync({_FULL}, {r.name}, {PREFIX}o));"
                       for r in lp.reductions]
            post = [f"for (int {PREFIX}o = {LANES // 2}; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
                    *(f"    {c}" for c in combine), "}", *(f"{r.name} = {init}{r.ident} + {r.name};" for r in sums)]
            edits.append((lp.end, lp.end, "".join(f"\n{ind}{ln}" for ln in post)))
    # a store before the loops (a masked item's ``out[i] = -INFINITY;``): every lane computes the same, one makes it
    edits += [(at, at, f"if ({lane} == 0) ") for at in p.pre_stores]
    if p.tail is not None:
        ind = _indent_at(data, p.tail[0])
        moved = text(p.tail).replace("\n", "\n    ")
        edits.append((p.tail[0], p.tail[1], f"if ({lane} == 0) {{\n{ind}    {moved}\n{ind}}}"))
    b0 = k.body.start_byte
    return splice(data[b0:k.body.end_byte], [(s - b0, e - b0, t) for s, e, t in edits])


class ElementRemap(StructuralRule[_Shape]):
    family = "element_remap"
    structural = True
    motivated_by = ("uncoalesced_global", "coalescing", "memory_bound", "low_occupancy_work")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return analysed(analysis(ctx))

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        return group_launches(ctx, shape.plan)

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        return rewrite_items(shape.kernel, shape.plan, str(LANES) if param == "warp" else "blockDim.x")

    def rationale(self, shape: _Shape, param: str) -> str:
        p = shape.plan
        who = "a warp" if param == "warp" else "a block"
        combined = f"; {', '.join(r.name for r in p.reductions)} combined with warp shuffles" if p.reductions else ""
        return (f"{who} per `{p.index}` instead of one thread: its threads split the item's loop(s) over "
                f"{', '.join(f'`{lp.var}`' for lp in p.loops)}, so `{p.strided}` is accessed contiguously "
                f"(coalesced){combined}")


register(ElementRemap())
