"""The analysis of smem_tiling: whether a kernel is of matmul form, read on its statements (see the package's
docstring for what it requires); every decline is a ``_Reject`` carrying the precondition in words."""


from __future__ import annotations

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    Decl,
    all_names,
    condition_of,
    declared_names,
    failing_bound,
    global_index,
    has_collective,
    is_ident,
    is_return_only,
    resolved_type,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from .._util import macro_values
from .._why import Stage
from ..base import RuleContext
from .emit import PREFIX, _Operand, _Shape

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
    """Not of matmul form, or a precondition does not hold: the precondition in words and where it fails (internal
    control flow of the analysis; ``_analyse`` turns it into the rule's decline note)."""

    def __init__(self, reason: str, node: Node | None = None, stage: Stage = Stage.SHAPE) -> None:
        super().__init__(reason)
        self.reason, self.node, self.stage = reason, node, stage



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


def _ancestors(node: Node, stop: Node) -> list[Node]:
    """The nodes strictly between ``node`` and ``stop`` (its ancestor)."""
    out: list[Node] = []
    cur = node.parent
    while cur is not None and cur.id != stop.id:
        out.append(cur)
        cur = cur.parent
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
        #: the output coordinates some exit term reads (a bound of the launch's extent is taken only on an axis no
        #: exit tests: otherwise a tile could load columns the kernel never reads, past the buffer's end)
        self.tested: set[str] = set()
        #: a local of the loop body -> the one read it names (``float a = A[m + i * lda];``)
        self.loop_reads: dict[str, Node] = {}

    # ------------------------------------------------------------------ dependences
    def depends(self, node: Node) -> set[str]:
        """The markers (x, y, k) and non-uniform locals an expression depends on; raises on what the rewrite
        cannot move (thread coordinates, assignments, calls other than functional casts)."""
        data = self.data
        out: set[str] = set()
        bad = _coords(node, data) - _KEPT
        if bad:
            raise _Reject(f"`{node_text(node, data)}` reads a thread coordinate ({', '.join(sorted(bad))}) outside the "
                          "index declarations: the rewrite moves threads", node)
        for n in walk(node):
            if n.type in ("assignment_expression", "update_expression", "lambda_expression"):
                raise _Reject(f"`{node_text(n, data)}` writes inside an expression the rewrite recomputes per tile "
                              "element", n)
            if n.type == "call_expression":
                fn = n.child_by_field_name("function")
                name = node_text(fn, data) if fn is not None else ""
                if name not in self.types and name not in _ELEM:
                    raise _Reject(f"`{node_text(n, data)}` calls `{name}`, which the rewrite cannot recompute per tile "
                                  "element", n)
            if n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*"):
                raise _Reject("a pointer dereference `*p` is not an array read the rewrite can follow", n)
        for name in _ids(node, data):
            if name in self.deps:
                d = self.deps[name]
                out |= d
                if d:
                    out.add(name)
            elif name not in self.params and name not in self.types and name not in self.macros \
                    and name not in _COORD_NAMES:
                raise _Reject(f"`{name}` is declared later, in a loop, or outside the kernel: the rewrite does not "
                              "follow it", node)
        return out

    # ------------------------------------------------------------------ shape
    def run(self) -> _Shape:
        data = self.data
        k = self.ctx.cand_kernel
        assert k is not None
        body = self.body
        if any(n.startswith(PREFIX) for n in all_names(body, data)) or has_collective(body, data) \
                or any(n.type == "__shared__" for n in walk(body)):
            raise _Reject("the kernel already uses shared memory or collectives: the tiles' barriers would interleave "
                          "with them", None, Stage.SCOPE)
        if declared_names(body, data) & set(self.params):
            raise _Reject("a local shadows a parameter")
        items = statements(body)
        guard: Node | None = None
        guard_at = -1
        if items and items[-1].type == "if_statement" and items[-1].child_by_field_name("alternative") is None \
                and any(n.type == "for_statement" for n in walk(items[-1])):
            guard, guard_at = items[-1], len(items) - 1
            items = items[:-1] + statements(guard.child_by_field_name("consequence"))
        x = y = acc = None
        acc_after = False  # the accumulator starts at a value of its own output: the tiled sum is added to it
        loop_at = next((i for i, st in enumerate(items) if st.type == "for_statement"), None)
        if loop_at is None:
            raise _Reject("no serial loop at the top level of the body (or inside its one guard)", None, Stage.SCOPE)
        loop = items[loop_at]
        acc_name, kd, k_cond, prod, fma = self._loop(loop)
        written = written_names(body, data)
        hoisted: list[Node] = []
        exits: list[tuple[Node, bool]] = []  # (term, from a guard's conjunction: the term passes)
        stored = False
        if guard is not None:
            cond = condition_of(guard)
            if cond is None:
                raise _Reject("the guard has no condition", guard)
            exits.extend((t, True) for t in _terms(cond, data, "&&"))
        for at, st in enumerate(items[:loop_at]):
            if guard is not None and at >= guard_at:
                stored = True  # the guard's exit is taken in the per-output code, where it stands
            if acc is not None and acc.name in _ids(st, data):
                raise _Reject(f"the accumulator `{acc.name}` is read before its loop", st)
            d = single_decl(st, data)
            if st.type == "declaration":
                if d is None or d.shared or d.value is None:
                    raise _Reject("a declaration before the loop is not one variable with a value", st)
                if d.name == acc_name:
                    if d.pointer or acc is not None:
                        raise _Reject(f"the accumulator `{acc_name}` is a pointer or declared twice", st)
                    acc_after = bool(self.depends(d.value))
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
                    raise _Reject(f"the local `{d.name}` feeds the tiles or the outputs and is written later: each "
                                  "output needs its value as it was", st)
                if d.pointer:
                    self._pointer(d)
                self.decls[d.name] = d
                self.deps[d.name] = dep
                if not dep:
                    hoisted.append(st)
                continue
            if st.type == "expression_statement":
                self._store(st)  # ``c[i*n+j] *= beta;``: runs once per output, where it stands
                stored = True
                continue
            if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
                raise _Reject("a statement before the loop is not a declaration, an exit `if (C) return;`, a mask "
                              "`if (C) { stores; return; }` or a store `P[i] op= v`", st)
            cond = condition_of(st)
            if cond is None:
                raise _Reject("the exit has no condition", st)
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
            raise _Reject("the kernel's 2-D output index `x = blockIdx.x * blockDim.x + threadIdx.x` (and the same "
                          "along y) or a scalar accumulator declared before the loop is missing")
        for st in items[loop_at + 1 :]:
            if has_collective(st, data) or _coords(st, data) - _KEPT or any(
                    n.type in ("lambda_expression", "goto_statement", "labeled_statement") for n in walk(st)):
                raise _Reject("a statement after the loop synchronizes, reads a thread coordinate or jumps: it cannot "
                              "run once per output", st)
        if {x.name, y.name} & written or acc_name in {w for st in items[:loop_at] for w in written_names(st, data)}:
            raise _Reject("an output coordinate is written, or the accumulator is written before its loop")
        if not fma and acc_name in _ids(prod, data):
            raise _Reject(f"the accumulator `{acc_name}` is read in its own term", prod)
        a, b, a_first, more = self._operands(prod, kd.name)
        b.kfast = False  # unless the addresses say otherwise: A along k, B along x (row-major operands)
        shape = _Shape(x, y, acc, loop, kd, k_cond, a, b, a_first, fma, hoisted, items, guard, guard_at,
                       term=None if fma else prod, acc_after=acc_after,
                       named=dict(self.loop_reads), more=more)
        self._bounds(shape, exits)
        for o, locs in ((a, shape.y_locals), (b, shape.x_locals),
                        *((o, shape.y_locals if side else shape.x_locals) for o, side in more)):
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
            raise _Reject("the loop does not start, test and step its counter in its header", loop)
        kd = single_decl(init, data)
        if kd is None or kd.value is None or kd.pointer:
            # a spelling the canonical form rewrites (the counter moved into its ``for``): ranked below what the
            # canonical form's analysis says, so the "why not" names the substantive reason
            raise _Reject("the loop counter is not declared in the loop's header with a start value", loop, Stage.SCOPE)
        kv = kd.name
        kb = upper_bound(cond, data, kv)
        if kb is None or node_text(unparen(upd), data).replace(" ", "") not in (f"{kv}++", f"++{kv}", f"{kv}+=1",
                                                                                   f"{kv}={kv}+1"):
            raise _Reject(f"the loop is not `for ({kv} = s; {kv} < b; {kv}++)`: it steps otherwise or its bound is not "
                          "an upper bound", loop)
        sts = statements(lbody)
        while len(sts) > 1 and sts[0].type == "declaration":
            # ``float a = A[..]; float b = B[..]; c += a * b;``: a name for one read, used in the update
            d = single_decl(sts[0], data)
            if d is None or d.pointer or d.shared or d.value is None \
                    or unparen(d.value).type != "subscript_expression" or d.name in self.loop_reads:
                raise _Reject("a declaration in the loop's body is not a name for one array read `T v = P[i];`", sts[0])
            self.loop_reads[d.name] = unparen(d.value)
            sts = sts[1:]
        if len(sts) != 1 or sts[0].type != "expression_statement" or sts[0].named_child_count != 1:
            raise _Reject("the loop's body is more than one update `acc += term`: it carries something besides the "
                          "sum", lbody)
        e = sts[0].named_children[0]
        if e.type != "assignment_expression":
            raise _Reject("the loop's statement is not an update `acc += term`", sts[0])
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None or not is_ident(left, data):
            raise _Reject("the loop's update is not of a scalar accumulator (a global one the canonical form could "
                          "not keep in a register)", e)
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
            raise _Reject("the loop's update is not `acc += term`, `acc = acc + term` or `acc = fma(p, q, acc)`", e)
        return acc, kd, cond, prod, fma

    def _store(self, st: Node) -> None:
        """``P[E] op= v;`` before the loop: a store of the thread's own that runs, per output, where it stands
        (``c[i * n + j] *= beta;``); ``_writes`` checks that it does not reach an operand."""
        data = self.data
        e = unparen(st.named_children[0]) if st.named_child_count == 1 else None
        left = e.child_by_field_name("left") if e is not None and e.type == "assignment_expression" else None
        right = e.child_by_field_name("right") if e is not None else None
        parts = subscript_parts(left, data) if left is not None else None
        if parts is None or right is None or not is_ident(parts[0], data):
            raise _Reject("a statement before the loop is not a declaration, an exit `if (C) return;`, a mask "
                          "`if (C) { stores; return; }` or a store `P[i] op= v`", st)
        self.depends(parts[1])
        self.depends(right)

    def _pointer(self, d: Decl) -> None:
        """``T* p = base + offset`` (offsets added on either side, any number): p points into base's root."""
        data = self.data
        assert d.value is not None
        bases = [t for t in _terms(d.value, data, "+") if t.type == "identifier" and node_text(t, data) in self.root]
        if len(bases) != 1:
            raise _Reject("a local pointer is not `base + offsets` of exactly one pointer parameter")
        self.root[d.name] = self.root[node_text(bases[0], data)]

    def _mask_body(self, st: Node) -> None:
        """``{ p[E] = v; ...; return; }``: stores of values computed from what the exit may read, then leave."""
        data = self.data
        sts = statements(st.child_by_field_name("consequence"))
        if not sts or sts[-1].type != "return_statement" or sts[-1].named_child_count:
            raise _Reject("a mask before the loop is not `if (C) { stores; return; }`", st)
        for s in sts[:-1]:
            e = s.named_children[0] if s.type == "expression_statement" and s.named_child_count == 1 else None
            if e is None or e.type != "assignment_expression":
                raise _Reject("a mask's statement is not a store `p[i] = v`", s)
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            parts = subscript_parts(left, data) if left is not None else None
            if parts is None or right is None:
                raise _Reject("a mask stores to something other than an array element", s)
            self.depends(parts[1])
            self.depends(right)

    def _operands(self, prod: Node, kv: str) -> tuple[_Operand, _Operand, bool, list[tuple[_Operand, bool]]]:
        """The term's reads: the first moving with y and k (the A tile), the first moving with x and k (the B
        tile), whether A comes first in the term, and any further reads with the side whose tile they get
        (``alpha * a[i, k] * b[j, k] + alpha * b[i, k] * a[j, k]``: syr2k stages two tiles per side)."""
        data = self.data
        if prod.type == "call_expression":
            args = prod.child_by_field_name("arguments")
            assert args is not None
            xs = [c for c in args.named_children if c.type != "comment"]
            reads = [self.loop_reads.get(node_text(x, data), x) for x in xs[:2]]
        else:
            # any term made of reads and values every thread of a block shares (``alpha * A[..] * B[..]``, casts,
            # sums of such products): the tiled step computes it as written, the reads replaced by tile values
            reads = [n for n in walk(prod, ("subscript_expression",))
                     if not any(p.type == "subscript_expression" for p in _ancestors(n, prod))]
            named = [node_text(n, data) for n in walk(prod, ("identifier",)) if node_text(n, data) in self.loop_reads]
            if len(set(named)) != len(named):
                raise _Reject("a read named in the loop's body is used twice in the term", prod)
            reads += [self.loop_reads[n] for n in named]
            if len(reads) < 2:
                raise _Reject(f"the loop's term reads {len(reads)} arrays, not a row and a column", prod)
            self.deps[kv] = {_K}
            self.deps.update({n: set() for n in named})
            self.depends(prod)  # no call, assignment or thread coordinate anywhere in the term
            for gone in [kv, *named]:
                del self.deps[gone]
            spans = [(r.start_byte, r.end_byte) for r in reads]
            for ident in walk(prod, ("identifier",)):
                name = node_text(ident, data)
                if any(a <= ident.start_byte < b for a, b in spans) or name in named:
                    continue
                if name == kv or self.deps.get(name):
                    raise _Reject(f"the loop's term uses `{name}` outside its reads, a value that differs "
                                  "between k or between outputs", ident)
        self.deps[kv] = {_K}
        ops = [self._operand(r) for r in reads]
        sides: list[tuple[_Operand, bool]] = []
        for o in ops:
            d = self._operand_deps(o)
            if d == {_Y, _K}:
                sides.append((o, True))
            elif d == {_X, _K}:
                sides.append((o, False))
            else:
                del self.deps[kv]
                raise _Reject(f"the read `{node_text(o.node, data)}` does not move with k and one output coordinate "
                              "only: a tile of it is not shared by a row or a column of outputs", o.node)
        del self.deps[kv]
        a_at = next((i for i, (_, side) in enumerate(sides) if side), None)
        b_at = next((i for i, (_, side) in enumerate(sides) if not side), None)
        if a_at is None or b_at is None:
            raise _Reject("the term's reads do not include one moving with the row (y) and k and one with the column "
                          "(x) and k: not a product of a row and a column", prod)
        more = [s for i, s in enumerate(sides) if i not in (a_at, b_at)]
        return sides[a_at][0], sides[b_at][0], a_at < b_at, more

    def _operand(self, node: Node) -> _Operand:
        data = self.data
        parts = subscript_parts(node, data)
        if parts is None or not is_ident(parts[0], data):
            raise _Reject(f"`{node_text(node, data)}` is not a read `P[index]` of an array", node)
        name = node_text(unparen(parts[0]), data)
        root = self.root.get(name)
        if root is None:
            raise _Reject(f"`{name}` is not a pointer parameter or a local view into one", node)
        p = self.params[root]
        if resolved_type(self.ctx, p.type) not in _ELEM:
            raise _Reject(f"`{name}`'s element type is not float, double or an integer", node)
        if any(n.type == "subscript_expression" for n in walk(parts[1])):
            raise _Reject(f"`{node_text(node, data)}` indexes memory with memory (not affine)", node)
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
            self.tested |= marks
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
        assert shape.k.value is not None
        self.deps[shape.k.name] = set()
        k_ids = self.depends(shape.k_cond)
        del self.deps[shape.k.name]
        if k_ids or self.depends(shape.k.value):
            raise _Reject("the loop's range differs between threads of a block (triangular): tiles would need "
                          "per-thread bounds", shape.loop)

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
                    raise _Reject(f"the pointer `{node_text(t, data)}` is moved: what it points into is no longer "
                                  "followed", n)
                continue
            parts = subscript_parts(t, data)
            if parts is None or not is_ident(parts[0], data):
                raise _Reject("a store's target is not an element of a named array", n)
            root = self.root.get(node_text(unparen(parts[0]), data))
            if root is None or root in {o.root for o, _ in shape.operands()}:
                raise _Reject("the kernel writes an operand it reads in the loop (in place), or a store's target is "
                              "unknown", n)
        written = written_names(self.body, data)
        for name in self.decls:
            if not self.deps[name] and name in written:
                raise _Reject("a local shared by all of a thread's outputs (hoisted) is written")
