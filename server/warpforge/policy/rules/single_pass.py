"""single_pass: fuse a running maximum and the sum of exponentials shifted by it into one loop (online softmax).

Why it helps: softmax, log-softmax, log-sum-exp and cross-entropy compute, per row, ``m = max_j f(j)`` in one
pass and ``s = sum_j exp(f(j) - m)`` in a second. Both passes read the whole row; the second cannot start before
the first ends. Carried together as a pair, rescaling the sum whenever the maximum grows
(``if (v > m) { s *= exp(m - v); m = v; } if (v != -INFINITY) s += exp(v - m)``), they need one
pass: a row is read once less.
The sum is rounded differently (each rescaling multiplies it by an ``exp`` of a non-positive number), so the
family is proposed on its own and the evaluator's tolerance check decides whether the numerics are acceptable.

What the analysis requires, in any statement list of the body (the canonical form, so guarded bodies, bumped
pointers, macros and typedefs are seen through):

- loop 1, a counted loop ``for (T j = a; j < n; j++)`` whose body is exactly one running-maximum update of a
  scalar ``m``: ``m = fmaxf(m, E)`` (``fmax``, ``max``, either argument order) or ``if (E > m) m = E;``
  (``m < E``); E reads neither ``m`` nor anything the loops assign, and assigns nothing;
- then only declarations that do not read ``m`` (the sum's ``T s = 0;``): nothing else reads the maximum
  between the loops;
- loop 2, immediately after, over the same range (same bound and step; the same start, or loop 1 starting at
  ``1`` after ``m`` was initialized with ``E`` at ``j = 0`` while loop 2 starts at ``0``), whose body is exactly
  ``s += EXP(E' - m)`` (or ``s = s + ...``) with ``EXP`` one of ``expf``, ``__expf``, ``exp`` and ``E'`` the same
  expression as ``E`` once loop variables are renamed;
- ``m`` and ``s`` floating point (``float``/``double`` as instantiated), ``s`` declared with the value ``0``
  and not written between the loops.

It declines otherwise: another maximum or another expression in the exponent, the maximum read between the
loops, loop bodies that write memory or carry a second value, integer accumulators, different ranges.

The rewrite: the declarations between the loops move above the fused loop, which runs loop 2's range with
``v = E``, the compare-and-rescale and the accumulation; statements after the loops (the normalized write,
``m + log(s)``) are unchanged. The maximum is exactly the original's (the compare-and-assign picks the same
element; ``fmaxf`` and ``>`` agree except when ``m`` starts as NaN, where the sum is NaN either way). The
sum differs by rounding. A ``-INFINITY`` element (a masked score) is skipped in the sum: the two passes add
exactly 0 for it, while the fused loop could meet it with ``m = -INFINITY`` still (a row that starts masked)
and add ``exp(-inf - -inf)`` = NaN. Random test inputs never hold -INFINITY, so this must be exact by
construction rather than left to verification; only a row masked entirely differs (a sum of 0 instead of NaN).

Composition: ``warp_per_row`` recognizes the fused pair (``_online_pair`` there) and gives each lane its own
``(m, s)`` partial, merged across lanes with the same rescaling, so the search reaches a warp per row reading
the row twice instead of three times (``single_pass`` then ``warp_per_row``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    condition_of,
    for_parts,
    identifiers,
    is_ident,
    is_zero_literal,
    render,
    resolved_type,
    single_decl,
    statements,
    unparen,
    upper_bound,
)
from ._structural_rule import Launch, StructuralRule
from ._util import kernel_body
from ._why import Stage, declined
from .base import RuleContext

PREFIX = "wfs_"
MAX_FUNCS = frozenset({"fmaxf", "fmax", "max"})
EXP_FUNCS = frozenset({"expf", "__expf", "exp"})
FLOAT_TYPES = frozenset({"float", "double"})


@dataclass(frozen=True)
class _Pair:
    """One max loop and the exp-sum loop after it."""

    first: Node
    second: Node
    between: tuple[Node, ...]
    m: str
    s: str
    type: str
    exp: str
    #: the shifted expression, as loop 2 writes it (its own loop variable)
    value: str


def _unit_step(upd: Node, var: str, data: bytes) -> bool:
    return node_text(unparen(upd), data).replace(" ", "") in (f"{var}++", f"++{var}", f"{var}+=1", f"{var}={var}+1")


def _canon(text: str) -> str:
    """Expression text without whitespace or parentheses around single names and literals."""
    t = re.sub(r"\s+", "", text)
    prev = None
    while prev != t:
        prev, t = t, re.sub(r"\(([A-Za-z_0-9.]+)\)", r"\1", t)
    return t


def _renamed(node: Node, data: bytes, old: str, new: str) -> str:
    return _canon(render(node, data, lambda n: new if n.type == "identifier" and node_text(n, data) == old
                         else None))


def _pure(node: Node) -> bool:
    return not any(n.type in ("assignment_expression", "update_expression") for n in walk(node))


def _only(body: Node) -> Node | None:
    sts = statements(body)
    if len(sts) != 1:
        return None
    return sts[0]


def _max_update(st: Node, data: bytes) -> tuple[str, Node] | None:
    """``(m, E)`` of ``m = fmaxf(m, E)`` / ``m = fmaxf(E, m)`` / ``if (E > m) m = E;`` / ``if (m < E) m = E;``."""
    if st.type == "expression_statement" and st.named_child_count == 1:
        e = st.named_children[0]
        if e.type != "assignment_expression" or node_text(e.child_by_field_name("operator") or e, data) != "=":
            return None
        left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
        if left is None or right is None or unparen(left).type != "identifier":
            return None
        m = node_text(unparen(left), data)
        call = unparen(right)
        fn, args = call.child_by_field_name("function"), call.child_by_field_name("arguments")
        if call.type != "call_expression" or fn is None or args is None or node_text(fn, data) not in MAX_FUNCS:
            return None
        a = [c for c in args.named_children if c.type != "comment"]
        if len(a) != 2:
            return None
        if is_ident(unparen(a[0]), data, m):
            return m, a[1]
        if is_ident(unparen(a[1]), data, m):
            return m, a[0]
        return None
    if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
        return None
    cons = _only(st.child_by_field_name("consequence") or st)
    val = condition_of(st)
    if val is None or cons is None or cons.type != "expression_statement" or cons.named_child_count != 1:
        return None
    val = unparen(val)
    asg = cons.named_children[0]
    if val.type != "binary_expression" or asg.type != "assignment_expression":
        return None
    op = node_text(val.child_by_field_name("operator") or val, data)
    lhs, rhs = val.child_by_field_name("left"), val.child_by_field_name("right")
    al, ar = asg.child_by_field_name("left"), asg.child_by_field_name("right")
    if lhs is None or rhs is None or al is None or ar is None or unparen(al).type != "identifier" \
            or node_text(asg.child_by_field_name("operator") or asg, data) != "=":
        return None
    m = node_text(unparen(al), data)
    if op == ">" and is_ident(unparen(rhs), data, m):
        e = lhs
    elif op == "<" and is_ident(unparen(lhs), data, m):
        e = rhs
    else:
        return None
    if _canon(node_text(e, data)) != _canon(node_text(ar, data)):
        return None
    return m, e


def _exp_sum(st: Node, data: bytes, m: str) -> tuple[str, str, Node] | None:
    """``(s, EXP, E)`` of ``s += EXP(E - m)`` / ``s = s + EXP(E - m)``."""
    if st.type != "expression_statement" or st.named_child_count != 1:
        return None
    e = st.named_children[0]
    if e.type != "assignment_expression":
        return None
    left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
    op = node_text(e.child_by_field_name("operator") or e, data)
    if left is None or right is None or unparen(left).type != "identifier":
        return None
    s = node_text(unparen(left), data)
    r = unparen(right)
    if op == "=":
        if r.type != "binary_expression" or node_text(r.child_by_field_name("operator") or r, data) != "+":
            return None
        a, b = r.child_by_field_name("left"), r.child_by_field_name("right")
        if a is None or b is None:
            return None
        if is_ident(unparen(a), data, s):
            r = unparen(b)
        elif is_ident(unparen(b), data, s):
            r = unparen(a)
        else:
            return None
    elif op != "+=":
        return None
    fn, args = r.child_by_field_name("function"), r.child_by_field_name("arguments")
    if r.type != "call_expression" or fn is None or args is None or node_text(fn, data) not in EXP_FUNCS:
        return None
    a2 = [c for c in args.named_children if c.type != "comment"]
    if len(a2) != 1:
        return None
    d = unparen(a2[0])
    if d.type != "binary_expression" or node_text(d.child_by_field_name("operator") or d, data) != "-":
        return None
    x, y = d.child_by_field_name("left"), d.child_by_field_name("right")
    if x is None or y is None or not is_ident(unparen(y), data, m):
        return None
    return s, node_text(fn, data), x


def _decl_before(sts: list[Node], upto: int, name: str, data: bytes) -> tuple[Node, str, Node | None] | None:
    """The declaration of ``name`` in ``sts[:upto]`` (node, type, value), if it is there."""
    for st in sts[:upto]:
        d = single_decl(st, data)
        if d is not None and d.name == name and not d.pointer:
            return st, d.type, d.value
    return None


def _written(node: Node, data: bytes) -> set[str]:
    out: set[str] = set()
    for n in walk(node):
        target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
            n.child_by_field_name("argument") if n.type == "update_expression" else None
        if target is not None and unparen(target).type == "identifier":
            out.add(node_text(unparen(target), data))
    return out


def _pair_at(ctx: RuleContext, sts: list[Node], i: int, data: bytes) -> _Pair | None:
    f1 = for_parts(sts[i], data)
    if f1 is None or not _unit_step(f1.update, f1.var.name, data):
        return None
    j1 = f1.var.name
    b1 = upper_bound(f1.cond, data, j1)
    one = _only(f1.body)
    mu = _max_update(one, data) if one is not None else None
    if b1 is None or mu is None:
        return None
    m, e1 = mu
    k = i + 1
    between: list[Node] = []
    while k < len(sts) and sts[k].type == "declaration":
        between.append(sts[k])
        k += 1
    next_loop = f"the loop after the max over `{j1}` is not `for (...) s += expf(x[j] - {m});` over the same range"
    if k >= len(sts) or any(m in identifiers(b, data) for b in between):
        return declined(f"the running max `{m}` is not followed by a loop summing `expf(x[j] - {m})`", sts[i],
                        Stage.SHAPE)
    f2 = for_parts(sts[k], data)
    if f2 is None or not _unit_step(f2.update, f2.var.name, data):
        return declined(next_loop, sts[k], Stage.SHAPE)
    j2 = f2.var.name
    b2 = upper_bound(f2.cond, data, j2)
    two = _only(f2.body)
    es = _exp_sum(two, data, m) if two is not None else None
    if b2 is None or es is None or b1.inclusive != b2.inclusive:
        return declined(next_loop, sts[k], Stage.SHAPE)
    s, exp, e2 = es
    if _canon(node_text(b1.limit, data)) != _canon(node_text(b2.limit, data)):
        return declined("the max loop and the exp-sum loop run to different bounds", sts[k], Stage.SHAPE)
    if _renamed(e1, data, j1, PREFIX + "j") != _renamed(e2, data, j2, PREFIX + "j"):
        return declined("the max and the exp-sum read different elements", sts[k], Stage.SHAPE)
    names = identifiers(e1, data)
    if m in names or s in names or s == m or not _pure(e1) or not _pure(f1.cond) or not _pure(f2.cond):
        return declined("the element read or a loop condition has a side effect or reads the max/sum", sts[i],
                        Stage.LEGALITY)
    v1, v2 = f1.var.value, f2.var.value
    assert v1 is not None and v2 is not None  # for_parts requires start values
    if {m, s} & (identifiers(f1.cond, data) | identifiers(f2.cond, data) | identifiers(v1, data)
                 | identifiers(v2, data)):
        return declined("a loop's range depends on the max or the sum", sts[i], Stage.LEGALITY)
    md = _decl_before(sts, i, m, data)
    sd = _decl_before(sts, k, s, data)
    if md is None or sd is None or sd[2] is None or not is_zero_literal(sd[2], data):
        return declined(f"`{m}` and `{s}` are not locals declared before their loops, the sum starting at 0",
                        sts[i], Stage.SHAPE)
    if any(s in _written(x, data) for x in sts[sts.index(sd[0]) + 1 : k] if x.id != sts[i].id):
        return declined(f"the sum `{s}` is changed between its declaration and its loop", sts[k], Stage.LEGALITY)
    if any(m in _written(x, data) for x in sts[sts.index(md[0]) + 1 : i]):
        return declined(f"the max `{m}` is changed between its declaration and its loop", sts[i], Stage.LEGALITY)
    if resolved_type(ctx, md[1]) not in FLOAT_TYPES or resolved_type(ctx, sd[1]) not in FLOAT_TYPES:
        return declined("the max or the sum is not a floating-point value", sts[i], Stage.LEGALITY)
    a1, a2 = _canon(node_text(v1, data)), _canon(node_text(v2, data))
    # equal starts, or loop 1 skipping the element m starts from: m = E(0); for (j = 1; ...) max; for (j = 0; ...)
    skips_first = a1 == "1" and a2 == "0" and md[2] is not None \
        and _canon(node_text(md[2], data)) == _renamed(e2, data, j2, "0")
    if a1 != a2 and not skips_first:
        return declined("the two loops start at different elements", sts[k], Stage.SHAPE)
    return _Pair(sts[i], sts[k], tuple(between), m, s, md[1], exp, node_text(e2, data))


def _pairs(ctx: RuleContext, body: Node, data: bytes) -> list[_Pair]:
    out: list[_Pair] = []
    for block in walk(body, ("compound_statement",)):
        sts = statements(block)
        for i in range(len(sts)):
            p = _pair_at(ctx, sts, i, data)
            if p is not None and not any(q.first.start_byte <= p.first.start_byte < q.second.end_byte for q in out):
                out.append(p)
    return out


def _fused(p: _Pair, data: bytes) -> str:
    f2 = for_parts(p.second, data)
    assert f2 is not None
    body = f2.body
    head = data[p.second.start_byte : body.start_byte].decode("utf-8", errors="replace").rstrip()
    v = PREFIX + "v"
    lines = [node_text(b, data) for b in p.between]
    lines += [
        f"{head} {{",
        f"    {p.type} {v} = {p.value};",
        f"    if ({v} > {p.m}) {{",
        f"        {p.s} = {p.s} * {p.exp}({p.m} - {v});",
        f"        {p.m} = {v};",
        "    }",
        # a -INFINITY element adds exactly 0 in the two passes unless the whole row is -INFINITY; here it
        # could meet m = -INFINITY (exp(-inf - -inf) = NaN), so it is skipped: masked rows stay finite
        f"    if ({v} != -INFINITY) {p.s} += {p.exp}({v} - {p.m});",
        "}",
    ]
    return "\n".join(lines)


class SinglePass(StructuralRule[list[_Pair]]):
    family = "single_pass"
    structural = True

    def analyse(self, ctx: RuleContext) -> tuple[list[_Pair], bytes] | None:
        got = kernel_body(ctx)
        if got is None:
            return None
        body, data = got
        pairs = _pairs(ctx, body, data)
        if not pairs:
            return declined("no loop keeps a running max followed by a loop summing `exp(x - max)` (the softmax "
                            "shape this rule fuses)", body, Stage.SCOPE)
        return pairs, data

    def launches(self, ctx: RuleContext, shape: list[_Pair], data: bytes) -> dict[str, Launch]:
        return {"online": Launch()}

    def body(self, ctx: RuleContext, shape: list[_Pair], data: bytes, param: str) -> str | None:
        got = kernel_body(ctx)
        if got is None:
            return None
        body, _ = got
        out, at = [], body.start_byte
        for p in sorted(shape, key=lambda q: q.first.start_byte):
            out.append(data[at : p.first.start_byte].decode("utf-8", errors="replace"))
            out.append(_fused(p, data).replace("\n", "\n" + _indent_of(data, p.first.start_byte)))
            at = p.second.end_byte
        out.append(data[at : body.end_byte].decode("utf-8", errors="replace"))
        return "".join(out)

    def rationale(self, shape: list[_Pair], param: str) -> str:
        names = ", ".join(f"{p.m}/{p.s}" for p in shape)
        return (f"one pass carries the running max and the rescaled sum of exponentials ({names}): the row is "
                "read once less (online softmax; the sum is rounded differently)")


def _indent_of(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    return data[start:offset].decode("utf-8", errors="replace") if data[start:offset].strip() == b"" else ""


register(SinglePass())
