"""warp_reduce: finish a shared-memory tree reduction with warp shuffles.

Why it helps: a block tree reduction halves the active threads per step and pays a ``__syncthreads`` and
a shared-memory round trip for each of its log2(B) steps; the last five steps have at most one warp
active, which still waits on the whole block at every barrier. Warp shuffles exchange registers inside a
warp with no barrier and no shared memory. An interleaved tree (stride doubling from 1) also diverges in
every warp and conflicts on banks; its rewrite is a halving tree, which does neither.

Recognized trees (``tree.py``; the array, index and stride names, the element type and the start are free)::

    __syncthreads();                                   // a block barrier directly before the loop
    for (int s = S0; s > 0; s >>= 1) {                 // or s >= 1 / 0 < s; s /= 2, s = s >> 1, s = s / 2
        if (tid < s) {                                 // or s > tid
            sh[tid] += sh[tid + s];                    // any combine of step.py, on one or more arrays
        }
        __syncthreads();                               // or first in the step (then none is needed before)
    }

    for (int s = 1; s < N; s *= 2) {                   // interleaved: s <<= 1, s = 2 * s, s += s
        if (tid % (2 * s) == 0) sh[tid] += sh[tid + s];//   or: int i = 2 * s * tid; if (i < N) sh[i] += sh[i + s];
        __syncthreads();
    }

The barrier may be ``__syncthreads()``, ``block.sync()`` or ``cg::sync(block)``; ``tid`` is ``threadIdx.x``,
a local copy of it or ``block.thread_index().x`` (in the modulo test also the flat index
``blockIdx.x * blockDim.x + threadIdx.x``); ``sh`` is a ``__shared__`` array or the one pointer view of one
(``scope.shared_buffers``); ``S0`` and ``N`` are block-uniform; the element type is one a
shuffle moves (a template parameter is judged as the spec instantiates it). The loop may sit at the top of
the body or inside an ``if`` or a loop (a block-per-row kernel); ``scope.py`` states what the code around
it must satisfy: a complete array when the tree starts, nobody reading ``sh[1..]`` afterwards (the rewrite
leaves other partial values there), a one-dimensional block.

Legality of the rewrite (``emit.py``). Every combine ``step.py`` accepts is commutative and associative —
exactly for integers, bitwise operations, min and max, within rounding for floating-point sums and products.
So any tree over the same elements leaves the same reduction at ``sh[0]``:

* a halving tree from S0 folds the 2·S0 elements ``sh[0..2·S0)``; ``tail`` keeps its steps down to 64 and
  does the last five in warp 0 with ``__shfl_down_sync`` — the same additions in the same order, so results
  are bitwise identical;
* an interleaved tree below N folds ``sh[0..N)`` when N is a power of two and ``N <= blockDim.x`` (a thread
  for each pair; a modulo on the flat index also needs N to divide ``blockDim.x``); it is rewritten as the
  halving tree from N/2 — a different order of the same operations (not bitwise identical for floats);
* ``warps`` reduces each warp with shuffles and the warps' partials in warp 0 (two barriers), another order
  again; it needs one thread per element (``2·S0 <= blockDim.x``).

Each rewrite runs only when its conditions hold at run time (uniform in the block, constant-folded when they
are constants: S0 a power of two in [16, 512]); otherwise the user's loop runs unchanged. Both leave the
result where the original left it (``sh[0]``, for each array) followed by a ``__syncthreads()``.
"""

from __future__ import annotations

from tree_sitter import Node

from .. import register
from .._structural import indent, line_indent_of
from .._structural_rule import Launch, StructuralRule
from ..base import RuleContext
from . import fold as _fold
from .emit import PREFIX, VARIANTS, replacement
from .scope import Reductions, analyse
from .tree import Threads, TreeLoop, is_tid, match_tree_loop, threads, tid_names

__all__ = ["PREFIX", "VARIANTS", "Reductions", "Threads", "TreeLoop", "WarpReduce", "is_tid", "match_tree_loop",
           "threads", "tid_names"]


class WarpReduce(StructuralRule[Reductions]):
    family = "warp_reduce"
    structural = True
    motivated_by = ("warp_reduce", "barrier_stall")

    def analyse(self, ctx: RuleContext) -> tuple[Reductions, bytes] | None:
        return analyse(ctx)

    def launches(self, ctx: RuleContext, shape: Reductions, data: bytes) -> dict[str, Launch]:
        # the variants differ in how a tree ends; a fold has one rewrite (warps, then warp 0)
        return {param: Launch() for param in (VARIANTS if shape.trees else ("warps",))}

    def body(self, ctx: RuleContext, shape: Reductions, data: bytes, param: str) -> str | None:
        """The body with every tree loop replaced by its shuffle version and every serial fold by the
        block-wide one (``fold.py``)."""
        k = ctx.cand_kernel
        if k is None:
            return None
        src = ctx.cand_src.data
        assert src == data
        out: list[bytes] = []
        pos = k.body_span.start
        edits: list[tuple[Node, str]] = [(lp.node, replacement(lp, param, n)) for n, lp in enumerate(shape.trees)]
        edits += [(f.node, _fold.replacement(f, n, src)) for n, f in enumerate(shape.folds)]
        for node, text in sorted(edits, key=lambda e: e[0].start_byte):
            out.append(src[pos : node.start_byte])
            out.append(indent(text, line_indent_of(node, src)).lstrip().encode())
            pos = node.end_byte
        out.append(src[pos : k.body_span.end])
        return b"".join(out).decode()

    def rationale(self, shape: Reductions, param: str) -> str:
        if not shape.trees:
            arrays = ", ".join(sorted({t.array for f in shape.folds for t in f.terms}))
            return ("fold the shared partials with every thread of the block (a strided pass, __shfl_down_sync in "
                    f"each warp, then warp 0) instead of one thread walking them serially ({arrays})")
        arrays = ", ".join(sorted({c.array for lp in shape.trees for c in lp.combines}))
        why = ("stop the shared-memory tree at 64 elements and finish in warp 0 with __shfl_down_sync"
               if param == "tail" else
               "reduce each warp with __shfl_down_sync, then the warps' partials in warp 0 (2 barriers)")
        if shape.folds:
            why += "; the serial folds by one thread with every thread of the block"
        if any(lp.form == "interleaved" for lp in shape.trees):
            why = "fold the interleaved tree as a halving one (no divergence, no bank conflicts) and " + why
        return f"{why} ({arrays})"


register(WarpReduce())
