"""Recognize one shared-memory tree reduction loop, in the spellings people write (see the package docstring).

Why a module of its own: the loop is what both ``warp_reduce`` (which rewrites it) and ``reduce_coarsen``
(which coarsens the load before it) must recognize, and it is where the spellings pile up: a halving or a
doubling stride, the barrier at the bottom or the top of the step, the thread index as ``threadIdx.x``, a
local copy of it or a cooperative-groups ``block.thread_index().x``, the block barrier as ``__syncthreads()``,
``block.sync()`` or ``cg::sync(block)``, and the step's combine (``step.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    binary_parts,
    condition_of,
    declared_names,
    for_parts,
    global_index,
    identifiers,
    is_builtin,
    is_ident,
    single_decl,
    statements,
    unparen,
    written_names,
)
from .._structural import flush as _flush
from .._why import Stage, declined
from .step import Combine, read_step

#: element types a warp shuffle moves (``__shfl_down_sync`` has overloads for these), after typedefs the
#: rules know are resolved
SHUFFLE_ELEMS = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "uint", "long", "unsigned long", "long long",
    "long long int", "unsigned long long", "unsigned long long int", "int32_t", "uint32_t", "int64_t", "uint64_t",
    "clock_t", "size_t",
})

_GROUP = re.compile(r"\bthread_block\s+([A-Za-z_]\w*)\s*=")


@dataclass(frozen=True)
class Threads:
    """How the kernel names its thread: locals equal to ``threadIdx.x`` (never reassigned), locals equal to
    the flat index ``blockIdx.x * blockDim.x + threadIdx.x``, and cooperative-groups block objects."""

    tids: frozenset[str]
    flat: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()


def threads(body: Node, data: bytes) -> Threads:
    """The thread-naming locals of a kernel body (each declared once and never reassigned)."""
    tids: set[str] = set()
    flat: set[str] = set()
    written = written_names(body, data)
    counts: dict[str, int] = {}
    for n in walk(body):
        if n.type == "declaration":
            d = single_decl(n, data)
            if d is not None and not d.pointer and d.value is not None:
                if is_builtin(d.value, data, "threadIdx", "x"):
                    tids.add(d.name)
                elif global_index(d.value, data, "x") == "blockDim.x":
                    flat.add(d.name)
            for nm in declared_names(n, data):
                counts[nm] = counts.get(nm, 0) + 1
    groups = set(_GROUP.findall(node_text(body, data)))
    ok = {t for t in tids | flat | groups if t not in written and counts.get(t, 0) == 1}
    return Threads(frozenset(tids & ok), frozenset(flat & ok), frozenset(groups & ok))


def tid_names(body: Node, data: bytes) -> set[str]:
    """Locals that hold ``threadIdx.x`` and are never reassigned."""
    return set(threads(body, data).tids)


def _group_thread_index(n: Node, data: bytes, th: Threads) -> bool:
    """``block.thread_index().x`` of a cooperative-groups block object."""
    t = node_text(n, data).replace(" ", "")
    return any(t == f"{g}.thread_index().x" for g in th.groups)


def is_tid(node: Node | None, data: bytes, th: Threads | set[str]) -> str | None:
    """The text of ``node`` when it is the thread's index in the (one-dimensional) block."""
    if node is None:
        return None
    th = th if isinstance(th, Threads) else Threads(frozenset(th))
    n = unparen(node)
    if (n.type == "identifier" and node_text(n, data) in th.tids) or is_builtin(n, data, "threadIdx", "x") \
            or _group_thread_index(n, data, th):
        return node_text(n, data)
    return None


def tid_spellings(body: Node, data: bytes, th: Threads) -> set[str]:
    """Every whitespace-free spelling of the thread's index found in ``body`` (plus the plain ones)."""
    out = {"threadIdx.x", *th.tids}
    for n in walk(body):
        if n.type == "field_expression" and is_tid(n, data, th) is not None:
            out.add(node_text(n, data).replace(" ", ""))
    return out


