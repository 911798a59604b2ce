"""column_remap: a thread per column walking its rows -> ``R`` threads per column (``blockDim.y``) splitting the walk.

Why: a bias gradient written the first way (``for (b) for (t) sum += dout[b*T*OC + t*OC + o]``, one thread
per output channel) reads coalesced, but only ``OC`` threads run, each a chain of ``B*T`` dependent loads: the
GPU is mostly idle (1.15x where the expert's split reduction reached 6.9x). With a block of ``X x R``
threads, the ``R`` threads of a column each walk every ``R``-th row of the loop the IR finds walking the rows
(``policy.ir.remap_columns.plan_columns``: nested loops too, the partials carried across the outer ones), the
loads stay coalesced along ``x``, and ``R`` times more are in flight; the partials meet in shared memory and
the first row of threads runs what followed the loop. An early exit becomes a flag (every thread reaches the
barrier; one past the bound computes column 0 and stores nothing; a non-positive bound leaves the whole block
first). ``column_split`` recognizes one text shape of this; this rule decides on the IR (nested walks, double
accumulators, typedefs and views the IR folds).

Variants ``x{X}r{R}`` (``SHAPES``; the innermost walking loop split, ``..._outer``: the outermost, where the
walk is nested): the block (X, R), the grid's x scaled so the same columns are covered (the original block
1-D, its x size a multiple of X). Sums are reassociated (the
verifier's tolerances apply).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.passes import Kernel, splice
from ..ir.remap import NotLegal, zero_of
from ..ir.remap_columns import ColumnPlan, StrideItems, Walk, plan_columns
from ..ir.summary import summarize
from . import register
from ._structural import dims_values
from ._structural_rule import Launch, StructuralRule, analysed, fitting, ir_kernel
from .base import RuleContext

PREFIX = "wfc_"
#: (columns, rows of threads) per block: 32 columns read a 128-byte line per row; 8 columns read a 32-byte
#: sector per row (4 rows per warp instruction, still whole sectors) and give 4x more blocks for few columns
SHAPES = ((32, 8), (32, 32), (8, 32), (8, 128))



@dataclass(frozen=True)
class _Shape:
    kernel: Kernel
    plan: ColumnPlan


def analysis(ctx: RuleContext) -> _Shape | NotLegal:
    """The candidate's kernel and its column plan, or why there is none."""
    got = ir_kernel(ctx, (PREFIX, "wfl_"), "already remapped")
    if isinstance(got, NotLegal):
        return got
    k, targs = got
    plan = plan_columns(k, summarize(k, targs), targs)
    return plan if isinstance(plan, NotLegal) else _Shape(k, plan)


def column_launches(ctx: RuleContext, plan: ColumnPlan) -> dict[str, Launch]:
    """``x32r{R}``: the innermost walk split over R rows of threads; ``..._outer``: the outermost (when nested)."""
    blocks = dims_values(ctx, ctx.block)
    if blocks is None or any(b[1] != 1 or b[2] != 1 for b in blocks):
        return {}
    names = [""] + (["_outer"] if len(plan.walks) > 1 else [])
    out: dict[str, Launch] = {}
    for n in names:
        for x, r in SHAPES:
            if all(b[0] % x == 0 for b in blocks):
                grid = (f"({ctx.grid[0]}) * (({ctx.block[0]}) / {x})", *ctx.grid[1:])
                out[f"x{x}r{r}{n}"] = Launch(grid=grid, block=(str(x), str(r)))
    return fitting(ctx, out)


def _walk_of(plan: ColumnPlan, param: str) -> Walk:
    return plan.walks[0] if param.endswith("_outer") else plan.walks[-1]


def _shape_of(param: str) -> tuple[int, int]:
    x, r = param[1:].split("_", 1)[0].split("r")
    return int(x), int(r)


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why the remap does not apply (None when it does): the "why not" hint's words."""
    got = analysis(ctx)
    if isinstance(got, NotLegal):
        return got
    if not column_launches(ctx, got.plan):
        return NotLegal("the block is not 1-D with an x size a multiple of 8")
    return None


