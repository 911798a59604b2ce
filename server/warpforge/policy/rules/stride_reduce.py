"""stride_reduce: a sum every thread adds to one address, re-mapped to a coalesced grid-stride walk.

Why it helps: a full reduction written "each thread sums its own chunk, then one atomicAdd" (thread ``t``
adds ``x[t*K] .. x[t*K + K - 1]``) reads uncoalesced: the 32 lanes of a warp touch 32 addresses ``4K``
bytes apart, one sector each, and each thread then waits on one load at a time (the loop carries one
accumulator). Aggregating the atomics (``atomic_aggregate``) leaves that walk as it is: 32 % of copy
bandwidth on a 2^25-float sum. The same set of elements, handed out as ``i = t, t + T, t + 2T, ...`` (T the
launch's threads), makes consecutive lanes read consecutive elements; four independent partials per
thread keep four loads in flight (a ``blockDim``-strided loop is never unrolled by the compiler, so one
accumulator means one load at a time); the block then combines its partials (shuffles, shared memory)
and sends one atomic. A kernel already written as a grid-stride loop with one partial per thread gets the
partials and the block combine.

What the analysis requires (on the canonical form), i.e. why every element is still added exactly once:
the body is only (1) declarations of the thread's index ``t = blockIdx.x * blockDim.x + threadIdx.x`` and
of values computed from ``t``, scalar parameters and literals (no memory, no calls but pure math); (2) an
accumulator ``s`` declared 0 of a type a shuffle moves; (3) one counted loop whose body is ``s += E`` (or
``s = s + E``); (4) ``atomicAdd(P, s)`` last, P the same address for every thread of the grid (parameters
and literals only: a per-block address would receive other elements once they are re-dealt). ``E`` reads
only the loop variable, scalar parameters and buffers the kernel never writes (the atomic's buffer is not
read at all), through no calls but pure math functions, so each term is a function of the element index
alone. The loop's index set per thread must be one of:

- a chunk: ``i`` from ``t * K`` (K of parameters and literals) while ``i < HI``, step 1, where HI is
  ``t * K + K``, or that clamped to ``N`` (``end = start + K; if (end > N) end = N;`` or ``min(.., N)``);
  an early exit ``if (t * K >= N) return;`` may precede it (with the clamp it only skips adding 0). Over
  the T threads of the launch the chunks are disjoint and cover ``[0, min(T * K, N))`` (``[0, T * K)``
  unclamped; empty for K <= 0);
- a grid stride: ``i`` from ``t`` while ``i < N``, step ``blockDim.x * gridDim.x``: ``[0, N)``.

Reordering: the original already adds the threads' partials to ``P`` in an order no one controls, and the
structural rules treat a float sum as reassociable under the spec's tolerances (``warp_per_row``,
``column_split``, ``atomic_aggregate``); integer sums are exact. Launch: 1-D grid and block, the block a
multiple of 32 threads at every size (every lane takes part in the shuffles).

Variants: ``x4`` keeps the launch, so the range is computed from the launch's own thread count and stays
exact for any launch; ``x4sm`` also sizes the grid to the GPU (``min(grid, SMs * resident blocks)``), offered
only where the range does not depend on T (a grid stride, or chunks that cover ``N`` at every size the spec
gives).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.model import Param
from ...cuda.tree import node_text, walk, written_names
from . import register
from ._structural import (
    SHUFFLE_TYPES,
    binary_parts,
    call_names,
    condition_of,
    dims_values,
    envs,
    global_index,
    identifiers,
    is_1d,
    is_grid_stride,
    is_return_only,
    is_zero_literal,
    resolved_type,
    scalar_value_expr,
    single_decl,
    statements,
    unparen,
)
from ._structural_rule import Launch, StructuralRule
from ._util import eval_expr, kernel_body
from ._why import Decline, Stage
from .base import RuleContext
from .warp_per_row import _canon_text, atomic_target

PREFIX = "wfs_"
ACCUMULATORS = 4
#: threads an SM keeps resident (sm_80 and sm_90); the sized grid fills them once
RESIDENT_PER_SM = 2048
_FULL = "0xffffffffu"
#: calls E may make: pure math (anything else could write memory or differ between calls)
_PURE = frozenset({
    "fabsf", "fabs", "abs", "sqrtf", "sqrt", "rsqrtf", "expf", "exp", "__expf", "exp2f", "logf", "log",
    "__logf", "log2f", "fmaf", "fma", "fminf", "fmaxf", "fmin", "fmax", "min", "max", "tanhf", "sinf", "cosf",
    "__sinf", "__cosf", "powf", "__powf", "__ldg", "__fmul_rn", "__fadd_rn", "__fmaf_rn", "erff", "floorf",
    "ceilf", "roundf", "truncf", "copysignf", "__saturatef"})
_INC = re.compile(r"^(\w+)\+\+$|^\+\+(\w+)$|^(\w+)\+=1$|^(\w+)=(\w+)\+1$")


@dataclass
class _Shape:
    loop: Node
    var: str
    var_type: str
    acc: str
    acc_type: str
    #: the term added per element (the loop body's right-hand side)
    term: Node
    atomic: Node
    #: "chunk" or "stride"
    form: str
    #: chunk: K; N (the clamp's, or the stride loop's bound), None when unclamped
    k: Node | None
    n: Node | None
    inclusive: bool


class _No(Decline):
    """Why the body is not the sum this rule re-deals (words, line, stage: see ``_why``)."""


class _Reader:
    """The top-level locals of the body: which are the thread index, which are uniform, their definitions."""

    def __init__(self, ctx: RuleContext, data: bytes, params: set[str], scalars: set[str]) -> None:
        self.ctx, self.data, self.params, self.scalars = ctx, data, params, scalars
        self.defs: dict[str, Node] = {}
        self.clamp: dict[str, Node] = {}  # local -> N of ``if (local > N) local = N;``

    def text(self, n: Node) -> str:
        return node_text(n, self.data)

    def uniform(self, n: Node) -> bool:
        """Scalar parameters, literals and locals of those only: the same value in every thread."""
        for x in walk(n):
            if x.type == "identifier":
                name = self.text(x)
                if name in self.scalars:
                    continue
                d = self.defs.get(name)
                if d is None or name in self.clamp or not self.uniform(d):
                    return False
            elif x.type in ("call_expression", "subscript_expression", "assignment_expression",
                            "update_expression", "field_expression", "pointer_expression"):
                return False
        return True

    def resolve(self, n: Node) -> Node:
        """A local's definition (followed through locals defined from one local), else the node."""
        n = unparen(n)
        for _ in range(16):
            if n.type != "identifier" or self.text(n) not in self.defs or self.text(n) in self.clamp:
                return n
            n = unparen(self.defs[self.text(n)])
        return n

    def is_tid(self, n: Node) -> bool:
        m = global_index(self.resolve(n), self.data)
        return m is not None and "blockDim" in m

    def chunk_start(self, n: Node) -> Node | None:
        """K when ``n`` is ``t * K`` or ``K * t`` (t the thread index, K uniform)."""
        b = binary_parts(self.resolve(n), self.data)
        if b is None or b[1] != "*":
            return None
        for t, k in ((b[0], b[2]), (b[2], b[0])):
            if self.is_tid(t) and self.uniform(k):
                return k
        return None


