"""WF104: scalar global loads/stores in an elementwise kernel where 128-bit vector accesses are possible.

A warp loading 32 consecutive floats with 32-bit ``LDG.E`` issues one instruction per element; ``float4``
(``LDG.E.128``) moves the same bytes with a quarter of the instructions, fewer address computations and
fewer memory transactions in flight per byte — what lets a memory-bound kernel reach peak bandwidth with
fewer warps. The transformation is straightforward only for an *elementwise* kernel: every access of
the buffer is at the thread's own element index ``i = blockIdx.x * blockDim.x + threadIdx.x`` (or a
grid-stride loop's counter), so thread ``i`` can take elements ``4i .. 4i+3`` instead. Stencils, row
loops, transposes and block-cooperative kernels (shared memory, barriers) need more than a type change,
so they are left to other hints.

Precision rules: the element type must be 2, 4 or 8 bytes (so 128 bits is 8, 4 or 2 of them); the SASS
must show the scalar width at the access line (nothing to say if the compiler already vectorized it, or
if the access is not a plain load at all); the kernel must have SASS (``needs=("sass",)``) — without it
we cannot tell a 32-bit load from a 128-bit one, and a guess is not worth a user's attention. No gain is
estimated: for a kernel already near peak bandwidth the benefit is small, for one limited by issue
rate or latency it can be large; only the profiler can tell.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from tree_sitter import Node

from ...cuda.tree import walk
from ...spec.model import DTYPES, canonical_dtype
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._facts import ATOMICS, Access, KernelFacts, facts

define("WF104", "scalar loads/stores where 128-bit vector accesses are possible", Severity.INFO, "sass",
       "vectorize")

_VECTOR_TYPES = ("float2", "float3", "float4", "int2", "int4", "uint2", "uint4", "double2", "half2", "__half2",
                 "longlong2", "short4", "char4", "uchar4", "__nv_bfloat162")


_VECTOR_OF = {"float32": "float4", "int32": "int4", "uint32": "uint4", "float64": "double2", "int64": "longlong2",
              "uint64": "ulonglong2", "float16": "8 halves in a uint4", "bfloat16": "8 bf16 in a uint4",
              "int16": "8 shorts in an int4", "uint16": "8 ushorts in a uint4"}


def _resolve_type(ctx: KernelContext, ptype: str) -> str:
    t = ptype
    if ctx.kernel.template_params and ctx.spec is not None and ctx.spec.template_args:
        for tp, arg in zip(ctx.kernel.template_params, ctx.spec.template_args, strict=False):
            if tp.name == t:
                t = arg
    return t


def _element_type(ctx: KernelContext, f: KernelFacts, buffer: str) -> str:
    p = f.params.get(buffer)
    return (canonical_dtype(_resolve_type(ctx, p.type)) or "") if p is not None else ""


def _element_bytes(ctx: KernelContext, ptype: str) -> int | None:
    """Bytes of a pointer parameter's element type (template types resolved through the spec)."""
    t = _resolve_type(ctx, ptype)
    if t.startswith(_VECTOR_TYPES):
        return None
    dt = canonical_dtype(t)
    return DTYPES[dt][0] if dt is not None else None


def _elementwise_buffers(f: KernelFacts) -> dict[str, list[Access]]:
    """Pointer parameters whose every access is at the thread's element index (and not atomic)."""
    by_buf: dict[str, list[Access]] = {}
    bad: set[str] = set(f.reassigned_params)
    for a in f.accesses:
        if a.alias is not None or not f.is_element_index(a.index):
            bad.add(a.buffer)
        by_buf.setdefault(a.buffer, []).append(a)
    for call in f.calls:
        name = f.call_name(call)
        if name in ATOMICS or name.startswith("__ld") or name.startswith("__st"):
            for arg in f.call_args(call):
                for n in _identifiers(f, arg):
                    bad.add(n)
    # A pointer passed to a helper or used in pointer arithmetic elsewhere is not a plain elementwise buffer.
    for name in list(by_buf):
        acc = f.ctx.access.get(name)
        if acc is not None and acc.escapes:
            bad.add(name)
    return {b: accs for b, accs in by_buf.items() if b not in bad and any(a.load or a.store for a in accs)}


