"""Thread mapping: every spelling of "this thread's global index" written as the one the rules read.

Why: ``(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x`` (a 2-D grid flattened by hand,
so large arrays fit under the grid's x limit), ``threadIdx.x + blockDim.x * blockIdx.x`` through copies
and casts, ``blockIdx.x * 256 + threadIdx.x`` with the block size a literal: all are the thread's index on
the launch the spec (or the candidate) makes. The affine evaluation (``affine``) decides; the pass only
rewrites an index whose value it proved equal to ``blockIdx.x * blockDim.x + threadIdx.x``.
"""

from __future__ import annotations

import re

from ...cuda.tree import unparen, written_names
from ..rules._structural import global_index
from .affine import NonAffine, Poly, affine, poly
from .passes import Changed, Kernel, PassEnv, Result, register, splice
from .summary import params_of, scope_of

_CANON = {"blockIdx.x": "blockDim.x", "threadIdx.x": "1"}
_WIDE = frozenset({"size_t", "long", "long long", "unsigned long", "unsigned long long", "int64_t", "uint64_t",
                   "ptrdiff_t", "long int"})


def _on_1d_grid(p: Poly) -> Poly:
    """``p`` on a launch whose grid is 1-D: ``blockIdx.y/z`` are 0, ``gridDim.y/z`` are 1."""
    out: Poly = {}
    for m, c in p.items():
        if any(a in ("blockIdx.y", "blockIdx.z") for a in m):
            continue
        m2 = tuple(a for a in m if a not in ("gridDim.y", "gridDim.z"))
        out[m2] = out.get(m2, 0) + c
    return {m: c for m, c in out.items() if c}


@register("thread_index", "a local whose value equals blockIdx.x * blockDim.x + threadIdx.x on the launch "
                          "(a 1-D grid makes blockIdx.y/z zero)")
def thread_index(k: Kernel, env: PassEnv) -> Result:
    _, uniform = params_of(k)
    scope = scope_of(k, uniform, set())
    written = written_names(k.body, k.data)
    for d in k.body.children:
        if d.type != "declaration":
            continue
        ds = d.children_by_field_name("declarator")
        t = d.child_by_field_name("type")
        if len(ds) != 1 or ds[0].type != "init_declarator" or t is None:
            continue
        name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if name is None or value is None or name.type != "identifier" or unparen(value).type == "identifier" \
                or k.t(name) in written:
            continue  # a copy is copy_propagation's; a local written later is not the index throughout
        try:
            p = poly(value, scope)
            if env.grid_dims == 1:
                p = _on_1d_grid(p)
            got = affine(p, scope)
        except NonAffine:
            continue
        if got != _CANON:
            continue
        ty = " ".join(k.t(t).replace("const", "").split())
        # computed as wide as the original: 64-bit only where the original casts to a 64-bit type
        wide = ty in _WIDE and re.search(r"\(\s*(?:" + "|".join(sorted(_WIDE)) + r")\s*\)", k.t(value))
        canon = f"({ty})blockIdx.x * blockDim.x + threadIdx.x" if wide else "blockIdx.x * blockDim.x + threadIdx.x"
        if global_index(value, k.data) is not None:
            continue  # a spelling the rules read already
        return Changed(splice(k.data, [(value.start_byte, value.end_byte, canon)]),
                       f"`{k.t(name)}` is the thread's global index")
    return None
