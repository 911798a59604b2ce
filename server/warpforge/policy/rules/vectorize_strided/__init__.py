"""vectorize_strided: vector loads and stores in a loop whose threads stride over a row together.

Why it helps: a row kernel (a block or a warp per row: softmax, layernorm, a bias gradient, a row scale) walks
its row with ``for (j = lane; j < C; j += 32)`` or ``for (j = threadIdx.x; j < C; j += blockDim.x)``: each
thread moves one element per iteration, so a 4-byte load per instruction and the address arithmetic of every
element. Giving each thread ``w`` consecutive elements per step, moved with one 8- or 16-byte access, is what
the experts' versions do (llm.c's ``x128``): fewer load/store instructions, more bytes in flight per thread,
closer to DRAM bandwidth. ``vectorize`` does this for one thread per element; this family does it inside the
cooperative loops that ``vectorize`` (and ``warp_per_row``'s own output) leave scalar.

Recognized loop (anywhere in the kernel, also in a loop over rows): ``for (T j = S; j < E; j += STEP) BODY``
where the threads that run it start at every residue of ``STEP`` once: ``S`` is ``threadIdx.x`` with ``STEP``
``blockDim.x`` on a one-dimensional block, or the thread's lane (``threadIdx.x % 32``, ``& 31``,
``% warpSize``, ``warp.thread_rank()``, a local holding one of these) with ``STEP`` ``32``, ``warpSize`` or
``warp.size()``; ``E`` is not written in the loop.

Legality (each decline says which failed):

* every access of BODY to a pointer at the loop index is ``p[OFF + j]`` (or ``p[j]``, ``p[j + OFF]``) with
  ``OFF`` free of ``j`` and of anything the loop writes: a *stream* of consecutive elements;
* a pointer BODY writes is accessed only in such streams, all with the same ``OFF``: the element ``j`` is then
  owned by whichever thread handles ``j``, and no thread reads what another writes;
* BODY has no barrier, shuffle or atomic (threads now run different numbers of iterations), no ``return``,
  ``break``, ``continue`` or ``goto``, does not write ``j`` or read the thread coordinates;
* a scalar from outside the loop that BODY writes is an accumulator (``s += e``, ``s = fmaxf(s, e)``): a
  thread now sums other elements, so each partial must be combined across the threads after the loop — its
  next use is a shuffle, a ``__reduce_*``/``cg::reduce``/``*Reduce*`` call, an atomic or a store into shared
  memory, and it is read in the loop only by its own update (not a running value). Sums are then added in
  another order (within the spec's tolerance, which verification checks);
* nothing else kept outside the loop is written per element: no member (``acc.x += e``), no thread's own
  array, no ``*p``; a shared row is, where every access of it in the loop is ``[OFF + j]``;
* every stream's element type is a scalar of 1, 2, 4 or 8 bytes as instantiated.

* every stream's address is the same for all the threads that share the row (its pointer and offset do not
  vary within the group: a block's row for a block-strided loop, a warp's for a lane-strided one), so they all
  agree on whether it is aligned to a vector.

The rewrite: the row's first elements, up to the first vector boundary its streams share (one element size
and the same offset within a vector, checked at run time: a row offset is rarely known to be aligned), run the
original loop; then the loop runs over *chunks* of ``w`` elements, chunk ``c`` taken by the thread the original
gave element ``c`` (``for (c = S; c < nv; c += STEP)``), BODY once per element on values loaded as one vector
per stream, the written streams stored as one; the row's last elements run the original loop again. Streams
that share no boundary leave the whole row to the original loop. An odd-length row (llm.c's 50257-wide softmax
rows) so gets vectors too; a chunked scalar fallback measured 2x slower there (each lane's four elements made
four strided accesses). Every thread of the group computes the same boundary, so every element is handled
exactly once. Widths ``x8``/``x4``/``x2`` where the widest stream's vector is 8 to 16 bytes.
"""


from __future__ import annotations

from tree_sitter import Node

from ....cuda.candidate import Candidate
from .. import register
from .._structural import line_indent_of, render, with_body
from ..base import Rule, RuleContext
from .analysis import analyse
from .codegen import generate

WIDTHS = {"x8": 8, "x4": 4, "x2": 2}
MAX_BYTES = 16
MIN_BYTES = 8


class VectorizeStrided(Rule):
    family = "vectorize_strided"
    structural = True
    motivated_by = ("WF104", "vectorize")

    def variants(self, ctx: RuleContext) -> list[str]:
        got = analyse(ctx)
        if got is None:
            return []
        loops = got[0]
        widest_elem = max(s.size for lp in loops for s in lp.streams.values())
        return [param for param, w in WIDTHS.items() if MIN_BYTES <= widest_elem * w <= MAX_BYTES]

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        w = WIDTHS.get(param)
        got = analyse(ctx)
        if w is None or got is None or param not in self.variants(ctx):
            return None
        loops, kbody, data = got
        by_id = {lp.node.id: (i, lp) for i, lp in enumerate(loops)}

        def rep(n: Node) -> str | None:
            if n.id in by_id:
                i, lp = by_id[n.id]
                pad = line_indent_of(n, data)
                return "\n".join((pad + ln if k and ln else ln)
                                 for k, ln in enumerate(generate(lp, data, w, i).split("\n")))
            return None

        definition = with_body(ctx, render(kbody, data, rep))
        if definition is None:
            return None
        names = sorted({s.ptr for lp in loops for s in lp.streams.values()})
        why = (f"vector loads/stores of {', '.join(names)} in {len(loops)} strided loop(s): each thread takes "
               f"{w} consecutive elements per step, scalar path for the row's tail and unaligned rows")
        return ctx.derive(self.family, param, why, definition=definition)


register(VectorizeStrided())

