"""What the host fills an input with: the value range a spec's input distribution is inferred from.

Why: an input the kernel uses as an index, a bin or a character must be drawn from the values the program
gives it, or the original itself reads and writes outside its arrays under the spec. The default for an
integer input, ``int(0, 100)``, made a histogram of letters (``alpha = a[i] - 'a'``, filled with
``'a' + rand() % 26``) index its shared bins at -24: the original wrote outside its buffers, or, in shared
memory, silently into its neighbours, and its results were verified against that.

What is read, in the host file of the launch (a text search over the file, as the launch's own names are):
the buffer passed at the launch, and the host buffer a ``cudaMemcpy`` into it copies from (``h.data()``,
``&h[0]``, ``h``); then the first fill of either:

* ``for (...) NAME[i] = E;`` — a loop storing into the buffer;
* ``generate(begin(NAME), end(NAME), [] { return E; })`` and ``std::generate(NAME.begin(), NAME.end(), ...)``.

``E``'s range is found by interval arithmetic over literals (characters too), ``rand()``/``random()`` in
``[0, RAND_MAX]``, ``rand() % K``, ``+ - * /``, casts, the host's constants, and a
``std::uniform_int_distribution``/``uniform_real_distribution`` declared with constant bounds and called
(``dist(gen)``). Anything else (the loop index, a file read, a value computed elsewhere) gives no range: the
default stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ..cuda.parser import parse_tree
from ..cuda.tree import node_text, walk
from .expr import ExprError, parse
from .model import Distribution, is_float

#: glibc's RAND_MAX (``rand()`` and ``random()``); ``RAND_MAX`` in an expression means it too
RAND_MAX = 2147483647

#: the values each integer element type holds
_INT_RANGE: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1),
}


@dataclass(frozen=True)
class _Range:
    lo: float
    hi: float
    #: True when every value is an integer (``rand() % 26``), False once a real division enters
    whole: bool
    #: True when the C type is floating-point (a cast, a real literal): ``/`` divides exactly
    real: bool = False


def _base_name(text: str) -> str | None:
    """The array a buffer expression names: ``h.data()``, ``&h[0]``, ``(char*)h``, ``thrust::raw_pointer_cast(
    h.data())`` -> ``h``."""
    t = re.sub(r"\s+", "", text)
    t = re.sub(r"^\([^()]*\*\)", "", t)  # a C cast to a pointer type
    m = re.fullmatch(r"(?:thrust::raw_pointer_cast\()?&?([A-Za-z_]\w*)(?:\.data\(\)|\[0\]|\.get\(\))?\)?", t)
    return m.group(1) if m else None


def _copy_sources(root: Node, data: bytes, device: str) -> list[str]:
    """Host buffers a ``cudaMemcpy``/``cudaMemcpyAsync`` copies into ``device``."""
    out: list[str] = []
    for call in walk(root, ("call_expression",)):
        fn = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        if fn is None or args is None or node_text(fn, data) not in ("cudaMemcpy", "cudaMemcpyAsync"):
            continue
        a = [c for c in args.named_children if c.type != "comment"]
        if len(a) >= 2 and _base_name(node_text(a[0], data)) == device:
            src = _base_name(node_text(a[1], data))
            if src is not None and src not in out:
                out.append(src)
    return out


def _fill(root: Node, data: bytes, name: str) -> tuple[Node, set[str]] | None:
    """The expression the program first fills ``name`` with (see the module docstring), and the names that
    vary there (the loop's counters, the lambda's parameters): they are no constants of the host's, whatever
    value the host's flow gives them at the launch."""
    for n in walk(root):
        if n.type == "for_statement":
            varying = {node_text(i, data) for part in ("initializer", "update")
                       for c in [n.child_by_field_name(part)] if c is not None
                       for i in walk(c, ("identifier",))}
            body = n.child_by_field_name("body")
            sts = [c for c in body.named_children if c.type != "comment"] if body is not None and \
                body.type == "compound_statement" else [body] if body is not None else []
            for st in sts:
                e = st.named_children[0] if st.type == "expression_statement" and st.named_children else None
                if e is None or e.type != "assignment_expression" or node_text(e.child(1), data) != "=":
                    continue
                left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
                if left is not None and right is not None and left.type == "subscript_expression":
                    arr = left.child_by_field_name("argument")
                    if arr is not None and node_text(arr, data) == name:
                        return right, varying
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            if fn is None or args is None or node_text(fn, data) not in ("generate", "std::generate"):
                continue
            a = [c for c in args.named_children if c.type != "comment"]
            if len(a) != 3 or name not in {_begin_of(node_text(a[0], data)), _begin_of(node_text(a[1], data))}:
                continue
            if a[2].type == "lambda_expression":
                ret = next(iter(walk(a[2], ("return_statement",))), None)
                params = a[2].child_by_field_name("declarator")
                if ret is not None and ret.named_children:
                    return ret.named_children[0], {node_text(i, data) for i in walk(params, ("identifier",))} \
                        if params is not None else set()
    return None


