"""warp_per_row's code generation: the new body for a recognized row shape.

Why a module of its own: the recognizer decides *whether* the row may be split over lanes; this module only
writes *how* (the row index as the warp's, each loop strided by 32 or the block, the row caches, the prefix
sums), so a change to the emitted code cannot loosen the legality checks. Combining partials is in
``combine``, vector loads and stores in ``vector``.
"""

from __future__ import annotations

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    MINMAX_FUNCS,
    condition_of,
    flush,
    for_parts,
    indent,
    statements,
    upper_bound,
)
from .combine import _arg_combine, _online_combine, _simple_combine
from .reading import _rename_body, _rename_ids
from .shape import _FULL, PREFIX, _Loop, _Shape
from .vector import _vector_loop, _VKey


def _cache_code(shape: _Shape, data: bytes, block: bool, at: int) -> list[str]:
    """The row caches whose first reader is statement ``at``: a pointer into the dynamic shared memory
    (this warp's rows, for a warp per row) and the fill, then a barrier (a later loop may start elsewhere,
    ``j = 1 + lane``). The fill moves 16-byte vectors when the row's address is aligned (the regions are:
    16-byte padded from an aligned base), the elements past the last whole vector (all, if not) one by one."""
    lines: list[str] = []
    lim = shape.cache[0].limit_node
    pad = [f"(((size_t)({node_text(lim, data)}) * sizeof({c.type}) + 15) & ~(size_t)15)" for c in shape.cache]
    base = f"{PREFIX}smem" if block else f"{PREFIX}smem + (threadIdx.x >> 5) * ({' + '.join(pad)})"
    for k, c in enumerate(shape.cache):
        if c.first != at:
            continue
        assert c.witness is not None
        off = " + ".join(pad[:k]) or "0"
        k_var = f"{PREFIX}k"
        start, stride = ("threadIdx.x", "blockDim.x") if block else (f"{PREFIX}lane", "32")
        lines.append(f"{c.type}* {PREFIX}c{k} = reinterpret_cast<{c.type}*>({base} + {off});")
        lines.append(f"{c.var_type} {PREFIX}fill{k} = 0;  // elements filled by whole vectors")
        if 16 % c.size == 0:
            w = 16 // c.size
            at0 = f"&{_rename_ids(c.witness, data, {c.var: '0'})}"
            src = f"&{_rename_ids(c.witness, data, {c.var: f'({c.var_type})({w} * {k_var})'})}"
            lines.append(f"if ((reinterpret_cast<size_t>({at0}) & 15) == 0) {{\n"
                         f"    {PREFIX}fill{k} = ({node_text(lim, data)}) / {w} * {w};\n"
                         f"    for ({c.var_type} {k_var} = {start}; {k_var} < {PREFIX}fill{k} / {w}; "
                         f"{k_var} += {stride}) "
                         f"{{\n        reinterpret_cast<uint4*>({PREFIX}c{k})[{k_var}] = "
                         f"*reinterpret_cast<const uint4*>({src});\n    }}\n}}")
        lines.append(f"for ({c.var_type} {k_var} = {PREFIX}fill{k} + {start}; {k_var} < {node_text(lim, data)}; "
                     f"{k_var} += {stride}) "
                     f"{{\n    {PREFIX}c{k}[{k_var}] = {_rename_ids(c.witness, data, {c.var: k_var})};\n}}")
        lines.append("__syncthreads();" if block else "__syncwarp();")
    return lines


