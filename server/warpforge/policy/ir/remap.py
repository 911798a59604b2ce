"""Binding a kernel's contiguous serial loop to the lanes of a warp: legality on the IR summary.

Why: "one thread per outer item, a serial loop over the item's contiguous elements" (a matrix-vector
product, a row reduction, a CSR row, a dot product per output) makes a warp's 32 threads read 32 rows at
a large stride: each load touches 32 cache lines. Giving each item a whole warp, its lanes splitting the
loop at stride 1, makes the same loads coalesced; the scalar accumulators become per-lane partials that a
butterfly of shuffles combines. Whether that is *legal* is a question about the kernel's accesses, not its
spelling, so it is answered here from the lowered text's ``Summary`` (``summary.summarize``):

* the parallel index space is one 1-D item index ``blockIdx.x*blockDim.x + threadIdx.x`` (guarded,
  early exit or unguarded), and no other use of ``threadIdx.x``/``blockIdx.x``: the item of a thread is
  then exactly the item of a warp once the index is divided by 32 (with ``blockDim.x`` a multiple of 32);
* exactly one serial loop runs over the item (a ``for`` at the top of the body, step 1), with no jump out
  of it and no loop after it: the work after it runs once per item, on lane 0;
* the loop writes no memory and no variable declared outside it except its accumulators, each a scalar
  updated only as ``acc += e`` or ``acc = max/min(acc, e)`` and their longer spellings (an associative
  combine a shuffle can do; ``accumulator_update`` is the one reader of them for every remap);
* no parameter the kernel writes is read in the loop (no lane reads what another thread writes), and
  nothing before the loop writes memory (every lane runs it);
* no shared memory, barrier, shuffle or atomic (threads of a block would see a different mapping), and no
  read of ``gridDim.x`` (the launch multiplies it by 32);
* profitable: some access in the loop has the loop counter at stride 1 and ``threadIdx.x`` at a stride
  other than 0 or 1, or the loop starts at a per-item offset (``for (j = rowptr[i]; ...) val[j]``, a CSR
  row): neighbouring threads read far apart, which the lanes then read contiguously.

Each decline is a ``NotLegal`` with the reason in words and its line, for the funnel and a "why not" hint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import misparsed_assignment, unparen, walk
from .pass_private import vector_members
from .passes import Kernel, declared_names, statements
from .summary import Access, Summary, index_text, params_of

#: combine functions an accumulator may use besides ``+=``: name -> "max" | "min"
MINMAX = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}

#: scalar types a warp shuffle moves (``__shfl_xor_sync`` has overloads for the half and bfloat16 types, with
#: their ``+`` on the device, on sm_80 and newer: the builds' architecture)
SHUFFLE_TYPES = frozenset({"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long",
                           "int32_t", "uint32_t", "int64_t", "uint64_t", "long", "unsigned long",
                           "__half", "half", "__half2", "half2", "__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162",
                           "nv_bfloat162"})

#: a sum's zero where ``acc = 0`` does not convert (the pairs have no constructor from an int)
_ZEROS = {"__half2": "__float2half2_rn(0.0f)", "half2": "__float2half2_rn(0.0f)",
          "__nv_bfloat162": "__float2bfloat162_rn(0.0f)", "nv_bfloat162": "__float2bfloat162_rn(0.0f)"}


def zero_of(type_: str, template_args: Mapping[str, str] | None = None) -> str:
    """The expression a partial sum of ``type_`` (as written, a template parameter resolved) starts from."""
    t = " ".join((template_args or {}).get(type_, type_).split())
    return _ZEROS.get(t, "0")


def shuffle_decline(name: str, written: str, targs: Mapping[str, str], line: int) -> NotLegal | None:
    """Why the accumulator ``name`` of type ``written`` cannot be combined by a warp shuffle (None when it can):
    the type is read through the spec's template instantiation (``Dtype`` -> ``float``)."""
    resolved = " ".join(targs.get(written, written).split())
    if resolved in SHUFFLE_TYPES:
        return None
    shown = f"`{written}` (`{resolved}` in the spec's instantiation)" if resolved != written else f"`{written}`"
    what = ("a template parameter the spec does not instantiate with a scalar" if written in targs or written == "?"
            else f"a vector type: each of its members ({', '.join(vector_members(resolved, {}))}) would need a "
                 "shuffle and a combine of its own, which the remaps do not write" if vector_members(resolved, {})
            else "not a 4- or 8-byte scalar or a half/bfloat16 (a struct would need a shuffle per member)")
    return NotLegal(f"the accumulator `{name}` has type {shown}, which a warp shuffle does not move: {what}", line)

