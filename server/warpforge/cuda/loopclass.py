"""Does a kernel have "a serial loop over global memory or a reduction"? The denominator of issue 27.

Why: an elementwise kernel (one thread, one element, no loop) has no structural rewrite worth proposing
beyond vector loads, so a proposal rate over every kernel understates what the rules miss where it matters.
The issue's target is stated over the kernels that do have work a structural rewrite could re-map: a loop
that walks global memory inside one thread (or inside one block), or a reduction (atomics, shuffles, a
shared-memory tree). This is a syntactic check on the tree-sitter tree of the kernel's definition (its
canonical form when ``cuda.normalize`` could expand the file's macros), deliberately simple and stated:

* a ``for`` / ``while`` / ``do`` loop counts when its body reads or writes through a subscript or a
  dereference of a pointer (a parameter, or a local pointer), and the loop is not a grid-stride loop (its
  header names ``gridDim``): a grid-stride loop is one thread per element, spelled as a loop;
* a reduction is an ``atomic*`` call, a ``__shfl*`` call, or a ``__syncthreads()`` inside a loop whose body
  touches a ``__shared__`` array.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from .parser import parse_tree

_LOOPS = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})


@dataclass(frozen=True)
class LoopClass:
    """What the classifier found; ``counts`` is the issue's denominator test."""

    serial_loop: bool
    reduction: bool
    grid_stride: bool
    why: str
    #: 1-based line of the definition where the first serial loop (else the first reduction site) starts; 0: none
    line: int = 0

    @property
    def counts(self) -> bool:
        return self.serial_loop or self.reduction


def _text(n: Node, data: bytes) -> str:
    return data[n.start_byte:n.end_byte].decode("utf-8", errors="replace")


def _walk(n: Node) -> list[Node]:
    out: list[Node] = []
    stack = [n]
    while stack:
        cur = stack.pop()
        out.append(cur)
        stack.extend(reversed(cur.children))
    return out


def _header(loop: Node, data: bytes) -> str:
    """The loop's header text (condition, update, init), without its body."""
    body = loop.child_by_field_name("body")
    if loop.type == "do_statement":
        cond = loop.child_by_field_name("condition")
        return _text(cond, data) if cond is not None else ""
    end = body.start_byte if body is not None else loop.end_byte
    return data[loop.start_byte:end].decode("utf-8", errors="replace")


def _pointer_names(fn: Node, data: bytes) -> tuple[set[str], set[str]]:
    """Names declared as pointers or arrays (parameters and locals), and ``__shared__`` arrays."""
    ptrs: set[str] = set()
    shared: set[str] = set()
    for n in _walk(fn):
        if n.type in ("pointer_declarator", "array_declarator"):
            d: Node | None = n
            while d is not None and d.type in ("pointer_declarator", "array_declarator", "init_declarator"):
                d = d.child_by_field_name("declarator")
            if d is not None and d.type == "identifier":
                ptrs.add(_text(d, data))
                decl = n.parent
                while decl is not None and decl.type not in ("declaration", "parameter_declaration"):
                    decl = decl.parent
                if decl is not None and "__shared__" in _text(decl, data).split("=")[0]:
                    shared.add(_text(d, data))
    return ptrs, shared


def _memory_touches(body: Node, data: bytes, ptrs: set[str]) -> set[str]:
    """Pointer names read or written through ``p[i]`` or ``*p`` inside ``body``."""
    out: set[str] = set()
    for n in _walk(body):
        base: Node | None = None
        deref = n.type == "pointer_expression" and bool(n.children) and _text(n.children[0], data) == "*"
        if n.type == "subscript_expression" or deref:
            base = n.child_by_field_name("argument")
        while base is not None and base.type in ("subscript_expression", "parenthesized_expression",
                                                 "binary_expression", "field_expression"):
            base = base.child_by_field_name("argument") or base.child_by_field_name("left") or (
                base.named_children[0] if base.named_children else None)
        if base is not None and base.type == "identifier" and _text(base, data) in ptrs:
            out.add(_text(base, data))
    return out


def classify(definition: str) -> LoopClass:
    """Classify one kernel definition (the text from ``__global__`` or its template head to the brace)."""
    data = definition.encode("utf-8")
    tree = parse_tree(data)
    fn = next((n for n in _walk(tree.root_node) if n.type == "function_definition"), None)
    if fn is None:
        return LoopClass(False, False, False, "no function definition parsed")
    ptrs, shared = _pointer_names(fn, data)
    body = fn.child_by_field_name("body")
    if body is None:
        return LoopClass(False, False, False, "no body")
    serial = grid_stride = reduction = False
    why: list[str] = []
    loop_line = red_line = 0
    for n in _walk(body):
        if n.type == "call_expression":
            fname = n.child_by_field_name("function")
            name = _text(fname, data) if fname is not None else ""
            if (name.startswith("atomic") and not reduction) or (name.startswith("__shfl") and not reduction):
                reduction = True
                red_line = n.start_point[0] + 1
                why.append(f"{name} call")
        if n.type not in _LOOPS:
            continue
        head = _header(n, data)
        lbody = n.child_by_field_name("body")
        if lbody is None:
            continue
        touched = _memory_touches(lbody, data, ptrs)
        if "gridDim" in head:
            grid_stride = True
        elif touched - shared and not serial:
            serial = True
            loop_line = n.start_point[0] + 1
            why.append(f"loop at line {n.start_point[0] + 1} over {', '.join(sorted(touched - shared))}")
        if not reduction and touched & shared and "__syncthreads" in _text(lbody, data):
            reduction = True
            red_line = n.start_point[0] + 1
            why.append(f"shared-memory loop with barriers at line {n.start_point[0] + 1}")
    return LoopClass(serial, reduction, grid_stride, "; ".join(why) or "no serial loop over memory, no reduction",
                     loop_line or red_line)
