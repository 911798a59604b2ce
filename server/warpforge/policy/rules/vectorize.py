"""vectorize: 128-bit (or narrower) vector loads and stores for elementwise kernels.

Why it helps: an elementwise kernel that moves one value per thread issues one load instruction per
element and per array; moving 16 bytes per instruction (four floats, eight halves, two doubles) cuts
load/store instructions and address arithmetic by the vector width, keeps more bytes in flight per thread,
and lets a memory-bound kernel get closer to DRAM bandwidth. Narrower variants (8 bytes, ...) are offered
too: fewer registers, sometimes the better trade.

Recognized shapes (names, types, bound expressions and the body are free; only the structure matters):

1. one thread per element, guarded::

       T i = blockIdx.x * M + threadIdx.x;      // M = blockDim.x or a constant; either operand order, casts
       [declarations that do not use i or a written buffer]
       if (i < LIMIT) { BODY }                  // also LIMIT > i, i <= LIMIT

2. the same with an early exit: ``if (i >= LIMIT) return;`` followed by BODY to the end of the kernel;

3. a grid-stride loop: ``for (T i = blockIdx.x * M + threadIdx.x; i < LIMIT; i += M * gridDim.x) BODY``
   (either side of either product may be cast: ``(size_t)gridDim.x * blockDim.x``).

What the access analysis requires of BODY (any code: locals, branches, inner loops, device calls):

* every buffer the kernel **writes** is accessed (read or written) only as ``p[i]`` with exactly the index
  variable: element ``i`` is owned by the thread of ``i``, so no thread reads what another writes and the
  per-element order of reads and writes is all there is to keep;
* a buffer the kernel **never writes** may be read with any index (``w[0]``, a broadcast scale; ``x[r * 2 *
  h + j]``, a gather computed from ``i``): nothing writes it, so reading it per component, with ``i`` bound
  to that component's element, reads what the original thread of that element read. Only its ``p[i]``
  reads are vectorized;
* every vectorized buffer has a scalar element type of 1, 2, 4 or 8 bytes (``float``, ``__half``,
  ``double``, ``int``, ..., a template parameter judged as the spec instantiates it);
* loops in BODY have literal trip counts (a 2x2 window, 3 taps): a loop of run-time length is a row or
  column walk per output, which ``warp_per_row``/``column_split`` spread over lanes instead;
* nothing writes ``i``, takes the address of an element, leaves the body (return/goto/break/continue
  outside an inner loop), synchronizes or exchanges data between threads (barriers, shuffles, atomics),
  uses ``__shared__`` memory or reads the thread/block coordinates.

Anything else is not elementwise in this sense and gets no variant (a written buffer read at ``i + 1``, an
in-place update read at a shifted index, atomics: a dependence between elements).

The rewrite: thread ``t`` owns elements ``w*t .. w*t+w-1``. Each vectorized buffer is moved as one
``struct alignas(sizeof(E) * w) { E e[w]; }`` (a local type, so it is as generic as the kernel: a template
instantiated with another ``E`` still gets an exact vector), which nvcc loads and stores with one
``ld/st.global.v*`` per buffer. It loads each buffer it reads (or writes only conditionally, so an
unwritten element keeps its old value), runs the original BODY once per component with ``p[i]`` replaced
by that component (and ``i`` bound to the element's index, so any other use of ``i`` keeps its meaning),
then stores each written buffer. The scalar path — the original body in a loop over the thread's ``w``
elements, with the original guard — handles the tail (the last ``LIMIT % w`` elements, e.g. at the
perturbed odd size) and pointers that are not aligned to the vector: the vector path runs only when every
vectorized pointer is aligned (checked at run time, a warp-uniform branch) and all ``w`` elements are in
bounds. Widths: ``x8``, ``x4``, ``x2`` elements per thread, each where every vectorized buffer's vector is
at most 16 bytes, the widest at least 8, and the spec's ``align=`` of every vectorized buffer is a
multiple of its vector (so verification exercises the vector path; the run-time check keeps user launches
with offset pointers correct). Distinct pointer parameters are assumed not to overlap, as the spec's
separately allocated buffers guarantee (the same assumption as ``const __restrict__``).

Launch: in shapes 1 and 2 the grid's x dimension ``G`` becomes ``cdiv(G, w)``: the original launch
covered ``G * M >= LIMIT`` threads, so ``cdiv(G, w) * M * w >= LIMIT`` elements are still covered. A
grid-stride loop covers any grid, which is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.tree import node_text, walk
from ...spec.model import DTYPES, canonical_dtype
from . import register
from ._structural import (
    Elementwise,
    all_names,
    declared_names,
    elementwise_1d,
    flush,
    has_collective,
    has_jump,
    indent,
    is_1d,
    is_ident,
    launch_ok,
    render,
    resolved_type,
    single_decl,
    subscript_parts,
    unparen,
    with_body,
    written_names,
)
from ._util import call_args, int_literal, kernel_body
from ._why import Stage, declined
from .base import Rule, RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfv_"

#: variant -> elements per thread, widest first
WIDTHS = {"x8": 8, "x4": 4, "x2": 2}
#: the most bytes one vector may move (one 128-bit access), and the least the widest must (else no gain)
MAX_BYTES = 16
MIN_BYTES = 8
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


@dataclass
class _Array:
    """What the elementwise body does with one pointer parameter."""

    name: str
    #: the element type as written in the signature (``float``, ``__half``, ``T``), without ``const``
    elem: str
    #: bytes of one element as the kernel is instantiated
    size: int
    const: bool
    read: bool = False
    written: bool = False
    #: written by a plain ``p[i] = ...`` statement at the top level of the body (on every path)
    always_written: bool = False
    #: accessed as ``p[i]`` (vectorized); False for a buffer only read at other indices
    elementwise: bool = False


@dataclass
class _Shape:
    e: Elementwise
    arrays: dict[str, _Array] = field(default_factory=dict)

    @property
    def vectorized(self) -> list[_Array]:
        return sorted((a for a in self.arrays.values() if a.elementwise), key=lambda a: a.name)


def _elem_bytes(ctx: RuleContext, type_text: str) -> int | None:
    """Bytes of a scalar element type as instantiated (``T`` -> the spec's template argument)."""
    dt = canonical_dtype(resolved_type(ctx, type_text))
    return DTYPES[dt][0] if dt is not None else None


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    """The elementwise shape of the candidate, with every check of the module docstring, or None."""
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    kbody, data = got
    found = elementwise_1d(kbody, data)
    if found is None or not found.body:
        return declined("the kernel is not one thread per element (`i = blockIdx.x * blockDim.x + threadIdx.x` "
                        "with a guard `i < n`, or a grid-stride loop over `i`)", kbody, Stage.SCOPE)
    shape = _Shape(found)
    i = shape.e.index.name
    walk_st = next((st for st in found.body if _serial_walk(st, data)), None)
    if walk_st is not None:
        return declined("each thread walks a serial loop over memory, not one element (vector loads would "
                        "lengthen that walk)", walk_st, Stage.SCOPE)
    if any(n.startswith(PREFIX) for n in all_names(kbody, data)):
        return None  # already rewritten, or names that could clash with ours
    if any(n.type == "__shared__" for n in walk(kbody)) or has_collective(kbody, data):
        return declined("the kernel uses shared memory or a barrier/shuffle, so its threads exchange data and "
                        "are not independent elements", kbody, Stage.LEGALITY)
    pointers = {p.name: p for p in k.params if p.is_pointer}
    if declared_names(kbody, data) & {p.name for p in k.params}:
        return None  # a local shadows a parameter: names would not mean what the analysis assumes
    body_ids = {n.id for st in shape.e.body for n in walk(st)}
    others: set[str] = set()
    views, inits = _views(kbody, data, set(pointers))
    if views and set(views) & written_names(kbody, data):
        return None  # a view re-pointed: which elements it reads is no longer one expression
    # every use of a pointer parameter: p[i] in the body (vectorized), or a read of p[anything]; a view
    # (``const T* row = p + off``) reads p at other indices, so it counts as such a read of p
    for n in walk(kbody):
        if n.type != "identifier" or n.id in inits:
            continue
        if node_text(n, data) in views:
            parent = n.parent
            up = parent.parent if parent is not None else None
            while up is not None and up.type == "parenthesized_expression":
                up = up.parent
            parts = subscript_parts(parent, data) if parent is not None else None
            if parent is None or parts is None or parts[0].id != n.id or up is None or up.type in ("pointer_expression",
                                                                                 "update_expression") \
                    or (up.type == "assignment_expression" and _same(up.child_by_field_name("left"), parent)):
                # a view must only be read, element by element
                return declined(f"the pointer view `{node_text(n, data)}` is written or used as an address",
                                n, Stage.LEGALITY)
            others.add(views[node_text(n, data)])
            continue
        if node_text(n, data) not in pointers:
            continue
        name = node_text(n, data)
        p = pointers[name]
        parent = n.parent
        if parent is None or parent.type != "subscript_expression":
            # the pointer itself escapes (passed, offset, dereferenced): not an element access
            return declined(f"`{name}` is used as a pointer (passed, offset or dereferenced), not only as "
                            f"`{name}[index]`", n, Stage.LEGALITY)
        parts = subscript_parts(parent, data)
        if parts is None or parts[0].id != n.id or p.pointer_depth != 1 or p.array_dims:
            return None
        size = _elem_bytes(ctx, p.type)
        if size is None:
            return declined(f"the element type `{p.type}` of `{name}` has no known size", n, Stage.SHAPE)
        up = parent.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        if up is not None and up.type == "pointer_expression":
            return None  # &p[...]: an address escapes
        arr = shape.arrays.setdefault(name, _Array(name, " ".join(p.type.replace("const", " ").split()),
                                                   size, p.is_const))
        exact = n.id in body_ids and is_ident(parts[1], data, i)
        arr.elementwise |= exact
        if up is not None and up.type == "assignment_expression" and _same(up.child_by_field_name("left"), parent):
            op = up.child_by_field_name("operator")
            if not exact:  # a write at another index: another thread's element
                return declined(f"`{node_text(parent, data)}` is written at another index than the thread's own "
                                f"element `{name}[{i}]`", parent, Stage.LEGALITY)
            arr.written = True
            if op is None or node_text(op, data) != "=":
                arr.read = True
        elif up is not None and up.type == "update_expression":
            if not exact:
                return None
            arr.written = arr.read = True
        elif up is not None and _binds_mutable_reference(up, parent, data):
            # `T& r = p[i];`: every write through `r` writes the element (the vector copy is then written and
            # stored back; taken as a read, the copy was const and nvcc refused to bind `r`, and a copy that
            # compiled would have dropped the writes)
            if not exact:
                return declined(f"a reference bound to `{node_text(parent, data)}` may write another thread's "
                                f"element than `{name}[{i}]`", parent, Stage.LEGALITY)
            arr.written = arr.read = True
        else:
            arr.read = True
            if not exact:
                others.add(name)  # a read at another index: allowed below only if nothing writes p
    for nm in others:
        if nm not in shape.arrays:  # read only through views: still a buffer, with its element size
            prm = pointers[nm]
            size = _elem_bytes(ctx, prm.type)
            if size is None or prm.pointer_depth != 1 or prm.array_dims:
                return None
            shape.arrays[nm] = _Array(nm, prm.type, size, prm.is_const, read=True)
    if any(shape.arrays[nm].written for nm in others):  # a written buffer read at another index
        nm = next(nm for nm in others if shape.arrays[nm].written)
        return declined(f"`{nm}` is written and also read at another index than `{nm}[{i}]`: one element depends "
                        "on another thread's", kbody, Stage.LEGALITY)
    if not shape.vectorized:
        return declined(f"no buffer is accessed at exactly `[{i}]`, so there is nothing to load as a vector", kbody,
                        Stage.SHAPE)
    # the prelude (kept verbatim, run once per thread) must be plain declarations independent of i and of
    # any written buffer
    written = {a.name for a in shape.arrays.values() if a.written}
    for st in shape.e.prefix + shape.e.between:
        ids = _idents(st, data)
        if st.type != "declaration" or i in ids or ids & written or ids & _COORDS:
            return declined("a statement before the guard is not a plain declaration independent of the index",
                            st, Stage.SHAPE)
    for st in shape.e.body:
        if _serial_walk(st, data):
            return declined("the element's body contains a serial loop over memory: each thread does a row of "
                            "work, not one element", st, Stage.SCOPE)
        if has_jump(st, loops_ok=True) or _idents(st, data) & _COORDS:
            return declined("the element's body returns/breaks early or reads the thread coordinates again",
                            st, Stage.SHAPE)
    if i in _written_in(shape.e.body, data):
        return declined(f"the index `{i}` is changed in the body", kbody, Stage.LEGALITY)
    if _idents(shape.e.bound.limit, data) & (set(pointers) | _COORDS):
        return declined("the guard's bound reads memory or the thread coordinates", kbody, Stage.SHAPE)
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


def _binds_mutable_reference(up: Node, access: Node, data: bytes) -> bool:
    """Is ``access`` the initializer of a reference through which it can be written (``T& r = p[i];``, not
    ``const T& r = p[i];``)?"""
    if up.type != "init_declarator" or not _same(up.child_by_field_name("value"), access):
        return False
    decl = up.child_by_field_name("declarator")
    if decl is None or decl.type != "reference_declarator":
        return False
    owner = up.parent
    return owner is None or not any(c.type == "type_qualifier" and node_text(c, data) == "const"
                                    for c in owner.children)


def _views(kbody: Node, data: bytes, pointers: set[str]) -> tuple[dict[str, str], set[int]]:
    """Local pointers that view a pointer parameter at an offset: ``const T* row = p + off;`` (or ``= p``,
    ``= off + p``, ``= &p[off]``), as ``{local: parameter}``, and the ids of the parameter's identifiers in
    those initializers (uses that are not accesses themselves)."""
    views: dict[str, str] = {}
    inits: set[int] = set()
    for n in walk(kbody):
        d = single_decl(n, data) if n.type == "declaration" else None
        if d is None or not d.pointer or d.value is None:
            continue
        v = unparen(d.value)
        cands: list[Node] = [v]
        if v.type == "binary_expression":
            op = v.child_by_field_name("operator")
            if op is not None and node_text(op, data) == "+":
                cands = [c for c in (v.child_by_field_name("left"), v.child_by_field_name("right")) if c is not None]
        elif v.type == "pointer_expression" and node_text(v, data).lstrip().startswith("&"):
            arg = v.child_by_field_name("argument")
            parts = subscript_parts(arg, data) if arg is not None else None
            cands = [parts[0]] if parts is not None else []
        base = [u for u in map(unparen, cands) if u.type == "identifier" and node_text(u, data) in pointers]
        if len(base) == 1:
            views[d.name] = node_text(base[0], data)
            inits.add(base[0].id)
            inits |= {x.id for x in walk(n) if x.type == "identifier" and node_text(x, data) == d.name}
    return views, inits


def _serial_walk(node: Node, data: bytes) -> bool:
    """Whether a loop in the body runs a number of times that is not a literal (``for (j = 0; j < cols; ++j)``,
    ``while``): each element then walks a row or a column serially, a reduction per output that
    ``warp_per_row``/``column_split`` spread over lanes; ``w`` elements per thread would lengthen that walk
    ``w``-fold instead. Loops with literal bounds (a 2x2 window, 3 taps) stay elementwise work."""
    for n in walk(node):
        if n.type in ("while_statement", "do_statement", "for_range_loop"):
            return True
        if n.type == "for_statement":
            cond = n.child_by_field_name("condition")
            init = n.child_by_field_name("initializer")
            own = declared_names(init, data) | written_names(init, data) if init is not None else set()
            if cond is None or _idents(cond, data) - own:
                return True
    return False


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
            declined("the launch is not one-dimensional", None, Stage.LAUNCH)
            return []
        vec = shape.vectorized
        out = []
        for param, w in WIDTHS.items():
            widest = max(a.size for a in vec) * w
            if widest > MAX_BYTES or widest < MIN_BYTES:
                continue
            aligned = True
            for arr in vec:
                a = ctx.spec.arg(arr.name)
                if a is None or not a.is_buffer or a.align % (arr.size * w) != 0:
                    aligned = False
            if aligned and (shape.e.form == "stride" or launch_ok(ctx, self._grid(ctx, w), ctx.block)):
                out.append(param)
            elif not aligned:
                declined(f"the spec does not promise the buffers are aligned to {widest} bytes (`align=` on "
                         "their `arg` lines)", None, Stage.LAUNCH)
            else:
                declined(f"a grid of 1/{w} of the threads does not fit the spec's sizes", None, Stage.LAUNCH)
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
        vec = shape.vectorized
        names = ", ".join(f"{a.name} ({8 * a.size * w}-bit)" for a in vec)
        why = (f"vector loads/stores of {names}: each thread handles {w} consecutive elements, scalar path "
               f"for the tail and unaligned pointers")
        if shape.e.form == "stride":
            return ctx.derive(self.family, param, why, definition=definition)
        return ctx.derive(self.family, param, why + f"; grid x divided by {w}", definition=definition,
                          grid=self._grid(ctx, w))


def _generate(shape: _Shape, data: bytes, w: int) -> str:
    i = shape.e.index.name
    itype = shape.e.index.type
    arrays = shape.vectorized
    vtype = {a.name: f"{PREFIX}v_{a.name}" for a in arrays}
    gi = node_text(shape.e.index_expr, data)
    limit = node_text(shape.e.bound.limit, data)
    cmp = "<=" if shape.e.bound.inclusive else "<"
    # one local vector type per buffer: ``w`` elements of its own type, aligned to their size, so nvcc moves
    # it with one vector instruction whatever the element type (and whatever a template is instantiated with)
    types = "\n".join(f"struct alignas(sizeof({a.elem}) * {w}) {vtype[a.name]} {{ {a.elem} e[{w}]; }};"
                      for a in arrays)
    misalign = " | ".join(f"(reinterpret_cast<unsigned long long>({a.name}) & (sizeof({vtype[a.name]}) - 1))"
                          for a in arrays)
    aligned = f"({misalign}) == 0"

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
        for c in range(w):
            uses_i = False

            def rep(n: Node, c: int = c) -> str | None:
                nonlocal uses_i
                if n.type == "subscript_expression":
                    parts = subscript_parts(n, data)
                    if parts is not None and is_ident(parts[1], data, i) \
                            and node_text(unparen(parts[0]), data) in vtype:
                        return f"{PREFIX}{node_text(unparen(parts[0]), data)}.e[{c}]"
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
{types}
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
{types}
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