def _same(a: str, b: str) -> bool:
    """The same expression text up to whitespace and parentheses around single names (``(n)`` is ``n``;
    ``(a + b) * c`` stays apart from ``a + b * c``)."""
    return _canon_text(a) == _canon_text(b)


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    try:
        return _shape(ctx, body, data, k.params), data
    except _No as e:
        e.record()
        return None


def _shape(ctx: RuleContext, body: Node, data: bytes, params: tuple[Param, ...]) -> _Shape:
    if any(n.startswith(PREFIX) for n in identifiers(body, data)):
        raise _No("the kernel is already a re-dealt sum (it uses this rule's names)", None, Stage.SCOPE)
    names = {p.name for p in params}
    scalars = {p.name for p in params if not p.is_pointer}
    pointers = {p.name for p in params if p.is_pointer}
    rd = _Reader(ctx, data, names, scalars)
    sts = statements(body)
    if len(sts) < 3:
        raise _No("the body is not `index; partial = 0; loop; atomicAdd(...)` (too few statements)", body,
                  Stage.SCOPE)
    # (4) the atomic, last
    last = sts[-1]
    e = last.named_children[0] if last.type == "expression_statement" and last.named_child_count == 1 else None
    at = atomic_target(e, data) if e is not None else None
    fn = e.child_by_field_name("function") if e is not None else None
    if e is None or at is None or fn is None or node_text(fn, data) != "atomicAdd" or at[0] not in pointers:
        raise _No("the body does not end with one `atomicAdd` of the thread's partial into a parameter",
                  last, Stage.SCOPE)
    if at[1] is not None and not rd.uniform(at[1]):
        # one address for the whole grid: re-dealt elements move between threads and blocks
        raise _No(f"`{node_text(e, data)}` adds to an address that differs between threads: re-dealt elements "
                  "would be added to another thread's total", last, Stage.LEGALITY)
    acc = node_text(unparen(at[2]), data)
    loop = sts[-2]
    guard: Node | None = None
    acc_type = ""
    for st in sts[:-2]:
        d = single_decl(st, data)
        if d is not None and not d.pointer and not d.shared and d.value is not None:
            if d.name == acc:
                if not is_zero_literal(d.value, data):
                    # the loop's partial must start from the identity: it is spread over threads
                    raise _No(f"the partial `{acc}` does not start from 0, and re-dealt it would be added "
                              "once per thread", st, Stage.LEGALITY)
                acc_type = resolved_type(ctx, d.type)
                continue
            if d.name in rd.defs or d.name in names or _impure(d.value, data):
                raise _No(f"`{d.name}` is computed from memory or a call (the locals before the loop must be "
                          "arithmetic on the thread index and scalars)", st, Stage.SHAPE)
            rd.defs[d.name] = d.value
            continue
        if st.type == "if_statement" and st.child_by_field_name("alternative") is None:
            cons = st.child_by_field_name("consequence")
            c = condition_of(st)
            if c is not None and is_return_only(cons) and guard is None:
                guard = c
                continue
            clamp = _clamp(st, c, cons, data)
            if clamp is not None and clamp[0] in rd.defs and clamp[0] not in rd.clamp and rd.uniform(clamp[2]):
                rd.clamp[clamp[0]] = clamp[2]
                continue
        raise _No("a statement before the loop is neither a local, the partial, an early exit nor a clamp",
                  st, Stage.SHAPE)
    if acc_type not in SHUFFLE_TYPES:
        raise _No(f"the partial `{acc}` is not declared `= 0` before the loop with a type a shuffle moves",
                  loop, Stage.SHAPE)
    # every local is written only where it is declared (and a clamped one by its clamp)
    for name in rd.defs:
        if name in written_names(loop, data) or name in written_names(last, data):
            raise _No(f"`{name}` is changed inside the loop", loop, Stage.LEGALITY)
    shape = _loop(rd, loop, acc, acc_type, last, pointers - {at[0]}, guard)
    # the launch, once the shape is there (a launch note must not outrank a kernel this rule is not about)
    if not (is_1d(ctx, ctx.grid) and is_1d(ctx, ctx.block)):
        raise _No("the launch is not one-dimensional (grid and block must be 1-D to re-deal the sum)", None,
                  Stage.LAUNCH)
    blocks = dims_values(ctx, ctx.block)
    if not blocks or any(b[0] % 32 or b[0] > 1024 for b in blocks):
        raise _No("the block is not a multiple of 32 threads at every size of the spec (the block combine "
                  "needs whole warps)", None, Stage.LAUNCH)
    return shape