def _begin_of(text: str) -> str | None:
    t = re.sub(r"\s+", "", text)
    m = re.fullmatch(r"(?:std::)?(?:begin|end)\(([A-Za-z_]\w*)\)|([A-Za-z_]\w*)\.(?:begin|end)\(\)", t)
    return (m.group(1) or m.group(2)) if m else None


def _distributions(root: Node, data: bytes, constant: dict[str, float]) -> dict[str, _Range]:
    """``std::uniform_int_distribution<int> d(0, 9);`` and ``uniform_real_distribution<float> d{-1.f, 1.f}``
    declared with constant bounds, by name."""
    out: dict[str, _Range] = {}
    for d in walk(root, ("declaration",)):
        t = d.child_by_field_name("type")
        kind = node_text(t, data) if t is not None else ""
        real = "uniform_real_distribution" in kind
        if not real and "uniform_int_distribution" not in kind:
            continue
        for decl in d.children_by_field_name("declarator"):
            name = decl.child_by_field_name("declarator")
            args = next((c for c in decl.named_children if c.type in ("argument_list", "initializer_list")), None)
            if name is None or args is None:
                continue
            bounds = [_range(c, data, constant, {}) for c in args.named_children]
            if len(bounds) == 2 and all(b is not None and b.lo == b.hi for b in bounds):
                lo, hi = bounds[0].lo, bounds[1].hi  # type: ignore[union-attr]
                out[node_text(name, data)] = _Range(lo, hi, not real, real)
    return out