def _identifiers(f: KernelFacts, node: Node) -> Iterator[str]:
    return (f.text(n) for n in walk(node, ("identifier",)))


@analyzer("vectorize", ("WF104",), needs=("source", "sass"))
def vectorize(ctx: KernelContext) -> Iterator[Finding]:
    f = facts(ctx)
    # Block-cooperative kernels (shared memory, barriers, warp shuffles) are not elementwise.
    if f.has_shared or f.has_sync or any(f.call_name(c).startswith(("__shfl", "__ballot", "__syncwarp"))
                                         for c in f.calls):
        return
    # Elementwise means every thread-varying index in the kernel is the thread's own element index.
    if any(f.thread_varying(a.index) and not (a.alias is None and f.is_element_index(a.index))
           for a in f.accesses):
        return
    buffers = _elementwise_buffers(f)
    loads: list[tuple[str, int, int]] = []  # (buffer, line, element bytes)
    stores: list[tuple[str, int, int]] = []
    first: Access | None = None
    for name, accs in buffers.items():
        p = f.params.get(name)
        if p is None or p.pointer_depth != 1:
            continue
        nbytes = _element_bytes(ctx, p.type)
        if nbytes not in (2, 4, 8):
            continue
        ok = True
        mine: list[tuple[str, str, int]] = []
        for a in accs:
            line = ctx.node_line(a.node)
            mix = ctx.sass_lines.get(line)
            bits = nbytes * 8
            if mix is None:
                ok = False
                break
            if a.load and (mix.get(f"ldg{bits}", 0) == 0 or mix.get("ldg128", 0) > 0):
                ok = False
            if a.store and (mix.get(f"stg{bits}", 0) == 0 or mix.get("stg128", 0) > 0):
                ok = False
            if a.load:
                mine.append(("load", name, line))
            if a.store:
                mine.append(("store", name, line))
        if not ok or not mine:
            continue
        for kind, b, line in mine:
            (loads if kind == "load" else stores).append((b, line, nbytes))
        cand = min(accs, key=lambda a: a.node.start_byte)
        if first is None or cand.node.start_byte < first.node.start_byte:
            first = cand
    if first is None:
        return
    nbytes = min(b for _, _, b in (*loads, *stores))
    factor = 16 // nbytes
    load_names = sorted({b for b, _, _ in loads})
    store_names = sorted({b for b, _, _ in stores})
    width = f"{nbytes * 8}-bit"
    parts = []
    if load_names and load_names == store_names:
        parts.append("loads and stores of " + _names(load_names))
    else:
        if load_names:
            parts.append("loads of " + _names(load_names))
        if store_names:
            parts.append("stores to " + _names(store_names))
    what = " and ".join(parts)
    lines = sorted({ln for _, ln, _ in (*loads, *stores)})
    ldg = sum(ctx.sass_lines.get(ln, Counter()).get(f"ldg{nbytes * 8}", 0) for ln in lines)
    stg = sum(ctx.sass_lines.get(ln, Counter()).get(f"stg{nbytes * 8}", 0) for ln in lines)
    first_line = ctx.node_line(first.node)
    related = tuple((ctx.line_range(ln), f"scalar {width} access here") for ln in lines if ln != first_line)
    index = f.text(first.index) if first.index is not None else "i"
    suffix = {2: ".U16", 4: "", 8: ".64"}[nbytes]
    ops = ", ".join(op + suffix for op, names in (("LDG.E", load_names), ("STG.E", store_names)) if names)
    vec = _VECTOR_OF.get(_element_type(ctx, f, first.buffer), "128-bit")
    yield make(
        "WF104", ctx.file, ctx.range(first.node),
        f"{what} are scalar {width} ({ops}) at the thread's element index `{index}`; 128-bit vector "
        f"accesses ({vec}, {factor} elements per thread) would cut memory instructions {factor}×",
        kernel=ctx.kernel.name,
        evidence={"buffers": sorted({*load_names, *store_names}), "element_bytes": nbytes,
                  "sass_scalar_loads": ldg, "sass_scalar_stores": stg, "vector_factor": factor,
                  "lines": lines, "index": index},
        related=related,
    )


def _names(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
