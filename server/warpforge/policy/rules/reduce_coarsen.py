"""reduce_coarsen: let each thread of a block reduction sum many elements before the block combines them.

Why it helps: a sum that loads one element per thread, reduces the block in shared memory and adds the
block's result to the output with one atomic keeps only one load per thread in flight — far too few bytes
to cover DRAM latency (Little's law: bandwidth × latency must be in flight) — and pays a block launch, a
whole tree reduction and a global atomic for every ``blockDim`` elements. With a grid of k blocks per SM
and a grid-stride loop (unrolled, so several loads are in flight) each thread accumulates its share of the
input in a register first; the tree and the atomic then run once per block instead of once per
``blockDim`` elements. This is what turns a latency-bound reduction into a bandwidth-bound one.

Recognized shape (names, types and the element expression free)::

    T i = blockIdx.x * M + threadIdx.x;            // M = blockDim.x or a constant equal to the block size
    sh[tid] = (i < LIMIT) ? EXPR : 0;               // EXPR any side-effect-free expression of i
    __syncthreads();
    for (...) { if (tid < s) sh[tid] += sh[tid + s]; __syncthreads(); }   // the warp_reduce tree (a sum)
    if (tid == 0) atomicAdd(DST, sh[0]);            // DST independent of the block and thread

at the top level of the kernel, ``i`` used nowhere else, the thread and block coordinates used nowhere
else (``blockIdx`` only in ``i``), a 1D launch, and M evaluating to the block size at both spec sizes.

Why that is enough for correctness: the result is the sum over all in-range ``EXPR(i)`` added into DST
with atomics — an associative, commutative combination across blocks — so any partition of the indices
among threads and blocks gives the same sum up to floating-point reassociation (within float
tolerances; integer sums are exact). The grid-stride loop with stride M·gridDim.x visits every index
``< LIMIT`` exactly once for any grid, so the grid becomes ``min(G, k × SMs)`` (k = 4 or 8); the padding
value 0 (the identity of the sum) starts each thread's partial. Nothing else changes: the tree, its
barriers and the final atomic run as before, once per block.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    Bound,
    Decl,
    all_names,
    call_names,
    condition_of,
    envs,
    global_index,
    has_collective,
    is_1d,
    is_ident,
    is_zero_literal,
    launch_ok,
    line_indent_of,
    resolved_type,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
)
from ._structural_rule import Launch, StructuralRule
from ._util import eval_expr, kernel_body
from ._why import Stage, declined, recording
from .base import RuleContext
from .warp_reduce import is_tid, match_tree_loop, threads
from .warp_reduce.scope import shared_buffers
from .warp_reduce.tree import is_barrier

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfc_"

#: param -> blocks per SM of the grid-stride launch
VARIANTS = {"sm4": 4, "sm8": 8}


@dataclass
class _Shape:
    index: Decl
    mult: str
    load: Node
    array: str
    elem: str
    tid: str
    bound: Bound
    expr: Node
    zero: Node


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return declined("the block reduction is already coarsened", None, Stage.SCOPE)
    shared = shared_buffers(body, data)

    def resolve(t: str) -> str:
        return resolved_type(ctx, t)

    tids = threads(body, data)
    sts = statements(body)
    with recording():  # warp_reduce's matcher speaks for warp_reduce: its notes are not this rule's answer
        at = next((n for n, st in enumerate(sts) if match_tree_loop(st, data, tids, shared, resolve) is not None),
                  None)
    if at is None:
        return declined("the kernel has no shared-memory tree reduction at the top level of its body", body,
                        Stage.SCOPE)
    with recording():
        tree = match_tree_loop(sts[at], data, tids, shared, resolve)
    assert tree is not None
    # the load sits directly before the tree when the tree's step starts with the barrier, else before the barrier
    gap = 2 if at > 0 and is_barrier(sts[at - 1], data, tids) else 1
    if at < gap + 1 or not (tree.barrier_first or gap == 2):
        return declined("the tree is not preceded by `i = ...; sh[tid] = (i < n) ? x[i] : 0; __syncthreads();`",
                        sts[at], Stage.SHAPE)
    if len(tree.combines) != 1:
        return declined("the tree folds several arrays (coarsening rewrites one load)", sts[at], Stage.SHAPE)
    if k.template_params:
        return declined("the kernel is a template", None, Stage.SHAPE)
    if not (is_1d(ctx, ctx.grid) and is_1d(ctx, ctx.block)):
        return declined("the launch is not one-dimensional", None, Stage.LAUNCH)
    if tree.combine != "{a} + {b}":
        return declined("the tree combines with something other than `+` (coarsening adds elements first)",
                        sts[at], Stage.SHAPE)
    # the load: sh[tid] = (i < LIMIT) ? EXPR : 0;
    load = sts[at - gap]
    e = load.named_children[0] if load.type == "expression_statement" and load.named_child_count == 1 else None
    if e is None or e.type != "assignment_expression":
        return declined("the statement before the tree's barrier is not the load `sh[tid] = (i < n) ? x[i] : 0;`",
                        load, Stage.SHAPE)
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    parts = subscript_parts(left, data) if left is not None else None
    if parts is None or op is None or right is None or node_text(op, data) != "=" \
            or not is_ident(parts[0], data, tree.array) or is_tid(parts[1], data, tids) is None:
        return declined(f"the load does not write `{tree.array}[threadIdx.x]` with `=`", load, Stage.SHAPE)
    cond_expr = unparen(right)
    if cond_expr.type != "conditional_expression":
        return declined("the load is not guarded as `(i < n) ? x[i] : 0`", load, Stage.SHAPE)
    cond, yes, no = (cond_expr.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
    if cond is None or yes is None or no is None or not is_zero_literal(no, data):
        return declined("the load's out-of-range value is not 0", load, Stage.SHAPE)
    # the index i
    index: Decl | None = None
    mult = ""
    for st in sts[: at - gap]:
        d = single_decl(st, data)
        if d is not None and d.value is not None and not d.pointer:
            m = global_index(d.value, data, "x")
            if m is not None and upper_bound(cond, data, d.name) is not None:
                index, mult = d, m
    if index is None:
        return declined("the load's guard does not bound a global index `blockIdx.x * blockDim.x + threadIdx.x`",
                        load, Stage.SHAPE)
    bound = upper_bound(cond, data, index.name)
    assert bound is not None
    i = index.name
    # after the tree: exactly `if (tid == 0) atomicAdd(DST, sh[0]);`
    rest = sts[at + 1 :]
    if len(rest) != 1 or rest[0].type != "if_statement" or rest[0].child_by_field_name("alternative") is not None:
        found = f" (found `{node_text(rest[0], data).splitlines()[0].strip()}`)" if rest else ""
        return declined("after the tree, the block's result is not accumulated by one `if (tid == 0) "
                        f"atomicAdd(out, sh[0]);`{found}: a coarsened grid has fewer blocks than outputs, so a "
                        "per-block store would leave outputs unwritten", rest[0] if rest else sts[at], Stage.SHAPE)
    c = condition_of(rest[0])
    if c is None or node_text(unparen(c), data).replace(" ", "") not in (f"{tree.tid}==0", f"0=={tree.tid}"):
        return declined("the block's result is not sent by thread 0 alone (`if (tid == 0)`)", rest[0], Stage.SHAPE)
    inner = statements(rest[0].child_by_field_name("consequence"))
    if len(inner) != 1 or inner[0].type != "expression_statement" or inner[0].named_child_count != 1:
        return declined("thread 0 does more than one `atomicAdd(out, sh[0])`", rest[0], Stage.SHAPE)
    call = inner[0].named_children[0]
    fn = call.child_by_field_name("function") if call.type == "call_expression" else None
    args = call.child_by_field_name("arguments") if call.type == "call_expression" else None
    xs = [a for a in args.named_children if a.type != "comment"] if args is not None else []
    if fn is None or node_text(fn, data) != "atomicAdd" or len(xs) != 2:
        return declined(f"the block's result is written with `{node_text(call, data)}`, not accumulated with "
                        "`atomicAdd` (a coarsened grid has fewer blocks than outputs)", call, Stage.SHAPE)
    sp = subscript_parts(xs[1], data)
    if sp is None or not is_ident(sp[0], data, tree.array) or not is_zero_literal(sp[1], data):
        return declined(f"the atomicAdd does not send `{tree.array}[0]`", call, Stage.SHAPE)
    params = {p.name for p in k.params}
    dst_ids = {node_text(n, data) for n in walk(xs[0]) if n.type == "identifier"}
    if not dst_ids <= params or call_names(xs[0], data):
        return declined("the atomicAdd's address depends on more than parameters (e.g. on blockIdx.x)", call,
                        Stage.LEGALITY)
    # i appears only in its declaration and the load; blockIdx/gridDim (whose meaning the new grid changes)
    # only in i's declaration
    load_ids = {n.id for n in walk(load)}
    decl_ids = {n.id for n in walk(index.node)}
    for n in walk(body):
        if n.type == "identifier" and node_text(n, data) == i and n.id not in load_ids | decl_ids:
            return declined(f"the index `{i}` is used after the load", n, Stage.LEGALITY)
        if n.type == "identifier" and node_text(n, data) in ("blockIdx", "gridDim") and n.id not in decl_ids:
            return declined(f"`{node_text(n, data)}` is used outside the index (a coarsened grid changes it)", n,
                            Stage.LEGALITY)
    if has_collective(yes, data) or any(n.type in ("assignment_expression", "update_expression")
                                        for n in walk(yes)):
        return declined("the loaded value writes a variable or calls a collective", load, Stage.LEGALITY)
    # M must be the block size for the grid-stride loop to visit each index once
    if mult != "blockDim.x":
        es = envs(ctx)
        if es is None:
            return None
        for env in es:
            mv, bv = eval_expr(mult, env), eval_expr(ctx.block[0], env)
            if not isinstance(mv, int) or mv != bv:
                return declined(f"the index's block stride `{mult}` is not the block size", index.node,
                                Stage.LAUNCH)
    return _Shape(index, mult, load, tree.array, tree.elem, tree.tid, bound, yes, no), data


class ReduceCoarsen(StructuralRule[_Shape]):
    family = "reduce_coarsen"
    structural = True
    motivated_by = ("reduce_coarsen", "latency_bound", "WF110")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        out: dict[str, Launch] = {}
        for param, per_sm in VARIANTS.items():
            grid = (f"min({ctx.grid[0]}, {per_sm * ctx.sm_count})",)
            if launch_ok(ctx, grid, ctx.block):
                out[param] = Launch(grid)
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        """The body with the padded load replaced by a register accumulation over a grid-stride loop."""
        k = ctx.cand_kernel
        if k is None:
            return None
        p = PREFIX
        i, itype = shape.index.name, shape.index.type
        cmp = "<=" if shape.bound.inclusive else "<"
        ind = line_indent_of(shape.load, data)
        code = (f"{shape.elem} {p}acc = {node_text(shape.zero, data)};\n"
                f"#pragma unroll 4\n"
                f"for ({itype} {p}i = {i}; {p}i {cmp} {node_text(shape.bound.limit, data)}; "
                f"{p}i += ({shape.mult}) * gridDim.x) {{\n"
                f"    const {itype} {i} = {p}i;\n"
                f"    {p}acc += {node_text(shape.expr, data)};\n"
                f"}}\n"
                f"{shape.array}[{shape.tid}] = {p}acc;")
        new = "\n".join((ind + ln if n and ln else ln) for n, ln in enumerate(code.split("\n")))
        src = ctx.cand_src.data
        return (src[k.body_span.start : shape.load.start_byte].decode() + new
                + src[shape.load.end_byte : k.body_span.end].decode())

    def rationale(self, shape: _Shape, param: str) -> str:
        return (f"each thread sums its share of the input in a register (grid-stride loop over {VARIANTS[param]} "
                f"blocks per SM) before the block's tree reduction: one tree and one atomic per block")


register(ReduceCoarsen())
