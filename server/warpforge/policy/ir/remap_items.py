"""Binding every serial loop over an item to a group of threads (a warp, or a block): legality on the IR.

Why: ``lane_remap``'s plan (``remap.plan_lanes``) binds *one* reading loop to a warp's lanes. Other
people's "one thread per outer item" kernels do more with the item than that: an embedding row copy writes
the row (``for (c...) out[i*C + c] = wte[ix*C + c] + wpe[t*C + c]``), a softmax or layernorm row makes two
or three passes (a maximum, then ``out[j] = expf(...)`` with a sum, then ``out[j] /= sum``), and many walk
the items with a grid-stride loop. In all of them one thread walks a row while its neighbours walk rows far
away, so every load and store of a warp touches 32 cache lines. Giving the item a group of ``G`` threads
(a warp, or the whole block), each loop started at ``lane`` and stepped by ``G``, makes them coalesced.

Legality is a question about the item's accesses, answered here on the lowered text with the item index
held fixed (everything computed from the item alone, ``b = idx / T`` or ``ix = inp[b*T + t]``, is one
value per item, the same in all lanes):

* the item is ``blockIdx.x*blockDim.x + threadIdx.x``, declared once at the top (guard, early exit or none)
  or a grid-stride loop ``for (i = that; i < n; i += blockDim.x*gridDim.x)``, and no other use of
  ``threadIdx.x``/``blockIdx.x``/``gridDim.x``;
* the item's work may sit behind guards (``if (c) { ... }``, or the ``else`` of ``if (c) { S } else { ... }`` that
  ``pass_item_exits`` makes of an early ``continue``), and its loops in the branches of an ``if``/``else`` chain
  holding only loops (``if (mode == MAX) { for ... } else { for ... }``); every such condition, and that of an
  early exit before the loops, must be **one value per item** (``_one_per_item``): all threads of the item's
  group then take the same branch, so the shuffles after a split loop and lane 0's stores are reached by all;
* atomics only as commuting per-element updates (``atomicAdd(&p[e], v);``) in a split loop, ``p`` touched by
  nothing else (``_atomic_updates``): each still runs once per iteration, by one thread of the group;
* the item's loops are ``for (j = a; j < b; j++)`` at the item's top level, with no ``break``/``return``
  out of them (``continue`` only skips an iteration); a loop carries no outer variable but accumulators
  (``acc += e``, ``acc = max/min(acc, e)``, ``if (e > acc) acc = e;`` of a shuffle type), combined over the
  lanes after the loop;
* iterations are independent: an array the kernel writes is touched in the loops only at one element per
  iteration, the same affine index in every access (``out[i*C + j]`` written, then read back as
  ``out[i*C + j]`` by a later loop with the same start: the same lane owns that element in every loop), the
  index depends on the item (items do not write each other's elements) and on the loop counter alone among
  the counters, and nothing outside the loops touches it;
* nothing before or between the loops writes memory (every lane runs it), except a plain store ``a[e] = v;``
  of an array the kernel never reads (a masked item's ``out[i] = -INFINITY; return;``), which lane 0 makes;
  what follows the last loop runs on lane 0 (per-item stores happen once);
* profitable: some access in a loop is contiguous in the counter while neighbouring items are not
  neighbouring elements (a row ``C`` apart, a gathered row ``ix*C``), or a loop starts at a per-item offset.

``plan_items`` answers an ``ItemPlan`` (byte ranges for the rewrite) or ``NotLegal(reason, line)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.poly import Poly, padd
from ...cuda.tree import element_use, misparsed_assignment, plain_assignment, unparen, walk
from .affine import NonAffine, Scope, poly
from .passes import Kernel, declared_names, statements
from .remap import (
    NotLegal,
    Reduction,
    _declaration_of,
    _hidden_write,
    _loop_parts,
    carried_scalars,
    is_item,
    lvalue_name,
)
from .remap_conditions import atomic_updates, cond_of, else_of, has_loop, holders, one_per_item, per_item
from .summary import Summary, _views, params_of, scope_of

_WORD = re.compile(r"[A-Za-z_]\w*")
_LEAVE = ("break_statement", "return_statement", "goto_statement")
_LOOPS = ("for_statement", "while_statement", "do_statement")


@dataclass(frozen=True)
class SplitLoop:
    """One top-level loop of the item; the loop split over the group (it, or the outermost loop nested in it
    that reads or writes the row contiguously): ``for (j = a + lane; j < b; j += G)``. ``start``/``end`` are
    the top loop's (accumulators are saved before it and combined after it: partials carried across it)."""

    var: str
    start: int
    init_value: tuple[int, int]
    update: tuple[int, int]
    end: int
    reductions: tuple[Reduction, ...]
    #: the parameters the loop writes
    writes: tuple[str, ...]
    #: the split loop's bytes and its initializer's text (lanes own the same elements in loops that start alike)
    span: tuple[int, int] = (0, 0)
    first: str = ""


