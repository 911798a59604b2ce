"""``block_items``' other spellings of the strided loop: partials kept in the thread's own shared slot (read as a
register first) and the thread's offset inside the loop's body (darknet's ``for (i = 0; i < n; i += BLOCK) ... p +
i ...`` under the guard ``p + i < n``).

Why a module of its own: each is a self-contained legality argument (see the functions' docstrings) that the pass
(``pass_block_items``) consults before its common checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tree_sitter import Node

from ...cuda.tree import unparen, walk
from .block_shape import _array_of, _Found, _fresh, _is, _literal, _mentions, _Names, _shared
from .passes import Kernel, side_effect_free, splice, statements
from .passes import Unmet as _No
from .remap import Reduction


def _slot_in_register(k: Kernel, nm: _Names, loop: Node) -> str | None:
    """``sh[tid] = z; for (...) { ... sh[tid] += e; }`` with the loop's partial kept in the thread's own shared
    slot: the text with the slot as a register (``T sh_acc = z; ... sh_acc += e; ... }`` and ``sh[tid] = sh_acc;``
    after the loop), or None when the loop keeps no partial there. Exact: until the barrier after the loop no
    other thread reads the slot, and the thread reads it only as its running value."""
    shared = _shared(k)
    sts = statements(k.body)
    li = sts.index(loop)

    def own_slot(n: Node) -> str | None:
        n = unparen(n)
        arr = n.child_by_field_name("argument") if n.type == "subscript_expression" else None
        idx = (n.child_by_field_name("indices") or n.child_by_field_name("index")) if arr is not None else None
        if arr is None or idx is None or k.t(arr) not in shared:
            return None
        ix = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_child_count == 1 else idx
        return k.t(arr) if _is(ix, k, "threadIdx", nm.tids) else None

    body = loop.child_by_field_name("body")
    assert body is not None
    slots = {got for n in walk(body, ("assignment_expression", "update_expression"))
             if (tg := n.child_by_field_name("left") or n.child_by_field_name("argument")) is not None
             and (got := own_slot(tg)) is not None}
    if not slots:
        return None
    regs = {arr: _fresh(k, f"{arr}_acc") for arr in sorted(slots)}
    inits: dict[str, tuple[Node, str]] = {}  # array -> (the statement setting its slot, the value)
    for st in sts[:li]:
        a = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        chain: list[str] = []
        while a is not None and a.type == "assignment_expression":  # `a[tid] = b[tid] = 0;`
            left, op, right = (a.child_by_field_name(x) for x in ("left", "operator", "right"))
            if left is None or op is None or right is None or k.t(op) != "=" or own_slot(left) not in slots:
                chain = []
                break
            chain.append(own_slot(left) or "")
            a = unparen(right)
        if chain and a is not None and side_effect_free(a) and not _mentions(a, k, nm) \
                and not any(k.t(i) in slots for i in walk(a, ("identifier",))):
            for arr in chain:
                if arr in inits:
                    raise _No(f"`{arr}[tid]` is set twice before the strided loop", st)
                inits[arr] = (st, k.t(a))
        elif st.type != "declaration" and any(k.t(i) in slots for i in walk(st, ("identifier",))):
            raise _No("a shared slot is used before the strided loop other than as `sh[tid] = start;`", st)
    missing = sorted(slots - set(inits))
    if missing:
        raise _No(f"the strided loop accumulates into `{missing[0]}[tid]`, which is not set before it", loop)
    edits: list[tuple[int, int, str]] = []
    for n in walk(body, ("subscript_expression",)):
        got = own_slot(n)
        if got in slots:
            edits.append((n.start_byte, n.end_byte, regs[got]))
        elif _array_of(n, k) in slots:
            raise _No(f"`{k.t(n)}` reads another thread's slot before the barrier", n)
    for st in {st.start_byte: st for st, _ in inits.values()}.values():
        edits.append((st.start_byte, st.end_byte, " ".join(f"{shared[arr][0]} {regs[arr]} = {v};"
                                                          for arr, (s0, v) in sorted(inits.items()) if s0 == st)))
    ind = k.data[k.data.rfind(b"\n", 0, loop.start_byte) + 1:loop.start_byte].decode()
    tid = next((t for t in sorted(nm.tids)), "threadIdx.x")
    stores = " ".join(f"{arr}[{tid}] = {regs[arr]};" for arr in sorted(slots))
    edits.append((loop.end_byte, loop.end_byte, f"\n{ind if not ind.strip() else ''}{stores}"))
    return splice(k.data, edits)


_ARITH = ("+", "-", "*")


def _sum_root(n: Node) -> Node:
    """The largest arithmetic expression (``+``, ``-``, ``*``, parentheses, casts) ``n`` is part of."""
    while n.parent is not None:
        p = n.parent
        op = p.child_by_field_name("operator")
        if p.type in ("parenthesized_expression", "cast_expression") or (
                p.type == "binary_expression" and op is not None and op.type in _ARITH):
            n = p
            continue
        break
    return n


def _linear(e: Node, k: Kernel, is_tid: Callable[[Node], bool], var: str) -> tuple[int, int, bool] | None:
    """``e`` as ``a * tid + b * var + rest``: (a, b, whether there is a rest), None when ``tid`` or ``var`` is
    multiplied by anything but a literal."""
    e = unparen(e)
    if is_tid(e):
        return 1, 0, False
    if e.type == "identifier":
        return (0, 1, False) if k.t(e) == var else (0, 0, True)
    if e.type == "cast_expression":
        v = e.child_by_field_name("value")
        return _linear(v, k, is_tid, var) if v is not None else None
    if e.type == "binary_expression":
        left, op, right = (e.child_by_field_name(x) for x in ("left", "operator", "right"))
        if left is None or op is None or right is None:
            return None
        a, b = _linear(left, k, is_tid, var), _linear(right, k, is_tid, var)
        if a is None or b is None:
            return None
        if op.type in ("+", "-"):
            sign = 1 if op.type == "+" else -1
            return a[0] + sign * b[0], a[1] + sign * b[1], a[2] or b[2]
        if op.type == "*":
            if a[:2] == (0, 0) and b[:2] == (0, 0):
                return 0, 0, True
            lit, other = (_literal(left, k), b) if a[:2] == (0, 0) else (_literal(right, k), a) \
                if b[:2] == (0, 0) else (None, a)
            return (other[0] * lit, other[1] * lit, other[2]) if lit is not None else None
    mentioned = any(is_tid(n) or (n.type == "identifier" and k.t(n) == var) for n in walk(e))
    return None if mentioned else (0, 0, True)


def _offset(k: Kernel, nm: _Names, f: _Found, inner: Node, bound: Node) -> list[tuple[int, int, str]]:
    """The thread's offset in the body of ``for (i = s; i < n; i += bs)``: every mention of the thread index and of
    ``i`` lies in a sum ``tid + i + ...`` (each with coefficient 1), so the thread's iterations are the elements
    ``s + tid + k * bs`` and, over the block, every element of ``[s, n + bs)`` once; each read that names them is
    guarded by ``tid + i < n`` (the rest, past ``n``, adds nothing: ``_guarded_updates``). The serial loop is the
    body with the thread index dropped from each sum and a step of 1. Returns those deletions."""
    var = k.t(f.var)

    def is_tid(n: Node) -> bool:
        return (n.type == "identifier" and k.t(n) in nm.tids) or (
            n.type == "field_expression" and _is(n, k, "threadIdx", nm.tids))

    edits: list[tuple[int, int, str]] = []
    for n in walk(inner, ("identifier", "field_expression")):
        if n.type == "identifier" and n.parent is not None and n.parent.type == "field_expression":
            continue
        if not is_tid(n) and not (n.type == "identifier" and k.t(n) == var):
            if _mentions(n, k, nm):
                raise _No(f"`{k.t(n)}` names the block size in the strided loop's body", n)
            continue
        lin = _linear(_sum_root(n), k, is_tid, var)
        if lin is None or lin[:2] != (1, 1):
            raise _No(f"`{k.t(_sum_root(n))}` does not read the thread index and `{var}` as one sum `tid + {var}`: "
                      "the thread's offset cannot be folded into the loop", n)
        if not is_tid(n):
            continue
        w = n
        while w.parent is not None and w.parent.type == "parenthesized_expression":
            w = w.parent
        p = w.parent
        left = p.child_by_field_name("left") if p is not None else None
        right = p.child_by_field_name("right") if p is not None else None
        op = p.child_by_field_name("operator") if p is not None else None
        if p is None or p.type != "binary_expression" or op is None or op.type != "+" or left is None \
                or right is None:
            edits.append((n.start_byte, n.end_byte, "0"))
        elif left == w:
            edits.append((w.start_byte, right.start_byte, ""))
        else:
            edits.append((left.end_byte, w.end_byte, ""))
    if not edits:
        raise _No("the strided loop's body does not name the thread index", f.loop)
    return edits


def _is_guard(c: Node, k: Kernel, nm: _Names, f: _Found, bound: Node) -> bool:
    """``tid + i < n`` (or ``n > tid + i``) with ``n`` the strided loop's bound."""
    c = unparen(c)
    if c.type == "condition_clause" and c.named_child_count == 1:
        c = unparen(c.named_children[0])
    left, op, right = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if c.type != "binary_expression" or left is None or op is None or right is None:
        return False
    e, n = (left, right) if op.type == "<" else (right, left) if op.type == ">" else (None, None)
    if e is None or n is None or "".join(k.t(unparen(n)).split()) != "".join(k.t(unparen(bound)).split()):
        return False

    def is_tid(x: Node) -> bool:
        return (x.type == "identifier" and k.t(x) in nm.tids) or (
            x.type == "field_expression" and _is(x, k, "threadIdx", nm.tids))

    return _linear(e, k, is_tid, k.t(f.var)) == (1, 1, False)


