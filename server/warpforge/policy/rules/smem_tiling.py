"""smem_tiling: shared-memory (and register) tiling of a kernel of matmul form.

Why it helps: a kernel computing one output per thread as a K-long dot product straight from global
memory loads every input element once per output that uses it (N times for A, M times for B), so it is
bound by load bandwidth and latency, not arithmetic. Staging a BM×BK tile of A and a BK×BN tile of B in
shared memory lets a block reuse each loaded element BM (or BN) times; giving each thread a TM×TN block of
outputs in registers reuses each shared-memory value TM (or TN) times more, so the inner loop does TM·TN
fused multiply-adds per TM+TN shared loads.

What the analysis requires (on the kernel's top-level statements; the offline policy also hands the rule
the canonical form, so a guarded body, typedefs and index macros are seen as their plain equivalents):

* the 2-D output index: ``x = blockIdx.x * blockDim.x + threadIdx.x`` and the same along y, each declared
  once and never written;
* one **k-loop** ``for (k = S; k < KB; ++k) acc += P[IP] * Q[IQ];`` (also ``acc = acc + P * Q``,
  ``acc = fmaf(P, Q, acc)``): the loop carries nothing but the sum; ``acc`` is a local whose start value,
  like ``S`` and ``KB``, is the same for every thread of a block (**uniform**: made of scalar parameters,
  literals, ``blockIdx.z`` and locals of those);
* by following every local the two reads depend on (``const float* qi = q + head_off + i * D`` included),
  one read varies with y and k but not x (staged as the A tile), the other with x and k but not y (the B
  tile), both from pointer parameters nothing in the kernel writes (the output does not alias an operand);
* before the loop only declarations with pure values, exits ``if (C) return;`` and **masks**
  ``if (C) { stores; return; }``; a uniform exit or declaration (a batch index ``p = blockIdx.z`` and its
  ``if (p >= batch) return;``) comes before any store; among the exit terms one bounds y alone and one x
  alone (so a block never loads rows or columns the kernel never reads); after the loop any **epilogue**
  (bias, activation, scaling, alpha/beta, stores) that does not synchronize or read the thread coordinates
  (``blockIdx.z`` excepted).

What it declines, besides anything else: a written operand (in place), a loop carrying a second value or
a conditional update, a k-bound or start that differs between threads (triangular loops), a local that
feeds the tiles or is hoisted and is written, thread coordinates used outside the index declarations,
``threadIdx.z`` / 3-D blocks, existing shared memory or collectives.

The rewrite: a block computes a BM×BN tile of outputs; the uniform statements run first, in their order;
for each BK-slice of k it loads the A tile (the read, with ``y`` = block row + r, ``k`` = k0 + c and the
locals it depends on recomputed from them) and the B tile cooperatively into shared memory, each load
predicated by the exit terms on y (x) and the loop condition (zeros outside: adding 0·0 leaves a sum
unchanged). Threads load along whichever of the two indices the address is contiguous in (evaluated at the
spec's sizes), so an operand read ``B[n * K + k]`` (transposed) is loaded along k into a padded tile. Then
every thread accumulates its TM×TN outputs; ``__syncthreads`` after the loads and after the compute. The
summation order over k is the original one. Finally each of a thread's outputs runs the kernel's own
statements, as written, in a lambda (``[&]() { ... }()``): the exits and masks return from it, the
accumulator's declaration takes the tiled sum, the epilogue follows, so bias, activation, mask values and
alpha/beta are computed exactly as before.

**Masks at tile granularity**: when an exit's term is a linear comparison of x and y (``j > i``: the causal
mask), it holds for a whole tile exactly when it holds at the tile's four corners (a half-plane is convex);
a block whose tile is entirely masked skips the loads and the k-loop (uniformly: the test reads only block
indices and uniform values) and only runs the per-output statements, which take the mask's branch.

Launch: grid ``(cdiv(NX, BN), cdiv(NY, BM)[, the original grid's z])`` with NX, NY the bounds in spec terms
(or the extent the original launch covered); declined if the original launch covered fewer outputs than the
bound admits. Variants: ``t16``/``t32`` (one output per thread), ``t32r4`` (4 outputs per thread along y),
``t64r4x4`` and ``t128r8x8`` (4×4 and 8×8 outputs per thread, 256 threads). Thread (tx, ty) owns outputs
y = ty + i·(BM/TM), x = tx + j·(BN/TN): consecutive threads take consecutive columns, so tile reads are
conflict-free and epilogue stores coalesce.

This module holds the analysis and the rule; the shape it finds, the contiguity of the operands and the code
it writes are in ``_tiling_emit``. A kernel it declines for want of a bound on x and y (a launch that covers the
matrix exactly) is staged by ``smem_stage`` on the kernel IR instead.
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.tree import node_text, walk
from . import register
from ._structural import (
    Bound,
    Decl,
    all_names,
    condition_of,
    declared_names,
    dims_values,
    envs,
    failing_bound,
    global_index,
    has_collective,
    is_ident,
    is_return_only,
    launch_ok,
    resolved_type,
    scalar_value_expr,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from ._structural_rule import Launch, StructuralRule
from ._tiling_emit import PREFIX, _contiguity, _generate, _Operand, _Shape
from ._util import eval_expr, kernel_body, macro_values
from .base import RuleContext

#: param -> (BM, BN, BK, TM, TN)
#: most promising first: a search that can afford one variant of a family tries the register-tiled 64×64
#: tile (4×4 outputs per thread), the usual sweet spot for mid-size matrices; 128×128 suits large ones
VARIANTS: dict[str, tuple[int, int, int, int, int]] = {
    "t64r4x4": (64, 64, 16, 4, 4),
    "t32r4": (32, 32, 32, 4, 1),
    "t128r8x8": (128, 128, 8, 8, 8),
    "t32": (32, 32, 32, 1, 1),
    "t16": (16, 16, 16, 1, 1),
}
_ELEM = frozenset({"float", "double", "int", "unsigned", "unsigned int"})
#: index types whose arithmetic does not wrap at small values (the corner test of a mask needs that)
_SIGNED = frozenset({"int", "long", "long long", "long int", "long long int", "int32_t", "int64_t", "ptrdiff_t",
                     "signed", "signed int"})
#: coordinates the rewrite leaves as they were (the launch keeps the grid's z; blocks stay 1 deep)
_KEPT = frozenset({"blockIdx.z", "gridDim.z"})
_COORD_NAMES = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_FMA = frozenset({"fmaf", "fma", "__fmaf_rn", "__fma_rn"})
#: dependence markers: the two output coordinates and the loop variable
_X, _Y, _K = "\x00x", "\x00y", "\x00k"


class _Reject(Exception):
    """Not of matmul form, or a precondition does not hold (internal control flow of the analysis)."""



def _ids(node: Node, data: bytes) -> set[str]:
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def _coords(node: Node, data: bytes) -> set[str]:
    """Thread coordinates a subtree reads, as ``blockIdx.x`` text."""
    out: set[str] = set()
    for n in walk(node, ("field_expression",)):
        arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        if arg is not None and fld is not None and node_text(arg, data) in ("threadIdx", "blockIdx", "blockDim",
                                                                             "gridDim"):
            out.add(f"{node_text(arg, data)}.{node_text(fld, data)}")
    return out


def _terms(node: Node, data: bytes, op: str) -> list[Node]:
    n = unparen(node)
    if n.type == "binary_expression":
        o = n.child_by_field_name("operator")
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if o is not None and left is not None and right is not None and node_text(o, data) == op:
            return _terms(left, data, op) + _terms(right, data, op)
    return [n]


class _Analysis:
    def __init__(self, ctx: RuleContext, body: Node, data: bytes) -> None:
        k = ctx.cand_kernel
        assert k is not None
        self.ctx = ctx
        self.data = data
        self.body = body
        self.params = {p.name: p for p in k.params}
        self.types = {t.name for t in k.template_params}
        #: object-like macros of the file and math.h's: constants
        self.macros = set(macro_values(ctx)) | {"INFINITY", "NAN", "HUGE_VALF", "FLT_MAX", "DBL_MAX"}
        #: local name -> its declaration; local -> what it depends on (markers and non-uniform locals)
        self.decls: dict[str, Decl] = {}
        self.deps: dict[str, set[str]] = {}
        #: pointer name -> the pointer parameter it points into
        self.root: dict[str, str] = {p.name: p.name for p in k.params if p.pointer_depth == 1 and not p.array_dims}

    # ------------------------------------------------------------------ dependences
    def depends(self, node: Node) -> set[str]:
        """The markers (x, y, k) and non-uniform locals an expression depends on; raises on what the rewrite
        cannot move (thread coordinates, assignments, calls other than functional casts)."""
        data = self.data
        out: set[str] = set()
        bad = _coords(node, data) - _KEPT
        if bad:
            raise _Reject
        for n in walk(node):
            if n.type in ("assignment_expression", "update_expression", "lambda_expression"):
                raise _Reject
            if n.type == "call_expression":
                fn = n.child_by_field_name("function")
                name = node_text(fn, data) if fn is not None else ""
                if name not in self.types and name not in _ELEM:
                    raise _Reject
            if n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*"):
                raise _Reject
        for name in _ids(node, data):
            if name in self.deps:
                d = self.deps[name]
                out |= d
                if d:
                    out.add(name)
            elif name not in self.params and name not in self.types and name not in self.macros \
                    and name not in _COORD_NAMES:
                raise _Reject  # a name declared later, in a loop, or a global: not followed
        return out

    # ------------------------------------------------------------------ shape
    def run(self) -> _Shape:
        data = self.data
        k = self.ctx.cand_kernel
        assert k is not None
        body = self.body
        if any(n.startswith(PREFIX) for n in all_names(body, data)) or has_collective(body, data) \
                or any(n.type == "__shared__" for n in walk(body)):
            raise _Reject
        if declared_names(body, data) & set(self.params):
            raise _Reject  # a local shadowing a parameter
        items = statements(body)
        guard: Node | None = None
        guard_at = -1
        if items and items[-1].type == "if_statement" and items[-1].child_by_field_name("alternative") is None \
                and any(n.type == "for_statement" for n in walk(items[-1])):
            guard, guard_at = items[-1], len(items) - 1
            items = items[:-1] + statements(guard.child_by_field_name("consequence"))
        x = y = acc = None
        loop_at = next((i for i, st in enumerate(items) if st.type == "for_statement"), None)
        if loop_at is None:
            raise _Reject
        loop = items[loop_at]
        acc_name, kd, k_cond, prod, fma = self._loop(loop)
        written = written_names(body, data)
        hoisted: list[Node] = []
        exits: list[tuple[Node, bool]] = []  # (term, from a guard's conjunction: the term passes)
        stored = False
        if guard is not None:
            cond = condition_of(guard)
            if cond is None:
                raise _Reject
            exits.extend((t, True) for t in _terms(cond, data, "&&"))
        for at, st in enumerate(items[:loop_at]):
            if guard is not None and at >= guard_at:
                stored = True  # the guard's exit is taken in the per-output code, where it stands
            if acc is not None and acc.name in _ids(st, data):
                raise _Reject  # the accumulator read before the loop
            d = single_decl(st, data)
            if st.type == "declaration":
                if d is None or d.shared or d.value is None:
                    raise _Reject
                if d.name == acc_name:
                    if d.pointer or self.depends(d.value) or acc is not None:
                        raise _Reject
                    acc = d
                    self.deps[d.name] = set()
                    continue
                if global_index(d.value, data, "x") == "blockDim.x" and x is None and not d.pointer:
                    x, self.deps[d.name] = d, {_X}
                    continue
                if global_index(d.value, data, "y") == "blockDim.y" and y is None and not d.pointer:
                    y, self.deps[d.name] = d, {_Y}
                    continue
                dep = self.depends(d.value)
                if d.name in written:
                    raise _Reject
                if d.pointer:
                    self._pointer(d)
                self.decls[d.name] = d
                self.deps[d.name] = dep
                if not dep:
                    hoisted.append(st)
                continue
            if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
                raise _Reject
            cond = condition_of(st)
            if cond is None:
                raise _Reject
            dep = self.depends(cond)
            if is_return_only(st.child_by_field_name("consequence")):
                if not dep and not stored:
                    hoisted.append(st)  # a whole block leaves, before anything is stored
                    continue
            else:
                self._mask_body(st)
                stored = True
            exits.extend((t, False) for t in _terms(cond, data, "||"))
        if x is None or y is None or acc is None:
            raise _Reject
        for st in items[loop_at + 1 :]:
            if has_collective(st, data) or _coords(st, data) - _KEPT or any(
                    n.type in ("lambda_expression", "goto_statement", "labeled_statement") for n in walk(st)):
                raise _Reject
        if {x.name, y.name} & written or acc_name in {w for st in items[:loop_at] for w in written_names(st, data)}:
            raise _Reject
        a, b, a_first = self._operands(prod, kd.name)
        b.kfast = False  # unless the addresses say otherwise: A along k, B along x (row-major operands)
        shape = _Shape(x, y, acc, loop, kd, k_cond, a, b, a_first, fma, hoisted, items, guard, guard_at)
        self._bounds(shape, exits)
        for o, locs in ((a, shape.y_locals), (b, shape.x_locals)):
            for name in o.locals_:
                if name not in locs:
                    locs.append(name)
        self._writes(shape)
        return shape

    def _loop(self, loop: Node) -> tuple[str, Decl, Node, Node, str]:
        """The k-loop: (accumulator, loop variable, condition, the product node, fma name or "")."""
        data = self.data
        init, cond, upd, lbody = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update",
                                                                         "body"))
        if init is None or cond is None or upd is None or lbody is None:
            raise _Reject
        kd = single_decl(init, data)
        if kd is None or kd.value is None or kd.pointer:
            raise _Reject
        kv = kd.name
        kb = upper_bound(cond, data, kv)
        if kb is None or node_text(unparen(upd), data).replace(" ", "") not in (f"{kv}++", f"++{kv}", f"{kv}+=1",
                                                                                   f"{kv}={kv}+1"):
            raise _Reject
        sts = statements(lbody)
        if len(sts) != 1 or sts[0].type != "expression_statement" or sts[0].named_child_count != 1:
            raise _Reject  # the loop carries something besides the sum
        e = sts[0].named_children[0]
        if e.type != "assignment_expression":
            raise _Reject
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None or not is_ident(left, data):
            raise _Reject
        acc = node_text(unparen(left), data)
        o = node_text(op, data)
        r = unparen(right)
        prod: Node | None = None
        fma = ""
        if o == "+=":
            prod = r
        elif o == "=" and r.type == "binary_expression":
            bo, bl, br = (r.child_by_field_name(f) for f in ("operator", "left", "right"))
            if bo is not None and bl is not None and br is not None and node_text(bo, data) == "+":
                if is_ident(bl, data, acc):
                    prod = unparen(br)
                elif is_ident(br, data, acc):
                    prod = unparen(bl)
        elif o == "=" and r.type == "call_expression":
            fn, args = r.child_by_field_name("function"), r.child_by_field_name("arguments")
            xs = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if fn is not None and node_text(fn, data) in _FMA and len(xs) == 3 and is_ident(xs[2], data, acc):
                prod, fma = r, node_text(fn, data)
        if prod is None:
            raise _Reject
        return acc, kd, cond, prod, fma

    def _pointer(self, d: Decl) -> None:
        """``T* p = base + offset`` (offsets added on either side, any number): p points into base's root."""
        data = self.data
        assert d.value is not None
        bases = [t for t in _terms(d.value, data, "+") if t.type == "identifier" and node_text(t, data) in self.root]
        if len(bases) != 1:
            raise _Reject
        self.root[d.name] = self.root[node_text(bases[0], data)]

    def _mask_body(self, st: Node) -> None:
        """``{ p[E] = v; ...; return; }``: stores of values computed from what the exit may read, then leave."""
        data = self.data
        sts = statements(st.child_by_field_name("consequence"))
        if not sts or sts[-1].type != "return_statement" or sts[-1].named_child_count:
            raise _Reject
        for s in sts[:-1]:
            e = s.named_children[0] if s.type == "expression_statement" and s.named_child_count == 1 else None
            if e is None or e.type != "assignment_expression":
                raise _Reject
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            parts = subscript_parts(left, data) if left is not None else None
            if parts is None or right is None:
                raise _Reject
            self.depends(parts[1])
            self.depends(right)

    def _operands(self, prod: Node, kv: str) -> tuple[_Operand, _Operand, bool]:
        data = self.data
        if prod.type == "call_expression":
            args = prod.child_by_field_name("arguments")
            assert args is not None
            xs = [c for c in args.named_children if c.type != "comment"]
            p1, p2 = xs[0], xs[1]
        else:
            if prod.type != "binary_expression":
                raise _Reject
            pop, q1, q2 = (prod.child_by_field_name(f) for f in ("operator", "left", "right"))
            if pop is None or q1 is None or q2 is None or node_text(pop, data) != "*":
                raise _Reject
            p1, p2 = q1, q2
        self.deps[kv] = {_K}
        o1, o2 = self._operand(p1), self._operand(p2)
        d1, d2 = self._operand_deps(o1), self._operand_deps(o2)
        del self.deps[kv]
        if not ({_K} <= d1 and {_K} <= d2):
            raise _Reject
        if _Y in d1 and _X not in d1 and _X in d2 and _Y not in d2:
            return o1, o2, True
        if _Y in d2 and _X not in d2 and _X in d1 and _Y not in d1:
            return o2, o1, False
        raise _Reject

    def _operand(self, node: Node) -> _Operand:
        data = self.data
        parts = subscript_parts(node, data)
        if parts is None or not is_ident(parts[0], data):
            raise _Reject
        name = node_text(unparen(parts[0]), data)
        root = self.root.get(name)
        if root is None:
            raise _Reject
        p = self.params[root]
        if resolved_type(self.ctx, p.type) not in _ELEM:
            raise _Reject
        if any(n.type == "subscript_expression" for n in walk(parts[1])):
            raise _Reject
        return _Operand(name, root, p.type, unparen(node), [])

    def _operand_deps(self, o: _Operand) -> set[str]:
        dep = self.depends(o.node)
        o.locals_ = [n for n in self.deps if n in dep and self.deps[n] and n in self.decls]
        return {d for d in dep if d in (_X, _Y, _K)}

    def _bounds(self, shape: _Shape, exits: list[tuple[Node, bool]]) -> None:
        """Sort the exit terms: on y alone (A-load predicate), x alone (B-load), both (masks), neither."""
        data = self.data
        x, y = shape.x.name, shape.y.name
        for term, passes in exits:
            dep = self.depends(term)
            marks = {d for d in dep if d in (_X, _Y)}
            text = node_text(term, data)
            ok = text if passes else f"!({text})"
            locs = [n for n in self.deps if n in dep and self.deps[n] and n in self.decls]
            if marks == {_Y}:
                shape.y_ok.append(ok)
                shape.y_locals.extend(n for n in locs if n not in shape.y_locals)
                b = (upper_bound if passes else failing_bound)(term, data, y)
                if b is not None and shape.y_bound is None:
                    shape.y_bound = b
            elif marks == {_X}:
                shape.x_ok.append(ok)
                shape.x_locals.extend(n for n in locs if n not in shape.x_locals)
                b = (upper_bound if passes else failing_bound)(term, data, x)
                if b is not None and shape.x_bound is None:
                    shape.x_bound = b
            elif not marks:
                shape.y_ok.append(ok)
                shape.x_ok.append(ok)
            elif not passes and self._linear_compare(term, shape):
                shape.masks.append(term)
        if shape.y_bound is None or shape.x_bound is None:
            raise _Reject  # loads of a block could reach rows or columns the kernel never reads
        assert shape.k.value is not None
        self.deps[shape.k.name] = set()
        k_ids = self.depends(shape.k_cond)
        del self.deps[shape.k.name]
        if k_ids or self.depends(shape.k.value):
            raise _Reject  # the k-range differs between threads of a block

    def _linear_compare(self, term: Node, shape: _Shape) -> bool:
        """``L op R`` with L - R linear in x and y over uniform values, on signed index types."""
        data = self.data
        if resolved_type(self.ctx, shape.x.type) not in _SIGNED or resolved_type(self.ctx, shape.y.type) not in _SIGNED:
            return False
        if term.type != "binary_expression":
            return False
        op, left, right = (term.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op is None or left is None or right is None or node_text(op, data) not in ("<", "<=", ">", ">="):
            return False
        coord = {shape.x.name, shape.y.name}

        def linear(n: Node) -> bool:
            n = unparen(n)
            if n.type == "number_literal":
                return True
            if n.type == "identifier":
                name = node_text(n, data)
                return name in coord or (name in self.params and not self.params[name].is_pointer) or (
                    name in self.deps and not self.deps[name] and not self.decls[name].pointer
                    if name in self.decls else False)
            if n.type == "unary_expression":
                o = n.child_by_field_name("operator")
                a = n.child_by_field_name("argument")
                return o is not None and a is not None and node_text(o, data) in ("-", "+") and linear(a)
            if n.type == "binary_expression":
                o, a, b = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
                if o is None or a is None or b is None:
                    return False
                if node_text(o, data) in ("+", "-"):
                    return linear(a) and linear(b)
                if node_text(o, data) == "*":
                    return linear(a) and linear(b) and not (_ids(a, data) & coord and _ids(b, data) & coord)
            return False

        return linear(left) and linear(right)

    def _writes(self, shape: _Shape) -> None:
        """No store may reach an operand (in place), and every store's target must be known."""
        data = self.data
        for n in walk(self.body):
            target: Node | None = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is None:
                continue
            t = unparen(target)
            if t.type == "identifier":
                if node_text(t, data) in self.root:
                    raise _Reject  # a pointer moved: what it points into is no longer followed
                continue
            parts = subscript_parts(t, data)
            if parts is None or not is_ident(parts[0], data):
                raise _Reject
            root = self.root.get(node_text(unparen(parts[0]), data))
            if root is None or root in (shape.a.root, shape.b.root):
                raise _Reject
        written = written_names(self.body, data)
        for name in self.decls:
            if not self.deps[name] and name in written:
                raise _Reject  # hoisted locals are shared by all of a thread's outputs



# ----------------------------------------------------------------------------- the rule


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    an = _Analysis(ctx, body, data)
    try:
        shape = an.run()
    except _Reject:
        return None
    _contiguity(an, shape)
    return shape, data


def _extent(ctx: RuleContext, b: Bound, data: bytes, axis: int) -> str | None:
    """How many outputs a bound admits along ``axis`` in spec terms; None when the original launch covered
    fewer (the tiled grid would compute outputs the kernel never wrote) or it cannot be told."""
    cover = f"({ctx.grid[axis]}) * ({ctx.block[axis]})" if len(ctx.grid) > axis and len(ctx.block) > axis else None
    lim = scalar_value_expr(ctx, b.limit, data)
    if lim is None:
        return cover
    ext = f"{lim} + 1" if b.inclusive else lim
    es = envs(ctx)
    if cover is None or es is None:
        return None
    for env in es:
        e, c = eval_expr(ext, env), eval_expr(cover, env)
        if not isinstance(e, int) or not isinstance(c, int) or c < e:
            return None
    return ext


class SmemTiling(StructuralRule[_Shape]):
    family = "smem_tiling"
    structural = True
    motivated_by = ("smem_tiling", "data_reuse")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        g, b = dims_values(ctx, ctx.grid), dims_values(ctx, ctx.block)
        if g is None or b is None or any(v[2] != 1 for v in b) or len(ctx.block) > 2:
            return {}
        assert shape.x_bound is not None and shape.y_bound is not None
        nx = _extent(ctx, shape.x_bound, data, 0)
        ny = _extent(ctx, shape.y_bound, data, 1)
        if nx is None or ny is None:
            return {}
        z = (ctx.grid[2],) if len(ctx.grid) > 2 else ()
        out: dict[str, Launch] = {}
        for param, (bm, bn, _bk, tm, tn) in VARIANTS.items():
            grid = (f"cdiv({nx}, {bn})", f"cdiv({ny}, {bm})", *z)
            block = (str(bn // tn), str(bm // tm))
            if launch_ok(ctx, grid, block):
                out[param] = Launch(grid, block)
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, data, *VARIANTS[param])

    def rationale(self, shape: _Shape, param: str) -> str:
        bm, bn, bk, tm, tn = VARIANTS[param]
        per = f", {tm}x{tn} outputs per thread in registers" if tm * tn > 1 else ""
        skip = "; tiles inside the mask skip the loads" if shape.masks else ""
        return (f"stage {bm}x{bk} tiles of {shape.a.array} and {bk}x{bn} tiles of {shape.b.array} in shared "
                f"memory ({bm}x{bn} outputs per block{per}){skip}")



register(SmemTiling())
