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

Launch: block ``(W, R)`` with W ∈ {8, 32} columns (8 floats = one 32-byte sector per row) and R rows in
flight, grid ``cdiv(COLS, W)``, COLS the guard's bound in spec terms (or the original launch's extent).
"""

from __future__ import annotations

from ...cuda.tree import node_text
from . import register
from ._structural import (
    MINMAX_FUNCS,
    flush,
    for_parts,
    indent,
    is_1d,
    launch_ok,
    scalar_value_expr,
    single_decl,
)
from ._structural_rule import Launch, StructuralRule
from .base import RuleContext
from .warp_per_row import _ids, _Loop, _rename_body, _Shape, _varying, analysis, strided_in_loop

PREFIX = "wfc_"
#: param -> (columns per block, rows in flight per column)
VARIANTS = {"w32r8": (32, 8), "w8r32": (8, 32), "w32r32": (32, 32), "w8r128": (8, 128)}


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = analysis(ctx)
    if got is None:
        return None
    a, shape = got
    body, data = a.body, a.data
    if any(n.startswith(PREFIX) for n in _ids(body, data)) or a.written_roots:
        return None
    if shape.row.value is None or "blockDim.x" not in node_text(shape.row.value, data) or shape.bound is None:
        return None
    # the guard's other terms decide for the whole block: they may use only values the same for the block
    if any(_ids(t, data) & _per_thread(shape, data) for t in shape.others):
        return None
    if not shape.loops or not all(r.kind == "sum" or r.kind in MINMAX_FUNCS
                                  for lp in shape.loops for r in lp.reductions.values()):
        return None
    if not strided_in_loop(shape, data):
        return None
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
        out: dict[str, Launch] = {}
        for param, (w, r) in VARIANTS.items():
            yz = tuple(ctx.grid[1:]) if shape.uses_yz else ()
            grid, block = (f"cdiv({cols}, {w})", *yz), (str(w), str(r))
            if launch_ok(ctx, grid, block):
                out[param] = Launch(grid, block)
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        return _generate(shape, data)

    def rationale(self, shape: _Shape, param: str) -> str:
        w, r = VARIANTS[param]
        accs = sorted({x.acc for lp in shape.loops for x in lp.reductions.values()})
        return (f"{r} threads per column split the serial loop (block {w}x{r}, coalesced {w}-wide rows), "
                f"partials of {', '.join(accs) or 'the loop'} combined in shared memory")


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
    if fp is None:
        return None
    d, cond, body = fp.var, fp.cond, fp.body
    parts = {r.acc: f"{PREFIX}p{k}_{r.acc}" for r in lp.reductions.values()}
    lines: list[str] = []
    for r in lp.reductions.values():
        lines.append(f"{r.type} {parts[r.acc]} = {'0' if r.kind == 'sum' else r.acc};")
    start = "threadIdx.y" if lp.start == "0" else f"({lp.start}) + threadIdx.y"
    text = flush(_rename_body(body, data, parts, {}), body, data)
    lines.append(f"for ({d.type} {lp.var} = {start}; {node_text(cond, data)}; {lp.var} += blockDim.y) {text}")
    me = "threadIdx.y * blockDim.x + threadIdx.x"
    up = f"({PREFIX}s + threadIdx.y) * blockDim.x + threadIdx.x"
    for r in lp.reductions.values():
        p, sh = parts[r.acc], f"{PREFIX}red{k}_{r.acc}"
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