#: the item index every thread computes: ``blockIdx.x*blockDim.x + threadIdx.x``
_ITEM = {"blockIdx.x": "blockDim.x", "threadIdx.x": "1"}

#: the extra terms of a 2-D or 3-D grid flattened by hand (``(blockIdx.x + blockIdx.y*gridDim.x)*blockDim.x +
#: threadIdx.x``, so that more items fit than the grid's y limit allows): the block's index in the grid, in
#: x-major order, times the block's x size, with each coordinate's factors in any order
_FLAT_TERMS = ({"blockIdx.y": ("blockDim.x", "gridDim.x")},
               {"blockIdx.y": ("blockDim.x", "gridDim.x"), "blockIdx.z": ("blockDim.x", "gridDim.x", "gridDim.y")})


def is_item(index: Mapping[str, str]) -> bool:
    """Whether an affine index is the thread's global 1-D index: ``blockIdx.x*blockDim.x + threadIdx.x``, or
    that of a 2-D/3-D grid flattened by hand.

    Why the flattened form is the same item to a remap: the remaps scale only the grid's x size (by 32 for a
    warp per item, by ``blockDim.x/X`` for an (X, R) block), and ``gridDim.x`` then grows by the same factor as
    the block's x size shrinks (or the threads per item grow), so ``(blockIdx.x + blockIdx.y*gridDim.x) *
    blockDim.x`` numbers the new threads (or warps) exactly as the old ones, row of blocks after row of
    blocks. The remaps check that ``gridDim.x`` appears nowhere else."""
    if any(index.get(a) != c for a, c in _ITEM.items()):
        return False
    rest = {a: tuple(sorted(c.replace(" ", "").split("*"))) for a, c in index.items() if a not in _ITEM}
    return not rest or any(rest == {a: tuple(sorted(c)) for a, c in terms.items()} for terms in _FLAT_TERMS)


def item_coordinates(index: Mapping[str, str]) -> frozenset[str]:
    """The launch coordinates the item index reads (its uses are the item's, not another mapping's)."""
    out = set(index)
    for c in index.values():
        out |= {x for x in c.replace(" ", "").split("*") if "." in x}
    return frozenset(out)

#: calls that read through a pointer and write nothing
_READ_ONLY_CALLS = frozenset({"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"})

_JUMPS = ("break_statement", "continue_statement", "return_statement", "goto_statement")


@dataclass(frozen=True)
class NotLegal:
    """Why the loop cannot be bound to lanes, at a 1-based line of the kernel text (0: the whole kernel).

    ``stage`` says how far the analysis got, on the scale of ``policy.rules._why.Stage`` (0 the kernel is not of
    the remap's kind at all, 1 its shape, 2 legality, 3 launch): the "why not" hint names the decline that got
    furthest, so a column remap's "no loop walks a column" must not outrank a row remap's "the loop writes"."""

    reason: str
    line: int = 0
    stage: int = 1


@dataclass(frozen=True)
class Reduction:
    #: the accumulator as the code names it: a variable, or a member of a vector (``flux.x``)
    name: str
    #: "sum", or the min/max function as written (``fmaxf``)
    combine: str
    #: as written (a template parameter stays a name: the rewrite is as generic as the kernel)
    type: str

    @property
    def ident(self) -> str:
        """The name as part of an identifier (``flux.x`` -> ``flux__x``): what a rewrite's own locals derive from."""
        return self.name.replace(".", "__")


@dataclass(frozen=True)
class LanePlan:
    """What the rewrite needs: byte ranges in the kernel text and the reductions."""

    index: str
    #: the item index's value (replaced by the warp's index) and the end of its declaration statement
    index_value: tuple[int, int]
    index_stmt_end: int
    loop_var: str
    loop_start: int
    #: the initializer's value and the update expression of the loop
    init_value: tuple[int, int]
    update: tuple[int, int]
    loop_end: int
    #: the byte offset of the body's closing brace (the tail runs on lane 0 up to it)
    body_close: int
    tail: bool
    reductions: tuple[Reduction, ...]
    #: the access that makes the remap worth it (``A[4096*i + j]``), for the rationale
    strided: str
    line: int


