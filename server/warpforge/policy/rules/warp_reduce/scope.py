"""Where a tree may be rewritten: the checks around the loop that make the rewrite legal.

Why a module of its own: the loop alone (``tree.py``) says what is reduced; whether the shuffle version may
take its place depends on the code around it, and each check here is one precondition of the package
docstring, declined in words when it fails:

* the shared arrays are complete when the tree starts: a block barrier directly before the loop (or as the
  first statement of its step);
* nothing observes the partial values the tree leaves in ``sh[1..]`` (the rewrite leaves others there): at
  the top level of the body, after the loop ``sh`` is read only at ``[0]`` until a statement ``sh[tid] = e;``
  (``e`` not reading ``sh``) rewrites it; for a tree nested in an ``if`` or a loop (a block-per-row loop
  runs one tree per row), every use of ``sh`` anywhere in the kernel outside its trees is such a rewrite or a
  use of ``sh[0]``, and one such rewrite precedes the tree in its own block, so each run of the tree folds
  values written in the same run;
* the block is one-dimensional (``threadIdx.x < 32`` is the first warp).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    all_names,
    binary_parts,
    is_1d,
    is_zero_literal,
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
from .emit import PREFIX
from .fold import Fold, Uniform, fold_legal, match_fold
from .tree import Threads, TreeLoop, is_barrier, is_tid, match_tree_loop, threads


@dataclass
class Reductions:
    """What the rewrite replaces in one kernel: shared-memory trees and serial folds by one thread."""

    trees: list[TreeLoop] = field(default_factory=list)
    folds: list[Fold] = field(default_factory=list)


def _is_elem_write(st: Node, data: bytes, array: str, th: Threads) -> bool:
    """``array[tid] = e;`` with ``e`` not reading ``array`` (a rewrite of the whole array by the block)."""
    e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
    if e is None or e.type != "assignment_expression":
        return False
    op, left, right = (e.child_by_field_name(f) for f in ("operator", "left", "right"))
    parts = subscript_parts(left, data) if left is not None else None
    return op is not None and node_text(op, data) == "=" and parts is not None and right is not None \
        and node_text(parts[0], data) == array and is_tid(parts[1], data, th) is not None \
        and not any(n.type == "identifier" and node_text(n, data) == array for n in walk(right))


def _first_only(n: Node, data: bytes) -> bool:
    """``n`` (an identifier naming the array) is subscripted at ``[0]``."""
    parts = subscript_parts(n.parent, data) if n.parent is not None else None
    return parts is not None and parts[0].id == n.id and is_zero_literal(parts[1], data)


def _after_ok(rest: list[Node], data: bytes, arrays: set[str], th: Threads) -> str | None:
    """At the top level: the array read after the tree at another element than [0], or None."""
    live = set(arrays)
    for st in rest:
        for a in list(live):
            if _is_elem_write(st, data, a, th):
                live.discard(a)
        for n in walk(st):
            if n.type == "identifier" and node_text(n, data) in live and not _first_only(n, data):
                return node_text(n, data)
    return None


def _nested_ok(body: Node, data: bytes, trees: list[Node], lp: TreeLoop, th: Threads) -> str | None:
    """For a nested tree: why the partial values in ``sh[1..]`` could be observed, or None."""
    inside = {n.id for t in trees for n in walk(t)}
    writes: set[int] = set()
    for a in (c.array for c in lp.combines):
        for st in walk(body):
            if st.type == "expression_statement" and _is_elem_write(st, data, a, th):
                writes |= {n.id for n in walk(st.named_children[0].child_by_field_name("left") or st)}
        for n in walk(body):
            if n.type != "identifier" or node_text(n, data) != a or n.id in inside or n.id in writes:
                continue
            if n.parent is not None and n.parent.type in ("array_declarator", "init_declarator"):
                continue
            if not _first_only(n, data):
                use = node_text(n.parent or n, data)
                return f"`{a}` is used at another element than [0] outside the tree (`{use}`)"
        parent = lp.node.parent
        before = statements(parent)[: statements(parent).index(lp.node)] if parent is not None else []
        if not any(_is_elem_write(st, data, a, th) for st in before):
            return (f"no `{a}[tid] = ...;` precedes the nested tree in its block (it could fold values of an "
                    "earlier run)")
    return None


_CAST = r"(?:\([\w\s:<>]+\*\s*\))?\s*"
_VIEW = re.compile(rf"^{_CAST}(?:reinterpret_cast<[\w\s:<>]+\*\s*>\s*\()?\s*\(?([A-Za-z_]\w*)\)?\s*\)?$")
_HELPER = re.compile(rf"^{_CAST}SharedMemory\s*<[\w\s:]+>\s*\(\s*\)$")


def shared_buffers(body: Node, data: bytes) -> dict[str, str]:
    """``__shared__`` arrays and pointer views of shared memory: name -> element type (as written).

    A view is a local pointer declared once, never reassigned, whose value is a ``__shared__`` array (through
    a cast or ``reinterpret_cast``: ``float* s = (float*)smem;``) that nothing else names, or the result of
    cuda-samples' ``SharedMemory<T>()`` helper (which returns its ``extern __shared__`` array) called once in
    the kernel. Only then is the view the one name through which the kernel reaches that memory, which the
    checks on what reads ``sh[1..]`` rely on."""
    arrays = shared_arrays(body, data)
    out = {a: " ".join(t.replace("const ", "").split()) for a, t in arrays.items()}
    written = written_names(body, data)
    uses: dict[str, int] = {}
    for n in walk(body):
        if n.type == "identifier":
            uses[node_text(n, data)] = uses.get(node_text(n, data), 0) + 1
    helpers = node_text(body, data).count("SharedMemory")
    for n in walk(body):
        d = single_decl(n, data) if n.type == "declaration" else None
        if d is None or not d.pointer or d.value is None or d.name in written or d.name in out:
            continue
        v = " ".join(node_text(d.value, data).split())
        m = _VIEW.match(v)
        if (m is not None and m.group(1) in arrays and uses.get(m.group(1), 0) == 2) \
                or (_HELPER.match(v) is not None and helpers == 1):
            out[d.name] = " ".join(d.type.replace("const ", "").split())
    return out


def _position(st: Node) -> tuple[list[Node], int]:
    parent = st.parent
    sibs = statements(parent) if parent is not None and parent.type == "compound_statement" else [st]
    return sibs, next(n for n, s in enumerate(sibs) if s.id == st.id)


def _type_of(ctx: RuleContext, body: Node, data: bytes) -> dict[str, str]:
    """The value type each name holds: a local's declared type, a parameter's (its element type for a
    pointer): what a fold's target accumulates in."""
    k = ctx.cand_kernel
    out = {p.name: p.type for p in k.params} if k is not None else {}
    seen: set[str] = set()
    for d in walk(body, ("declaration",)):
        tnode = d.child_by_field_name("type")
        if tnode is None:
            continue
        kind = " ".join(node_text(tnode, data).replace("const ", "").split())
        for dn in d.children_by_field_name("declarator"):
            # a plain name, initialized or not (``float a = x[0], b = x[1];``); pointers and arrays hold no value
            inner = dn.child_by_field_name("declarator") if dn.type == "init_declarator" else dn
            if inner is None or inner.type != "identifier":
                continue
            name = node_text(inner, data)
            if name in seen:
                out.pop(name, None)
                continue
            seen.add(name)
            out[name] = kind
    return out


