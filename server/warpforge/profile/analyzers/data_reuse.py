"""WF112: data reuse left to global memory — the loads of a serial loop are shared by many threads of a block.

The pattern (a naive GEMM, batched GEMM, attention scores ``q·k``): each thread computes its outputs with a
loop over ``k`` whose loads come straight from global memory, and every one of those loads is *shared*: its
index does not depend on one of the block's thread dimensions, so all threads along that dimension load the
same element. ``A(row, k)`` is the same for every ``threadIdx.x`` of a row of threads, ``B(k, col)`` for every
``threadIdx.y``: a 16×16 block loads each element of a 16-wide tile 16 times, and each output costs O(K)
global loads for O(K) multiply-adds. Staging the shared tiles in shared memory (each element loaded once
per block) and giving each thread several outputs in registers is what makes such kernels compute-bound:
the action is ``smem_tiling``.

From the lane model (``profile.lanes``) of the kernel's canonical form (``profile.canonical``: index macros
such as ``A(i, j)`` expanded, guarded bodies as early exits), not from the kernel's shape. The finding needs:

- a loop whose counter is the same for every thread (start, bound and step uniform) and that runs at least
  ``MIN_TRIP`` times (a 3-tap stencil loop is not a K loop);
- global loads in it whose index advances with the counter, *every one* of them exact (the lane model can
  say which threads share it), none a gather (an index loaded from memory: what a tile would hold depends
  on the data), and each shared by at least two threads of the block (an invariant thread dimension
  whose extent in the spec's block is above one). A loop that also streams unshared data (``A[row * C + j]``
  in a matrix-vector product, where each element is used once) is left to WF111/WF103: tiling cannot raise
  its intensity;
- loads only of buffers the kernel never writes (a buffer written in place may change under a tile);
- no ``__shared__`` arrays in the kernel (it stages data already).

One finding per kernel, at the innermost such loop, with each shared load as a related location. Evidence:
the loop (line, counter, trip count), per buffer the threads of a block that load each element and the thread
dimensions they span, loads per step and per output, the block. No gain is estimated (it depends on how
well L1 already catches the reuse; the profiler's L1-bound class tells).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ...cuda.text import Range, Span
from ..canonical import Canonical, canonical
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import Access, Loop, Threads, plural, text_of, threads
from . import analyzer

define("WF112", "data reuse left to global memory: tile it in shared memory", Severity.INFO, "source", "smem_tiling")

#: a loop shorter than this is a stencil's taps or an unrolled epilogue, not a K loop
MIN_TRIP = 8


@dataclass
class _Shared:
    buffer: str
    threads: int
    dims: list[str]
    accesses: list[Access] = field(default_factory=list)


def _uniform_loop(th: Threads, lp: Loop) -> tuple[bool, int | None]:
    """Whether every thread runs the loop the same way (start, bound and step uniform), and its trip count
    when the spec's numbers give it (None: unknown)."""
    if lp.bound_val is None or lp.step is None:
        return False, None
    if not (lp.init.exact and lp.init.thread_free and lp.bound_val.thread_free and lp.step.thread_free):
        return False, None
    lo, hi, step = th.number(lp.init.rest), th.number(lp.bound_val.rest), th.number(lp.step.rest)
    if lo is None or hi is None or not step or step <= 0:
        return True, None
    return True, max(0, (hi - lo + (1 if lp.inclusive else 0) + step - 1) // step)


def _inside(a: Access, lp: Loop) -> bool:
    body = lp.node.child_by_field_name("body")
    return body is not None and body.start_byte <= a.node.start_byte and a.node.end_byte <= body.end_byte


def _shared_loads(th: Threads, lp: Loop, block: tuple[int, int, int], written: set[str]) -> list[_Shared] | None:
    """Per buffer, the loads of ``lp`` that advance with its counter, when every one is shared by the block."""
    atom = "$" + lp.var
    out: dict[str, _Shared] = {}
    for a in th.global_accesses():
        if not _inside(a, lp):
            continue
        if not a.index.exact:
            return None  # an index the lane model cannot follow: who shares it is unknown
        if any("[" in atom for atom in a.index.rest.atoms()):
            return None  # a gather (an index loaded from memory): what a tile would hold depends on the data
        if atom not in a.index.rest.atoms():
            continue
        if a.store or a.param in written:
            return None  # a buffer written in the loop or elsewhere: a staged tile could go stale
        dims = [d for d, coef, ext in (("threadIdx.x", a.index.tx, block[0]), ("threadIdx.y", a.index.ty, block[1]))
                if coef.is_zero and ext > 1]
        n = 1
        for d in dims:
            n *= block[0] if d == "threadIdx.x" else block[1]
        if n < 2:
            return None  # one thread per element: streaming data, which tiling does not reuse
        got = out.setdefault(a.param, _Shared(a.param, n, dims))
        got.threads = min(got.threads, n)
        got.accesses.append(a)
    return list(out.values()) or None


def _header(can: Canonical, lp: Loop) -> Range:
    """The loop's header (up to its closing parenthesis) in the user's text; its line when the kernel was
    rewritten into its canonical form."""
    if can.changed:
        return can.range(lp.node)
    ctx, node = can.ctx, lp.node
    body = node.child_by_field_name("body")
    end = node.end_byte
    for ch in node.children:
        if ch.type == ")" and (body is None or ch.end_byte <= body.start_byte):
            end = ch.end_byte
    return ctx.src.range(Span(ctx.base + node.start_byte, ctx.base + end))


@analyzer("data-reuse", ("WF112",), needs=("source", "spec"))
def data_reuse(ctx: KernelContext) -> Iterator[Finding]:
    can = canonical(ctx)
    c = can.ctx
    r = c.resolved
    if r is None:
        return
    th = threads(c)
    if th.too_big or th.shared_arrays():
        return
    written = {name for name, acc in c.access.items() if acc.write or acc.atomic or acc.escapes}
    block = (r.block[0], r.block[1], r.block[2])
    found: list[tuple[Loop, int | None, list[_Shared]]] = []
    for lp in th.loops():
        uniform, trip = _uniform_loop(th, lp)
        if not uniform or (trip is not None and trip < MIN_TRIP):
            continue
        shared = _shared_loads(th, lp, block, written)
        if shared is not None:
            found.append((lp, trip, shared))
    # innermost first: an outer loop's loads include its inner loop's
    found = [f for f in found if not any(
        o is not f and f[0].node.start_byte < o[0].node.start_byte and o[0].node.end_byte <= f[0].node.end_byte
        for o in found)]
    if not found:
        return
    lp, trip, shared = found[0]
    bound = text_of(c, lp.bound) if lp.bound is not None else "?"
    steps = f"`{bound}`" + (f" = {trip}" if trip is not None and bound != str(trip) else "")
    loads = sum(len(s.accesses) for s in shared)
    per_output = f", {loads * trip} per output" if trip is not None else ""
    parts = [f"each element of `{s.buffer}` by {s.threads} threads of a block (all {' and '.join(s.dims)})"
             for s in shared]
    message = (
        f"the `{lp.var}` loop ({steps} steps) loads {', '.join(f'`{s.buffer}`' for s in shared)} straight from "
        f"global memory although the block shares them: {'; '.join(parts)}; {plural(loads, 'global load')} per "
        f"step{per_output}. Staging tiles in shared memory loads each element once per block, and several "
        f"outputs per thread in registers reuse each staged value again"
    )
    evidence: dict[str, object] = {
        "loop_line": can.node_line(lp.node), "loop_var": lp.var, "trip": bound, "trip_value": trip,
        "buffers": [{"buffer": s.buffer, "threads_per_element": s.threads, "shared_across": s.dims,
                     "lines": sorted({can.node_line(a.node) for a in s.accesses})} for s in shared],
        "loads_per_step": loads, "loads_per_output": loads * trip if trip is not None else None,
        "block": list(block), "canonical_form": can.changed,
    }
    related = tuple((can.range(a.node), f"`{text_of(c, a.node)}`: each element loaded by {s.threads} threads "
                                        f"of a block")
                    for s in shared for a in s.accesses)
    related += tuple((_header(can, o[0]), f"also a shared-load loop (`{o[0].var}`)") for o in found[1:])
    yield make("WF112", ctx.file, _header(can, lp), message, kernel=ctx.kernel.name, evidence=evidence,
               related=related)