def plan_lanes(k: Kernel, s: Summary, template_args: Mapping[str, str] | None = None) -> LanePlan | NotLegal:
    """The plan to bind the kernel's contiguous serial loop to a warp's lanes, or why it is not legal.

    ``template_args`` (the spec's instantiation) resolves an accumulator typed by a template parameter."""
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking:
        return NotLegal(f"the kernel uses {', '.join(blocking)}: threads of a block would see another mapping",
                        stage=0)
    xdims = [p for p in s.parallel if "threadIdx.x" in p.index or "threadIdx.x" in p.why]
    if not xdims:
        return NotLegal("no item index of the form blockIdx.x*blockDim.x + threadIdx.x")
    items = [p for p in xdims if is_item(p.index)]
    if not items:
        dim = xdims[0]
        idx = index_text(dim.index) if dim.index else f"non-affine ({dim.why})"
        return NotLegal(f"the thread mapping `{dim.var} = {idx}` is not one 1-D item per thread", dim.line,
                        stage=0)
    loops_over = [p for p in items if p.form not in ("guard", "exit", "unguarded")]
    if loops_over:
        p = loops_over[0]
        return NotLegal(f"the items are a {p.form} loop over `{p.var}`, not one item per thread", p.line)
    dim = items[0]
    # other thread-dependent indices must be built from the item's variable (they follow it); one built
    # from threadIdx.x itself is caught below as a use of the coordinate besides the item index
    sts = statements(k.body)
    decl = _declaration_of(dim.var, sts, k)
    if decl is None:
        return NotLegal(f"the item index `{dim.var}` is not declared once at the top of the body", dim.line)
    decl_stmt, value = decl
    for n in walk(k.body, ("field_expression",)):
        obj = n.child_by_field_name("argument")
        if obj is not None and k.t(obj) in ("threadIdx", "blockIdx") and k.t(n).rsplit(".", 1)[-1].strip() == "x" \
                and not (value.start_byte <= n.start_byte < value.end_byte):
            return NotLegal(f"`{k.t(n)}` is used besides the item index (line {k.line(n)})", k.line(n))
    grid_x = next((n for n in walk(k.body, ("field_expression",)) if "".join(k.t(n).split()) == "gridDim.x"
                   and not value.start_byte <= n.start_byte < value.end_byte), None)
    if grid_x is not None:
        return NotLegal(f"the kernel reads `gridDim.x` (line {k.line(grid_x)}), which the warp-per-item launch "
                        "multiplies by 32", k.line(grid_x))
    loops = [st for st in sts if st.type == "for_statement"]
    if not loops:
        return NotLegal("no serial loop at the top of the item's work (after the guard)")
    loop = loops[0]
    if any(st.type in ("while_statement", "do_statement") for st in sts) or len(loops) > 1:
        return NotLegal("more than one loop over the item: one would run on a single lane (warp_per_row's "
                        "multi-pass shape)", k.line(loops[-1]))
    if sts.index(decl_stmt) > sts.index(loop):
        return NotLegal("the item index is declared after the loop", k.line(loop))
    parts = _loop_parts(loop, k)
    if isinstance(parts, NotLegal):
        return parts
    var, init_value, update = parts
    body = loop.child_by_field_name("body")
    assert body is not None
    jump = next(walk(body, _JUMPS, cut=lambda n: n.type in ("for_statement", "while_statement", "do_statement")
                     and n is not body), None)
    if jump is not None or next(walk(body, ("return_statement", "goto_statement")), None) is not None:
        j = jump if jump is not None else next(walk(body, ("return_statement", "goto_statement")))
        return NotLegal(f"`{k.t(j).split()[0].rstrip(';')}` leaves the loop early (line {k.line(j)}): lanes "
                        "would stop at different iterations", k.line(j))
    reductions = _reductions(loop, body, var, k, template_args or {})
    if isinstance(reductions, NotLegal):
        return reductions
    line0, line1 = loop.start_point[0] + 1, loop.end_point[0] + 1
    in_loop = [a for a in s.accesses if line0 <= a.line <= line1]
    written = {a.param for a in s.accesses if a.kind != "read"}
    for a in in_loop:
        if a.kind != "read":
            return NotLegal(f"the loop writes `{a.param}` (line {a.line}): lanes would write in another order",
                            a.line)
        if a.param in written:
            return NotLegal(f"the loop reads `{a.param}`, which the kernel writes (line {a.line}): another "
                            "thread's write may be what a lane reads", a.line)
    for st in [*sts[:sts.index(loop)], body]:
        hidden = _hidden_write(st, k)
        if hidden is not None:
            return NotLegal(f"`{k.t(hidden)}` (line {k.line(hidden)}) may write memory outside the loop's "
                            "accumulators, and every lane would run it", k.line(hidden))
    before = [a for a in s.accesses if a.line < line0 and a.kind != "read"]
    if before:
        return NotLegal(f"`{before[0].param}` is written before the loop (line {before[0].line}): every lane "
                        "would write it", before[0].line)
    got = _lane_loop(loop, var, in_loop, dim.var, k)
    if isinstance(got, NotLegal):
        return got
    lane_var, init_value, update, strided = got
    first = strided[0]
    tail_sts = sts[sts.index(loop) + 1:]
    close = k.body.end_byte - 1
    return LanePlan(dim.var, (value.start_byte, value.end_byte), decl_stmt.end_byte, lane_var, loop.start_byte,
                    init_value, update, loop.end_byte, close, bool(tail_sts), reductions,
                    f"{first.param}[{index_text(first.index or {})}]", line0)


