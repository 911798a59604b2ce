"""Thread mapping: every spelling of "this thread's global index" written as the one the rules read.

Why: ``(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x`` (a 2-D grid flattened by hand,
so large arrays fit under the grid's x limit), ``threadIdx.x + blockDim.x * blockIdx.x`` through copies
and casts, ``blockIdx.x * 256 + threadIdx.x`` with the block size a literal: all are the thread's index on
the launch the spec (or the candidate) makes. The affine evaluation (``affine``) decides; the pass only
rewrites an index whose value it proved equal to ``blockIdx.x * blockDim.x + threadIdx.x``.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...cuda.tree import unparen, written_names
from ..rules._structural import global_index, is_grid_stride
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


def _single_init(decl: Node) -> tuple[Node, Node, Node] | None:
    """(name, value, type) of a declaration of one initialized plain name (``T name = value``), else None."""
    ds = decl.children_by_field_name("declarator")
    t = decl.child_by_field_name("type")
    if len(ds) != 1 or ds[0].type != "init_declarator" or t is None:
        return None
    name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if name is None or value is None or name.type != "identifier":
        return None
    return name, value, t


@register("thread_index", "a local whose value equals blockIdx.x * blockDim.x + threadIdx.x on the launch "
                          "(a 1-D grid makes blockIdx.y/z zero)")
def thread_index(k: Kernel, env: PassEnv) -> Result:
    _, uniform = params_of(k)
    scope = scope_of(k, uniform, set())
    written = written_names(k.body, k.data)
    for d in k.body.children:
        one = _single_init(d) if d.type == "declaration" else None
        if one is None:
            continue
        name, value, t = one
        if unparen(value).type == "identifier" or k.t(name) in written:
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


_STRIDE: Poly = {("blockDim.x", "gridDim.x"): 1}


@register("grid_stride_loop", "a `for` whose counter starts at the thread's global index and steps by the grid's "
                              "thread count, through locals (`i = index; i += stride`)")
def grid_stride_loop(k: Kernel, env: PassEnv) -> Result:
    """``int index = ...; int stride = blockDim.x * gridDim.x; for (int i = index; i < n; i += stride)``, the
    grid-stride loop of NVIDIA's own blog and samples, spelled in its header as the rules read it.

    Why: the rules recognise a grid-stride loop by its header. A start and step held in locals (``index``,
    ``stride``, ``threadN``, ``numThreads``) hid the loop, so an elementwise kernel written that way got no
    vector accesses. The affine evaluation follows the locals to their single definitions; the header is
    rewritten only where the start equals ``blockIdx.x * blockDim.x + threadIdx.x`` and the step equals
    ``blockDim.x * gridDim.x`` (on the launch: a 1-D grid makes the y/z terms vanish), and the counter is
    written nowhere but its step. The locals, now unread, are ``dead_locals``'s to remove."""
    # on a 1-D grid blockIdx.y/z are 0 and gridDim.y/z 1; elsewhere the values must match as written
    def flat(p: Poly) -> Poly:
        return _on_1d_grid(p) if env.grid_dims == 1 else p

    _, uniform = params_of(k)
    scope = scope_of(k, uniform, set())
    for f in k.body.children:
        if f.type != "for_statement":
            continue
        init, upd, body = (f.child_by_field_name(x) for x in ("initializer", "update", "body"))
        one = _single_init(init) if init is not None and init.type == "declaration" else None
        if one is None or upd is None or body is None or unparen(upd).type != "assignment_expression":
            continue
        name, start, t = one
        u = unparen(upd)
        var = k.t(name)
        op, left, step = (u.child_by_field_name(x) for x in ("operator", "left", "right"))
        if op is None or left is None or step is None or k.t(op) != "+=" or k.t(unparen(left)) != var:
            continue
        if var in written_names(body, k.data):
            continue  # the counter moves inside the body too: not one element per step
        try:
            ps = flat(poly(start, scope))
            pstep = flat(poly(step, scope))
            got = affine(ps, scope)
        except NonAffine:
            continue
        if got != _CANON or pstep != _STRIDE:
            continue
        ty = " ".join(k.t(t).replace("const", "").split())
        # a 64-bit counter starts from a 64-bit index (the same value below 2^31 threads, the launches there are)
        canon = "blockIdx.x * blockDim.x + threadIdx.x"
        canon = f"({ty}){canon}" if ty in _WIDE else canon
        mult = global_index(start, k.data)
        stride_read = is_grid_stride(step, k.data, mult or "")
        edits = [(n.start_byte, n.end_byte, new) for n, new, read in (
            (start, canon, mult is not None), (step, "blockDim.x * gridDim.x", stride_read)) if not read]
        if not edits:
            continue  # already the spelling the rules read
        return Changed(splice(k.data, edits), f"the loop over `{var}` is a grid-stride loop")
    return None
