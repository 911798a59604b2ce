"""warp_reduce: finish a shared-memory tree reduction with warp shuffles.

Why it helps: a block tree reduction halves the active threads per step and pays a ``__syncthreads`` and
a shared-memory round trip for each of its log2(B) steps; the last five steps have at most one warp
active, which still waits on the whole block at every barrier. Warp shuffles exchange registers inside a
warp with no barrier and no shared memory.

Recognized shape (the array, index and stride names, the element type and the start value are free)::

    __syncthreads();                                   // directly before the loop
    for (int s = S0; s > 0; s >>= 1) {                 // or s >= 1 / 0 < s; s /= 2, s = s >> 1, s = s / 2
        if (tid < s) {                                 // or s > tid
            sh[tid] += sh[tid + s];                    // or sh[tid] = sh[tid] + sh[tid + s],
        }                                              //    sh[tid] = fmaxf(sh[tid], sh[tid + s]) (fmax,
        __syncthreads();                               //    max, fminf, fmin, min), *=, |=, &=, ^=
    }

at the top level of the kernel body, where ``sh`` is a one-dimensional ``__shared__`` array of a type a
shuffle moves (float, double, 32/64-bit integers), ``tid`` is ``threadIdx.x`` or a local initialized to it
and never reassigned, ``S0`` is block-uniform (no thread index in it), and the block is one-dimensional.
After the loop, ``sh`` may only be read at ``[0]`` until a statement ``sh[tid] = ...;`` rewrites it (the
rewrite leaves different partial values in ``sh[1..]``).

Two variants:

* ``tail``: the loop stops at ``s > 32``; warp 0 then folds ``sh[tid + 32]`` into ``sh[tid]`` and finishes
  with ``__shfl_down_sync`` at offsets 16..1 — exactly the additions of the original tree in the same
  order, so results are bitwise identical. Barriers: log2(B) - 5 fewer.
* ``warps``: every warp reduces its 32 values with shuffles, lane 0 of each warp stores its partial in a
  small ``__shared__`` array, and warp 0 reduces the partials: two barriers in all. The order of the
  floating-point operations changes (a different tree), which stays within float tolerances for sums.

Both keep the result where the original left it (``sh[0]``), followed by a ``__syncthreads()`` as the
original's last iteration was, so every thread may read it. The fast path needs ``S0`` to be a power of
two with 16 <= S0 <= 512 (a whole first warp, at most 32 warps): this is tested at run time (uniform in
the block, constant-folded when S0 is a compile-time constant) and anything else runs the original loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    MINMAX_FUNCS,
    SHUFFLE_TYPES,
    all_names,
    binary_parts,
    condition_of,
    declared_names,
    flush,
    for_parts,
    identifiers,
    indent,
    is_1d,
    is_builtin,
    is_ident,
    is_syncthreads,
    is_zero_literal,
    line_indent_of,
    shared_arrays,
    single_decl,
    sole_assignment,
    statements,
    subscript_parts,
    unparen,
    written_names,
)
from ._structural_rule import Launch, StructuralRule
from ._util import kernel_body
from ._why import Stage, declined
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfr_"

VARIANTS = ("tail", "warps")
_COMPOUND = {"+=": "+", "*=": "*", "|=": "|", "&=": "&", "^=": "^"}
_FULL = "0xffffffffu"


@dataclass
class TreeLoop:
    """A recognized shared-memory tree reduction loop (see the module docstring)."""

    node: Node
    var: str
    start: str
    array: str
    elem: str
    tid: str
    #: how two values combine: a format string over {a} and {b}
    combine: str
    #: the original loop's text, run when the fast path's preconditions fail at run time
    original: str


def tid_names(body: Node, data: bytes) -> set[str]:
    """Locals that hold ``threadIdx.x`` and are never reassigned."""
    out: set[str] = set()
    written = written_names(body, data)
    counts: dict[str, int] = {}
    for n in walk(body):
        if n.type == "declaration":
            d = single_decl(n, data)
            if d is not None and not d.pointer and d.value is not None and is_builtin(d.value, data, "threadIdx", "x"):
                out.add(d.name)
            for nm in declared_names(n, data):
                counts[nm] = counts.get(nm, 0) + 1
    return {t for t in out if t not in written and counts.get(t, 0) == 1}


def is_tid(node: Node | None, data: bytes, tids: set[str]) -> str | None:
    if node is None:
        return None
    n = unparen(node)
    if n.type == "identifier" and node_text(n, data) in tids:
        return node_text(n, data)
    if is_builtin(n, data, "threadIdx", "x"):
        return node_text(n, data)
    return None


def _halving(update: Node, data: bytes, var: str) -> bool:
    u = unparen(update)
    if u.type != "assignment_expression" or not is_ident(u.child_by_field_name("left"), data, var):
        return False
    op = u.child_by_field_name("operator")
    right = u.child_by_field_name("right")
    if op is None or right is None:
        return False
    o, r = node_text(op, data), node_text(unparen(right), data).replace(" ", "")
    return (o == ">>=" and r == "1") or (o == "/=" and r == "2") or (o == "=" and r in (f"{var}>>1", f"{var}/2"))


def _positive(cond: Node, data: bytes, var: str) -> bool:
    t = node_text(unparen(cond), data).replace(" ", "")
    return t in (f"{var}>0", f"0<{var}", f"{var}>=1", f"1<={var}", f"{var}!=0")


def _is_elem(node: Node | None, data: bytes, array: str, index: str) -> bool:
    """``array[index]`` where index is given as whitespace-free text."""
    if node is None:
        return False
    parts = subscript_parts(node, data)
    return parts is not None and is_ident(parts[0], data, array) \
        and node_text(unparen(parts[1]), data).replace(" ", "") == index


def _step(stmt: Node, data: bytes, tid: str, var: str, shared: dict[str, str]) -> tuple[str, str] | None:
    """(array, combine format) for the loop body's ``sh[tid] op= sh[tid + s]`` statement."""
    got = sole_assignment(stmt, data)
    if got is None:
        return None
    left, o, right = got
    parts = subscript_parts(left, data)
    if parts is None or not is_ident(parts[0], data) or node_text(unparen(parts[1]), data).replace(" ", "") != tid:
        return None
    arr = node_text(unparen(parts[0]), data)
    if arr not in shared:
        return None
    me, other = tid, f"{tid}+{var}"
    other2 = f"{var}+{tid}"

    def is_other(n: Node | None) -> bool:
        return _is_elem(n, data, arr, other) or _is_elem(n, data, arr, other2)

    r = unparen(right)
    if o in _COMPOUND and is_other(r):
        return arr, "{a} " + _COMPOUND[o] + " {b}"
    if o != "=":
        return None
    if r.type == "binary_expression":
        bop = r.child_by_field_name("operator")
        a, b = r.child_by_field_name("left"), r.child_by_field_name("right")
        if bop is not None and node_text(bop, data) in ("+", "*", "|", "&", "^") and _is_elem(a, data, arr, me) \
                and is_other(b):
            return arr, "{a} " + node_text(bop, data) + " {b}"
    if r.type == "call_expression":
        fn = r.child_by_field_name("function")
        args = r.child_by_field_name("arguments")
        if fn is not None and args is not None and node_text(fn, data) in MINMAX_FUNCS:
            xs = [c for c in args.named_children if c.type != "comment"]
            if len(xs) == 2 and _is_elem(xs[0], data, arr, me) and is_other(xs[1]):
                return arr, node_text(fn, data) + "({a}, {b})"
    return None


