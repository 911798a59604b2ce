"""warp_per_row: give each row of a row-wise kernel to a warp (or a block) instead of a single thread.

Why it helps: a kernel with one thread per row walks a row serially, and neighbouring threads touch
addresses a whole row apart, so every load and store of a warp is 32 separate memory transactions and
the row's latency is paid element by element. With a warp per row, the 32 lanes read 32 consecutive
elements at once (coalesced, 128 bytes per instruction) and the row is done in 1/32 of the steps; the
row's reductions (max, sum) become per-lane partials combined with five ``__shfl_xor_sync`` steps.
Softmax, layer/RMS normalization and similar row-wise kernels written "one thread per row" typically
gain an order of magnitude. The ``block256`` variant uses a whole 256-thread block per row (partials of
the 8 warps combined through shared memory), for long rows.

Recognized shape (names, types, expressions free)::

    T row = blockIdx.x * blockDim.x + threadIdx.x;    // either operand order
    [declarations not using the thread coordinates]
    if (row >= ROWS) return;                         // or: if (row < ROWS) { ...rest... } as the last statement
    rest: a sequence of
      - declarations and assignments of local scalars (pointer offsets like ``const float* x = in + row * C``),
        computed identically by every lane;
      - loops ``for (int j = 0; j < COLS; j++)`` (also ++j, j += 1) whose bodies contain only
          * local declarations, ``if``/``else`` and blocks,
          * element writes ``p[IDX] = ...`` / ``p[IDX] op= ...``,
          * reductions into a scalar declared outside the loop: ``acc += e``, ``acc -= e``,
            ``acc = acc + e``, ``acc = fmaxf(acc, e)`` (fmax, max, fminf, fmin, min; either argument order),
          * a running max carried with the sum of exponentials shifted by it (``single_pass``'s online loop):
            ``if (v > m) { s = s * expf(m - v); m = v; }`` then ``s += expf(v - m);`` (``__expf``, ``exp``),
            ``v`` reading neither; each lane keeps its own pair, merged across lanes with the same rescaling
            (for a block, then across its warps through shared memory),
        where an array written anywhere in the kernel is always accessed with one index ``j`` or ``E + j``
        (E the same loop-invariant expression everywhere), read-only arrays with any index free of values
        the loop assigns, and a reduction's accumulator is not otherwise read inside its loop.

Top-level statements may read only memory the kernel never writes (a lane must not read an element
another lane wrote), and nothing may use the thread coordinates except ``row``'s definition, synchronize,
exchange data between threads, or leave early (return/break/goto). They may write per-row scalars
(``mean[row] = m;``, ``loss[row] = ...``) to arrays that are written nowhere else and never read: every
lane computes the same value there, and one lane (lane 0, thread 0 for a block) stores it.

The analysis runs on the canonical form (``cuda.normalize``) when the text as written is not of this
shape, so a body inside ``if (row < B) { ... }``, a bumped row pointer (``x += row * C``), a macro index or a
typedef'd accumulator are all seen as the shape above.

The rewrite: ``row`` becomes the warp's index, lane ``l`` runs each loop over ``j = l, l + 32, ...``, so the
same lane touches element ``j`` in every loop and element-wise dependencies between loops stay inside one
thread. Each reduction accumulates a per-lane partial (from 0 for sums, from the accumulator's value for
min/max, which are idempotent) that a butterfly of ``__shfl_xor_sync`` combines so every lane holds the
same total; a sum is then added to the accumulator. The guard is uniform per warp (whole warps leave
together), so the full-mask shuffles are safe. Floating-point sums are reassociated (tolerances apply).

Launch: ``block = 32 * R`` threads (R rows per block) and ``grid = cdiv(ROWS, R)``, where ROWS is the guard's
bound written in spec terms (a scalar parameter's ``arg`` value); if it cannot be, the rows the original
launch covered (grid × block) bound it instead. ``block256``: one block per row, ``grid = ROWS``.
Assumption: device functions called in the loops have no side effects other threads can see.

Sized from the spec (rows x threads against the GPU's resident threads, loop bounds through locals defined
once such as ``int hw = H * W``):

- ``block512``/``block1024``: when ROWS x 256 threads leave SMs idle (few long rows: a per-channel mean over
  N x H x W), larger blocks per row, proposed first; each loop must give every thread two elements or more.
- inside an outer loop run whole by every lane, a sum's or min/max's lane partial lives across the outer
  loop and is combined once after it, unless the outer loop reads the accumulator (``_deferred``).
- ``*_smem``: a row of a never-written array that two or more passes read whole is staged in dynamic shared
  memory once (``_row_cache`` states the preconditions); the passes read it there.
- ``*_vec``: each lane moves 16 bytes of consecutive elements per load/store where every row of a loop is
  aligned at run time (``vector_plan`` states the preconditions); the rest of the row as before.

Where the parts live (one job per module, this package's ``__init__`` is the rule itself: which variants a
recognized shape gets and how they launch):

- ``shape``: the variants, limits and the records the analysis fills in (``_Shape``, ``_Loop``, ...);
- ``reading``: text-level readings shared by analysis and rewrite (lane indices, thread coordinates, atomics);
- ``analysis``: the row shape (index, guard, top-level statements, row caches) and why a kernel is not one;
- ``loops``: what a split loop's body may do (element accesses, reductions, online pairs, prefix sums);
- ``codegen``, ``combine``, ``vector``: the new body, the lane/warp combines, the 16-byte vector loops.

A decline says why in words (``why_not``), at the blocking line where one is known.
"""

