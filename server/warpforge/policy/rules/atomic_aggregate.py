"""atomic_aggregate: combine the values a warp (or a block) adds to one address before a single atomic.

Why it helps: a reduction written as "every thread adds its partial to the result" (``atomicAdd(total,
s)`` after a grid-stride loop, ``if (i < n) atomicAdd(sum, x[i])``) sends one atomic per thread to the same
address; the L2's atomic unit serializes them, so the kernel runs at the rate of one address's atomics,
not at DRAM bandwidth. Adding the 32 values of a warp with five ``__shfl_xor_sync`` steps first sends
1/32 of the atomics; the ``block`` variant also combines the warps of a block in shared memory and sends
one atomic per block.

What the analysis requires: an ``atomicAdd``/``atomicOr``/``atomicXor`` whose result is unused, at the top
level of the kernel body (form 1), or as the last statement of a guarded block that is itself the last
statement of the body and holds no other memory write (form 2: ``if (C) { ...; atomicAdd(p, v); }``);
its target ``p``, ``&p[E]`` or ``p + E`` the same for every thread of the block (E of parameters and
block coordinates only); no ``return``, ``break`` or ``goto`` leaving the body early (every thread of a
warp reaches the exchange); the block's thread count a multiple of 32 at every size; the target's
element type one a shuffle moves.

The rewrite: in form 2 the guarded value becomes the operation's identity (0) for threads whose guard is
false, so all threads take part; the warp's values are combined with shuffles and lane 0 issues the one
atomic (``block``: lane 0 of each warp writes to shared memory, warp 0 combines them, thread 0 issues it).
Integer sums, or and xor are exact; float sums are reassociated (tolerances apply), as any atomic order is.

Atomics anywhere else (``key`` / ``active``): an atomic inside a grid-stride loop, behind an early return or
in the middle of the body (a histogram's ``atomicAdd(&bins[b], 1)`` per element, a scatter's ``atomicAdd(grad
+ off, g)``) is combined where it runs, by the lanes that run it together (``__activemask()``), grouped by
address with ``__match_any_sync`` (``key``; ``active`` when every address is the same for all threads), the
group's lowest lane issuing one atomic (``_atomic_sites``: legality per statement, sm_70+). Early exits are
legal there: a lane that left is not in the active mask. For ``atomicAdd``/``Or``/``And``/``Xor``/``Min``/``Max``
whose result is unused; integer results are exact, float sums are reassociated within the verify tolerance.

The loop that computes the value is left as written: a chunk per thread stays uncoalesced and one partial
per thread leaves one load in flight. Re-dealing the elements of a per-thread sum as a grid stride with
several partials is ``stride_reduce``'s job (it then combines per block too).
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.model import Kernel
from ...cuda.tree import node_text, walk
from . import register
from ._atomic_sites import KeySite, arch_number, key_sites, splice_sites
from ._structural import (
    SHUFFLE_TYPES,
    all_names,
    condition_of,
    dims_values,
    flush,
    has_jump,
    indent,
    resolved_type,
    statements,
    unparen,
)
from ._structural_rule import Launch, StructuralRule
from ._util import kernel_body
from ._why import Stage, declined, recording
from .base import RuleContext
from .warp_per_row import atomic_target

PREFIX = "wfa_"
_OPS = {"atomicAdd": "+", "atomicOr": "|", "atomicXor": "^"}
_FULL = "0xffffffffu"


@dataclass
class _Site:
    stmt: Node
    call: Node
    op: str
    type: str
    #: form 2: the guarding if statement (None: the atomic is at the top level)
    guard: Node | None


def _uniform(node: Node, data: bytes, params: set[str]) -> bool:
    """Only parameters, literals and block-wide coordinates (blockIdx, blockDim, gridDim)."""
    for n in walk(node):
        if n.type == "identifier":
            name = node_text(n, data)
            if name in ("blockIdx", "blockDim", "gridDim"):
                continue
            if name not in params or name == "threadIdx":
                return False
        elif n.type in ("call_expression", "assignment_expression", "update_expression"):
            return False
    return True


def _writes_memory(node: Node, data: bytes) -> bool:
    for n in walk(node):
        if n.type in ("assignment_expression", "update_expression"):
            t = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
            if t is not None and unparen(t).type != "identifier":
                return True
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            name = node_text(fn, data) if fn is not None else ""
            if name.startswith(("atomic", "__sync", "__shfl", "__threadfence")):
                return True
    return False


@dataclass
class _Shape:
    #: the one atomic every thread sends at the end (the ``warp``/``block`` variants), if there is one
    end: _Site | None
    #: every atomic statement the ``key``/``active`` variant combines where it runs
    sites: list[KeySite]


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return declined("the atomics are already aggregated per warp", None, Stage.SCOPE)
    if not any(n.type == "call_expression" and node_text(n.child_by_field_name("function") or n, data)
               .startswith("atomic") for n in walk(body)):
        return declined("the kernel has no atomic", None, Stage.SCOPE)
    if {"__match_any_sync", "__activemask", "coalesced_threads", "labeled_partition"} & all_names(body, data):
        return declined("the kernel already groups its lanes (`__match_any_sync`, `__activemask` or coalesced "
                        "groups): its atomics are aggregated already", None, Stage.SCOPE)
    if arch_number(ctx.arch) < 70:
        return declined(f"`__match_any_sync` needs sm_70 or newer (the target is {ctx.arch})", None, Stage.LAUNCH)
    sites = key_sites(ctx, body, data)
    with recording():  # the end-of-kernel form's misses are not reasons: the key form covers those atomics
        end = _end_site(ctx, k, body, data)
    if end is None and not sites:
        return None
    return _Shape(end, sites), data


def _end_site(ctx: RuleContext, k: Kernel, body: Node, data: bytes) -> _Site | None:
    """The one atomic every thread sends as the kernel's last statement (the ``warp``/``block`` form)."""
    if has_jump(body, loops_ok=True):
        return declined("the kernel returns or breaks early, so not every lane of a warp reaches the atomic "
                        "(the warp's combine needs all 32)", body, Stage.SHAPE)
    params = {p.name for p in k.params}
    sts = statements(body)
    if not sts:
        return declined("the kernel's body is empty", body, Stage.SCOPE)
    candidates: list[tuple[Node, Node | None]] = [(st, None) for st in sts]
    last = sts[-1]
    if last.type == "if_statement" and last.child_by_field_name("alternative") is None:
        inner = statements(last.child_by_field_name("consequence"))
        if inner and not any(_writes_memory(s, data) for s in inner[:-1]):
            candidates.append((inner[-1], last))
    atomics = [n for n in walk(body) if n.type == "call_expression" and node_text(
        n.child_by_field_name("function") or n, data).startswith("atomic")]
    declined(f"the atomic `{node_text(atomics[0], data)}` is not the kernel's last statement (or the last one "
             "of its final `if`), so not one value per thread is sent at the end", atomics[0], Stage.SHAPE)
    for st, guard in candidates:
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        at = atomic_target(e, data) if e is not None else None
        fn = e.child_by_field_name("function") if e is not None else None
        if at is None or e is None or fn is None or node_text(fn, data) not in _OPS:
            continue
        p = k.param(at[0])
        if p is None or not p.is_pointer or (at[1] is not None and not _uniform(at[1], data, params)):
            declined(f"`{node_text(e, data)}` adds to an address that differs between threads (a per-element "
                     "target, e.g. a histogram bin): a warp cannot combine its values into one", st, Stage.LEGALITY)
            continue
        typ = resolved_type(ctx, p.type)
        if typ not in SHUFFLE_TYPES or (node_text(fn, data) != "atomicAdd" and typ in ("float", "double")):
            declined(f"a warp shuffle cannot combine `{typ}` values for `{node_text(fn, data)}`", st,
                     Stage.LEGALITY)
            continue
        return _Site(st, e, node_text(fn, data), typ, guard)
    return None


