"""smem_stage: stage the footprint a block's threads share in shared memory, by k-tiles with barriers.

The staging remap of the kernel IR (issue 27, item 4): whether it applies is decided by
``policy.ir.stage.plan_stage`` on the ``Summary`` of the candidate, so every spelling the IR lowers reads the
same — a naive GEMM with no bound written (the launch covers the matrix exactly) or with a guard / an early
exit, a ``C[i*NJ+j] += alpha*A[..]*B[..]`` global accumulator the IR keeps in a register, alpha/beta scaling
around the loop, a loop variable declared before the ``for``, rows from y or from x, ``A·Aᵀ`` (syrk: two
reads of one matrix along different axes).

Why it helps: with one output per thread, the threads of a block that share a row read the same ``A[i, k]``
and those that share a column the same ``B[k, j]``: each element is fetched ``blockDim`` times. Here the
block loads a ``blockDim.a × KT`` tile of each such read once per ``KT`` values of k (cooperatively, along
the read's contiguous dimension), synchronizes, and every thread runs its ``KT`` iterations from shared
memory. Tiles are padded by one element per row, so threads that read a tile column (rows from x) hit
distinct banks.

The rewrite (legality and bounds: see ``policy.ir.stage``): right after the body's top-level declarations,
every thread computes ``wfs_sum`` — the loop's sum over k, its staged reads replaced by tile reads —
and the loop becomes one update ``acc += wfs_sum`` (``C[idx] += wfs_sum`` for a global accumulator). The
launch is unchanged. Variants: ``k32`` and ``k16`` (the k-tile width).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...cuda.tree import walk
from ...spec.model import Role
from ..ir.passes import Kernel, splice
from ..ir.remap import NotLegal
from ..ir.stage import StagePlan, TransposePlan, footprint, plan_stage, plan_transpose, swapped
from ..ir.summary import params_of, summarize
from . import register
from ._structural import dims_values, in_kernel_terms, written_names
from ._structural_rule import Launch, StructuralRule, analysed, fitting, ir_kernel
from ._util import kernel_body
from .base import RuleContext

PREFIX = "wfs_"
#: param -> the k-tile width (a loop's staging); a transpose has the one variant ``tile``
VARIANTS = {"k32": 32, "k16": 16}
#: the narrow tile, offered only where neither of the others fits (a row per thread on a block of 1024)
NARROW = {"k8": 8}
TRANSPOSE = "tile"
#: bytes of static shared memory the tiles may take (48 KiB is the static limit)
_SMEM_LIMIT = 48 * 1024
_BYTES = {"double": 8, "long": 8, "long long": 8, "int64_t": 8, "uint64_t": 8, "size_t": 8, "__half": 2,
          "half": 2, "__nv_bfloat16": 2, "short": 2, "char": 1, "unsigned char": 1}



@dataclass(frozen=True)
class _Shape:
    kernel: Kernel
    plan: StagePlan | TransposePlan
    #: bytes per element of each staged parameter, template parameters resolved by the spec's instantiation
    sizes: dict[str, int]
    #: threads per block along x and y (the same at every size of the spec)
    block: tuple[int, int]
    #: staged parameter -> its buffer length in the kernel's terms (only where the kernel guards its threads)
    lengths: dict[str, str]


def _length(ctx: RuleContext, param: str) -> str | None:
    """The length of ``param``'s buffer as an expression of the kernel's parameters (or a number), from the
    spec: its sizes are replaced by the scalar argument that carries them (one the kernel never writes), or by
    their value where it is the same at every size."""
    arg = next((a for a in ctx.spec.args if a.name == param and a.role is not Role.SCALAR), None)
    got = kernel_body(ctx)
    if arg is None or arg.count is None or got is None:
        return None
    return in_kernel_terms(ctx, arg.count, written_names(*got))


def analysis(ctx: RuleContext) -> _Shape | NotLegal:
    """The candidate's staging plan and the block it runs in, or why there is none."""
    got = ir_kernel(ctx, (PREFIX,), "already staged in shared memory")
    if isinstance(got, NotLegal):
        return got
    k, targs = got
    blocks = dims_values(ctx, ctx.block)
    if blocks is None:
        return NotLegal("the launch's block does not evaluate at the spec's sizes")
    if len({b[:2] for b in blocks}) != 1 or any(b[2] != 1 for b in blocks):
        return NotLegal("the block's shape differs between the spec's sizes or is more than one deep: the tiles "
                        "are static arrays of the block's extent")
    bx, by = blocks[0][0], blocks[0][1]
    summary = summarize(k, targs)
    plan: StagePlan | TransposePlan | NotLegal = plan_stage(k, summary, targs, (bx, by))
    if isinstance(plan, NotLegal) and not summary.loops and next(
            walk(k.body, ("for_statement", "while_statement", "do_statement")), None) is None:
        plan = plan_transpose(k, summary)
    if isinstance(plan, NotLegal):
        return plan
    if isinstance(plan, TransposePlan):
        if bx != by or bx > 32:
            return NotLegal(f"the block is {bx}x{by}: a transpose through a tile needs a square block of at most "
                            "32x32 (a thread stores the element of its mirror thread)")
        return _Shape(k, plan, _sizes(k, [plan.param], targs), (bx, by), {})
    lengths: dict[str, str] = {}
    if plan.guarded:
        for r in plan.reads:
            n = _length(ctx, r.param)
            if n is None:
                return NotLegal(f"the kernel guards its threads, and the length of `{r.param}` in the spec is not "
                                "an expression of the kernel's parameters: a tile row past the guard could be read "
                                "out of bounds", r.line)
            lengths[r.param] = n
    shape = _Shape(k, plan, _sizes(k, [r.param for r in plan.reads], targs), (bx, by), lengths)
    if not _variants(shape):
        return NotLegal(f"the tiles of a {bx}x{by} block take more than {_SMEM_LIMIT // 1024} KiB of shared memory "
                        f"even {min(NARROW.values())} values of k wide", plan.line)
    return shape


