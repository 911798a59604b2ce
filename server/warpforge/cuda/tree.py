"""The two things every tree-sitter pass needs: a node's text and a walk over a subtree.

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