def _generate(shape: _Shape, data: bytes, *, block: bool, cached: bool = False,
              vector: tuple[dict[int, list[_VKey]], int] | None = None) -> str:
    row = shape.row
    lane = f"{PREFIX}lane"
    out: list[str] = []
    decls: list[str] = []
    subs: dict[int, str] = {}
    if cached:
        decls.append(f"extern __shared__ __align__(16) unsigned char {PREFIX}smem[];")
        for k, c in enumerate(shape.cache):
            subs.update({sid: f"{PREFIX}c{k}[{var}]" for sid, var in c.subs.items()})
    firsts = {c.first for c in shape.cache} if cached else set()
    out.extend(flush(node_text(n, data), n, data) for n in shape.prefix)
    out.append(f"const int {lane} = threadIdx.x & 31;")
    if block:
        out.append(f"const int {PREFIX}warp = threadIdx.x >> 5;")
        out.append(f"const int {PREFIX}nwarps = blockDim.x >> 5;")
        out.append(f"{'const ' if row.const else ''}{row.type} {row.name} = blockIdx.x;")
    else:
        assert row.value is not None
        out.append(f"{'const ' if row.const else ''}{row.type} {row.name} = ({node_text(row.value, data)}) / 32;")
    out.extend(flush(node_text(n, data), n, data) for n in shape.between)
    loops = {lp.node.id: (n, lp) for n, lp in enumerate(shape.loops)}
    one = "threadIdx.x == 0" if block else f"{lane} == 0"
    deferred = _deferred(shape, data)
    held = {acc for accs in deferred.values() for _, accs2 in accs for acc in accs2}

    def emit(st: Node) -> list[str]:
        if st.id in shape.stores:
            return [f"if ({one}) {{\n    {node_text(st, data)}\n}}"]
        if st.id in loops:
            n, lp = loops[st.id]
            fill = _cache_code(shape, data, block, st.id) if st.id in firsts else []
            vec = (vector[0][n], vector[1]) if vector is not None and n in vector[0] else None
            return [*fill, *_loop_code(lp, n, data, block, decls, held, subs, vec)]
        if st.id in shape.outer:
            body = st.child_by_field_name("body")
            assert body is not None
            head = data[st.start_byte : body.start_byte].decode("utf-8", errors="replace").rstrip()
            inner = "\n".join(line for s2 in statements(body) for line in emit(s2))
            before: list[str] = []
            after: list[str] = []
            for n, accs in deferred.get(st.id, []):
                lp = shape.loops[n]
                for acc in sorted(accs):
                    r = lp.reductions[acc]
                    p = f"{PREFIX}p{n}_{acc}"
                    before.append(f"{r.type} {p} = {'0' if r.kind == 'sum' else acc};"
                                  "  // this lane's partial over every iteration of the loop below")
                    after.extend(_simple_combine(r, p, n, block, decls))
            if block and after:
                after.append("__syncthreads();  // the partials' shared memory may be reused")
            return [*before, f"{head} {{\n{indent(inner, '    ')}\n}}", *after]
        return [flush(node_text(st, data), st, data)]

    inner = "\n".join(line for st in shape.rest for line in emit(st))
    if shape.exit_form:
        out.append(flush(node_text(shape.guard, data), shape.guard, data))
        out.append(inner)
    else:
        cond = condition_of(shape.guard)
        assert cond is not None
        out.append(f"if ({node_text(cond, data)}) {{\n{indent(inner, '    ')}\n}}")
    code = "\n".join(decls + out)
    return "{\n" + indent(code, "    ") + "\n}"


def _scan_code(lp: _Loop, n: int, data: bytes) -> list[str]:
    """A prefix sum by a warp: the row in chunks of 32, each lane's increment scanned with ``__shfl_up_sync``
    and added to the carry from the chunks before (the last lane's value, broadcast)."""
    fp = for_parts(lp.node, data)
    assert fp is not None and lp.scan_inc is not None
    d, cond, body = fp.var, fp.cond, fp.body
    b = upper_bound(cond, data, lp.var)
    assert b is not None
    op = "<=" if b.inclusive else "<"
    limit = node_text(b.limit, data)
    t, lane = lp.scan_type, f"{PREFIX}lane"
    carry, inc, mine, jb = (f"{PREFIX}{x}{n}" for x in ("c", "inc", "s", "jb"))
    rest = "\n".join(flush(_rename_ids(x, data, {lp.scan: mine}), x, data)
                     for x in statements(body) if x.id != (lp.scan_head.id if lp.scan_head else -1))
    return [
        f"{t} {carry} = {lp.scan};  // the running value before this row's loop",
        f"for ({d.type} {jb} = {lp.start}; {jb} {op} {limit}; {jb} += 32) {{",
        f"    {d.type} {lp.var} = {jb} + {lane};",
        f"    {t} {inc} = 0;",
        f"    if ({lp.var} {op} {limit}) {{",
        f"        {inc} = {node_text(lp.scan_inc, data)};",
        "    }",
        f"    for (int {PREFIX}o = 1; {PREFIX}o < 32; {PREFIX}o <<= 1) {{",
        f"        {t} {PREFIX}up = __shfl_up_sync({_FULL}, {inc}, {PREFIX}o);",
        f"        if ({lane} >= {PREFIX}o) {{",
        f"            {inc} += {PREFIX}up;",
        "        }",
        "    }",
        f"    {t} {mine} = {carry} + {inc};",
        f"    if ({lp.var} {op} {limit}) {{",
        indent(rest, "        "),
        "    }",
        f"    {carry} = __shfl_sync({_FULL}, {mine}, 31);",
        "}",
        f"{lp.scan} = {carry};",
    ]