@dataclass(frozen=True)
class ItemPlan:
    index: str
    #: "top" (declared once at the top of the body) or "grid-stride" (a loop over the items)
    form: str
    #: the item index's value (divided by the group size) and where the lane's declaration goes
    index_value: tuple[int, int]
    lane_at: int
    #: the grid-stride loop's step (divided by the group size); None for "top"
    step: tuple[int, int] | None
    loops: tuple[SplitLoop, ...]
    #: the statements after the last loop (run on lane 0), or None
    tail: tuple[int, int] | None
    #: the access that makes it worth it (``out[C*T*(idx / T) + ... + i]``), for the rationale
    strided: str
    line: int
    #: where the plain stores before the loops start (``out[i] = -INFINITY;`` of a masked item): lane 0 makes them
    pre_stores: tuple[int, ...] = ()

    @property
    def writes(self) -> bool:
        return any(lp.writes for lp in self.loops)

    @property
    def reductions(self) -> tuple[Reduction, ...]:
        return tuple(r for lp in self.loops for r in lp.reductions)


@dataclass(frozen=True)
class _Acc:
    param: str
    stored: bool
    loaded: bool
    #: the index with the item held fixed; None when not affine in the counters
    index: Poly | None
    line: int
    #: its byte offset in the kernel text
    at: int
    #: the top-level loop it is in (its index in the plan), -1 outside them
    loop: int
    #: the innermost loop counter around it
    innermost: str
    text: str


