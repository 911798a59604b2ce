"""A file's atomic-update helpers: ``__device__`` functions that only update ``*address`` atomically by an
operation that commutes (``reduceAdd(float* address, float val) { atomicAdd(address, val); }``, or the
compare-and-swap loop of the CUDA programming guide computing ``max(val, old)``).

Why: frameworks wrap float atomics the hardware lacks (a float maximum) or that old GPUs lacked (a double sum) in
such helpers, overloaded per type, so the IR's inliner (which leaves overloads alone) keeps the call. A group of
threads per item (``remap_items``) may split a loop of such calls as it splits ``atomicAdd(&p[e], v)``: each call
still runs once, and the order of the updates does not change the element's final value. Recognized, for every
overload of the name in the file (any branch of an ``#if`` in it):

* the first parameter is a pointer (``address``), the second the value (``val``);
* the calls are commuting atomics (``atomicAdd``, ``atomicMax``, ...) or ``atomicCAS`` on ``address`` or a
  local that is ``address`` cast (``reinterpret_cast<int*>(address)``), bit casts (``__float_as_int``, ...) and
  ``fmaxf``/``fmax``/``max``/``fminf``/``fmin``/``min``; nothing is written but locals;
* an ``atomicCAS(a, assumed, v)`` is retried by the loop around it (a ``do``/``while`` testing ``!=``), and ``v``
  combines only ``val`` and ``assumed`` (through bit casts), by one max/min call or by ``+``: the loop then
  applies ``old = f(val, old)`` atomically with ``f`` commutative and associative.
"""

from __future__ import annotations

from functools import lru_cache

from tree_sitter import Node

from ...cuda.parser import file_tree
from ...cuda.tree import node_text, unparen, walk

COMMUTING = frozenset({"atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicAnd", "atomicOr", "atomicXor"})
_BITS = frozenset({"__float_as_int", "__int_as_float", "__float_as_uint", "__uint_as_float", "__double_as_longlong",
                   "__longlong_as_double"})
_MAXMIN = frozenset({"fmaxf", "fmax", "max", "fminf", "fmin", "min"})


def atomic_helpers(text: str) -> frozenset[str]:
    """The names of ``text``'s atomic-update helpers (see the module)."""
    return _helpers(text)


@lru_cache(maxsize=16)
def _helpers(text: str) -> frozenset[str]:
    data = text.encode("utf-8")
    verdict: dict[str, bool] = {}
    for fn in walk(file_tree(data).root_node, ("function_definition",)):
        head = data[fn.start_byte:(fn.child_by_field_name("declarator") or fn).start_byte].decode("utf-8", "replace")
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        nm = decl.child_by_field_name("declarator") if decl is not None else None
        if decl is None or nm is None or "__device__" not in head or "__global__" in head:
            continue
        name = node_text(nm, data)
        verdict[name] = verdict.get(name, True) and _is_update(fn, decl, data)
    return frozenset(n for n, ok in verdict.items() if ok)


def _params(decl: Node, data: bytes) -> list[tuple[str, bool]]:
    plist = decl.child_by_field_name("parameters")
    out: list[tuple[str, bool]] = []
    for p in plist.named_children if plist is not None else []:
        d = p.child_by_field_name("declarator")
        ptr = False
        while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
            ptr = ptr or d.type == "pointer_declarator"
            d = d.child_by_field_name("declarator")
        if d is None or d.type != "identifier":
            return []
        out.append((node_text(d, data), ptr))
    return out


def _is_update(fn: Node, decl: Node, data: bytes) -> bool:
    body = fn.child_by_field_name("body")
    params = _params(decl, data)
    if body is None or len(params) != 2 or not params[0][1] or params[1][1]:
        return False
    address, val = params[0][0], params[1][0]

    def t(n: Node) -> str:
        return node_text(n, data)

    aliases = {address}
    for d in walk(body, ("init_declarator",)):
        v, nm = d.child_by_field_name("value"), d.child_by_field_name("declarator")
        while nm is not None and nm.type == "pointer_declarator":
            nm = nm.child_by_field_name("declarator")
        if v is not None and nm is not None and nm.type == "identifier" and _cast_of(v, data) == address:
            aliases.add(t(nm))
    updates = 0
    for n in walk(body, ("call_expression", "assignment_expression", "update_expression")):
        if n.type != "call_expression":
            target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
            if target is None or unparen(target).type != "identifier" or t(unparen(target)) in aliases:
                return False  # a write of memory, or of the address itself
            continue
        f, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
        name = t(f) if f is not None else ""
        if name in _BITS or name in _MAXMIN or (f is not None and f.type == "template_function"
                                                  and t(f).startswith("reinterpret_cast")):
            continue
        if name not in COMMUTING and name != "atomicCAS":
            return False
        a = args.named_children if args is not None else []
        if not a or t(unparen(a[0])) not in aliases:
            return False
        if name == "atomicCAS" and (len(a) != 3 or not _retried(n, data) or not _combines(a[2], val, t(a[1]), data)):
            return False
        updates += 1
    return updates > 0


def _retried(call: Node, data: bytes) -> bool:
    cur = call.parent
    while cur is not None and cur.type not in ("do_statement", "while_statement", "function_definition"):
        cur = cur.parent
    cond = cur.child_by_field_name("condition") if cur is not None else None
    return cond is not None and "!=" in node_text(cond, data)


def _combines(v: Node, val: str, assumed: str, data: bytes) -> bool:
    """``v`` is ``f(val, assumed)`` through bit casts, ``f`` one max/min call or ``+``."""
    calls = [node_text(c.child_by_field_name("function") or c, data) for c in walk(v, ("call_expression",))]
    ops = {node_text(o, data) for b in walk(v, ("binary_expression",)) for o in [b.child_by_field_name("operator")]
           if o is not None}
    names = {node_text(i, data) for i in walk(v, ("identifier",))} - set(calls)
    outer = [c for c in calls if c in _MAXMIN]
    if any(c not in _BITS and c not in _MAXMIN for c in calls) or names != {val, assumed}:
        return False
    return (len(outer) == 1 and not ops) or (not outer and ops == {"+"})


def _cast_of(v: Node, data: bytes) -> str | None:
    """The name ``v`` casts: ``reinterpret_cast<int*>(a)``, ``(int*)a`` -> ``a``; None for anything else."""
    v = unparen(v)
    if v.type == "cast_expression":
        inner = v.child_by_field_name("value")
        return _cast_of(inner, data) if inner is not None else None
    if v.type == "call_expression":
        f, args = v.child_by_field_name("function"), v.child_by_field_name("arguments")
        a = args.named_children if args is not None else []
        if f is not None and f.type == "template_function" and node_text(f, data).startswith("reinterpret_cast") \
                and len(a) == 1:
            return _cast_of(a[0], data)
        return None
    return node_text(v, data) if v.type == "identifier" else None
