"""warp_per_row: give each row of a row-wise kernel to a warp (or a block) instead of a single thread.

Why it helps: a kernel with one thread per row walks a row serially, and neighbouring threads touch
addresses a whole row apart, so every load and store of a warp is 32 separate memory transactions and
the row's latency is paid element by element. With a warp per row, the 32 lanes read 32 consecutive
elements at once (coalesced, 128 bytes per instruction) and the row is done in 1/32 of the steps; the
row's reductions (max, sum) become per-lane partials combined with five ``__shfl_xor_sync`` steps.
Softmax, layer/RMS normalization and similar row-wise kernels written "one thread per row" typically
gain an order of magnitude. The ``block256`` variant uses a whole 256-thread block per row (partials of
the 8 warps combined through shared memory), for long rows.

Recognized shape (names, types, expressions free)::

    T row = blockIdx.x * blockDim.x + threadIdx.x;    // either operand order
    [declarations not using the thread coordinates]
    if (row >= ROWS) return;                         // or: if (row < ROWS) { ...rest... } as the last statement
    rest: a sequence of
      - declarations and assignments of local scalars (pointer offsets like ``const float* x = in + row * C``),
        computed identically by every lane;
      - loops ``for (int j = 0; j < COLS; j++)`` (also ++j, j += 1) whose bodies contain only
          * local declarations, ``if``/``else`` and blocks,
          * element writes ``p[IDX] = ...`` / ``p[IDX] op= ...``,
          * reductions into a scalar declared outside the loop: ``acc += e``, ``acc -= e``,
            ``acc = acc + e``, ``acc = fmaxf(acc, e)`` (fmax, max, fminf, fmin, min; either argument order),
        where an array written anywhere in the kernel is always accessed with one index ``j`` or ``E + j``
        (E the same loop-invariant expression everywhere), read-only arrays with any index free of values
        the loop assigns, and a reduction's accumulator is not otherwise read inside its loop.

Top-level statements may read only memory the kernel never writes (a lane must not read an element
another lane wrote), may not write memory, and nothing may use the thread coordinates except ``row``'s
definition, synchronize, exchange data between threads, or leave early (return/break/goto).

The rewrite: ``row`` becomes the warp's index, lane ``l`` runs each loop over ``j = l, l + 32, ...``, so the
same lane touches element ``j`` in every loop and element-wise dependencies between loops stay inside one
thread. Each reduction accumulates a per-lane partial (from 0 for sums, from the accumulator's value for
min/max, which are idempotent) that a butterfly of ``__shfl_xor_sync`` combines so every lane holds the
same total; a sum is then added to the accumulator. The guard is uniform per warp (whole warps leave
together), so the full-mask shuffles are safe. Floating-point sums are reassociated (tolerances apply).

Launch: ``block = 32 * R`` threads (R rows per block) and ``grid = cdiv(ROWS, R)``, where ROWS is the guard's
bound written in spec terms (a scalar parameter's ``arg`` value); if it cannot be, the rows the original
launch covered (grid × block) bound it instead. ``block256``: one block per row, ``grid = ROWS``.
Assumption: device functions called in the loops have no side effects other threads can see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.candidate import Candidate
from . import register
from ._structural import (
    MINMAX_FUNCS,
    SHUFFLE_TYPES,
    Bound,
    Decl,
    all_names,
    condition_of,
    declared_names,
    failing_bound,
    flush,
    global_index,
    has_collective,
    has_jump,
    indent,
    is_1d,
    is_ident,
    is_return_only,
    is_zero_literal,
    launch_ok,
    render,
    scalar_value_expr,
    single_decl,
    statements,
    subscript_parts,
    text,
    unparen,
    upper_bound,
    with_body,
    written_names,
)
from ._util import eval_expr, kernel_body, size_env, walk
from .base import Rule, RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfw_"

#: param -> (threads per block, rows per block); rows per block 0: one block per row
VARIANTS = {"warp8": (256, 8), "warp4": (128, 4), "block256": (256, 0)}
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_FULL = "0xffffffffu"


class _Reject(Exception):
    """The kernel is not of the recognized shape (internal control flow of the analysis)."""


@dataclass
class _Reduction:
    acc: str
    type: str
    #: "sum" or the min/max function name used
    kind: str


@dataclass
class _Loop:
    node: Node
    var: str
    reductions: dict[str, _Reduction] = field(default_factory=dict)


@dataclass
class _Shape:
    row: Decl
    prefix: list[Node]
    between: list[Node]
    guard: Node
    exit_form: bool
    bound: Bound
    rest: list[Node]
    loops: list[_Loop]


def _ids(node: Node, data: bytes) -> set[str]:
    return {text(n, data) for n in walk(node) if n.type == "identifier"}


class _Analysis:
    def __init__(self, ctx: RuleContext, body: Node, data: bytes) -> None:
        k = ctx.cand_kernel
        assert k is not None
        self.data = data
        self.body = body
        self.pointer_params = {p.name for p in k.params if p.is_pointer}
        self.params = {p.name for p in k.params}
        #: pointer name -> the parameter it points into
        self.root: dict[str, str] = {p: p for p in self.pointer_params}
        #: top-level scalar declarations: name -> type
        self.scalars: dict[str, str] = {}
        #: root -> the single (pointer name, index text) written roots are accessed with
        self.written_access: dict[str, tuple[str, str]] = {}
        self.written_roots: set[str] = set()

    # ------------------------------------------------------------------ shape
    def find(self) -> _Shape:
        data = self.data
        sts = statements(self.body)
        for at, st in enumerate(sts):
            d = single_decl(st, data)
            if d is None or d.pointer or d.value is None or global_index(d.value, data, "x") != "blockDim.x":
                continue
            for j in range(at + 1, len(sts)):
                s = sts[j]
                if s.type != "if_statement":
                    continue
                cond = condition_of(s)
                if cond is None or s.child_by_field_name("alternative") is not None:
                    raise _Reject
                down = failing_bound(cond, data, d.name)
                if down is not None and is_return_only(s.child_by_field_name("consequence")):
                    return _Shape(d, sts[:at], sts[at + 1 : j], s, True, down, sts[j + 1 :], [])
                up = upper_bound(cond, data, d.name)
                if up is not None and j == len(sts) - 1:
                    return _Shape(d, sts[:at], sts[at + 1 : j], s, False, up,
                                  statements(s.child_by_field_name("consequence")), [])
                raise _Reject
            raise _Reject
        raise _Reject

    # ------------------------------------------------------------------ checks
    def check(self, shape: _Shape) -> None:
        data = self.data
        if any(n.startswith(PREFIX) for n in all_names(self.body, data)):
            raise _Reject
        if any(n.type == "__shared__" for n in walk(self.body)) or has_collective(self.body, data):
            raise _Reject
        if declared_names(self.body, data) & self.params:
            raise _Reject  # shadowing
        row = shape.row.name
        if row in {w for st in shape.rest for w in written_names(st, data)}:
            raise _Reject
        top = shape.prefix + shape.between + shape.rest
        for st in top:
            if has_jump(st, loops_ok=False) or _ids(st, data) & _COORDS:
                raise _Reject
        for st in shape.prefix + shape.between:
            if st.type != "declaration":
                raise _Reject
        if row in {i for st in shape.prefix for i in _ids(st, data)} or _ids(shape.bound.limit, data) & _COORDS:
            raise _Reject
        # pass 1: pointer aliases and scalars declared at the top level, and which roots are written (anywhere)
        for st in top:
            if st.type == "declaration":
                self._declare(st)
        for n in walk(self.body):
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
                parts = subscript_parts(target, data) if target is not None else None
                if parts is not None:
                    base = unparen(parts[0])
                    if base.type != "identifier" or text(base, data) not in self.root:
                        raise _Reject
                    self.written_roots.add(self.root[text(base, data)])
                elif target is not None and unparen(target).type != "identifier":
                    raise _Reject  # *p = ..., s.f = ...: not something this rule follows
        # pass 2: statements
        for st in shape.prefix + shape.between:
            self._top_level(st)
        for st in shape.rest:
            if st.type == "for_statement":
                shape.loops.append(self._loop(st))
            elif st.type in ("declaration", "expression_statement"):
                self._top_level(st)
            else:
                raise _Reject
        if not shape.loops:
            raise _Reject

    def _declare(self, st: Node) -> None:
        data = self.data
        d = single_decl(st, data)
        if d is None:
            # several declarators: plain scalars only
            tnode = st.child_by_field_name("type")
            for dn in st.children_by_field_name("declarator"):
                inner = dn.child_by_field_name("declarator") if dn.type == "init_declarator" else dn
                if tnode is None or inner is None or inner.type != "identifier":
                    raise _Reject
                self.scalars[text(inner, data)] = text(tnode, data)
            return
        if d.pointer:
            v = unparen(d.value) if d.value is not None else None
            base = v
            if v is not None and v.type == "binary_expression":
                op = v.child_by_field_name("operator")
                base = v.child_by_field_name("left")
                if op is None or text(op, data) != "+" or base is None:
                    raise _Reject
                base = unparen(base)
            if base is None or base.type != "identifier" or text(base, data) not in self.root:
                raise _Reject
            self.root[d.name] = self.root[text(base, data)]
        else:
            self.scalars[d.name] = d.type

    def _top_level(self, st: Node) -> None:
        """Executed by every lane: no memory writes, reads only of never-written memory."""
        data = self.data
        if st.type == "expression_statement":
            e = st.named_children[0] if st.named_child_count == 1 else None
            if e is None or e.type not in ("assignment_expression", "update_expression"):
                raise _Reject
            target = e.child_by_field_name("left" if e.type == "assignment_expression" else "argument")
            if target is None or unparen(target).type != "identifier":
                raise _Reject
        for n in walk(st):
            if n.type == "subscript_expression":
                parts = subscript_parts(n, data)
                if parts is None:
                    raise _Reject
                base = unparen(parts[0])
                if base.type != "identifier" or self.root.get(text(base, data)) in self.written_roots \
                        or text(base, data) not in self.root:
                    raise _Reject
            elif n.type == "for_statement" or (
                    n.type == "pointer_expression" and text(n, data).lstrip().startswith("*")):
                raise _Reject

    def _loop(self, st: Node) -> _Loop:
        data = self.data
        init = st.child_by_field_name("initializer")
        cond = st.child_by_field_name("condition")
        upd = st.child_by_field_name("update")
        body = st.child_by_field_name("body")
        if init is None or cond is None or upd is None or body is None:
            raise _Reject
        d = single_decl(init, data)
        if d is None or d.pointer or d.value is None or not is_zero_literal(d.value, data):
            raise _Reject
        j = d.name
        bound = upper_bound(cond, data, j)
        u = unparen(upd)
        ut = text(u, data).replace(" ", "")
        if bound is None or ut not in (f"{j}++", f"++{j}", f"{j}+=1", f"{j}={j}+1"):
            raise _Reject
        loop = _Loop(st, j)
        locals_ = declared_names(body, data)
        outer_written = {w for w in written_names(body, data) if w not in locals_}
        if j in outer_written or outer_written & set(self.root):
            raise _Reject
        if _ids(bound.limit, data) & outer_written:
            raise _Reject
        self._body(body, loop, locals_, outer_written)
        if set(loop.reductions) != outer_written:
            raise _Reject
        return loop

    def _body(self, node: Node, loop: _Loop, locals_: set[str], outer_written: set[str]) -> None:
        for st in statements(node):
            t = st.type
            if t == "compound_statement":
                self._body(st, loop, locals_, outer_written)
            elif t == "if_statement":
                c = condition_of(st)
                if c is None:
                    raise _Reject
                self._expr(c, loop, outer_written)
                self._body(st.child_by_field_name("consequence") or st, loop, locals_, outer_written)
                alt = st.child_by_field_name("alternative")
                if alt is not None:
                    inner = [c2 for c2 in alt.named_children if c2.type != "comment"]
                    if len(inner) != 1:
                        raise _Reject
                    self._body(inner[0], loop, locals_, outer_written)
            elif t == "declaration":
                if any(c.type == "storage_class_specifier" for c in st.children):
                    raise _Reject
                self._expr(st, loop, outer_written)
            elif t == "expression_statement":
                self._statement(st, loop, locals_, outer_written)
            elif t == "else_clause":
                self._body(st, loop, locals_, outer_written)
            else:
                raise _Reject

    def _statement(self, st: Node, loop: _Loop, locals_: set[str], outer_written: set[str]) -> None:
        data = self.data
        e = st.named_children[0] if st.named_child_count == 1 else None
        if e is None:
            raise _Reject
        if e.type == "update_expression":
            arg = e.child_by_field_name("argument")
            if arg is None:
                raise _Reject
            a = unparen(arg)
            if a.type == "identifier" and text(a, data) in locals_:
                return
            if a.type == "subscript_expression":
                self._access(a, loop, outer_written)
                return
            raise _Reject
        if e.type != "assignment_expression":
            raise _Reject
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None:
            raise _Reject
        lv = unparen(left)
        o = text(op, data)
        if lv.type == "subscript_expression":
            self._access(lv, loop, outer_written)
            self._expr(right, loop, outer_written)
            return
        if lv.type != "identifier":
            raise _Reject
        name = text(lv, data)
        if name in locals_ and name not in outer_written:
            self._expr(right, loop, outer_written)
            return
        if name not in self.scalars or self.scalars[name] not in SHUFFLE_TYPES:
            raise _Reject
        kind, operand = _reduction(o, right, name, data)
        if kind is None or operand is None:
            raise _Reject
        kind = _kind(kind)
        prev = loop.reductions.get(name)
        if prev is not None and prev.kind != kind:
            raise _Reject
        loop.reductions[name] = _Reduction(name, self.scalars[name], kind)
        self._expr(operand, loop, outer_written)

    def _access(self, sub: Node, loop: _Loop, outer_written: set[str]) -> None:
        data = self.data
        parts = subscript_parts(sub, data)
        if parts is None:
            raise _Reject
        base, idx = unparen(parts[0]), parts[1]
        if base.type != "identifier" or text(base, data) not in self.root:
            raise _Reject
        name = text(base, data)
        root = self.root[name]
        if _ids(idx, data) & outer_written or any(n.type == "subscript_expression" for n in walk(idx)) \
                or any(n.type == "call_expression" for n in walk(idx)):
            raise _Reject
        if root in self.written_roots:
            if not _lane_index(idx, data, loop.var):
                raise _Reject
            key = (name, text(unparen(idx), data).replace(" ", ""))
            if self.written_access.setdefault(root, key) != key:
                raise _Reject
        self._expr(idx, loop, outer_written)

    def _expr(self, node: Node, loop: _Loop, outer_written: set[str]) -> None:
        """Reads inside a loop: subscripts go through ``_access``; no reads of values the loop accumulates."""
        data = self.data
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type == "subscript_expression":
                self._access(n, loop, outer_written)
                continue
            if n.type == "identifier" and text(n, data) in outer_written:
                raise _Reject
            if n.type == "pointer_expression":
                raise _Reject
            if n.type in ("assignment_expression", "update_expression") and n is not node:
                raise _Reject  # assignments inside expressions: keep it simple
            stack.extend(n.children)


def _lane_index(idx: Node, data: bytes, j: str) -> bool:
    """``j``, ``E + j`` or ``j + E`` with E free of j: distinct j give distinct elements."""
    n = unparen(idx)
    if is_ident(n, data, j):
        return True
    if n.type != "binary_expression":
        return False
    op = n.child_by_field_name("operator")
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    if op is None or text(op, data) != "+" or left is None or right is None:
        return False
    if is_ident(right, data, j):
        return j not in _ids(left, data)
    if is_ident(left, data, j):
        return j not in _ids(right, data)
    return False


def _reduction(op: str, right: Node, acc: str, data: bytes) -> tuple[str | None, Node | None]:
    """(kind, the other operand) of ``acc op= e`` / ``acc = acc + e`` / ``acc = f(acc, e)``."""
    if op in ("+=", "-="):
        return "sum" + op[0], right
    if op != "=":
        return None, None
    r = unparen(right)
    if r.type == "binary_expression":
        bop = r.child_by_field_name("operator")
        a, b = r.child_by_field_name("left"), r.child_by_field_name("right")
        if bop is not None and a is not None and b is not None:
            if text(bop, data) == "+" and is_ident(a, data, acc):
                return "sum+", b
            if text(bop, data) == "+" and is_ident(b, data, acc):
                return "sum+", a
            if text(bop, data) == "-" and is_ident(a, data, acc):
                return "sum-", b
    if r.type == "call_expression":
        fn = r.child_by_field_name("function")
        args = r.child_by_field_name("arguments")
        if fn is not None and args is not None and text(fn, data) in MINMAX_FUNCS:
            xs = [c for c in args.named_children if c.type != "comment"]
            if len(xs) == 2:
                if is_ident(xs[0], data, acc):
                    return text(fn, data), xs[1]
                if is_ident(xs[1], data, acc):
                    return text(fn, data), xs[0]
    return None, None


def _kind(kind: str) -> str:
    """Reductions of one accumulator may mix ``+=`` and ``-=``: both are sums."""
    return "sum" if kind.startswith("sum") else kind


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    a = _Analysis(ctx, body, data)
    try:
        shape = a.find()
        a.check(shape)
    except _Reject:
        return None
    return shape, data


def _reduction_kinds_ok(shape: _Shape) -> bool:
    return all(r.kind == "sum" or r.kind in MINMAX_FUNCS for lp in shape.loops for r in lp.reductions.values())


def _combine(kind: str, a: str, b: str) -> str:
    return f"{a} + {b}" if kind == "sum" else f"{kind}({a}, {b})"


class WarpPerRow(Rule):
    family = "warp_per_row"
    motivated_by = ("WF111", "warp_per_row", "WF103", "coalesce")

    def _rows(self, ctx: RuleContext, shape: _Shape, data: bytes) -> tuple[str, bool] | None:
        """The number of rows in spec terms, and whether it is exact (else: an upper bound from the launch)."""
        lim = scalar_value_expr(ctx, shape.bound.limit, data)
        if lim is not None:
            return (f"({lim}) + 1" if shape.bound.inclusive else lim), True
        if not (is_1d(ctx, ctx.grid) and is_1d(ctx, ctx.block)):
            return None
        return f"({ctx.grid[0]}) * ({ctx.block[0]})", False

    def _plan(self, ctx: RuleContext) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        got = _analyse(ctx)
        if got is None:
            return {}
        shape, data = got
        if not _reduction_kinds_ok(shape):
            return {}
        rows = self._rows(ctx, shape, data)
        if rows is None:
            return {}
        rows_expr, exact = rows
        out: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for param, (threads, rpb) in VARIANTS.items():
            if rpb == 0:
                if not exact or not self._long_rows(ctx, shape, data):
                    continue
                grid: tuple[str, ...] = (rows_expr,)
            else:
                grid = (f"cdiv({rows_expr}, {rpb})",)
            block = (str(threads),)
            if launch_ok(ctx, grid, block):
                out[param] = (grid, block)
        return out

    @staticmethod
    def _long_rows(ctx: RuleContext, shape: _Shape, data: bytes) -> bool:
        """A block per row pays off for rows of at least 1024 elements (when the loop bound is known)."""
        for lp in shape.loops:
            cond = lp.node.child_by_field_name("condition")
            b = upper_bound(cond, data, lp.var) if cond is not None else None
            lim = scalar_value_expr(ctx, b.limit, data) if b is not None else None
            if lim is None:
                return False
            try:
                v = eval_expr(lim, size_env(ctx))
            except ValueError:
                return False
            if not isinstance(v, int) or v < 1024:
                return False
        return True

    def variants(self, ctx: RuleContext) -> list[str]:
        return list(self._plan(ctx))

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        plan = self._plan(ctx).get(param)
        got = _analyse(ctx)
        if plan is None or got is None:
            return None
        shape, data = got
        threads, rpb = VARIANTS[param]
        body = _generate(shape, data, block=rpb == 0)
        definition = with_body(ctx, body)
        if definition is None:
            return None
        grid, block = plan
        accs = sorted({r.acc for lp in shape.loops for r in lp.reductions.values()})
        red = f"; reductions of {', '.join(accs)} by shuffles" if accs else ""
        if rpb:
            why = f"one warp per row ({rpb} rows per {threads}-thread block), lanes stride the row by 32{red}"
        else:
            why = f"one {threads}-thread block per row, threads stride the row{red} and shared memory"
        return ctx.derive(self.family, param, why, definition=definition, grid=grid, block=block)


def _generate(shape: _Shape, data: bytes, *, block: bool) -> str:
    row = shape.row
    lane = f"{PREFIX}lane"
    out: list[str] = []
    decls: list[str] = []
    out.extend(flush(text(n, data), n, data) for n in shape.prefix)
    out.append(f"const int {lane} = threadIdx.x & 31;")
    if block:
        out.append(f"const int {PREFIX}warp = threadIdx.x >> 5;")
        out.append(f"const int {PREFIX}nwarps = blockDim.x >> 5;")
        out.append(f"{'const ' if row.const else ''}{row.type} {row.name} = blockIdx.x;")
    else:
        assert row.value is not None
        out.append(f"{'const ' if row.const else ''}{row.type} {row.name} = ({text(row.value, data)}) / 32;")
    out.extend(flush(text(n, data), n, data) for n in shape.between)
    rest: list[str] = []
    loops = {lp.node.id: (n, lp) for n, lp in enumerate(shape.loops)}
    for st in shape.rest:
        if st.id not in loops:
            rest.append(flush(text(st, data), st, data))
            continue
        n, lp = loops[st.id]
        rest.extend(_loop_code(lp, n, data, block, decls))
    inner = "\n".join(rest)
    if shape.exit_form:
        out.append(flush(text(shape.guard, data), shape.guard, data))
        out.append(inner)
    else:
        cond = condition_of(shape.guard)
        assert cond is not None
        out.append(f"if ({text(cond, data)}) {{\n{indent(inner, '    ')}\n}}")
    code = "\n".join(decls + out)
    return "{\n" + indent(code, "    ") + "\n}"


def _loop_code(lp: _Loop, n: int, data: bytes, block: bool, decls: list[str]) -> list[str]:
    st = lp.node
    init = st.child_by_field_name("initializer")
    cond = st.child_by_field_name("condition")
    body = st.child_by_field_name("body")
    assert init is not None and cond is not None and body is not None
    d = single_decl(init, data)
    assert d is not None
    parts = {r.acc: f"{PREFIX}p{n}_{r.acc}" for r in lp.reductions.values()}
    lines: list[str] = []
    for r in lp.reductions.values():
        start = "0" if r.kind == "sum" else r.acc
        lines.append(f"{r.type} {parts[r.acc]} = {start};")
    start = "threadIdx.x" if block else f"{PREFIX}lane"
    stride = "blockDim.x" if block else "32"
    body_text = flush(_rename_ids(body, data, parts), body, data)
    lines.append(f"for ({d.type} {lp.var} = {start}; {text(cond, data)}; {lp.var} += {stride}) {body_text}")
    for r in lp.reductions.values():
        p = parts[r.acc]
        lines.append(f"for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{\n"
                     f"    {p} = {_combine(r.kind, p, f'__shfl_xor_sync({_FULL}, {p}, {PREFIX}o)')};\n}}")
        if block:
            sh = f"{PREFIX}red{n}_{r.acc}"
            decls.append(f"__shared__ {r.type} {sh}[32];")
            lines.append(f"if ({PREFIX}lane == 0) {{\n    {sh}[{PREFIX}warp] = {p};\n}}")
            lines.append("__syncthreads();")
            lines.append(f"{p} = {sh}[0];")
            lines.append(f"for (int {PREFIX}w = 1; {PREFIX}w < {PREFIX}nwarps; ++{PREFIX}w) {{\n"
                         f"    {p} = {_combine(r.kind, p, f'{sh}[{PREFIX}w]')};\n}}")
        if r.kind == "sum":
            lines.append(f"{r.acc} = {r.acc} + {p};")
        else:
            lines.append(f"{r.acc} = {p};")
    if block and lp.reductions:
        lines.append("__syncthreads();  // the partials' shared memory may be reused by the next reduction")
    return lines


def _rename_ids(node: Node, data: bytes, mapping: dict[str, str]) -> str:
    def rep(n: Node) -> str | None:
        if n.type == "identifier":
            return mapping.get(text(n, data))
        return None

    return render(node, data, rep)


register(WarpPerRow())