def plan_items(k: Kernel, s: Summary, template_args: Mapping[str, str] | None = None,
               helpers: frozenset[str] = frozenset()) -> ItemPlan | NotLegal:
    """The plan to give each item a group of threads that split its loops, or why it is not legal. ``helpers``:
    the file's atomic-update functions (``atomic_helpers``), whose calls are atomic updates too."""
    targs = template_args or {}
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking and blocking != ["atomics"]:  # atomic updates alone are checked below (``_atomic_updates``)
        return NotLegal(f"the kernel uses {', '.join(blocking)}: threads of a block would see another mapping",
                        stage=0)
    items = [p for p in s.parallel if is_item(p.index) and p.form in ("guard", "exit", "unguarded", "grid-stride")]
    if not items:
        return NotLegal("no item index of the form blockIdx.x*blockDim.x + threadIdx.x (declared once, or a "
                        "grid-stride loop over the items)")
    dim = items[0]
    top = statements(k.body)
    step: tuple[int, int] | None = None
    if dim.form == "grid-stride":
        found = _grid_stride(dim.var, top, k)
        if isinstance(found, NotLegal):
            return found
        loop, value, step = found
        body = loop.child_by_field_name("body")
        assert body is not None
        # a jump out of the walk over the items (a return the IR could not turn into a guard, a break of that
        # loop) ends this thread's later items: a group per item walks other items, so other work would end
        out = _leaves(body)
        if out is not None:
            jump = k.t(out).split()[0].rstrip(';')
            return NotLegal(f"`{jump}` ends this thread's walk over the items (line {k.line(out)}): under another "
                            "mapping it would end other items' work" + (
                                " (it is a `continue` only where the launch gives each thread at most one item at "
                                "every size of the spec, and nothing follows the loop)" if jump == "return" else ""),
                            k.line(out))
        outside = [st for st in top if st is not loop]
        block, lane_at, form = _item_block(statements(body), dim.var, k), loop.start_byte, "grid-stride"
        item_loop: Node | None = loop
    else:
        decl = _declaration_of(dim.var, top, k)
        if decl is None:
            return NotLegal(f"the item index `{dim.var}` is not declared once at the top of the body", dim.line)
        decl_stmt, value = decl
        after = top[top.index(decl_stmt) + 1:]
        outside = top[:top.index(decl_stmt)]
        block, lane_at, form = _item_block(after, dim.var, k), decl_stmt.end_byte, "top"
        item_loop = None
    stride_node = None if step is None else (step[0], step[1])
    for n in walk(k.body, ("field_expression",)):
        obj = n.child_by_field_name("argument")
        text = "".join(k.t(n).split())
        if obj is None or text not in ("threadIdx.x", "blockIdx.x", "gridDim.x"):
            continue
        if value.start_byte <= n.start_byte < value.end_byte or (
                stride_node is not None and stride_node[0] <= n.start_byte < stride_node[1]):
            continue
        return NotLegal(f"`{text}` is used besides the item index (line {k.line(n)}): the group launch changes it",
                        k.line(n))
    if not block:
        return NotLegal("no work per item after the index", dim.line)
    sts, extra, conds = block
    outside += extra
    held = holders(sts, k)
    if isinstance(held, NotLegal):
        return held
    holding, loops, branch_conds = held
    if not loops:
        return NotLegal("no serial loop at the top of the item's work (or in branches around it)", dim.line)
    exits = [st for st in sts + outside if st.type == "if_statement" and st.start_byte < holding[-1].start_byte
             and next(walk(st, ("return_statement", "continue_statement")), None) is not None]
    for cond, what in [*((c, "guard around") for c in conds), *((c, "branch around") for c in branch_conds),
                       *((cond_of(st), "early exit from") for st in exits)]:
        if cond is not None and not one_per_item(cond, dim.var, k, s):
            return NotLegal(f"the condition `{k.t(unparen(cond))}` of the {what} the item's work (line {k.line(cond)}) "
                            "is not one value per item: the threads sharing the item would take different branches "
                            "(its shuffles and stores need all of them)", k.line(cond))
    other = next((st for st in sts if st.type in ("while_statement", "do_statement")), None)
    if other is not None:
        return NotLegal("a `while`/`do` loop over the item the IR could not make a counted `for`", k.line(other))
    split: list[SplitLoop] = []
    for lp in loops:
        got = _split_loop(lp, k, targs)
        if isinstance(got, NotLegal):
            return got
        split.append(got)
    accs = _item_accesses(k, s, dim.var, loops)
    if isinstance(accs, NotLegal):
        return accs
    accesses, derived = accs
    for i, lp in enumerate(loops):
        got = _choose_split(lp, split[i], [a for a in accesses if a.loop == i], k)
        if isinstance(got, NotLegal):
            return got
        split[i] = got
    helped = helpers and any(k.t(c.child_by_field_name("function") or c) in helpers
                             for c in walk(k.body, ("call_expression",)))
    atomics = atomic_updates(k, accesses, split, helpers) if blocking or helped else (frozenset(), frozenset())
    if isinstance(atomics, NotLegal):
        return atomics
    calls, targets = atomics
    tail_sts = sts[sts.index(holding[-1]) + 1:]
    pre = [st for st in sts if st.start_byte < holding[-1].start_byte and st not in holding] + outside
    stores = _pre_stores(accesses, pre, lane_at, k, item_loop)
    if isinstance(stores, NotLegal):
        return stores
    legal = _independent(accesses, split, loops, derived, k)
    if isinstance(legal, NotLegal):
        return legal
    for st in [*pre, *(lp.child_by_field_name("body") for lp in loops)]:
        if st is None:
            continue
        hidden = _hidden_write(st, k, calls)
        if hidden is not None and hidden.type == "call_expression" and any(
                lp.span[0] <= hidden.start_byte < lp.span[1] for lp in split):
            # in a split loop each call runs once, as before: what is unknown is whether its writes commute
            return NotLegal(f"`{k.t(hidden)}` (line {k.line(hidden)}) hands an address to a function the IR could "
                            "not inline: whether its update commutes with the other threads' (an atomic one) is "
                            "unknown", k.line(hidden))
        if hidden is not None:
            return NotLegal(f"`{k.t(hidden)}` (line {k.line(hidden)}) may write memory, and every thread of the "
                            "item's group would run it", k.line(hidden))
    strided = _profit(accesses, split, loops, derived, k)
    if isinstance(strided, NotLegal):
        return strided
    writes = [tuple(sorted({a.param for a in accesses if (a.stored or a.at in targets) and a.loop == i}))
              for i in range(len(loops))]
    plans = tuple(SplitLoop(p.var, p.start, p.init_value, p.update, p.end, p.reductions, w, p.span, p.first)
                  for p, w in zip(split, writes, strict=True))
    tail = (tail_sts[0].start_byte, tail_sts[-1].end_byte) if tail_sts else None
    return ItemPlan(dim.var, form, (value.start_byte, value.end_byte), lane_at, step, plans, tail, strided,
                    k.line(loops[0]), tuple(sorted(stores)))