def _lane_loop(top: Node, top_var: str, in_loop: list[Access], item: str, k: Kernel
               ) -> tuple[str, tuple[int, int], tuple[int, int], list[Access]] | NotLegal:
    """The loop the lanes split: the item's loop, or the outermost loop nested in it whose counter some
    access reads at stride 1 while neighbouring threads read far apart (``x[(j*F + i)*S + k]`` over ``k``
    inside a loop over ``j``: the partials are carried across the outer loop and combined once after it).
    Everything outside that loop runs the same in every lane, so the outer loops need no condition."""
    first_reason: NotLegal | None = None
    for loop in walk(top, ("for_statement",)):
        parts = (top_var, *_header(top, k)) if loop is top else _loop_parts(loop, k)
        if isinstance(parts, NotLegal):
            continue
        var, init_value, update = parts
        lo, hi = loop.start_point[0] + 1, loop.end_point[0] + 1
        inside = [a for a in in_loop if lo <= a.line <= hi]
        contiguous = [a for a in inside if a.index is not None and a.index.get(var) == "1"]
        strided = [a for a in contiguous if a.index is not None and a.index.get("threadIdx.x") not in (None, "1")]
        init = next(walk(loop.child_by_field_name("initializer") or loop, ("init_declarator",)), None)
        start = init.child_by_field_name("value") if init is not None else None
        if not strided and contiguous and start is not None and (
                item in {k.t(i) for i in walk(start, ("identifier",))}
                or next(walk(start, ("subscript_expression",)), None) is not None):
            strided = contiguous  # ``for (j = rowptr[i]; ...) v[j]``: each thread starts its own row
        if not strided:
            if first_reason is None:
                first_reason = NotLegal(
                    f"the loop's contiguous access `{contiguous[0].param}` is already coalesced or shared across "
                    "a warp's threads: lanes would not read it faster" if contiguous else
                    f"no access in the loop is contiguous in `{var}` (stride 1)", lo)
            continue
        body = loop.child_by_field_name("body")
        jump = next(walk(body, _JUMPS), None) if body is not None and loop is not top else None
        if jump is not None:
            return NotLegal(f"`{k.t(jump).split()[0].rstrip(';')}` in the loop the lanes would split (line "
                            f"{k.line(jump)})", k.line(jump))
        return var, init_value, update, strided
    return first_reason or NotLegal("no loop to split", k.line(top))


def _header(loop: Node, k: Kernel) -> tuple[tuple[int, int], tuple[int, int]]:
    parts = _loop_parts(loop, k)
    assert not isinstance(parts, NotLegal)
    return parts[1], parts[2]