def _guarded_updates(k: Kernel, nm: _Names, f: _Found, inner: Node, bound: Node,
                     accs: dict[str, Reduction]) -> None:
    """In the offset form every accumulator update adds nothing past the bound: it is ``acc += (tid + i < n) ? e :
    0`` or inside ``if (tid + i < n)``; and every read of memory is under that guard."""
    def guarded(n: Node) -> bool:
        up = n.parent
        while up is not None and up != inner:
            if up.type == "if_statement":
                cond, cons = up.child_by_field_name("condition"), up.child_by_field_name("consequence")
                if cond is not None and cons is not None and cons.start_byte <= n.start_byte < cons.end_byte \
                        and _is_guard(cond, k, nm, f, bound):
                    return True
            if up.type == "conditional_expression":
                cond, yes = up.child_by_field_name("condition"), up.child_by_field_name("consequence")
                if cond is not None and yes is not None and yes.start_byte <= n.start_byte < yes.end_byte \
                        and _is_guard(cond, k, nm, f, bound):
                    return True
            up = up.parent
        return False

    for n in walk(inner, ("subscript_expression",)):
        if not guarded(n):
            raise _No(f"`{k.t(n)}` is read without the guard `tid + {k.t(f.var)} < {k.t(bound)}`: past the bound the "
                      "threads would read other elements", n)
    for n in walk(inner, ("assignment_expression", "update_expression")):
        t = n.child_by_field_name("left") or n.child_by_field_name("argument")
        if t is None or k.t(unparen(t)) not in accs or guarded(n):
            continue
        right = n.child_by_field_name("right")
        r = unparen(right) if right is not None else None
        op = n.child_by_field_name("operator")
        cond = r.child_by_field_name("condition") if r is not None and r.type == "conditional_expression" else None
        alt = r.child_by_field_name("alternative") if r is not None and r.type == "conditional_expression" else None
        if op is None or k.t(op) != "+=" or cond is None or alt is None or not _is_guard(cond, k, nm, f, bound) \
                or not re.fullmatch(r"\(?\s*0(\.0*)?[fF]?\s*\)?", k.t(alt).strip()):
            raise _No(f"`{k.t(n)}` updates `{k.t(unparen(t))}` past the bound too: the offset form needs "
                      f"`{k.t(unparen(t))} += (tid + {k.t(f.var)} < {k.t(bound)}) ? e : 0` or the update under that "
                      "`if`", n)