def _pre_stores(accesses: list[_Acc], pre: list[Node], lane_at: int, k: Kernel, item_loop: Node | None = None
                ) -> list[int] | NotLegal:
    """The plain stores before the item's loops that lane 0 can make for the group: where their statements start.

    A masked item (``if (t2 > t) { out[idx] = -INFINITY; return; }``, llm.c's causal attention) writes its
    element before the loop it then skips. Every lane of the group runs the code before the loops alike (it
    reads nothing but the item), so each would make the store; guarded by ``lane == 0`` it happens once, as
    before. That is exact when the store is a statement of its own, ``a[e] = v;`` (not ``+=``, which lane 0
    alone already makes right, but a read of ``a`` is refused below anyway), after the lane is declared, outside
    any loop (but the grid-stride loop over the items, ``item_loop``: one iteration is one item), and ``a`` is
    read nowhere in the kernel (another lane would read it before lane 0 wrote it)."""
    pre_spans = [(st.start_byte, st.end_byte) for st in pre]
    read = {a.param for a in accesses if a.loaded}
    out: list[int] = []
    for a in accesses:
        if not a.stored or a.loop >= 0 or not any(lo <= a.at < hi for lo, hi in pre_spans):
            continue
        why = f"`{a.text}` is written before the item's loops (line {a.line}): every thread of the group would write it"
        node = k.body.descendant_for_byte_range(a.at, a.at + 1)
        while node is not None and node.type != "expression_statement" and node is not k.body:
            node = node.parent
        got = plain_assignment(node, k.data) if node is not None else None
        if node is None or got is None or unparen(got[0]).start_byte != a.at:
            return NotLegal(why + " (only a plain store `a[e] = v;` can be left to one lane)", a.line)
        if node.start_byte < lane_at or a.param in read:
            return NotLegal(why + (f", and `{a.param}` is read too (by a lane before lane 0 wrote it)"
                                   if a.param in read else ""), a.line)
        cur = node.parent
        while cur is not None and cur is not k.body and cur != item_loop:
            if cur.type in _LOOPS:
                return NotLegal(why + " (in a loop)", a.line)
            cur = cur.parent
        out.append(node.start_byte)
    return out


def _grid_stride(var: str, top: list[Node], k: Kernel) -> tuple[Node, Node, tuple[int, int]] | NotLegal:
    """The top-level ``for (int i = item; i < n; i += blockDim.x * gridDim.x)``: the loop, the item's value
    and the step expression's range."""
    for st in top:
        if st.type != "for_statement":
            continue
        init, upd = st.child_by_field_name("initializer"), st.child_by_field_name("update")
        if init is None or upd is None or var not in declared_names(init, k.data):
            continue
        ds = init.children_by_field_name("declarator")
        v = ds[0].child_by_field_name("value") if len(ds) == 1 and ds[0].type == "init_declarator" else None
        u = unparen(upd)
        op, right = u.child_by_field_name("operator"), u.child_by_field_name("right")
        if v is None or u.type != "assignment_expression" or op is None or right is None or k.t(op) != "+=":
            return NotLegal(f"the grid-stride loop over `{var}` is not `{var} += blockDim.x * gridDim.x`", k.line(st))
        try:
            p = poly(right, Scope({}, frozenset(), frozenset(), frozenset(), k.data))
        except NonAffine:
            p = {}
        if p != {("blockDim.x", "gridDim.x"): 1}:
            return NotLegal(f"the loop over `{var}` steps `{k.t(right)}`, not the grid's thread count "
                            "(blockDim.x * gridDim.x)", k.line(st))
        return st, v, (right.start_byte, right.end_byte)
    return NotLegal(f"the grid-stride loop over `{var}` is not at the top of the body")