def _hidden_write(node: Node, k: Kernel, allowed: frozenset[int] = frozenset()) -> Node | None:
    """A write the summary's accesses do not show: through a pointer (``*p = v``, ``p->f = v``) or a call
    handed a pointer or an address (a function the IR could not inline may write through it). Calls starting at
    a byte in ``allowed`` (atomic updates the caller checked) are not counted."""
    writable = {n for n, _, ptr, const in params_of(k)[0] if ptr and not const}
    values = _value_locals(k)
    for n in walk(node, ("assignment_expression", "update_expression", "call_expression")):
        if misparsed_assignment(n, k.data) or n.start_byte in allowed:
            continue
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            if fn is None or args is None or k.t(fn) in _READ_ONLY_CALLS:
                continue
            if any((unparen(a).type == "pointer_expression" and k.t(unparen(a)).startswith("&"))
                   or k.t(unparen(a)).split("+")[0].strip() in writable for a in args.named_children):
                return n
            continue
        t = n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument")
        if t is not None and unparen(t).type == "field_expression" and _struct_of(unparen(t), k) in values:
            continue  # a member of a struct in registers (``v.x = e``), not memory
        if t is not None and unparen(t).type in ("pointer_expression", "field_expression"):
            return n
    return None


def _value_locals(k: Kernel) -> set[str]:
    """The kernel's locals that hold a value (declared as a plain name: no pointer, reference or array, and no
    parameter of that name), so that a write of their member writes a register."""
    plain: set[str] = set()
    other: set[str] = {n for n, *_ in params_of(k)[0]}
    for d in walk(k.body, ("declaration",)):
        for dn in d.children_by_field_name("declarator"):
            cur = dn.child_by_field_name("declarator") if dn.type == "init_declarator" else dn
            if cur is not None and cur.type == "identifier":
                plain.add(k.t(cur))
                continue
            while cur is not None and cur.type != "identifier":
                cur = cur.child_by_field_name("declarator")
            if cur is not None:
                other.add(k.t(cur))
    return plain - other


def _declaration_of(name: str, sts: list[Node], k: Kernel) -> tuple[Node, Node] | None:
    """The top-level declaration ``int name = value;`` (and its value), when it is the only one. Other variables
    may share the statement (``int gid = ..., j = 0;``) when they do not read ``name``: a remap that moves a
    thread past the bound to another item after the statement must not leave a value computed from the old."""
    found: tuple[Node, Node] | None = None
    for st in sts:
        if st.type != "declaration":
            continue
        ds = st.children_by_field_name("declarator")
        for d in ds:
            nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if d.type == "init_declarator" and nm is not None and v is not None and k.t(nm) == name:
                if found is not None or any(o is not d and name in {k.t(i) for i in walk(o, ("identifier",))}
                                            for o in ds):
                    return None
                found = (st, v)
    return found


def _loop_parts(loop: Node, k: Kernel) -> tuple[str, tuple[int, int], tuple[int, int]] | NotLegal:
    """(counter, its initial value's range, the update's range) of ``for (int j = a; j < b; j++)``."""
    init, cond, upd = (loop.child_by_field_name(x) for x in ("initializer", "condition", "update"))
    line = k.line(loop)
    if init is None or cond is None or upd is None or init.type != "declaration":
        return NotLegal("the loop does not declare its counter, test it and step it in its header", line)
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator":
        return NotLegal("the loop's header declares more than one variable", line)
    nm, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if nm is None or v is None:
        return NotLegal("the loop counter has no initial value", line)
    var = k.t(nm)
    c = unparen(cond)
    op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
    left = c.child_by_field_name("left") if c.type == "binary_expression" else None
    if op is None or left is None or k.t(op) not in ("<", "<=") or k.t(unparen(left)) != var:
        return NotLegal(f"the loop's condition `{k.t(cond)}` is not `{var} < bound`", line)
    u = unparen(upd)
    text = "".join(k.t(u).split())
    if text not in (f"{var}++", f"++{var}", f"{var}+=1", f"{var}={var}+1"):
        return NotLegal(f"the loop steps `{k.t(upd)}`, not by 1", line)
    body = loop.child_by_field_name("body")
    if body is None or var in _written(body, k):
        return NotLegal(f"the loop counter `{var}` is written in the loop body", line)
    bound = c.child_by_field_name("right")
    if bound is not None and {k.t(i) for i in walk(bound, ("identifier",))} & _written(body, k):
        return NotLegal("the loop's bound changes inside the loop", line)
    return var, (v.start_byte, v.end_byte), (upd.start_byte, upd.end_byte)


