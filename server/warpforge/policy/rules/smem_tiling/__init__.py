"""smem_tiling: shared-memory (and register) tiling of a kernel of matmul form.

Why it helps: a kernel computing one output per thread as a K-long dot product straight from global
memory loads every input element once per output that uses it (N times for A, M times for B), so it is
bound by load bandwidth and latency, not arithmetic. Staging a BM×BK tile of A and a BK×BN tile of B in
shared memory lets a block reuse each loaded element BM (or BN) times; giving each thread a TM×TN block of
outputs in registers reuses each shared-memory value TM (or TN) times more, so the inner loop does TM·TN
fused multiply-adds per TM+TN shared loads.

What the analysis requires (on the kernel's top-level statements; the offline policy also hands the rule
the canonical form, so a guarded body, typedefs and index macros are seen as their plain equivalents):

* the 2-D output index: ``x = blockIdx.x * blockDim.x + threadIdx.x`` and the same along y, each declared
  once and never written;
* one **k-loop** ``for (k = S; k < KB; ++k) acc += E;`` (also ``acc = acc + E``, ``acc = fmaf(P, Q, acc)``)
  whose term ``E`` reads arrays, each read ``P[IP]`` moving with k and y alone (staged as an A tile) or with k
  and x alone (a B tile), at least one of each, and otherwise only values every thread of a block shares
  (``alpha * A[..] * B[..]``; syr2k's ``alpha*a[i,k]*b[j,k] + alpha*b[i,k]*a[j,k]`` gets two tiles a side;
  a term that is not the two reads multiplied skips the zero padding of a partial k-tile rather than adding
  its value at zero): the loop carries nothing but the sum; ``S`` and ``KB`` are the
  same for every thread of a block (**uniform**: made of scalar parameters, literals, ``blockIdx.z`` and
  locals of those). ``acc`` is a local; when its start value is uniform the tiled sum starts from it (the
  k-order of the original); otherwise (``float c_acc = c[i * n + j];``: the canonical form's register for a
  ``c[..] += ..`` accumulated in global memory) the statements before the loop run once per output before
  the tiles (a prologue whose exits mark the output dead) and the tiled sum starts from the accumulator's
  value, again the original's order, so its rounding; only where a declaration before the loop reads memory
  (it could not run a second time after a store) does the sum start at zero and is added once
  (reassociation: the verifier's tolerances decide, exact for integers; started at zero, 2 of 10^6 outputs
  of a K = 1024 ``C += Aᵀ·B`` were outside them on an H200);
* by following every local the two reads depend on (``const float* qi = q + head_off + i * D`` included),
  one read varies with y and k but not x (staged as the A tile), the other with x and k but not y (the B
  tile), both from pointer parameters nothing in the kernel writes (the output does not alias an operand);
* before the loop only declarations with pure values, exits ``if (C) return;``, stores of the thread's own
  (``c[i * n + j] *= beta;``, run per output where they stand) and **masks**
  ``if (C) { stores; return; }``; a uniform exit or declaration (a batch index ``p = blockIdx.z`` and its
  ``if (p >= batch) return;``) comes before any store; an exit term that bounds y alone (x alone) is the
  A-load (B-load) predicate. **Without a bound written** on an axis (the launch covers the matrix exactly)
  the bound is the extent the original launch covers, ``grid × block`` along the axis, written in the
  kernel's terms (``cover``): each tile load and each output checks it, so a partial tile at the edge is
  correct; the rule declines when that extent is not an expression of the kernel's integer parameters.
  After the loop any **epilogue**
  (bias, activation, scaling, alpha/beta, stores) that does not synchronize or read the thread coordinates
  (``blockIdx.z`` excepted).

What it declines, besides anything else: a written operand (in place), a loop carrying a second value or
a conditional update, a k-bound or start that differs between threads (triangular loops), a local that
feeds the tiles or is hoisted and is written, thread coordinates used outside the index declarations,
``threadIdx.z`` / 3-D blocks, existing shared memory or collectives.

The rewrite: a block computes a BM×BN tile of outputs; the uniform statements run first, in their order;
for each BK-slice of k it loads the A tile (the read, with ``y`` = block row + r, ``k`` = k0 + c and the
locals it depends on recomputed from them) and the B tile cooperatively into shared memory, each load
predicated by the exit terms on y (x) and the loop condition (zeros outside: adding 0·0 leaves a sum
unchanged). Threads load along whichever of the two indices the address is contiguous in (evaluated at the
spec's sizes), so an operand read ``B[n * K + k]`` (transposed) is loaded along k into a padded tile. Then
every thread accumulates its TM×TN outputs; ``__syncthreads`` after the loads and after the compute. The
summation order over k is the original one. Finally each of a thread's outputs runs the kernel's own
statements, as written, in a lambda (``[&]() { ... }()``): the exits and masks return from it, the
accumulator's declaration takes the tiled sum, the epilogue follows, so bias, activation, mask values and
alpha/beta are computed exactly as before.

**Masks at tile granularity**: when an exit's term is a linear comparison of x and y (``j > i``: the causal
mask), it holds for a whole tile exactly when it holds at the tile's four corners (a half-plane is convex);
a block whose tile is entirely masked skips the loads and the k-loop (uniformly: the test reads only block
indices and uniform values) and only runs the per-output statements, which take the mask's branch.

Launch: grid ``(cdiv(NX, BN), cdiv(NY, BM)[, the original grid's z])`` with NX, NY the bounds in spec terms
(or the extent the original launch covered); declined if the original launch covered fewer outputs than the
bound admits. Variants: ``t16``/``t32`` (one output per thread), ``t32r4`` (4 outputs per thread along y),
``t64r4x4`` and ``t128r8x8`` (4×4 and 8×8 outputs per thread, 256 threads). Thread (tx, ty) owns outputs
y = ty + i·(BM/TM), x = tx + j·(BN/TN): consecutive threads take consecutive columns, so tile reads are
conflict-free and epilogue stores coalesce.

This module holds the analysis and the rule; the shape it finds, the contiguity of the operands and the code
it writes are in ``emit``, the extents of the launch in ``cover``. The rule is offered the kernel's canonical
form too (``policy.ir``: macros expanded, a loop counter declared before its ``for`` moved into it, a
``c[i*n+j] += ..`` accumulated in global memory kept in a register), so those spellings read alike here.
Every decline records its precondition in words (``_why.declined``), which the "why not" hint and the wide
funnel report.
"""

