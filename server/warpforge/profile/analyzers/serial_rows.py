"""WF111: one thread per row — each thread walks a whole row serially (the naive softmax/layernorm shape).

The pattern: ``row = blockIdx.x * blockDim.x + threadIdx.x`` and then ``for (j = 0; j < C; j++)`` over
``x[row * C + j]``. It costs twice:
- *coalescing*: at every step the 32 lanes of a warp read 32 different rows, ``C`` elements apart, so each
  request touches 32 sectors for 128 useful bytes (WF103 reports the individual accesses);
- *parallelism*: only ``rows`` threads exist. 4096 rows are 128 warps — less than one warp per SM
  scheduler of the GPU (SMs × 4: 528 on an H100; the architecture's, or "your GPU" when none is known) — and
  each of them does ``C`` dependent steps.

One warp per row (lanes stride the row, ``__shfl_xor_sync`` reductions for max/sum) or one block per row
makes every access coalesced and multiplies the thread count by 32 (or the block size). The action is
``warp_per_row``.

Precision: the finding needs (1) a loop with a variable that starts and bounds the same for every thread
(``j = 0; j < C; j++``), (2) an access inside it whose index advances by exactly one row per lane and one
element per iteration (``threadIdx.x`` coefficient equal to the loop bound — see ``lanes.row_walk``),
(3) a one-dimensional thread layout: when accesses also depend on ``threadIdx.y`` (a naive GEMM walking
rows of A), the fix is tiling, not a warp per row, so WF103 alone speaks.
A row length known to be below 32 (a warp per row would idle lanes) is not reported. No gain is
estimated: how much faster depends on whether the kernel then becomes bandwidth- or latency-bound, which
only a measurement says.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...cuda.text import Range, Span
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import ONE, Loop, Threads, plural, row_walk, text_of, threads
from . import analyzer

define("WF111", "one thread per row: serial row walk", Severity.INFO, "source", "warp_per_row")

MIN_ROW = 32


def _rows_bound(th: Threads) -> tuple[str, int | None] | None:
    """The bound the row index is checked against (``row < rows`` / ``if (row >= rows) return``)."""
    ctx = th.ctx
    body = ctx.body
    if body is None:
        return None
    for n in th.nodes("binary_expression"):
        op = n.child_by_field_name("operator")
        if op is None or op.type not in ("<", "<=", ">", ">="):
            continue
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if left is None or right is None:
            continue
        lv, rv = th.value(left), th.value(right)
        for idx, bound, bnode in ((lv, rv, right), (rv, lv, left)):
            if idx.exact and idx.tx == ONE and idx.ty.is_zero and bound.thread_free and not bound.rest.is_zero \
                    and "blockIdx.x" in idx.rest.atoms():
                return text_of(ctx, bnode), th.number(bound.rest)
    return None


@analyzer("serial-rows", ("WF111",))
def serial_rows(ctx: KernelContext) -> Iterator[Finding]:
    th = threads(ctx)
    if th.too_big:
        return
    accesses = th.global_accesses()
    if any(a.index.exact and not a.index.ty.is_zero for a in accesses):
        return  # a 2D thread layout (a GEMM's rows and columns): tiling, not a warp per row, is the fix
    loops: dict[int, Loop] = {}
    buffers: list[str] = []
    kinds: set[str] = set()
    for a in accesses:
        if not a.index.exact:
            continue
        lp = row_walk(th, a)
        if lp is None:
            continue
        loops.setdefault(lp.node.start_byte, lp)
        if a.param not in buffers:
            buffers.append(a.param)
        kinds.update(({"read"} if a.load else set()) | ({"write"} if a.store else set()))
    if not loops:
        return
    ordered = [loops[k] for k in sorted(loops)]
    first = ordered[0]
    assert first.bound is not None and first.bound_val is not None
    row_text = text_of(ctx, first.bound)
    row_len = th.number(first.bound_val.rest)
    if row_len is not None and row_len < MIN_ROW:
        return
    rows = _rows_bound(th)
    r = ctx.resolved
    threads_launched = blocks = None
    if r is not None:
        blocks = r.grid[0] * r.grid[1] * r.grid[2]
        threads_launched = blocks * r.threads
    length = f"`{row_text}`" + (f" = {row_len}" if row_len is not None and row_text != str(row_len) else "")
    names = ", ".join(f"`{b}`" for b in buffers)
    parallel = more = ""
    # below SMs x 4 warps the GPU cannot even issue from every warp scheduler
    schedulers = ctx.warp_schedulers()
    if threads_launched is not None and blocks is not None and threads_launched // 32 < schedulers:
        parallel = (f", and only {threads_launched} threads ({threads_launched // 32} warps in "
                    f"{plural(blocks, 'block')}) run — fewer warps than {ctx.gpu()} has schedulers "
                    f"({'about ' if ctx.arch_assumed else ''}{schedulers})")
        more = " and runs 32× as many threads"
    verb = "read and write" if kinds == {"read", "write"} else "write" if kinds == {"write"} else "read"
    reduces = any(_reduces(th, lp) for lp in ordered)
    how = ", with shuffle reductions," if reduces else ""
    message = (
        f"each thread walks a whole row of {names} serially ({plural(len(ordered), 'loop')} over "
        f"`{first.var} < {row_text}`, row length {length}): the 32 lanes of a warp {verb} 32 different rows"
        f"{parallel}; one warp (or block) per row{how} coalesces every access{more}"
    )
    evidence: dict[str, object] = {
        "row_length": row_text,
        "row_length_value": row_len,
        "loops": [ctx.node_line(lp.node) for lp in ordered],
        "buffers": buffers,
        "reduction": reduces,
    }
    if rows is not None:
        evidence["rows"], evidence["rows_value"] = rows
    if threads_launched is not None:
        evidence["threads_launched"] = threads_launched
        evidence["blocks"] = blocks
    related = tuple((_header(ctx, lp.node), f"also walks the row (`{lp.var} < {text_of(ctx, lp.bound)}`)")
                    for lp in ordered[1:] if lp.bound is not None)
    yield make("WF111", ctx.file, _header(ctx, first.node), message, kernel=ctx.kernel.name,
               evidence=evidence, related=related)


def _reduces(th: Threads, lp: Loop) -> bool:
    """Whether the loop accumulates into a scalar (``s += x[j]``, ``m = fmaxf(m, x[j])``): a row reduction,
    which a warp per row turns into a shuffle reduction."""
    body = lp.node.child_by_field_name("body")
    if body is None:
        return False
    for n in th.within(body, "assignment_expression"):
        left = n.child_by_field_name("left")
        op = n.child_by_field_name("operator")
        right = n.child_by_field_name("right")
        if left is None or op is None or right is None or left.type != "identifier":
            continue
        loc = th.locals.get(th.name(left))
        if loc is None or loc.pointer or loc.array_dims:
            continue
        if op.type != "=" or th.mentions(right, loc.name):
            return True
    return False


def _header(ctx: KernelContext, for_node: Node) -> Range:
    """The part of a ``for`` statement to underline: up to its closing parenthesis, not the body."""
    body = for_node.child_by_field_name("body")
    end = for_node.end_byte
    for c in for_node.children:
        if c.type == ")" and (body is None or c.end_byte <= body.start_byte):
            end = c.end_byte
    return ctx.src.range(Span(ctx.base + for_node.start_byte, ctx.base + end))