def is_barrier(stmt: Node, data: bytes, th: Threads) -> bool:
    """``__syncthreads();``, ``block.sync();`` or ``cg::sync(block);`` (a block-wide barrier)."""
    if stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return False
    t = node_text(stmt.named_children[0], data).replace(" ", "")
    return t == "__syncthreads()" or any(t in (f"{g}.sync()", f"cg::sync({g})", f"sync({g})",
                                               f"cooperative_groups::sync({g})") for g in th.groups)


@dataclass
class TreeLoop:
    """A recognized shared-memory tree reduction loop (see the package docstring)."""

    node: Node
    var: str
    #: the first step of the equivalent halving tree, as an expression in the kernel's names
    start: str
    #: "halving" (``if (tid < s)`` with ``s`` halving) or "interleaved" (``s`` doubling from 1: pairs
    #: ``2*s*k`` and ``2*s*k + s``) — the rewrite turns the latter into the former
    form: str
    combines: list[Combine]
    tid: str
    #: the step's barrier comes first (``{ __syncthreads(); if (...) ...; }``): the loop needs none before it
    barrier_first: bool
    #: the original loop's text, run when the fast path's preconditions fail at run time
    original: str
    #: run-time conditions (uniform in the block) under which the rewrite is the same reduction
    fast: list[str] = field(default_factory=list)

    @property
    def array(self) -> str:
        return self.combines[0].array

    @property
    def elem(self) -> str:
        return self.combines[0].elem

    @property
    def combine(self) -> str:
        return self.combines[0].fmt


def _ws(n: Node | None, data: bytes) -> str:
    return "" if n is None else node_text(unparen(n), data).replace(" ", "")


def _halving(update: Node, data: bytes, var: str) -> bool:
    u = unparen(update)
    if u.type != "assignment_expression" or not is_ident(u.child_by_field_name("left"), data, var):
        return False
    op, r = u.child_by_field_name("operator"), _ws(u.child_by_field_name("right"), data)
    o = node_text(op, data) if op is not None else ""
    return (o == ">>=" and r == "1") or (o == "/=" and r == "2") or (o == "=" and r in (f"{var}>>1", f"{var}/2"))


def _positive(cond: Node, data: bytes, var: str) -> bool:
    return _ws(cond, data) in (f"{var}>0", f"0<{var}", f"{var}>=1", f"1<={var}", f"{var}!=0")


def _doubling(update: Node, data: bytes, var: str) -> bool:
    u = unparen(update)
    if u.type != "assignment_expression" or not is_ident(u.child_by_field_name("left"), data, var):
        return False
    op, r = u.child_by_field_name("operator"), _ws(u.child_by_field_name("right"), data)
    o = node_text(op, data) if op is not None else ""
    return (o == "<<=" and r == "1") or (o == "*=" and r == "2") or (o == "+=" and r == var) \
        or (o == "=" and r in (f"{var}<<1", f"{var}*2", f"2*{var}", f"{var}+{var}"))


def _geometric(update: Node, data: bytes, var: str) -> bool:
    """The update multiplies, divides or shifts the stride (a tree of another shape, not a tiled walk)."""
    u = unparen(update)
    if u.type != "assignment_expression":
        return False
    op = u.child_by_field_name("operator")
    o = node_text(op, data) if op is not None else ""
    r = _ws(u.child_by_field_name("right"), data)
    return o in ("*=", "/=", ">>=", "<<=") or (o == "=" and any(f"{var}{x}" in r or f"{x}{var}" in r
                                                                 for x in ("*", "/", ">>", "<<")))


def _below(cond: Node, data: bytes, var: str) -> Node | None:
    """N of ``var < N`` / ``N > var``."""
    b = binary_parts(cond, data)
    if b is None:
        return None
    if b[1] == "<" and is_ident(b[0], data, var):
        return b[2]
    if b[1] == ">" and is_ident(b[2], data, var):
        return b[0]
    return None


