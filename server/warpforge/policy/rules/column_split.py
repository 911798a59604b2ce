"""column_split: split a thread's serial loop over a strided dimension among the threads of a block column.

Why it helps: a column reduction written "one thread per column" (bias gradients, column sums, maxima
or norms of a row-major matrix: ``for (r = 0; r < B; r++) acc += x[r * C + col]``) reads coalesced across
the threads of a warp, but each thread walks all B rows serially, and there are only C threads: for a
768-wide bias over 32k rows, 768 threads on a GPU that wants over 100k in flight, each waiting on one load
at a time. Giving each column a column of the block (``threadIdx.y`` = 0..R-1 take rows r, r + R, ...)
multiplies the loads in flight by R while warps still read whole 32-byte sectors (8 or 32 consecutive
columns per row), and a shared-memory tree combines the R partials.

What the analysis requires (the loop analysis of ``warp_per_row``, on the canonical form): a 1-D thread
index ``col = blockIdx.x * blockDim.x + threadIdx.x`` with a guard (early exit or guarded body), loops
whose loop-carried values are reductions (sums, min/max — also written as compare-and-assign), no element
written inside any loop, per-column scalar stores at the top level, and at least one read in a loop whose
index is ``E + col`` with the loop variable in E (strided in the loop, contiguous across threads: the
access a warp-per-row mapping would make uncoalesced) and none contiguous in the loop variable.

The rewrite keeps the user's index expression (it still names the right column with the new
``blockDim.x``). Threads of a column past the guard's bound cannot leave early any more (they take part in
the barriers): they compute on column 0, which exists whenever the bound is positive (the whole block
leaves when it is not, uniformly), and store nothing. Loop ``j`` starts at ``start + threadIdx.y`` with
stride ``blockDim.y``; each reduction's partials meet in shared memory (a tree over ``threadIdx.y``, then
every thread reads the total, so code after the loop sees the value the serial loop left). One thread
(``threadIdx.y == 0``) of each active column stores the per-column scalars. Floating-point sums are
reassociated (tolerances apply); min/max are exact.

Memory-level parallelism: splitting rows among R threads is not enough by itself. The split loop's stride
is ``blockDim.y``, unknown to the compiler, so it is not unrolled and each thread waits on one load at a time
(one accumulator, one load in flight: 32x32 blocks over a 4096-wide bias keep ~4 KiB in flight per SM and
read at ~40 % of copy bandwidth). Each thread therefore keeps ``ACCUMULATORS`` independent partials of
every reduction and walks rows ``j, j + R, j + 2R, j + 3R`` in one iteration, the copies of the body
independent of each other, so their loads are issued together; a remainder loop takes the last rows and
the partials are combined (sums reassociated, min/max exact) before the block's shared-memory tree.

Launch: block ``(W, R)`` with W ∈ {8, 32} columns (8 floats = one 32-byte sector per row) and R rows in
flight, grid ``cdiv(COLS, W)`` (times the original grid's y/z when the kernel reads them), COLS the
guard's bound in spec terms (or the original launch's extent). R is derived from the spec's sizes and the
GPU: the smallest R whose resident threads, each with ``ACCUMULATORS`` loads in flight, cover the bytes a
memory-bound kernel needs in flight per SM (Little's law), capped by the block size and by the rows (each
accumulator gets at least one row); the largest R for the width is proposed too (more threads, more partials
to combine), and verification decides. Variant names read ``w{W}r{R}x{accumulators}``.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...cuda.tree import node_text
from . import register
from ._structural import (
    MINMAX_FUNCS,
    envs,
    flush,
    for_parts,
    indent,
    is_1d,
    launch_ok,
    scalar_value_expr,
    single_decl,
    upper_bound,
)
from ._structural_rule import Launch, StructuralRule
from ._util import eval_expr
from ._why import Stage, declined
from .base import RuleContext
from .warp_per_row import _ids, _Loop, _rename_body, _Shape, _varying, analysis, strided_in_loop

PREFIX = "wfc_"
#: columns per block: a warp reads one 128-byte row segment (32) or four 32-byte sectors of 4 rows (8)
WIDTHS = (32, 8)
#: independent partials per reduction and thread: the loads a thread has in flight in the split loop
ACCUMULATORS = 4
#: threads an SM keeps resident (sm_80 and sm_90)
RESIDENT_PER_SM = 2048
#: bytes a streaming kernel keeps in flight per SM to read at full DRAM bandwidth: ~3 TB/s times a loaded
#: latency of ~0.6 us, shared by 132 SMs, is ~14 KiB. The H100 corpus run agrees: one 4-byte load per thread
#: in flight read at 41 % of copy bandwidth with 1024 threads per SM (4 KiB, bias_grad_colsum) and 67 % with
#: 2048 (8 KiB, col_max_2d); the expert's four per thread at 1024 threads (16 KiB) at 96 %
INFLIGHT_PER_SM = 14 * 1024
_PARAM = re.compile(r"w(\d+)r(\d+)x(\d+)")


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = analysis(ctx)
    if got is None:
        return declined("the kernel is not one thread per column with a guarded serial loop that reduces into "
                        "registers (the per-row analysis it shares with warp_per_row found no such loop)", None,
                        Stage.SCOPE)
    a, shape = got
    body, data = a.body, a.data
    if any(n.startswith(PREFIX) for n in _ids(body, data)):
        return declined("the kernel is already split by columns", None, Stage.SCOPE)
    if a.written_roots:
        return declined(f"the loop writes through `{sorted(a.written_roots)[0]}` inside the loop: only register "
                        "partials can be split over threads and combined", shape.loops[0].node if shape.loops
                        else None, Stage.LEGALITY)
    if shape.row.value is None or "blockDim.x" not in node_text(shape.row.value, data) or shape.bound is None:
        return declined(f"the column index `{shape.row.name}` is not `blockIdx.x * blockDim.x + threadIdx.x` "
                        "with a guard", None, Stage.SHAPE)
    # the guard's other terms decide for the whole block: they may use only values the same for the block
    if any(_ids(t, data) & _per_thread(shape, data) for t in shape.others):
        return declined("the guard has terms that differ between the threads of a block", None, Stage.LEGALITY)
    if not shape.loops or not all(r.kind == "sum" or r.kind in MINMAX_FUNCS
                                  for lp in shape.loops for r in lp.reductions.values()):
        lp0 = shape.loops[0].node if shape.loops else None
        return declined("the loop's result is not a sum, min or max of register partials (what a split over "
                        "threads can combine)", lp0, Stage.SHAPE)
    if not strided_in_loop(shape, data):
        return declined("the loop does not walk down a column (its accesses do not stride by a row per step), "
                        "so splitting it gains no coalescing", shape.loops[0].node, Stage.SHAPE)
    return shape, data


def _per_thread(shape: _Shape, data: bytes) -> set[str]:
    """Locals that may differ between the threads of a block: the column and whatever is computed from it
    (the rest, e.g. ``int b = blockIdx.y``, is uniform)."""
    out = {shape.row.name}
    for st in shape.prefix + shape.between:
        d = single_decl(st, data)
        if d is None:
            out |= {n for n in _ids(st, data)}
        elif d.value is None or _ids(d.value, data) & out or _varying(d.value, data):
            out.add(d.name)
    return out


class ColumnSplit(StructuralRule[_Shape]):
    family = "column_split"
    structural = True
    motivated_by = ("WF111", "idle_threads", "occupancy")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def _cols(self, ctx: RuleContext, shape: _Shape, data: bytes) -> str | None:
        if shape.bound is None:
            return None
        lim = scalar_value_expr(ctx, shape.bound.limit, data)
        if lim is not None:
            return f"({lim}) + 1" if shape.bound.inclusive else lim
        if not ((is_1d(ctx, ctx.grid) or shape.uses_yz) and is_1d(ctx, ctx.block)):
            return None
        return f"({ctx.grid[0]}) * ({ctx.block[0]})"

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        cols = self._cols(ctx, shape, data)
        if cols is None:
            return {}
        yz = tuple(ctx.grid[1:]) if shape.uses_yz else ()
        out: dict[str, Launch] = {}
        for w, r in _splits(ctx, shape, data, cols, yz):
            grid, block = (f"cdiv({cols}, {w})", *yz), (str(w), str(r))
            if launch_ok(ctx, grid, block):
                # no dynamic shared memory: the analysis takes no kernel with shared memory of its own, so
                # bytes the original launch passed (a block-per-item kernel's tree, lowered away by
                # ``block_items``) would only add to the split's static arrays
                out[f"w{w}r{r}x{ACCUMULATORS}"] = Launch(grid, block, "0")
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        return _generate(shape, data)

    def rationale(self, shape: _Shape, param: str) -> str:
        w, r, u = _param(param)
        accs = sorted({x.acc for lp in shape.loops for x in lp.reductions.values()})
        return (f"{r} threads per column split the serial loop (block {w}x{r}, coalesced {w}-wide rows), "
                f"{u} independent partials per thread keep {u} loads in flight, partials of "
                f"{', '.join(accs) or 'the loop'} combined in shared memory")


def _param(param: str) -> tuple[int, int, int]:
    m = _PARAM.fullmatch(param)
    assert m is not None, param
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _elem_bytes(shape: _Shape) -> int:
    """Bytes per element the split loops read, judged by their accumulators' type (the reads feed them)."""
    sizes = {"double": 8, "long": 8, "long long": 8, "unsigned long long": 8, "size_t": 8, "half": 2,
             "__half": 2, "__nv_bfloat16": 2}
    return min((sizes.get(r.type, 4) for lp in shape.loops for r in lp.reductions.values()), default=4)