def _written(node: Node, k: Kernel) -> set[str]:
    out: set[str] = set()
    for n in walk(node, ("assignment_expression", "update_expression")):
        if misparsed_assignment(n, k.data):
            continue
        t = n.child_by_field_name("left") if n.type == "assignment_expression" else n.child_by_field_name("argument")
        if t is not None and unparen(t).type == "identifier":
            out.add(k.t(unparen(t)))
    return out


def local_types(k: Kernel) -> dict[str, str]:
    """Each local's declared type (``const`` dropped, first declaration wins): which accumulators a shuffle can
    move."""
    types: dict[str, str] = {}
    for d in walk(k.body, ("declaration",)):
        t = d.child_by_field_name("type")
        if t is not None:
            for dn in declared_names(d, k.data):
                types.setdefault(dn, " ".join(k.t(t).replace("const ", "").split()))
    return types


def _reductions(loop: Node, body: Node, var: str, k: Kernel, targs: Mapping[str, str]
                ) -> tuple[Reduction, ...] | NotLegal:
    """The loop's accumulators for the lane plan: no element write (lanes would write in another order), and at
    least one accumulator (a loop with none has nothing to split)."""
    red = carried_scalars(body, var, k, targs, elements=False)
    if not isinstance(red, NotLegal) and not red:
        return NotLegal("the loop carries no accumulator", k.line(loop))
    return red


def carried_scalars(body: Node, var: str, k: Kernel, targs: Mapping[str, str], *, elements: bool
                    ) -> tuple[Reduction, ...] | NotLegal:
    """The loop's accumulators: every scalar declared outside the loop that its body writes, each a sum or a
    min/max (``accumulator_update``) that the loop reads nowhere but in its updates, of a type a shuffle moves.

    A member of a struct local to the loop is the loop's own; a member of a CUDA vector declared outside it
    (``flux.x += e`` of a ``float3``) is an accumulator of its own, of the vector's scalar type, as long as the
    loop names the vector only through its members. ``elements`` says whether an element write (``a[i] = ...``)
    is left to the caller's access analysis (the per-item plans) or declines (the lane plan)."""
    local = declared_names(body, k.data) | {var}
    types = local_types(k)
    combines: dict[str, str] = {}
    acc_types: dict[str, str] = {}
    updates: dict[str, list[tuple[Node, int]]] = {}
    for n in walk(body, ("assignment_expression", "update_expression")):
        if misparsed_assignment(n, k.data):
            continue
        target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
        assert target is not None
        t = unparen(target)
        obj = _struct_of(t, k)
        if obj is not None and obj in local:
            continue  # a member of the iteration's own struct
        name = lvalue_name(t, k)
        type_ = types.get(name or "", "")
        if t.type == "field_expression" and obj is not None and name is not None:
            type_ = vector_scalar(types.get(obj, ""), targs) or ""
            whole = _whole_uses(body, obj, k)
            if type_ and whole is not None:
                return NotLegal(f"`{obj}` is carried across iterations: the loop accumulates into its members and "
                                f"reads it whole (line {k.line(whole)})", k.line(whole))
        if t.type != "identifier" and not type_:
            if not elements:
                return NotLegal(f"the loop writes memory `{k.t(target)}` (line {k.line(n)})", k.line(n))
            if t.type == "subscript_expression":
                continue  # an element: the accesses decide
            if obj is not None:
                written = types.get(obj, "?")
                shown = f"`{written}`" + (f" (`{targs[written]}` in the spec's instantiation)" if written in targs
                                          else "")
                return NotLegal(f"`{obj}` is carried across iterations (line {k.line(n)}): the loop writes a "
                                f"member of it, and its type {shown} is not a CUDA vector (whose members would be "
                                "accumulated one by one)", k.line(n))
            return NotLegal(f"`{k.t(n)}` (line {k.line(n)}) writes through a pointer the summary cannot follow",
                            k.line(n))
        assert name is not None
        if name in local:
            continue
        upd = accumulator_update(n, name, type_, k)
        if upd is None:
            return NotLegal(f"`{name}` is carried across iterations (line {k.line(n)}) but is not updated as "
                            f"`{name} += e`, `{name} = {name} + e` or `{name} = max/min({name}, e)`", k.line(n))
        if combines.setdefault(name, upd.combine) != upd.combine:
            return NotLegal(f"`{name}` is combined in two ways in the loop", k.line(n))
        acc_types[name] = type_ if "." in name else types.get(name, "?")
        updates.setdefault(name, []).append((n, upd.uses))
    for name, ups in updates.items():
        if mentions(body, name, k) != sum(u for _, u in ups):
            return NotLegal(f"the accumulator `{name}` is read in the loop besides its update: a lane's partial "
                            "is not the running total", k.line(ups[0][0]))
        bad = shuffle_decline(name, acc_types[name], targs, k.line(ups[0][0]))
        if bad is not None:
            return bad
    return tuple(Reduction(n, combines[n], acc_types[n]) for n in updates)


