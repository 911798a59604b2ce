"""WF103: global memory accesses whose address jumps by a large stride from one thread to the next.

A warp's load or store is served in 32-byte sectors. When consecutive lanes (consecutive ``threadIdx.x``)
access consecutive elements, 32 lanes of 4-byte elements touch 4 sectors: 128 bytes moved, 128 used. When
the index multiplies ``threadIdx.x`` (directly, or through ``blockIdx.x * blockDim.x + threadIdx.x`` and
locals derived from it) by a stride ``s`` elements of ``b`` bytes, lane ``l`` accesses byte ``l*s*b``:

    sectors per request = min(32, ceil(32 * s * b / 32))   (= 32 as soon as s*b >= 32: one per lane)
    ideal sectors       = ceil(32 * b / 32)                 (4 for floats)

and the excess ``sectors / ideal`` is how many more sectors the request moves than a coalesced one (8× for
floats at any stride of 8 elements or more). The numbers are computed exactly by enumerating the lanes
(``lanes.sectors``), which also handles 2D blocks narrower than a warp.

Precision rules, because a false "uncoalesced" on a coalesced access would discredit every hint:
- only indices the model understands exactly (``lanes.Val``); gathers and non-affine indices are skipped;
- the stride must be known: a constant, a size or argument the spec resolves, or, without a spec, the
  length ``S`` of a loop ``for (j = 0; j < S; j++)`` that walks ``x[r*S + j]`` (a row walk, where S = 1
  would make the loop pointless);
- a group of accesses at constant offsets that together cover every element of the stride
  (``p[3*i]``, ``p[3*i+1]``, ``p[3*i+2]``, an array of structs read whole) is skipped: their sectors are
  reused from L1 within the same iteration, and vector loads (WF104) are the better fix; so is a loop
  over a per-thread chunk of at most 16 bytes (``for (k = 0; k < 4; k++) y[4*t + k]``);
- reports need at least 2× the ideal sectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import Access, Poly, Threads, block_x, lane_addresses, row_walk, sectors, text_of, threads
from . import analyzer

define("WF103", "uncoalesced global access (strided across threads)", Severity.INFO, "source", "coalesce")

MIN_EXCESS = 2.0
#: a per-thread chunk this small, walked whole by a loop, is reused from L1: vectorize it (WF104) instead
MAX_CHUNK = 16


def _covered_groups(th: Threads, accesses: list[Access]) -> set[int]:
    """ids of accesses that belong to an interleaved group covering every element of their stride."""
    groups: dict[tuple[str, Poly, Poly], list[Access]] = {}
    for a in accesses:
        if a.index.exact and not a.index.tx.is_zero:
            groups.setdefault((a.param, a.index.tx, a.index.ty), []).append(a)
    out: set[int] = set()
    for (_, tx, _), accs in groups.items():
        s = th.number(tx)
        if s is None or abs(s) < 2 or abs(s) > 64:
            continue
        base = accs[0].index.rest
        residues = set()
        for a in accs:
            off = (a.index.rest - base).constant
            if off is not None:
                residues.add(off % abs(s))
        if len(residues) == abs(s):
            out.update(id(a.node) for a in accs)
    return out


@dataclass
class _Hit:
    access: Access
    stride: int | None
    touched: int
    ideal: int
    walk_line: int | None
    lines: list[int] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    others: list[Access] = field(default_factory=list)

    @property
    def excess(self) -> float:
        return self.touched / self.ideal


@analyzer("uncoalesced", ("WF103",))
def uncoalesced(ctx: KernelContext) -> Iterator[Finding]:
    """One finding per buffer and stride, at its first strided access, with the other lines as related."""
    th = threads(ctx)
    if th.too_big:
        return
    accesses = th.global_accesses()
    if not accesses:
        return
    covered = _covered_groups(th, accesses)
    bx = block_x(ctx)
    if bx is not None and bx < 2:
        return  # one thread along x: threadIdx.x never changes within a warp
    lanes = min(32, ctx.block_threads or 32)
    hits: dict[tuple[str, Poly], _Hit] = {}
    for a in accesses:
        idx = a.index
        if not idx.exact or idx.tx.is_zero or a.elem_bytes is None or id(a.node) in covered:
            continue
        b = a.elem_bytes
        s = th.number(idx.tx)
        walk = row_walk(th, a)
        if s is None and walk is None:
            continue
        if s is not None and abs(s) <= 1:
            continue
        if walk is not None and s is not None and abs(s) * b <= MAX_CHUNK:
            continue  # each thread reads its own small chunk whole (x[4*t + k], k < 4): a vector load's job
        sy = th.number(idx.ty) if not idx.ty.is_zero else 0
        if s is not None and sy is not None:
            addrs = [x * b for x in lane_addresses(s, sy, bx, lanes)]
            low = min(addrs)
            touched, ideal = sectors([x - low for x in addrs], b)
        elif s is None:
            touched, ideal = lanes, max(1, -(-lanes * b // 32))  # a row of >= 32 bytes per lane: a sector each
        else:
            continue
        if touched / ideal < MIN_EXCESS:
            continue
        key = (a.param, idx.tx)
        hit = hits.get(key)
        if hit is None:
            hit = hits[key] = _Hit(a, s, touched, ideal, ctx.node_line(walk.node) if walk is not None else None)
        elif a.node.start_byte != hit.access.node.start_byte:
            hit.others.append(a)
        line = ctx.node_line(a.node)
        if line not in hit.lines:
            hit.lines.append(line)
        hit.kinds.update(({"load"} if a.load else set()) | ({"store"} if a.store else set()))
    for hit in sorted(hits.values(), key=lambda h: h.access.node.start_byte):
        yield _finding(ctx, hit, lanes, bx)


def _finding(ctx: KernelContext, hit: _Hit, lanes: int, bx: int | None) -> Finding:
    a = hit.access
    b = a.elem_bytes or 0
    tx = a.index.tx
    if tx.constant is not None:
        stride = str(tx.constant)
    else:
        stride = f"`{tx.text()}`" + (f" = {hit.stride}" if hit.stride is not None else "")
    k = hit.kinds
    what = "loads and stores of" if k == {"load", "store"} else "stores to" if k == {"store"} else "loads of"
    via = f" through `{a.via}`" if a.via and a.via != a.param else ""
    where = f" on lines {', '.join(map(str, hit.lines))}" if len(hit.lines) > 1 else ""
    lane = _lane_variable(ctx, a)
    why = "each thread walks its own row, so " if hit.walk_line is not None else (
        f"`{lane}` advances with threadIdx.x, so " if lane else "")
    message = (
        f"{what} `{a.param}`{via}{where} are strided by {stride} elements between consecutive threads: {why}"
        f"a warp's request touches {hit.touched} sectors of 32 bytes for {lanes * b} useful bytes, "
        f"{hit.excess:g}× the sectors of a coalesced access"
    )
    if hit.stride is None:
        message += f" (as soon as `{tx.text()}` × {b} bytes ≥ 32)"
    ev: dict[str, object] = {
        "buffer": a.param,
        "index": text_of(ctx, a.node),
        "stride": tx.text(),
        "stride_value": hit.stride,
        "element_bytes": b,
        "sectors_per_request": hit.touched,
        "ideal_sectors": hit.ideal,
        "excess": round(hit.excess, 2),
        "lanes": lanes,
        "lines": hit.lines,
    }
    if bx is not None:
        ev["block_x"] = bx
    if a.via and a.via != a.param:
        ev["via"] = a.via
    if hit.walk_line is not None:
        ev["row_loop_line"] = hit.walk_line
    related = tuple((ctx.range(o.node), f"`{text_of(ctx, o.node)}`: same stride") for o in hit.others)
    return make("WF103", ctx.file, ctx.range(a.node), message, kernel=ctx.kernel.name, evidence=ev, related=related)


def _lane_variable(ctx: KernelContext, a: Access) -> str | None:
    """The local in the index that carries threadIdx.x (``col`` in ``out[col * rows + row]``), if any."""
    th = threads(ctx)
    for n in ctx.walk(a.node):
        if n.type == "identifier" and n != a.node.child_by_field_name("argument"):
            name = ctx.text(n)
            if name in th.locals and not th.locals[name].pointer and not th.local_value(name).tx.is_zero:
                return name
    return None
