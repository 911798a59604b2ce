"""WF109: a 32-bit index that overflows at the spec's sizes — a correctness hazard, not a speed hint.

``int i = blockIdx.x * blockDim.x + threadIdx.x`` and ``row * cols + col`` are computed in 32 bits. Once
a buffer has more than 2^31-1 elements (8 GiB of floats — routine for today's activations and KV
caches) the value no longer fits: signed overflow is undefined behaviour and in practice wraps negative,
so the kernel reads and writes out of bounds or silently skips work. Casting one operand to 64 bits
*before* the multiply (``(size_t)row * cols + col``) fixes it; declaring the result ``size_t`` does not,
because the product has already overflowed.

How it is decided (``needs=("spec",)``): for each access ``buf[idx]`` (or ``p = buf + off``) into a
buffer whose length in the resolved spec exceeds what the index type can hold, the index is evaluated
for its largest value — thread and block indices from the launch configuration, scalar arguments from
the spec, loop counters from their loop condition, locals through their definitions — and its integer
type by C's conversion rules. A finding is made where a 32-bit value exceeds its type: at the
declaration of a 32-bit local that cannot hold its value, or at a 32-bit expression used as an index.
Anything that cannot be bounded (a value loaded from memory, an unknown call) is not reported: the
analyzer only speaks when the spec proves the overflow.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...spec.model import ResolvedSpec
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._facts import BUILTINS, INT_TYPES, KernelFacts, Var, facts, int_literal

define("WF109", "32-bit index overflow at the spec's sizes", Severity.WARNING, "source", "index_width")

_DIM = {"x": 0, "y": 1, "z": 2}


def _limit(t: tuple[int, bool]) -> int:
    bits, signed = t
    return (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1


def _type_name(t: tuple[int, bool]) -> str:
    return {(32, True): "int", (32, False): "unsigned int", (16, True): "short", (16, False): "unsigned short",
            (8, True): "char", (8, False): "unsigned char"}.get(t, f"{t[0]}-bit")


class _Bounds:
    """Upper bounds of non-negative integer expressions under one resolved spec."""

    def __init__(self, f: KernelFacts, r: ResolvedSpec) -> None:
        self.f = f
        self.r = r
        self.scalars = {a.name: a.value for a in r.args if a.value is not None}
        self._vars: dict[str, int | None] = {}

    def max(self, node: Node | None, depth: int = 0) -> int | None:
        if node is None or depth > 40:
            return None
        f, t = self.f, node.type
        if t == "number_literal":
            lit = int_literal(f.text(node))
            return lit[0] if lit is not None else None
        if t in ("parenthesized_expression",):
            return self.max(node.named_children[0], depth + 1) if node.named_children else None
        if t == "cast_expression":
            return self.max(node.child_by_field_name("value"), depth + 1)
        if t == "field_expression":
            arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
            if arg is None or fld is None or f.text(arg) not in BUILTINS or f.text(fld) not in _DIM:
                return None
            d = _DIM[f.text(fld)]
            return {"threadIdx": self.r.block[d] - 1, "blockIdx": self.r.grid[d] - 1, "blockDim": self.r.block[d],
                    "gridDim": self.r.grid[d]}[f.text(arg)]
        if t == "identifier":
            name = f.text(node)
            if name in f.vars:
                return self._var(name, depth)
            if name in self.scalars and name not in f.reassigned_params:
                v = self.scalars[name]
                return int(v) if isinstance(v, int) or (isinstance(v, float) and v.is_integer()) else None
            return f.macro_value(name)
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            o = f.text(op) if op is not None else ""
            a = self.max(node.child_by_field_name("left"), depth + 1)
            b = self.max(node.child_by_field_name("right"), depth + 1)
            if o == "+":
                return a + b if a is not None and b is not None else None
            if o == "*":
                return a * b if a is not None and b is not None else None
            if o in ("-", "/", ">>"):
                return a if o != ">>" or b is None or a is None else a >> b
            if o == "%":
                return min(a, b - 1) if a is not None and b is not None else (b - 1 if b is not None else a)
            if o == "<<":
                return a << b if a is not None and b is not None and b < 64 else None
            if o == "&":
                known = [x for x in (a, b) if x is not None]
                return min(known) if known else None
            return None
        if t == "conditional_expression":
            a = self.max(node.child_by_field_name("consequence"), depth + 1)
            b = self.max(node.child_by_field_name("alternative"), depth + 1)
            return max(a, b) if a is not None and b is not None else None
        if t == "call_expression":
            name = f.call_name(node)
            vals = [self.max(a, depth + 1) for a in f.call_args(node)]
            if name in ("min", "umin", "llmin"):
                known = [v for v in vals if v is not None]
                return min(known) if known else None
            if name in ("max", "umax", "llmax") and vals and all(v is not None for v in vals):
                return max(v for v in vals if v is not None)
        return None

    def _var(self, name: str, depth: int) -> int | None:
        if name in self._vars:
            return self._vars[name]
        self._vars[name] = None  # cycle guard
        v = self.f.vars[name]
        out: int | None = None
        if v.loop is not None:
            out = self._loop_counter(v, depth)
        elif v.defs and not v.updates and not v.array and not v.pointer:
            vals = [self.max(d, depth + 1) for d in v.defs]
            out = max(x for x in vals if x is not None) if all(x is not None for x in vals) else None
        self._vars[name] = out
        return out

    def _loop_counter(self, v: Var, depth: int) -> int | None:
        """``for (j = a; j < E; j += s)`` -> E - 1; a decreasing counter -> its start."""
        assert v.loop is not None
        f = self.f
        cond = v.loop.child_by_field_name("condition")
        if cond is not None and cond.type == "binary_expression":
            op = cond.child_by_field_name("operator")
            left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
            o = f.text(op) if op is not None else ""
            if left is not None and right is not None:
                if f.text(left) == v.name and o in ("<", "<="):
                    e = self.max(right, depth + 1)
                    return None if e is None else (e - 1 if o == "<" else e)
                if f.text(right) == v.name and o in (">", ">="):
                    e = self.max(left, depth + 1)
                    return None if e is None else (e - 1 if o == ">" else e)
        decreasing = all(
            (u.type == "update_expression" and "--" in f.text(u))
            or (u.type == "assignment_expression" and (op := u.child_by_field_name("operator")) is not None
                and f.text(op) in ("-=", ">>=", "/="))
            for u in v.updates)
        if decreasing and len(v.defs) == 1:
            return self.max(v.defs[0], depth + 1)
        return None


@analyzer("index-width", ("WF109",), needs=("source", "spec"))
def index_width(ctx: KernelContext) -> Iterator[Finding]:
    f = facts(ctx)
    r = ctx.resolved
    if r is None:
        return
    counts = {a.name: a.count for a in r.args if a.count is not None}
    bounds = _Bounds(f, r)
    reported: set[tuple[int, int]] = set()

    def var_sites(name: str, seen: set[str]) -> Iterator[tuple[Node, str, tuple[int, bool], int, str | None]]:
        """Overflow sites behind a local: its own 32-bit declaration, or 32-bit expressions defining it."""
        if name in seen or name not in f.vars:
            return
        seen.add(name)
        v = f.vars[name]
        vt = INT_TYPES.get(v.type or "")
        if vt is None or v.pointer or v.array:
            return
        for d in v.defs:
            yield from expr_sites(d, seen)
            mx = bounds.max(d)
            if vt[0] <= 32 and mx is not None and mx > _limit(vt):
                yield d, f.text(d), vt, mx, name
        if v.loop is not None:
            mx = bounds.max(_ident_node(f, v))
            if vt[0] <= 32 and mx is not None and mx > _limit(vt) and v.decls:
                yield v.decls[0], name, vt, mx, name

    def expr_sites(node: Node, seen: set[str]) -> Iterator[tuple[Node, str, tuple[int, bool], int, str | None]]:
        """32-bit arithmetic inside ``node`` whose value exceeds its type (outermost first), and the locals."""
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type == "binary_expression":
                op = n.child_by_field_name("operator")
                if op is not None and f.text(op) in ("+", "*", "<<"):
                    it = f.int_type(n)
                    mx = bounds.max(n)
                    if it is not None and it[0] <= 32 and mx is not None and mx > _limit(it):
                        yield n, f.text(n), it, mx, None
                        continue  # the outermost overflowing expression says it; don't repeat inner ones
            if n.type == "identifier":
                yield from var_sites(f.text(n), seen)
            if n.type in ("subscript_expression", "call_expression") and n is not node:
                continue  # a loaded value or a call result: not part of this index's arithmetic
            stack.extend(reversed(n.named_children))

    for acc in f.accesses:
        count = counts.get(acc.buffer)
        if count is None or count <= (1 << 31) - 1:
            continue
        for idx in (acc.alias_offset, acc.index):
            if idx is None:
                continue
            for site, text, it, mx, var in expr_sites(idx, set()):
                if count <= _limit(it):
                    continue
                key = (site.start_byte, site.end_byte)
                if key in reported:
                    continue
                reported.add(key)
                yield _finding(ctx, f, site, text, it, mx, var, acc.buffer, count, acc.node)


def _ident_node(f: KernelFacts, v: Var) -> Node | None:
    """An identifier node naming ``v`` (for bounding a loop counter by its loop condition)."""
    for n in f.nodes:
        if n.type == "identifier" and f.text(n) == v.name:
            return n
    return None


def _finding(ctx: KernelContext, f: KernelFacts, site: Node, text: str, it: tuple[int, bool], mx: int,
             var: str | None, buffer: str, count: int, access: Node) -> Finding:
    tname = _type_name(it)
    limit = "2^31-1" if it[1] else "2^32-1"
    at = ctx.node_line(access)
    evidence = {"expression": text, "type": tname, "max_value": mx, "type_limit": _limit(it), "buffer": buffer,
                "buffer_elements": count, "access_line": at}
    if var is not None:
        msg = (f"`{var}` is a 32-bit `{tname}` but reaches {mx:,} (> {limit}) at the spec's sizes, and it indexes "
               f"`{buffer}` ({count:,} elements) at line {at}: the value wraps and the access goes out of bounds; "
               f"compute it in 64 bits (cast an operand to `size_t` or `long long` before multiplying)")
        evidence["variable"] = var
    else:
        msg = (f"`{text}` is computed in 32-bit `{tname}` but reaches {mx:,} (> {limit}) at the spec's sizes, "
               f"indexing `{buffer}` ({count:,} elements): it wraps and the access goes out of bounds; cast an "
               f"operand to `size_t` or `long long` before multiplying")
    related = () if ctx.node_line(site) == at else ((ctx.range(access), f"`{buffer}` is indexed here"),)
    return make("WF109", ctx.file, ctx.range(site), msg, kernel=ctx.kernel.name, evidence=evidence, related=related)
