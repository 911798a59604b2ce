"""What every tree-sitter pass needs: a node's text, a walk over a subtree, looking through parentheses and
casts, which plain variables a subtree writes, how an element is used (loaded, stored), and whether a
declarator declares a function.

Every layer that reads syntax (the parser, spec inference, the analyzers, the rules) walks trees the same
way, so the walk lives here once: iterative (kernels nest deeply enough to hit Python's recursion limit),
pre-order in document order (so "the first X" means the first in the file), with an optional filter on
node types and an optional cut that keeps a subtree's insides out of the walk.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from tree_sitter import Node


def node_text(node: Node, data: bytes) -> str:
    """The source text of ``node`` in ``data``, the bytes it was parsed from (bad UTF-8 replaced, never raised)."""
    return data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")


def walk(
    node: Node,
    types: Collection[str] | None = None,
    *,
    cut: Callable[[Node], bool] | None = None,
) -> Iterator[Node]:
    """Every node of the subtree at ``node``, pre-order in document order.

    ``types`` keeps only nodes of those types (the walk still goes through the others); ``cut`` stops the
    walk from entering a node's children when it returns True (the node itself is still visited).
    """
    stack = [node]
    while stack:
        n = stack.pop()
        if types is None or n.type in types:
            yield n
        if cut is None or not cut(n):
            stack.extend(reversed(n.children))


def unparen(node: Node) -> Node:
    """Look through parentheses: ``((a + b))`` -> the ``a + b`` node (a comment inside keeps them)."""
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        inner = node.named_children[0]
        if inner.type == "comment":
            break
        node = inner
    return node


def member(node: Node, data: bytes) -> tuple[Node, str, str] | None:
    """``obj.field`` behind parentheses and casts: the ``field_expression``, the object's and the field's text.

    ``(size_t)blockIdx.x`` is still ``blockIdx.x``: a cast changes the width of the arithmetic, not which
    thread or block the value names, so the canonical form and the rules read coordinates through it.
    """
    node = unparen(node)
    while node.type == "cast_expression":
        inner = node.child_by_field_name("value")
        if inner is None:
            return None
        node = unparen(inner)
    if node.type != "field_expression":
        return None
    arg = node.child_by_field_name("argument")
    fld = node.child_by_field_name("field")
    if arg is None or fld is None:
        return None
    return node, node_text(arg, data), node_text(fld, data)


def misparsed_assignment(n: Node, data: bytes) -> bool:
    """Whether an ``assignment_expression`` is tree-sitter's misreading of a comparison: in ``(a >= 0 && a < h &&
    b >= 0 && b < w)`` the grammar may take ``a < h && b >`` for a template's arguments and leave ``= 0 && ...``
    as an assignment. A C++ lexer reads ``>=`` as one token wherever the two characters touch, so an ``=``
    right after a ``>`` is never an assignment."""
    op = n.child_by_field_name("operator")
    return n.type == "assignment_expression" and op is not None and data[op.start_byte - 1:op.start_byte] == b">" \
        and data[op.start_byte:op.end_byte] == b"="


def plain_assignment(st: Node, data: bytes) -> tuple[Node, Node] | None:
    """(left, right) of a statement that is one plain assignment ``left = right;`` (not ``+=``, not a comma
    expression, not a comparison tree-sitter misread); None for any other statement. The passes that move or
    drop a store (``block_items``' ``sh[tid] = acc;``, ``register_accumulator``'s ``y[i] = 0;``, the remaps'
    masked-item store) all ask this first."""
    if st.type != "expression_statement" or st.named_child_count != 1:
        return None
    a = st.named_children[0]
    left, op, right = (a.child_by_field_name(f) for f in ("left", "operator", "right"))
    if a.type != "assignment_expression" or left is None or op is None or right is None \
            or node_text(op, data) != "=" or misparsed_assignment(a, data):
        return None
    return left, right


def written_names(node: Node, data: bytes) -> set[str]:
    """Plain variables assigned, incremented or whose address is taken anywhere in a subtree: what a
    transformation must not assume constant."""
    out: set[str] = set()
    for n in walk(node, ("assignment_expression", "update_expression", "pointer_expression")):
        if n.type == "assignment_expression":
            if misparsed_assignment(n, data):
                continue
            target = n.child_by_field_name("left")
        elif n.type == "update_expression" or node_text(n, data).lstrip().startswith("&"):
            target = n.child_by_field_name("argument")
        else:
            continue
        if target is not None and unparen(target).type == "identifier":
            out.add(node_text(unparen(target), data))
    return out


def subscript_index(node: Node) -> Node | None:
    """The index of ``a[i]`` (None for ``a[i, j]``, which names no one element the analyses could follow)."""
    idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
    if idx is None:
        return None
    if idx.type == "subscript_argument_list":
        named = idx.named_children
        return named[0] if len(named) == 1 else None
    return idx


def element_use(node: Node) -> tuple[bool, bool]:
    """(loaded, stored) for an element lvalue ``x[i]`` / ``*p`` from where it stands: the left of ``=`` is
    stored, of ``+=`` or ``++`` loaded and stored, ``&x[i]`` neither (an address, not an access), else loaded.

    Parentheses and a member access on the element (``x[i].y = v``) are looked through."""
    cur = node
    parent = cur.parent
    while parent is not None and (parent.type == "parenthesized_expression" or (
            parent.type == "field_expression" and parent.child_by_field_name("argument") == cur)):
        cur, parent = parent, parent.parent
    if parent is None:
        return True, False
    if parent.type == "assignment_expression" and parent.child_by_field_name("left") == cur:
        op = parent.child_by_field_name("operator")
        return op is not None and op.type != "=", True
    if parent.type == "update_expression":
        return True, True
    if parent.type == "pointer_expression":
        op = parent.child_by_field_name("operator")
        if op is not None and op.type == "&":
            return False, False
    return True, False


def split_init(declarator: Node) -> tuple[Node, Node | None]:
    """``x = v`` (an ``init_declarator``) -> ``(x, v)``; a declarator without an initializer -> ``(it, None)``."""
    if declarator.type != "init_declarator":
        return declarator, None
    return declarator.child_by_field_name("declarator") or declarator, declarator.child_by_field_name("value")


def declares_function(declarator: Node) -> bool:
    """Does this declarator (possibly wrapped in pointer, reference or array declarators) declare a function?

    ``int f(int)`` and ``int* f(int)`` do; ``int x = g(1)`` does not: a variable whose initializer calls a
    function is a variable (whose initializer runs wherever the variable lives).
    """
    cur: Node | None = declarator
    while cur is not None:
        if cur.type == "function_declarator":
            return True
        cur = cur.child_by_field_name("declarator")
    return False