def _range(n: Node, data: bytes, constant: dict[str, float], dists: dict[str, _Range]) -> _Range | None:
    """The values ``n`` can take, or None where it cannot be told here."""
    t = n.type
    if t in ("parenthesized_expression",):
        return _range(n.named_children[0], data, constant, dists) if n.named_children else None
    if t == "number_literal":
        text = node_text(n, data).rstrip("fFlLuU")
        try:
            v = float(int(text, 0)) if re.fullmatch(r"0[xX][0-9a-fA-F]+|\d+", text) else float(text)
        except ValueError:
            return None
        real = "." in text or ("e" in text.lower() and not text.lower().startswith("0x"))
        return _Range(v, v, v.is_integer(), real)
    if t == "char_literal":
        body = node_text(n, data)[1:-1]
        return _Range(float(ord(body)), float(ord(body)), True) if len(body) == 1 else None
    if t == "identifier":
        name = node_text(n, data)
        if name == "RAND_MAX":
            return _Range(RAND_MAX, RAND_MAX, True)
        known = constant.get(name)
        return _Range(known, known, float(known).is_integer()) if known is not None else None
    if t == "cast_expression" or (t == "call_expression" and node_text(n.child_by_field_name("function"), data)  # type: ignore[arg-type]
                                   .startswith("static_cast")):
        inner = n.child_by_field_name("value") if t == "cast_expression" else \
            (n.child_by_field_name("arguments").named_children or [None])[0]  # type: ignore[union-attr]
        target = node_text(n.child_by_field_name("type") if t == "cast_expression" else
                           n.child_by_field_name("function"), data)  # type: ignore[arg-type]
        r = _range(inner, data, constant, dists) if inner is not None else None
        if r is None:
            return None
        real = _ctype(target) in ("float", "double", "half", "__half", "float32_t", "double_t")
        return _Range(r.lo, r.hi, r.whole, real)
    if t == "call_expression":
        fn = node_text(n.child_by_field_name("function"), data)  # type: ignore[arg-type]
        if fn in ("rand", "std::rand", "random"):
            return _Range(0, RAND_MAX, True)
        if fn in dists:
            return dists[fn]
        return None
    if t == "binary_expression":
        op = node_text(n.child_by_field_name("operator"), data)  # type: ignore[arg-type]
        left = n.child_by_field_name("left")
        right = n.child_by_field_name("right")
        if left is None or right is None:
            return None
        a, b = _range(left, data, constant, dists), _range(right, data, constant, dists)
        if a is None or b is None:
            return None
        if op == "%" and a.whole and b.whole and b.lo == b.hi and b.lo > 0 and a.lo >= 0:
            return _Range(0, min(a.hi, b.lo - 1), True)
        real = a.real or b.real
        if op == "+":
            return _Range(a.lo + b.lo, a.hi + b.hi, a.whole and b.whole, real)
        if op == "-":
            return _Range(a.lo - b.hi, a.hi - b.lo, a.whole and b.whole, real)
        if op == "*":
            ps = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            return _Range(min(ps), max(ps), a.whole and b.whole, real)
        if op == "/" and b.lo == b.hi and b.lo != 0:
            lo, hi = sorted((a.lo / b.lo, a.hi / b.lo))
            if not real:  # integer division
                return _Range(float(int(lo)), float(int(hi)), True)
            return _Range(lo, hi, False, True)
        if op == "/" and b.lo > 0:  # a positive divisor that varies: bounded by its extremes
            qs = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
            return _Range(min(qs), max(qs), False, True) if real else None
        return None
    if t == "unary_expression":
        first = n.child(0)
        op = node_text(first, data) if first is not None else ""
        arg = n.child_by_field_name("argument")
        r = _range(arg, data, constant, dists) if arg is not None else None
        if r is not None and op == "-":
            return _Range(-r.hi, -r.lo, r.whole, r.real)
        return r if op == "+" else None
    return None


def _ctype(text: str) -> str:
    m = re.search(r"<\s*([^<>]+?)\s*>", text)
    return (m.group(1) if m else text).strip()


def _constants(defs: dict[str, str]) -> dict[str, float]:
    """The host's constants that are plain numbers (``const int BINS = 7``, ``#define N 26``)."""
    out: dict[str, float] = {}
    for name, text in defs.items():
        try:
            e = parse(text)
            if not e.names():
                out[name] = float(e.evaluate({}))
        except (ExprError, ZeroDivisionError, ValueError, TypeError):
            continue
    return out


class HostFills:
    """How the host file fills the buffers it launches with: the file is parsed, and its constants and
    ``std`` distributions read, once per inference; ``of`` answers per launch argument."""

    def __init__(self, data: bytes, defs: dict[str, str]) -> None:
        self.data = data
        self.root = parse_tree(data).root_node
        self.constant = _constants(defs)
        self.dists = _distributions(self.root, data, self.constant)

    def of(self, buffer: str, dtype: str) -> Distribution | None:
        """The distribution of the input passed as ``buffer`` at a launch, from how the host fills it (see the
        module docstring); None where that cannot be told, so the default stays."""
        device = _base_name(buffer)
        if device is None:
            return None
        root, data = self.root, self.data
        for name in [device, *_copy_sources(root, data, device)]:
            found = _fill(root, data, name)
            if found is None:
                continue
            e, varying = found
            r = _range(e, data, {k: v for k, v in self.constant.items() if k not in varying}, self.dists)
            if r is None or r.hi < r.lo:
                return None
            if r.whole:
                lo, hi = _INT_RANGE.get(dtype, (None, None))
                if lo is not None and hi is not None and (r.lo < lo or r.hi > hi):
                    return None  # the values wrap in the element type: what arrives is not that range
                return Distribution("int", _num(r.lo), _num(min(r.hi + 1, 2**31 - 1)))
            if is_float(dtype):
                return Distribution("uniform", _num(r.lo), _num(r.hi)) if r.hi > r.lo else None
            return None
        return None


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)
