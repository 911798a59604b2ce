"""What every tree-sitter pass needs: a node's text, a walk over a subtree, and whether a declarator
declares a function.

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
