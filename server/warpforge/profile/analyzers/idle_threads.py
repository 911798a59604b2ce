"""WF102: most of the kernel's work is spread over fewer threads than the block has (idle threads).

Two shapes, both with the work indexed by ``threadIdx.x`` alone:
- a block-strided loop ``for (i = threadIdx.x; i < C; i += blockDim.x)`` with ``C`` smaller than the
  block's x extent: threads ``C .. blockDim.x-1`` never enter it;
- a guard ``if (threadIdx.x < K) { ... }`` (or ``if (threadIdx.x >= K) return;``) with ``K`` smaller than
  the block.

Idle threads still occupy warp slots, registers and scheduler time, so an SM holds fewer *useful* warps:
a 256-thread block doing a 64-element row keeps 75 % of its threads idle. The fix is a block that fits
the work (``block_size``), or several rows per block.

Precision: needs the spec (the bound and the block size must be numbers); the loop variable must start
at exactly ``threadIdx.x`` and step by at least the block; and the threads above the bound must be idle
for real: *every* global-memory access of the kernel lies in such a bounded region (or under an
``if (threadIdx.x == 0)``). So a prologue that loads a filter with a few threads, or a stencil whose first
threads also load the halo, is not reported — the other threads have their own work. No gain is
estimated: whether the freed slots speed the kernel up depends on what limits it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Node

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import ONE, Threads, Val, block_x, inside, text_of, threads
from . import analyzer

define("WF102", "idle threads: work bound smaller than the block", Severity.INFO, "source", "block_size")


@dataclass
class _Region:
    stmt: Node  # the loop, the if, or the early return
    work: list[Node]  # the statements the bounded threads execute
    bound_text: str
    bound: int
    kind: str  # "loop" | "guard" | "return" | "single" (== K: only counts as guarded work)


def _is_tid(v: Val) -> bool:
    """Exactly ``threadIdx.x`` (maybe through locals): values 0 .. blockDim.x-1."""
    return v.exact and v.tx == ONE and v.ty.is_zero and v.rest.is_zero


def _tid_bound(th: Threads, cond: Node | None) -> tuple[str, int, bool] | None:
    """``tid < K`` → (K text, K, True); ``tid >= K`` → (K text, K, False) where threads below K stay."""
    ctx = th.ctx
    while cond is not None and cond.type in ("condition_clause", "parenthesized_expression"):
        named = cond.named_children
        cond = named[0] if named else None
    if cond is None or cond.type != "binary_expression":
        return None
    op_node = cond.child_by_field_name("operator")
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op_node is None or left is None or right is None:
        return None
    op = op_node.type
    if not _is_tid(th.value(left)):
        if not _is_tid(th.value(right)):
            return None
        left, right = right, left
        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    b = th.value(right)
    if not b.thread_free:
        return None
    k = th.number(b.rest)
    if k is None:
        return None
    if op == "<":
        return text_of(ctx, right), k, True
    if op == "<=":
        return text_of(ctx, right) + " + 1", k + 1, True
    if op == ">=":
        return text_of(ctx, right), k, False
    if op == ">":
        return text_of(ctx, right) + " + 1", k + 1, False
    if op == "==":
        return text_of(ctx, right), k + 1, True  # one thread: counts as guarded work, never reported
    return None


def _regions(th: Threads, bx: int) -> list[_Region]:
    ctx = th.ctx
    body = ctx.body
    out: list[_Region] = []
    if body is None:
        return out
    for n in th.nodes("for_statement", "if_statement"):
        if n.type == "for_statement":
            lp = th.loop(n)
            if lp is None or not _is_tid(lp.init) or lp.bound is None or lp.bound_val is None or lp.step is None:
                continue
            if not lp.bound_val.thread_free or not lp.step.uniform:
                continue
            k = th.number(lp.bound_val.rest)
            step = th.number(lp.step.rest)
            if k is None or step is None or step < bx:
                continue
            k += 1 if lp.inclusive else 0
            if 0 < k < bx:
                bnode = n.child_by_field_name("body")
                out.append(_Region(n, [bnode] if bnode is not None else [], text_of(ctx, lp.bound), k, "loop"))
        elif n.type == "if_statement":
            tb = _tid_bound(th, n.child_by_field_name("condition"))
            if tb is None:
                continue
            text, k, below = tb
            if not 0 < k < bx:
                continue
            cons = n.child_by_field_name("consequence")
            cond = n.child_by_field_name("condition")
            single = cond is not None and "==" in ctx.text(cond)
            if below and cons is not None and n.child_by_field_name("alternative") is None:
                out.append(_Region(n, [cons], text, k, "single" if single else "guard"))
            elif not below and cons is not None and _only_return(cons):
                # if (tid >= K) return;  — the rest of the enclosing block runs on K threads
                parent = n.parent
                rest = [c for c in parent.named_children if c.start_byte > n.end_byte] if parent is not None else []
                out.append(_Region(n, rest, text, k, "return"))
    return out


def _only_return(stmt: Node) -> bool:
    if stmt.type == "return_statement":
        return True
    named = [c for c in stmt.named_children if c.type != "comment"]
    return stmt.type == "compound_statement" and len(named) == 1 and named[0].type == "return_statement"


@analyzer("idle-threads", ("WF102",), needs=("spec",))
def idle_threads(ctx: KernelContext) -> Iterator[Finding]:
    bx = block_x(ctx)
    if bx is None or bx < 2:
        return
    th = threads(ctx)
    if th.too_big:
        return
    sites = [a.node for a in th.global_accesses()]
    if not sites:
        return
    regions = _regions(th, bx)
    if not regions:
        return
    if any(not any(inside(s, w) for r in regions for w in r.work) for s in sites):
        return  # some global work runs on every thread: the others are not idle (a halo, a prologue)
    # the threads idle everywhere are those above the largest bound; report the regions that set it
    reportable = [r for r in regions if r.kind != "single"]
    if not reportable:
        return
    top = max(r.bound for r in reportable)
    chosen = [r for r in reportable if r.bound == top]
    chosen = [r for r in chosen if not any(o is not r and any(inside(r.stmt, w) for w in o.work) for o in chosen)]
    chosen = [r for r in chosen if any(inside(s, w) for s in sites for w in r.work)]
    if not chosen:
        return
    threads_total = ctx.block_threads or bx
    r = chosen[0]
    idle = bx - r.bound
    frac = idle / bx
    where = {"loop": "this loop", "guard": "this branch", "return": "the rest of the kernel"}[r.kind]
    if len(chosen) > 1:
        where += f" and {len(chosen) - 1} other{'s' if len(chosen) > 2 else ''} like it"
    bound = str(r.bound) if r.bound_text == str(r.bound) else f"`{r.bound_text}` = {r.bound}"
    message = (
        f"only {r.bound} of the block's {bx} threads along x have work in {where} (threadIdx.x < {bound}): "
        f"{frac:.0%} of each block's threads sit idle while holding warp slots and registers; a block of "
        f"{r.bound} threads along x (or several rows per block) would keep them busy"
    )
    related = tuple((ctx.line_range(ctx.node_line(o.stmt)), f"also bounded by threadIdx.x < {bound}")
                    for o in chosen[1:])
    yield make(
        "WF102", ctx.file, ctx.line_range(ctx.node_line(r.stmt)), message, kernel=ctx.kernel.name,
        evidence={"bound": r.bound_text, "bound_value": r.bound, "block_x": bx, "block_threads": threads_total,
                  "idle_threads_per_block": idle * max(1, threads_total // bx), "idle_fraction": round(frac, 3),
                  "kind": r.kind,
                  "lines": [ctx.node_line(o.stmt) for o in chosen]},
        related=related,
    )