def _offset_views(body: Node, data: bytes, shared: dict[str, str], uniform: Uniform) -> dict[str, str]:
    """Pointers into shared memory at a uniform offset (``T* w = sh + 2 * blockDim.x;``, ``&sh[e]``), never
    reassigned: name -> element type. A fold only reads its array, so a second name for part of a shared buffer
    (mmcv keeps two arrays in one ``extern __shared__`` block this way) is as good as the buffer; the tree's
    rewrite, which writes, keeps to ``shared_buffers``' single names."""
    out = dict(shared)
    written = written_names(body, data)
    for d in walk(body, ("declaration",)):
        one = single_decl(d, data)
        if one is None or not one.pointer or one.value is None or one.name in written or one.name in out:
            continue
        v = unparen(one.value)
        base: Node | None = None
        offset: Node | None = None
        b = binary_parts(v, data)
        if b is not None and b[1] == "+":
            for x, y in ((b[0], b[2]), (b[2], b[0])):
                if node_text(unparen(x), data) in out:
                    base, offset = x, y
                    break
        elif v.type == "pointer_expression" and node_text(v, data).lstrip().startswith("&"):
            sp = subscript_parts(unparen(v.child_by_field_name("argument") or v), data)
            if sp is not None and node_text(unparen(sp[0]), data) in out:
                base, offset = sp[0], sp[1]
        if base is None or offset is None or not uniform(offset):
            continue
        kind = " ".join(one.type.replace("const ", "").split())
        if kind == out[node_text(unparen(base), data)]:
            out[one.name] = kind
    return out