def why_not(ctx: RuleContext) -> NotLegal | None:
    """Why the staging does not apply to the candidate (None when it does): the "why not" hint's words."""
    got = analysis(ctx)
    return got if isinstance(got, NotLegal) else None


def _indent_at(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    line = data[start:offset].decode("utf-8")
    return line[:len(line) - len(line.lstrip())]


def _elem(k: Kernel, param: str) -> str:
    """The element type of a pointer parameter as written (``const`` dropped): the tile's type."""
    return next((t.replace("const ", "").strip() for n, t, ptr, _ in params_of(k)[0] if n == param and ptr), "float")


def _sizes(k: Kernel, params: list[str], targs: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in params:
        t = _elem(k, p)
        t = targs.get(t, t)
        out[p] = _BYTES.get(" ".join(t.replace("const ", "").split()), 4)
    return out


def _smem_bytes(shape: _Shape, kt: int) -> int:
    bx, by = shape.block
    if isinstance(shape.plan, TransposePlan):
        return bx * (bx + 1) * shape.sizes[shape.plan.param] + bx * bx
    return sum((bx if r.axis == "x" else by) * (kt + 1) * shape.sizes[r.param] for r in shape.plan.reads)


def _variants(shape: _Shape) -> dict[str, int]:
    """The k-tile widths whose tiles fit in static shared memory: 32 and 16, else 8."""
    if isinstance(shape.plan, TransposePlan):
        return {TRANSPOSE: 0} if _smem_bytes(shape, 0) <= _SMEM_LIMIT else {}
    wide = {p: kt for p, kt in VARIANTS.items() if _smem_bytes(shape, kt) <= _SMEM_LIMIT}
    return wide or {p: kt for p, kt in NARROW.items() if _smem_bytes(shape, kt) <= _SMEM_LIMIT}


def rewrite_transpose(shape: _Shape, p: TransposePlan) -> str:
    """The new body of a transpose: each thread puts its value in the tile, then stores its mirror's."""
    k = shape.kernel
    data = k.data
    b0 = k.body.start_byte
    ind = _indent_at(data, p.tail[0]) or "    "
    side = shape.block[0]
    value = data[p.value[0]:p.value[1]].decode("utf-8")
    elem = _elem(k, p.param)
    lines = [f"__shared__ {elem} {PREFIX}x[{side}][{side} + 1];  // padded: a column read hits {side} banks"]
    if p.cond:
        lines += [f"__shared__ bool {PREFIX}ok[{side}][{side}];",
                  "{",
                  f"    const bool {PREFIX}own = {p.cond};",
                  f"    {PREFIX}ok[threadIdx.y][threadIdx.x] = {PREFIX}own;",
                  f"    if ({PREFIX}own) {PREFIX}x[threadIdx.y][threadIdx.x] = {value};",
                  "}",
                  "__syncthreads();",
                  f"if ({PREFIX}ok[threadIdx.x][threadIdx.y]) "
                  f"{p.param}[{swapped(p.index)}] = {PREFIX}x[threadIdx.x][threadIdx.y];"]
    else:
        lines += [f"{PREFIX}x[threadIdx.y][threadIdx.x] = {value};",
                  "__syncthreads();",
                  f"{p.param}[{swapped(p.index)}] = {PREFIX}x[threadIdx.x][threadIdx.y];"]
    text = "\n".join(lines[:1] + [ind + ln for ln in lines[1:]]) + "\n"
    return splice(data[b0:k.body.end_byte], [(p.tail[0] - b0, p.tail[1] - b0, text)])


def rewrite_transposed_read(shape: _Shape, p: TransposePlan) -> str:
    """The new body of a transpose whose read is strided: the block loads, coalesced, what each thread's mirror
    reads into the mirror's slot; the kernel's own statements then take the read from the thread's slot."""
    k = shape.kernel
    data = k.data
    b0 = k.body.start_byte
    ind = _indent_at(data, p.tail[0]) or "    "
    side = shape.block[0]
    elem = _elem(k, p.param)
    load = f"{PREFIX}x[threadIdx.x][threadIdx.y] = {p.param}[{swapped(p.index)}];"
    lines = [f"__shared__ {elem} {PREFIX}x[{side}][{side} + 1];  // padded: a column write hits {side} banks"]
    if p.cond:
        lines += [f"__shared__ bool {PREFIX}ok[{side}][{side}];",
                  f"{PREFIX}ok[threadIdx.y][threadIdx.x] = {p.cond};",
                  "__syncthreads();",
                  f"if ({PREFIX}ok[threadIdx.x][threadIdx.y]) {load}  // the mirror thread's read"]
    else:
        lines += [f"{load}  // the mirror thread's read"]
    lines += ["__syncthreads();", ""]
    text = "\n".join(lines[:1] + [ind + ln if ln else ln for ln in lines[1:]]) + ind
    return splice(data[b0:k.body.end_byte], [(p.tail[0] - b0, p.tail[0] - b0, text),
                                              (p.value[0] - b0, p.value[1] - b0,
                                               f"{PREFIX}x[threadIdx.y][threadIdx.x]")])


#: a read-only-cache load (``__ldg(&a[i])``, what ``readonly_cache`` writes) of what is now a shared tile
_CACHED_TILE_READ = re.compile(r"__ld(?:g|cg|ca|cs|lu|cv)\s*\(\s*&\s*(" + PREFIX + r"t\d+\[[^\]]*\]\[[^\]]*\])\s*\)")


def _plain_tile_reads(term: str) -> str:
    """``__ldg(&wfs_t0[..][..])`` -> ``wfs_t0[..][..]``: a global read-only load of a shared address is an illegal
    instruction ("operation not supported on global/shared address space" on an H200, staging composed after
    ``readonly_cache`` on the wide sample's integer matmul: the CUDA context was lost)."""
    return _CACHED_TILE_READ.sub(r"\1", term)


def rewrite(shape: _Shape, kt: int) -> str:
    """The new body (braces included) of the kernel for the k-tile width ``kt``."""
    k, p = shape.kernel, shape.plan
    assert isinstance(p, StagePlan)
    data = k.data
    b0 = k.body.start_byte
    ind = _indent_at(data, p.at) or "    "
    bx, by = shape.block
    threads = bx * by
    var, vt = p.loop_var, p.var_type
    names = [f"{PREFIX}sum" if len(p.sums) == 1 else f"{PREFIX}sum{n}" for n in range(len(p.sums))]
    lines = [f"{u.type} {nm} = 0;" for u, nm in zip(p.sums, names, strict=True)]
    lines[-1] += f"  // the loop over `{var}` below, its shared reads staged in tiles"
    lines.append("{")
    tiles: dict[tuple[int, int], str] = {}
    for n, r in enumerate(p.reads):
        rows = bx if r.axis == "x" else by
        tiles[r.span] = f"{PREFIX}t{n}"
        lines.append(f"    __shared__ {_elem(k, r.param)} {PREFIX}t{n}[{rows}][{kt} + 1];")
    lines += [f"    const int {PREFIX}tid = threadIdx.y * {bx} + threadIdx.x;",
              f"    for ({vt} {PREFIX}k0 = {p.start}; {PREFIX}k0 < {p.end}; {PREFIX}k0 += {kt}) {{"]
    for n, r in enumerate(p.reads):
        rows = bx if r.axis == "x" else by
        split = (f"const int {PREFIX}r = {PREFIX}e / {kt}, {PREFIX}c = {PREFIX}e % {kt};" if r.k_fast else
                 f"const int {PREFIX}r = {PREFIX}e % {rows}, {PREFIX}c = {PREFIX}e / {rows};")
        addr = footprint(r.index, r.axis, f"{PREFIX}r")
        ok = f"{var} < {p.end}"
        if r.param in shape.lengths:
            ok += f" && ({addr}) >= 0 && ({addr}) < {shape.lengths[r.param]}"
        lines += [f"        for (int {PREFIX}e = {PREFIX}tid; {PREFIX}e < {rows * kt}; {PREFIX}e += {threads}) {{",
                  f"            {split}",
                  f"            const {vt} {var} = {PREFIX}k0 + {PREFIX}c;",
                  f"            {PREFIX}t{n}[{PREFIX}r][{PREFIX}c] = ({ok}) ? {r.param}[{addr}] : "
                  f"({_elem(k, r.param)})0;",
                  "        }"]
    edits = [(a, b, f"{tiles[(a, b)]}[threadIdx.{r.axis}][{PREFIX}c]") for r in p.reads for a, b in [r.span]] \
        + [(a, b, text) for (a, b), text in p.direct]
    terms = [_plain_tile_reads(splice(data[u.term[0]:u.term[1]], [(a - u.term[0], b - u.term[0], t)
                                                                   for a, b, t in edits if u.term[0] <= a < u.term[1]]))
             for u in p.sums]
    adds = [f"{nm} += {t};" for nm, t in zip(names, terms, strict=True)]
    counter = [f"            const {vt} {var} = {PREFIX}k0 + {PREFIX}c;"] \
        if any(re.search(rf"\b{var}\b", t) for t in terms) else []
    lines += ["        __syncthreads();",
              f"        if ({p.end} - {PREFIX}k0 >= {kt}) {{  // a whole tile: a constant trip count, unrolled",
              "#pragma unroll",
              f"            for (int {PREFIX}c = 0; {PREFIX}c < {kt}; ++{PREFIX}c) {{",
              *("    " + c for c in counter),
              *(f"                {a}" for a in adds),
              "            }",
              "        } else {",
              f"            for (int {PREFIX}c = 0; {PREFIX}c < {p.end} - {PREFIX}k0; ++{PREFIX}c) {{",
              *("    " + c for c in counter),
              *(f"                {a}" for a in adds),
              "            }",
              "        }",
              "        __syncthreads();",
              "    }",
              "}"]
    staging = "\n".join(lines[:1] + [(ind + ln) if ln and not ln.startswith("#") else ln for ln in lines[1:]]) \
        + "\n" + ind
    update = " ".join(f"{u.target} += {nm};" if u.op == "+=" else f"{u.target} = {u.target} + {nm};"
                      for u, nm in zip(p.sums, names, strict=True))
    body_edits = [(p.at, p.at, staging), (p.loop_span[0], p.loop_span[1], update)]
    return splice(data[b0:k.body.end_byte], [(a - b0, b - b0, t) for a, b, t in body_edits])


class SmemStage(StructuralRule[_Shape]):
    family = "smem_stage"
    structural = True
    motivated_by = ("memory_bound", "l1_hit_low", "uncoalesced_global", "smem_tiling")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return analysed(analysis(ctx))

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        return fitting(ctx, {p: Launch() for p in _variants(shape)})

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        if isinstance(shape.plan, TransposePlan):
            return (rewrite_transposed_read if shape.plan.read else rewrite_transpose)(shape, shape.plan)
        return rewrite(shape, {**VARIANTS, **NARROW}[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        if isinstance(shape.plan, TransposePlan) and shape.plan.read:
            return (f"stage the read of `{shape.plan.param}` through a padded {shape.block[0]}x{shape.block[0]} "
                    "shared tile: each thread loads its mirror thread's element, so the reads coalesce")
        if isinstance(shape.plan, TransposePlan):
            return (f"stage the store to `{shape.plan.param}` through a padded {shape.block[0]}x{shape.block[0]} "
                    "shared tile: each thread stores its mirror thread's value, so the writes coalesce")
        reads = ", ".join(sorted({r.param for r in shape.plan.reads}))
        kt = {**VARIANTS, **NARROW}[param]
        return (f"stage the block's shared footprint of {reads} in shared memory, {kt} values of "
                f"`{shape.plan.loop_var}` at a time: each element is loaded once per block instead of once per "
                "thread")


register(SmemStage())
