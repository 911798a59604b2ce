"""Staging a serial loop's shared affine footprint in shared memory: legality on the IR summary.

Why: in "one output per thread, a serial loop over k" (a GEMM and its relatives: 2mm, 3mm, syrk, syr2k,
covariance, ``C[i*NJ+j] += alpha*A[i*NK+k]*B[k*NJ+j]``) every thread of a row of the block reads the same
``A[i, k]`` and every thread of a column the same ``B[k, j]``: a block loads each element ``blockDim``
times from global memory (or L1). Staging the block's footprint of each such read — ``blockDim.a`` rows
by ``KT`` values of k — in shared memory once per k-tile, behind barriers, lets the threads reuse it.
Whether that is legal is a question about the accesses, answered here on the lowered text's summary:

* the loop ``for (k = s; k < b; k++)`` (``<=`` too; its counter declared in the header or before it) is
  not nested in another loop, its start and bound are the same for every thread of a block (no thread
  coordinate, no thread-dependent local), and its body is updates of distinct accumulators:
  ``acc += E`` / ``acc = acc + E`` (a register, or a ``C[idx] += E`` whose ``idx`` does not move with k),
  no accumulator read in a term;
* every read in ``E`` is affine (``summary``'s index atoms: thread/block coordinates and loop counters)
  and from a parameter the kernel never writes, so reading it before the statements that precede the
  loop reads the same values; the names ``E`` uses besides its reads are parameters, the loop counter,
  macros or locals declared at the top of the body and never reassigned;
* a read is **staged** when its index moves with k and with the thread coordinate of one axis ``a`` only
  (``threadIdx.y`` for ``A[i*NK+k]`` with ``i`` from y): the threads along the other axis share it. At least
  one read must be staged; reads shared by every thread or by none stay as they are;
* no shared memory, barrier, shuffle or atomic in the kernel already, blocks one deep, and the block's
  extent along each staged axis the same at every size of the spec (the tiles are static arrays);
* the counter is not read after the loop (the loop disappears), the accumulator not inside ``E``.

Bounds: a tile element is loaded only when its k is below the loop's bound and, where the kernel guards
its threads (an ``if`` or an early exit on the thread's index), when its address lies inside the
parameter's buffer, whose length the spec gives (``LenA`` in the kernel's parameters, or a number): a row
of the tile that no thread of the block uses may then lie past the matrix's edge. A kernel without a guard
relies on the launch covering the matrix exactly, so every row of the tile is one some thread reads.

The whole staged sum is computed by every thread of the block right after the top-level declarations
(before any exit or guard, so the barriers are reached by all threads); the loop is then replaced by one
update with that sum. The k-order of the sum is kept; it is added to the accumulator's start value once
(floating-point reassociation: the verifier's tolerances apply).

Each decline is a ``NotLegal`` with the reason in words and its line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from .affine import COORDS, Scope
from .passes import Kernel, declared_names, statements
from .remap import NotLegal
from .summary import Summary, _affine_sum, _views, index_text, params_of, scope_of


@dataclass(frozen=True)
class StagedRead:
    """One read of the loop's term that is staged: its byte range in the kernel text and its footprint."""

    param: str
    span: tuple[int, int]
    #: index atom -> coefficient, as ``summary`` reads it
    index: dict[str, str]
    #: the thread axis ("x" or "y") it moves with: the tile has ``blockDim.axis`` rows
    axis: str
    #: whether consecutive k are consecutive addresses (the loads then run along k)
    k_fast: bool
    line: int


@dataclass(frozen=True)
class Sum:
    """One update ``target += E`` of the loop (``op`` "=+" for ``target = target + E``) and ``E``'s byte range."""

    target: str
    op: str
    term: tuple[int, int]
    #: the accumulator's type: the staged partial sum's
    type: str


