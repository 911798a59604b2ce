"""Which threads share a row: the lane and warp variance of a kernel's locals, and loops whose threads start at
every residue of their step once (a block or a warp striding over a row together)."""

from __future__ import annotations

import re

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    binary_parts,
    declared_names,
    single_decl,
    unparen,
    written_names,
)

_WARP = frozenset({"32", "warpSize"})


def idents(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def lane_locals(kbody: Node, data: bytes) -> dict[str, str]:
    """Locals holding a thread's position or a group's size, declared once and never written again: name ->
    "block" (``threadIdx.x``), "lane" (``threadIdx.x % 32``, ``& 31``, ``% warpSize``), "rank" (a tile's
    ``warp.thread_rank()``), "brank" (``block.thread_rank()``), "=blockDim" (``blockDim.x``) or "=warp" (``32``,
    ``warpSize``, ``warp.size()``)."""
    out: dict[str, str] = {}
    written = written_names(kbody, data)
    counts: dict[str, int] = {}
    for n in walk(kbody, ("declaration",)):
        for nm in declared_names(n, data):
            counts[nm] = counts.get(nm, 0) + 1
    for n in walk(kbody, ("declaration",)):
        d = single_decl(n, data)
        if d is None or d.value is None or d.pointer or counts.get(d.name) != 1 or d.name in written:
            continue
        kind = position(d.value, data, out)
        if kind is None:
            size = "".join(node_text(unparen(d.value), data).split())
            if size == "blockDim.x" or out.get(size) == "=blockDim":
                kind = "=blockDim"
            elif size in _WARP or (size.endswith(".size()") and "warp" in size.lower()) or out.get(size) == "=warp":
                kind = "=warp"
        if kind is not None:
            out[d.name] = kind
    return out


def position(v: Node, data: bytes, known: dict[str, str]) -> str | None:
    v = unparen(v)
    text = "".join(node_text(v, data).split())
    if text in ("threadIdx.x", "(int)threadIdx.x", "(unsigned)threadIdx.x"):
        return "block"
    if v.type == "identifier" and text in known:
        return known[text]
    if v.type == "call_expression" and text.endswith(".thread_rank()"):
        # a tile's rank (llm.c's ``warp.thread_rank()``) is a lane's; any other group's (``block.thread_rank()``)
        # a thread's in its block
        obj = text[: -len(".thread_rank()")].lower()
        return "rank" if any(w in obj for w in ("warp", "tile", "lane")) else "brank"
    if v.type == "cast_expression":
        inner = v.child_by_field_name("value")
        return position(inner, data, known) if inner is not None else None
    parts = binary_parts(v, data)
    if parts is not None:
        left, op, right = parts
        r = "".join(node_text(right, data).split())
        if position(left, data, known) == "block" and ((op == "%" and r in _WARP) or (op == "&" and r == "31")):
            return "lane"
    return None


#: a warp's index within its block, or in the grid (``(blockIdx.x*blockDim.x+threadIdx.x)/32``: blocks are whole
#: warps), or a cooperative group's ``meta_group_rank()``: the same for the 32 threads of a warp
_WARP_INDEX = re.compile(
    r"(?<![\w.*/%])threadIdx\.x/(?:32|warpSize|WARP_SIZE)\b"  # threadIdx.x / 32 (not 2 * threadIdx.x / 32)
    r"|(?<![\w.*/%+-])threadIdx\.x>>5\b"  # threadIdx.x >> 5 (not a + threadIdx.x >> 5, which shifts the sum)
    r"|\((?:blockIdx\.x\*blockDim\.x\+threadIdx\.x|threadIdx\.x\+blockIdx\.x\*blockDim\.x"
    r"|blockDim\.x\*blockIdx\.x\+threadIdx\.x|threadIdx\.x\+blockDim\.x\*blockIdx\.x)\)/(?:32|warpSize|WARP_SIZE)\b"
    r"|\.meta_group_rank\(\)")


def variance_levels(kbody: Node, data: bytes) -> dict[str, int]:
    """How the kernel's locals vary between the threads of a group: 2 from thread to thread (``threadIdx``,
    ``thread_rank()``, or a local that does), 1 only from warp to warp (``threadIdx.x / 32``,
    ``meta_group_rank()``), absent when the same for every thread of a block. Every write of a local counts."""
    values: dict[str, list[Node]] = {}
    for n in walk(kbody, ("init_declarator", "assignment_expression")):
        if n.type == "init_declarator":
            tgt, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            while tgt is not None and tgt.type in ("pointer_declarator", "reference_declarator"):
                tgt = tgt.child_by_field_name("declarator") or (tgt.named_children[0] if tgt.named_children
                                                                 else None)
        else:
            tgt, val = n.child_by_field_name("left"), n.child_by_field_name("right")
            tgt = unparen(tgt) if tgt is not None else None
        if tgt is not None and val is not None and tgt.type == "identifier":
            values.setdefault(node_text(tgt, data), []).append(val)
    out: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for name, vals in values.items():
            lv = max(_level(v, data, out) for v in vals)
            if lv > out.get(name, 0):
                out[name] = lv
                changed = True
    return out


def _level(expr: Node, data: bytes, known: dict[str, int]) -> int:
    text = _WARP_INDEX.sub(" WFWARP ", "".join(node_text(expr, data).split()))
    lv = 2 if ("threadIdx" in text or ".thread_rank()" in text) else 1 if "WFWARP" in text else 0
    for n in walk(expr, ("identifier",)):
        lv = max(lv, known.get(node_text(n, data), 0))
    return lv


def cooperative(start: Node, step: Node, data: bytes, lanes: dict[str, str], block_x: int | None) -> bool:
    """Do the threads running the loop start at every residue of the step once? ``block_x``: the block's x
    extent where the launch is one-dimensional and the same at every size of the spec, else None."""
    kind = position(start, data, lanes)
    s = "".join(node_text(unparen(step), data).split())
    alias = lanes.get(s)
    literal = int(s) if s.isdigit() else None
    if kind == "block":
        return block_x is not None and (s == "blockDim.x" or alias == "=blockDim" or literal == block_x)
    if kind == "lane":
        return s in _WARP or (s.endswith(".size()") and "warp" in s.lower()) or alias == "=warp"
    if kind == "rank":
        st = "".join(node_text(start, data).split())
        return s == st.replace(".thread_rank()", ".size()") or (
            (s in _WARP or alias == "=warp") and "warp" in st.lower())
    if kind == "brank":
        st = "".join(node_text(start, data).split())
        return s == st.replace(".thread_rank()", ".size()") or (block_x is not None and s == "blockDim.x")
    return False