def _is_product(node: Node | None, data: bytes, factors: list[str]) -> bool:
    """``node`` is the product of exactly these factors (any order and grouping, whitespace-free texts)."""
    def flat(n: Node) -> list[str] | None:
        b = binary_parts(n, data)
        if b is not None and b[1] == "*":
            left, right = flat(b[0]), flat(b[2])
            return None if left is None or right is None else left + right
        return [_ws(n, data)]
    got = flat(node) if node is not None else None
    return got is not None and sorted(got) == sorted(factors)


def _twice(node: Node | None, data: bytes, var: str) -> bool:
    """``2 * s`` / ``s * 2`` / ``s << 1`` / ``s + s``."""
    t = _ws(node, data).strip("()")
    return t in (f"2*{var}", f"{var}*2", f"{var}<<1", f"{var}+{var}")


def _every_other(cond: Node, data: bytes, var: str, th: Threads) -> str | None:
    """The thread name X of ``X % (2*s) == 0`` (also ``0 == ...``, ``!(X % (2*s))``): a tid or a flat index."""
    c = unparen(cond)
    b = binary_parts(c, data)
    mod: Node | None = None
    if b is not None and b[1] == "==":
        mod = b[0] if _ws(b[2], data) == "0" else b[2] if _ws(b[0], data) == "0" else None
    elif c.type == "unary_expression" and node_text(c, data).lstrip().startswith("!"):
        mod = c.child_by_field_name("argument")
    m = binary_parts(mod, data) if mod is not None else None
    if m is None or m[1] != "%" or not _twice(m[2], data, var):
        return None
    x = unparen(m[0])
    if is_tid(x, data, th) is not None or (x.type == "identifier" and node_text(x, data) in th.flat):
        return node_text(x, data)
    return None


def _pairs(me: set[str], var: str) -> set[str]:
    return {f"{t}+{var}" for t in me} | {f"{var}+{t}" for t in me}