from __future__ import annotations

from tree_sitter import Node

from ...ir.remap import NotLegal
from .. import register
from .._structural import MINMAX_FUNCS, envs, is_1d, launch_ok, scalar_value_expr, upper_bound
from .._structural_rule import Launch, StructuralRule
from .._util import eval_expr, size_env
from ..base import RuleContext

# ``X as X``: names other rules (column_split, stride_reduce, atomic_aggregate) import from here, re-exported
from .analysis import _analyse, explain
from .analysis import _Analysis as _Analysis
from .analysis import analysis as analysis
from .codegen import _generate
from .reading import _canon_text as _canon_text
from .reading import _ids as _ids
from .reading import _rename_body as _rename_body
from .reading import _varying as _varying
from .reading import atomic_target as atomic_target
from .reading import strided_in_loop as strided_in_loop
from .shape import CACHED, MAX_SMEM, THREADS_PER_SM, VARIANTS, VECTOR
from .shape import PREFIX as PREFIX
from .shape import _Loop as _Loop
from .shape import _Reject as _Reject
from .shape import _Shape as _Shape
from .vector import vector_plan as vector_plan


def _reduction_kinds_ok(shape: _Shape) -> bool:
    return all(r.kind in ("sum", "argmax", "argmin", "online") or r.kind in MINMAX_FUNCS
               for lp in shape.loops for r in lp.reductions.values())


def _has_arg(shape: _Shape) -> bool:
    """Arg-reductions and scans combine inside a warp only (no block-wide variant); online pairs merge
    across warps too."""
    return any(r.index and r.kind != "online" for lp in shape.loops for r in lp.reductions.values()) \
        or any(lp.scan for lp in shape.loops)


