"""The combine of one tree step: which shared arrays it folds and with what operation.

Why a module of its own: people write the same step ``sh[i] = sh[i] op sh[i + s]`` in many spellings, and
what the rewrite needs from all of them is one thing per array — a format ``{a} op {b}`` that combines the
element a thread keeps (``a``) with its partner (``b``). Accepted, for each array once (several arrays may
be folded by the same tree, e.g. a sum and a sum of squares):

* ``sh[i] op= sh[i + s]`` (``+ * | & ^``), ``sh[i] = sh[i] op sh[i + s]`` (either operand order);
* ``sh[i] = fmaxf(sh[i], sh[i + s])`` (``MINMAX_FUNCS``, either argument order);
* ``sh[i] = (sh[i + s] < sh[i]) ? sh[i + s] : sh[i]`` and the other min/max selects;
* the same through temporaries: ``T x = sh[i]; T y = sh[i + s]; sh[i] = x + y;`` and the conditional store
  ``if (y < x) sh[i] = y;`` (a select-min: the element keeps ``x`` otherwise).

Every one of these is commutative and associative (floating-point ``+``/``*`` within tolerance; integers,
bitwise operations, min and max exactly), which is what lets the rewrite fold the elements in another order.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ....cuda.tree import node_text
from .._structural import (
    MINMAX_FUNCS,
    binary_parts,
    condition_of,
    render,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    written_names,
)

_COMPOUND = {"+=": "+", "*=": "*", "|=": "|", "&=": "&", "^=": "^"}
_RELATIONS = ("<", "<=", ">", ">=")
_A, _B = "\x00a\x00", "\x00b\x00"


@dataclass(frozen=True)
class Combine:
    """One array folded by the tree: ``array[i] = fmt.format(a=array[i], b=array[partner])``."""

    array: str
    elem: str
    fmt: str
    #: the operation is exactly associative and commutative (integers, bitwise, min/max); False for
    #: floating-point sums and products, which a different folding order changes within rounding
    exact: bool


def _fmt(node: Node, data: bytes, role: dict[int, str]) -> str:
    """The expression's text with the operands of the given roles as ``{a}``/``{b}`` (other braces escaped)."""
    text = render(node, data, lambda n: role.get(unparen(n).id))
    text = text.replace("{", "{{").replace("}", "}}")
    return text.replace(_A, "{a}").replace(_B, "{b}")


