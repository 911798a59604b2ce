"""WF101: read-only pointer parameters without ``const`` and ``__restrict__``.

Why it matters: when a kernel stores through one pointer, nvcc must assume every other pointer parameter
may point into the same memory. It then cannot keep a loaded value in a register across the store, cannot
move loads ahead of stores, and cannot send the loads of a read-only buffer through the non-coherent
read-only data path (``LDG.E.CONSTANT`` / ``ld.global.nc``). ``const T* __restrict__`` on a buffer the
kernel only reads gives it all three.

When the suggestion is safe: ``__restrict__`` is a promise that, for the kernel's duration, the memory
reached through that pointer is not modified through any other pointer. For a pointer the kernel never
writes, that promise only breaks when the caller passes a buffer that overlaps one the kernel *writes*
(an in-place call such as ``k(buf, buf)``). We therefore suggest it only on pointers that are never
written — not directly, not through a local alias (``float* y = out + r * C``), not atomically, not
through a call that may write (a pointer handed to a helper or macro, unless the parameter is already
``const``), not via inline ``asm`` — and the message names the written pointers the caller must not alias.
We never suggest ``__restrict__`` on a written pointer: two written pointers that alias each other would
change meaning. Unused pointers are left alone.

This analysis is deliberately stricter than ``cuda.access.param_access`` (which classifies argument roles
for specs): it sees writes through ``p[i].x``, ``p->f``, ``*p++``, pointers assigned after their
declaration and ``cond ? a : b`` aliases, and it does not mistake an element passed by value
(``expf(x[i] - m)``) for the pointer escaping.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.model import DeclKind, Param
from ...cuda.text import Range
from ...cuda.tree import node_text, walk
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import call_name, threads
from . import analyzer

define("WF101", "read-only pointer without const __restrict__", Severity.INFO, "source", "const_restrict")

_ATOMICS = frozenset({
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc", "atomicDec", "atomicCAS",
    "atomicAnd", "atomicOr", "atomicXor", "atomicAdd_block", "atomicAdd_system", "atomicCAS_block",
    "atomicExch_block", "atomicMax_block", "atomicMin_block",
})
#: intrinsics that only read through their (first) pointer argument
_READS = frozenset({"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv", "__prefetch_global_L1",
                    "__prefetch_global_L2", "prefetch"})
#: intrinsics that store through their first pointer argument
_STORES = frozenset({"__stcg", "__stcs", "__stwb", "__stwt"})
#: (dst, src) copies: writes the first pointer argument, reads the second
_COPIES = frozenset({"memcpy", "memset", "__pipeline_memcpy_async", "memcpy_async", "cp_async"})
_CASTS = frozenset({"reinterpret_cast", "static_cast", "const_cast"})
#: wrappers through which a pointer-valued expression stays the same pointer
_THROUGH = frozenset({"parenthesized_expression", "cast_expression", "conditional_expression", "comma_expression",
                      "update_expression"})


@dataclass
class PointerUse:
    read: bool = False
    write: bool = False
    atomic: bool = False
    escapes: bool = False
    written_at: list[Node] = field(default_factory=list)


class _Uses:
    """Classifies every use of each pointer parameter (and of the locals that alias it)."""

    def __init__(self, ctx: KernelContext, pointers: list[Param], helpers: dict[str, bool]) -> None:
        self.ctx = ctx
        self.const = {p.name: p.is_const for p in pointers}
        self.alias: dict[str, set[str]] = {p.name: {p.name} for p in pointers}
        self.uses = {p.name: PointerUse() for p in pointers}
        #: device functions of this file: name -> True when every pointer parameter is const
        self.helpers = helpers

    def run(self, body: Node) -> dict[str, PointerUse]:
        idents = threads(self.ctx).nodes("identifier")
        for _ in range(8):  # aliases of aliases, to a fixpoint
            before = sum(len(v) for v in self.alias.values())
            for n in idents:
                if self.ctx.text(n) in self.alias:
                    self._classify(n, aliasing_only=True)
            if sum(len(v) for v in self.alias.values()) == before:
                break
        for n in idents:
            if self.ctx.text(n) in self.alias:
                self._classify(n, aliasing_only=False)
        return self.uses

    def _mark(self, targets: set[str], node: Node, *, read: bool = False, write: bool = False,
              atomic: bool = False, escapes: bool = False) -> None:
        for t in targets:
            u = self.uses[t]
            u.read |= read
            u.atomic |= atomic
            u.escapes |= escapes
            if write:
                u.write = True
                u.written_at.append(node)

    def _escape(self, targets: set[str], node: Node) -> None:
        """Handed to code we cannot see: reads, and writes unless the pointee is const."""
        self._mark(targets, node, read=True, escapes=True)
        self._mark({t for t in targets if not self.const[t]}, node, write=True)

    def _classify(self, ident: Node, aliasing_only: bool) -> None:
        ctx = self.ctx
        targets = self.alias[ctx.text(ident)]
        parent = ident.parent
        if parent is None:
            return
        # declarations of locals and the pointer's own name in a declarator are not uses
        if parent.type in ("init_declarator", "pointer_declarator", "array_declarator", "reference_declarator") \
                and parent.child_by_field_name("declarator") == ident:
            return
        if parent.type == "parameter_declaration" or parent.type.endswith("_declarator"):
            return
        # climb while the expression is still the same pointer (p + i, (T*)p, c ? p : q, p++)
        cur = ident
        while True:
            parent = cur.parent
            if parent is None:
                return
            pt = parent.type
            if pt in _THROUGH:
                if pt == "conditional_expression" and parent.child_by_field_name("condition") == cur:
                    return  # `p ? a : b`: a null test
                if pt == "cast_expression":
                    tnode = parent.child_by_field_name("type")
                    if tnode is not None and "*" not in ctx.text(tnode):
                        self._as_number(parent, targets, aliasing_only)
                        return
                cur = parent
                continue
            if pt == "binary_expression":
                op = parent.child_by_field_name("operator")
                o = op.type if op is not None else ""
                if o in ("+", "-") and not self._is_pointer_diff(parent):
                    cur = parent
                    continue
                return  # comparisons, differences: no access
            if pt == "argument_list" and parent.parent is not None and call_name(ctx, parent.parent) in _CASTS:
                cast = parent.parent
                fn = cast.child_by_field_name("function")
                targ = fn.child_by_field_name("arguments") if fn is not None else None
                ttext = ctx.text(targ) if targ is not None else ""
                if "*" not in ttext:
                    self._as_number(cast, targets, aliasing_only)
                    return
                if call_name(ctx, cast) == "const_cast":
                    self._escape(targets, cast)  # casting const away: may be written
                    return
                cur = cast
                continue
            break
        parent = cur.parent
        if parent is None:
            return
        pt = parent.type
        if pt == "subscript_expression" and parent.child_by_field_name("argument") == cur:
            if not aliasing_only:
                self._element(parent, targets)
            return
        if pt == "pointer_expression":
            op = parent.child_by_field_name("operator")
            if op is not None and op.type == "*":
                if not aliasing_only:
                    self._element(parent, targets)
                return
            return
        if pt == "field_expression" and parent.child_by_field_name("argument") == cur:
            if not aliasing_only:
                self._element(parent, targets)  # p->f
            return
        if pt == "init_declarator" and parent.child_by_field_name("value") == cur:
            decl = parent.child_by_field_name("declarator")
            name = _declared_name(ctx, decl)
            if name is not None and decl is not None and (decl.type in ("pointer_declarator", "reference_declarator")
                                                         or _is_auto(ctx, parent)):
                self._alias(name, targets)
            elif not aliasing_only:
                self._escape(targets, parent)
            return
        if pt == "assignment_expression" and parent.child_by_field_name("right") == cur:
            left = parent.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                self._alias(ctx.text(left), targets)
            elif not aliasing_only:
                self._escape(targets, parent)  # stored into memory: anyone may write through it later
            return
        if pt == "assignment_expression" and parent.child_by_field_name("left") == cur:
            return  # the pointer variable itself is reassigned (p += stride): no memory access
        if aliasing_only:
            return
        if pt == "argument_list" and parent.parent is not None and parent.parent.type == "call_expression":
            self._argument(parent.parent, parent, cur, targets)
            return
        if pt in ("expression_statement", "condition_clause", "sizeof_expression", "return_statement"):
            if pt == "return_statement":
                self._escape(targets, parent)
            return
        if pt in ("unary_expression",):
            return  # !p
        self._escape(targets, parent)  # asm operands, initializer lists, anything we do not model

    def _as_number(self, node: Node, targets: set[str], aliasing_only: bool) -> None:
        """``(size_t)p``: an alignment test is harmless; an address kept in a variable may be cast back and
        written through, which we cannot follow."""
        cur = node
        parent = cur.parent
        while parent is not None and parent.type in ("parenthesized_expression", "binary_expression",
                                                     "cast_expression"):
            cur, parent = parent, parent.parent
        if not aliasing_only and parent is not None and (
                (parent.type == "init_declarator" and parent.child_by_field_name("value") == cur)
                or (parent.type == "assignment_expression" and parent.child_by_field_name("right") == cur)):
            self._escape(targets, parent)

    def _is_pointer_diff(self, node: Node) -> bool:
        """``p - q`` between two tracked pointers is a number, not a pointer."""
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        return left is not None and right is not None and _root_name(self.ctx, left) in self.alias \
            and _root_name(self.ctx, right) in self.alias

    def _alias(self, name: str, targets: set[str]) -> None:
        if name in self.uses:  # assigning into another parameter: it now points into `targets` too
            self.alias[name] = self.alias[name] | targets
            return
        self.alias[name] = self.alias.get(name, set()) | targets

    def _element(self, elem: Node, targets: set[str]) -> None:
        """How an element (``p[i]``, ``*p``, ``p->f``) is used: written, read, or has its address taken."""
        ctx = self.ctx
        cur = elem
        parent = cur.parent
        while parent is not None and (parent.type in ("parenthesized_expression",) or (
                parent.type == "field_expression" and parent.child_by_field_name("argument") == cur)
                or (parent.type == "subscript_expression" and parent.child_by_field_name("argument") == cur)):
            cur, parent = parent, parent.parent
        if parent is None:
            self._mark(targets, cur, read=True)
            return
        if parent.type == "assignment_expression" and parent.child_by_field_name("left") == cur:
            op = parent.child_by_field_name("operator")
            self._mark(targets, parent, write=True, read=op is not None and op.type != "=")
            return
        if parent.type == "update_expression":
            self._mark(targets, parent, write=True, read=True)
            return
        if parent.type == "pointer_expression":
            op = parent.child_by_field_name("operator")
            if op is not None and op.type == "&":
                self._address(parent, targets)
                return
        if parent.type == "argument_list" and parent.parent is not None:
            name = call_name(ctx, parent.parent)
            if name in self.helpers and not self.helpers[name]:
                self._escape(targets, parent.parent)  # may bind to a non-const reference parameter
                return
        self._mark(targets, cur, read=True)

    def _address(self, addr: Node, targets: set[str]) -> None:
        """``&p[i]``: a pointer again; classify its use like the parameter's own."""
        ctx = self.ctx
        cur = addr
        parent = cur.parent
        while parent is not None and parent.type in _THROUGH:
            cur, parent = parent, parent.parent
        if parent is None:
            return
        if parent.type == "argument_list" and parent.parent is not None and parent.parent.type == "call_expression":
            self._argument(parent.parent, parent, cur, targets)
            return
        if parent.type == "init_declarator" and parent.child_by_field_name("value") == cur:
            name = _declared_name(ctx, parent.child_by_field_name("declarator"))
            if name is not None:
                self._alias(name, targets)
                # an alias created in the final pass: classify its uses now
                for n in threads(ctx).nodes("identifier"):
                    if n.start_byte > parent.end_byte and ctx.text(n) == name:
                        self._classify(n, aliasing_only=False)
            return
        self._escape(targets, parent)

    def _argument(self, call: Node, args: Node, arg: Node, targets: set[str]) -> None:
        name = call_name(self.ctx, call)
        position = [c.id for c in args.named_children].index(arg.id) if arg.id in (
            c.id for c in args.named_children) else -1
        if name in _ATOMICS:
            if position == 0:
                self._mark(targets, call, read=True, write=True, atomic=True)
            return
        if name in _READS:
            self._mark(targets, call, read=True)
            return
        if name in _STORES:
            self._mark(targets, call, write=position == 0, read=position != 0)
            return
        if name in _COPIES:
            self._mark(targets, call, write=position == 0, read=position != 0)
            return
        if self.helpers.get(name):
            self._mark(targets, call, read=True, escapes=True)  # a helper whose pointer parameters are all const
            return
        self._escape(targets, call)