def _impure(n: Node, data: bytes) -> bool:
    """A value that reads memory, calls anything but pure math or has a side effect (locals must be pure
    arithmetic)."""
    return bool(call_names(n, data) - _PURE) or any(
        x.type in ("subscript_expression", "assignment_expression", "update_expression", "pointer_expression")
        for x in walk(n))


def _clamp(st: Node, c: Node | None, cons: Node | None, data: bytes) -> tuple[str, Node, Node] | None:
    """``if (v > N) v = N;`` (or ``N < v``): (v, the condition, N)."""
    if c is None or cons is None:
        return None
    b = binary_parts(c, data)
    inner = statements(cons)
    if b is None or len(inner) != 1 or inner[0].type != "expression_statement":
        return None
    a = inner[0].named_children[0] if inner[0].named_child_count == 1 else None
    if a is None or a.type != "assignment_expression":
        return None
    left, op, right = (a.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or node_text(op, data) != "=":
        return None
    v = node_text(unparen(left), data)
    if b[1] == ">":
        var, n = b[0], b[2]
    elif b[1] == "<":
        var, n = b[2], b[0]
    else:
        return None
    if unparen(var).type != "identifier" or node_text(unparen(var), data) != v \
            or not _same(node_text(n, data), node_text(right, data)):
        return None
    return v, c, n


def _loop(rd: _Reader, loop: Node, acc: str, acc_type: str, atomic: Node, readable: set[str],
          guard: Node | None) -> _Shape:
    data = rd.data
    if loop.type != "for_statement":
        raise _No("the statement before the atomicAdd is not a `for` loop", loop, Stage.SCOPE)
    init, cond, upd, body = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    d = single_decl(init, data) if init is not None else None
    if d is None or d.pointer or d.value is None or cond is None or upd is None or body is None:
        raise _No("the loop does not declare its counter in its header (`for (int i = ...; ...; ...)`)",
                  loop, Stage.SHAPE)
    i = d.name
    # the body: exactly ``acc += E`` / ``acc = acc + E``
    sts = statements(body)
    e = sts[0].named_children[0] if len(sts) == 1 and sts[0].type == "expression_statement" \
        and sts[0].named_child_count == 1 else None
    if e is None or e.type != "assignment_expression":
        raise _No(f"the loop body is more than `{acc} += ...`", body, Stage.SHAPE)
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or node_text(unparen(left), data) != acc:
        raise _No(f"the loop body updates something other than the atomic's partial `{acc}`", body,
                  Stage.SHAPE)
    term: Node | None = None
    if node_text(op, data) == "+=":
        term = right
    elif node_text(op, data) == "=":
        b = binary_parts(right, data)
        if b is not None and b[1] == "+":
            for x, y in ((b[0], b[2]), (b[2], b[0])):
                if node_text(unparen(x), data) == acc:
                    term = y
    if term is None:
        raise _No(f"the loop body is not a sum into `{acc}` (`{acc} += ...` or `{acc} = {acc} + ...`)", body,
                  Stage.SHAPE)
    _term_ok(rd, term, i, readable)
    # the index set
    cb = binary_parts(cond, data)
    if cb is None or cb[1] not in ("<", "<=") or node_text(unparen(cb[0]), data) != i:
        raise _No(f"the loop's condition is not `{i} < bound`", loop, Stage.SHAPE)
    hi, inclusive = cb[2], cb[1] == "<="
    step = unparen(upd)
    step_text = node_text(step, data).replace(" ", "")
    unit = any(g == i for m in [_INC.match(step_text)] if m for g in m.groups())
    kk = rd.chunk_start(d.value)
    if unit and kk is not None and not inclusive:
        n = _chunk_end(rd, hi, d.value, node_text(kk, data))
        if guard is not None and not _chunk_guard(rd, guard, d.value, n):
            raise _No("the early exit does not only skip threads whose chunk is empty", guard, Stage.LEGALITY)
        return _Shape(loop, i, d.type, acc, acc_type, term, atomic, "chunk", kk, n, False)
    if step.type == "assignment_expression" and node_text(step.child_by_field_name("operator") or step, data) == "+=":
        sl, sr = step.child_by_field_name("left"), step.child_by_field_name("right")
        mult = global_index(rd.resolve(d.value), data)
        if sl is not None and sr is not None and node_text(unparen(sl), data) == i and rd.is_tid(d.value) \
                and mult is not None and is_grid_stride(rd.resolve(sr), data, mult) and rd.uniform(hi) \
                and guard is None:
            return _Shape(loop, i, d.type, acc, acc_type, term, atomic, "stride", None, hi, inclusive)
    raise _No("each thread's elements are neither a chunk `t*K .. t*K+K` nor a grid stride from `t`", loop,
              Stage.SHAPE)


def _term_ok(rd: _Reader, term: Node, i: str, readable: set[str]) -> None:
    """E reads only ``i``, scalar parameters and buffers nothing writes, and calls only pure math."""
    data = rd.data
    if call_names(term, data) - _PURE:
        raise _No(f"the term added calls `{sorted(call_names(term, data) - _PURE)[0]}`, which may not be a pure "
                  "function of the element", term, Stage.LEGALITY)
    for x in walk(term):
        if x.type in ("assignment_expression", "update_expression"):
            raise _No("the term added writes a variable", term, Stage.LEGALITY)
        if x.type == "identifier":
            name = node_text(x, data)
            p = x.parent
            if p is not None and p.type == "call_expression" and p.child_by_field_name("function") == x:
                continue
            if name == i or name in rd.scalars or name in readable:
                continue
            raise _No(f"the term added reads `{name}`, which is not the loop counter, a scalar parameter or a "
                      "buffer the kernel never writes", x, Stage.LEGALITY)


def _chunk_end(rd: _Reader, hi: Node, start: Node, k: str) -> Node | None:
    """N when the loop's end is ``min(start + K, N)`` (as a clamped local or a call), None when it is
    ``start + K`` unclamped; anything else is not a chunk."""
    data = rd.data
    h = unparen(hi)
    clamp = rd.clamp.get(node_text(h, data)) if h.type == "identifier" else None
    v = rd.resolve(h) if clamp is None else unparen(rd.defs[node_text(h, data)])
    n = clamp
    fn = v.child_by_field_name("function") if v.type == "call_expression" else None
    if clamp is None and fn is not None and node_text(fn, data) in ("min", "::min"):
        args = v.child_by_field_name("arguments")
        xs = [a for a in args.named_children if a.type != "comment"] if args is not None else []
        if len(xs) != 2 or not rd.uniform(xs[1]):
            raise _No("the chunk's end is a `min` whose bound differs between threads", hi, Stage.SHAPE)
        v, n = rd.resolve(xs[0]), xs[1]
    b = binary_parts(v, data)
    if b is None or b[1] != "+":
        raise _No("the loop's end is not the chunk's start plus its length", hi, Stage.SHAPE)
    for s, kk in ((b[0], b[2]), (b[2], b[0])):
        if _same(node_text(kk, data), k) and _same(node_text(rd.resolve(s), data), node_text(rd.resolve(start), data)):
            return n
    raise _No("the loop's end is not the chunk's start plus its length", hi, Stage.SHAPE)


def _chunk_guard(rd: _Reader, guard: Node, start: Node, n: Node | None) -> bool:
    """``start >= N`` (or ``N <= start``) with the clamp's N: it only skips threads whose chunk is empty."""
    b = binary_parts(guard, rd.data)
    if b is None or n is None:
        return False
    if b[1] == ">=":
        s, nn = b[0], b[2]
    elif b[1] == "<=":
        s, nn = b[2], b[0]
    else:
        return False
    return _same(node_text(rd.resolve(s), rd.data), node_text(rd.resolve(start), rd.data)) \
        and _same(node_text(nn, rd.data), node_text(n, rd.data))


class StrideReduce(StructuralRule[_Shape]):
    family = "stride_reduce"
    structural = True
    motivated_by = ("WF103", "WF130", "uncoalesced", "atomics", "atomic_contention")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        out = {f"x{ACCUMULATORS}": Launch()}
        grid, block = dims_values(ctx, ctx.grid), dims_values(ctx, ctx.block)
        if not grid or not block or not _covers(ctx, shape, data, grid, block):
            return out
        per_sm = max(1, min(32, RESIDENT_PER_SM // block[0][0]))
        cap = ctx.sm_count * per_sm
        if any(g[0] > cap for g in grid):
            out[f"x{ACCUMULATORS}sm"] = Launch((f"min({ctx.grid[0]}, {cap})",))
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str | None:
        return _generate(shape, data, sized=param.endswith("sm"))

    def rationale(self, shape: _Shape, param: str) -> str:
        how = "chunks re-dealt as a grid stride" if shape.form == "chunk" else "the grid stride kept"
        grid = ", grid sized to the GPU" if param.endswith("sm") else ""
        return (f"coalesced walk ({how}), {ACCUMULATORS} partials of {shape.acc} per thread in flight, "
                f"one atomic per block{grid}")


def _covers(ctx: RuleContext, shape: _Shape, data: bytes, grid: list[tuple[int, ...]],
            block: list[tuple[int, ...]]) -> bool:
    """Whether the range is [0, N) whatever the thread count: a grid stride, or chunks of the spec's launch
    that reach N at every size the spec gives (T * K >= N)."""
    if shape.form == "stride":
        return True
    if shape.n is None or shape.k is None:
        return False
    es = envs(ctx)
    k = scalar_value_expr(ctx, shape.k, data)
    n = scalar_value_expr(ctx, shape.n, data)
    if es is None or k is None or n is None:
        return False
    for env, g, b in zip(es, grid, block, strict=True):
        kv, nv = eval_expr(k, env), eval_expr(n, env)
        if not isinstance(kv, int) or not isinstance(nv, int) or g[0] * b[0] * kv < nv:
            return False
    return True


def _generate(shape: _Shape, data: bytes, *, sized: bool) -> str:
    t, u, big = f"{PREFIX}T", f"{PREFIX}u", "long long"
    n = f"({big})({node_text(shape.n, data)}){' + 1' if shape.inclusive else ''}" if shape.n is not None else ""
    if shape.form == "chunk" and not sized:
        assert shape.k is not None
        span = f"{t} * ({big})({node_text(shape.k, data)})"
        end = f"{span} < {n} ? {span} : {n}" if n else span
    else:
        end = n
    parts = [f"{PREFIX}s{k}" for k in range(ACCUMULATORS)]
    term = node_text(shape.term, data)
    i, it = shape.var, shape.var_type

    def copy(k: int) -> str:
        at = f"{PREFIX}i" if k == 0 else f"{PREFIX}i + {k} * {t}"
        return f"{{\n    const {it} {i} = ({it})({at});\n    {parts[k]} += {term};\n}}"

    def ind(text: str) -> str:
        return "\n".join("    " + ln if ln else ln for ln in text.split("\n"))

    at = atomic_target(shape.atomic.named_children[0], data)
    assert at is not None
    args = shape.atomic.named_children[0].child_by_field_name("arguments")
    assert args is not None
    target = node_text(next(a for a in args.named_children if a.type != "comment"), data)
    typ, v = shape.acc_type, f"{PREFIX}v"
    lines = [
        f"const {big} {t} = ({big})gridDim.x * blockDim.x;",
        f"{big} {PREFIX}i = ({big})blockIdx.x * blockDim.x + threadIdx.x;",
        f"const {big} {u} = {end};  // the end of the range the threads' {shape.form}s covered",
        f"{typ} " + ", ".join(f"{p} = 0" for p in parts) + ";",
        f"// consecutive threads read consecutive elements; {ACCUMULATORS} independent partials in flight",
        f"for (; {PREFIX}i + {ACCUMULATORS - 1} * {t} < {u}; {PREFIX}i += {ACCUMULATORS} * {t}) {{",
        *(ind(copy(k)) for k in range(ACCUMULATORS)),
        "}",
        f"for (; {PREFIX}i < {u}; {PREFIX}i += {t}) {copy(0)}",
        f"{typ} {v} = ({parts[0]} + {parts[1]}) + ({parts[2]} + {parts[3]});",
        f"for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
        f"    {v} += __shfl_xor_sync({_FULL}, {v}, {PREFIX}o);",
        "}",
        f"__shared__ {typ} {PREFIX}warps[32];",
        f"if ((threadIdx.x & 31) == 0) {{\n    {PREFIX}warps[threadIdx.x >> 5] = {v};\n}}",
        "__syncthreads();",
        "if (threadIdx.x < 32) {",
        f"    {v} = threadIdx.x < (blockDim.x >> 5) ? {PREFIX}warps[threadIdx.x] : ({typ})0;",
        f"    for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{",
        f"        {v} += __shfl_xor_sync({_FULL}, {v}, {PREFIX}o);",
        "    }",
        "    if (threadIdx.x == 0) {",
        f"        atomicAdd({target}, {v});  // one atomic per block",
        "    }",
        "}",
    ]
    return "{\n" + ind("\n".join(lines)) + "\n}"


register(StrideReduce())
