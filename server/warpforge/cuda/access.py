"""Which pointer parameters a kernel reads, writes or updates atomically.

Spec inference uses this to give arguments their roles (a buffer the kernel only reads is an input, one
it writes without reading is an output that must be fully written), and the hints use it to find
read-only pointers that lack ``const __restrict__``. Local pointers derived from a parameter
(``const float* row = x + r * C;``) are followed, so row-wise kernels are classified correctly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from .model import Kernel
from .parser import parse_tree
from .text import SourceText
from .tree import node_text, walk

_IDENT = re.compile(r"[A-Za-z_]\w*")
_ATOMICS = frozenset(
    {
        "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc", "atomicDec",
        "atomicCAS", "atomicAnd", "atomicOr", "atomicXor", "atomicAdd_block", "atomicAdd_system",
    }
)


@dataclass
class Access:
    read: bool = False
    write: bool = False
    atomic: bool = False
    #: an assignment or call we could not see through (e.g. the pointer passed to a helper function)
    escapes: bool = False
    #: some read may see the value the buffer held before the launch: a read (``+=``, an atomic, a plain
    #: load) of an element that the same thread has not certainly written first (see ``_covered``).
    #: A buffer that is written and read only after its own writes (``out[i] = 0; ... out[i] += v``) is an
    #: output (``out``), not ``inout``: its initial contents do not matter.
    read_first: bool = False



def _base_identifier(node: Node | None, data: bytes) -> str | None:
    """The pointer variable an lvalue/pointer expression is based on: ``p[i]``, ``*(p+i)``, ``p + i``."""
    while node is not None:
        t = node.type
        if t == "identifier":
            return node_text(node, data)
        if t == "subscript_expression" or t == "pointer_expression":
            node = node.child_by_field_name("argument")
        elif t == "parenthesized_expression" or t == "cast_expression":
            node = node.child_by_field_name("value") if t == "cast_expression" else node.named_children[0]
        elif t == "binary_expression":
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            lb = _base_identifier(left, data)
            node = left if lb is not None else right
            if lb is not None:
                return lb
        elif t in ("field_expression", "update_expression"):
            node = node.child_by_field_name("argument")
        else:
            return None
    return None


def _alias_sources(node: Node, data: bytes) -> list[str]:
    """Pointer variables an expression may evaluate to: ``p + i``, ``&p[i]``, ``c ? a : b``."""
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node.type == "conditional_expression":
        out: list[str] = []
        for f in ("consequence", "alternative"):
            c = node.child_by_field_name(f)
            if c is not None:
                out.extend(_alias_sources(c, data))
        return out
    base = _pointer_valued(node, data)
    return [base] if base is not None else []


def _pointer_valued(node: Node, data: bytes) -> str | None:
    """The variable a *pointer-valued* argument is based on: ``p``, ``p + i``, ``&p[i]``, ``(T*)p``.

    ``x[j] - m`` or ``*p`` are values, not pointers: passing them to ``expf`` cannot write through ``x``.
    """
    while node.type in ("parenthesized_expression", "cast_expression"):
        inner = node.child_by_field_name("value") if node.type == "cast_expression" else (
            node.named_children[0] if node.named_children else None)
        if inner is None:
            return None
        node = inner
    if node.type == "identifier":
        return node_text(node, data)
    if node.type == "pointer_expression" and node_text(node, data).startswith("&"):
        return _base_identifier(node.child_by_field_name("argument"), data)
    if node.type == "binary_expression":
        op = node.child_by_field_name("operator")
        if op is not None and node_text(op, data) in ("+", "-"):
            for side in ("left", "right"):
                c = node.child_by_field_name(side)
                if c is not None and c.type == "identifier":
                    return node_text(c, data)
    return None


def param_access(source: str | SourceText, kernel: Kernel) -> dict[str, Access]:
    """Access summary for every pointer parameter of ``kernel``."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    data = src.data[kernel.definition_span.start : kernel.definition_span.end]
    tree = parse_tree(data)
    pointers = [p.name for p in kernel.params if p.is_pointer]
    #: local pointer -> the parameters it may point into (a ?: can give several)
    alias: dict[str, set[str]] = {p: {p} for p in pointers}
    result = {p: Access() for p in pointers}
    body = tree.root_node

    # Pass 1: local pointer aliases (to a fixpoint: aliases of aliases).
    changed = True
    while changed:
        changed = False
        for n in walk(body):
            if n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                right = n.child_by_field_name("right")
                op = n.child_by_field_name("operator")
                if left is not None and right is not None and left.type == "identifier" and op is not None \
                        and node_text(op, data) in ("=", "+=", "-="):
                    local = node_text(left, data)
                    for src_ in _alias_sources(right, data):
                        if src_ in alias and local not in pointers and not alias[src_] <= alias.get(local, set()):
                            alias.setdefault(local, set()).update(alias[src_])
                            changed = True
            if n.type == "init_declarator":
                decl = n.child_by_field_name("declarator")
                val = n.child_by_field_name("value")
                if decl is not None and val is not None and decl.type in ("pointer_declarator",
                                                                         "reference_declarator"):
                    nm = decl.child_by_field_name("declarator") or (decl.named_children[-1]
                                                                    if decl.named_children else None)
                    if nm is not None:
                        local = node_text(nm, data)
                        for base in [_base_identifier(val, data), *_alias_sources(val, data)]:
                            if base in alias and not alias[base] <= alias.get(local, set()):
                                alias.setdefault(local, set()).update(alias[base])
                                changed = True

    #: (element key, the write's statement) per parameter, for plain ``=`` writes
    writes: dict[str, list[tuple[str, Node]]] = {}
    #: (element key, the node reading it) per parameter
    reads: dict[str, list[tuple[str, Node]]] = {}

    def mark(node: Node | None, *, read: bool = False, write: bool = False, atomic: bool = False,
             at: Node | None = None, plain_write: bool = False) -> None:
        base = _base_identifier(node, data)
        if base is None or base not in alias or node is None:
            return
        key = "".join(node_text(node, data).split())
        for param in alias[base]:
            acc = result[param]
            acc.read |= read
            acc.write |= write
            acc.atomic |= atomic
            if read:
                reads.setdefault(param, []).append((key, at or node))
            if plain_write and at is not None:
                writes.setdefault(param, []).append((key, at))

    stack = [body]
    while stack:
        n = stack.pop()
        t = n.type
        if t == "assignment_expression":
            left = n.child_by_field_name("left")
            op = n.child_by_field_name("operator")
            compound = op is not None and node_text(op, data) != "="
            if left is not None and left.type in ("subscript_expression", "pointer_expression", "field_expression"):
                mark(left, write=True, read=compound, at=n, plain_write=not compound)
                # Index expressions on the left are reads of other things; walk them but not the base.
                idx = left.child_by_field_name("indices") or left.child_by_field_name("index")
                if idx is not None:
                    stack.append(idx)
                right = n.child_by_field_name("right")
                if right is not None:
                    stack.append(right)
                continue
        elif t == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type in ("subscript_expression", "pointer_expression"):
                mark(arg, write=True, read=True, at=n)
                continue
        elif t == "call_expression":
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            name = node_text(fn, data) if fn is not None else ""
            if name in _ATOMICS and args is not None and args.named_children:
                first = args.named_children[0]
                elem = first.child_by_field_name("argument") if first.type == "pointer_expression" \
                    and node_text(first, data).startswith("&") else None
                mark(elem if elem is not None else first, write=True, read=True, atomic=True, at=n)
                stack.extend(args.named_children[1:])
                continue
            if args is not None:
                for a in args.named_children:
                    base = _pointer_valued(a, data)
                    # Passing the pointer itself (not an element) to a helper: assume it may write.
                    for param in alias.get(base or "", ()):
                        acc = result[param]
                        acc.escapes = True
                        acc.read = True
                        acc.read_first = True
                        if not _is_const_param(kernel, param):
                            acc.write = True
        elif t == "subscript_expression" or (t == "pointer_expression" and node_text(n, data).startswith("*")):
            mark(n, read=True)
        stack.extend(n.children)
    assigned = _assignments(body, data)
    for param, rs in reads.items():
        ws = writes.get(param, [])
        if any(not _covered(key, r, ws, assigned, data) for key, r in rs):
            result[param].read_first = True
    return result