def match_tree_loop(st: Node, data: bytes, tids: set[str], shared: dict[str, str]) -> TreeLoop | None:
    fp = for_parts(st, data)
    if fp is None:
        return None
    d, cond, upd, body = fp.var, fp.cond, fp.update, fp.body
    assert d.value is not None
    var = d.name
    if not _positive(cond, data, var) or not _halving(upd, data, var):
        # a loop with a barrier over a shared array is a block reduction in another order: a shape miss
        if "__syncthreads" in node_text(body, data) and identifiers(body, data) & set(shared):
            return declined(f"the tree's step `{var}` does not halve down to 1 (`for ({var} = blockDim.x / 2; "
                            f"{var} > 0; {var} >>= 1)` with `if (threadIdx.x < {var})`): with a growing or "
                            "interleaved stride the last steps are not within one warp", st, Stage.SHAPE)
        return declined(f"the loop over `{var}` is not a tree (halving `{var}` while `{var} > 0`)", st, Stage.SCOPE)
    if any(is_builtin(n, data, "threadIdx", ax) for n in walk(d.value) for ax in "xyz") \
            or {node_text(n, data) for n in walk(d.value) if n.type == "identifier"} & tids:
        # the start must be the same for the whole block
        return declined(f"the tree's first step `{var} = {node_text(d.value, data)}` differs between threads", st,
                        Stage.LEGALITY)
    sts = statements(body)
    if len(sts) != 2 or sts[0].type != "if_statement" or not is_syncthreads(sts[1], data):
        return declined("the tree step is not `if (tid < s) sh[tid] += sh[tid + s]; __syncthreads();` (a barrier "
                        "before the step, or more statements)", st, Stage.SHAPE)
    iff = sts[0]
    if iff.child_by_field_name("alternative") is not None:
        return declined("the tree step's `if` has an `else`", iff, Stage.SHAPE)
    c = condition_of(iff)
    if c is None:
        return None
    parts = binary_parts(c, data)
    if parts is None:
        return None
    left, o, right = parts
    if o == "<" and is_ident(right, data, var):
        tid = is_tid(left, data, tids)
    elif o == ">" and is_ident(left, data, var):
        tid = is_tid(right, data, tids)
    else:
        tid = None
    if tid is None:
        return declined(f"the tree step's condition is not `threadIdx.x < {var}`", iff, Stage.SHAPE)
    tid_key = tid.replace(" ", "")
    step = _step(iff.child_by_field_name("consequence") or iff, data, tid_key, var, shared)
    if step is None:
        return declined(f"the tree step is not `sh[{tid}] op= sh[{tid} + {var}]` on a shared array (a sum, "
                        "product, min/max or bitwise combine)", iff, Stage.SHAPE)
    arr, comb = step
    elem = shared[arr]
    if elem not in SHUFFLE_TYPES:
        return declined(f"the shared array's element type `{elem}` cannot be moved by a warp shuffle", st,
                        Stage.LEGALITY)
    return TreeLoop(st, var, node_text(d.value, data), arr, elem, tid, comb, flush(node_text(st, data), st, data))


