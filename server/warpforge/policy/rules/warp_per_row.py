"""warp_per_row: give each row of a row-wise kernel to a warp (or a block) instead of a single thread.

Why it helps: a kernel with one thread per row walks a row serially, and neighbouring threads touch
addresses a whole row apart, so every load and store of a warp is 32 separate memory transactions and
the row's latency is paid element by element. With a warp per row, the 32 lanes read 32 consecutive
elements at once (coalesced, 128 bytes per instruction) and the row is done in 1/32 of the steps; the
row's reductions (max, sum) become per-lane partials combined with five ``__shfl_xor_sync`` steps.
Softmax, layer/RMS normalization and similar row-wise kernels written "one thread per row" typically
gain an order of magnitude. The ``block256`` variant uses a whole 256-thread block per row (partials of
the 8 warps combined through shared memory), for long rows.

Recognized shape (names, types, expressions free)::

    T row = blockIdx.x * blockDim.x + threadIdx.x;    // either operand order
    [declarations not using the thread coordinates]
    if (row >= ROWS) return;                         // or: if (row < ROWS) { ...rest... } as the last statement
    rest: a sequence of
      - declarations and assignments of local scalars (pointer offsets like ``const float* x = in + row * C``),
        computed identically by every lane;
      - loops ``for (int j = 0; j < COLS; j++)`` (also ++j, j += 1) whose bodies contain only
          * local declarations, ``if``/``else`` and blocks,
          * element writes ``p[IDX] = ...`` / ``p[IDX] op= ...``,
          * reductions into a scalar declared outside the loop: ``acc += e``, ``acc -= e``,
            ``acc = acc + e``, ``acc = fmaxf(acc, e)`` (fmax, max, fminf, fmin, min; either argument order),
          * a running max carried with the sum of exponentials shifted by it (``single_pass``'s online loop):
            ``if (v > m) { s = s * expf(m - v); m = v; }`` then ``s += expf(v - m);`` (``__expf``, ``exp``),
            ``v`` reading neither; each lane keeps its own pair, merged across lanes with the same rescaling
            (for a block, then across its warps through shared memory),
        where an array written anywhere in the kernel is always accessed with one index ``j`` or ``E + j``
        (E the same loop-invariant expression everywhere), read-only arrays with any index free of values
        the loop assigns, and a reduction's accumulator is not otherwise read inside its loop.

Top-level statements may read only memory the kernel never writes (a lane must not read an element
another lane wrote), and nothing may use the thread coordinates except ``row``'s definition, synchronize,
exchange data between threads, or leave early (return/break/goto). They may write per-row scalars
(``mean[row] = m;``, ``loss[row] = ...``) to arrays that are written nowhere else and never read: every
lane computes the same value there, and one lane (lane 0, thread 0 for a block) stores it.

The analysis runs on the canonical form (``cuda.normalize``) when the text as written is not of this
shape, so a body inside ``if (row < B) { ... }``, a bumped row pointer (``x += row * C``), a macro index or a
typedef'd accumulator are all seen as the shape above.

The rewrite: ``row`` becomes the warp's index, lane ``l`` runs each loop over ``j = l, l + 32, ...``, so the
same lane touches element ``j`` in every loop and element-wise dependencies between loops stay inside one
thread. Each reduction accumulates a per-lane partial (from 0 for sums, from the accumulator's value for
min/max, which are idempotent) that a butterfly of ``__shfl_xor_sync`` combines so every lane holds the
same total; a sum is then added to the accumulator. The guard is uniform per warp (whole warps leave
together), so the full-mask shuffles are safe. Floating-point sums are reassociated (tolerances apply).

Launch: ``block = 32 * R`` threads (R rows per block) and ``grid = cdiv(ROWS, R)``, where ROWS is the guard's
bound written in spec terms (a scalar parameter's ``arg`` value); if it cannot be, the rows the original
launch covered (grid × block) bound it instead. ``block256``: one block per row, ``grid = ROWS``.
Assumption: device functions called in the loops have no side effects other threads can see.

Sized from the spec (rows x threads against the GPU's resident threads, loop bounds through locals defined
once such as ``int hw = H * W``):

- ``block512``/``block1024``: when ROWS x 256 threads leave SMs idle (few long rows: a per-channel mean over
  N x H x W), larger blocks per row, proposed first; each loop must give every thread two elements or more.
- inside an outer loop run whole by every lane, a sum's or min/max's lane partial lives across the outer
  loop and is combined once after it, unless the outer loop reads the accumulator (``_deferred``).
- ``*_smem``: a row of a never-written array that two or more passes read whole is staged in dynamic shared
  memory once (``_row_cache`` states the preconditions); the passes read it there.
- ``*_vec``: each lane moves 16 bytes of consecutive elements per load/store where every row of a loop is
  aligned at run time (``vector_plan`` states the preconditions); the rest of the row as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    MINMAX_FUNCS,
    SHUFFLE_TYPES,
    Bound,
    Decl,
    all_names,
    binary_parts,
    call_names,
    condition_of,
    declared_names,
    envs,
    failing_bound,
    flat_index_2d,
    flush,
    for_parts,
    global_index,
    has_jump,
    indent,
    is_1d,
    is_collective,
    is_ident,
    is_return_only,
    is_zero_literal,
    launch_ok,
    render,
    resolved_type,
    scalar_value_expr,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from ._structural_rule import Launch, StructuralRule
from ._util import eval_expr, kernel_body, size_env
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfw_"

#: param -> (threads per block, rows per block); rows per block 0: one block per row
VARIANTS = {"warp8": (256, 8), "warp4": (128, 4), "block256": (256, 0), "block512": (512, 0),
            "block1024": (1024, 0)}
#: threads an SM keeps resident (sm_80/sm_90: 2048): with fewer rows than SMs x this / 256, a 256-thread
#: block per row leaves most of the GPU idle, and only larger blocks per row can fill it
THREADS_PER_SM = 2048
#: variants that may also stage rows several loops read in shared memory (param + "_smem")
CACHED = ("warp8", "block256", "block512", "block1024")
#: dynamic shared memory a launch may ask for without opting in (cudaFuncSetAttribute)
MAX_SMEM = 48 * 1024
#: variants that may also move each lane's elements in 16-byte vectors (param + "_vec")
VECTOR = ("warp8", "block256", "block512", "block1024")
#: the unsigned type of a vector of so many bytes (loads and stores move the bits; elements are read back
#: through a pointer of the element type)
VEC_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short"}
#: bytes of the element types a row cache may hold
ELEM_BYTES = {"float": 4, "double": 8, "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2,
              "int": 4, "unsigned int": 4, "unsigned": 4, "short": 2, "char": 1, "signed char": 1,
              "unsigned char": 1, "long": 8, "long long": 8, "int64_t": 8, "int32_t": 4, "uint32_t": 4}
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_FULL = "0xffffffffu"


class _Reject(Exception):
    """The kernel is not of the recognized shape (internal control flow of the analysis)."""


@dataclass
class _Reduction:
    acc: str
    type: str
    #: "sum", the min/max function name used, or "argmax"/"argmin" (a compare-and-assign with an index)
    kind: str
    #: argmax/argmin: the index accumulator, its type, and whether ties keep the first index (strict compare)
    index: str = ""
    index_type: str = ""
    first: bool = True
    #: argmax/argmin: the if statement that updates the pair (its consequence also sets the lane's flag)
    node_id: int = -1
    #: "online": a running max ``acc`` and a sum ``index`` of exp(v - acc) rescaled when the max grows
    #: (``single_pass``'s loop); ``exp`` the exponential the kernel uses
    exp: str = ""


@dataclass
class _Loop:
    node: Node
    var: str
    reductions: dict[str, _Reduction] = field(default_factory=dict)
    #: the loop's first index when it is not 0 (``for (j = 1; ...)`` after ``m = x[0]``)
    start: str = "0"
    #: locals of the body defined once from the index (``long off = base + i;``): name -> definition
    aliases: dict[str, Node] = field(default_factory=dict)
    #: a running sum read inside the loop (a prefix sum): the accumulator, its type, the update statement
    #: ``acc += E`` that opens the body, and E
    scan: str = ""
    scan_type: str = ""
    scan_head: Node | None = None
    scan_inc: Node | None = None


@dataclass
class _Shape:
    row: Decl
    prefix: list[Node]
    between: list[Node]
    guard: Node
    exit_form: bool
    #: the guard's bound on the row index (None: the guard tests something else, e.g. ``start < n``)
    bound: Bound | None
    rest: list[Node]
    loops: list[_Loop]
    #: ids of top-level statements storing a per-row scalar (done by one lane)
    stores: set[int] = field(default_factory=set)
    #: the guard's other terms (``b < batch`` in ``col < cols && b < batch``): uniform per block
    others: list[Node] = field(default_factory=list)
    #: the kernel reads blockIdx/gridDim .y/.z: the launch keeps the original grid's y and z
    uses_yz: bool = False
    #: the row index is a 2-D grid flattened (``flat_index_2d``): a 1-D launch computes the same rows
    flat: bool = False
    #: ids of loops every lane runs whole (their inner loops are split)
    outer: set[int] = field(default_factory=set)
    #: top-level scalars defined once and never reassigned (``int hw = H * W;``): name -> value, so a loop
    #: bound written through one is still known in spec terms
    defs: dict[str, Node] = field(default_factory=dict)
    #: rows of read-only arrays several loops read whole (``_row_cache``): staged in shared memory
    cache: list[_Cache] = field(default_factory=list)


@dataclass
class _Cache:
    """A row of a read-only array staged in shared memory once and read from there by every loop."""

    #: the pointer read, and the canonical text of the loops' limit L (all equal) and one of its nodes
    name: str
    limit: str
    limit_node: Node
    #: the element type as the kernel writes it (``T``), and its size as instantiated
    type: str = ""
    size: int = 0
    #: ids of the subscripts read from the row -> the loop variable they index with
    subs: dict[int, str] = field(default_factory=dict)
    loops: set[int] = field(default_factory=set)
    #: a read on every iteration of a loop from 0 (the fill's template) and that loop's variable and type
    witness: Node | None = None
    var: str = ""
    var_type: str = "int"
    #: the id of the first top-level statement reading it: the fill goes right before it
    first: int = -1


def _canon_text(text: str) -> str:
    """Statement or expression text without whitespace and without parentheses around single names."""
    t = re.sub(r"\s+", "", text)
    prev = None
    while prev != t:
        prev, t = t, re.sub(r"\(([A-Za-z_0-9.]+)\)", r"\1", t)
    return t


def _ids(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _renamed_canon(node: Node, data: bytes, var: str) -> str:
    """Canonical text of an index with the loop variable replaced by ``@`` (equal across loops)."""
    return _canon_text(render(node, data, lambda n: "@" if n.type == "identifier" and node_text(n, data) == var
                              else None))


def _unconditional(n: Node, loop: Node, data: bytes) -> bool:
    """Is ``n`` evaluated on every iteration of ``loop`` (not in a branch of an ``if``, ``?:``, ``&&``/``||``)?"""
    child, p = n, n.parent
    while p is not None and p.id != loop.id:
        if p.type == "if_statement" and child != p.child_by_field_name("condition"):
            return False
        if p.type == "conditional_expression" and child != p.child_by_field_name("condition"):
            return False
        if p.type == "binary_expression" and child == p.child_by_field_name("right"):
            op = p.child_by_field_name("operator")
            if op is not None and node_text(op, data) in ("&&", "||"):
                return False
        if p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            return False
        child, p = p, p.parent
    return p is not None


class _Analysis:
    def __init__(self, ctx: RuleContext, body: Node, data: bytes) -> None:
        k = ctx.cand_kernel
        assert k is not None
        self.ctx = ctx
        self.data = data
        self.body = body
        self.pointer_params = {p.name for p in k.params if p.is_pointer}
        self.params = {p.name for p in k.params}
        #: pointer name -> the parameter it points into
        self.root: dict[str, str] = {p: p for p in self.pointer_params}
        #: top-level scalar declarations: name -> type
        self.scalars: dict[str, str] = {}
        #: root -> the single (pointer name, index text) written roots are accessed with
        self.written_access: dict[str, tuple[str, str]] = {}
        self.written_roots: set[str] = set()
        #: roots written only by top-level per-row scalar stores (and never read)
        self.scalar_roots: set[str] = set()
        #: roots updated by atomics inside the loops (and never read)
        self.atomic_roots: set[str] = set()
        #: loop variables of outer loops; written roots indexed with them; written roots also read
        self.outer_vars: set[str] = set()
        self.outer_indexed: set[str] = set()
        self.read_roots: set[str] = set()

    # ------------------------------------------------------------------ shape
    def find(self) -> _Shape:
        data = self.data
        sts = statements(self.body)
        for at, st in enumerate(sts):
            d = single_decl(st, data)
            if d is None or d.pointer or d.value is None:
                continue
            flat = flat_index_2d(d.value, data)
            if not flat and global_index(d.value, data, "x") != "blockDim.x":
                continue
            for j in range(at + 1, len(sts)):
                s = sts[j]
                if s.type != "if_statement":
                    continue
                cond = condition_of(s)
                if cond is None or s.child_by_field_name("alternative") is not None or _varying(cond, data):
                    raise _Reject
                if is_return_only(s.child_by_field_name("consequence")):
                    down, others = _split_guard(cond, data, d.name, "||", failing_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, True, down, sts[j + 1 :], [])
                elif j == len(sts) - 1:
                    up, others = _split_guard(cond, data, d.name, "&&", upper_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, False, up,
                                   statements(s.child_by_field_name("consequence")), [])
                else:
                    raise _Reject
                shape.others = others
                shape.flat = flat
                # a flattened 2-D index reads blockIdx.y only to rebuild the row: on a 1-D grid it is 0
                inside = {n.id for n in walk(d.node)} if flat else set()
                shape.uses_yz = any(_yz(n, data) for n in walk(self.body, ("field_expression",))
                                    if n.id not in inside)
                return shape
            raise _Reject
        raise _Reject

    # ------------------------------------------------------------------ checks
    def check(self, shape: _Shape) -> None:
        data = self.data
        if any(n.startswith(PREFIX) for n in all_names(self.body, data)):
            raise _Reject
        if any(n.type == "__shared__" for n in walk(self.body)) \
                or any(is_collective(c) and c not in ATOMICS for c in call_names(self.body, data)):
            raise _Reject  # atomics are checked where they are used (result unused, target never read)
        if declared_names(self.body, data) & self.params:
            raise _Reject  # shadowing
        row = shape.row.name
        if row in {w for st in shape.rest for w in written_names(st, data)}:
            raise _Reject
        top = shape.prefix + shape.between + shape.rest
        for st in top:
            if has_jump(st, loops_ok=False) or _varying(st, data):
                raise _Reject
        for st in shape.prefix + shape.between:
            if st.type != "declaration":
                raise _Reject
        if row in {i for st in shape.prefix for i in _ids(st, data)}:
            raise _Reject
        # pass 1: pointer aliases and scalars declared at the top level, and which roots are written (anywhere)
        for st in top:
            if st.type == "declaration":
                self._declare(st)
        store_targets: set[int] = set()
        for st in shape.rest:
            root = self._scalar_store(st)
            if root is not None:
                shape.stores.add(st.id)
                self.scalar_roots.add(root)
                e = st.named_children[0]
                store_targets.add(e.id)
        for n in walk(self.body):
            if n.id in store_targets:
                continue
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
                parts = subscript_parts(target, data) if target is not None else None
                if parts is not None:
                    base = unparen(parts[0])
                    if base.type != "identifier" or node_text(base, data) not in self.root:
                        raise _Reject
                    self.written_roots.add(self.root[node_text(base, data)])
                elif target is not None and unparen(target).type != "identifier":
                    raise _Reject  # *p = ..., s.f = ...: not something this rule follows
        for n in walk(self.body, ("call_expression",)):
            at = atomic_target(n, data)
            if at is not None and n.id not in store_targets:
                if at[0] not in self.root:
                    raise _Reject
                self.atomic_roots.add(self.root[at[0]])
        if self.scalar_roots & self.written_roots or self.atomic_roots & (self.written_roots | self.scalar_roots):
            raise _Reject  # one array updated in two ways
        self._scalar_roots_unread(store_targets)
        assigned = written_names(self.body, data)
        declared = [single_decl(n, data) for n in walk(self.body, ("declaration",))]
        for st in top:
            d = single_decl(st, data) if st.type == "declaration" else None
            if d is not None and not d.pointer and d.value is not None and d.name not in assigned \
                    and sum(1 for x in declared if x is not None and x.name == d.name) == 1:
                shape.defs[d.name] = d.value
        # pass 2: statements
        for st in shape.prefix + shape.between:
            self._top_level(st)
        for st in shape.rest:
            if st.type == "for_statement":
                self._for(st, shape, 0)
            elif st.id in shape.stores:
                self._store(st)
            elif st.type in ("declaration", "expression_statement", "if_statement"):
                self._top_level(st)
            else:
                raise _Reject
        if not shape.loops:
            raise _Reject
        if self.outer_indexed & self.read_roots:
            # an element written in one outer iteration might be read in another, by another lane
            raise _Reject
        shape.cache = self._row_cache(shape)

    def _row_cache(self, shape: _Shape) -> list[_Cache]:
        """Rows of read-only arrays that several passes read whole: ``p[E + j]`` for ``j`` over ``[0, L)``
        in two or more top-level loops (softmax: max, exp-sum, write; layernorm: mean, variance, normalize).

        Each is worth one read from global memory into shared memory, the passes then reading it there.
        Required: the array is never written (no store, per-row scalar or atomic reaches its root); the
        reads use one pointer, one offset E and one limit L (``j < L``) in every such loop, loops starting
        at a literal 0 or more; E, L and the pointer are not reassigned from the first such loop on; and
        some loop from 0 reads ``p[E + j]`` on every iteration (not under an ``if``, ``?:``, ``&&``), so
        the original itself reads all of ``[0, L)`` and the fill reads nothing it does not."""
        data = self.data
        unsafe = self.written_roots | self.scalar_roots | self.atomic_roots
        rest = {st.id for st in shape.rest}
        top = [lp for lp in shape.loops if lp.node.id in rest and not lp.scan]
        found: dict[tuple[str, str], _Cache] = {}
        for lp in top:
            fp = for_parts(lp.node, data)
            b = upper_bound(fp.cond, data, lp.var) if fp is not None else None
            if fp is None or b is None or b.inclusive or not re.fullmatch(r"\d+", _canon_text(lp.start)):
                continue
            for n in walk(fp.body, ("subscript_expression",)):
                parts = subscript_parts(n, data)
                base = unparen(parts[0]) if parts is not None else None
                if parts is None or base is None or base.type != "identifier":
                    continue
                name = node_text(base, data)
                if name not in self.root or self.root[name] in unsafe or not _lane_index(parts[1], data, lp.var):
                    continue
                key = (name, _renamed_canon(parts[1], data, lp.var))
                c = found.setdefault(key, _Cache(name, _canon_text(node_text(b.limit, data)), b.limit))
                if c.limit != _canon_text(node_text(b.limit, data)):
                    c.limit = ""  # two limits: not one row
                c.subs[n.id] = lp.var
                c.loops.add(lp.node.id)
                if c.witness is None and _canon_text(lp.start) == "0" and _unconditional(n, lp.node, data):
                    c.witness, c.var_type, c.var = n, fp.var.type, lp.var
        out: list[_Cache] = []
        params = {p.name: p for p in self.ctx.cand_kernel.params} if self.ctx.cand_kernel is not None else {}
        for c in found.values():
            root = params.get(self.root[c.name])
            if root is None or root.pointer_depth != 1 or root.array_dims:
                continue
            c.type = root.type
            c.size = ELEM_BYTES.get(resolved_type(self.ctx, root.type), 0)
            if not c.limit or c.witness is None or len(c.loops) < 2 or not c.size:
                continue
            if out and c.limit != out[0].limit:
                continue  # one row length: every cache region sized alike
            first = min(i for i, st in enumerate(shape.rest) if st.id in c.loops)
            later = {w for st in shape.rest[first:] for w in written_names(st, data)}
            if later & ((_ids(c.witness, data) - {c.var}) | _ids(c.limit_node, data)):
                continue
            c.first = shape.rest[first].id
            out.append(c)
        return out

    def _for(self, st: Node, shape: _Shape, depth: int) -> None:
        """A loop of the row: split among the lanes when it is innermost, else a uniform outer loop.

        An outer loop (``for (n ...) for (i ...) acc += x[(n * C + c) * HW + i]``) runs whole in every lane;
        the loops inside it are split, each combining its partials when it ends. Its header may use only
        values every lane has alike, and its body holds what a row's top level may hold (no stores)."""
        body = st.child_by_field_name("body")
        if body is None:
            raise _Reject
        if not any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(body)):
            shape.loops.append(self._loop(st))
            return
        if depth >= 2 or has_jump(body, loops_ok=False):
            raise _Reject
        fp = for_parts(st, self.data)
        if fp is None:
            raise _Reject
        d = fp.var
        for part in (d.node, fp.cond, fp.update):
            if _varying(part, self.data):
                raise _Reject
            for n in walk(part, ("subscript_expression",)):
                self._top_read(n)
        if written_names(body, self.data) & {d.name}:
            raise _Reject
        self.outer_vars.add(d.name)
        for s2 in statements(body):
            if s2.type == "for_statement":
                self._for(s2, shape, depth + 1)
            elif s2.type == "declaration":
                self._declare(s2)
                self._top_level(s2)
            elif s2.type in ("expression_statement", "if_statement"):
                self._top_level(s2)
            else:
                raise _Reject
        shape.outer.add(st.id)

    def _scalar_store(self, st: Node) -> str | None:
        """The root of ``p[E] = v;`` / ``p[E] op= v;`` at the top level (a per-row scalar store), else None."""
        data = self.data
        if st.type != "expression_statement" or st.named_child_count != 1:
            return None
        e = st.named_children[0]
        at = atomic_target(e, data)
        if at is not None:
            return self.root.get(at[0])
        if e.type != "assignment_expression":
            return None
        left = e.child_by_field_name("left")
        parts = subscript_parts(unparen(left), data) if left is not None else None
        if parts is None:
            return None
        base = unparen(parts[0])
        if base.type != "identifier" or node_text(base, data) not in self.root:
            return None
        return self.root[node_text(base, data)]

    def _scalar_roots_unread(self, stores: set[int]) -> None:
        """A per-row scalar is stored by one lane: its array may appear only as the target of those stores
        (no lane reads it back, no loop writes it)."""
        data = self.data
        for n in walk(self.body, ("subscript_expression",)):
            parts = subscript_parts(n, data)
            base = unparen(parts[0]) if parts is not None else None
            root = self.root.get(node_text(base, data)) if base is not None and base.type == "identifier" else None
            if root not in self.scalar_roots:
                continue
            p = n.parent
            while p is not None and p.type in ("parenthesized_expression", "pointer_expression", "argument_list"):
                p = p.parent
            if p is None or p.id not in stores:
                raise _Reject

    def _store(self, st: Node) -> None:
        """``p[E] op= v;`` at the top level: E and v follow the rules of top-level reads."""
        data = self.data
        e = st.named_children[0]
        at = atomic_target(e, data)
        if at is not None:
            checked = [n for n in (at[1], at[2]) if n is not None]
        else:
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            assert left is not None and right is not None
            parts = subscript_parts(unparen(left), data)
            assert parts is not None
            checked = [parts[1], right]
        for part in checked:
            if _varying(part, data):
                raise _Reject
            for n in walk(part):
                if n.type == "subscript_expression":
                    self._top_read(n)
                elif n.type in ("assignment_expression", "update_expression", "for_statement") or (
                        n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                    raise _Reject

    def _top_read(self, n: Node) -> None:
        data = self.data
        parts = subscript_parts(n, data)
        if parts is None:
            raise _Reject
        base = unparen(parts[0])
        name = node_text(base, data)
        if base.type != "identifier" or name not in self.root or self.root[name] in self.written_roots \
                or self.root[name] in self.scalar_roots or self.root[name] in self.atomic_roots:
            raise _Reject

    def _declare(self, st: Node) -> None:
        data = self.data
        d = single_decl(st, data)
        if d is None:
            # several declarators: plain scalars only
            tnode = st.child_by_field_name("type")
            for dn in st.children_by_field_name("declarator"):
                inner = dn.child_by_field_name("declarator") if dn.type == "init_declarator" else dn
                if tnode is None or inner is None or inner.type != "identifier":
                    raise _Reject
                self.scalars[node_text(inner, data)] = node_text(tnode, data)
            return
        if d.pointer:
            v = unparen(d.value) if d.value is not None else None
            base = v
            if v is not None and v.type == "binary_expression":
                op = v.child_by_field_name("operator")
                base = v.child_by_field_name("left")
                if op is None or node_text(op, data) != "+" or base is None:
                    raise _Reject
                base = unparen(base)
            if base is None or base.type != "identifier" or node_text(base, data) not in self.root:
                raise _Reject
            self.root[d.name] = self.root[node_text(base, data)]
        else:
            self.scalars[d.name] = d.type

    def _top_level(self, st: Node) -> None:
        """Executed by every lane: no memory writes, reads only of never-written memory."""
        data = self.data
        if st.type == "expression_statement":
            e = st.named_children[0] if st.named_child_count == 1 else None
            if e is None or e.type not in ("assignment_expression", "update_expression"):
                raise _Reject
            target = e.child_by_field_name("left" if e.type == "assignment_expression" else "argument")
            if target is None or unparen(target).type != "identifier":
                raise _Reject
        for n in walk(st):
            if n.type == "subscript_expression":
                self._top_read(n)
            elif n.type == "for_statement" or (
                    n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                raise _Reject

    def _loop(self, st: Node) -> _Loop:
        data = self.data
        fp = for_parts(st, data)
        if fp is None:
            raise _Reject
        d, cond, upd, body = fp.var, fp.cond, fp.update, fp.body
        assert d.value is not None
        j = d.name
        bound = upper_bound(cond, data, j)
        u = unparen(upd)
        ut = node_text(u, data).replace(" ", "")
        if bound is None or ut not in (f"{j}++", f"++{j}", f"{j}+=1", f"{j}={j}+1"):
            raise _Reject
        loop = _Loop(st, j)
        if not is_zero_literal(d.value, data):
            # any first index every lane computes alike: lanes start at start + lane
            if _varying(d.value, data) or j in _ids(d.value, data) or any(
                    n.type in ("call_expression", "subscript_expression", "assignment_expression",
                               "update_expression") for n in walk(d.value)):
                raise _Reject
            loop.start = node_text(d.value, data)
        locals_ = declared_names(body, data)
        outer_written = {w for w in written_names(body, data) if w not in locals_}
        assigned = written_names(body, data)
        for n in walk(body, ("declaration",)):
            dd = single_decl(n, data)
            if dd is not None and not dd.pointer and dd.value is not None and dd.name not in assigned:
                loop.aliases[dd.name] = dd.value
        if j in outer_written or outer_written & set(self.root):
            raise _Reject
        if _ids(d.value, data) & outer_written:
            raise _Reject
        if _ids(bound.limit, data) & outer_written:
            raise _Reject
        head = self._scan_head(body, outer_written)
        if head is not None:
            loop.scan, loop.scan_head, loop.scan_inc = head
            loop.scan_type = self.scalars[loop.scan]
            if any(loop.scan in written_names(x, data) for x in statements(body)[1:]) \
                    or loop.scan in _ids(loop.scan_inc, data):
                raise _Reject
            self._expr(loop.scan_inc, loop, outer_written - {loop.scan})
            self._body(body, loop, locals_, outer_written - {loop.scan}, skip=loop.scan_head.id)
            if loop.reductions:
                raise _Reject  # a scan loop runs in chunks of 32: keep other reductions out of it
            if outer_written != {loop.scan}:
                raise _Reject
            return loop
        self._body(body, loop, locals_, outer_written)
        accs = set(loop.reductions) | {r.index for r in loop.reductions.values() if r.index}
        if accs != outer_written:
            raise _Reject
        return loop

    def _scan_head(self, body: Node, outer_written: set[str]) -> tuple[str, Node, Node] | None:
        """``acc += E;`` opening a loop body whose other statements read ``acc``: a running (prefix) sum."""
        data = self.data
        sts = statements(body)
        first = sts[0] if sts else None
        e = first.named_children[0] if first is not None and first.type == "expression_statement" \
            and first.named_child_count == 1 else None
        if first is None or e is None or e.type != "assignment_expression":
            return None
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None or unparen(left).type != "identifier":
            return None
        acc = node_text(unparen(left), data)
        if acc not in outer_written or acc not in self.scalars \
                or resolved_type(self.ctx, self.scalars[acc]) not in SHUFFLE_TYPES:
            return None
        kind, inc = _reduction(node_text(op, data), right, acc, data)
        if kind != "sum+" or inc is None:
            return None
        if not any(acc in _ids(x, data) for x in sts[1:]):
            return None  # not read back: an ordinary sum (a reduction)
        return acc, first, inc

    def _body(self, node: Node, loop: _Loop, locals_: set[str], outer_written: set[str], skip: int = -1) -> None:
        sts = statements(node)
        for at, st in enumerate(sts):
            if st.id == skip:
                continue
            t = st.type
            if t == "if_statement" and at + 1 < len(sts) and self._online_pair(st, sts[at + 1], loop, outer_written):
                skip = sts[at + 1].id
                continue
            if t == "compound_statement":
                self._body(st, loop, locals_, outer_written)
            elif t == "if_statement" and (self._compare_assign(st, loop, outer_written)
                                          or self._extrema_chain(st, loop, outer_written)):
                continue
            elif t == "if_statement":
                c = condition_of(st)
                if c is None:
                    raise _Reject
                self._expr(c, loop, outer_written)
                self._body(st.child_by_field_name("consequence") or st, loop, locals_, outer_written)
                alt = st.child_by_field_name("alternative")
                if alt is not None:
                    inner = [c2 for c2 in alt.named_children if c2.type != "comment"]
                    if len(inner) != 1:
                        raise _Reject
                    self._body(inner[0], loop, locals_, outer_written)
            elif t == "declaration":
                if any(c.type == "storage_class_specifier" for c in st.children):
                    raise _Reject
                self._expr(st, loop, outer_written)
            elif t == "expression_statement":
                self._statement(st, loop, locals_, outer_written)
            elif t == "else_clause":
                self._body(st, loop, locals_, outer_written)
            else:
                raise _Reject

    def _statement(self, st: Node, loop: _Loop, locals_: set[str], outer_written: set[str]) -> None:
        data = self.data
        e = st.named_children[0] if st.named_child_count == 1 else None
        if e is None:
            raise _Reject
        at = atomic_target(e, data)
        if at is not None:
            # an atomic update (result unused): safe from any lane; its array is never read or plainly written
            root = self.root.get(at[0])
            if root is None or root in self.written_roots or root in self.scalar_roots:
                raise _Reject
            self.atomic_roots.add(root)
            for part in (at[1], at[2]):
                if part is not None:
                    self._expr(part, loop, outer_written)
            return
        if e.type == "update_expression":
            arg = e.child_by_field_name("argument")
            if arg is None:
                raise _Reject
            a = unparen(arg)
            if a.type == "identifier" and node_text(a, data) in locals_:
                return
            if a.type == "subscript_expression":
                self._access(a, loop, outer_written)
                return
            raise _Reject
        if e.type != "assignment_expression":
            raise _Reject
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None:
            raise _Reject
        lv = unparen(left)
        o = node_text(op, data)
        if lv.type == "subscript_expression":
            self._access(lv, loop, outer_written, write=o == "=")
            self._expr(right, loop, outer_written)
            return
        if lv.type != "identifier":
            raise _Reject
        name = node_text(lv, data)
        if name in locals_ and name not in outer_written:
            self._expr(right, loop, outer_written)
            return
        if name not in self.scalars or resolved_type(self.ctx, self.scalars[name]) not in SHUFFLE_TYPES:
            raise _Reject
        kind, operand = _reduction(o, right, name, data)
        if kind is None or operand is None:
            raise _Reject
        kind = _kind(kind)
        prev = loop.reductions.get(name)
        if prev is not None and prev.kind != kind:
            raise _Reject
        loop.reductions[name] = _Reduction(name, self.scalars[name], kind)
        self._expr(operand, loop, outer_written)

    def _online_pair(self, st: Node, nxt: Node, loop: _Loop, outer_written: set[str]) -> bool:
        """``if (V > M) { S = S * EXP(M - V); M = V; }`` then ``S += EXP(V - M);`` (also under
        ``if (V != -INFINITY)``): a running max carried with
        the sum of exponentials shifted by it (online softmax, ``single_pass``'s loop). Lanes keep their own
        pair and merge them with the same rescaling; V must read neither accumulator."""
        data = self.data
        cond = condition_of(st)
        cons = statements(st.child_by_field_name("consequence"))
        if cond is None or st.child_by_field_name("alternative") is not None or len(cons) != 2:
            return False
        cb = binary_parts(unparen(cond), data)
        if cb is None or cb[1] != ">" or unparen(cb[2]).type != "identifier":
            return False
        v, m = cb[0], node_text(unparen(cb[2]), data)
        vt = _canon_text(node_text(v, data))
        if nxt.type == "if_statement" and nxt.child_by_field_name("alternative") is None:
            # ``if (V != -INFINITY) S += EXP(V - M);``: single_pass skips masked elements (see there)
            guard, then = condition_of(nxt), statements(nxt.child_by_field_name("consequence"))
            if guard is None or len(then) != 1 \
                    or _canon_text(node_text(unparen(guard), data)) != f"{vt}!=-INFINITY":
                return False
            nxt = then[0]
        if any(x.type != "expression_statement" for x in (cons[0], cons[1], nxt)):
            return False
        a0, a1, a2 = (_canon_text(node_text(x, data)) for x in (cons[0], cons[1], nxt))
        rescale = re.fullmatch(r"([A-Za-z_]\w*)=\1\*(expf|__expf|exp)\(" + re.escape(f"{m}-{vt}") + r"\);", a0)
        if a1 != f"{m}={vt};" or rescale is None:
            return False
        s, exp = rescale.group(1), rescale.group(2)
        if a2 != f"{s}+={exp}({vt}-{m});" or s == m:
            return False
        for acc in (m, s):
            if acc not in self.scalars or acc not in outer_written or acc in loop.reductions \
                    or resolved_type(self.ctx, self.scalars[acc]) not in ("float", "double"):
                return False
        if {m, s} & _ids(v, data) or any(n.type in ("assignment_expression", "update_expression") for n in walk(v)):
            return False
        self._expr(v, loop, outer_written - {m, s})
        loop.reductions[m] = _Reduction(m, self.scalars[m], "online", index=s, index_type=self.scalars[s], exp=exp)
        return True

    def _extrema_chain(self, st: Node, loop: _Loop, outer_written: set[str]) -> bool:
        """``if (v > hi) hi = v; else if (v < lo) lo = v;`` (either order, any of < <= > >=): a running
        maximum and minimum of one value tracked in one sweep, the second tested only when the first
        did not fire.

        That equals two independent compare-and-assign updates (which lanes can split) when ``lo <= hi``
        holds throughout: then a value above ``hi`` is not below ``lo`` (and one equal to both changes
        nothing either way). It holds when both start from the same expression (textually equal, reading
        only memory the kernel never writes) and nothing else writes them: a max only grows, a min only
        shrinks. Each lane's partials start from those equal values, so the invariant holds per lane too.

        True when ``st`` is such a chain (both recorded as reductions), False when it is not of this form;
        raises when it is but the invariant cannot be shown."""
        data = self.data
        alt = st.child_by_field_name("alternative")
        inner = [c for c in alt.named_children if c.type != "comment"] if alt is not None else []
        second = inner[0] if len(inner) == 1 and inner[0].type == "if_statement" else None
        if second is None or second.child_by_field_name("alternative") is not None:
            return False
        branches = []
        for br in (st, second):
            view = self._compare_view(br, outer_written)
            if view is None:
                return False
            branches.append(view)
        (acc1, v1, g1), (acc2, v2, g2) = branches
        if acc1 == acc2 or g1 == g2 or v1 != v2:
            raise _Reject
        hi, lo = (acc1, acc2) if g1 else (acc2, acc1)
        inits = [self._top_init(name) for name in (hi, lo)]
        if inits[0] is None or inits[1] is None \
                or node_text(inits[0], data).replace(" ", "") != node_text(inits[1], data).replace(" ", ""):
            raise _Reject
        for n in walk(inits[0]):
            if n.type in ("call_expression", "assignment_expression", "update_expression") \
                    or (n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                raise _Reject
            if n.type == "subscript_expression":
                self._top_read(n)
        chain = {n.id for n in walk(st)}
        for n in walk(self.body):
            if n.id not in chain and n.type in ("assignment_expression", "update_expression") \
                    and written_names(n, data) & {hi, lo}:
                raise _Reject
        for br in (st, second):
            if not self._compare_assign(br, loop, outer_written, chained=True):
                raise _Reject
        return True

    def _compare_view(self, st: Node, outer_written: set[str]) -> tuple[str, str, bool] | None:
        """(accumulator, compared value, is a max) of ``if (v > acc) acc = v;`` (alternative ignored)."""
        data = self.data
        c = condition_of(st)
        cons = st.child_by_field_name("consequence")
        b = unparen(c) if c is not None else None
        if b is None or cons is None or b.type != "binary_expression":
            return None
        op_n, left, right = (b.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op_n is None or left is None or right is None or node_text(op_n, data) not in ("<", ">", "<=", ">="):
            return None
        op = node_text(op_n, data)
        if is_ident(right, data) and node_text(unparen(right), data) in outer_written:
            acc, value, greater = node_text(unparen(right), data), left, op in (">", ">=")
        elif is_ident(left, data) and node_text(unparen(left), data) in outer_written:
            acc, value, greater = node_text(unparen(left), data), right, op in ("<", "<=")
        else:
            return None
        sts = statements(cons)
        e = sts[0].named_children[0] if len(sts) == 1 and sts[0].type == "expression_statement" \
            and sts[0].named_child_count == 1 else None
        if e is None or e.type != "assignment_expression":
            return None
        lhs, aop, rhs = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        flat = node_text(unparen(value), data).replace(" ", "")
        if lhs is None or aop is None or rhs is None or node_text(aop, data) != "=" or not is_ident(lhs, data, acc) \
                or node_text(unparen(rhs), data).replace(" ", "") != flat:
            return None
        return acc, flat, greater

    def _top_init(self, name: str) -> Node | None:
        """The initial value of a local declared (once) with one at the kernel's top level."""
        found: list[tuple[Node, Node | None]] = []
        for n in walk(self.body, ("declaration",)):
            d = single_decl(n, self.data)
            if d is not None and d.name == name:
                found.append((n, d.value))
        if len(found) != 1 or found[0][0].parent is None or found[0][0].parent.type != "compound_statement":
            return None
        decl, value = found[0]
        p = decl.parent
        while p is not None and p.id != self.body.id:  # a compound statement of the top level (a guarded body)
            if p.type not in ("compound_statement", "if_statement"):
                return None
            p = p.parent
        return value

    def _compare_assign(self, st: Node, loop: _Loop, outer_written: set[str], chained: bool = False) -> bool:
        """``if (A > acc) acc = A;`` (a max; ``<`` a min) or ``if (A > acc) { acc = A; idx = J; }`` (an argmax:
        J an expression of the loop's index), the form a running maximum is usually written in.

        True when ``st`` is such an update (recorded as a reduction), False when it is some other ``if``."""
        data = self.data
        c = condition_of(st)
        cons = st.child_by_field_name("consequence")
        if c is None or cons is None or (st.child_by_field_name("alternative") is not None and not chained):
            return False
        parts = binary_parts(c, data)
        if parts is None:
            return False
        left, op, right = parts
        if op not in ("<", ">", "<=", ">="):
            return False
        acc, value, greater = None, None, False
        if unparen(right).type == "identifier" and node_text(unparen(right), data) in outer_written:
            acc, value, greater = node_text(unparen(right), data), left, op in (">", ">=")
        elif unparen(left).type == "identifier" and node_text(unparen(left), data) in outer_written:
            acc, value, greater = node_text(unparen(left), data), right, op in ("<", "<=")
        if acc is None or value is None or acc not in self.scalars:
            return False
        if resolved_type(self.ctx, self.scalars[acc]) not in SHUFFLE_TYPES:
            raise _Reject
        sets: dict[str, Node] = {}
        for a in statements(cons):
            e = a.named_children[0] if a.type == "expression_statement" and a.named_child_count == 1 else None
            if e is None or e.type != "assignment_expression":
                raise _Reject
            lhs, aop, rhs = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
            if lhs is None or aop is None or rhs is None or node_text(aop, data) != "=" \
                    or unparen(lhs).type != "identifier":
                raise _Reject
            sets[node_text(unparen(lhs), data)] = rhs
        flat = node_text(unparen(value), data).replace(" ", "")
        if acc not in sets or node_text(unparen(sets[acc]), data).replace(" ", "") != flat:
            raise _Reject
        self._expr(value, loop, outer_written)
        prev = loop.reductions.get(acc)
        typ = resolved_type(self.ctx, self.scalars[acc])
        if len(sets) == 1:
            kind = ("fmaxf" if greater else "fminf") if typ == "float" else \
                ("fmax" if greater else "fmin") if typ == "double" else ("max" if greater else "min")
            if prev is not None and prev.kind != kind:
                raise _Reject
            loop.reductions[acc] = _Reduction(acc, self.scalars[acc], kind)
            return True
        idx = next(n for n in sets if n != acc)
        if len(sets) != 2 or idx not in self.scalars or prev is not None or idx in loop.reductions \
                or resolved_type(self.ctx, self.scalars[idx]) not in SHUFFLE_TYPES:
            raise _Reject
        self._expr(sets[idx], loop, outer_written)
        loop.reductions[acc] = _Reduction(acc, self.scalars[acc], "argmax" if greater else "argmin", idx,
                                          self.scalars[idx], op in ("<", ">"), st.id)
        return True

    def _access(self, sub: Node, loop: _Loop, outer_written: set[str], *, write: bool = False) -> None:
        data = self.data
        parts = subscript_parts(sub, data)
        if parts is None:
            raise _Reject
        base, idx = unparen(parts[0]), parts[1]
        if base.type != "identifier" or node_text(base, data) not in self.root:
            raise _Reject
        name = node_text(base, data)
        root = self.root[name]
        if root in self.scalar_roots or root in self.atomic_roots:
            raise _Reject
        if _ids(idx, data) & outer_written or any(n.type == "subscript_expression" for n in walk(idx)) \
                or any(n.type == "call_expression" for n in walk(idx)):
            raise _Reject
        if root in self.written_roots:
            eff = loop.aliases.get(node_text(unparen(idx), data), idx)
            if not _lane_index(eff, data, loop.var):
                raise _Reject
            key = (name, node_text(unparen(eff), data).replace(" ", ""))
            if self.written_access.setdefault(root, key) != key:
                raise _Reject
            if _ids(eff, data) & self.outer_vars:
                self.outer_indexed.add(root)
            if not write:
                self.read_roots.add(root)
        self._expr(idx, loop, outer_written)

    def _expr(self, node: Node, loop: _Loop, outer_written: set[str]) -> None:
        """Reads inside a loop: subscripts go through ``_access``; no reads of values the loop accumulates."""
        data = self.data
        for n in walk(node, cut=lambda n: n.type == "subscript_expression"):
            if n.type == "subscript_expression":
                self._access(n, loop, outer_written)
            elif (n.type == "identifier" and node_text(n, data) in outer_written) or n.type == "pointer_expression":
                raise _Reject
            elif n.type in ("assignment_expression", "update_expression") and n != node:
                raise _Reject  # assignments inside expressions: keep it simple


#: atomics whose result a statement may discard; the target is then only ever updated atomically
ATOMICS = frozenset({"atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicAnd", "atomicOr", "atomicXor"})


def atomic_target(e: Node, data: bytes) -> tuple[str, Node | None, Node] | None:
    """(pointer name, index or None, value) of ``atomicOp(&p[i], v)``, ``atomicOp(p + i, v)``, ``atomicOp(p, v)``."""
    if e.type != "call_expression":
        return None
    fn, args = e.child_by_field_name("function"), e.child_by_field_name("arguments")
    if fn is None or args is None or node_text(fn, data) not in ATOMICS:
        return None
    xs = [a for a in args.named_children if a.type != "comment"]
    if len(xs) != 2:
        return None
    t = unparen(xs[0])
    if t.type == "pointer_expression" and node_text(t, data).lstrip().startswith("&"):
        arg = t.child_by_field_name("argument")
        parts = subscript_parts(unparen(arg), data) if arg is not None else None
        if parts is None or unparen(parts[0]).type != "identifier":
            return None
        return node_text(unparen(parts[0]), data), parts[1], xs[1]
    if t.type == "identifier":
        return node_text(t, data), None, xs[1]
    if t.type == "binary_expression":
        op, a, b = (t.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op is not None and a is not None and b is not None and node_text(op, data) == "+" \
                and unparen(a).type == "identifier":
            return node_text(unparen(a), data), b, xs[1]
    return None


def _varying(node: Node, data: bytes) -> bool:
    """Does code use a thread coordinate the re-mapping changes (threadIdx, blockDim, blockIdx.x, gridDim.x)?

    ``blockIdx.y``/``.z`` and ``gridDim.y``/``.z`` (a batch index on the grid's y axis) are the same in
    the original and the rewrite, whose launch keeps the grid's y and z."""
    for n in walk(node):
        if n.type == "identifier" and node_text(n, data) in _COORDS:
            p = n.parent
            if p is None or p.type != "field_expression" or not _yz(p, data):
                return True
    return False


def _yz(n: Node, data: bytes) -> bool:
    """``blockIdx.y``, ``blockIdx.z``, ``gridDim.y`` or ``gridDim.z``."""
    arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
    return (n.type == "field_expression" and arg is not None and fld is not None
            and node_text(arg, data) in ("blockIdx", "gridDim") and node_text(fld, data) in ("y", "z"))


def _split_guard(cond: Node, data: bytes, row: str, op: str,
                 bound_of: Callable[[Node, bytes, str], Bound | None]) -> tuple[Bound | None, list[Node]]:
    """Split a guard into its bound on ``row`` and the other terms of its ``op`` chain (``||`` for an exit,
    ``&&`` for a guarded body). The other terms must not mention ``row``: they are the same for every lane
    of a row (the guard as a whole is uniform per warp either way)."""
    terms: list[Node] = []
    stack = [unparen(cond)]
    while stack:
        n = stack.pop()
        o = n.child_by_field_name("operator") if n.type == "binary_expression" else None
        if o is not None and node_text(o, data) == op:
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or right is None:
                raise _Reject
            stack.extend((unparen(right), unparen(left)))
        else:
            terms.append(n)
    bound: Bound | None = None
    others: list[Node] = []
    for t in terms:
        b = bound_of(t, data, row) if bound is None else None
        if b is not None:
            bound = b
        else:
            others.append(t)
    return bound, others


def strided_in_loop(shape: _Shape, data: bytes) -> bool:
    """Some loop read is ``E(j) + col`` (strided in j, contiguous across threads); none is contiguous in j."""
    col = shape.row.name
    seen = False
    for lp in shape.loops:
        for n in walk(lp.node, ("subscript_expression",)):
            parts = subscript_parts(n, data)
            if parts is None:
                return False
            idx = parts[1]
            if _lane_index(idx, data, lp.var):
                return False
            if lp.var in _ids(idx, data) and _lane_index(idx, data, col):
                seen = True
    return seen


def _lane_index(idx: Node, data: bytes, j: str) -> bool:
    """``j``, ``E + j`` or ``j + E`` with E free of j: distinct j give distinct elements."""
    n = unparen(idx)
    if is_ident(n, data, j):
        return True
    if n.type != "binary_expression":
        return False
    op = n.child_by_field_name("operator")
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if op is None or node_text(op, data) != "+" or left is None or right is None:
        return False
    if is_ident(right, data, j):
        return j not in _ids(left, data)
    if is_ident(left, data, j):
        return j not in _ids(right, data)
    return False


def _reduction(op: str, right: Node, acc: str, data: bytes) -> tuple[str | None, Node | None]:
    """(kind, the other operand) of ``acc op= e`` / ``acc = acc + e`` / ``acc = f(acc, e)``."""
    if op in ("+=", "-="):
        return "sum" + op[0], right
    if op != "=":
        return None, None
    r = unparen(right)
    if r.type == "binary_expression":
        bop = r.child_by_field_name("operator")
        a, b = r.child_by_field_name("left"), r.child_by_field_name("right")
        if bop is not None and a is not None and b is not None:
            if node_text(bop, data) == "+" and is_ident(a, data, acc):
                return "sum+", b
            if node_text(bop, data) == "+" and is_ident(b, data, acc):
                return "sum+", a
            if node_text(bop, data) == "-" and is_ident(a, data, acc):
                return "sum-", b
    if r.type == "call_expression":
        fn = r.child_by_field_name("function")
        args = r.child_by_field_name("arguments")
        if fn is not None and args is not None and node_text(fn, data) in MINMAX_FUNCS:
            xs = [c for c in args.named_children if c.type != "comment"]
            if len(xs) == 2:
                if is_ident(xs[0], data, acc):
                    return node_text(fn, data), xs[1]
                if is_ident(xs[1], data, acc):
                    return node_text(fn, data), xs[0]
    return None, None


def _kind(kind: str) -> str:
    """Reductions of one accumulator may mix ``+=`` and ``-=``: both are sums."""
    return "sum" if kind.startswith("sum") else kind


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = analysis(ctx)
    return (got[1], got[0].data) if got is not None else None


def analysis(ctx: RuleContext) -> tuple[_Analysis, _Shape] | None:
    """The analysis of the candidate's kernel and the row shape it found (column_split reads both), or None."""
    got = kernel_body(ctx)
    if ctx.cand_kernel is None or got is None:
        return None
    a = _Analysis(ctx, *got)
    try:
        shape = a.find()
        a.check(shape)
    except _Reject:
        return None
    return a, shape


def _reduction_kinds_ok(shape: _Shape) -> bool:
    return all(r.kind in ("sum", "argmax", "argmin", "online") or r.kind in MINMAX_FUNCS
               for lp in shape.loops for r in lp.reductions.values())


def _has_arg(shape: _Shape) -> bool:
    """Arg-reductions and scans combine inside a warp only (no block-wide variant); online pairs merge
    across warps too."""
    return any(r.index and r.kind != "online" for lp in shape.loops for r in lp.reductions.values()) \
        or any(lp.scan for lp in shape.loops)


def _combine(kind: str, a: str, b: str) -> str:
    return f"{a} + {b}" if kind == "sum" else f"{kind}({a}, {b})"


class WarpPerRow(StructuralRule[_Shape]):
    family = "warp_per_row"
    structural = True
    motivated_by = ("WF111", "warp_per_row", "WF103", "coalesce")

    def _rows(self, ctx: RuleContext, shape: _Shape, data: bytes) -> tuple[str, bool] | None:
        """The number of rows in spec terms, and whether it is exact (else: an upper bound from the launch)."""
        lim = scalar_value_expr(ctx, shape.bound.limit, data) if shape.bound is not None else None
        if lim is not None and shape.bound is not None:
            return (f"({lim}) + 1" if shape.bound.inclusive else lim), True
        if shape.flat and not shape.uses_yz and len(ctx.grid) == 2 and is_1d(ctx, ctx.block):
            return f"({ctx.grid[0]}) * ({ctx.grid[1]}) * ({ctx.block[0]})", False
        if not ((is_1d(ctx, ctx.grid) or shape.uses_yz) and is_1d(ctx, ctx.block)):
            return None
        return f"({ctx.grid[0]}) * ({ctx.block[0]})", False

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        if not _reduction_kinds_ok(shape) or self._short_rows(ctx, shape, data) or strided_in_loop(shape, data):
            return {}  # a strided loop over a contiguous row index is column_split's: lanes would not coalesce
        rows = self._rows(ctx, shape, data)
        if rows is None:
            return {}
        rows_expr, exact = rows
        yz = tuple(ctx.grid[1:]) if shape.uses_yz else ()
        few = self._few_rows(ctx, rows_expr)
        vectors = vector_plan(ctx, shape, data) is not None
        # few rows: the largest blocks per row first (they are what fills the GPU), warps per row last
        order = sorted(VARIANTS, key=lambda p: -VARIANTS[p][0] if VARIANTS[p][1] == 0 else 0) if few \
            else list(VARIANTS)
        vec: dict[str, Launch] = {}
        staged: dict[str, Launch] = {}
        out: dict[str, Launch] = {}
        for param in order:
            threads, rpb = VARIANTS[param]
            if rpb == 0:
                if not exact or _has_arg(shape) or not self._long_rows(ctx, shape, data, max(1024, 2 * threads)):
                    continue
                if threads > 256 and not self._few_rows(ctx, rows_expr, threads // 2):
                    continue  # a block of T threads per row only when blocks of T / 2 leave SMs idle
                grid: tuple[str, ...] = (rows_expr, *yz)
            else:
                grid = (f"cdiv({rows_expr}, {rpb})", *yz)
            block = (str(threads),)
            if launch_ok(ctx, grid, block):
                if param in VECTOR and vectors:
                    vec[f"{param}_vec"] = Launch(grid, block)
                smem = self._cache_smem(ctx, shape, data, max(rpb, 1)) if param in CACHED else None
                if smem is not None:
                    staged[f"{param}_smem"] = Launch(grid, block, smem)
                out[param] = Launch(grid, block)
        # the mappings with vectors first, then with a staged row, then as they are: the first two move the
        # same rows in fewer instructions or with fewer global reads (a misaligned row runs as is), and a
        # search that tries only the first few of a family then still tries each mapping and each kind
        return {**vec, **staged, **out}

    @staticmethod
    def _cache_smem(ctx: RuleContext, shape: _Shape, data: bytes, rows: int) -> str | None:
        """The dynamic shared memory (spec terms) of ``rows`` rows of every cache, each region rounded to
        16 bytes; None without caches, when L is unknown in spec terms or it exceeds ``MAX_SMEM``."""
        if not shape.cache:
            return None
        lim = scalar_value_expr(ctx, shape.cache[0].limit_node, data, shape.defs)
        es = envs(ctx)
        if lim is None or es is None:
            return None
        smem = f"{rows} * ({' + '.join(f'cdiv(({lim}) * {c.size}, 16) * 16' for c in shape.cache)})"
        for env in es:
            v = eval_expr(smem, env)
            if not isinstance(v, int) or v < 1 or v > MAX_SMEM:
                return None
        return smem

    @staticmethod
    def _few_rows(ctx: RuleContext, rows_expr: str, threads: int = 256) -> bool | None:
        """Do the rows, ``threads`` per row, fill fewer than the threads the GPU keeps resident (None: the
        row count is unknown at the spec size)?"""
        try:
            n = eval_expr(rows_expr, size_env(ctx))
        except ValueError:
            return None
        if not isinstance(n, int):
            return None
        return n * threads < ctx.sm_count * THREADS_PER_SM

    @staticmethod
    def _trip(ctx: RuleContext, lp: _Loop, data: bytes, defs: dict[str, Node] | None = None) -> int | None:
        """The loop's bound at the spec size when it is a known scalar (None: unknown)."""
        cond = lp.node.child_by_field_name("condition")
        b = upper_bound(cond, data, lp.var) if cond is not None else None
        lim = scalar_value_expr(ctx, b.limit, data, defs) if b is not None else None
        if lim is None:
            return None
        try:
            v = eval_expr(lim, size_env(ctx))
        except ValueError:
            return None
        return v if isinstance(v, int) else None

    @classmethod
    def _long_rows(cls, ctx: RuleContext, shape: _Shape, data: bytes, least: int = 1024) -> bool:
        """A block per row pays off for rows of at least 1024 elements (when the loop bound is known), a
        block of T threads for loops of at least ``least`` (2T: every thread gets two elements or more)."""
        return all((t := cls._trip(ctx, lp, data, shape.defs)) is not None and t >= least for lp in shape.loops)

    @classmethod
    def _short_rows(cls, ctx: RuleContext, shape: _Shape, data: bytes) -> bool:
        """Every loop is known to run fewer than 32 times (a 9-tap filter): most lanes of a warp would idle."""
        return all((t := cls._trip(ctx, lp, data, shape.defs)) is not None and t < 32 for lp in shape.loops)

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        base = param.removesuffix("_smem").removesuffix("_vec")
        plan = vector_plan(ctx, shape, data) if param.endswith("_vec") else None
        if param.endswith("_vec") and plan is None:
            return None
        return _generate(shape, data, block=VARIANTS[base][1] == 0, cached=param.endswith("_smem"), vector=plan)

    def rationale(self, shape: _Shape, param: str) -> str:
        base = param.removesuffix("_smem").removesuffix("_vec")
        threads, rpb = VARIANTS[base]
        accs = sorted({r.acc for lp in shape.loops for r in lp.reductions.values()})
        red = f"; reductions of {', '.join(accs)} by shuffles" if accs else ""
        staged = f"; the row of {', '.join(c.name for c in shape.cache)} read once into shared memory, " \
            "which the later passes read" if param.endswith("_smem") else ""
        if param.endswith("_vec"):
            staged = "; each lane moves consecutive elements in 16-byte vectors where the rows are aligned"
        if rpb:
            return (f"one warp per row ({rpb} rows per {threads}-thread block), lanes stride the row by 32"
                    f"{red}{staged}")
        return f"one {threads}-thread block per row, threads stride the row{red} and shared memory{staged}"


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


@dataclass
class _VKey:
    """One array row a vectorized loop moves in vectors: ``name[E + j]`` for its one offset E."""

    name: str
    #: a subscript of the key (the address template: j -> the chunk's first element)
    template: Node
    type: str
    size: int
    #: subscripts read through the vector (all of them for a written key)
    subs: list[int] = field(default_factory=list)
    read: bool = False
    written: bool = False


def vector_plan(ctx: RuleContext, shape: _Shape, data: bytes) -> tuple[dict[int, list[_VKey]], int] | None:
    """Split loops whose lanes can take W consecutive elements at a time: loop number -> the rows moved in
    vectors, and W (16 bytes of the widest element, at most 8 elements); None when no loop can.

    A loop qualifies when it starts at 0 with ``j < L``, reduces only sums, min/max or online pairs (their
    order within a lane is free; arg-reductions and scans keep theirs), and every store in it is an
    unconditional ``q[E + j] = ...`` / ``op=`` (the vector store writes all W elements: each must have been
    written), and no array it touches is both written and read by the kernel (a lane must read back only
    what it wrote itself, and chunks of W map elements to lanes otherwise than the loops left as they are).
    A read-only row is moved in vectors when some read of ``p[E + j]`` is unconditional (the original reads
    every element then). Vectors are used only where every row's address is
    aligned to its vector size at run time; otherwise, and for the ``L % W`` elements past the last whole
    vector, the loop runs as before."""
    got = analysis(ctx)
    k = ctx.cand_kernel
    if got is None or k is None:
        return None
    a, _ = got
    params = {p.name: p for p in k.params}
    out: dict[int, list[_VKey]] = {}
    widest = 0
    for n, lp in enumerate(shape.loops):
        if lp.scan or any(r.index and r.kind != "online" for r in lp.reductions.values()) \
                or _canon_text(lp.start) != "0":
            continue
        fp = for_parts(lp.node, data)
        bp = binary_parts(unparen(fp.cond), data) if fp is not None else None
        if fp is None or bp is None or bp[1] != "<" or not is_ident(unparen(bp[0]), data, lp.var):
            continue
        keys: dict[tuple[str, str], _VKey] = {}
        ok = True
        for sub in walk(fp.body, ("subscript_expression",)):
            parts = subscript_parts(sub, data)
            base = unparen(parts[0]) if parts is not None else None
            name = node_text(base, data) if base is not None and base.type == "identifier" else ""
            root = a.root.get(name)
            if parts is None or root is None or root in a.atomic_roots:
                continue
            if root in a.read_roots:
                # written in one loop and read in another: each element must stay with the lane that wrote
                # it, and a loop in vectors maps elements to lanes otherwise than one without
                ok = False
                break
            written = _store_target(sub)
            lane = _lane_index(parts[1], data, lp.var)
            if not lane:
                if written or root in a.written_roots:
                    ok = False  # a store (or a read of a written row) the vector form does not follow
                continue
            key = (name, _renamed_canon(parts[1], data, lp.var))
            prm = params.get(root)
            size = ELEM_BYTES.get(resolved_type(ctx, prm.type), 0) if prm is not None and prm.pointer_depth == 1 \
                and not prm.array_dims else 0
            vk = keys.setdefault(key, _VKey(name, sub, prm.type if prm is not None else "", size))
            vk.subs.append(sub.id)
            up = sub.parent
            if up is not None and up.type == "pointer_expression":
                vk.size = 0  # its address is taken: not an element the buffer can stand for
            if written:
                vk.written = True
                vk.read = vk.read or written == "update"
                if not _unconditional(sub, lp.node, data):
                    ok = False
            elif _unconditional(sub, lp.node, data) or root in a.written_roots:
                vk.read = True
        chosen = [vk for vk in keys.values() if vk.read or vk.written]
        if not ok or not chosen or any(not vk.size for vk in chosen if vk.written) \
                or not any(vk.size for vk in chosen if vk.read):
            continue
        # conditional reads of a read-only row with no unconditional one stay scalar: drop those keys
        chosen = [vk for vk in chosen if vk.size]
        out[n] = chosen
        widest = max([widest, *(vk.size for vk in chosen)])
    if not out:
        return None
    return out, min(8, 16 // widest)


def _store_target(sub: Node) -> str:
    """"store" when ``sub`` is the target of ``=``, "update" for ``op=``/``++``, "" when it is read."""
    up = sub.parent
    while up is not None and up.type == "parenthesized_expression":
        sub, up = up, up.parent
    if up is None:
        return ""
    if up.type == "assignment_expression" and up.child_by_field_name("left") == sub:
        op = up.child_by_field_name("operator")
        return "store" if op is not None and op.type == "=" else "update"
    if up.type == "update_expression":
        return "update"
    return ""


def _vector_loop(lp: _Loop, n: int, data: bytes, block: bool, parts: dict[str, str], flags: dict[int, str],
                 keys: list[_VKey], width: int) -> list[str]:
    """The split loop in chunks of ``width`` consecutive elements per lane (vector loads, the body once per
    element from the buffers, vector stores) when every row is aligned, then the remaining elements (all
    of them when a row is not aligned) as before."""
    fp = for_parts(lp.node, data)
    assert fp is not None
    d, cond, body = fp.var, fp.cond, fp.body
    bp = binary_parts(unparen(cond), data)
    assert bp is not None
    limit = node_text(bp[2], data)
    lane = "threadIdx.x" if block else f"{PREFIX}lane"
    stride = "blockDim.x" if block else "32"
    c, u, nv, al = f"{PREFIX}ch{n}", f"{PREFIX}u", f"{PREFIX}nv{n}", f"{PREFIX}al{n}"
    first = f"({d.type})({width} * {c})"
    checks: list[str] = []
    checks_static: list[str] = []
    loads: list[str] = []
    stores: list[str] = []
    subs: dict[int, str] = {}
    for k, vk in enumerate(keys):
        vt = VEC_TYPES[width * vk.size]
        at = f"&{_rename_ids(vk.template, data, {lp.var: '0'})}"
        checks.append(f"(reinterpret_cast<size_t>({at}) & {width * vk.size - 1}) == 0")
        addr = f"&{_rename_ids(vk.template, data, {lp.var: first})}"
        v, e = f"{PREFIX}v{n}_{k}", f"{PREFIX}e{n}_{k}"
        if vk.read:
            loads.append(f"{vt} {v} = *reinterpret_cast<const {vt}*>({addr});")
        else:
            loads.append(f"{vt} {v};")
        loads.append(f"{vk.type}* {e} = reinterpret_cast<{vk.type}*>(&{v});")
        # the width was chosen for the spec's element type: another instantiation must not compile
        checks_static.append(f"static_assert(sizeof({vk.type}) * {width} == sizeof({vt}), "
                             f"\"{width} elements of {vk.type} per vector\");")
        if vk.written:
            stores.append(f"*reinterpret_cast<{vt}*>({addr}) = {v};")
        subs.update({sid: f"{e}[{u}]" for sid in vk.subs})
    vec_body = flush(_rename_body(body, data, parts, flags, subs), body, data)
    tail_body = flush(_rename_body(body, data, parts, flags), body, data)
    inner = "\n".join([
        *loads,
        "#pragma unroll",
        f"for (int {u} = 0; {u} < {width}; ++{u}) {{",
        f"    {d.type} {lp.var} = {first} + {u};",
        indent(vec_body, "    "),
        "}",
        *stores,
    ])
    return [
        *dict.fromkeys(checks_static),
        f"const bool {al} = {' && '.join(checks)};",
        f"const {d.type} {nv} = {al} ? ({limit}) / {width} : 0;  // whole vectors of {width} elements",
        f"for ({d.type} {c} = {lane}; {c} < {nv}; {c} += {stride}) {{",
        indent(inner, "    "),
        "}",
        f"for ({d.type} {lp.var} = {nv} * {width} + {lane}; {node_text(cond, data)}; {lp.var} += {stride}) "
        f"{tail_body}",
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


def _simple_combine(r: _Reduction, p: str, n: int, block: bool, decls: list[str]) -> list[str]:
    """A sum's or min/max's lane partials combined (a butterfly, then the warps' results through shared
    memory for a block) and joined to the accumulator."""
    lines = [f"for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{\n"
             f"    {p} = {_combine(r.kind, p, f'__shfl_xor_sync({_FULL}, {p}, {PREFIX}o)')};\n}}"]
    if block:
        sh = f"{PREFIX}red{n}_{r.acc}"
        decls.append(f"__shared__ {r.type} {sh}[32];")
        lines.append(f"if ({PREFIX}lane == 0) {{\n    {sh}[{PREFIX}warp] = {p};\n}}")
        lines.append("__syncthreads();")
        lines.append(f"{p} = {sh}[0];")
        lines.append(f"for (int {PREFIX}w = 1; {PREFIX}w < {PREFIX}nwarps; ++{PREFIX}w) {{\n"
                     f"    {p} = {_combine(r.kind, p, f'{sh}[{PREFIX}w]')};\n}}")
    lines.append(f"{r.acc} = {r.acc} + {p};" if r.kind == "sum" else f"{r.acc} = {p};")
    return lines


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


def _rename_ids(node: Node, data: bytes, mapping: dict[str, str]) -> str:
    def rep(n: Node) -> str | None:
        if n.type == "identifier":
            return mapping.get(node_text(n, data))
        return None

    return render(node, data, rep)


def _rename_body(node: Node, data: bytes, mapping: dict[str, str], flags: dict[int, str],
                 subs: dict[int, str] | None = None) -> str:
    """The loop body with accumulators renamed to the lane's partials; an arg-reduction's update also
    raises the lane's flag (a pair found in the data beats the start value on ties); subscripts in ``subs``
    are replaced whole (a row cache's reads)."""
    def rep(n: Node) -> str | None:
        if subs and n.id in subs:
            return subs[n.id]
        if n.type == "identifier":
            return mapping.get(node_text(n, data))
        if n.parent is not None and n.parent.id in flags and n == n.parent.child_by_field_name("consequence"):
            inner = "\n".join(_rename_body(c, data, mapping, flags, subs) for c in statements(n))
            return f"{{\n{inner}\n{flags[n.parent.id]} = 1;\n}}"
        return None

    return render(node, data, rep)


def _online_merge(r: _Reduction, pm: str, ps: str, om: str, os_: str) -> list[str]:
    """Merge the pair (om, os_) into (pm, ps): the smaller max's sum is rescaled to the larger one (equal
    maxima add as they are, so two partials that saw nothing but their start value do not meet
    exp(-inf + inf))."""
    e = r.exp
    return [
        f"if ({om} > {pm}) {{",
        f"    {ps} = {ps} * {e}({pm} - {om}) + {os_};",
        f"    {pm} = {om};",
        f"}} else if ({om} == {pm}) {{",
        f"    {ps} += {os_};",
        "} else {",
        f"    {ps} += {os_} * {e}({om} - {pm});",
        "}",
    ]


def _online_combine(r: _Reduction, pm: str, ps: str, n: int = 0, block: bool = False,
                    decls: list[str] | None = None) -> list[str]:
    """Butterfly over (max, sum relative to it) with ``_online_merge``. Both lanes of a pair compute the same
    sum (the addition commutes), so every lane ends with the warp's pair; for a block, lane 0 of each warp
    posts it to shared memory and every thread merges the warps' pairs in warp order (all threads alike).
    The row's pair then joins the accumulators the loop started from (its max is at least theirs: every
    partial started from it)."""
    o, om, os_ = f"{PREFIX}o", f"{PREFIX}om", f"{PREFIX}os"
    e = r.exp
    lines = [
        f"for (int {o} = 16; {o} > 0; {o} >>= 1) {{",
        f"    {r.type} {om} = __shfl_xor_sync({_FULL}, {pm}, {o});",
        f"    {r.index_type} {os_} = __shfl_xor_sync({_FULL}, {ps}, {o});",
        *("    " + x for x in _online_merge(r, pm, ps, om, os_)),
        "}",
    ]
    if block:
        assert decls is not None
        shm, shs, w = f"{PREFIX}red{n}_{r.acc}", f"{PREFIX}red{n}_{r.index}", f"{PREFIX}w"
        decls.append(f"__shared__ {r.type} {shm}[32];")
        decls.append(f"__shared__ {r.index_type} {shs}[32];")
        lines += [
            f"if ({PREFIX}lane == 0) {{",
            f"    {shm}[{PREFIX}warp] = {pm};",
            f"    {shs}[{PREFIX}warp] = {ps};",
            "}",
            "__syncthreads();",
            f"{pm} = {shm}[0];",
            f"{ps} = {shs}[0];",
            f"for (int {w} = 1; {w} < {PREFIX}nwarps; ++{w}) {{",
            f"    {r.type} {om} = {shm}[{w}];",
            f"    {r.index_type} {os_} = {shs}[{w}];",
            *("    " + x for x in _online_merge(r, pm, ps, om, os_)),
            "}",
        ]
    return [
        *lines,
        f"if ({pm} > {r.acc}) {{",
        f"    {r.index} = {r.index} * {e}({r.acc} - {pm});",
        f"    {r.acc} = {pm};",
        "}",
        f"{r.index} += {ps};",
    ]


def _arg_combine(r: _Reduction, p: str, pj: str, pf: str) -> list[str]:
    """Butterfly over (value, flag, index): a larger (argmin: smaller) value wins; on equal values a found
    pair beats the start value, then the first (strict compare) or last index wins, as in serial order."""
    better = ">" if r.kind == "argmax" else "<"
    order = "<" if r.first else ">"
    o = f"{PREFIX}o"
    return [
        f"for (int {o} = 16; {o} > 0; {o} >>= 1) {{",
        f"    {r.type} {PREFIX}ob = __shfl_xor_sync({_FULL}, {p}, {o});",
        f"    {r.index_type} {PREFIX}oj = __shfl_xor_sync({_FULL}, {pj}, {o});",
        f"    int {PREFIX}of = __shfl_xor_sync({_FULL}, {pf}, {o});",
        f"    if ({PREFIX}ob {better} {p} || ({PREFIX}ob == {p} && {PREFIX}of"
        f" && (!{pf} || {PREFIX}oj {order} {pj}))) {{",
        f"        {p} = {PREFIX}ob;",
        f"        {pj} = {PREFIX}oj;",
        f"        {pf} = {PREFIX}of;",
        "    }",
        "}",
        f"{r.acc} = {p};",
        f"{r.index} = {pj};",
    ]


register(WarpPerRow())