def match_tree_loop(st: Node, data: bytes, th: Threads | set[str], shared: dict[str, str],
                    resolve: Callable[[str], str] = str) -> TreeLoop | None:
    """The tree reduction ``st`` is, or None (with the reason recorded by ``declined``). ``shared`` maps the
    shared buffers to their element types as written (what the rewrite declares its registers with, so a
    template stays a template); ``resolve`` gives a type as the spec instantiates it (what a shuffle must move)."""
    th = th if isinstance(th, Threads) else Threads(frozenset(th))
    fp = for_parts(st, data)
    if fp is None:
        return None
    d, cond, upd, body = fp.var, fp.cond, fp.update, fp.body
    assert d.value is not None
    var, sts = d.name, statements(body)
    barriers = [n for n, s in enumerate(sts) if is_barrier(s, data, th)]
    if not barriers or not identifiers(body, data) & set(shared):
        return declined(f"the loop over `{var}` is not a shared-memory tree (no block barrier and shared array in "
                        "its step)", st, Stage.SCOPE)
    bound: Node | None = None
    if _positive(cond, data, var) and _halving(upd, data, var):
        form, start = "halving", node_text(d.value, data)
    elif _ws(d.value, data) == "1" and _doubling(upd, data, var) and (bound := _below(cond, data, var)) is not None:
        form, start = "interleaved", f"({node_text(bound, data)}) / 2"
    elif _halving(upd, data, var) and (lim := _ws(cond, data)).startswith(f"{var}>") and lim != f"{var}>0":
        return declined(f"the tree stops at `{node_text(cond, data)}`: its last steps are already written another "
                        "way (a warp-synchronous tail)", st, Stage.SCOPE)
    elif not _geometric(upd, data, var):
        return declined(f"the loop over `{var}` steps by `{node_text(upd, data)}`, not by halving or doubling: not a "
                        "tree", st, Stage.SCOPE)
    else:
        return declined(f"the tree's step `{var}` neither halves down to 1 (`{var} >>= 1` while `{var} > 0`) nor "
                        f"doubles from 1 below a bound (`for ({var} = 1; {var} < n; {var} *= 2)`)", st, Stage.SHAPE)
    uniform = bound if bound is not None else d.value
    if any(is_tid(n, data, th) is not None or node_text(n, data) in th.flat for n in walk(uniform)) \
            or any(is_builtin(n, data, "threadIdx", ax) for n in walk(uniform) for ax in "xyz"):
        return declined(f"the tree's extent `{node_text(uniform, data)}` differs between threads", st, Stage.LEGALITY)
    if barriers == [len(sts) - 1]:
        steps, first = sts[:-1], False
    elif barriers == [0]:
        steps, first = sts[1:], True
    else:
        return declined("the tree step has a barrier between its statements (one barrier, first or last in the "
                        "step, is the tree)", st, Stage.SHAPE)
    idx: str | None = None
    if form == "interleaved" and len(steps) == 2 and (ix := single_decl(steps[0], data)) is not None \
            and ix.value is not None and any(_is_product(ix.value, data, ["2", var, t])
                                             for t in tid_spellings(body, data, th)):
        idx, steps = ix.name, steps[1:]
    if len(steps) != 1 or steps[0].type != "if_statement" or steps[0].child_by_field_name("alternative") is not None:
        return declined("the tree step is not one `if (tid < s) { combine }` beside the barrier", st, Stage.SHAPE)
    iff, c = steps[0], condition_of(steps[0])
    if c is None:
        return None
    me = {t.replace(" ", "") for t in tid_spellings(body, data, th)}
    tid = "threadIdx.x"
    fast: list[str] = []
    if form == "halving":
        b = binary_parts(c, data)
        got = None
        if b is not None and b[1] == "<" and is_ident(b[2], data, var):
            got = is_tid(b[0], data, th)
        elif b is not None and b[1] == ">" and is_ident(b[0], data, var):
            got = is_tid(b[2], data, th)
        if got is None:
            return declined(f"the tree step's condition is not `threadIdx.x < {var}`", iff, Stage.SHAPE)
        tid = got
    else:
        assert bound is not None
        n_text = node_text(bound, data)
        fast = [f"({n_text}) >= 32", f"({n_text}) <= 1024", f"(({n_text}) & (({n_text}) - 1)) == 0",
                f"({n_text}) <= blockDim.x"]
        ib = binary_parts(c, data)
        who = _every_other(c, data, var, th)
        if who is not None:
            if who in th.flat:
                # (blockIdx.x * blockDim.x + threadIdx.x) % (2s) == threadIdx.x % (2s) when 2s divides blockDim.x
                fast.append(f"(blockDim.x % ({n_text})) == 0")
        elif ib is not None and ib[1] == "<" and ((idx is not None and is_ident(ib[0], data, idx))
                                                  or any(_is_product(ib[0], data, ["2", var, t]) for t in me)):
            if _ws(ib[2], data) != _ws(bound, data):
                return declined(f"the interleaved tree's pairs stop at `{node_text(ib[2], data)}`, its steps at "
                                f"`{n_text}`: not one tree over the same elements", iff, Stage.SHAPE)
            me = {idx} if idx is not None else {_ws(ib[0], data)}
        else:
            return declined(f"the interleaved tree step's condition is not `tid % (2 * {var}) == 0` or "
                            f"`2 * {var} * tid < n`", iff, Stage.SHAPE)
    got_step = read_step(iff.child_by_field_name("consequence") or iff, data, me, _pairs(me, var), shared)
    if isinstance(got_step, str):
        return declined(f"the tree step is not `sh[tid] op= sh[tid + {var}]` on shared arrays (a sum, product, "
                        f"min/max or bitwise combine): {got_step}", iff, Stage.SHAPE)
    for cb in got_step:
        if resolve(cb.elem) not in SHUFFLE_ELEMS:
            # a bare name is most often a template parameter the spec leaves open (a guessed spec has none)
            hint = "" if not cb.elem.isidentifier() else \
                " (a template parameter is judged as the spec instantiates it: `// @warpforge template ...`)"
            return declined(f"the shared array `{cb.array}`'s element type `{cb.elem}` cannot be moved by a warp "
                            f"shuffle{hint}", st, Stage.LEGALITY)
    return TreeLoop(st, var, start, form, got_step, tid, first, _flush(node_text(st, data), st, data), fast)