def _reads_array(node: Node, data: bytes, array: str) -> bool:
    return any(n.type == "identifier" and node_text(n, data) == array for n in walk(node))


def _after_ok(rest: list[Node], data: bytes, loop: TreeLoop, tids: set[str]) -> bool:
    """After the loop, ``sh`` is read only at [0] until a top-level ``sh[tid] = ...;`` rewrites all of it."""
    for st in rest:
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        if e is not None and e.type == "assignment_expression":
            op, left, right = (e.child_by_field_name(f) for f in ("operator", "left", "right"))
            parts = subscript_parts(left, data) if left is not None else None
            if op is not None and node_text(op, data) == "=" and parts is not None and right is not None \
                    and is_ident(parts[0], data, loop.array) and is_tid(parts[1], data, tids) is not None \
                    and not _reads_array(right, data, loop.array):
                return True
        for n in walk(st):
            if n.type != "identifier" or node_text(n, data) != loop.array:
                continue
            parts = subscript_parts(n.parent, data) if n.parent is not None else None
            if parts is None or parts[0].id != n.id or not is_zero_literal(parts[1], data):
                return False  # another element, or the array used as a pointer
    return True


def _analyse(ctx: RuleContext) -> tuple[list[TreeLoop], bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return None
    shared = shared_arrays(body, data)
    if not shared:
        return declined("the kernel has no shared-memory tree reduction", body, Stage.SCOPE)
    tids = tid_names(body, data)
    sts = statements(body)
    loops: list[TreeLoop] = []
    for at, st in enumerate(sts):
        lp = match_tree_loop(st, data, tids, shared)
        if lp is None:
            continue
        if at == 0 or not is_syncthreads(sts[at - 1], data):
            return declined("the tree loop is not preceded by `__syncthreads()` (the shared array must be complete "
                            "before the tree starts)", st, Stage.LEGALITY)
        if not _after_ok(sts[at + 1 :], data, lp, tids):
            return declined(f"after the tree, `{lp.array}` is read at another element than [0] (the shuffle "
                            "version leaves only element 0 right)", st, Stage.LEGALITY)
        loops.append(lp)
    if not loops:
        return declined("no top-level loop of the body is a shared-memory tree reduction", body, Stage.SCOPE)
    if not is_1d(ctx, ctx.block):
        return declined("the block is not one-dimensional", None, Stage.LAUNCH)
    return loops, data


def _shuffle_steps(loop: TreeLoop, var: str, offsets: str) -> str:
    comb = loop.combine.format(a=var, b=f"__shfl_down_sync({_FULL}, {var}, {PREFIX}o)")
    return f"for (int {PREFIX}o = {offsets}; {PREFIX}o > 0; {PREFIX}o >>= 1) {{\n    {var} = {comb};\n}}"


def _replacement(loop: TreeLoop, variant: str, n: int) -> str:
    s0 = f"({loop.start})"
    sh, tid, t = loop.array, loop.tid, loop.elem
    v = f"{PREFIX}v{n}"
    fast = f"{s0} >= 16 && {s0} <= 512 && ({s0} & ({s0} - 1)) == 0"
    tree = loop.original
    if variant == "tail":
        # the same loop, stopped before the steps a single warp can do with shuffles
        node_cond = loop.node.child_by_field_name("condition")
        assert node_cond is not None
        head_end = node_cond.start_byte - loop.node.start_byte
        cond_end = node_cond.end_byte - loop.node.start_byte
        raw = loop.original.encode()
        partial = (raw[:head_end] + f"{loop.var} > 32".encode() + raw[cond_end:]).decode()
        fold = loop.combine.format(a=v, b=f"{sh}[{tid} + 32]")
        fast_code = f"""{partial}
if ({tid} < 32) {{
    {t} {v} = {sh}[{tid}];
    if ({s0} >= 32) {{
        {v} = {fold};
    }}
{indent(_shuffle_steps(loop, v, "16"), "    ")}
    if ({tid} == 0) {{
        {sh}[0] = {v};
    }}
}}"""
    else:
        part = f"{PREFIX}warp{n}"
        fast_code = f"""__shared__ {t} {part}[32];
if ({tid} < 2 * {s0}) {{
    {t} {v} = {sh}[{tid}];
{indent(_shuffle_steps(loop, v, "16"), "    ")}
    if (({tid} & 31) == 0) {{
        {part}[{tid} >> 5] = {v};
    }}
}}
__syncthreads();
if ({tid} < 32) {{
    const int {PREFIX}nw = (2 * {s0}) >> 5;
    {t} {v} = {part}[{tid} < {PREFIX}nw ? {tid} : 0];
{indent(_shuffle_steps(loop, v, f"{PREFIX}nw >> 1"), "    ")}
    if ({tid} == 0) {{
        {sh}[0] = {v};
    }}
}}"""
    return f"""if ({fast}) {{
{indent(fast_code, "    ")}
}} else {{
{indent(tree, "    ")}
}}
__syncthreads();"""


class WarpReduce(StructuralRule[list[TreeLoop]]):
    family = "warp_reduce"
    structural = True
    motivated_by = ("warp_reduce", "barrier_stall")

    def analyse(self, ctx: RuleContext) -> tuple[list[TreeLoop], bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: list[TreeLoop], data: bytes) -> dict[str, Launch]:
        return {param: Launch() for param in VARIANTS}

    def body(self, ctx: RuleContext, shape: list[TreeLoop], data: bytes, param: str) -> str | None:
        """The body with every tree loop replaced by its shuffle version."""
        k = ctx.cand_kernel
        if k is None:
            return None
        src = ctx.cand_src.data
        assert src == data
        out: list[bytes] = []
        pos = k.body_span.start
        for n, lp in enumerate(shape):
            start, end = lp.node.start_byte, lp.node.end_byte
            out.append(src[pos:start])
            ind = line_indent_of(lp.node, src)
            out.append(indent(_replacement(lp, param, n), ind).lstrip().encode())
            pos = end
        out.append(src[pos : k.body_span.end])
        return b"".join(out).decode()

    def rationale(self, shape: list[TreeLoop], param: str) -> str:
        arrays = ", ".join(sorted({lp.array for lp in shape}))
        why = ("stop the shared-memory tree at 64 elements and finish in warp 0 with __shfl_down_sync"
               if param == "tail" else
               "reduce each warp with __shfl_down_sync, then the warps' partials in warp 0 (2 barriers)")
        return f"{why} ({arrays})"


register(WarpReduce())