@dataclass(frozen=True)
class StagePlan:
    """What the rewrite needs: the loop, its update, the staged reads and where the staging goes."""

    loop_var: str
    var_type: str
    start: str
    #: the loop's exclusive end (``b`` of ``k < b``, ``(b) + 1`` of ``k <= b``)
    end: str
    loop_span: tuple[int, int]
    #: the loop's sums (one per statement of its body), each replaced by one update with its staged sum
    sums: tuple[Sum, ...]
    reads: tuple[StagedRead, ...]
    #: byte offset where the staging code goes (after the leading declarations) and its indentation
    at: int
    #: whether some thread of the block may skip the loop (a guard or exit on a thread index)
    guarded: bool
    line: int
    #: reads left global that were written through a local (a view): their span and ``P[affine index]``
    direct: tuple[tuple[tuple[int, int], str], ...] = ()


def _is_thread_dependent(node: Node, k: Kernel, values: Mapping[str, Node], seen: set[str] | None = None) -> bool:
    """Whether an expression varies between the threads of one block (``threadIdx`` or a local made of it)."""
    seen = seen if seen is not None else set()
    for n in walk(node, ("field_expression", "identifier")):
        if n.type == "field_expression":
            a = n.child_by_field_name("argument")
            if a is not None and k.t(a) == "threadIdx":
                return True
        elif (name := k.t(n)) in values and name not in seen:
            seen.add(name)
            if _is_thread_dependent(values[name], k, values, seen):
                return True
    return False


def _may_skip(loop: Node, k: Kernel, s: Summary) -> bool:
    """Whether some thread of a block may not run the loop (a guard or an exit on the thread's index, or any
    branch or return before it): then a tile row may belong to no thread that reads it, and its loads are
    masked by the buffer's length. Otherwise every thread's own rows are rows the original reads."""
    if loop.parent != k.body or any(p.form in ("guard", "exit") for p in s.parallel):
        return True
    branches = ("if_statement", "return_statement", "switch_statement", "conditional_expression",
                "goto_statement", "while_statement", "do_statement")
    return any(n.end_byte <= loop.start_byte for n in walk(k.body, branches))


def _in_loop(node: Node, stop: Node) -> bool:
    cur = node.parent
    while cur is not None and cur != stop:
        if cur.type in ("for_statement", "while_statement", "do_statement"):
            return True
        cur = cur.parent
    return False


def _header(loop: Node, k: Kernel, types: Mapping[str, str]) -> tuple[str, str, str, str] | NotLegal:
    """(counter, its type, start, exclusive end) of ``for (int k = s; k < b; k++)`` or ``for (k = s; ...)``."""
    init, cond, upd = (loop.child_by_field_name(x) for x in ("initializer", "condition", "update"))
    line = k.line(loop)
    if init is None or cond is None or upd is None:
        return NotLegal("the loop does not start, test and step its counter in its header", line)
    if init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        t = init.child_by_field_name("type")
        if len(ds) != 1 or ds[0].type != "init_declarator" or t is None:
            return NotLegal("the loop's header declares more than one variable", line)
        nm, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if nm is None or v is None:
            return NotLegal("the loop counter has no initial value", line)
        var, vtype, start = k.t(nm), " ".join(k.t(t).replace("const ", "").split()), k.t(v)
    else:
        a = unparen(init.named_children[0]) if init.type == "expression_statement" and init.named_children \
            else unparen(init)
        left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
        if a.type != "assignment_expression" or left is None or right is None or unparen(left).type != "identifier":
            return NotLegal(f"the loop's start `{k.t(init)}` is not `k = value`", line)
        var, start = k.t(unparen(left)), k.t(right)
        vtype = types.get(var, "int")
    c = unparen(cond)
    op, left, right = (c.child_by_field_name(x) for x in ("operator", "left", "right"))
    if c.type != "binary_expression" or op is None or left is None or right is None \
            or k.t(op) not in ("<", "<=") or k.t(unparen(left)) != var:
        return NotLegal(f"the loop's condition `{k.t(cond)}` is not `{var} < bound`", line)
    end = k.t(right) if k.t(op) == "<" else f"({k.t(right)}) + 1"
    text = "".join(k.t(unparen(upd)).split())
    if text not in (f"{var}++", f"++{var}", f"{var}+=1", f"{var}={var}+1"):
        return NotLegal(f"the loop steps `{k.t(upd)}`, not by 1", line)
    return var, vtype, start, end


