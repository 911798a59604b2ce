"""Run a kernel's straight-line index arithmetic for one thread, with numbers: which element it stores and reads.

Why: the affine summary cannot read an index built by a chain of ``/`` and ``%`` with a reassigned local (llm.c's
``rest = rest % (N*d)``). Whether such a kernel is a transpose is still a plain question — do neighbouring threads
store neighbouring elements, and read them? — that evaluating the index arithmetic for a few threads at the spec's
sizes answers. It only words a decline (``smem_transpose``); no rewrite relies on it.

Evaluated: integer literals, identifiers, ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` members, casts,
parentheses, ``+ - * / %`` (C's truncating division), comparisons, ``&& || !``, ``?:``; statements: declarations,
assignments (``=`` and compound), early exits ``if (C) return;``, guards ``if (C) {...}`` and blocks. Anything else
(a call, a read of memory, a loop) stops the run: the answer is then None.
"""

from __future__ import annotations

from collections.abc import Mapping

from tree_sitter import Node

from ...cuda.tree import node_text, unparen
from .passes import Kernel, statements


class _Stop(Exception):
    pass


def _value(n: Node, env: Mapping[str, int], data: bytes) -> int:
    n = unparen(n)
    t = n.type
    text = node_text(n, data)
    if t == "number_literal":
        try:
            return int(text.rstrip("uUlL"), 0)
        except ValueError:
            raise _Stop from None
    if t in ("identifier", "field_expression"):
        if text.replace(" ", "") in env:
            return env[text.replace(" ", "")]
        raise _Stop
    if t == "cast_expression":
        v = n.child_by_field_name("value")
        if v is None:
            raise _Stop
        return _value(v, env, data)
    if t == "condition_clause" and n.named_child_count == 1:
        return _value(n.named_children[0], env, data)
    if t == "unary_expression":
        op, arg = n.child_by_field_name("operator"), n.child_by_field_name("argument")
        if op is None or arg is None:
            raise _Stop
        a = _value(arg, env, data)
        unary = {"-": -a, "+": a, "!": int(not a)}
        if node_text(op, data) not in unary:
            raise _Stop
        return unary[node_text(op, data)]
    if t == "conditional_expression":
        cc, ca, cb = (n.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
        if cc is None or ca is None or cb is None:
            raise _Stop
        return _value(ca, env, data) if _value(cc, env, data) else _value(cb, env, data)
    if t == "binary_expression":
        op_n, a_n, b_n = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op_n is None or a_n is None or b_n is None:
            raise _Stop
        bop = node_text(op_n, data)
        if bop == "&&":
            return int(bool(_value(a_n, env, data)) and bool(_value(b_n, env, data)))
        if bop == "||":
            return int(bool(_value(a_n, env, data)) or bool(_value(b_n, env, data)))
        return _binary(bop, _value(a_n, env, data), _value(b_n, env, data))
    raise _Stop


def _binary(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise _Stop
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "/" else a - q * b
    table = {"+": a + b, "-": a - b, "*": a * b, "<": int(a < b), "<=": int(a <= b), ">": int(a > b),
             ">=": int(a >= b), "==": int(a == b), "!=": int(a != b), "<<": a << b if 0 <= b < 63 else 0,
             ">>": a >> b if 0 <= b < 63 else 0, "&": a & b, "|": a | b}
    if op not in table:
        raise _Stop
    return table[op]


def _run(sts: list[Node], env: dict[str, int], data: bytes, stop_at: Node) -> bool:
    """Run statements until ``stop_at`` is reached (True) or the thread leaves (False)."""
    for st in sts:
        if st.start_byte <= stop_at.start_byte < st.end_byte and st.type in ("if_statement", "compound_statement"):
            if st.type == "if_statement":
                c = st.child_by_field_name("condition")
                if c is None or not _value(c, env, data):
                    return False
                return _run(statements(st.child_by_field_name("consequence")), env, data, stop_at)
            return _run(statements(st), env, data, stop_at)
        if st.id == stop_at.id or st.start_byte <= stop_at.start_byte < st.end_byte:
            return True
        if st.type == "declaration":
            for d in st.children_by_field_name("declarator"):
                if d.type == "init_declarator":
                    nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                    if nm is not None and v is not None:
                        env[node_text(nm, data)] = _value(v, env, data)
        elif st.type == "expression_statement" and st.named_child_count == 1 \
                and st.named_children[0].type == "assignment_expression":
            a = st.named_children[0]
            left, op, right = (a.child_by_field_name(f) for f in ("left", "operator", "right"))
            if left is None or op is None or right is None or unparen(left).type != "identifier":
                raise _Stop
            name, o = node_text(unparen(left), data), node_text(op, data)
            val = _value(right, env, data)
            env[name] = val if o == "=" else _binary(o[:-1], env.get(name, 0), val)
        elif st.type == "if_statement":
            c = st.child_by_field_name("condition")
            inner = statements(st.child_by_field_name("consequence"))
            if c is None or not (len(inner) == 1 and inner[0].type == "return_statement"):
                raise _Stop
            if _value(c, env, data):
                return False
        elif st.type != "comment":
            raise _Stop
    return False


def indices(k: Kernel, stmt: Node, exprs: list[Node], env: Mapping[str, int]) -> list[int] | None:
    """The values of ``exprs`` (index expressions inside the statement ``stmt``) for the thread ``env`` describes
    (``threadIdx.x`` ... and the scalar parameters), or None when the thread leaves first or the arithmetic is
    not of the kind evaluated here."""
    e = dict(env)
    try:
        if not _run(statements(k.body), e, k.data, stmt):
            return None
        return [_value(x, e, k.data) for x in exprs]
    except (_Stop, RecursionError):
        return None