def _declared_name(ctx: KernelContext, decl: Node | None) -> str | None:
    cur = decl
    while cur is not None and cur.type != "identifier":
        nxt = cur.child_by_field_name("declarator")
        cur = nxt if nxt is not None else (cur.named_children[-1] if cur.named_children else None)
    return ctx.text(cur) if cur is not None else None


def _is_auto(ctx: KernelContext, init_decl: Node) -> bool:
    decl = init_decl.parent
    t = decl.child_by_field_name("type") if decl is not None else None
    return t is not None and ctx.text(t).strip() in ("auto", "decltype(auto)")


def _root_name(ctx: KernelContext, node: Node) -> str | None:
    cur: Node | None = node
    while cur is not None and cur.type in ("parenthesized_expression", "cast_expression"):
        cur = cur.child_by_field_name("value") if cur.type == "cast_expression" else (
            cur.named_children[0] if cur.named_children else None)
    return ctx.text(cur) if cur is not None and cur.type == "identifier" else None


def _helpers(ctx: KernelContext) -> dict[str, bool]:
    """Device functions defined in this file: True when none of their pointer/reference parameters is writable.

    A ``float&`` or ``float*`` parameter may be written by the helper; ``const float*``/``const float&`` not.
    """
    from ...cuda.parser import parse_tree

    out: dict[str, bool] = {}
    for d in ctx.model.declarations:
        if d.kind is not DeclKind.DEVICE_FUNCTION:
            continue
        data = ctx.src.data[d.span.start : d.span.end]
        tree = parse_tree(data)
        plist = next(walk(tree.root_node, ("parameter_list",)), None)
        if plist is not None:
            writable = False
            for p in plist.named_children:
                if p.type != "parameter_declaration":
                    continue
                text = node_text(p, data)
                if ("*" in text or "&" in text) and "const" not in text.split("*")[0].split("&")[0]:
                    writable = True
            for name in d.names:
                out[name] = out.get(name, True) and not writable
    return out