def _updates(body: Node, k: Kernel) -> list[tuple[Node, str, Node]] | NotLegal:
    """(target, "+=" | "=+", E) of each statement of the loop body, every one ``acc += E`` / ``acc = acc + E``."""
    sts = statements(body)
    line = k.line(body)
    out: list[tuple[Node, str, Node]] = []
    for st in sts:
        if st.type != "expression_statement" or not st.named_children:
            return NotLegal("the loop's body is not updates `acc += term` (it carries more than sums)", line)
        a = unparen(st.named_children[0])
        left, op, right = (a.child_by_field_name(x) for x in ("left", "operator", "right"))
        if a.type != "assignment_expression" or left is None or op is None or right is None:
            return NotLegal(f"the loop's statement `{k.t(st)}` is not an update `acc += term`", k.line(st))
        if k.t(op) == "+=":
            out.append((left, "+=", right))
            continue
        r = unparen(right)
        rl, rop, rr = (r.child_by_field_name(x) for x in ("left", "operator", "right"))
        if k.t(op) == "=" and r.type == "binary_expression" and rl is not None and rop is not None \
                and rr is not None and k.t(rop) == "+" and "".join(k.t(rl).split()) == "".join(k.t(left).split()):
            out.append((left, "=+", rr))
            continue
        return NotLegal(f"the loop's statement `{k.t(st)}` is not a sum `acc += term`", k.line(st))
    if not out:
        return NotLegal("the loop's body is empty", line)
    return out


def plan_stage(k: Kernel, s: Summary, template_args: Mapping[str, str] | None = None,
               block: tuple[int, int] | None = None) -> StagePlan | NotLegal:
    """The plan to stage the shared reads of the kernel's serial loop in shared memory, or why it is not legal.

    ``block`` (threads along x and y, when the launch is known) drops the reads a tile would not help: on a
    block one thread wide across a read's axis nobody shares it, so it is staged only where its own loads are
    strided across a warp (a row per thread, ``A[i*N + k]``) and the tile's loads, along k, are not."""
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking:
        return NotLegal(f"the kernel already uses {', '.join(blocking)}: the staging's barriers and tiles would "
                        "interleave with them", stage=0)
    targs = template_args or {}
    params, uniform = params_of(k)
    pointers = {n for n, _, ptr, _ in params if ptr}
    scope = scope_of(k, uniform, {n for n, a in targs.items() if not a.replace("_", "").isalpha()})
    views = _views(k, pointers, scope)
    types: dict[str, str] = {}
    for d in walk(k.body, ("declaration",)):
        t = d.child_by_field_name("type")
        if t is not None:
            for name in declared_names(d, k.data):
                types.setdefault(name, " ".join(k.t(t).replace("const ", "").split()))
    loops = [f for f in walk(k.body, ("for_statement",)) if not _in_loop(f, k.body)]
    if not loops:
        return NotLegal("no serial loop outside other loops")
    written = {e.param for e in s.elements if e.written}
    sts = statements(k.body)
    lead = 0
    while lead < len(sts) and sts[lead].type == "declaration":
        lead += 1
    leading = {n for st in sts[:lead] for n in declared_names(st, k.data)}
    locals_ = declared_names(k.body, k.data)
    first: NotLegal | None = None
    for loop in loops:
        got = _plan_loop(loop, k, scope, views, pointers, types, written, leading, locals_,
                         {n for n, _, _, _ in params}, block)
        if isinstance(got, StagePlan):
            at = sts[lead].start_byte if lead < len(sts) else k.body.end_byte - 1
            return replace(got, at=at, guarded=_may_skip(loop, k, s))
        first = first or got
    assert first is not None
    return first