def _item_block(sts: list[Node], item: str, k: Kernel) -> tuple[list[Node], list[Node], list[Node]] | None:
    """The statements of the item's work: ``sts``, or followed down the ``if`` that is the last statement and
    holds the loops: ``if (c) { ... }`` (no ``else``), or ``if (c) { S } else { ... }`` with no loop in ``S``
    (an early exit ``if (c) { S; continue; }`` the IR made a guard); the statements passed on the way (run by
    all, ``S`` included), and the conditions of the ``if``s followed (one value per item: checked by the caller).
    """
    passed: list[Node] = []
    conds: list[Node] = []
    while sts and sts[-1].type == "if_statement":
        cond, cons = sts[-1].child_by_field_name("condition"), sts[-1].child_by_field_name("consequence")
        alt = else_of(sts[-1])
        if cond is None or cons is None or any(has_loop(st) for st in sts[:-1]):
            break
        if alt is None and has_loop(cons):
            passed += sts[:-1]
            sts = statements(cons)
        elif alt is not None and has_loop(alt) and not has_loop(cons):
            passed += [*sts[:-1], cons]
            sts = statements(alt)
        else:
            break
        conds.append(cond)
    return (sts, passed, conds) if sts else None


def _leaves(body: Node) -> Node | None:
    """The first jump out of the loop whose body is ``body``: a ``break`` of that loop (not of a loop or switch
    nested in it), or any ``return``/``goto``."""
    own = next(walk(body, ("break_statement",), cut=lambda n: n.type in (*_LOOPS, "switch_statement")
                    and n is not body), None)
    return own or next(walk(body, ("return_statement", "goto_statement")), None)


def _split_loop(loop: Node, k: Kernel, targs: Mapping[str, str]) -> SplitLoop | NotLegal:
    parts = _loop_parts(loop, k)
    if isinstance(parts, NotLegal):
        return parts
    var, init_value, update = parts
    body = loop.child_by_field_name("body")
    assert body is not None
    out = _leaves(body)
    if out is not None:
        return NotLegal(f"`{k.t(out).split()[0].rstrip(';')}` leaves the loop early (line {k.line(out)}): lanes "
                        "would stop at different iterations", k.line(out))
    red = _carried(loop, body, var, k, targs)
    if isinstance(red, NotLegal):
        return red
    return SplitLoop(var, loop.start_byte, init_value, update, loop.end_byte, red, (), (loop.start_byte, loop.end_byte),
                     _first(loop, k))


def _first(loop: Node, k: Kernel) -> str:
    """The loop's initial value, spacing aside (``for (int j = a; ...)`` -> ``a``)."""
    init = loop.child_by_field_name("initializer")
    d = next(walk(init, ("init_declarator",)), None) if init is not None else None
    v = d.child_by_field_name("value") if d is not None else None
    return "".join(k.t(v).split()) if v is not None else ""