class AtomicAggregate(StructuralRule[_Shape]):
    family = "atomic_aggregate"
    structural = True
    motivated_by = ("WF130", "atomics", "atomic_contention")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        out: dict[str, Launch] = {}
        blocks = dims_values(ctx, ctx.block)
        if shape.end is not None and blocks and all(_warps_whole(dims) for dims in blocks):
            out = {"warp": Launch(), "block": Launch()}
        elif shape.end is not None:
            declined("the block's thread count is not a multiple of 32 at every size (the end-of-kernel combine "
                     "needs whole warps)", None, Stage.LAUNCH)
        if shape.sites:
            out["key" if any(not s.uniform for s in shape.sites) else "active"] = Launch()
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        got = kernel_body(ctx)
        if got is None:
            return None
        body, _ = got
        if param in ("key", "active"):
            return splice_sites(body, data, shape.sites, arch_number(ctx.arch))
        if shape.end is None:
            return None
        return self._end_body(body, data, shape.end, param)

    def _end_body(self, body: Node, data: bytes, shape: _Site, param: str) -> str | None:
        v = f"{PREFIX}v"
        args = shape.call.child_by_field_name("arguments")
        assert args is not None
        xs = [a for a in args.named_children if a.type != "comment"]
        target, value = node_text(xs[0], data), node_text(xs[1], data)
        op = _OPS[shape.op]
        tid = f"{PREFIX}t"
        lines = [f"const unsigned {tid} = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);",
                 f"for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
                 f"    {v} = {v} {op} __shfl_xor_sync({_FULL}, {v}, {PREFIX}o);", "}"]
        if param == "warp":
            lines += [f"if (({tid} & 31) == 0) {{", f"    {shape.op}({target}, {v});", "}"]
        else:
            sh = f"{PREFIX}warps"
            lines += [f"__shared__ {shape.type} {sh}[32];",
                      f"if (({tid} & 31) == 0) {{", f"    {sh}[{tid} >> 5] = {v};", "}",
                      "__syncthreads();",
                      f"if ({tid} < 32) {{",
                      f"    {v} = {tid} < ((blockDim.x * blockDim.y * blockDim.z) >> 5) ? {sh}[{tid}] : "
                      f"({shape.type})0;",
                      f"    for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
                      f"        {v} = {v} {op} __shfl_xor_sync({_FULL}, {v}, {PREFIX}o);", "    }",
                      f"    if ({tid} == 0) {{", f"        {shape.op}({target}, {v});", "    }", "}"]
        if shape.guard is None:
            new = "{\n" + indent("\n".join([f"{shape.type} {v} = {value};", *lines]), "    ") + "\n}"
            return _replace(body, data, shape.stmt, new)
        cond = condition_of(shape.guard)
        if cond is None:
            return None
        inner = statements(shape.guard.child_by_field_name("consequence"))[:-1]
        kept = "\n".join(flush(node_text(s, data), s, data) for s in inner)
        guarded = (f"{shape.type} {v} = ({shape.type})0;  // threads outside the guard add the identity\n"
                   f"if ({node_text(cond, data)}) {{\n" + indent("\n".join([*filter(None, [kept]),
                                                                         f"{v} = {value};"]), "    ")
                   + "\n}\n" + "\n".join(lines))
        return _replace(body, data, shape.guard, guarded)

    def rationale(self, shape: _Shape, param: str) -> str:
        if param in ("key", "active"):
            ops = sorted({f"atomic{s.op.capitalize()}" for s in shape.sites})
            how = "by address (__match_any_sync)" if param == "key" else "(one address)"
            return (f"the lanes that run each {'/'.join(ops)} together combine their values {how}; one atomic "
                    f"per group ({len(shape.sites)} statement(s))")
        assert shape.end is not None
        who = "each warp" if param == "warp" else "each block"
        return f"{who} combines its values with shuffles before one {shape.end.op} (1/32 or fewer atomics)"


def _warps_whole(dims: tuple[int, ...]) -> bool:
    total = 1
    for d in dims:
        total *= d
    return total % 32 == 0 and total <= 1024


def _replace(body: Node, data: bytes, node: Node, text: str) -> str:
    """The body's text with ``node`` replaced, indented like the line it starts on."""
    start = data.rfind(b"\n", 0, node.start_byte) + 1
    pad = data[start : node.start_byte].decode("utf-8", errors="replace")
    pad = pad if not pad.strip() else ""
    new = text.replace("\n", "\n" + pad)
    return (data[body.start_byte : node.start_byte] + new.encode("utf-8")
            + data[node.end_byte : body.end_byte]).decode("utf-8", errors="replace")


register(AtomicAggregate())
