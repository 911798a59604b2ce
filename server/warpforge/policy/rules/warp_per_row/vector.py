"""warp_per_row's ``*_vec`` variants: each lane moves W consecutive elements of a row in one 16-byte access.

Why a module of its own: it has its own preconditions (``vector_plan``: which rows, which loops, alignment
checked at run time) and its own loop shape (``_vector_loop``), on top of the plain split loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    binary_parts,
    flush,
    for_parts,
    indent,
    is_ident,
    resolved_type,
    subscript_parts,
    unparen,
)
from ..base import RuleContext
from .analysis import analysis
from .reading import _canon_text, _lane_index, _rename_body, _rename_ids, _renamed_canon, _unconditional
from .shape import ELEM_BYTES, PREFIX, VEC_TYPES, _Loop, _Shape


@dataclass
class _VKey:
    """One array row a vectorized loop moves in vectors: ``name[E + j]`` for its one offset E."""

    name: str
    #: a subscript of the key (the address template: j -> the chunk's first element)
    template: Node
    type: str
    size: int
    #: subscripts read through the vector (all of them for a written key)
    subs: list[int] = field(default_factory=list)
    read: bool = False
    written: bool = False


def vector_plan(ctx: RuleContext, shape: _Shape, data: bytes) -> tuple[dict[int, list[_VKey]], int] | None:
    """Split loops whose lanes can take W consecutive elements at a time: loop number -> the rows moved in
    vectors, and W (16 bytes of the widest element, at most 8 elements); None when no loop can.

    A loop qualifies when it starts at 0 with ``j < L``, reduces only sums, min/max or online pairs (their
    order within a lane is free; arg-reductions and scans keep theirs), and every store in it is an
    unconditional ``q[E + j] = ...`` / ``op=`` (the vector store writes all W elements: each must have been
    written), and no array it touches is both written and read by the kernel (a lane must read back only
    what it wrote itself, and chunks of W map elements to lanes otherwise than the loops left as they are).
    A read-only row is moved in vectors when some read of ``p[E + j]`` is unconditional (the original reads
    every element then). Vectors are used only where every row's address is
    aligned to its vector size at run time; otherwise, and for the ``L % W`` elements past the last whole
    vector, the loop runs as before."""
    got = analysis(ctx)
    k = ctx.cand_kernel
    if got is None or k is None:
        return None
    a, _ = got
    params = {p.name: p for p in k.params}
    out: dict[int, list[_VKey]] = {}
    widest = 0
    for n, lp in enumerate(shape.loops):
        if lp.scan or any(r.index and r.kind != "online" for r in lp.reductions.values()) \
                or _canon_text(lp.start) != "0":
            continue
        fp = for_parts(lp.node, data)
        bp = binary_parts(unparen(fp.cond), data) if fp is not None else None
        if fp is None or bp is None or bp[1] != "<" or not is_ident(unparen(bp[0]), data, lp.var):
            continue
        keys: dict[tuple[str, str], _VKey] = {}
        ok = True
        for sub in walk(fp.body, ("subscript_expression",)):
            parts = subscript_parts(sub, data)
            base = unparen(parts[0]) if parts is not None else None
            name = node_text(base, data) if base is not None and base.type == "identifier" else ""
            root = a.root.get(name)
            if parts is None or root is None or root in a.atomic_roots:
                continue
            if root in a.read_roots:
                # written in one loop and read in another: each element must stay with the lane that wrote
                # it, and a loop in vectors maps elements to lanes otherwise than one without
                ok = False
                break
            written = _store_target(sub)
            lane = _lane_index(parts[1], data, lp.var)
            if not lane:
                if written or root in a.written_roots:
                    ok = False  # a store (or a read of a written row) the vector form does not follow
                continue
            key = (name, _renamed_canon(parts[1], data, lp.var))
            prm = params.get(root)
            size = ELEM_BYTES.get(resolved_type(ctx, prm.type), 0) if prm is not None and prm.pointer_depth == 1 \
                and not prm.array_dims else 0
            vk = keys.setdefault(key, _VKey(name, sub, prm.type if prm is not None else "", size))
            vk.subs.append(sub.id)
            up = sub.parent
            if up is not None and up.type == "pointer_expression":
                vk.size = 0  # its address is taken: not an element the buffer can stand for
            if written:
                vk.written = True
                vk.read = vk.read or written == "update"
                if not _unconditional(sub, lp.node, data):
                    ok = False
            elif _unconditional(sub, lp.node, data) or root in a.written_roots:
                vk.read = True
        chosen = [vk for vk in keys.values() if vk.read or vk.written]
        if not ok or not chosen or any(not vk.size for vk in chosen if vk.written) \
                or not any(vk.size for vk in chosen if vk.read):
            continue
        # conditional reads of a read-only row with no unconditional one stay scalar: drop those keys
        chosen = [vk for vk in chosen if vk.size]
        out[n] = chosen
        widest = max([widest, *(vk.size for vk in chosen)])
    if not out:
        return None
    return out, min(8, 16 // widest)


def _store_target(sub: Node) -> str:
    """"store" when ``sub`` is the target of ``=``, "update" for ``op=``/``++``, "" when it is read."""
    up = sub.parent
    while up is not None and up.type == "parenthesized_expression":
        sub, up = up, up.parent
    if up is None:
        return ""
    if up.type == "assignment_expression" and up.child_by_field_name("left") == sub:
        op = up.child_by_field_name("operator")
        return "store" if op is not None and op.type == "=" else "update"
    if up.type == "update_expression":
        return "update"
    return ""


def _vector_loop(lp: _Loop, n: int, data: bytes, block: bool, parts: dict[str, str], flags: dict[int, str],
                 keys: list[_VKey], width: int) -> list[str]:
    """The split loop in chunks of ``width`` consecutive elements per lane (vector loads, the body once per
    element from the buffers, vector stores) when every row is aligned, then the remaining elements (all
    of them when a row is not aligned) as before."""
    fp = for_parts(lp.node, data)
    assert fp is not None
    d, cond, body = fp.var, fp.cond, fp.body
    bp = binary_parts(unparen(cond), data)
    assert bp is not None
    limit = node_text(bp[2], data)
    lane = "threadIdx.x" if block else f"{PREFIX}lane"
    stride = "blockDim.x" if block else "32"
    c, u, nv, al = f"{PREFIX}ch{n}", f"{PREFIX}u", f"{PREFIX}nv{n}", f"{PREFIX}al{n}"
    first = f"({d.type})({width} * {c})"
    checks: list[str] = []
    checks_static: list[str] = []
    loads: list[str] = []
    stores: list[str] = []
    subs: dict[int, str] = {}
    for k, vk in enumerate(keys):
        vt = VEC_TYPES[width * vk.size]
        at = f"&{_rename_ids(vk.template, data, {lp.var: '0'})}"
        checks.append(f"(reinterpret_cast<size_t>({at}) & {width * vk.size - 1}) == 0")
        addr = f"&{_rename_ids(vk.template, data, {lp.var: first})}"
        v, e = f"{PREFIX}v{n}_{k}", f"{PREFIX}e{n}_{k}"
        if vk.read:
            loads.append(f"{vt} {v} = *reinterpret_cast<const {vt}*>({addr});")
        else:
            loads.append(f"{vt} {v};")
        loads.append(f"{vk.type}* {e} = reinterpret_cast<{vk.type}*>(&{v});")
        # the width was chosen for the spec's element type: another instantiation must not compile
        checks_static.append(f"static_assert(sizeof({vk.type}) * {width} == sizeof({vt}), "
                             f"\"{width} elements of {vk.type} per vector\");")
        if vk.written:
            stores.append(f"*reinterpret_cast<{vt}*>({addr}) = {v};")
        subs.update({sid: f"{e}[{u}]" for sid in vk.subs})
    vec_body = flush(_rename_body(body, data, parts, flags, subs), body, data)
    tail_body = flush(_rename_body(body, data, parts, flags), body, data)
    inner = "\n".join([
        *loads,
        "#pragma unroll",
        f"for (int {u} = 0; {u} < {width}; ++{u}) {{",
        f"    {d.type} {lp.var} = {first} + {u};",
        indent(vec_body, "    "),
        "}",
        *stores,
    ])
    return [
        *dict.fromkeys(checks_static),
        f"const bool {al} = {' && '.join(checks)};",
        f"const {d.type} {nv} = {al} ? ({limit}) / {width} : 0;  // whole vectors of {width} elements",
        f"for ({d.type} {c} = {lane}; {c} < {nv}; {c} += {stride}) {{",
        indent(inner, "    "),
        "}",
        f"for ({d.type} {lp.var} = {nv} * {width} + {lane}; {node_text(cond, data)}; {lp.var} += {stride}) "
        f"{tail_body}",
    ]