def pointer_uses(ctx: KernelContext) -> dict[str, PointerUse]:
    """How the kernel uses each pointer parameter (pointer-to-pointer and array parameters excluded)."""
    pointers = [p for p in ctx.kernel.params if p.pointer_depth == 1 and not p.array_dims and not p.is_reference
                and p.name]
    body = ctx.body
    if body is None or not pointers or threads(ctx).too_big:
        return {}
    uses = _Uses(ctx, pointers, _helpers(ctx)).run(body)
    if threads(ctx).nodes("gnu_asm_expression"):
        # inline PTX can store through any pointer it is handed; only trust const parameters then
        for name, u in uses.items():
            if not next(p for p in pointers if p.name == name).is_const:
                u.write = True
    return uses


@analyzer("const-restrict", ("WF101",))
def const_restrict(ctx: KernelContext) -> Iterator[Finding]:
    k = ctx.kernel
    uses = pointer_uses(ctx)
    written = [name for name, u in uses.items() if u.write or u.atomic]
    if not written:
        return  # nothing is stored through a pointer: no aliasing to rule out
    missing: list[tuple[Param, list[str]]] = []
    for p in k.params:
        u = uses.get(p.name)
        if u is None or not u.read or u.write or u.atomic:
            continue
        lack = [q for q, has in (("const", p.is_const), ("__restrict__", p.is_restrict)) if not has]
        if lack:
            missing.append((p, lack))
    if not missing:
        return
    names = [p.name for p, _ in missing]
    listed = ", ".join(f"`{n}`" for n in names)
    plural = len(names) > 1
    wlist = ", ".join(f"`{w}`" for w in written)
    lacks = {lk for _, ls in missing for lk in ls}
    are, they, their = ("are", "they", "their") if plural else ("is", "it", "its")
    # With SASS: loads already on the read-only path (LDG.E.CONSTANT) mean nvcc proved it for some; then
    # claim only what aliasing certainly costs.
    k0, k1 = k.start_line + 1, k.end_line + 1
    readonly_loads = sum(c.get("ldg_constant", 0) for ln, c in ctx.sass_lines.items() if k0 <= ln <= k1) \
        if ctx.sass_lines else None
    cache = " or use the read-only data cache" if not readonly_loads else ""
    if lacks == {"const"}:
        message = (
            f"{listed} {are} `__restrict__` and only read but not `const`: adding `const` helps nvcc prove "
            f"{their} loads read-only so they can use the read-only data cache"
        )
    else:
        spelled = "lack `__restrict__`" if lacks == {"__restrict__"} else "are not declared `const __restrict__`"
        spelled = spelled if plural else spelled.replace("lack ", "lacks ").replace("are not", "is not")
        message = (
            f"{listed} {are} only read but {spelled}: nvcc must assume {they} may alias {wlist}, which the kernel "
            f"writes, so {their} loads cannot move across those stores{cache} "
            f"(`const __restrict__` is safe while callers never pass overlapping buffers)"
        )
    first = missing[0][0]
    related: tuple[tuple[Range, str], ...] = tuple(
        (ctx.src.range(p.span), f"`{p.name}` lacks {' and '.join(ls)}") for p, ls in missing[1:])
    yield make(
        "WF101", ctx.file, ctx.src.range(first.span), message, kernel=k.name,
        evidence={
            "params": {p.name: {"missing": ls, "const": p.is_const, "restrict": p.is_restrict} for p, ls in missing},
            "written": written,
            **({"sass_readonly_loads": readonly_loads} if readonly_loads is not None else {}),
        },
        related=related,
    )