def _rows(ctx: RuleContext, shape: _Shape, data: bytes, env: dict[str, float | int]) -> int | None:
    """The longest split loop's trip count at the spec size (None: not expressible in spec terms)."""
    most: int | None = None
    for lp in shape.loops:
        fp = for_parts(lp.node, data)
        b = upper_bound(fp.cond, data, lp.var) if fp is not None else None
        lim = scalar_value_expr(ctx, b.limit, data) if b is not None else None
        start = "0" if lp.start == "0" else scalar_value_expr(ctx, _start_node(lp, data), data)
        if b is None or lim is None or start is None:
            return None
        n = eval_expr(f"({lim}) - ({start})" + (" + 1" if b.inclusive else ""), env)
        if not isinstance(n, int):
            return None
        most = n if most is None else max(most, n)
    return most


def _start_node(lp: _Loop, data: bytes) -> Node:
    fp = for_parts(lp.node, data)
    assert fp is not None and fp.var.value is not None
    return fp.var.value


def _splits(ctx: RuleContext, shape: _Shape, data: bytes, cols: str,
            yz: tuple[str, ...]) -> list[tuple[int, int]]:
    """(W, R) pairs, most promising first: per width, the smallest power-of-two R whose resident threads,
    each with ``ACCUMULATORS`` loads of ``_elem_bytes`` in flight, cover ``INFLIGHT_PER_SM`` on every SM,
    then the largest R the block and the rows allow. Derived at the spec size; the launch is checked at
    every size by the caller."""
    es = envs(ctx)
    env = es[0] if es else None
    ncols = eval_expr(cols, env) if env is not None else None
    extent = 1
    for e in yz:
        v = eval_expr(e, env) if env is not None else None
        extent = extent * v if isinstance(v, int) and isinstance(extent, int) else 0
    rows = _rows(ctx, shape, data, env) if env is not None else None
    need = ctx.sm_count * INFLIGHT_PER_SM
    per_thread = ACCUMULATORS * _elem_bytes(shape)  # bytes a thread has in flight
    fits: list[tuple[int, int]] = []
    tops: list[tuple[int, int]] = []
    for w in WIDTHS:
        top = 1024 // w
        while rows is not None and top > 8 and top * ACCUMULATORS > rows:
            top //= 2  # every partial of every thread gets a row
        fit = top
        if isinstance(ncols, int) and ncols > 0 and extent > 0:
            r = 8
            while r < top:
                threads = -(-ncols // w) * w * r * extent
                if min(threads, ctx.sm_count * RESIDENT_PER_SM) * per_thread >= need:
                    break
                r *= 2
            fit = min(r, top)
        fits.append((w, fit))
        tops.append((w, top))
    return list(dict.fromkeys(fits + tops))


def _generate(shape: _Shape, data: bytes) -> str | None:
    row = shape.row
    if row.value is None or shape.bound is None:
        return None
    limit = node_text(shape.bound.limit, data)
    op = "<=" if shape.bound.inclusive else "<"
    raw = f"{PREFIX}i"
    out: list[str] = [flush(node_text(n, data), n, data) for n in shape.prefix]
    empty = f"({limit}) < 0" if shape.bound.inclusive else f"({limit}) <= 0"
    out.append(f"if ({empty}) {{\n    return;  // no column at all: the whole block leaves (uniform)\n}}")
    out.append(f"const {row.type} {raw} = {node_text(row.value, data)};")
    out.append(f"const bool {PREFIX}on = {raw} {op} ({limit});")
    out.append("// past the bound a thread still joins the barriers: it computes column 0 and stores nothing")
    out.append(f"{'const ' if row.const else ''}{row.type} {row.name} = {PREFIX}on ? {raw} : ({row.type})0;")
    out.extend(flush(node_text(n, data), n, data) for n in shape.between)
    for t in shape.others:  # the guard's terms that do not involve the column: the same for the whole block
        test = node_text(t, data) if shape.exit_form else f"!({node_text(t, data)})"
        out.append(f"if ({test}) {{\n    return;\n}}")
    decls: list[str] = []
    loops = {lp.node.id: (k, lp) for k, lp in enumerate(shape.loops)}
    for st in shape.rest:
        if st.id in shape.stores:
            out.append(f"if ({PREFIX}on && threadIdx.y == 0) {{\n    {node_text(st, data)}\n}}")
        elif st.id in loops:
            k, lp = loops[st.id]
            code = _loop_code(lp, k, data, decls)
            if code is None:
                return None
            out.extend(code)
        else:
            out.append(flush(node_text(st, data), st, data))
    return "{\n" + indent("\n".join(decls + out), "    ") + "\n}"


def _combine(kind: str, a: str, b: str) -> str:
    return f"{a} + {b}" if kind == "sum" else f"{kind}({a}, {b})"


def _loop_code(lp: _Loop, k: int, data: bytes, decls: list[str]) -> list[str] | None:
    fp = for_parts(lp.node, data)
    b = upper_bound(fp.cond, data, lp.var) if fp is not None else None
    if fp is None or b is None:
        return None
    t, body = fp.var.type, fp.body
    op, limit = ("<=" if b.inclusive else "<"), node_text(b.limit, data)
    reds = list(lp.reductions.values())
    parts = [{r.acc: f"{PREFIX}p{k}_{r.acc}{'' if u == 0 else f'_{u}'}" for r in reds} for u in range(ACCUMULATORS)]
    lines: list[str] = []
    for r in reds:
        init = "0" if r.kind == "sum" else r.acc  # min/max: the start value is idempotent, every partial takes it
        lines.append(f"{r.type} " + ", ".join(f"{m[r.acc]} = {init}" for m in parts) + ";")
    j, st = f"{PREFIX}j{k}", f"{PREFIX}st{k}"
    start = "threadIdx.y" if lp.start == "0" else f"({lp.start}) + threadIdx.y"

    def copy(u: int) -> str:
        at = j if u == 0 else f"{j} + {u} * {st}"
        text = flush(_rename_body(body, data, parts[u], {}), body, data)
        return f"{{\n    const {t} {lp.var} = {at};\n" + indent(text, "    ") + "\n}"

    lines += [
        f"const {t} {st} = ({t})blockDim.y;",
        f"{t} {j} = {start};",
        f"// {ACCUMULATORS} rows per iteration into independent partials: their loads are in flight together",
        f"for (; {j} + {ACCUMULATORS - 1} * {st} {op} {limit}; {j} += {ACCUMULATORS} * {st}) {{",
        *(indent(copy(u), "    ") for u in range(ACCUMULATORS)),
        "}",
        f"for (; {j} {op} {limit}; {j} += {st}) {copy(0)}",
    ]
    for r in reds:
        p = parts[0][r.acc]
        terms = [m[r.acc] for m in parts]
        while len(terms) > 1:  # a balanced tree over the partials
            terms = [f"({_combine(r.kind, terms[i], terms[i + 1])})" if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        lines.append(f"{p} = {terms[0]};")
    me = "threadIdx.y * blockDim.x + threadIdx.x"
    up = f"({PREFIX}s + threadIdx.y) * blockDim.x + threadIdx.x"
    for r in reds:
        p, sh = parts[0][r.acc], f"{PREFIX}red{k}_{r.acc}"
        decls.append(f"__shared__ {r.type} {sh}[1024];")
        lines += [
            f"{sh}[{me}] = {p};",
            "__syncthreads();",
            f"for (int {PREFIX}s = blockDim.y >> 1; {PREFIX}s > 0; {PREFIX}s >>= 1) {{",
            f"    if (threadIdx.y < {PREFIX}s) {{",
            f"        {sh}[{me}] = {_combine(r.kind, f'{sh}[{me}]', f'{sh}[{up}]')};",
            "    }",
            "    __syncthreads();",
            "}",
            f"{p} = {sh}[threadIdx.x];",
            "__syncthreads();  // the partials' shared memory is free again",
            f"{r.acc} = {r.acc} + {p};" if r.kind == "sum" else f"{r.acc} = {p};",
        ]
    return lines


register(ColumnSplit())