def _plan_loop(loop: Node, k: Kernel, scope: Scope,
               views: Mapping[str, tuple[str, list[Node]]], pointers: set[str], types: Mapping[str, str],
               written: set[str], leading: set[str], locals_: set[str], params: set[str],
               block: tuple[int, int] | None) -> StagePlan | NotLegal:
    line = k.line(loop)
    values, varying = scope.values, scope.varying
    head = _header(loop, k, types)
    if isinstance(head, NotLegal):
        return head
    var, vtype, start, end = head
    init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
    assert init is not None and cond is not None
    for part in (init, cond):
        if _is_thread_dependent(part, k, values):
            return NotLegal(f"the loop's range `{k.t(part)}` differs between threads of a block (a triangular "
                            "loop): they would stage different tiles", line)
    body = loop.child_by_field_name("body")
    assert body is not None
    if var in written_names(body, k.data):
        return NotLegal(f"the loop counter `{var}` is written in the loop body", line)
    upd = _updates(body, k)
    if isinstance(upd, NotLegal):
        return upd
    sums: list[Sum] = []
    accs: set[str] = set()
    for target, op, term in upd:
        tgt = unparen(target)
        if tgt.type == "identifier":
            acc = k.t(tgt)
            sum_type = types.get(acc, "")
            if not sum_type:
                return NotLegal(f"the accumulator `{acc}` is not a local of the kernel", line)
        elif tgt.type == "subscript_expression":
            arr = tgt.child_by_field_name("argument")
            acc = k.t(unparen(arr)) if arr is not None else ""
            if var in {k.t(i) for i in walk(tgt, ("identifier",))}:
                return NotLegal(f"the loop's update `{k.t(target)}` moves with `{var}`: it is not an accumulator",
                                line)
            sum_type = next((t.replace("const ", "").strip() for n, t, ptr, _ in params_of(k)[0]
                             if n == acc and ptr), "")
            if not sum_type:
                return NotLegal(f"the accumulator `{k.t(target)}` is not an element of a parameter", line)
        else:
            return NotLegal(f"the loop updates `{k.t(target)}`, not a scalar or an array element", line)
        if acc in accs:
            return NotLegal(f"`{acc}` is updated twice in the loop", line)
        accs.add(acc)
        sums.append(Sum(k.t(target), op, (term.start_byte, term.end_byte), sum_type))
    terms = [term for _, _, term in upd]
    for term in terms:
        used = {k.t(i) for i in walk(term, ("identifier",))} & accs
        if used:
            return NotLegal(f"the accumulator `{sorted(used)[0]}` is read in a term of the loop", line)
    after = [i for i in walk(k.body, ("identifier",)) if i.start_byte >= loop.end_byte and k.t(i) == var]
    if after:
        return NotLegal(f"the loop counter `{var}` is read after the loop (line {k.line(after[0])})", k.line(after[0]))
    reads: list[StagedRead] = []
    subs = [n for term in terms for n in walk(term, ("subscript_expression",))]
    inner_subs = {id(x) for n in subs for x in walk(n, ("subscript_expression",)) if x is not n}
    replaced: list[tuple[int, int]] = []
    direct_reads: list[tuple[tuple[int, int], str]] = []
    for sub in subs:
        if id(sub) in inner_subs:
            return NotLegal(f"the read `{k.t(sub)}` indexes memory with memory (non-affine)", k.line(sub))
        arg = sub.child_by_field_name("argument")
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        name = k.t(unparen(arg)) if arg is not None else ""
        if arg is None or idx is None or (name not in pointers and name not in views):
            return NotLegal(f"the read `{k.t(sub)}` is not of a pointer parameter", k.line(sub))
        param, offset = views.get(name, (name, []))
        if param in written:
            return NotLegal(f"the kernel writes `{param}`, which the loop reads: staging it early could read a "
                            "value another thread has not written yet", k.line(sub))
        inner = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_children else idx
        index, why = _affine_sum([*offset, inner], scope)
        if index is None:
            return NotLegal(f"the read `{k.t(sub)}` is not affine: {why}", k.line(sub))
        axes = sorted({a.split(".")[1] for a in index if a.startswith("threadIdx.")})
        others = [a for a in index if a != "1" and not a.startswith(COORDS) and a != var]
        if others:
            return NotLegal(f"the read `{k.t(sub)}` moves with the loop counter `{others[0]}` of another loop",
                            k.line(sub))
        direct = var not in index or len(axes) != 1 or axes[0] not in ("x", "y") or (
            block is not None and block[1 if axes[0] == "x" else 0] == 1 and index.get(f"threadIdx.{axes[0]}") == "1")
        if direct:  # shared by every thread or by none, or coalesced already on a block one thread wide: read as
            # it is, through its parameter and affine index where it was written through a local view
            if name != param or any(k.t(i) in locals_ for i in walk(inner, ("identifier",))):
                direct_reads.append(((sub.start_byte, sub.end_byte), f"{param}[{index_text(index)}]"))
                replaced.append((sub.start_byte, sub.end_byte))
            continue
        reads.append(StagedRead(param, (sub.start_byte, sub.end_byte), index, axes[0], index.get(var) == "1",
                                k.line(sub)))
        replaced.append((sub.start_byte, sub.end_byte))
    if not reads:
        return NotLegal("no read of the loop moves with the loop counter and one thread axis only (or, on a block one "
                        "thread wide, is strided across a warp): there is no footprint that threads of a block share "
                        "or that a tile would coalesce", line)
    # the names the terms keep (outside the staged reads) must exist where the staging runs
    for i in (i for term in terms for i in walk(term, ("identifier",))):
        if any(a <= i.start_byte < b for a, b in replaced):
            continue
        n = k.t(i)
        if n == var or n in params or n not in locals_:
            continue
        if n not in leading or n in varying:
            return NotLegal(f"the loop's term reads the local `{n}`, which is not declared once at the top of the "
                            "body: the staged sum is computed there", k.line(i))
    for n in {k.t(i) for i in walk(cond, ("identifier",))} | {k.t(i) for i in walk(init, ("identifier",))}:
        if n != var and n in locals_ and n not in params and (n not in leading or n in varying):
            return NotLegal(f"the loop's range reads the local `{n}`, which is not declared once at the top of the "
                            "body", line)
    return StagePlan(var, vtype, start, end, (loop.start_byte, loop.end_byte), tuple(sums), tuple(reads), 0, False,
                     line, tuple(direct_reads))


