"""Which conditions and updates an item's group of threads may share: the branch and atomic preconditions of
``remap_items``.

Why a module of its own: a group of threads per item (``remap_items``) is only convergent where every branch in
the item's work goes the same way in all of its threads, and atomics are only safe to split where they commute.
Both are questions about values with the item held fixed, asked here:

* ``per_item``: an expression is one value per item (no thread coordinate, counter or twice-written local; only
  the item, scalar parameters, locals from those, and elements of arrays the kernel never writes);
* ``one_per_item``: a branch condition is (``block_uniform``: the block's coordinates and the launch's sizes,
  the same in every thread of a block, count too): the precondition for the guards, branches and exits;
* ``holders``: the item's statements that hold its loops, a loop or an ``if``/``else`` chain of loops;
* ``atomic_updates``: the kernel's atomics are commuting per-element updates in the loops the group splits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tree_sitter import Node

from ...cuda.tree import misparsed_assignment, unparen, walk
from .affine import COORDS, Scope
from .atomic_helpers import COMMUTING
from .passes import Kernel, statements
from .remap import NotLegal
from .summary import Summary, _views, params_of, scope_of

if TYPE_CHECKING:
    from .remap_items import SplitLoop, _Acc


def per_item(v: Node, k: Kernel, base: Scope, atoms: set[str], pointers: set[str],
              views: Mapping[str, tuple[str, list[Node]]], written: set[str], block_uniform: bool = False) -> bool:
    """Whether a local's value is one value per item: no thread coordinate or counter, only parameters the
    kernel never writes read, and only locals that are per item themselves. ``block_uniform``: the block's
    coordinates and the launch's sizes (the same in every thread of a block, so of an item's group) count too."""
    for n in walk(v, ("field_expression", "identifier")):
        if n.type == "field_expression":
            a = n.child_by_field_name("argument")
            if a is not None and k.t(a) in COORDS and not (block_uniform and k.t(a) != "threadIdx"):
                return False
            continue
        name = k.t(n)
        if (name in base.counters and name not in atoms) or name in base.varying:  # atoms: a grid-stride item
            return False
        if name in pointers or name in views:
            if views.get(name, (name, []))[0] in written:
                return False
        elif name in base.values and name not in atoms and name not in base.uniform \
                and not per_item(base.values[name], k, base, atoms, pointers, views, written, block_uniform):
            return False
    return True


def has_loop(n: Node) -> bool:
    return next(walk(n, ("for_statement",)), None) is not None


def else_of(st: Node) -> Node | None:
    """The statement of an ``if``'s ``else`` (None without one)."""
    alt = st.child_by_field_name("alternative")
    if alt is not None and alt.type == "else_clause":
        alt = alt.named_children[0] if alt.named_children else None
    return alt


def cond_of(st: Node) -> Node | None:
    c = st.child_by_field_name("condition")
    if c is not None and c.type == "condition_clause":
        v = c.child_by_field_name("value")
        c = v if v is not None else (c.named_children[-1] if c.named_children else None)
    return c


def holders(sts: list[Node], k: Kernel) -> tuple[list[Node], list[Node], list[Node]] | NotLegal:
    """The item's top-level statements that hold its loops: a loop, or an ``if``/``else`` chain whose branches
    hold only loops (``if (mode == MAX) { for ... } else { for ... }``: every thread of the item's group takes
    the same branch where the condition is one value per item, so each branch's loops are split like the
    others); the loops in order, and the branches' conditions."""
    holders: list[Node] = []
    loops: list[Node] = []
    conds: list[Node] = []

    def flatten(st: Node) -> bool:
        if st.type == "for_statement":
            loops.append(st)
            return True
        if st.type == "compound_statement":
            return all(flatten(x) for x in statements(st))
        if st.type == "if_statement":
            cond, cons, alt = cond_of(st), st.child_by_field_name("consequence"), else_of(st)
            if cond is None or cons is None:
                return False
            conds.append(cond)
            return flatten(cons) and (alt is None or flatten(alt))
        return st.type == "expression_statement" and not st.named_children  # `;`

    for st in sts:
        if st.type == "for_statement" or (st.type == "if_statement" and has_loop(st)):
            if not flatten(st):
                return NotLegal("a branch around the item's loops holds other statements than loops (line "
                                f"{k.line(st)}): only a branch of loops can be split like a loop", k.line(st))
            holders.append(st)
    return holders, loops, conds