def _choose_split(top: Node, sl: SplitLoop, inside: list[_Acc], k: Kernel) -> SplitLoop | NotLegal:
    """The loop the group splits: the top loop when an access is contiguous in its counter and no write is
    nested deeper, else the outermost loop nested in it that has one (``for (t2) for (i) out[i] += a * v[i]``:
    every lane runs the outer loop
    and owns the same ``i`` in each of its iterations)."""
    def contiguous(var: str) -> bool:
        return any(a.index is not None and a.index.get((var,)) == 1 and a.innermost == var for a in inside)

    if contiguous(sl.var) and not any(a.stored and a.innermost != sl.var for a in inside):
        return sl
    for loop in walk(top, ("for_statement",)):
        if loop is top:
            continue
        parts = _loop_parts(loop, k)
        if isinstance(parts, NotLegal) or not contiguous(parts[0]):
            continue
        body = loop.child_by_field_name("body")
        jump = next(walk(body, _LEAVE), None) if body is not None else None
        if jump is not None:
            return NotLegal(f"`{k.t(jump).split()[0].rstrip(';')}` in the loop the group would split (line "
                            f"{k.line(jump)})", k.line(jump))
        # what the lanes compute differently must stay in the split loop: outer locals it writes would differ
        # between lanes outside it, and an accumulator updated outside it would be added once per lane
        lo, hi = loop.start_byte, loop.end_byte
        outer_locals = declared_names(top, k.data) - declared_names(loop, k.data)
        for n in walk(top, ("assignment_expression", "update_expression")):
            t = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
            name = lvalue_name(t, k) if t is not None and not misparsed_assignment(n, k.data) else None
            if name is None:
                continue
            inside_split = lo <= n.start_byte < hi
            if inside_split and name.split(".")[0] in outer_locals:
                return NotLegal(f"`{name}` is written in the loop the group splits (line {k.line(n)}) and used "
                                "outside it, where every lane would see another value", k.line(n))
            if not inside_split and name in {r.name for r in sl.reductions}:
                return NotLegal(f"the accumulator `{name}` is updated outside the loop the group splits (line "
                                f"{k.line(n)}): every lane would add it", k.line(n))
        for a in inside:
            if a.stored and not lo <= a.at < hi:
                return NotLegal(f"`{a.text}` is written outside the loop the group splits (line {a.line}): every "
                                "lane would write it", a.line)
        return SplitLoop(parts[0], sl.start, parts[1], parts[2], sl.end, sl.reductions, (), (lo, hi),
                         _first(loop, k))
    return sl


def _carried(loop: Node, body: Node, var: str, k: Kernel, targs: Mapping[str, str]
             ) -> tuple[Reduction, ...] | NotLegal:
    """The loop's accumulators (``remap.carried_scalars``); element writes are checked on the accesses."""
    del loop
    return carried_scalars(body, var, k, targs, elements=True)


def _item_accesses(k: Kernel, s: Summary, item: str, loops: list[Node]
                   ) -> tuple[list[_Acc], set[str]] | NotLegal:
    """Every element access of a parameter, its index with the item held fixed (locals computed from the item
    alone are atoms), and the atoms that depend on the item."""
    params, uniform = params_of(k)
    base = scope_of(k, uniform, set())
    pointers = {n for n, _, ptr, _ in params if ptr}
    views = _views(k, pointers, base)
    written = {a.param for a in s.accesses if a.kind != "read"}
    atoms = {item}
    derived = {item}
    candidates = {n: v for n, v in base.values.items() if n != item and n not in base.varying}
    for _ in range(len(candidates) + 1):
        changed = False
        for name, v in candidates.items():
            if name in atoms or not per_item(v, k, base, atoms, pointers, views, written):
                continue
            scope = Scope(base.values, base.counters, base.uniform | atoms, base.varying, k.data)
            try:
                poly(v, scope)
            except NonAffine:
                atoms.add(name)
                if set(_WORD.findall(k.t(v))) & derived:
                    derived.add(name)
                changed = True
        if not changed:
            break
    for name, v in candidates.items():  # locals poly expands stay expanded; those of the item are derived
        if name not in atoms and set(_WORD.findall(k.t(v))) & derived:
            derived.add(name)
    scope = Scope(base.values, base.counters, base.uniform | atoms, base.varying, k.data)
    spans = [(lp.start_byte, lp.end_byte) for lp in loops]
    out: list[_Acc] = []
    for sub in walk(k.body, ("subscript_expression",)):
        arg = sub.child_by_field_name("argument")
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        name = k.t(unparen(arg)) if arg is not None else ""
        if arg is None or idx is None or (name not in pointers and name not in views):
            continue
        param, offset = views.get(name, (name, []))
        inner = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_children else idx
        loaded, stored = element_use(sub)
        index: Poly | None = {}
        try:
            for n in [*offset, inner]:
                index = padd(index or {}, poly(n, scope))
        except NonAffine:
            index = None
        where = next((i for i, (a, b) in enumerate(spans) if a <= sub.start_byte < b), -1)
        inner_loop = _innermost(sub, k)
        out.append(_Acc(param, stored, loaded, index, k.line(sub), sub.start_byte, where, inner_loop, k.t(sub)))
    return out, derived