def footprint(index: Mapping[str, str], axis: str, row: str) -> str:
    """The read's address for the tile row ``row`` (the thread coordinate of ``axis`` replaced) as text."""
    return index_text({(row if a == f"threadIdx.{axis}" else a): c for a, c in index.items()})


@dataclass(frozen=True)
class TransposePlan:
    """A copy whose store (or read) is strided across a warp (a transpose): staged through a tile so both sides
    coalesce.

    The body is the leading declarations, then the store ``P[IO] = E;`` alone, behind an early exit
    ``if (C) return;`` or inside ``if (C) { ... }``. ``E`` is computed by the thread that owns it and put in
    the tile; after a barrier, thread (tx, ty) stores the value of thread (ty, tx) at that thread's ``IO``."""

    param: str
    #: the store's index atoms (``threadIdx.y`` at stride 1, ``threadIdx.x`` at another stride)
    index: dict[str, str]
    value: tuple[int, int]
    #: the condition under which a thread stores ("" when every thread does)
    cond: str
    #: the byte range from the first statement after the leading declarations to the body's closing brace
    tail: tuple[int, int]
    line: int
    #: the strided side is a read (``param``/``index``/``value`` are the read's): the block loads through the
    #: tile what each thread's mirror reads, coalesced, and each thread then takes its own value from the tile
    read: bool = False


