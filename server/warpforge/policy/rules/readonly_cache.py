"""readonly_cache: load read-only buffers through the read-only data cache with ``__ldg``.

Why it helps: ``__ldg(&p[i])`` compiles to ``LDG.E.CONSTANT`` (the non-coherent, read-only path through
the texture/L1 cache), which tolerates scattered and reused reads better than plain global loads and does
not compete with writes for coherence. The compiler only does this by itself when it can prove the data
is not written during the kernel — in practice, when the pointer is ``const __restrict__``; this rule gets
the same loads without changing the kernel's signature.

When it is safe: the pointer must never be written by the kernel — neither through itself nor through a
local pointer derived from it, nor passed to a function that might write (``cuda/access.py``) — and the
buffer must not alias one the kernel writes, which the spec's separately allocated buffers guarantee for
the run being verified (the same premise as ``const_restrict``). Pointers already ``const __restrict__``
are skipped (the compiler already uses the read-only path), as are element types ``__ldg`` has no
overload for (templates, structs, half types). Only subscript reads ``p[e]`` of the parameter or of a
local ``T* q = p + ...`` alias of the same type are rewritten, nested reads included.
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.rewrite import apply_edits, make_edit
from ...cuda.text import Span
from ...cuda.tree import node_text, walk
from . import register
from ._util import canonical_access, families, kernel_body
from .base import Rule, RuleContext

#: element types with an ``__ldg`` overload (sm_35+), as written in a parameter (``const`` stripped)
LDG_TYPES = frozenset({
    "char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned", "unsigned int",
    "long", "unsigned long", "long long", "unsigned long long", "float", "double",
    "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t",
    "char2", "char4", "uchar2", "uchar4", "short2", "short4", "ushort2", "ushort4", "int2", "int4", "uint2",
    "uint4", "longlong2", "ulonglong2", "float2", "float4", "double2",
})


def _targets(ctx: RuleContext) -> dict[str, str]:
    """Read-only pointer parameters this rule can route through ``__ldg``: name -> element type."""
    k = ctx.cand_kernel
    if k is None:
        return {}
    access = canonical_access(ctx)
    out: dict[str, str] = {}
    for p in k.params:
        acc = access.get(p.name)
        if p.pointer_depth != 1 or p.array_dims or acc is None or not acc.read or acc.write or acc.escapes:
            continue
        if p.is_const and p.is_restrict:
            continue
        if " ".join(p.type.split()) in LDG_TYPES:
            out[p.name] = p.type
    return out


def _aliases(body: Node, data: bytes, targets: dict[str, str]) -> set[str]:
    """Local pointers ``T* q = p + ...`` (same element type) of a target ``p``."""
    names = set(targets)
    for n in walk(body):
        if n.type != "declaration":
            continue
        ty = n.child_by_field_name("type")
        if ty is None:
            continue
        for init in n.named_children:
            if init.type != "init_declarator":
                continue
            d, v = init.child_by_field_name("declarator"), init.child_by_field_name("value")
            if d is None or v is None or d.type != "pointer_declarator":
                continue
            inner = d.child_by_field_name("declarator")
            if inner is None or inner.type != "identifier":
                continue
            base = v
            if base.type == "binary_expression":
                op = base.child_by_field_name("operator")
                left = base.child_by_field_name("left")
                if op is None or left is None or node_text(op, data) not in ("+", "-"):
                    continue
                base = left
            if base.type == "identifier" and node_text(base, data) in targets \
                    and " ".join(node_text(ty, data).split()) == " ".join(targets[node_text(base, data)].split()):
                names.add(node_text(inner, data))
    return names


def _reads(body: Node, data: bytes, names: set[str]) -> list[Node]:
    """Subscript reads ``q[e]`` of ``names`` that are plain loads (not ``&q[e]``, not assigned)."""
    out = []
    for n in walk(body):
        if n.type != "subscript_expression":
            continue
        arg = n.child_by_field_name("argument")
        if arg is None or arg.type != "identifier" or node_text(arg, data) not in names:
            continue
        parent = n.parent
        if parent is not None and (
            (parent.type == "pointer_expression" and node_text(parent, data).lstrip().startswith("&"))
            or (parent.type == "assignment_expression" and parent.child_by_field_name("left") == n)
            or parent.type == "update_expression"
        ):
            continue
        out.append(n)
    return out


def _render(node: Node, data: bytes, wrap: set[tuple[int, int]]) -> str:
    """The text of ``node`` with every subscript in ``wrap`` (by byte range) turned into ``__ldg(&...)``."""
    parts: list[str] = []
    pos = node.start_byte
    for c in node.children:
        parts.append(data[pos : c.start_byte].decode("utf-8"))
        parts.append(_render(c, data, wrap))
        pos = c.end_byte
    parts.append(data[pos : node.end_byte].decode("utf-8"))
    text = "".join(parts) if node.children else node_text(node, data)
    return f"__ldg(&{text})" if (node.start_byte, node.end_byte) in wrap else text


class ReadonlyCache(Rule):
    family = "readonly_cache"
    motivated_by = ("WF101", "readonly_cache")

    def _plan(self, ctx: RuleContext) -> tuple[list[Node], bytes, list[str]] | None:
        if self.family in families(ctx):
            return None
        targets = _targets(ctx)
        got = kernel_body(ctx)
        if not targets or got is None:
            return None
        body, data = got
        reads = _reads(body, data, _aliases(body, data, targets))
        return (reads, data, sorted(targets)) if reads else None

    def variants(self, ctx: RuleContext) -> list[str]:
        return ["all"] if self._plan(ctx) is not None else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        plan = self._plan(ctx)
        if plan is None or param != "all":
            return None
        reads, data, names = plan
        wrap = {(n.start_byte, n.end_byte) for n in reads}
        outer = [n for n in reads
                 if not any(o is not n and o.start_byte <= n.start_byte and n.end_byte <= o.end_byte for o in reads)]
        edits = [make_edit(ctx.cand_src, Span(n.start_byte, n.end_byte), _render(n, data, wrap)) for n in outer]
        return ctx.derive(self.family, param,
                          f"load read-only {', '.join(names)} through the read-only cache (__ldg, {len(reads)} loads)",
                          definition=apply_edits(ctx.cand_src, edits))


register(ReadonlyCache())