def lvalue_name(t: Node, k: Kernel) -> str | None:
    """What an accumulator is called: a variable's name, or ``v.x`` for a member of a variable (parentheses
    dropped: ``(v).x``); None for anything else (an element, ``p->x``, ``v.a.b``)."""
    t = unparen(t)
    if t.type == "identifier":
        return k.t(t)
    if t.type == "field_expression":
        op, obj, field = (t.child_by_field_name(f) for f in ("operator", "argument", "field"))
        if op is not None and obj is not None and field is not None and k.t(op) == "." \
                and unparen(obj).type == "identifier":
            return f"{k.t(unparen(obj))}.{k.t(field)}"
    return None


def mentions(node: Node, name: str, k: Kernel) -> int:
    """How often ``node`` names the accumulator ``name`` (a variable: every identifier of it; a member ``v.x``:
    every ``v.x``)."""
    if "." not in name:
        return sum(1 for i in walk(node, ("identifier",)) if k.t(i) == name)
    return sum(1 for f in walk(node, ("field_expression",)) if lvalue_name(f, k) == name)


def _whole_uses(body: Node, obj: str, k: Kernel) -> Node | None:
    """A mention of the vector ``obj`` in ``body`` that is not ``obj.member`` (the vector read or written whole)."""
    for i in walk(body, ("identifier",)):
        if k.t(i) != obj:
            continue
        up = i.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        if up is None or up.type != "field_expression" or lvalue_name(up, k) is None:
            return i
    return None


#: the scalar of each CUDA vector type's name stem (``float3`` -> ``float``); stems a shuffle does not move stay
_VECTOR_SCALARS = {"float": "float", "double": "double", "int": "int", "uint": "unsigned int",
                   "longlong": "long long", "ulonglong": "unsigned long long", "long": "long", "ulong": "unsigned long"}


def vector_scalar(type_: str, targs: Mapping[str, str]) -> str | None:
    """The scalar type of a CUDA vector type (``float3`` -> ``float``; through the spec's template arguments),
    None for anything else."""
    t = " ".join(targs.get(type_, type_).replace("const", "").split())
    if not vector_members(t, {}):
        return None
    return _VECTOR_SCALARS.get(t.rstrip("1234"))


def _struct_of(t: Node, k: Kernel) -> str | None:
    """The local whose member ``t`` is (``v.x``, ``(v).x``, ``v.a.b``), None for anything else (``p->x``)."""
    while t.type == "field_expression":
        op, obj = t.child_by_field_name("operator"), t.child_by_field_name("argument")
        if op is None or obj is None or k.t(op) != ".":
            return None
        t = unparen(obj)
    return k.t(t) if t.type == "identifier" else None


@dataclass(frozen=True)
class Update:
    """An accumulator's update the lanes can split: how partials combine and how often it names the accumulator."""

    #: "sum", or the min/max function (``fmaxf``; for a comparison, the one of the accumulator's type)
    combine: str
    #: the mentions of the accumulator the update holds (its target, its operand, an ``if``'s condition)
    uses: int


#: the max/min function a comparison-written accumulator is combined with, by its type
_MAX_OF = {"float": "fmaxf", "double": "fmax"}
_MIN_OF = {"float": "fminf", "double": "fmin"}


