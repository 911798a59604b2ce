"""WF110: atomics that serialize — every thread on one address, or every element into a few counters.

Atomic updates to the same address cannot proceed in parallel: the L2 (or, for shared memory, the SM)
applies them one after another. ``atomicAdd(out, v)`` from every thread of a 2^24-thread launch is
2^24 updates of one word in sequence; ``atomicAdd(&bins[v], 1)`` from every element into 256 counters is
~N/256 updates per counter, colliding whenever neighbouring elements share a value. The fix is the
same family (action ``atomics_privatize``): combine privately first — a warp-shuffle or shared-memory
reduction with one atomic per block, or per-block counters in shared memory merged once per block.

Two patterns, both required to run *per thread*:
- **one address**: the address does not vary across the threads of a block (``out``, ``&sum[0]``,
  ``&out[blockIdx.x]``, a ``__shared__`` scalar). Source-only.
- **few targets**: the index comes from data loaded per thread (a histogram) and the target array is
  small per the spec (≤ 4096 elements, so a private copy fits in shared memory) while the launch
  issues at least 32 updates per target on average. Needs the spec.

The good patterns stay silent: an atomic guarded so one thread per block or warp issues it
(``if (threadIdx.x == 0) atomicAdd(out, s[0])``, ``if (lane == 0)``, or after ``if (tid != 0) return;``),
and the merge step of a privatized histogram (``atomicAdd(&bins[t], s_bins[t])``: the index is the
thread's own, each address once per block).
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...spec.model import DTYPES, canonical_dtype
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._facts import ATOMICS, BID, LOAD, TID, UNKNOWN, KernelFacts, facts, normalize_type

define("WF110", "serialized atomics: one address per thread, or few targets per element", Severity.INFO, "source",
       "atomics_privatize")

#: a private copy of at most this many elements fits comfortably in shared memory
MAX_PRIVATE_ELEMENTS = 4096
#: below this many updates per target on average, contention is not the problem
MIN_UPDATES_PER_TARGET = 32


def _target(f: KernelFacts, arg: Node) -> tuple[str, Node | None, str, Node | None] | None:
    """(base variable, index, space "global"/"shared", alias offset) of an atomic's address argument."""
    node = arg
    while node.type in ("parenthesized_expression", "cast_expression"):
        nxt = node.child_by_field_name("value") if node.type == "cast_expression" else (
            node.named_children[0] if node.named_children else None)
        if nxt is None:
            return None
        node = nxt
    base: Node | None = None
    index: Node | None = None
    if node.type == "pointer_expression":
        op = node.child_by_field_name("operator")
        inner = node.child_by_field_name("argument")
        if op is None or f.text(op) != "&" or inner is None:
            return None
        if inner.type == "subscript_expression":
            base = inner.child_by_field_name("argument")
            idx = inner.child_by_field_name("indices")
            index = idx.named_children[0] if idx is not None and idx.named_children else None
        elif inner.type == "identifier":
            base = inner  # &shared_scalar
    elif node.type == "identifier":
        base = node
    elif node.type == "binary_expression":
        op = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op is not None and f.text(op) == "+" and left is not None and left.type == "identifier":
            base, index = left, right
    if base is None or base.type != "identifier":
        return None
    name = f.text(base)
    if name in f.params and f.params[name].is_pointer:
        return name, index, "global", None
    v = f.vars.get(name)
    if v is not None and v.shared:
        return name, index, "shared", None
    al = f.pointer_alias(name)
    if al is not None:
        return al[0], index, "global", al[1]
    return None


def _thread_id_test(f: KernelFacts, node: Node | None, *, equal: bool) -> bool:
    """``E == c`` (equal=True) or ``E != c`` (equal=False) where E is a thread index (not loaded data)."""
    if node is None:
        return False
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node.type == "binary_expression":
        op = node.child_by_field_name("operator")
        o = f.text(op) if op is not None else ""
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if o == "&&" and equal:
            return _thread_id_test(f, left, equal=True) or _thread_id_test(f, right, equal=True)
        if o == "||" and not equal:
            return _thread_id_test(f, left, equal=False) or _thread_id_test(f, right, equal=False)
        wanted = ("==",) if equal else ("!=", ">")
        if o in wanted:
            for a, b in ((left, right), (right, left)):
                da, db = f.deps(a), f.deps(b)
                if TID in da and LOAD not in da and UNKNOWN not in da and not db & {TID, LOAD, UNKNOWN}:
                    return True
        return False
    if node.type == "unary_expression" and equal:
        op = node.child_by_field_name("operator")
        arg = node.child_by_field_name("argument")
        d = f.deps(arg)
        return op is not None and f.text(op) == "!" and TID in d and not d & {LOAD, UNKNOWN}
    if not equal:
        d = f.deps(node)  # `if (tid) return;`
        return TID in d and not d & {LOAD, UNKNOWN}
    return False


def _exits(node: Node | None) -> bool:
    """A statement that leaves the kernel (``return;``) — alone or as the only statement of a block."""
    if node is None:
        return False
    if node.type == "return_statement":
        return True
    if node.type == "compound_statement":
        stmts = [c for c in node.named_children if c.type != "comment"]
        return len(stmts) == 1 and stmts[0].type == "return_statement"
    return False


