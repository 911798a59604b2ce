"""vectorize: 128-bit (or 64-bit) vector loads and stores for elementwise kernels.

Why it helps: an elementwise kernel that moves one 32-bit value per thread issues one load instruction
per element and per array; with ``float4``/``int4``/``uint4`` each thread moves four consecutive elements
with one 16-byte instruction per array. That cuts load/store instructions and address arithmetic by 4x,
keeps more bytes in flight per thread, and lets a memory-bound kernel get closer to DRAM bandwidth. The
2-wide variant (``float2`` ...) is offered too: fewer registers, sometimes the better trade.

Recognized shapes (names, types, bound expressions and the body are free; only the structure matters):

1. one thread per element, guarded::

       T i = blockIdx.x * M + threadIdx.x;      // M = blockDim.x or a constant; either operand order
       [declarations that do not use i or a pointer parameter]
       if (i < LIMIT) { BODY }                  // also LIMIT > i, i <= LIMIT

2. the same with an early exit: ``if (i >= LIMIT) return;`` followed by BODY to the end of the kernel;

3. a grid-stride loop: ``for (T i = blockIdx.x * M + threadIdx.x; i < LIMIT; i += M * gridDim.x) BODY``.

BODY may be any code (local variables, branches, inner loops, calls of device functions) provided every
pointer parameter it touches is accessed only as ``p[i]`` with exactly the index variable, every such
pointer has a 32-bit element type (float, int, unsigned), nothing writes ``i``, takes the address of an
element, leaves the body (return/goto/break/continue outside an inner loop), synchronizes or exchanges
data between threads (barriers, shuffles, atomics), uses ``__shared__`` memory or reads the thread/block
coordinates. Anything else is not elementwise in this sense and gets no variant.

The rewrite: thread ``t`` owns elements ``4t .. 4t+3``. It loads each array it reads (or writes only
conditionally, so an unwritten element keeps its old value) with one vector load, runs the original BODY
once per component with ``p[i]`` replaced by that component (and ``i`` bound to the element's index, so
any other use of ``i`` keeps its meaning), then stores each written array with one vector store. Because
every element is touched by exactly one thread and ``p[i]`` becomes one register for the whole body, the
per-element program order of reads and writes is unchanged. The scalar path — the original body in a
loop over the thread's four elements, with the original guard — handles the tail (the last
``LIMIT % 4`` elements, e.g. at the perturbed odd size) and pointers that are not 16-byte aligned: the
vector path runs only when every vectorized pointer is aligned (checked at run time, a warp-uniform
branch) and all four elements are in bounds. Spec buffers are 16-byte aligned by default; the rule only
proposes a width when the spec's ``align=`` of every vectorized buffer is a multiple of the vector size,
so verification exercises the vector path (the run-time check keeps user launches with offset pointers
correct). Distinct pointer parameters are assumed not to overlap, as the spec's separately allocated
buffers guarantee (the same assumption as ``const __restrict__``).

Launch: in shapes 1 and 2 the grid's x dimension ``G`` becomes ``cdiv(G, 4)``: the original launch
covered ``G * M >= LIMIT`` threads, so ``cdiv(G, 4) * M * 4 >= LIMIT`` elements are still covered. A
grid-stride loop covers any grid, which is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    VECTOR_TYPES,
    Elementwise,
    elementwise_1d,
    flush,
    fresh_body,
    has_jump,
    indent,
    is_1d,
    is_ident,
    launch_ok,
    render,
    subscript_parts,
    unparen,
    with_body,
    written_names,
)
from ._util import call_args, int_literal
from .base import Rule, RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfv_"

WIDTHS = {"x4": 4, "x2": 2}
_COMPONENTS = "xyzw"
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


@dataclass
class _Array:
    """What the elementwise body does with one pointer parameter."""

    name: str
    elem: str
    const: bool
    read: bool = False
    written: bool = False
    #: written by a plain ``p[i] = ...`` statement at the top level of the body (on every path)
    always_written: bool = False


@dataclass
class _Shape:
    e: Elementwise
    arrays: dict[str, _Array] = field(default_factory=dict)


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    """The elementwise shape of the candidate, with every check of the module docstring, or None."""
    got = fresh_body(ctx, PREFIX)  # not rewritten already, no shared memory or collectives, no shadowing
    if got is None:
        return None
    k, kbody, data = got
    found = elementwise_1d(kbody, data)
    if found is None or not found.body:
        return None
    shape = _Shape(found)
    i = shape.e.index.name
    pointers = {p.name: p for p in k.params if p.is_pointer}
    # the prelude (kept verbatim, run once per thread) must be plain declarations independent of i and memory
    for st in shape.e.prefix + shape.e.between:
        if st.type != "declaration" or i in _idents(st, data) or _idents(st, data) & set(pointers) \
                or _idents(st, data) & _COORDS:
            return None
    for st in shape.e.body:
        if has_jump(st, loops_ok=True) or _idents(st, data) & _COORDS:
            return None
    if i in _written_in(shape.e.body, data):
        return None
    if _idents(shape.e.bound.limit, data) & (set(pointers) | _COORDS):
        return None
    # every use of a pointer parameter: p[i] inside the body, p a 32-bit element pointer
    body_ids = {n.id for st in shape.e.body for n in walk(st)}
    for n in walk(kbody):
        if n.type != "identifier" or node_text(n, data) not in pointers:
            continue
        name = node_text(n, data)
        p = pointers[name]
        parent = n.parent
        if n.id not in body_ids or parent is None or parent.type != "subscript_expression":
            return None
        parts = subscript_parts(parent, data)
        if parts is None or parts[0].id != n.id or not is_ident(parts[1], data, i):
            return None
        if p.pointer_depth != 1 or p.array_dims or p.type not in VECTOR_TYPES:
            return None
        up = parent.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        if up is not None and up.type == "pointer_expression":
            return None  # &p[i]: an address escapes
        arr = shape.arrays.setdefault(name, _Array(name, p.type, p.is_const))
        if up is not None and up.type == "assignment_expression" and _same(up.child_by_field_name("left"), parent):
            op = up.child_by_field_name("operator")
            arr.written = True
            if op is None or node_text(op, data) != "=":
                arr.read = True
        elif up is not None and up.type == "update_expression":
            arr.written = arr.read = True
        else:
            arr.read = True
    if not shape.arrays:
        return None
    for st in shape.e.body:
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        if e is not None and e.type == "assignment_expression":
            op = e.child_by_field_name("operator")
            left = e.child_by_field_name("left")
            parts = subscript_parts(left, data) if left is not None else None
            if op is not None and node_text(op, data) == "=" and parts is not None and is_ident(parts[1], data, i):
                name = node_text(unparen(parts[0]), data)
                if name in shape.arrays:
                    shape.arrays[name].always_written = True
    return shape, data


def _same(a: Node | None, b: Node) -> bool:
    return a is not None and unparen(a).id == b.id


def _idents(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _written_in(nodes: list[Node], data: bytes) -> set[str]:
    out: set[str] = set()
    for n in nodes:
        out |= written_names(n, data)
    return out


def _block(nodes: list[Node], data: bytes) -> str:
    return "\n".join(flush(node_text(n, data), n, data) for n in nodes)


class Vectorize(Rule):
    family = "vectorize"
    structural = True
    motivated_by = ("WF104", "vectorize")

    def variants(self, ctx: RuleContext) -> list[str]:
        got = _analyse(ctx)
        if got is None:
            return []
        shape, _ = got
        if shape.e.form != "stride" and not (is_1d(ctx, ctx.grid) and is_1d(ctx, ctx.block)):
            return []
        out = []
        for param, w in WIDTHS.items():
            aligned = True
            for name in shape.arrays:
                a = ctx.spec.arg(name)
                if a is None or not a.is_buffer or a.align % (4 * w) != 0:
                    aligned = False
            if aligned and (shape.e.form == "stride" or launch_ok(ctx, self._grid(ctx, w), ctx.block)):
                out.append(param)
        return out

    @staticmethod
    def _grid(ctx: RuleContext, w: int) -> tuple[str, ...]:
        """``cdiv(G, w)``; written ``cdiv(E, B*w)`` when G is ``cdiv(E, B)`` with a literal B (the same number
        for positive sizes, and the form the other launch rules recognize as a ceiling division)."""
        g = ctx.grid
        args = call_args(g[0], "cdiv")
        if args is not None and len(args) == 2:
            b = int_literal(args[1].strip())
            if b is not None and b > 0:
                return (f"cdiv({args[0]}, {b * w})", *g[1:])
        return (f"cdiv({g[0]}, {w})", *g[1:])

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        w = WIDTHS.get(param)
        got = _analyse(ctx)
        if w is None or got is None or param not in self.variants(ctx):
            return None
        shape, data = got
        body = _generate(shape, data, w)
        definition = with_body(ctx, body)
        if definition is None:
            return None
        names = ", ".join(sorted(shape.arrays))
        vec = {VECTOR_TYPES[a.elem][0 if w == 4 else 1] for a in shape.arrays.values()}
        why = (f"{8 * 4 * w}-bit vector loads/stores ({', '.join(sorted(vec))}) of {names}: each thread handles {w} "
               f"consecutive elements, scalar path for the tail and unaligned pointers")
        if shape.e.form == "stride":
            return ctx.derive(self.family, param, why, definition=definition)
        return ctx.derive(self.family, param, why + f"; grid x divided by {w}", definition=definition,
                          grid=self._grid(ctx, w))


def _generate(shape: _Shape, data: bytes, w: int) -> str:
    i = shape.e.index.name
    itype = shape.e.index.type
    comps = _COMPONENTS[:w]
    arrays = sorted(shape.arrays.values(), key=lambda a: a.name)
    vtype = {a.name: VECTOR_TYPES[a.elem][0 if w == 4 else 1] for a in arrays}
    gi = node_text(shape.e.index_expr, data)
    limit = node_text(shape.e.bound.limit, data)
    cmp = "<=" if shape.e.bound.inclusive else "<"
    casts = " | ".join(f"reinterpret_cast<unsigned long long>({a.name})" for a in arrays)
    aligned = f"(({casts}) & {4 * w - 1}ull) == 0"

    def vector_part(vi: str, base: str) -> str:
        lines: list[str] = []
        for a in arrays:
            cq = "const " if a.const else ""
            if a.read or not a.always_written:
                q = "const " if not a.written else ""
                lines.append(f"{q}{vtype[a.name]} {PREFIX}{a.name} = "
                             f"reinterpret_cast<{cq}{vtype[a.name]}*>({a.name})[{vi}];")
            else:
                lines.append(f"{vtype[a.name]} {PREFIX}{a.name};")
        for c, comp in enumerate(comps):
            uses_i = False

            def rep(n: Node, comp: str = comp) -> str | None:
                nonlocal uses_i
                if n.type == "subscript_expression":
                    parts = subscript_parts(n, data)
                    if parts is not None and is_ident(parts[1], data, i) \
                            and node_text(unparen(parts[0]), data) in vtype:
                        return f"{PREFIX}{node_text(unparen(parts[0]), data)}.{comp}"
                if n.type == "identifier" and node_text(n, data) == i:
                    uses_i = True
                return None

            stmts = "\n".join(flush(render(st, data, rep), st, data) for st in shape.e.body)
            head = f"const {itype} {i} = {base} + {c};\n" if uses_i else ""
            lines.append("{\n" + indent(head + stmts, "    ") + "\n}")
        for a in arrays:
            if a.written:
                lines.append(f"reinterpret_cast<{vtype[a.name]}*>({a.name})[{vi}] = {PREFIX}{a.name};")
        return "\n".join(lines)

    pre = _block(shape.e.prefix, data)
    between = _block(shape.e.between, data)
    if shape.e.form == "stride":
        assert shape.e.stride is not None
        stride = node_text(shape.e.stride, data)
        limit_excl = f"({limit}) + 1" if shape.e.bound.inclusive else f"({limit})"
        cond = node_text(shape.e.cond, data)
        vec = vector_part(f"{PREFIX}vi", f"{PREFIX}base")
        code = f"""{pre}
{itype} {PREFIX}done = 0;
if ({aligned}) {{
    const {itype} {PREFIX}nv = {limit_excl} / {w};
    for ({itype} {PREFIX}vi = {gi}; {PREFIX}vi < {PREFIX}nv; {PREFIX}vi += {stride}) {{
        const {itype} {PREFIX}base = {PREFIX}vi * {w};
{indent(vec, "        ")}
    }}
    {PREFIX}done = {PREFIX}nv * {w};
}}
for ({itype} {i} = {PREFIX}done + {gi}; {cond}; {i} += {stride}) {{
{indent(_block(shape.e.body, data), "    ")}
}}"""
    else:
        ok = node_text(shape.e.cond, data) if shape.e.form == "guard" else f"!({node_text(shape.e.cond, data)})"
        vec = vector_part(f"{PREFIX}vi", f"{PREFIX}base")
        code = f"""{pre}
const {itype} {PREFIX}vi = {gi};
const {itype} {PREFIX}base = {PREFIX}vi * {w};
{between}
if (({aligned}) && {PREFIX}base + {w - 1} {cmp} {limit}) {{
{indent(vec, "    ")}
}} else {{
    for (int {PREFIX}c = 0; {PREFIX}c < {w}; ++{PREFIX}c) {{
        const {itype} {i} = {PREFIX}base + {PREFIX}c;
        if ({ok}) {{
{indent(_block(shape.e.body, data), "            ")}
        }}
    }}
}}"""
    code = "\n".join(ln for ln in code.split("\n") if ln.strip())
    return "{\n" + indent(code, "    ") + "\n}"


register(Vectorize())
