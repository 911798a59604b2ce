"""Legality of ``vectorize_strided``: the streams ``p[OFF + j]`` of a strided loop, its accumulators and what the
loop writes (the module docstring of the package states each condition)."""

from __future__ import annotations

import re

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from ....spec.model import DTYPES, canonical_dtype
from .._structural import (
    MINMAX_FUNCS,
    all_names,
    binary_parts,
    declared_names,
    dims_values,
    has_collective,
    has_jump,
    is_1d,
    resolved_type,
    shared_arrays,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    written_names,
)
from .._util import kernel_body
from .._why import Stage, declined
from ..base import RuleContext
from .model import PREFIX, Loop, Stream
from .threads import cooperative, idents, lane_locals, position, variance_levels

_IDENT = re.compile(r"[A-Za-z_]\w*")
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
#: calls after the loop that combine each thread's partial across threads
_COMBINERS = ("__shfl", "__reduce_", "atomic", "reduce", "Reduce", "REDUCE")


def _loop_parts(n: Node, data: bytes) -> tuple[str, str, Node, Node, Node] | None:
    """(var, type, start, bound, step) of ``for (T j = S; j < E; j += STEP)``."""
    init, cond, upd = (n.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    d = single_decl(init, data)
    if d is None or d.value is None or d.pointer:
        return None
    cparts = binary_parts(unparen(cond), data)
    if cparts is None:
        return None
    left, op, right = cparts
    if op == "<" and node_text(unparen(left), data) == d.name:
        bound = right
    elif op == ">" and node_text(unparen(right), data) == d.name:
        bound = left
    else:
        return None
    u = unparen(upd)
    if u.type != "assignment_expression" or node_text(u.child_by_field_name("operator") or u, data) != "+=":
        return None
    tgt, step = u.child_by_field_name("left"), u.child_by_field_name("right")
    if tgt is None or step is None or node_text(unparen(tgt), data) != d.name:
        return None
    return d.name, " ".join(d.type.replace("const", " ").split()), d.value, bound, step


def _offset(idx: Node, var: str, data: bytes) -> str | None:
    """``OFF`` of an index ``OFF + j`` / ``j + OFF`` / ``j`` ("" for none); None for anything else."""
    idx = unparen(idx)
    if idx.type == "identifier" and node_text(idx, data) == var:
        return ""
    parts = binary_parts(idx, data)
    if parts is None or parts[1] != "+":
        return None
    left, _, right = parts
    if unparen(right).type == "identifier" and node_text(unparen(right), data) == var:
        other = left
    elif unparen(left).type == "identifier" and node_text(unparen(left), data) == var:
        other = right
    else:
        return None
    if var in idents(other, data):
        return None
    return " ".join(node_text(other, data).split())


def _pointer_types(ctx: RuleContext, kbody: Node, data: bytes) -> dict[str, tuple[str, bool]]:
    """Pointer parameters and local pointers of the kernel -> (element type as instantiated, const)."""
    k = ctx.cand_kernel
    out: dict[str, tuple[str, bool]] = {}
    if k is not None:
        for p in k.params:
            if p.is_pointer and p.pointer_depth == 1 and not p.array_dims:
                out[p.name] = (resolved_type(ctx, p.type), p.is_const)
    for n in walk(kbody, ("declaration",)):
        d = single_decl(n, data)
        if d is not None and d.pointer:
            out[d.name] = (resolved_type(ctx, d.type), d.const or "const" in d.type.split())
    return out


def _elem_size(t: str) -> int | None:
    dt = canonical_dtype(t)
    return DTYPES[dt][0] if dt is not None else None


def _own_elements(body: list[Node], name: str, var: str, data: bytes) -> bool:
    """Is every access of the shared array ``name`` in the loop at ``[OFF + var]``, one ``OFF``?"""
    offs = set()
    for st in body:
        for n in walk(st, ("subscript_expression", "identifier")):
            if n.type == "identifier":
                if node_text(n, data) == name and (n.parent is None or n.parent.type != "subscript_expression"):
                    return False  # the array used whole (passed, offset)
                continue
            parts = subscript_parts(n, data)
            if parts is None or node_text(unparen(parts[0]), data) != name:
                continue
            off = _offset(parts[1], var, data)
            if off is None:
                return False
            offs.add(off)
    return len(offs) == 1


def _base_name(n: Node, data: bytes) -> str | None:
    """The variable an lvalue writes into: ``a`` of ``a.x``, ``a[i]``, ``a[i].y``, ``*a``."""
    while n.type in ("field_expression", "subscript_expression", "pointer_expression", "parenthesized_expression"):
        nxt = n.child_by_field_name("argument")
        if nxt is None:
            return None
        n = nxt
    return node_text(n, data) if n.type == "identifier" else None


def _accumulators_combined(loop: Node, body: list[Node], var: str, kbody: Node, data: bytes,
                           shared: set[str], pointers: dict[str, tuple[str, bool]]) -> str | None:
    """None when every outer scalar the loop writes is an accumulator whose next use after the loop combines
    the threads' partials; else the reason it is not."""
    local = set().union(*(declared_names(st, data) for st in body)) | {var}
    outer: set[str] = set()
    allowed: dict[str, int] = {}  # mentions of each accumulator its own updates make
    for st in body:
        for n in walk(st, ("assignment_expression", "update_expression")):
            tgt = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
            if tgt is None:
                continue
            if unparen(tgt).type != "identifier":
                base = _base_name(unparen(tgt), data)
                if base is not None and (base in local or (base in pointers and unparen(tgt).type ==
                                                           "subscript_expression")):
                    continue  # the iteration's own value, or an element (the streams decide)
                if base in shared and _own_elements(body, base, var, data):
                    continue  # ``s_row[j] = ...``: element j of a shared row, whoever handles j writes it
                # a member or element of something outside the loop (``acc.x += e``, ``buf[k] = e``, ``*p = e``):
                # which thread writes what would change, and nothing here says it is combined
                return (f"`{node_text(n, data)}` writes into `{base or node_text(tgt, data)}`, kept outside the "
                        "loop, per element")
            name = node_text(unparen(tgt), data)
            if name in local:
                continue
            if n.type == "update_expression":
                return f"`{node_text(n, data)}` carries `{name}` across iterations"
            op = node_text(n.child_by_field_name("operator") or n, data)
            right = n.child_by_field_name("right")
            ok = op in ("+=", "-=", "*=") or (op == "=" and right is not None and _minmax(right, name, data))
            if not ok:
                return (f"`{name}` is carried across iterations but is not updated as `{name} += e` or "
                        f"`{name} = max/min({name}, e)`")
            outer.add(name)
            allowed[name] = allowed.get(name, 0) + (1 if op != "=" else 2)
    for name in sorted(outer):
        mentions = sum(1 for st in body for n in walk(st, ("identifier",)) if node_text(n, data) == name)
        if mentions != allowed[name]:
            # a running value read in the loop (``s += x[j]; y[j] = s;``): its order per thread would change
            return (f"the accumulator `{name}` is read in the loop besides its update: with other elements per "
                    "thread its running value would differ")
        use = _first_statement_after(loop, name, kbody, data)
        if use is None or not _combines(use, name, data, shared):
            return (f"the partial `{name}` is used after the loop without being combined across threads (a "
                    "shuffle, a reduction call, an atomic or a store to shared memory): with other elements per "
                    "thread, each thread's value would differ")
    return None


def _minmax(right: Node, name: str, data: bytes) -> bool:
    r = unparen(right)
    if r.type != "call_expression":
        return False
    fn = r.child_by_field_name("function")
    args = r.child_by_field_name("arguments")
    if fn is None or args is None or node_text(fn, data) not in MINMAX_FUNCS:
        return False
    named = [a for a in args.named_children if a.type != "comment"]
    return len(named) == 2 and any(unparen(a).type == "identifier" and node_text(unparen(a), data) == name
                                   for a in named)


def _is_target(assign: Node, n: Node) -> bool:
    """Is ``n`` the left side of the assignment ``assign``?"""
    left = assign.child_by_field_name("left") if assign.type == "assignment_expression" else None
    return left is not None and unparen(left).id == n.id


def _first_statement_after(loop: Node, name: str, kbody: Node, data: bytes) -> Node | None:
    """The statement (or declaration, or the condition's ``if``) of the first mention of ``name`` after
    ``loop`` in the kernel's text."""
    for n in walk(kbody):
        if n.type == "identifier" and n.start_byte >= loop.end_byte and node_text(n, data) == name:
            up: Node | None = n
            while up is not None and up.type not in ("expression_statement", "declaration", "if_statement",
                                                       "return_statement"):
                up = up.parent
            return up
    return None


def _combines(stmt: Node, name: str, data: bytes, shared: set[str]) -> bool:
    """Does ``stmt`` combine the threads' values of ``name``: read it inside a call that exchanges or
    reduces across threads (``__shfl*``, ``__reduce_*``, ``cg::reduce``, ``warpReduceSum``, atomics; the
    butterfly ``s = s + __shfl_xor_sync(m, s, o)`` reads it beside the call too), or store it into shared
    memory? A statement that only overwrites it drops the partial, which is fine too."""
    reads = []
    for n in walk(stmt, ("identifier",)):
        if node_text(n, data) != name:
            continue
        up = n.parent
        if up is not None and _is_target(up, n):
            op = up.child_by_field_name("operator")
            if op is not None and node_text(op, data) == "=":
                continue  # overwritten, not read
        reads.append(n)
    for n in reads:
        up = n.parent
        while up is not None and up.id != stmt.id:
            if up.type == "call_expression":
                fn = up.child_by_field_name("function")
                if fn is not None and any(c in node_text(fn, data) for c in _COMBINERS):
                    return True
            if up.type == "assignment_expression":
                left = up.child_by_field_name("left")
                parts = subscript_parts(left, data) if left is not None else None
                if parts is not None and node_text(unparen(parts[0]), data) in shared:
                    return True
            up = up.parent
    return not reads


def analyse(ctx: RuleContext) -> tuple[list[Loop], Node, bytes] | None:
    got = kernel_body(ctx)
    if got is None or ctx.cand_kernel is None:
        return None
    kbody, data = got
    if any(n.startswith(PREFIX) for n in all_names(kbody, data)):
        return None
    lanes = lane_locals(kbody, data)
    dims = dims_values(ctx, ctx.block) if is_1d(ctx, ctx.block) else None
    block_x = dims[0][0] if dims and all(d == dims[0] for d in dims) else None
    pointers = _pointer_types(ctx, kbody, data)
    shared = set(shared_arrays(kbody, data))
    varying = variance_levels(kbody, data)
    found: list[Loop] = []
    seen_loop = False
    for n in walk(kbody, ("for_statement",)):
        parts = _loop_parts(n, data)
        body_node = n.child_by_field_name("body")
        if parts is None or body_node is None:
            continue
        var, vtype, start, bound, step = parts
        if not cooperative(start, step, data, lanes, block_x):
            continue
        seen_loop = True
        # a warp-strided loop's threads are one warp: what varies only from warp to warp is theirs to share,
        # provided blocks are whole warps (a warp index of the grid is one only then)
        whole = block_x is None or block_x % 32 == 0
        group = 2 if position(start, data, lanes) in ("lane", "rank") and whole else 1
        why = _legal(n, var, bound, body_node, data, pointers, shared, kbody, varying, group)
        if isinstance(why, str):
            declined(why, n, Stage.LEGALITY)
            continue
        found.append(Loop(n, var, vtype, node_text(start, data), node_text(bound, data), node_text(step, data),
                           statements(body_node), why))
    if not seen_loop:
        return declined("no loop whose threads stride over a row together (`for (j = threadIdx.x; j < n; j += "
                        "blockDim.x)` or `for (j = lane; j < n; j += 32)`)", kbody, Stage.SCOPE)
    if not found:
        return None
    # loops nested in a vectorized loop are left to it (their streams are rewritten with the outer body)
    outer = [lp for lp in found if not any(o is not lp and o.node.start_byte <= lp.node.start_byte
                                           and lp.node.end_byte <= o.node.end_byte for o in found)]
    return outer, kbody, data


def _legal(loop: Node, var: str, bound: Node, body_node: Node, data: bytes, pointers: dict[str, tuple[str, bool]],
           shared: set[str], kbody: Node, varying: dict[str, int], group: int) -> dict[tuple[str, str], Stream] | str:
    """The loop's streams, or why it is not this rule's. ``group``: how far the cooperating threads reach, 1 a
    block (nothing may vary from warp to warp), 2 a warp (warp-varying values are its own)."""
    body = statements(body_node)
    written = set().union(*(written_names(st, data) for st in body)) if body else set()
    if var in written:
        return f"the loop's index `{var}` is changed in its body"
    if idents(bound, data) & (written | {var}):
        return "the loop's bound changes inside the loop"
    if has_collective(body_node, data) or has_jump(body_node, loops_ok=True):
        return ("the loop's body synchronizes, exchanges data between threads or leaves early: with other "
                "elements per thread its threads would run different iterations of it")
    if idents(body_node, data) & _COORDS:
        return "the loop's body reads the thread coordinates"
    streams: dict[tuple[str, str], Stream] = {}
    other_reads: set[str] = set()
    # names the body declares: a stream's pointer or offset among them is not there before the loop, where the
    # vector path checks alignment (a row pointer declared per element is left to the scalar loop)
    inner = set().union(*(declared_names(st, data) for st in body)) if body else set()
    for n in walk(body_node, ("subscript_expression",)):
        parts = subscript_parts(n, data)
        if parts is None:
            continue
        arr, idx = parts
        name = node_text(unparen(arr), data)
        if name not in pointers or unparen(arr).type != "identifier":
            continue
        up = n.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        is_write = up is not None and (_is_target(up, n) or up.type == "update_expression")
        if up is not None and up.type == "pointer_expression":
            return f"the address of `{node_text(n, data)}` is taken"
        off = _offset(idx, var, data)
        if off is not None and (set(off.replace("(", " ").replace(")", " ").split()) & written):
            off = None
        if off is None:
            if var in idents(idx, data) or is_write:
                return f"`{node_text(n, data)}` is not `{name}[offset + {var}]` with an offset the loop keeps"
            other_reads.add(name)
            continue
        if name in inner or set(_IDENT.findall(off)) & inner:
            return (f"`{node_text(n, data)}` is addressed through `{name}` or an offset declared inside the loop: "
                    "its alignment cannot be checked before the loop")
        if max((varying.get(x, 0) for x in {name} | set(_IDENT.findall(off))), default=0) >= group:
            return (f"`{node_text(n, data)}` is at an address that differs between the threads sharing the row: "
                    "whether it is aligned to a vector would differ too")
        elem, const = pointers[name]
        size = _elem_size(elem)
        if size is None or size not in (1, 2, 4, 8):
            return f"the element type `{elem}` of `{name}` has no known scalar size"
        s = streams.setdefault((name, off), Stream(name, off, elem, size, const))
        s.nodes.append(n)
        if is_write:
            s.written = True
            op = up.child_by_field_name("operator") if up is not None else None
            if up is not None and (up.type == "update_expression" or op is None or node_text(op, data) != "="):
                s.read = True
        else:
            s.read = True
    if not streams:
        return f"no access in the loop is `p[offset + {var}]`: nothing to load as a vector"
    for (name, off), s in streams.items():
        if s.written and (name in other_reads or any(o.ptr == name and o.off != off for o in streams.values())):
            return f"`{name}` is written at `[{off or ''}{' + ' if off else ''}{var}]` and accessed elsewhere too"
        if s.written and not s.const:
            for st in body:
                e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count else None
                if e is not None and e.type == "assignment_expression" and any(e.id == (x.parent.id if x.parent
                                                                               else -1) for x in s.nodes):
                    op = e.child_by_field_name("operator")
                    if op is not None and node_text(op, data) == "=":
                        s.always_written = True
    bad = _accumulators_combined(loop, body, var, kbody, data, shared, pointers)
    if bad is not None:
        return bad
    return streams