def _once_per_block_or_warp(f: KernelFacts, call: Node) -> bool:
    """Is the atomic restricted to one thread of a block or warp (``if (tid == 0)``, an early return)?"""
    child = call
    for a in f.ancestors(call):
        if a.type == "if_statement":
            cond = a.child_by_field_name("condition")
            value = cond.child_by_field_name("value") if cond is not None else None
            cons = a.child_by_field_name("consequence")
            alt = a.child_by_field_name("alternative")
            if cons is not None and child == cons and _thread_id_test(f, value, equal=True):
                return True
            if alt is not None and child == alt and _thread_id_test(f, value, equal=False):
                return True
        if a.type == "compound_statement":
            for stmt in a.named_children:
                if stmt.start_byte >= child.start_byte:
                    break
                if stmt.type == "if_statement":
                    cond = stmt.child_by_field_name("condition")
                    value = cond.child_by_field_name("value") if cond is not None else None
                    if _exits(stmt.child_by_field_name("consequence")) and _thread_id_test(f, value, equal=False):
                        return True
        child = a
    return False


def _fmt(n: int) -> str:
    return f"{n:,}"


@analyzer("atomics", ("WF110",), needs=("source",))
def atomics(ctx: KernelContext) -> Iterator[Finding]:
    f = facts(ctx)
    r = ctx.resolved
    threads = r.grid[0] * r.grid[1] * r.grid[2] * r.threads if r is not None else None
    sass_evidence: dict[str, object] = {}
    if ctx.sass is not None:
        opcodes = [i.opcode for i in ctx.sass.instructions]
        sass_evidence["sass_global_atomics"] = sum(1 for o in opcodes if o.split(".")[0] in ("ATOMG", "REDG", "RED",
                                                                                            "ATOM"))
        sass_evidence["sass_warp_aggregated"] = any(o.startswith("VOTEU.ANY") for o in opcodes) and any(
            o.startswith("POPC") for o in opcodes)
    for call in f.calls:
        name = f.call_name(call)
        if name not in ATOMICS:
            continue
        args = f.call_args(call)
        if not args:
            continue
        tgt = _target(f, args[0])
        if tgt is None:
            continue
        base, index, space, offset = tgt
        if _once_per_block_or_warp(f, call):
            continue  # the good pattern: one atomic per block (or warp) after a private reduction
        deps = f.deps(index) | f.deps(offset)
        loops = f.loops_around(call)
        where = f" inside the loop at line {ctx.node_line(loops[0])}" if loops else ""
        addr = f.text(args[0]).lstrip("&")
        evidence: dict[str, object] = {"target": addr, "space": space, **sass_evidence}
        if loops:
            evidence["loop_line"] = ctx.node_line(loops[0])
        if not deps & {TID, UNKNOWN}:
            per_block = BID in deps
            if r is not None and threads is not None:
                evidence["atomics_per_launch"] = threads if not loops else f">= {threads}"
                evidence["updates_per_address"] = r.threads if per_block or space == "shared" else threads
                evidence["addresses"] = (r.grid[0] * r.grid[1] * r.grid[2]) if per_block or space == "shared" else 1
            if space == "shared":
                msg = (f"every thread atomically updates the same shared-memory address `{addr}`{where}: the "
                       "updates of a block serialize; reduce with warp shuffles first and let one lane per warp "
                       "(or one thread per block) do the atomic")
            elif per_block:
                n = f" ({_fmt(r.threads)} per block)" if r is not None else ""
                msg = (f"every thread of a block atomically updates the same address `{addr}`{where}, so the "
                       f"updates serialize{n}; reduce within the block first (warp shuffles or shared memory) "
                       "and let one thread per block do the atomic")
            else:
                n = f" ({_fmt(threads)} updates per launch)" if threads is not None else ""
                agg = (", even with nvcc's per-warp aggregation" if sass_evidence.get("sass_warp_aggregated")
                       else "")
                msg = (f"every thread atomically updates the single address `{addr}`{where}: the updates "
                       f"serialize at the memory system{n}{agg}; reduce within the block first (warp shuffles or "
                       "shared memory) and issue one atomic per block")
            yield make("WF110", ctx.file, ctx.range(call), msg, kernel=ctx.kernel.name, evidence=evidence)
            continue
        # Few targets: a data-dependent index into a small global array, updated per element.
        if space != "global" or offset is not None or r is None or threads is None:
            continue
        if not (TID in deps and LOAD in deps) or UNKNOWN in deps:
            continue  # the thread's own index (a merge step) or something we cannot see through
        arg = next((a for a in r.args if a.name == base), None)
        if arg is None or arg.count is None or arg.count > MAX_PRIVATE_ELEMENTS:
            continue
        targets = max(1, arg.count)
        if threads / targets < MIN_UPDATES_PER_TARGET:
            continue
        p = f.params[base]
        dt = canonical_dtype(normalize_type(p.type))
        elem = DTYPES[dt][0] if dt is not None else 4
        evidence.update({"atomics_per_launch": threads if not loops else f">= {threads}", "targets": targets,
                         "updates_per_target": threads // targets, "shared_bytes_for_private_copy": targets * elem})
        yield make(
            "WF110", ctx.file, ctx.range(call),
            f"every element atomically updates one of only {_fmt(targets)} counters in `{base}`{where} "
            f"({_fmt(threads)} atomics per launch, ~{_fmt(threads // targets)} per counter, serialized where they "
            f"collide); privatize: count per block in shared memory ({_fmt(targets * elem)} bytes) and merge with "
            "one atomic per counter per block",
            kernel=ctx.kernel.name, evidence=evidence,
        )