def _indent_at(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    line = data[start:offset].decode("utf-8")
    return line[:len(line) - len(line.lstrip())]


def rewrite(k: Kernel, p: ColumnPlan, w: Walk, cols: int, rows: int) -> str:
    """The new body (braces included) of ``k`` for the plan ``p``, the walk ``w`` split over ``rows`` threads."""
    data = k.data

    def text(r: tuple[int, int]) -> str:
        return data[r[0]:r[1]].decode("utf-8")

    ind = _indent_at(data, p.top_start)
    off = f"{PREFIX}off"
    edits: list[tuple[int, int, str]] = []
    if p.const is not None:
        edits.append((p.const[0], p.const[1], ""))
    if p.exit is not None:
        edits.append((p.exit[0], p.exit[1],
                      f"if (({p.bound}) <= 0) return;  // no item at all: the whole block leaves (uniform)\n"
                      f"{ind}const bool {off} = ({p.exit_cond});\n"
                      f"{ind}if ({off}) {p.index} = 0;  // past the bound: column 0, no store, reaches the barrier"
                      ))
    if p.stride is not None:
        edits += _stride_edits(data, p.stride, p.index, _indent_at(data, p.top_start))
    sums = [r for r in p.reductions if r.combine == "sum"]
    pre = "".join(f"if (threadIdx.y != 0) {r.name} = {zero_of(r.type)};\n{ind}" for r in sums)
    first = text(w.init_value)
    edits += [(p.top_start, p.top_start, pre),
              (w.init_value[0], w.init_value[1], "threadIdx.y" if first.strip() == "0" else f"({first}) + threadIdx.y"),
              (w.update[0], w.update[1], f"{w.var} += blockDim.y")]
    lines = ["{"]
    for r in p.reductions:
        arr = f"{PREFIX}{r.ident}"
        lines += [f"    __shared__ {r.type} {arr}[{rows}][{cols}];", f"    {arr}[threadIdx.y][threadIdx.x] = {r.name};"]
    lines += ["    __syncthreads();", "    if (threadIdx.y == 0) {",
              f"        for (int {PREFIX}r = 1; {PREFIX}r < {rows}; {PREFIX}r++) {{"]
    for r in p.reductions:
        part = f"{PREFIX}{r.ident}[{PREFIX}r][threadIdx.x]"
        lines.append(f"            {r.name} = {r.name} + {part};" if r.combine == "sum"
                     else f"            {r.name} = {r.combine}({r.name}, {part});")
    lines += ["        }", "    }", "}"]
    edits.append((p.top_end, p.top_end, "".join(f"\n{ind}{ln}" for ln in lines)))
    if p.tail is not None:
        who = f"!{off} && threadIdx.y == 0" if p.exit is not None or p.stride is not None else "threadIdx.y == 0"
        moved = text(p.tail).replace("\n", "\n    ")
        edits.append((p.tail[0], p.tail[1], f"if ({who}) {{\n{ind}    {moved}\n{ind}}}"))
    b0 = k.body.start_byte
    return splice(data[b0:k.body.end_byte], [(s - b0, e - b0, t) for s, e, t in edits])


def _stride_edits(data: bytes, g: StrideItems, index: str, ind: str) -> list[tuple[int, int, str]]:
    """A grid-stride loop over the items made uniform over the block (see ``ir.remap_columns.StrideItems``)."""
    new, off = f"{PREFIX}i", f"{PREFIX}off"
    close = _indent_at(data, g.body_close)
    step_in = ind[len(close):] if ind.startswith(close) else f"\n{ind}"
    return [(g.name[0], g.name[1], new),
            (g.cond[0], g.cond[1], f"{new} - ({g.type})threadIdx.x < ({g.bound})"),
            (g.update_var[0], g.update_var[1], new),
            (g.body_open, g.body_open, f"\n{ind}const bool {off} = !({new} < ({g.bound}));  // past the bound: "
                                       f"column 0, no store, reaches the barriers\n{ind}{g.type} {index} = {off} ? "
                                       f"({g.type})0 : {new};"),
            (g.body_close, g.body_close, f"{step_in}__syncthreads();  // the partials are read before the next "
                                         f"pass writes them\n{close}")]


class ColumnRemap(StructuralRule[_Shape]):
    family = "column_remap"
    structural = True
    motivated_by = ("low_occupancy_work", "memory_bound", "latency_bound")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return analysed(analysis(ctx))

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        return column_launches(ctx, shape.plan)

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        return rewrite(shape.kernel, shape.plan, _walk_of(shape.plan, param), *_shape_of(param))

    def rationale(self, shape: _Shape, param: str) -> str:
        p = shape.plan
        w = _walk_of(p, param)
        rows = _shape_of(param)[1]
        return (f"{rows} threads per `{p.index}` instead of one: they split the walk over `{w.var}` "
                f"(`{w.strided}` stays coalesced across `{p.index}`), {rows}x more loads in flight, partials of "
                f"{', '.join(r.name for r in p.reductions)} combined in shared memory")


register(ColumnRemap())