def _assignments(body: Node, data: bytes) -> dict[str, list[int]]:
    """Byte offsets where each local variable is assigned or updated (``i += s``, ``++i``)."""
    out: dict[str, list[int]] = {}
    for n in walk(body):
        target = None
        if n.type == "assignment_expression":
            target = n.child_by_field_name("left")
        elif n.type == "update_expression":
            target = n.child_by_field_name("argument")
        if target is not None and target.type == "identifier":
            out.setdefault(node_text(target, data), []).append(n.start_byte)
    return out


def _statement(node: Node) -> Node | None:
    """The statement holding ``node`` whose parent is a block (``{ ... }``), or None."""
    cur: Node | None = node
    while cur is not None and cur.parent is not None and cur.parent.type != "compound_statement":
        cur = cur.parent
    return cur if cur is not None and cur.parent is not None else None


def _covered(key: str, read: Node, writes: list[tuple[str, Node]], assigned: dict[str, list[int]],
             data: bytes) -> bool:
    """Is the element ``key`` certainly written by this thread before ``read`` looks at it?

    True when a plain write of the same element (same text: ``out[i]``) is a statement of a block that
    encloses the read and comes before it: structured code runs that statement first on every path that
    reaches the read. A variable of the element's index assigned in between (``i += stride``) makes it
    another element, so the read counts as a first read."""
    for wkey, wnode in writes:
        if wkey != key:
            continue
        stmt = _statement(wnode)
        if stmt is None or stmt.type != "expression_statement" or stmt.parent is None:
            continue
        block = stmt.parent
        if not (block.start_byte <= read.start_byte and read.end_byte <= block.end_byte) \
                or read.start_byte < stmt.end_byte:
            continue
        names = {m for m in _IDENT.findall(key)}
        if any(stmt.end_byte <= off < read.start_byte for nm in names for off in assigned.get(nm, ())):
            continue
        return True
    return False