def _folds(ctx: RuleContext, body: Node, data: bytes, th: Threads, shared: dict[str, str]) -> list[Fold]:
    """The serial folds of shared partials the rewrite may replace (each other one declined in words)."""
    uniform = Uniform(body, data)
    types = _type_of(ctx, body, data)
    views = _offset_views(body, data, shared, uniform)
    out: list[Fold] = []
    for st in walk(body, ("if_statement",)):
        f = match_fold(st, data, th, views, lambda t: resolved_type(ctx, t), uniform, types.get)
        if f is None:
            continue
        why = fold_legal(body, f, data, th)
        if why is not None:
            declined(why, f.node, Stage.LEGALITY)
            continue
        out.append(f)
    return out


def analyse(ctx: RuleContext) -> tuple[Reductions, bytes] | None:
    """Every tree and serial fold of the kernel the rewrite may replace, or None with the reason recorded."""
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return None
    shared = shared_buffers(body, data)
    if not shared:
        return declined("the kernel has no shared-memory tree reduction", body, Stage.SCOPE)
    th = threads(body, data)
    loops = [lp for st in walk(body) if st.type == "for_statement"
             and (lp := match_tree_loop(st, data, th, shared, lambda t: resolved_type(ctx, t))) is not None]
    folds = _folds(ctx, body, data, th, shared)
    if not loops and not folds:
        return declined("no loop of the kernel is a shared-memory tree reduction", body, Stage.SCOPE)
    nodes = [lp.node for lp in loops]
    ok: list[TreeLoop] = []
    for lp in loops:
        sibs, at = _position(lp.node)
        if not lp.barrier_first and (at == 0 or not is_barrier(sibs[at - 1], data, th)):
            declined("the tree loop is not preceded by a block barrier (the shared array must be complete before "
                     "the tree starts)", lp.node, Stage.LEGALITY)
            continue
        if lp.node.parent is not None and lp.node.parent.id == body.id:
            bad = _after_ok(sibs[at + 1 :], data, {c.array for c in lp.combines}, th)
            why = None if bad is None else \
                f"after the tree, `{bad}` is read at another element than [0] (the shuffle version leaves only " \
                "element 0 right)"
        else:
            why = _nested_ok(body, data, nodes, lp, th)
        if why is not None:
            declined(why, lp.node, Stage.LEGALITY)
            continue
        ok.append(lp)
    if not ok and not folds:
        return None
    if not is_1d(ctx, ctx.block):
        return declined("the block is not one-dimensional", None, Stage.LAUNCH)
    return Reductions(ok, folds), data