def one_per_item(cond: Node, item: str, k: Kernel, s: Summary) -> bool:
    """Whether ``cond`` is one value per item (the same in every thread of the item's group): it reads no thread
    coordinate, loop counter or written local, only the item, scalar parameters, locals computed from those,
    and elements of arrays the kernel never writes (``map[i]`` loaded at the item's own index)."""
    params, uniform = params_of(k)
    got = scope_of(k, uniform, set())
    # the item itself is one value in its whole group, written or not (``w /= 2`` runs alike in every thread)
    base = Scope(got.values, got.counters, got.uniform, got.varying - {item}, got.data)
    pointers = {n for n, _, ptr, _ in params if ptr}
    views = _views(k, pointers, base)
    written = {a.param for a in s.accesses if a.kind != "read"}
    effect = next((n for n in walk(cond, ("call_expression", "assignment_expression", "update_expression"))
                   if not misparsed_assignment(n, k.data)), None)  # ``a < 0 || a >= n`` reads as a template
    return effect is None and per_item(cond, k, base, {item}, pointers, views, written, block_uniform=True)


#: atomic updates that commute (the element's final value does not depend on their order), result unused
def atomic_updates(k: Kernel, accesses: list[_Acc], split: list[SplitLoop], helpers: frozenset[str] = frozenset()
                   ) -> tuple[frozenset[int], frozenset[int]] | NotLegal:
    """The kernel's atomics, where all are per-element updates the group may split like plain stores: (where
    each call starts, where each target element's subscript starts), or why not.

    ``atomicAdd(&p[e], v);`` (or ``atomicMax``, ..., a statement of its own: the old value unused) inside the loop
    the group splits runs once per iteration under the remap as before, by one thread of the group instead of the
    item's only thread; the updates commute, so the element's final value is the same (a float sum is
    reassociated, as the verifier's tolerances allow). Other threads' updates of the same element (items sharing a
    target, ``p[map[i]*C + j]``) stay atomic. ``p`` must be touched by nothing but such updates (a plain read or
    write would meet another lane's update in another order). ``helpers`` name the file's functions that are such
    updates themselves (``atomic_helpers``: mmcv's ``reduceMax(&p[e], v)``, a compare-and-swap maximum)."""
    calls: set[int] = set()
    targets: set[int] = set()
    for call in walk(k.body, ("call_expression",)):
        fn, args = call.child_by_field_name("function"), call.child_by_field_name("arguments")
        name = k.t(fn) if fn is not None else ""
        if not name.startswith("atomic") and name not in helpers:
            continue
        line = k.line(call)
        if name not in COMMUTING and name not in helpers:
            return NotLegal(f"`{name}` (line {line}) is not an update that commutes with the others: the threads "
                            "of the item's group would make them in another order", line)
        parent = call.parent
        if parent is None or parent.type != "expression_statement":
            return NotLegal(f"the value `{name}` returns is used (line {line}): it depends on the order of the "
                            "updates, which the group changes", line)
        first = unparen(args.named_children[0]) if args is not None and args.named_children else None
        while first is not None and first.type == "cast_expression":  # ``(int*)&p[e]``
            value = first.child_by_field_name("value")
            first = unparen(value) if value is not None else None
        sub = first.named_children[-1] if first is not None and first.type == "pointer_expression" \
            and k.t(first).startswith("&") else None
        target = next((a for a in accesses if sub is not None and a.at == sub.start_byte), None)
        if target is None or sub is None or sub.type != "subscript_expression":
            return NotLegal(f"`{k.t(call)}` (line {line}) does not update an element `&p[e]` of a parameter", line)
        lp = split[target.loop] if target.loop >= 0 else None
        if lp is None or not lp.span[0] <= call.start_byte < lp.span[1]:
            return NotLegal(f"`{k.t(call)}` (line {line}) is not in the loop the item's group splits: every thread "
                            "of the group would make it", line)
        calls.add(call.start_byte)
        targets.add(target.at)
    for a in accesses:
        if a.at not in targets and any(t.param == a.param for t in accesses if t.at in targets):
            return NotLegal(f"`{a.param}` is updated atomically and also touched as `{a.text}` (line {a.line}): a "
                            "lane may meet another lane's update in another order", a.line)
    return frozenset(calls), frozenset(targets)