class WarpPerRow(StructuralRule[_Shape]):
    family = "warp_per_row"
    structural = True
    motivated_by = ("WF111", "warp_per_row", "WF103", "coalesce")

    def _rows(self, ctx: RuleContext, shape: _Shape, data: bytes) -> tuple[str, bool] | None:
        """The number of rows in spec terms, and whether it is exact (else: an upper bound from the launch)."""
        lim = scalar_value_expr(ctx, shape.bound.limit, data) if shape.bound is not None else None
        if lim is not None and shape.bound is not None:
            return (f"({lim}) + 1" if shape.bound.inclusive else lim), True
        if shape.flat and not shape.uses_yz and len(ctx.grid) == 2 and is_1d(ctx, ctx.block):
            return f"({ctx.grid[0]}) * ({ctx.grid[1]}) * ({ctx.block[0]})", False
        if not ((is_1d(ctx, ctx.grid) or shape.uses_yz) and is_1d(ctx, ctx.block)):
            return None
        return f"({ctx.grid[0]}) * ({ctx.block[0]})", False

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        got = _analyse(ctx)
        reason = self.unfit(ctx, *got) if got is not None else None
        if reason is not None:
            try:  # a shape no launch is sized for is a decline too: raising records its words (see _Reject)
                raise _Reject(reason, got[0].loops[0].node if got is not None and got[0].loops else None)
            except _Reject:
                return None
        return got

    def unfit(self, ctx: RuleContext, shape: _Shape, data: bytes) -> str | None:
        """Why a recognized row shape gets no launch at all, in words (None: ``launches`` sizes one)."""
        if not _reduction_kinds_ok(shape):
            return "a reduction in the row is of a kind the lanes cannot combine"
        if self._short_rows(ctx, shape, data):
            return ("every loop of the row runs fewer than 32 times at the spec's sizes (a short filter): most "
                    "lanes of a warp would idle")
        if strided_in_loop(shape, data):
            # a strided loop over a contiguous row index is column_split's: lanes would not coalesce
            j = shape.loops[0].var if shape.loops else "j"
            return (f"the loop reads a column (`E * {j} + {shape.row.name}`): neighbouring threads already read "
                    "neighbouring elements, so lanes along the loop would not coalesce (column_split's shape)")
        if self._rows(ctx, shape, data) is None:
            return ("the number of rows is unknown in spec terms: the guard's bound is not a scalar argument of "
                    "the spec and the launch is not one-dimensional")
        return None

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        if self.unfit(ctx, shape, data) is not None:
            return {}
        rows = self._rows(ctx, shape, data)
        assert rows is not None
        rows_expr, exact = rows
        yz = tuple(ctx.grid[1:]) if shape.uses_yz else ()
        few = self._few_rows(ctx, rows_expr)
        vectors = vector_plan(ctx, shape, data) is not None
        # few rows: the largest blocks per row first (they are what fills the GPU), warps per row last
        order = sorted(VARIANTS, key=lambda p: -VARIANTS[p][0] if VARIANTS[p][1] == 0 else 0) if few \
            else list(VARIANTS)
        vec: dict[str, Launch] = {}
        staged: dict[str, Launch] = {}
        out: dict[str, Launch] = {}
        for param in order:
            threads, rpb = VARIANTS[param]
            if rpb == 0:
                if not exact or _has_arg(shape) or not self._long_rows(ctx, shape, data, max(1024, 2 * threads)):
                    continue
                if threads > 256 and not self._few_rows(ctx, rows_expr, threads // 2):
                    continue  # a block of T threads per row only when blocks of T / 2 leave SMs idle
                grid: tuple[str, ...] = (rows_expr, *yz)
            else:
                grid = (f"cdiv({rows_expr}, {rpb})", *yz)
            block = (str(threads),)
            if launch_ok(ctx, grid, block):
                if param in VECTOR and vectors:
                    vec[f"{param}_vec"] = Launch(grid, block)
                smem = self._cache_smem(ctx, shape, data, max(rpb, 1)) if param in CACHED else None
                if smem is not None:
                    staged[f"{param}_smem"] = Launch(grid, block, smem)
                out[param] = Launch(grid, block)
        # the mappings with vectors first, then with a staged row, then as they are: the first two move the
        # same rows in fewer instructions or with fewer global reads (a misaligned row runs as is), and a
        # search that tries only the first few of a family then still tries each mapping and each kind
        return {**vec, **staged, **out}

    @staticmethod
    def _cache_smem(ctx: RuleContext, shape: _Shape, data: bytes, rows: int) -> str | None:
        """The dynamic shared memory (spec terms) of ``rows`` rows of every cache, each region rounded to
        16 bytes; None without caches, when L is unknown in spec terms or it exceeds ``MAX_SMEM``."""
        if not shape.cache:
            return None
        lim = scalar_value_expr(ctx, shape.cache[0].limit_node, data, shape.defs)
        es = envs(ctx)
        if lim is None or es is None:
            return None
        smem = f"{rows} * ({' + '.join(f'cdiv(({lim}) * {c.size}, 16) * 16' for c in shape.cache)})"
        for env in es:
            v = eval_expr(smem, env)
            if not isinstance(v, int) or v < 1 or v > MAX_SMEM:
                return None
        return smem

    @staticmethod
    def _few_rows(ctx: RuleContext, rows_expr: str, threads: int = 256) -> bool | None:
        """Do the rows, ``threads`` per row, fill fewer than the threads the GPU keeps resident (None: the
        row count is unknown at the spec size)?"""
        try:
            n = eval_expr(rows_expr, size_env(ctx))
        except ValueError:
            return None
        if not isinstance(n, int):
            return None
        return n * threads < ctx.sm_count * THREADS_PER_SM

    @staticmethod
    def _trip(ctx: RuleContext, lp: _Loop, data: bytes, defs: dict[str, Node] | None = None) -> int | None:
        """The loop's bound at the spec size when it is a known scalar (None: unknown)."""
        cond = lp.node.child_by_field_name("condition")
        b = upper_bound(cond, data, lp.var) if cond is not None else None
        lim = scalar_value_expr(ctx, b.limit, data, defs) if b is not None else None
        if lim is None:
            return None
        try:
            v = eval_expr(lim, size_env(ctx))
        except ValueError:
            return None
        return v if isinstance(v, int) else None

    @classmethod
    def _long_rows(cls, ctx: RuleContext, shape: _Shape, data: bytes, least: int = 1024) -> bool:
        """A block per row pays off for rows of at least 1024 elements (when the loop bound is known), a
        block of T threads for loops of at least ``least`` (2T: every thread gets two elements or more)."""
        return all((t := cls._trip(ctx, lp, data, shape.defs)) is not None and t >= least for lp in shape.loops)

    @classmethod
    def _short_rows(cls, ctx: RuleContext, shape: _Shape, data: bytes) -> bool:
        """Every loop is known to run fewer than 32 times (a 9-tap filter): most lanes of a warp would idle."""
        return all((t := cls._trip(ctx, lp, data, shape.defs)) is not None and t < 32 for lp in shape.loops)

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        base = param.removesuffix("_smem").removesuffix("_vec")
        plan = vector_plan(ctx, shape, data) if param.endswith("_vec") else None
        if param.endswith("_vec") and plan is None:
            return None
        return _generate(shape, data, block=VARIANTS[base][1] == 0, cached=param.endswith("_smem"), vector=plan)

    def rationale(self, shape: _Shape, param: str) -> str:
        base = param.removesuffix("_smem").removesuffix("_vec")
        threads, rpb = VARIANTS[base]
        accs = sorted({r.acc for lp in shape.loops for r in lp.reductions.values()})
        red = f"; reductions of {', '.join(accs)} by shuffles" if accs else ""
        staged = f"; the row of {', '.join(c.name for c in shape.cache)} read once into shared memory, " \
            "which the later passes read" if param.endswith("_smem") else ""
        if param.endswith("_vec"):
            staged = "; each lane moves consecutive elements in 16-byte vectors where the rows are aligned"
        if rpb:
            return (f"one warp per row ({rpb} rows per {threads}-thread block), lanes stride the row by 32"
                    f"{red}{staged}")
        return f"one {threads}-thread block per row, threads stride the row{red} and shared memory{staged}"


RULE = WarpPerRow()
register(RULE)


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why warp_per_row proposes nothing for the candidate (None when it proposes a variant): the "why not"
    hint's words, at the blocking line of the candidate's text where one is known (0: the kernel as a whole).

    The same checks as the rule's own: the row shape (``analysis.explain``), then whether any launch is sized
    (``WarpPerRow.unfit``) and fits the spec at every size it gives."""
    got = explain(ctx)
    if isinstance(got, NotLegal):
        return got
    a, shape = got
    line = shape.loops[0].node.start_point[0] + 1 if shape.loops else 0
    reason = RULE.unfit(ctx, shape, a.data)
    if reason is not None:
        return NotLegal(reason, line)
    if not RULE.launches(ctx, shape, a.data):
        return NotLegal("a row per warp (or per block) does not fit the spec's launch limits at every size it "
                        "gives (grid or block out of range, or long-row variants need known long loops)", line)
    return None
