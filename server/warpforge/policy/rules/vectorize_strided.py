"""vectorize_strided: vector loads and stores in a loop whose threads stride over a row together.

Why it helps: a row kernel (a block or a warp per row: softmax, layernorm, a bias gradient, a row scale) walks
its row with ``for (j = lane; j < C; j += 32)`` or ``for (j = threadIdx.x; j < C; j += blockDim.x)``: each
thread moves one element per iteration, so a 4-byte load per instruction and the address arithmetic of every
element. Giving each thread ``w`` consecutive elements per step, moved with one 8- or 16-byte access, is what
the experts' versions do (llm.c's ``x128``): fewer load/store instructions, more bytes in flight per thread,
closer to DRAM bandwidth. ``vectorize`` does this for one thread per element; this family does it inside the
cooperative loops that ``vectorize`` (and ``warp_per_row``'s own output) leave scalar.

Recognized loop (anywhere in the kernel, also in a loop over rows): ``for (T j = S; j < E; j += STEP) BODY``
where the threads that run it start at every residue of ``STEP`` once: ``S`` is ``threadIdx.x`` with ``STEP``
``blockDim.x`` on a one-dimensional block, or the thread's lane (``threadIdx.x % 32``, ``& 31``,
``% warpSize``, ``warp.thread_rank()``, a local holding one of these) with ``STEP`` ``32``, ``warpSize`` or
``warp.size()``; ``E`` is not written in the loop.

Legality (each decline says which failed):

* every access of BODY to a pointer at the loop index is ``p[OFF + j]`` (or ``p[j]``, ``p[j + OFF]``) with
  ``OFF`` free of ``j`` and of anything the loop writes: a *stream* of consecutive elements;
* a pointer BODY writes is accessed only in such streams, all with the same ``OFF``: the element ``j`` is then
  owned by whichever thread handles ``j``, and no thread reads what another writes;
* BODY has no barrier, shuffle or atomic (threads now run different numbers of iterations), no ``return``,
  ``break``, ``continue`` or ``goto``, does not write ``j`` or read the thread coordinates;
* a scalar from outside the loop that BODY writes is an accumulator (``s += e``, ``s = fmaxf(s, e)``): a
  thread now sums other elements, so each partial must be combined across the threads after the loop — its
  next use is a shuffle, a ``__reduce_*``/``cg::reduce``/``*Reduce*`` call, an atomic or a store into shared
  memory, and it is read in the loop only by its own update (not a running value). Sums are then added in
  another order (within the spec's tolerance, which verification checks);
* nothing else kept outside the loop is written per element: no member (``acc.x += e``), no thread's own
  array, no ``*p``; a shared row is, where every access of it in the loop is ``[OFF + j]``;
* every stream's element type is a scalar of 1, 2, 4 or 8 bytes as instantiated.

* every stream's address is the same for all the threads that share the row (its pointer and offset do not
  vary within the group: a block's row for a block-strided loop, a warp's for a lane-strided one), so they all
  agree on whether it is aligned to a vector.

The rewrite: the row's first elements, up to the first vector boundary its streams share (one element size
and the same offset within a vector, checked at run time: a row offset is rarely known to be aligned), run the
original loop; then the loop runs over *chunks* of ``w`` elements, chunk ``c`` taken by the thread the original
gave element ``c`` (``for (c = S; c < nv; c += STEP)``), BODY once per element on values loaded as one vector
per stream, the written streams stored as one; the row's last elements run the original loop again. Streams
that share no boundary leave the whole row to the original loop. An odd-length row (llm.c's 50257-wide softmax
rows) so gets vectors too; a chunked scalar fallback measured 2x slower there (each lane's four elements made
four strided accesses). Every thread of the group computes the same boundary, so every element is handled
exactly once. Widths ``x8``/``x4``/``x2`` where the widest stream's vector is 8 to 16 bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.tree import node_text, walk
from ...spec.model import DTYPES, canonical_dtype
from . import register
from ._structural import (
    MINMAX_FUNCS,
    all_names,
    binary_parts,
    declared_names,
    dims_values,
    flush,
    has_collective,
    has_jump,
    indent,
    is_1d,
    line_indent_of,
    render,
    resolved_type,
    shared_arrays,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    with_body,
    written_names,
)
from ._util import kernel_body
from ._why import Stage, declined
from .base import Rule, RuleContext

PREFIX = "wfs_"
_IDENT = re.compile(r"[A-Za-z_]\w*")
WIDTHS = {"x8": 8, "x4": 4, "x2": 2}
MAX_BYTES = 16
MIN_BYTES = 8
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_WARP = frozenset({"32", "warpSize"})
#: calls after the loop that combine each thread's partial across threads
_COMBINERS = ("__shfl", "__reduce_", "atomic", "reduce", "Reduce", "REDUCE")


@dataclass
class _Stream:
    """``ptr[OFF + j]`` in one loop: consecutive elements of one pointer at one offset."""

    ptr: str
    off: str  # the offset's text, "" for none
    elem: str
    size: int
    const: bool
    read: bool = False
    written: bool = False
    always_written: bool = False
    nodes: list[Node] = field(default_factory=list)


@dataclass
class _Loop:
    node: Node
    var: str
    vtype: str
    start: str
    bound: str
    step: str
    body: list[Node]
    streams: dict[tuple[str, str], _Stream]


def _idents(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _lane_locals(kbody: Node, data: bytes) -> dict[str, str]:
    """Locals holding a thread's position or a group's size, declared once and never written again: name ->
    "block" (``threadIdx.x``), "lane" (``threadIdx.x % 32``, ``& 31``, ``% warpSize``), "rank" (a tile's
    ``warp.thread_rank()``), "brank" (``block.thread_rank()``), "=blockDim" (``blockDim.x``) or "=warp" (``32``,
    ``warpSize``, ``warp.size()``)."""
    out: dict[str, str] = {}
    written = written_names(kbody, data)
    counts: dict[str, int] = {}
    for n in walk(kbody, ("declaration",)):
        for nm in declared_names(n, data):
            counts[nm] = counts.get(nm, 0) + 1
    for n in walk(kbody, ("declaration",)):
        d = single_decl(n, data)
        if d is None or d.value is None or d.pointer or counts.get(d.name) != 1 or d.name in written:
            continue
        kind = _position(d.value, data, out)
        if kind is None:
            size = "".join(node_text(unparen(d.value), data).split())
            if size == "blockDim.x" or out.get(size) == "=blockDim":
                kind = "=blockDim"
            elif size in _WARP or (size.endswith(".size()") and "warp" in size.lower()) or out.get(size) == "=warp":
                kind = "=warp"
        if kind is not None:
            out[d.name] = kind
    return out


def _position(v: Node, data: bytes, known: dict[str, str]) -> str | None:
    v = unparen(v)
    text = "".join(node_text(v, data).split())
    if text in ("threadIdx.x", "(int)threadIdx.x", "(unsigned)threadIdx.x"):
        return "block"
    if v.type == "identifier" and text in known:
        return known[text]
    if v.type == "call_expression" and text.endswith(".thread_rank()"):
        # a tile's rank (llm.c's ``warp.thread_rank()``) is a lane's; any other group's (``block.thread_rank()``)
        # a thread's in its block
        obj = text[: -len(".thread_rank()")].lower()
        return "rank" if any(w in obj for w in ("warp", "tile", "lane")) else "brank"
    if v.type == "cast_expression":
        inner = v.child_by_field_name("value")
        return _position(inner, data, known) if inner is not None else None
    parts = binary_parts(v, data)
    if parts is not None:
        left, op, right = parts
        r = "".join(node_text(right, data).split())
        if _position(left, data, known) == "block" and ((op == "%" and r in _WARP) or (op == "&" and r == "31")):
            return "lane"
    return None


#: a warp's index within its block, or in the grid (``(blockIdx.x*blockDim.x+threadIdx.x)/32``: blocks are whole
#: warps), or a cooperative group's ``meta_group_rank()``: the same for the 32 threads of a warp
_WARP_INDEX = re.compile(
    r"(?<![\w.*/%])threadIdx\.x/(?:32|warpSize|WARP_SIZE)\b"  # threadIdx.x / 32 (not 2 * threadIdx.x / 32)
    r"|(?<![\w.*/%+-])threadIdx\.x>>5\b"  # threadIdx.x >> 5 (not a + threadIdx.x >> 5, which shifts the sum)
    r"|\((?:blockIdx\.x\*blockDim\.x\+threadIdx\.x|threadIdx\.x\+blockIdx\.x\*blockDim\.x"
    r"|blockDim\.x\*blockIdx\.x\+threadIdx\.x|threadIdx\.x\+blockDim\.x\*blockIdx\.x)\)/(?:32|warpSize|WARP_SIZE)\b"
    r"|\.meta_group_rank\(\)")


def _varying(kbody: Node, data: bytes) -> dict[str, int]:
    """How the kernel's locals vary between the threads of a group: 2 from thread to thread (``threadIdx``,
    ``thread_rank()``, or a local that does), 1 only from warp to warp (``threadIdx.x / 32``,
    ``meta_group_rank()``), absent when the same for every thread of a block. Every write of a local counts."""
    values: dict[str, list[Node]] = {}
    for n in walk(kbody, ("init_declarator", "assignment_expression")):
        if n.type == "init_declarator":
            tgt, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            while tgt is not None and tgt.type in ("pointer_declarator", "reference_declarator"):
                tgt = tgt.child_by_field_name("declarator") or (tgt.named_children[0] if tgt.named_children
                                                                 else None)
        else:
            tgt, val = n.child_by_field_name("left"), n.child_by_field_name("right")
            tgt = unparen(tgt) if tgt is not None else None
        if tgt is not None and val is not None and tgt.type == "identifier":
            values.setdefault(node_text(tgt, data), []).append(val)
    out: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for name, vals in values.items():
            lv = max(_level(v, data, out) for v in vals)
            if lv > out.get(name, 0):
                out[name] = lv
                changed = True
    return out


def _level(expr: Node, data: bytes, known: dict[str, int]) -> int:
    text = _WARP_INDEX.sub(" WFWARP ", "".join(node_text(expr, data).split()))
    lv = 2 if ("threadIdx" in text or ".thread_rank()" in text) else 1 if "WFWARP" in text else 0
    for n in walk(expr, ("identifier",)):
        lv = max(lv, known.get(node_text(n, data), 0))
    return lv


def _cooperative(start: Node, step: Node, data: bytes, lanes: dict[str, str], block_x: int | None) -> bool:
    """Do the threads running the loop start at every residue of the step once? ``block_x``: the block's x
    extent where the launch is one-dimensional and the same at every size of the spec, else None."""
    kind = _position(start, data, lanes)
    s = "".join(node_text(unparen(step), data).split())
    alias = lanes.get(s)
    literal = int(s) if s.isdigit() else None
    if kind == "block":
        return block_x is not None and (s == "blockDim.x" or alias == "=blockDim" or literal == block_x)
    if kind == "lane":
        return s in _WARP or (s.endswith(".size()") and "warp" in s.lower()) or alias == "=warp"
    if kind == "rank":
        st = "".join(node_text(start, data).split())
        return s == st.replace(".thread_rank()", ".size()") or (
            (s in _WARP or alias == "=warp") and "warp" in st.lower())
    if kind == "brank":
        st = "".join(node_text(start, data).split())
        return s == st.replace(".thread_rank()", ".size()") or (block_x is not None and s == "blockDim.x")
    return False


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
    if var in _idents(other, data):
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


def _analyse(ctx: RuleContext) -> tuple[list[_Loop], Node, bytes] | None:
    got = kernel_body(ctx)
    if got is None or ctx.cand_kernel is None:
        return None
    kbody, data = got
    if any(n.startswith(PREFIX) for n in all_names(kbody, data)):
        return None
    lanes = _lane_locals(kbody, data)
    dims = dims_values(ctx, ctx.block) if is_1d(ctx, ctx.block) else None
    block_x = dims[0][0] if dims and all(d == dims[0] for d in dims) else None
    pointers = _pointer_types(ctx, kbody, data)
    shared = set(shared_arrays(kbody, data))
    varying = _varying(kbody, data)
    found: list[_Loop] = []
    seen_loop = False
    for n in walk(kbody, ("for_statement",)):
        parts = _loop_parts(n, data)
        body_node = n.child_by_field_name("body")
        if parts is None or body_node is None:
            continue
        var, vtype, start, bound, step = parts
        if not _cooperative(start, step, data, lanes, block_x):
            continue
        seen_loop = True
        # a warp-strided loop's threads are one warp: what varies only from warp to warp is theirs to share,
        # provided blocks are whole warps (a warp index of the grid is one only then)
        whole = block_x is None or block_x % 32 == 0
        group = 2 if _position(start, data, lanes) in ("lane", "rank") and whole else 1
        why = _legal(n, var, bound, body_node, data, pointers, shared, kbody, varying, group)
        if isinstance(why, str):
            declined(why, n, Stage.LEGALITY)
            continue
        found.append(_Loop(n, var, vtype, node_text(start, data), node_text(bound, data), node_text(step, data),
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
           shared: set[str], kbody: Node, varying: dict[str, int], group: int) -> dict[tuple[str, str], _Stream] | str:
    """The loop's streams, or why it is not this rule's. ``group``: how far the cooperating threads reach, 1 a
    block (nothing may vary from warp to warp), 2 a warp (warp-varying values are its own)."""
    body = statements(body_node)
    written = set().union(*(written_names(st, data) for st in body)) if body else set()
    if var in written:
        return f"the loop's index `{var}` is changed in its body"
    if _idents(bound, data) & (written | {var}):
        return "the loop's bound changes inside the loop"
    if has_collective(body_node, data) or has_jump(body_node, loops_ok=True):
        return ("the loop's body synchronizes, exchanges data between threads or leaves early: with other "
                "elements per thread its threads would run different iterations of it")
    if _idents(body_node, data) & _COORDS:
        return "the loop's body reads the thread coordinates"
    streams: dict[tuple[str, str], _Stream] = {}
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
            if var in _idents(idx, data) or is_write:
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
        s = streams.setdefault((name, off), _Stream(name, off, elem, size, const))
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


def _generate(lp: _Loop, data: bytes, w: int, k: int) -> str:
    """The chunked loop replacing ``lp`` (``k`` numbers the loop's names, several loops may be rewritten)."""
    p = f"{PREFIX}{k}_"
    t = lp.vtype
    streams = list(lp.streams.values())
    names = {(s.ptr, s.off): f"{p}s{i}" for i, s in enumerate(streams)}
    types = "\n".join(f"struct alignas(sizeof({s.elem}) * {w}) {names[(s.ptr, s.off)]}_t {{ {s.elem} e[{w}]; }};"
                      for s in streams)
    base = {(s.ptr, s.off): f"({s.ptr} + ({s.off}))" if s.off else s.ptr for s in streams}
    ids = {x.id: names[(s.ptr, s.off)] for s in streams for x in s.nodes}
    comps: list[str] = []
    loads: list[str] = []
    for s in streams:
        nm = names[(s.ptr, s.off)]
        cq = "const " if s.const else ""
        if s.read or not s.always_written:
            q = "" if s.written else "const "
            loads.append(f"{q}{nm}_t {nm} = *reinterpret_cast<{cq}{nm}_t*>({base[(s.ptr, s.off)]} + {p}j0);")
        else:
            loads.append(f"{nm}_t {nm};")
    for c in range(w):
        uses = False

        def rep(n: Node, c: int = c) -> str | None:
            nonlocal uses
            if n.type == "subscript_expression" and n.id in ids:
                return f"{ids[n.id]}.e[{c}]"
            if n.type == "identifier" and node_text(n, data) == lp.var:
                uses = True
            return None

        stmts = "\n".join(flush(render(st, data, rep), st, data) for st in lp.body)
        head = f"const {t} {lp.var} = {p}j0 + {c};\n" if uses else ""
        comps.append("{\n" + indent(head + stmts, "    ") + "\n}")
    stores = [f"*reinterpret_cast<{names[(s.ptr, s.off)]}_t*>({base[(s.ptr, s.off)]} + {p}j0) = "
              f"{names[(s.ptr, s.off)]};" for s in streams if s.written]
    scalar = "\n".join(flush(node_text(st, data), st, data) for st in lp.body)
    vec = "\n".join(loads + comps + stores)
    # The row's first elements up to the first vector boundary of its streams (they must share it: one element
    # size, the same offset within a vector) run the original loop, then the vector chunks, then the original
    # loop over the tail: an odd-length row (llm.c's 50257-wide softmax rows) gets vectors too. Streams that do
    # not share a boundary leave the whole row to the original loop.
    addr = [f"reinterpret_cast<unsigned long long>({base[(s.ptr, s.off)]})" for s in streams]
    size0 = f"sizeof({streams[0].elem})"
    same = " && ".join([f"{a} % sizeof({s.elem}) == 0" for a, s in zip(addr, streams, strict=True)]
                       + [f"sizeof({s.elem}) == {size0} && {a} / {size0} % {w} == {p}mis" for a, s in
                          zip(addr[1:], streams[1:], strict=True)])
    inner = f"""{types}
const {t} {p}n = {lp.bound};
const unsigned long long {p}mis = {addr[0]} / {size0} % {w};
const {t} {p}lead = ({same}) ? ({t})(({w} - {p}mis) % {w}) : {p}n;
const {t} {p}pe = {p}lead < {p}n ? {p}lead : {p}n;
for ({t} {lp.var} = {lp.start}; {lp.var} < {p}pe; {lp.var} += {lp.step}) {{
{indent(scalar, "    ")}
}}
const {t} {p}nv = ({p}n - {p}pe) / {w};
for ({t} {p}c = {lp.start}; {p}c < {p}nv; {p}c += {lp.step}) {{
    const {t} {p}j0 = {p}pe + {p}c * {w};
{indent(vec, "    ")}
}}
for ({t} {lp.var} = {p}pe + {p}nv * {w} + {lp.start}; {lp.var} < {p}n; {lp.var} += {lp.step}) {{
{indent(scalar, "    ")}
}}"""
    return "{\n" + indent(inner, "    ") + "\n}"


class VectorizeStrided(Rule):
    family = "vectorize_strided"
    structural = True
    motivated_by = ("WF104", "vectorize")

    def variants(self, ctx: RuleContext) -> list[str]:
        got = _analyse(ctx)
        if got is None:
            return []
        loops = got[0]
        widest_elem = max(s.size for lp in loops for s in lp.streams.values())
        return [param for param, w in WIDTHS.items() if MIN_BYTES <= widest_elem * w <= MAX_BYTES]

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        w = WIDTHS.get(param)
        got = _analyse(ctx)
        if w is None or got is None or param not in self.variants(ctx):
            return None
        loops, kbody, data = got
        by_id = {lp.node.id: (i, lp) for i, lp in enumerate(loops)}

        def rep(n: Node) -> str | None:
            if n.id in by_id:
                i, lp = by_id[n.id]
                pad = line_indent_of(n, data)
                return "\n".join((pad + ln if k and ln else ln)
                                 for k, ln in enumerate(_generate(lp, data, w, i).split("\n")))
            return None

        definition = with_body(ctx, render(kbody, data, rep))
        if definition is None:
            return None
        names = sorted({s.ptr for lp in loops for s in lp.streams.values()})
        why = (f"vector loads/stores of {', '.join(names)} in {len(loops)} strided loop(s): each thread takes "
               f"{w} consecutive elements per step, scalar path for the row's tail and unaligned rows")
        return ctx.derive(self.family, param, why, definition=definition)


register(VectorizeStrided())