def _deferred(shape: _Shape, data: bytes) -> dict[int, list[tuple[int, set[str]]]]:
    """Outermost whole-lane loops -> (split loop number, accumulators) whose lane partials can live across
    the outer loop and be combined once after it, instead of once per outer iteration (a butterfly, and for
    a block two barriers, per image of ``for (n) for (i) acc += x[...]``).

    That holds for a sum or a min/max (``acc = acc + total`` per iteration adds the same terms as one total
    at the end, reassociated like any split sum; min/max are idempotent) whose accumulator appears nowhere
    in the outer loop but in its one split loop: nothing reads a per-iteration value."""
    out: dict[int, list[tuple[int, set[str]]]] = {}
    for st in shape.rest:
        if st.id not in shape.outer:
            continue
        found: list[tuple[int, set[str]]] = []
        for n, lp in enumerate(shape.loops):
            if lp.scan or not (st.start_byte <= lp.node.start_byte and lp.node.end_byte <= st.end_byte):
                continue
            inside = {x.id for x in walk(lp.node)}
            accs = {r.acc for r in lp.reductions.values() if not r.index and (r.kind == "sum" or r.kind in MINMAX_FUNCS)
                    and all(x.id in inside for x in walk(st, ("identifier",)) if node_text(x, data) == r.acc)}
            if accs:
                found.append((n, accs))
        if found:
            out[st.id] = found
    return out


def _loop_code(lp: _Loop, n: int, data: bytes, block: bool, decls: list[str],
               held: set[str] | frozenset[str] = frozenset(), subs: dict[int, str] | None = None,
               vec: tuple[list[_VKey], int] | None = None) -> list[str]:
    """The loop split over lanes; reductions of accumulators in ``held`` keep their partial from outside
    (declared and combined around an outer loop, see ``_deferred``); subscripts in ``subs`` (node id ->
    text) read a row cache instead; ``vec``: the rows and width of ``_vector_loop``."""
    if lp.scan:
        return _scan_code(lp, n, data)
    fp = for_parts(lp.node, data)
    assert fp is not None
    d, cond, body = fp.var, fp.cond, fp.body
    parts = {r.acc: f"{PREFIX}p{n}_{r.acc}" for r in lp.reductions.values()}
    parts.update({r.index: f"{PREFIX}p{n}_{r.index}" for r in lp.reductions.values() if r.index})
    flags = {r.node_id: f"{PREFIX}f{n}_{r.acc}" for r in lp.reductions.values() if r.index and r.kind != "online"}
    lines: list[str] = []
    for r in lp.reductions.values():
        if r.acc in held:
            continue
        start = "0" if r.kind == "sum" else r.acc
        lines.append(f"{r.type} {parts[r.acc]} = {start};")
        if r.kind == "online":
            lines.append(f"{r.index_type} {parts[r.index]} = 0;  // relative to this lane's max")
        elif r.index:
            lines.append(f"{r.index_type} {parts[r.index]} = {r.index};")
            lines.append(f"int {flags[r.node_id]} = 0;  // has this lane's pair left its start value?")
    lane = "threadIdx.x" if block else f"{PREFIX}lane"
    start = lane if lp.start == "0" else f"({lp.start}) + {lane}"
    stride = "blockDim.x" if block else "32"
    body_text = flush(_rename_body(body, data, parts, flags, subs or {}), body, data)
    if vec is not None:
        lines.extend(_vector_loop(lp, n, data, block, parts, flags, *vec))
    else:
        lines.append(f"for ({d.type} {lp.var} = {start}; {node_text(cond, data)}; {lp.var} += {stride}) {body_text}")
    combined = False
    for r in lp.reductions.values():
        p = parts[r.acc]
        if r.acc in held:
            continue
        combined = True
        if r.kind == "online":
            lines.extend(_online_combine(r, p, parts[r.index], n, block, decls))
        elif r.index:
            lines.extend(_arg_combine(r, p, parts[r.index], flags[r.node_id]))
        else:
            lines.extend(_simple_combine(r, p, n, block, decls))
    if block and combined:
        lines.append("__syncthreads();  // the partials' shared memory may be reused by the next reduction")
    return lines