def _is_const_param(kernel: Kernel, name: str) -> bool:
    p = kernel.param(name)
    return p is not None and p.is_const


_BOUND = re.compile(r"\b([A-Za-z_]\w*)\s*<\s*([A-Za-z_]\w*)\b(?!\s*[\[(.])")
_BOUND_RETURN = re.compile(r"\bif\s*\(\s*([A-Za-z_]\w*)\s*>=\s*([A-Za-z_]\w*)\s*\)\s*(?:\{\s*)?return\b")
_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim", "x", "y", "z", "warpSize"})


def index_bounds(source: str | SourceText, kernel: Kernel,
                 extents: dict[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """For each pointer parameter, the integer parameters whose product bounds its subscripts, where the
    kernel's guards say so: ``w[c]`` under ``for (int c = ...; c < cols; ...)`` gives ``("cols",)``,
    ``x[r * cols + c]`` under ``r < rows`` and ``c < cols`` gives ``("rows", "cols")``.

    A length proposed for an annotation comes from here (``spec.resolve.proposal``): the kernel's first
    integer argument, the old proposal, gave a row-length vector the number of rows. Textual and cautious:
    a subscript with a variable no guard bounds by a parameter gives nothing. ``extents`` adds bounds the caller
    knows otherwise (a thread index's extent read from the launch's form, ``spec.guess.launch_form``)."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    body = src.data[kernel.body_span.start : kernel.body_span.end].decode("utf-8", "replace")
    scalars = {p.name for p in kernel.params if not p.is_pointer}
    bound: dict[str, str] = {}
    for rx in (_BOUND, _BOUND_RETURN):
        for m in rx.finditer(body):
            if m.group(2) in scalars and m.group(1) not in scalars:
                bound.setdefault(m.group(1), m.group(2))
    for var, extent in (extents or {}).items():
        bound.setdefault(var, extent)
    out: dict[str, tuple[str, ...]] = {}
    for p in kernel.params:
        if not p.is_pointer:
            continue
        best: tuple[str, ...] = ()
        for m in re.finditer(rf"\b{re.escape(p.name)}\s*\[([^\[\]]+)\]", body):
            names = [n for n in _IDENT.findall(m.group(1)) if n not in scalars and n not in _BUILTINS]
            if not names or any(n not in bound for n in names):
                continue
            factors = tuple(dict.fromkeys(bound[n] for n in names))
            if len(factors) > len(best):
                best = factors
        if best:
            out[p.name] = best
    return out