def plan_transpose(k: Kernel, s: Summary) -> TransposePlan | NotLegal:
    """The plan to stage a strided store through a shared tile, or why it is not legal."""
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking:
        return NotLegal(f"the kernel already uses {', '.join(blocking)}", stage=0)
    if s.loops or next(walk(k.body, ("for_statement", "while_statement", "do_statement")), None) is not None:
        return NotLegal("the kernel has a loop: not a one-element copy")
    sts = statements(k.body)
    lead = 0
    while lead < len(sts) and sts[lead].type == "declaration":
        lead += 1
    tail = sts[lead:]
    cond = ""
    if len(tail) == 2 and tail[0].type == "if_statement" and tail[0].child_by_field_name("alternative") is None:
        c, cons = tail[0].child_by_field_name("condition"), tail[0].child_by_field_name("consequence")
        inner = statements(cons) if cons is not None else []
        if c is None or len(inner) != 1 or inner[0].type != "return_statement":
            return NotLegal("the statement before the store is not an early exit `if (C) return;`", k.line(tail[0]))
        cond, tail = f"!{k.t(c)}" if k.t(c).startswith("(") else f"!({k.t(c)})", tail[1:]
    elif len(tail) == 1 and tail[0].type == "if_statement" and tail[0].child_by_field_name("alternative") is None:
        c, cons = tail[0].child_by_field_name("condition"), tail[0].child_by_field_name("consequence")
        if c is None or cons is None:
            return NotLegal("the guard has no condition", k.line(tail[0]))
        cond, tail = k.t(c), statements(cons)
    if len(tail) != 1 or tail[0].type != "expression_statement" or not tail[0].named_children:
        return NotLegal("the body after the declarations is not one store (behind a guard or an exit)", k.line(sts[-1])
                        if sts else 0)
    a = unparen(tail[0].named_children[0])
    left, op, right = (a.child_by_field_name(x) for x in ("left", "operator", "right"))
    if a.type != "assignment_expression" or left is None or op is None or right is None or k.t(op) != "=" \
            or unparen(left).type != "subscript_expression":
        return NotLegal(f"`{k.t(tail[0])}` is not a store `out[index] = value`", k.line(tail[0]))
    writes = [x for x in s.accesses if x.kind != "read"]
    if len(writes) != 1:
        return NotLegal("the kernel writes memory more than once", k.line(tail[0]))
    w = writes[0]
    if w.index is None:
        return NotLegal(f"the store to `{w.param}` is not affine: {w.why}", w.line)
    if any(x.param == w.param for x in s.accesses if x.kind == "read"):
        return NotLegal(f"the kernel reads `{w.param}`, which it writes (in place): another thread's store could "
                        "come first", w.line)
    if any(a_ != "1" and not a_.startswith(COORDS) for a_ in w.index):
        return NotLegal("the store's index moves with a loop counter", w.line)
    tail_span = (sts[lead].start_byte, k.body.end_byte - 1)
    if _transposed(w.index):
        return TransposePlan(w.param, w.index, (right.start_byte, right.end_byte), cond, tail_span, w.line)
    if w.index.get("threadIdx.x") == "1" and "threadIdx.z" not in w.index:
        # the store coalesces: the strided side may be a read of the value (``out[y*N+x] = in[x*N+y]``)
        params, uniform = params_of(k)
        pointers = {n for n, _, ptr, _ in params if ptr}
        scope = scope_of(k, uniform, set())
        views = _views(k, pointers, scope)
        strided: list[tuple[Node, str, dict[str, str]]] = []
        for sub in walk(right, ("subscript_expression",)):
            arg = sub.child_by_field_name("argument")
            idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
            name = k.t(unparen(arg)) if arg is not None else ""
            if arg is None or idx is None or (name not in pointers and name not in views):
                continue
            param, offset = views.get(name, (name, []))
            at = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_children else idx
            index, _ = _affine_sum([*offset, at], scope)
            if index is not None and _transposed(index) and all(a == "1" or a.startswith(COORDS) for a in index):
                strided.append((sub, param, index))
        if len(strided) == 1:
            sub, param, index = strided[0]
            return TransposePlan(param, index, (sub.start_byte, sub.end_byte), cond, tail_span, w.line, read=True)
    return NotLegal("neither the store nor a read of its value is strided across a warp with its row contiguous in "
                    "y (not a transpose): a tile would not make it coalesce", w.line)


def _transposed(index: Mapping[str, str]) -> bool:
    """Whether an access is a transpose's strided side: ``threadIdx.y`` at stride 1, ``threadIdx.x`` at another."""
    return index.get("threadIdx.y") == "1" and index.get("threadIdx.x") not in (None, "1") \
        and "threadIdx.z" not in index


def swapped(index: Mapping[str, str]) -> str:
    """The index for the thread at the swapped position (``threadIdx.x`` and ``threadIdx.y`` exchanged)."""
    swap = {"threadIdx.x": "threadIdx.y", "threadIdx.y": "threadIdx.x"}
    return index_text({swap.get(a, a): c for a, c in index.items()})
