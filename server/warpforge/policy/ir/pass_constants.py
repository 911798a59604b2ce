"""File-level integer constants read in a kernel replaced by their values.

Why: ``const int N = 1 << 10;`` at file scope, then ``a[row * N + k]`` in the kernel, is how much teaching code
sizes its matrices. The structural rules accept a bound or a stride made of the kernel's parameters and
literals, and decline a name declared outside the kernel ("the rewrite does not follow it"). A constant with
a constant initializer is its value everywhere it is visible, so the canonical form spells it as the value.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...cuda.parser import parse_tree
from ...cuda.tree import node_text, walk
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .passes import Changed, Kernel, PassEnv, Result, declared_names, register, splice
from .summary import params_of


@register("file_constants", "a file-level `const` integer with a constant initializer, read in the kernel and "
                            "not shadowed by a parameter or a local")
def file_constants(k: Kernel, env: PassEnv) -> Result:
    if not env.constants:
        return None
    params, _ = params_of(k)
    shadowed = declared_names(k.body, k.data) | {n for n, _, _, _ in params}
    known = {n: v for n, v in env.constants.items() if n not in shadowed and _constant(v, env.constants)}
    if not known:
        return None
    edits: list[tuple[int, int, str]] = []
    for n in _identifiers(k):
        name = k.t(n)
        if name not in known:
            continue
        v = known[name].strip()
        edits.append((n.start_byte, n.end_byte, v if re.fullmatch(r"\w+", v) else f"({v})"))
    if not edits:
        return None
    names = sorted({k.t(n) for n in _identifiers(k) if k.t(n) in known})
    return Changed(splice(k.data, edits), f"file-level constants replaced by their values ({', '.join(names)})")


def _identifiers(k: Kernel) -> list[Node]:
    out: list[Node] = []
    for n in walk(k.body, ("identifier",)):
        p = n.parent
        if p is not None and p.type in ("field_expression", "call_expression") and p.child_by_field_name(
                "field" if p.type == "field_expression" else "function") == n:
            continue
        out.append(n)
    return out


def _constant(value: str, constants: dict[str, str], depth: int = 0) -> bool:
    """Whether ``value`` is a constant expression of literals and other such constants."""
    if depth > 8:
        return False
    try:
        names = parse_expr(value).names()
    except ExprError:
        return False
    return all(n in constants and _constant(constants[n], constants, depth + 1) for n in names)


_INT_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "size_t", "unsigned long",
                        "unsigned long long", "int64_t", "int32_t", "uint32_t", "uint64_t"})


def top_level_constants(text: str) -> dict[str, str]:
    """The file's top-level integer constants (``const int N = 1 << 10;``, ``constexpr``): name -> value text.

    Why: a kernel that reads a file-level constant (``for (i = 0; i < N; i += T)``) has its trip count there;
    ``unstage_tiles`` evaluates it to check that the tile loop covers whole tiles."""
    data = text.encode("utf-8")
    tree = parse_tree(data)
    out: dict[str, str] = {}
    for d in tree.root_node.named_children:
        if d.type != "declaration":
            continue
        quals = {node_text(c, data) for c in d.children if c.type == "type_qualifier"}
        t = d.child_by_field_name("type")
        if not quals & {"const", "constexpr"} or t is None or " ".join(node_text(t, data).split()) not in _INT_TYPES:
            continue
        for i in d.children_by_field_name("declarator"):
            nm, v = i.child_by_field_name("declarator"), i.child_by_field_name("value")
            if i.type == "init_declarator" and nm is not None and v is not None and nm.type == "identifier":
                out[node_text(nm, data)] = node_text(v, data)
    return out