def accumulator_update(n: Node, name: str, type_: str, k: Kernel) -> Update | None:
    """The one reader of "``n`` updates the accumulator ``name`` associatively" (None when it does not):

    ``s += e``, ``s -= e``, ``s = s + e``, ``s = e + s``, ``s = s - e`` (sums); ``s = fmaxf(s, e)``, ``s = max(e,
    s)`` (the function as written); ``s = s > e ? s : e`` and the other comparisons of the two, and ``if (e > s)
    s = e;`` alone in an ``if`` without ``else`` (a running max/min of ``type_``). ``e`` never names ``s``."""
    if n.type != "assignment_expression":
        return None
    op, right = n.child_by_field_name("operator"), n.child_by_field_name("right")
    if op is None or right is None:
        return None
    count = mentions(right, name, k)
    if k.t(op) in ("+=", "-="):
        return Update("sum", 1) if count == 0 else None
    if k.t(op) != "=" or count == 0:
        return _compare_assign(n, name, right, type_, k) if k.t(op) == "=" else None
    r = unparen(right)

    def is_name(x: Node) -> bool:
        return lvalue_name(x, k) == name

    if r.type == "binary_expression" and count == 1:
        return Update("sum", 2) if _added(r, is_name) else None
    if r.type == "call_expression" and count == 1:
        fn, args = r.child_by_field_name("function"), r.child_by_field_name("arguments")
        if fn is None or args is None or k.t(fn) not in MINMAX or len(args.named_children) != 2:
            return None
        if sum(1 for x in args.named_children if is_name(x)) != 1:
            return None
        return Update(k.t(fn), 2)
    if r.type == "conditional_expression" and count == 2:
        cond, yes, no = (r.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
        c = unparen(cond) if cond is not None else None
        if c is None or yes is None or no is None or c.type != "binary_expression":
            return None
        picked = _comparison(c, name, k)
        if picked is None or not (is_name(yes) ^ is_name(no)):
            return None
        value = _canon(no if is_name(yes) else yes, k)
        if value != picked[1]:
            return None
        # ``s > e ? s : e`` keeps the larger: the comparison says "s is larger", and the branch taken then is s
        larger_kept = picked[0] == is_name(yes)
        return Update((_MAX_OF if larger_kept else _MIN_OF).get(type_, "max" if larger_kept else "min"), 3)
    return None


def _added(e: Node, is_name: Callable[[Node], bool]) -> bool:
    """Whether the accumulator is one added term of the sum ``e`` (``s + a + b``, ``a - b + s``; not ``a - s``)."""
    e = unparen(e)
    if is_name(e):
        return True
    if e.type != "binary_expression":
        return False
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or op.type not in ("+", "-"):
        return False
    return _added(left, is_name) or (op.type == "+" and _added(right, is_name))


def _canon(e: Node, k: Kernel) -> str:
    """An expression's text to compare by: an accumulator's name (``(v).x`` is ``v.x``), else without blanks."""
    return lvalue_name(e, k) or "".join(k.t(unparen(e)).split())


def _comparison(c: Node, name: str, k: Kernel) -> tuple[bool, str] | None:
    """For ``s > e`` (``e < s``, ``>=``, ``<=``) between ``name`` and another expression: (whether it says
    ``name`` is the larger, the other side's text without blanks); None for any other condition."""
    left, op, other = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if left is None or op is None or other is None or k.t(op) not in (">", ">=", "<", "<="):
        return None
    sides = (_canon(left, k), _canon(other, k))
    greater = k.t(op) in (">", ">=")
    if sides[0] == name and sides[1] != name:
        return greater, sides[1]
    if sides[1] == name and sides[0] != name:
        return not greater, sides[0]
    return None


def _compare_assign(n: Node, name: str, right: Node, type_: str, k: Kernel) -> Update | None:
    """``if (e > m) m = e;`` (``m < e``, ``>=``; ``<`` for a minimum), the assignment alone in an ``if`` without
    ``else``: a running maximum (minimum), combined with ``fmaxf``/``fmax``/``max`` by its type."""
    stmt = n.parent
    if stmt is None or stmt.type != "expression_statement":
        return None
    up = stmt.parent
    if up is not None and up.type == "compound_statement" and len(statements(up)) == 1:
        up = up.parent
    if up is None or up.type != "if_statement" or up.child_by_field_name("alternative") is not None:
        return None
    cond = up.child_by_field_name("condition")
    c = unparen(cond.named_children[0]) if cond is not None and cond.named_children else None
    if c is None or c.type != "binary_expression":
        return None
    picked = _comparison(c, name, k)
    if picked is None or picked[1] != _canon(right, k):
        return None
    # ``if (e > m) m = e``: the comparison says m is not the larger, and the larger (e) is kept: a maximum
    if not picked[0]:
        return Update(_MAX_OF.get(type_, "max"), 2)
    return Update(_MIN_OF.get(type_, "min"), 2)
