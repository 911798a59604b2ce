"""Declarations, ``for`` headers and bounds as the structural rules read them: a single declarator, a
loop's variable/condition/update/body, the bound a guard or loop condition puts on a variable.

Why a module of its own: every rule that splits, tiles or strides a loop needs the same reading of
``for (int j = a; j < b; j++)`` and of ``if (i >= n) return;``, and must decline on the same variants.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ....cuda.tree import node_text
from ....cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ....cuda.tree import written_names as written_names  # likewise
from .syntax import binary_parts, identifiers, statements


@dataclass(frozen=True)
class Decl:
    """A declaration of one variable: ``[const] TYPE [*]NAME = VALUE;``."""

    type: str
    name: str
    value: Node | None
    pointer: bool
    const: bool
    shared: bool
    node: Node


def single_decl(node: Node, data: bytes) -> Decl | None:
    """The one variable a ``declaration`` statement declares (None for several, arrays or references)."""
    if node.type != "declaration":
        return None
    decls = node.children_by_field_name("declarator")
    tnode = node.child_by_field_name("type")
    if len(decls) != 1 or tnode is None:
        return None
    d = decls[0]
    value: Node | None = None
    if d.type == "init_declarator":
        value = d.child_by_field_name("value")
        d2 = d.child_by_field_name("declarator")
        if d2 is None:
            return None
        d = d2
    pointer = False
    if d.type == "pointer_declarator":
        pointer = True
        inner = d.child_by_field_name("declarator")
        if inner is None or inner.type != "identifier":
            return None
        d = inner
    if d.type != "identifier":
        return None
    quals = {node_text(c, data) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
    if value is not None and value.type in ("initializer_list", "argument_list"):
        return None
    return Decl(node_text(tnode, data), node_text(d, data), value, pointer, "const" in quals,
                "__shared__" in quals, node)


@dataclass(frozen=True)
class ForParts:
    """``for (T var = start; cond; update) body``: a loop that declares its one variable with a start value."""

    var: Decl
    cond: Node
    update: Node
    body: Node


def for_parts(node: Node, data: bytes) -> ForParts | None:
    """The parts of a counted ``for`` loop, or None: every part present and the initializer declaring one
    variable (not a pointer) with a start value. The rules that split, tile or fold a loop read where it
    starts, stops and steps from these; a loop missing any of them is not one they can rewrite."""
    if node.type != "for_statement":
        return None
    init, cond, upd, body = (node.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None:
        return None
    d = single_decl(init, data)
    if d is None or d.pointer or d.value is None:
        return None
    return ForParts(d, cond, upd, body)


@dataclass(frozen=True)
class Bound:
    """``var < limit`` (``inclusive``: ``var <= limit``) as read from a condition."""

    limit: Node
    inclusive: bool


def sole_assignment(block: Node | None, data: bytes) -> tuple[Node, str, Node] | None:
    """``(target, operator text, value)`` when a block (or a lone statement) is exactly one assignment
    statement (``=`` or compound), else None: the loop bodies the reduction and tiling rules rewrite."""
    sts = statements(block)
    if len(sts) != 1 or sts[0].type != "expression_statement" or sts[0].named_child_count != 1:
        return None
    e = sts[0].named_children[0]
    if e.type != "assignment_expression":
        return None
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None:
        return None
    return left, node_text(op, data), right


def upper_bound(cond: Node, data: bytes, var: str) -> Bound | None:
    """``var < E`` / ``E > var`` / ``var <= E`` / ``E >= var``, E not mentioning ``var``."""
    b = binary_parts(cond, data)
    if b is None:
        return None
    left, op, right = b
    lv, rv = unparen(left), unparen(right)
    if lv.type == "identifier" and node_text(lv, data) == var and op in ("<", "<="):
        lim, inc = right, op == "<="
    elif rv.type == "identifier" and node_text(rv, data) == var and op in (">", ">="):
        lim, inc = left, op == ">="
    else:
        return None
    if var in identifiers(lim, data):
        return None
    return Bound(lim, inc)


def failing_bound(cond: Node, data: bytes, var: str) -> Bound | None:
    """The negation form of a guard that leaves: ``var >= E`` / ``E <= var`` / ``var > E`` / ``E < var``."""
    b = binary_parts(cond, data)
    if b is None:
        return None
    left, op, right = b
    lv, rv = unparen(left), unparen(right)
    if lv.type == "identifier" and node_text(lv, data) == var and op in (">=", ">"):
        lim, inc = right, op == ">"
    elif rv.type == "identifier" and node_text(rv, data) == var and op in ("<=", "<"):
        lim, inc = left, op == "<"
    else:
        return None
    if var in identifiers(lim, data):
        return None
    return Bound(lim, inc)


def bound_text(var: str, b: Bound, data: bytes) -> str:
    return f"{var} {'<=' if b.inclusive else '<'} {node_text(b.limit, data)}"