def _innermost(n: Node, k: Kernel) -> str:
    cur = n.parent
    while cur is not None and cur is not k.body:
        if cur.type == "for_statement":
            init = cur.child_by_field_name("initializer")
            names = sorted(declared_names(init, k.data)) if init is not None else []
            return names[0] if names else ""
        cur = cur.parent
    return ""


def _counter_terms(p: Poly, var: str) -> Poly:
    return {m: c for m, c in p.items() if var in m}


def _renamed(p: Poly, var: str) -> dict[tuple[str, ...], int]:
    return {tuple(sorted("#" if a == var else a for a in m)): c for m, c in p.items()}


def _independent(accesses: list[_Acc], split: list[SplitLoop], loops: list[Node], derived: set[str], k: Kernel
                 ) -> NotLegal | None:
    """Iterations and lanes touch disjoint elements of every array the kernel writes (see the module). The
    stores before the loops were read by ``_pre_stores``."""
    written = {a.param for a in accesses if a.stored}
    for param in sorted(written):
        mine = [a for a in accesses if a.param == param]
        inside = [a for a in mine if a.loop >= 0]
        if not inside:
            continue  # written and read outside the loops only (the tail, on lane 0)
        out = next((a for a in mine if a.loop < 0), None)
        if out is not None:
            return NotLegal(f"`{param}` is touched in the loops and outside them (line {out.line}): the lane "
                            "that reads an element may not be the one that wrote it", out.line)
        ref: dict[tuple[str, ...], int] | None = None
        start: str | None = None
        for a in inside:
            lp = split[a.loop]
            if a.index is None:
                return NotLegal(f"`{a.text}` (line {a.line}) is not affine in the loop counter with the item "
                                "held fixed: iterations may touch the same element", a.line)
            if a.stored:
                terms = _counter_terms(a.index, lp.var)
                if len(terms) != 1 or a.innermost != lp.var:
                    return NotLegal(f"`{a.text}` (line {a.line}) is not one element per iteration of the loop "
                                    f"over `{lp.var}`", a.line)
                if not any(set(_WORD.findall(" ".join(m))) & derived for m in a.index):
                    return NotLegal(f"`{a.text}` (line {a.line}) does not depend on the item: every item writes "
                                    "the same elements", a.line)
            if not lp.span[0] <= a.at < lp.span[1]:
                return NotLegal(f"`{a.text}` (line {a.line}) touches an array the loops write outside the loop "
                                "the group splits", a.line)
            got = _renamed(a.index, lp.var)
            first = lp.first
            if ref is None:
                ref, start = got, first
            elif got != ref or first != start:
                return NotLegal(f"`{param}` is written and read at different elements (line {a.line}): a lane "
                                "could read what another lane wrote", a.line)
    return None


def _profit(accesses: list[_Acc], split: list[SplitLoop], loops: list[Node], derived: set[str], k: Kernel
            ) -> str | NotLegal:
    """The access that neighbouring items read far apart while the loop reads it contiguously."""
    for a in accesses:
        if a.loop < 0 or a.index is None:
            continue
        var = split[a.loop].var
        if a.index.get((var,)) != 1 or a.innermost != var:
            continue
        far = [m for m, c in a.index.items() if set(_WORD.findall(" ".join(m))) & derived
               and not (len(m) == 1 and abs(c) == 1)]
        if far:
            return a.text
    for i, lp in enumerate(loops):
        init = lp.child_by_field_name("initializer")
        if init is not None and (set(_WORD.findall(k.t(init))) & derived
                                 or next(walk(init, ("subscript_expression",)), None) is not None):
            hit = next((a for a in accesses if a.loop == i and a.index is not None
                        and a.index.get((split[i].var,)) == 1), None)
            if hit is not None:
                return hit.text
    return NotLegal("no loop reads or writes a row contiguously while neighbouring items are far apart: "
                    "the threads' accesses are already coalesced", k.line(loops[0]))
