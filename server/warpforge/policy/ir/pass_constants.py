"""File-level integer constants read in a kernel replaced by their values.

Why: ``const int N = 1 << 10;`` at file scope, then ``a[row * N + k]`` in the kernel, is how much teaching code
sizes its matrices. The structural rules accept a bound or a stride made of the kernel's parameters and
literals, and decline a name declared outside the kernel ("the rewrite does not follow it"). A constant with
a constant initializer is its value everywhere it is visible, so the canonical form spells it as the value.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...cuda.tree import walk
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
