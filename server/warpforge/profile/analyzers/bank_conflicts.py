"""WF105: shared-memory accesses where the lanes of a warp collide in the same bank.

Shared memory has 32 banks of 4 bytes; word ``w`` lives in bank ``w % 32``. A warp's access is served in
one pass (a *wavefront*) when its lanes hit distinct banks (or the same word: a broadcast); lanes that hit
different words of one bank are serialized. With ``tile[threadIdx.x][k]`` and rows of 32 floats, lane
``l`` reads word ``32*l + k``: every lane in bank ``k``, a 32-way conflict, 32 wavefronts instead of one.
Padding the row by one word (``tile[32][33]``) moves lane ``l`` to bank ``(l + k) % 32``: conflict-free.

How the degree is computed: the linear element index of the access is modelled as
``cx*threadIdx.x + cy*threadIdx.y + uniform`` (``lanes.Val``, through locals); the lanes of one warp are
enumerated (``threadIdx = (l % bx, l / bx)`` with ``bx`` from the spec, assumed >= 32 without one), each
lane's 4-byte words are mapped to banks, and the wavefronts are the largest number of distinct words any
bank must deliver. Accesses wider than 4 bytes are split into phases of 128 bytes (16 lanes of 8 bytes,
8 lanes of 16 bytes), as the hardware does, so ``float2``/``float4`` rows are not called conflicted for
their inherent extra passes. Degree = wavefronts / the conflict-free minimum; reported from 2-way up.

Silent on: indices the model cannot follow, arrays whose row length is unknown, accesses that do not
depend on ``threadIdx.x``/``threadIdx.y``, and rows already padded (``[32][33]``).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import SharedAccess, block_x, lane_addresses, text_of, threads
from . import analyzer

define("WF105", "shared-memory bank conflicts", Severity.INFO, "source", "smem_padding")

BANKS = 32
MIN_DEGREE = 2


def wavefronts(byte_addrs: list[int], width: int) -> tuple[int, int]:
    """(wavefronts needed, conflict-free minimum) for one warp access of ``width`` bytes per lane."""
    per_phase = max(1, 128 // max(width, 4))
    total = phases = 0
    for start in range(0, len(byte_addrs), per_phase):
        banks: dict[int, set[int]] = {}
        for a in byte_addrs[start : start + per_phase]:
            for w in range(a // 4, (a + max(width, 1) - 1) // 4 + 1):
                banks.setdefault(w % BANKS, set()).add(w)
        total += max(len(v) for v in banks.values())
        phases += 1
    return total, phases


@analyzer("bank-conflicts", ("WF105",))
def bank_conflicts(ctx: KernelContext) -> Iterator[Finding]:
    th = threads(ctx)
    if th.too_big:
        return
    bx = block_x(ctx)
    lanes = min(32, ctx.block_threads or 32)
    seen: set[tuple[int, str, int]] = set()
    for sa in th.shared_accesses():
        idx = sa.index
        if idx.tx.is_zero and idx.ty.is_zero:
            continue
        b = sa.array.elem_bytes
        cx = th.number(idx.tx)
        cy = th.number(idx.ty)
        if b is None or cx is None or cy is None:
            continue
        if cx == 0 and (bx is None or bx >= 32):
            continue  # threadIdx.y is the same across the warp: a broadcast, not a conflict
        addrs = [e * b for e in lane_addresses(cx, cy, bx, lanes)]
        low = min(addrs)
        waves, ideal = wavefronts([a - low for a in addrs], b)
        degree = waves / ideal
        if degree < MIN_DEGREE:
            continue
        line = ctx.node_line(sa.node)
        key = (line, sa.array.name, cx)
        if key in seen:
            continue
        seen.add(key)
        yield _finding(ctx, sa, cx, cy, b, waves, ideal, bx)


def _finding(ctx: KernelContext, sa: SharedAccess, cx: int, cy: int, b: int, waves: int, ideal: int,
             bx: int | None) -> Finding:
    arr = sa.array
    degree = waves / ideal
    stride_words: float | int = cx * b // 4 if (cx * b) % 4 == 0 else cx * b / 4
    words = f"{stride_words:g} words" if stride_words != 1 else "1 word"
    decl = f"{arr.name}" + "".join(f"[{d}]" for d in arr.dims_text)
    if len(arr.dims) >= 2 and arr.dims[-1] is not None and b in (1, 2, 4) and cx % arr.dims[-1] == 0:
        pad_elems = max(1, 4 // b)
        padded = f"{arr.name}" + "".join(f"[{d}]" for d in arr.dims_text[:-1]) + \
            f"[{arr.dims_text[-1]} + {pad_elems}]"
        fix = f"padding each row by one bank word (`{padded}`) spreads the lanes over all banks"
    elif len(arr.dims) == 1 and b in (1, 2, 4):
        fix = (f"a stride of {cx + max(1, 4 // b)} elements instead of {cx} (one bank word of padding, with the "
               f"array sized for it) spreads the lanes over all banks")
    else:
        fix = "padding the stride by one bank word (or swizzling the index) spreads the lanes over all banks"
    message = (
        f"consecutive threads access `{arr.name}` {words} apart, so the lanes of a warp share banks: a "
        f"{degree:g}-way bank conflict makes this access take {waves} shared-memory passes instead of {ideal}; "
        f"{fix}"
    )
    ev: dict[str, object] = {
        "array": decl,
        "index": text_of(ctx, sa.node),
        "element_bytes": b,
        "thread_x_stride_words": stride_words,
        "conflict_degree": round(degree, 2),
        "wavefronts": waves,
        "ideal_wavefronts": ideal,
        "declared_line": arr.decl_line,
        "block_x": bx if bx is not None else "assumed >= 32 (no spec)",
    }
    if cy:
        ev["thread_y_stride_words"] = cy * b // 4 if (cy * b) % 4 == 0 else cy * b / 4
    return make("WF105", ctx.file, ctx.range(sa.node), message, kernel=ctx.kernel.name, evidence=ev)
