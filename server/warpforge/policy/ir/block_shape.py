"""``block_items``' reading of a block-per-item kernel: how it names its thread, its block size and its item, and
where its loop strided by the block is (a top-level loop, or one nested in uniform loops).

Why a module of its own: the pass (``pass_block_items``) and its other spellings (``block_forms``) ask the same
questions of the kernel's names; each failure is an ``Unmet`` (``passes``) with the reason in words and the node
it is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tree_sitter import Node

from ...cuda.tree import member, unparen, walk, written_names
from .passes import Kernel, PassEnv, statements


@dataclass(frozen=True)
class _Names:
    """How the kernel names its thread, block size and item: locals declared once at the top, never written."""

    tids: frozenset[str]
    sizes: frozenset[str]
    items: frozenset[str]
    #: each such local's declaration statement
    decls: dict[str, Node]
    #: the launch's block size when it is the same at every size of the spec (0: it differs, or unknown): a
    #: literal stride equal to it is the block's (darknet's `i += BLOCK` with `<<<n, BLOCK>>>`)
    block: int = 0


def _locals(k: Kernel) -> _Names:
    written = written_names(k.body, k.data)
    counts: dict[str, int] = {}
    for d in walk(k.body, ("declaration", "parameter_declaration")):
        for dn in d.children_by_field_name("declarator"):
            cur: Node | None = dn
            while cur is not None and cur.type != "identifier":
                cur = cur.child_by_field_name("declarator")
            if cur is not None:
                counts[k.t(cur)] = counts.get(k.t(cur), 0) + 1
    found: dict[str, set[str]] = {"threadIdx": set(), "blockDim": set(), "blockIdx": set()}
    decls: dict[str, Node] = {}
    for st in statements(k.body):
        ds = st.children_by_field_name("declarator") if st.type == "declaration" else []
        if len(ds) != 1 or ds[0].type != "init_declarator":
            continue
        nm, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if nm is None or v is None or nm.type != "identifier":
            continue
        m = member(v, k.data)
        if m is None or m[2] != "x" or m[1] not in found:
            continue
        name = k.t(nm)
        if name in written or counts.get(name, 0) != 1:
            continue
        found[m[1]].add(name)
        decls[name] = st
    return _Names(frozenset(found["threadIdx"]), frozenset(found["blockDim"]), frozenset(found["blockIdx"]), decls)


def _sized(k: Kernel, env: PassEnv, nm: _Names) -> _Names:
    """``nm`` with the scalar parameters the launch's block equals at every size of the spec (llm.c passes
    ``block_size`` beside launching with it) counted as the block size."""
    if not env.blocks:
        return nm
    sizes = {b[0] for b in env.blocks}
    block = next(iter(sizes)) if len(sizes) == 1 else 0
    written = written_names(k.body, k.data)
    same: set[str] = set()
    if env.values and len(env.values) == len(env.blocks):
        same = {p for p in env.values[0] if p not in written
                and all(v.get(p) == b[0] for v, b in zip(env.values, env.blocks, strict=True))}
    decls = dict(nm.decls)
    for st in statements(k.body):  # `const int threads = 512;` with a block of 512 at every size
        ds = st.children_by_field_name("declarator") if st.type == "declaration" else []
        if not block or len(ds) != 1 or ds[0].type != "init_declarator":
            continue
        name, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if name is not None and v is not None and name.type == "identifier" and k.t(name) not in written \
                and _literal(v, k) == block and sum(1 for d in walk(k.body, ("declaration",))
                                                    if k.t(name) in _declared(d, k)) == 1:
            same.add(k.t(name))
            decls[k.t(name)] = st
    return replace(nm, sizes=nm.sizes | same, decls=decls, block=block)


def _literal(v: Node, k: Kernel) -> int | None:
    v = unparen(v)
    if v.type != "number_literal":
        return None
    t = k.t(v).rstrip("uUlL")
    return int(t, 0) if re.fullmatch(r"0[xX][0-9a-fA-F]+|[1-9][0-9]*|0", t) else None


def _declared(d: Node, k: Kernel) -> set[str]:
    out: set[str] = set()
    for dn in d.children_by_field_name("declarator"):
        cur: Node | None = dn
        while cur is not None and cur.type != "identifier":
            cur = cur.child_by_field_name("declarator")
        if cur is not None:
            out.add(k.t(cur))
    return out


def _is(node: Node | None, k: Kernel, obj: str, names: frozenset[str]) -> bool:
    """``node`` is ``obj.x`` (``threadIdx.x``...) or one of the locals equal to it."""
    if node is None:
        return False
    n = unparen(node)
    if n.type == "identifier":
        return k.t(n) in names
    m = member(n, k.data)
    return m is not None and m[1:] == (obj, "x")


@dataclass(frozen=True)
class _Found:
    """The strided loop: a top-level statement of the kernel (``top``), or nested in uniform loops that hold
    nothing else but declarations (darknet's ``for (b...) for (i = 0; i < size; i += BLOCK)``)."""

    top: Node
    #: the loop strided by the block, its start value, its update and its variable
    loop: Node
    start: Node
    update: Node
    var: Node
    #: the thread's offset is inside the body (``for (i = 0; ...; i += bs) ... x[tid + i] ...``), not the start
    offset: bool
    #: the loops from ``top`` down to ``loop``
    chain: tuple[Node, ...]


def _find(st: Node, k: Kernel, nm: _Names) -> _Found | None:
    """The strided loop ``st`` is or holds (through uniform loops with nothing else in them but declarations)."""
    chain: list[Node] = []
    cur: Node | None = st
    while cur is not None and cur.type == "for_statement":
        chain.append(cur)
        got = _strided(cur, k, nm)
        if got is not None:
            return _Found(st, cur, got[0], got[1], got[2], got[3], tuple(chain))
        inner = [s for s in statements(cur.child_by_field_name("body")) if s.type != "declaration"]
        cur = inner[0] if len(inner) == 1 else None
    return None


def _strided(st: Node, k: Kernel, nm: _Names) -> tuple[Node, Node, Node, bool] | None:
    """(the loop's start value, its update, its variable's declarator name, whether the thread's offset is in the
    body) when ``st`` is ``for (T i = tid; cond; i += bs)`` or ``for (T i = s; cond; i += bs)`` with ``s`` free of
    the thread and the body naming the thread index."""
    if st.type != "for_statement":
        return None
    init, upd = st.child_by_field_name("initializer"), st.child_by_field_name("update")
    ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
    if len(ds) != 1 or ds[0].type != "init_declarator" or upd is None:
        return None
    var, start = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if var is None or start is None or var.type != "identifier":
        return None
    offset = not _is(start, k, "threadIdx", nm.tids)
    body = st.child_by_field_name("body")
    if offset and (body is None or _mentions(start, k, nm) or not any(
            _is(n, k, "threadIdx", nm.tids) for n in walk(body, ("identifier", "field_expression")))):
        return None
    u = unparen(upd)
    left, op, right = (u.child_by_field_name(f) for f in ("left", "operator", "right"))
    if u.type != "assignment_expression" or left is None or op is None or right is None \
            or k.t(unparen(left)) != k.t(var):
        return None
    step: Node | None = None
    if k.t(op) == "+=":
        step = right
    elif k.t(op) == "=":
        r = unparen(right)
        a, o, b = (r.child_by_field_name(f) for f in ("left", "operator", "right"))
        if r.type == "binary_expression" and a is not None and o is not None and b is not None and k.t(o) == "+":
            step = b if k.t(unparen(a)) == k.t(var) else a if k.t(unparen(b)) == k.t(var) else None
    if step is None or not (_is(step, k, "blockDim", nm.sizes) or (nm.block and _literal(step, k) == nm.block)):
        return None
    return start, u, var, offset


def _loop_var(lp: Node, k: Kernel) -> str | None:
    init = lp.child_by_field_name("initializer")
    ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
    nm = ds[0].child_by_field_name("declarator") if len(ds) == 1 else None
    return k.t(nm) if nm is not None and nm.type == "identifier" else None


def _array_of(n: Node, k: Kernel) -> str | None:
    arg = n.child_by_field_name("argument")
    while arg is not None and unparen(arg).type == "subscript_expression":
        arg = unparen(arg).child_by_field_name("argument")
    return k.t(arg) if arg is not None and arg.type == "identifier" else None


def _builtin_uses(k: Kernel) -> list[tuple[Node, str, str]]:
    out: list[tuple[Node, str, str]] = []
    for n in walk(k.body, ("field_expression",)):
        m = member(n, k.data)
        if m is not None and m[0] == n and m[1] in ("threadIdx", "blockIdx", "blockDim", "gridDim"):
            out.append((n, m[1], m[2]))
    return out


def _mentions(node: Node, k: Kernel, nm: _Names) -> bool:
    for n in walk(node, ("identifier", "field_expression")):
        if n.type == "identifier" and k.t(n) in nm.tids | nm.sizes:
            return True
        m = member(n, k.data) if n.type == "field_expression" else None
        if m is not None and m[0] == n and m[1] in ("threadIdx", "blockDim"):
            return True
    return False


def _is_barrier(st: Node, k: Kernel) -> bool:
    return st.type == "expression_statement" and "".join(k.t(st).split()) == "__syncthreads();"


def _shared(k: Kernel) -> dict[str, tuple[str, Node]]:
    """``__shared__`` arrays of the body: name -> (element type as written, declaration)."""
    out: dict[str, tuple[str, Node]] = {}
    for n in walk(k.body, ("declaration",)):
        quals = {k.t(c) for c in n.children if c.type in ("type_qualifier", "storage_class_specifier")}
        t = n.child_by_field_name("type")
        if "__shared__" not in quals or t is None:
            continue
        for d in n.children_by_field_name("declarator"):
            cur: Node | None = d
            while cur is not None and cur.type != "identifier":
                cur = cur.child_by_field_name("declarator")
            if cur is not None:
                out[k.t(cur)] = (k.t(t), n)
    return out


def _fresh(k: Kernel, base: str) -> str:
    used = {k.t(i) for i in walk(k.fn, ("identifier",))}
    name, n = base, 0
    while name in used:
        n += 1
        name = f"{base}{n}"
    return name