from __future__ import annotations

from .. import register
from .._structural import dims_values, launch_ok, written_names
from .._structural_rule import Launch, StructuralRule
from .._util import kernel_body
from .._why import Stage, declined
from ..base import RuleContext
from .analysis import _X, _Y, _Analysis, _Reject
from .cover import covered, extent, in_kernel_terms
from .emit import _contiguity, _generate, _Shape

#: param -> (BM, BN, BK, TM, TN)
#: most promising first: a search that can afford one variant of a family tries the register-tiled 64×64
#: tile (4×4 outputs per thread), the usual sweet spot for mid-size matrices; 128×128 suits large ones
VARIANTS: dict[str, tuple[int, int, int, int, int]] = {
    "t64r4x4": (64, 64, 16, 4, 4),
    "t32r4": (32, 32, 32, 4, 1),
    "t128r8x8": (128, 128, 8, 8, 8),
    "t32": (32, 32, 32, 1, 1),
    "t16": (16, 16, 16, 1, 1),
}


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    """The kernel's matmul shape, with a bound on each output axis (written, or the launch's extent in the kernel's
    terms), or None with the failed precondition recorded in words (``_why.declined``)."""
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    an = _Analysis(ctx, body, data)
    try:
        shape = an.run()
        for axis, coord, oks in ((0, shape.x, shape.x_ok), (1, shape.y, shape.y_ok)):
            if (shape.x_bound if axis == 0 else shape.y_bound) is not None:
                continue
            if (_X if axis == 0 else _Y) in an.tested:
                raise _Reject(f"the exits that test `{coord.name}` do not bound it alone: a tile's loads could reach "
                              f"{'columns' if axis == 0 else 'rows'} the kernel never reads, past the buffer's end",
                              coord.node, Stage.LEGALITY)
            cover = covered(ctx, axis)
            limit = in_kernel_terms(ctx, cover, written_names(body, data)) if cover is not None else None
            if limit is None:
                raise _Reject(f"no bound on `{coord.name}` is written, and the extent the launch covers along "
                              f"{'xy'[axis]} ({cover}) is not an expression of the kernel's integer parameters: "
                              "the tiled kernel could not tell which outputs exist", coord.node, Stage.LEGALITY)
            oks.append(f"{coord.name} < {limit}")
            shape.limits.append(f"{coord.name} < {limit}")
    except _Reject as e:
        return declined(e.reason, e.node, e.stage)
    _contiguity(an, shape)
    return shape, data


class SmemTiling(StructuralRule[_Shape]):
    family = "smem_tiling"
    structural = True
    motivated_by = ("smem_tiling", "data_reuse")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        g, b = dims_values(ctx, ctx.grid), dims_values(ctx, ctx.block)
        if g is None or b is None or any(v[2] != 1 for v in b) or len(ctx.block) > 2:
            return {}
        nx = extent(ctx, shape.x_bound, data, 0)
        ny = extent(ctx, shape.y_bound, data, 1)
        if nx is None or ny is None:
            return {}
        z = (ctx.grid[2],) if len(ctx.grid) > 2 else ()
        out: dict[str, Launch] = {}
        for param, (bm, bn, _bk, tm, tn) in VARIANTS.items():
            grid = (f"cdiv({nx}, {bn})", f"cdiv({ny}, {bm})", *z)
            block = (str(bn // tn), str(bm // tm))
            if launch_ok(ctx, grid, block):
                out[param] = Launch(grid, block)
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, data, *VARIANTS[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        bm, bn, bk, tm, tn = VARIANTS[param]
        per = f", {tm}x{tn} outputs per thread in registers" if tm * tn > 1 else ""
        skip = "; tiles inside the mask skip the loads" if shape.masks else ""
        rows = " and ".join(sorted({o.array for o, side in shape.operands() if side}))
        cols = " and ".join(sorted({o.array for o, side in shape.operands() if not side}))
        return (f"stage {bm}x{bk} tiles of {rows} and {bk}x{bn} tiles of {cols} in shared "
                f"memory ({bm}x{bn} outputs per block{per}){skip}")



register(SmemTiling())