class _Step:
    """Reads the statements of one step (see the module docstring)."""

    def __init__(self, data: bytes, me: set[str], partner: set[str], shared: dict[str, str]) -> None:
        self.data, self.me, self.partner, self.shared = data, me, partner, shared
        #: temporary -> (array, "a" | "b")
        self.temps: dict[str, tuple[str, str]] = {}
        self.out: dict[str, Combine] = {}

    def role(self, node: Node | None) -> tuple[str, str] | None:
        """(array, "a"|"b") when ``node`` is the kept element, the partner, or a temporary holding one."""
        if node is None:
            return None
        n = unparen(node)
        if n.type == "identifier":
            return self.temps.get(node_text(n, self.data))
        parts = subscript_parts(n, self.data)
        if parts is None or unparen(parts[0]).type != "identifier":
            return None
        arr = node_text(unparen(parts[0]), self.data)
        idx = node_text(unparen(parts[1]), self.data).replace(" ", "")
        if arr not in self.shared:
            return None
        if idx in self.me:
            return arr, "a"
        if idx in self.partner:
            return arr, "b"
        return None

    def pair(self, x: Node | None, y: Node | None) -> str | None:
        """The array when ``x`` and ``y`` are its kept element and its partner (either order)."""
        rx, ry = self.role(x), self.role(y)
        if rx is None or ry is None or rx[0] != ry[0] or {rx[1], ry[1]} != {"a", "b"}:
            return None
        return rx[0]

    def roles_of(self, *nodes: Node) -> dict[int, str]:
        out: dict[int, str] = {}
        for n in nodes:
            r = self.role(n)
            if r is not None:
                out[unparen(n).id] = _A if r[1] == "a" else _B
        return out

    def add(self, arr: str, fmt: str, exact_op: bool, at: Node) -> str | None:
        if arr in self.out:
            return f"the tree step folds `{arr}` twice"
        elem = self.shared[arr]
        integral = not any(w in elem for w in ("float", "double", "half", "bfloat"))
        self.out[arr] = Combine(arr, elem, fmt, exact_op or integral)
        return None

    def assignment(self, st: Node) -> str | None:
        """``sh[i] op= ...`` / ``sh[i] = ...``: None when read, else why not."""
        e = st.named_children[0]
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        lr = self.role(left)
        if left is None or op is None or right is None or lr is None or lr[1] != "a" \
                or unparen(left).type == "identifier":
            return f"`{node_text(st, self.data)}` does not write the kept element `sh[i]` of a shared array"
        arr, o, r = lr[0], node_text(op, self.data), unparen(right)
        if o in _COMPOUND and self.role(r) == (arr, "b"):
            return self.add(arr, "{a} " + _COMPOUND[o] + " {b}", o in ("|=", "&=", "^="), st)
        if o != "=":
            return f"`{node_text(st, self.data)}` is not a sum, product, min/max or bitwise combine"
        b = binary_parts(r, self.data)
        if b is not None and b[1] in ("+", "*", "|", "&", "^") and self.pair(b[0], b[2]) == arr:
            return self.add(arr, "{a} " + b[1] + " {b}", b[1] in ("|", "&", "^"), st)
        if r.type == "call_expression":
            fn, args = r.child_by_field_name("function"), r.child_by_field_name("arguments")
            xs = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if fn is not None and node_text(fn, self.data) in MINMAX_FUNCS and len(xs) == 2 \
                    and self.pair(xs[0], xs[1]) == arr:
                return self.add(arr, _fmt(r, self.data, self.roles_of(*xs)), True, st)
        if r.type == "conditional_expression":
            c, t, f = (r.child_by_field_name(x) for x in ("condition", "consequence", "alternative"))
            cb = binary_parts(c, self.data) if c is not None else None
            if cb is not None and cb[1] in _RELATIONS and self.pair(cb[0], cb[2]) == arr \
                    and self.pair(t, f) == arr and t is not None and f is not None:
                return self.add(arr, _fmt(r, self.data, self.roles_of(cb[0], cb[2], t, f)), True, st)
        return f"`{node_text(st, self.data)}` is not a sum, product, min/max or bitwise combine of `{arr}`"

    def conditional_store(self, st: Node) -> str | None:
        """``if (y < x) sh[i] = y;``: a select of the smaller (or larger) of the two."""
        c = condition_of(st)
        cb = binary_parts(c, self.data) if c is not None else None
        inner = statements(st.child_by_field_name("consequence"))
        if cb is None or st.child_by_field_name("alternative") is not None or len(inner) != 1 \
                or inner[0].type != "expression_statement" or inner[0].named_child_count != 1:
            return f"`{node_text(st, self.data).splitlines()[0]}` in the tree step is not a min/max select"
        e = inner[0].named_children[0]
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        lr, rr = self.role(left), self.role(right)
        arr = self.pair(cb[0], cb[2]) if cb[1] in _RELATIONS else None
        if arr is None or op is None or node_text(op, self.data) != "=" or lr != (arr, "a") or rr != (arr, "b") \
                or left is None or unparen(left).type == "identifier":
            return f"`{node_text(st, self.data).splitlines()[0]}` in the tree step is not a min/max select"
        cond = _fmt(c, self.data, self.roles_of(cb[0], cb[2])) if c is not None else ""
        return self.add(arr, f"({cond}) ? {{b}} : {{a}}", True, st)

    def read(self, body: Node) -> list[Combine] | str:
        sts = statements(body)
        written = written_names(body, self.data)
        for st in sts:
            d = single_decl(st, self.data)
            if d is not None:
                r = self.role(d.value)
                if d.pointer or r is None or d.name in written:
                    return f"`{node_text(st, self.data)}` in the tree step is not a copy of `sh[i]` or its partner"
                self.temps[d.name] = r
                continue
            if st.type == "expression_statement" and st.named_child_count == 1 \
                    and st.named_children[0].type == "assignment_expression":
                why = self.assignment(st)
            elif st.type == "if_statement":
                why = self.conditional_store(st)
            else:
                why = f"`{node_text(st, self.data).splitlines()[0]}` in the tree step is not part of a combine"
            if why is not None:
                return why
        if not self.out:
            return "the tree step writes no shared array"
        return list(self.out.values())


def read_step(body: Node, data: bytes, me: set[str], partner: set[str], shared: dict[str, str]) -> list[Combine] | str:
    """The arrays the step folds (kept element at an index spelled as in ``me``, its partner as in
    ``partner``, both whitespace-free), or why the step is not a combine."""
    return _Step(data, me, partner, shared).read(body)
