"""What the body of a loop split over lanes may do, and the reductions found in it.

Lane ``l`` runs ``j = l, l + 32, ...``: that is the serial loop's meaning only when each iteration touches
its own elements (a written array always indexed ``E + j``), reads nothing another lane writes, and folds
values into outside scalars only by a reduction the lanes can combine afterwards (a sum, min/max, an
argmax/argmin pair, an online-softmax (max, sum) pair) or a running sum read back (a prefix sum, scanned
in chunks of 32). ``_LoopReader`` holds the per-kernel facts those checks need (pointer roots, written
arrays) and records each loop's reductions; ``analysis._Analysis`` adds the row-level checks on top.

Why a module of its own: the in-loop idioms are the part other authors spell most variously, and they
grow one recognizer at a time; each decline says which statement and why.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    SHUFFLE_TYPES,
    binary_parts,
    condition_of,
    declared_names,
    for_parts,
    is_ident,
    is_zero_literal,
    resolved_type,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from ..base import RuleContext
from .reading import (
    _canon_text,
    _ids,
    _kind,
    _lane_index,
    _reduction,
    _varying,
    atomic_target,
)
from .shape import _code, _Loop, _Reduction, _Reject


class _LoopReader:
    """The kernel-wide facts the loop checks read and write, and the checks of a split loop's body."""

    def __init__(self, ctx: RuleContext, body: Node, data: bytes) -> None:
        k = ctx.cand_kernel
        assert k is not None
        self.ctx = ctx
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
        #: roots written only by top-level per-row scalar stores (and never read)
        self.scalar_roots: set[str] = set()
        #: roots updated by atomics inside the loops (and never read)
        self.atomic_roots: set[str] = set()
        #: loop variables of outer loops; written roots indexed with them; written roots also read
        self.outer_vars: set[str] = set()
        self.outer_indexed: set[str] = set()
        self.read_roots: set[str] = set()

    def _top_read(self, n: Node) -> None:
        data = self.data
        parts = subscript_parts(n, data)
        if parts is None:
            raise _Reject(f"{_code(n, data)} outside the row's loops is not a plain `p[i]` read", n)
        base = unparen(parts[0])
        name = node_text(base, data)
        if base.type != "identifier" or name not in self.root:
            raise _Reject(f"{_code(n, data)} outside the row's loops reads through {_code(base, data)}, which "
                          "this rule cannot trace to a kernel parameter", n)
        if self.root[name] in self.written_roots | self.scalar_roots | self.atomic_roots:
            raise _Reject(f"{_code(n, data)} outside the row's loops reads `{self.root[name]}`, which the kernel "
                          "also writes: a lane could read an element another lane wrote", n)

    def _loop(self, st: Node) -> _Loop:
        data = self.data
        fp = for_parts(st, data)
        if fp is None:
            raise _Reject(f"the loop {_code(st, data, 40)} is not of the form `for (int j = a; j < n; j++)` "
                          "with its variable declared in the header", st)
        d, cond, upd, body = fp.var, fp.cond, fp.update, fp.body
        assert d.value is not None
        j = d.name
        bound = upper_bound(cond, data, j)
        u = unparen(upd)
        ut = node_text(u, data).replace(" ", "")
        if bound is None:
            raise _Reject(f"the loop's condition {_code(cond, data)} is not an upper bound `{j} < n` on its "
                          "variable: lanes cannot tell where the row ends", st)
        if ut not in (f"{j}++", f"++{j}", f"{j}+=1", f"{j}={j}+1"):
            raise _Reject(f"the loop steps by {_code(upd, data)}, not by one: only loops over consecutive "
                          "elements are split over the 32 lanes", st)
        loop = _Loop(st, j)
        if not is_zero_literal(d.value, data):
            # any first index every lane computes alike: lanes start at start + lane
            if _varying(d.value, data) or j in _ids(d.value, data) or any(
                    n.type in ("call_expression", "subscript_expression", "assignment_expression",
                               "update_expression") for n in walk(d.value)):
                raise _Reject(f"the loop's first index {_code(d.value, data)} is not a value every lane "
                              "computes alike (it reads memory, calls, assigns or uses a thread coordinate)", st)
            loop.start = node_text(d.value, data)
        locals_ = declared_names(body, data)
        outer_written = {w for w in written_names(body, data) if w not in locals_}
        assigned = written_names(body, data)
        for n in walk(body, ("declaration",)):
            dd = single_decl(n, data)
            if dd is not None and not dd.pointer and dd.value is not None and dd.name not in assigned:
                loop.aliases[dd.name] = dd.value
        if j in outer_written:
            raise _Reject(f"the loop's variable `{j}` is assigned inside the loop: lanes step it by 32 each", st)
        moved = outer_written & set(self.root)
        if moved:
            raise _Reject(f"the loop moves the pointer `{sorted(moved)[0]}`: each lane would move its own copy",
                          st)
        if _ids(d.value, data) & outer_written:
            raise _Reject(f"the loop's first index {_code(d.value, data)} reads a value the loop assigns", st)
        if _ids(bound.limit, data) & outer_written:
            raise _Reject(f"the loop's bound {_code(bound.limit, data)} reads a value the loop assigns", st)
        head = self._scan_head(body, outer_written)
        if head is not None:
            loop.scan, loop.scan_head, loop.scan_inc = head
            loop.scan_type = self.scalars[loop.scan]
            if any(loop.scan in written_names(x, data) for x in statements(body)[1:]) \
                    or loop.scan in _ids(loop.scan_inc, data):
                raise _Reject(f"the running sum `{loop.scan}` is assigned again in the loop (or its increment "
                              "reads it): only `acc += e;` opening the body is scanned across lanes", st)
            self._expr(loop.scan_inc, loop, outer_written - {loop.scan})
            self._body(body, loop, locals_, outer_written - {loop.scan}, skip=loop.scan_head.id)
            if loop.reductions:
                # a scan loop runs in chunks of 32: keep other reductions out of it
                raise _Reject(f"the loop carries the running sum `{loop.scan}` and also reduces "
                              f"`{sorted(loop.reductions)[0]}`: a prefix sum is split alone", st)
            if outer_written != {loop.scan}:
                raise _Reject(f"the loop carries the running sum `{loop.scan}` and also assigns "
                              f"`{sorted(outer_written - {loop.scan})[0]}`, declared outside it", st)
            return loop
        self._body(body, loop, locals_, outer_written)
        accs = set(loop.reductions) | {r.index for r in loop.reductions.values() if r.index}
        if accs != outer_written:
            other = sorted(outer_written - accs) or sorted(accs - outer_written)
            raise _Reject(f"the loop over `{j}` assigns `{other[0]}`, declared outside it, other than as a sum, "
                          "min/max or arg-max: each lane would keep its own value, and the row's would be lost",
                          st)
        return loop

    def _scan_head(self, body: Node, outer_written: set[str]) -> tuple[str, Node, Node] | None:
        """``acc += E;`` opening a loop body whose other statements read ``acc``: a running (prefix) sum."""
        data = self.data
        sts = statements(body)
        first = sts[0] if sts else None
        e = first.named_children[0] if first is not None and first.type == "expression_statement" \
            and first.named_child_count == 1 else None
        if first is None or e is None or e.type != "assignment_expression":
            return None
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None or unparen(left).type != "identifier":
            return None
        acc = node_text(unparen(left), data)
        if acc not in outer_written or acc not in self.scalars \
                or resolved_type(self.ctx, self.scalars[acc]) not in SHUFFLE_TYPES:
            return None
        kind, inc = _reduction(node_text(op, data), right, acc, data)
        if kind != "sum+" or inc is None:
            return None
        if not any(acc in _ids(x, data) for x in sts[1:]):
            return None  # not read back: an ordinary sum (a reduction)
        return acc, first, inc

    def _body(self, node: Node, loop: _Loop, locals_: set[str], outer_written: set[str], skip: int = -1) -> None:
        sts = statements(node)
        for at, st in enumerate(sts):
            if st.id == skip:
                continue
            t = st.type
            if t == "if_statement" and at + 1 < len(sts) and self._online_pair(st, sts[at + 1], loop, outer_written):
                skip = sts[at + 1].id
                continue
            if t == "compound_statement":
                self._body(st, loop, locals_, outer_written)
            elif t == "if_statement" and (self._compare_assign(st, loop, outer_written)
                                          or self._extrema_chain(st, loop, outer_written)):
                continue
            elif t == "if_statement":
                c = condition_of(st)
                if c is None:
                    raise _Reject(f"{_code(st, self.data, 40)}: an `if` without a condition this rule reads", st)
                self._expr(c, loop, outer_written)
                self._body(st.child_by_field_name("consequence") or st, loop, locals_, outer_written)
                alt = st.child_by_field_name("alternative")
                if alt is not None:
                    inner = [c2 for c2 in alt.named_children if c2.type != "comment"]
                    if len(inner) != 1:
                        raise _Reject(f"the `else` of {_code(st, self.data, 40)} is not one statement", st)
                    self._body(inner[0], loop, locals_, outer_written)
            elif t == "declaration":
                if any(c.type == "storage_class_specifier" for c in st.children):
                    raise _Reject(f"{_code(st, self.data)} declares a `static` (or other storage class) "
                                  "local in the loop", st)
                self._expr(st, loop, outer_written)
            elif t == "expression_statement":
                self._statement(st, loop, locals_, outer_written)
            elif t == "else_clause":
                self._body(st, loop, locals_, outer_written)
            else:
                raise _Reject(f"{_code(st, self.data, 40)} in the loop over `{loop.var}`: only declarations, "
                              "assignments, `if`s and blocks are followed in a loop split over lanes (not a "
                              "nested `while`, `switch` or jump)", st)

    def _statement(self, st: Node, loop: _Loop, locals_: set[str], outer_written: set[str]) -> None:
        data = self.data
        e = st.named_children[0] if st.named_child_count == 1 else None
        if e is None:
            raise _Reject(f"{_code(st, data)} in the loop is not one expression", st)
        at = atomic_target(e, data)
        if at is not None:
            # an atomic update (result unused): safe from any lane; its array is never read or plainly written
            root = self.root.get(at[0])
            if root is None:
                raise _Reject(f"{_code(e, data)} updates `{at[0]}` atomically, which this rule cannot trace to "
                              "a kernel parameter", st)
            if root in self.written_roots or root in self.scalar_roots:
                raise _Reject(f"{_code(e, data)} updates `{root}` atomically, which the kernel also writes "
                              "plainly: the lanes' stores would race with the atomics", st)
            self.atomic_roots.add(root)
            for part in (at[1], at[2]):
                if part is not None:
                    self._expr(part, loop, outer_written)
            return
        if e.type == "update_expression":
            arg = e.child_by_field_name("argument")
            if arg is None:
                raise _Reject(f"{_code(e, data)}: an increment without an operand", st)
            a = unparen(arg)
            if a.type == "identifier" and node_text(a, data) in locals_:
                return
            if a.type == "subscript_expression":
                self._access(a, loop, outer_written)
                return
            raise _Reject(f"{_code(e, data)} in the loop over `{loop.var}` counts something declared outside "
                          "the loop: each lane would count only its own elements (a counter is not a sum "
                          "this rule combines)", st)
        if e.type != "assignment_expression":
            raise _Reject(f"{_code(e, data)} in the loop over `{loop.var}` is a call or expression with effects "
                          "this rule does not follow (only assignments and increments)", st)
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None:
            raise _Reject(f"{_code(e, data)}: an assignment this rule cannot read", st)
        lv = unparen(left)
        o = node_text(op, data)
        if lv.type == "subscript_expression":
            self._access(lv, loop, outer_written, write=o == "=")
            self._expr(right, loop, outer_written)
            return
        if lv.type != "identifier":
            raise _Reject(f"{_code(e, data)} in the loop writes through a pointer or a member: only element "
                          "writes `p[i] = ...` and local variables are followed", st)
        name = node_text(lv, data)
        if name in locals_ and name not in outer_written:
            self._expr(right, loop, outer_written)
            return
        if name not in self.scalars:
            raise _Reject(f"{_code(e, data)} assigns `{name}`, which is not a local scalar of the row: lanes "
                          "cannot combine it", st)
        if resolved_type(self.ctx, self.scalars[name]) not in SHUFFLE_TYPES:
            raise _Reject(f"`{name}` accumulates in `{self.scalars[name]}`, a type a warp shuffle does not move "
                          "(float, double and 32/64-bit integers do)", st)
        kind, operand = _reduction(o, right, name, data)
        if kind is None or operand is None:
            raise _Reject(f"{_code(e, data)} updates `{name}`, declared outside the loop over `{loop.var}`, "
                          "other than as a sum (`+=`, `-=`) or min/max: lanes cannot combine their parts "
                          "(a value carried from one iteration to the next is serial)", st)
        kind = _kind(kind)
        prev = loop.reductions.get(name)
        if prev is not None and prev.kind != kind:
            raise _Reject(f"`{name}` is reduced two ways in one loop ({prev.kind} and {kind})", st)
        loop.reductions[name] = _Reduction(name, self.scalars[name], kind)
        self._expr(operand, loop, outer_written)

    def _online_pair(self, st: Node, nxt: Node, loop: _Loop, outer_written: set[str]) -> bool:
        """``if (V > M) { S = S * EXP(M - V); M = V; }`` then ``S += EXP(V - M);`` (also under
        ``if (V != -INFINITY)``): a running max carried with
        the sum of exponentials shifted by it (online softmax, ``single_pass``'s loop). Lanes keep their own
        pair and merge them with the same rescaling; V must read neither accumulator."""
        data = self.data
        cond = condition_of(st)
        cons = statements(st.child_by_field_name("consequence"))
        if cond is None or st.child_by_field_name("alternative") is not None or len(cons) != 2:
            return False
        cb = binary_parts(unparen(cond), data)
        if cb is None or cb[1] != ">" or unparen(cb[2]).type != "identifier":
            return False
        v, m = cb[0], node_text(unparen(cb[2]), data)
        vt = _canon_text(node_text(v, data))
        if nxt.type == "if_statement" and nxt.child_by_field_name("alternative") is None:
            # ``if (V != -INFINITY) S += EXP(V - M);``: single_pass skips masked elements (see there)
            guard, then = condition_of(nxt), statements(nxt.child_by_field_name("consequence"))
            if guard is None or len(then) != 1 \
                    or _canon_text(node_text(unparen(guard), data)) != f"{vt}!=-INFINITY":
                return False
            nxt = then[0]
        if any(x.type != "expression_statement" for x in (cons[0], cons[1], nxt)):
            return False
        a0, a1, a2 = (_canon_text(node_text(x, data)) for x in (cons[0], cons[1], nxt))
        rescale = re.fullmatch(r"([A-Za-z_]\w*)=\1\*(expf|__expf|exp)\(" + re.escape(f"{m}-{vt}") + r"\);", a0)
        if a1 != f"{m}={vt};" or rescale is None:
            return False
        s, exp = rescale.group(1), rescale.group(2)
        if a2 != f"{s}+={exp}({vt}-{m});" or s == m:
            return False
        for acc in (m, s):
            if acc not in self.scalars or acc not in outer_written or acc in loop.reductions \
                    or resolved_type(self.ctx, self.scalars[acc]) not in ("float", "double"):
                return False
        if {m, s} & _ids(v, data) or any(n.type in ("assignment_expression", "update_expression") for n in walk(v)):
            return False
        self._expr(v, loop, outer_written - {m, s})
        loop.reductions[m] = _Reduction(m, self.scalars[m], "online", index=s, index_type=self.scalars[s], exp=exp)
        return True

    def _extrema_chain(self, st: Node, loop: _Loop, outer_written: set[str]) -> bool:
        """``if (v > hi) hi = v; else if (v < lo) lo = v;`` (either order, any of < <= > >=): a running
        maximum and minimum of one value tracked in one sweep, the second tested only when the first
        did not fire.

        That equals two independent compare-and-assign updates (which lanes can split) when ``lo <= hi``
        holds throughout: then a value above ``hi`` is not below ``lo`` (and one equal to both changes
        nothing either way). It holds when both start from the same expression (textually equal, reading
        only memory the kernel never writes) and nothing else writes them: a max only grows, a min only
        shrinks. Each lane's partials start from those equal values, so the invariant holds per lane too.

        True when ``st`` is such a chain (both recorded as reductions), False when it is not of this form;
        raises when it is but the invariant cannot be shown."""
        data = self.data
        alt = st.child_by_field_name("alternative")
        inner = [c for c in alt.named_children if c.type != "comment"] if alt is not None else []
        second = inner[0] if len(inner) == 1 and inner[0].type == "if_statement" else None
        if second is None or second.child_by_field_name("alternative") is not None:
            return False
        branches = []
        for br in (st, second):
            view = self._compare_view(br, outer_written)
            if view is None:
                return False
            branches.append(view)
        (acc1, v1, g1), (acc2, v2, g2) = branches
        if acc1 == acc2 or g1 == g2 or v1 != v2:
            raise _Reject(f"{_code(st, data, 40)}: an `if ... else if` chain of compares that is not one "
                          "value's running maximum and minimum", st)
        hi, lo = (acc1, acc2) if g1 else (acc2, acc1)
        inits = [self._top_init(name) for name in (hi, lo)]
        if inits[0] is None or inits[1] is None \
                or node_text(inits[0], data).replace(" ", "") != node_text(inits[1], data).replace(" ", ""):
            raise _Reject(f"the running maximum `{hi}` and minimum `{lo}` of one `if ... else if` chain do not "
                          "start from the same value: split over lanes, a value could change both", st)
        for n in walk(inits[0]):
            if n.type in ("call_expression", "assignment_expression", "update_expression") \
                    or (n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                raise _Reject(f"the running maximum `{hi}` and minimum `{lo}` start from "
                              f"{_code(inits[0], data)}, which calls, assigns or dereferences", st)
            if n.type == "subscript_expression":
                self._top_read(n)
        chain = {n.id for n in walk(st)}
        for n in walk(self.body):
            if n.id not in chain and n.type in ("assignment_expression", "update_expression") \
                    and written_names(n, data) & {hi, lo}:
                raise _Reject(f"the running maximum `{hi}` or minimum `{lo}` is also assigned by "
                              f"{_code(n, data)}", n)
        for br in (st, second):
            if not self._compare_assign(br, loop, outer_written, chained=True):
                raise _Reject(f"{_code(br, data, 40)} is not a compare-and-assign `if (v > m) m = v;`", br)
        return True

    def _compare_view(self, st: Node, outer_written: set[str]) -> tuple[str, str, bool] | None:
        """(accumulator, compared value, is a max) of ``if (v > acc) acc = v;`` (alternative ignored)."""
        data = self.data
        c = condition_of(st)
        cons = st.child_by_field_name("consequence")
        b = unparen(c) if c is not None else None
        if b is None or cons is None or b.type != "binary_expression":
            return None
        op_n, left, right = (b.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op_n is None or left is None or right is None or node_text(op_n, data) not in ("<", ">", "<=", ">="):
            return None
        op = node_text(op_n, data)
        if is_ident(right, data) and node_text(unparen(right), data) in outer_written:
            acc, value, greater = node_text(unparen(right), data), left, op in (">", ">=")
        elif is_ident(left, data) and node_text(unparen(left), data) in outer_written:
            acc, value, greater = node_text(unparen(left), data), right, op in ("<", "<=")
        else:
            return None
        sts = statements(cons)
        e = sts[0].named_children[0] if len(sts) == 1 and sts[0].type == "expression_statement" \
            and sts[0].named_child_count == 1 else None
        if e is None or e.type != "assignment_expression":
            return None
        lhs, aop, rhs = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        flat = node_text(unparen(value), data).replace(" ", "")
        if lhs is None or aop is None or rhs is None or node_text(aop, data) != "=" or not is_ident(lhs, data, acc) \
                or node_text(unparen(rhs), data).replace(" ", "") != flat:
            return None
        return acc, flat, greater

    def _top_init(self, name: str) -> Node | None:
        """The initial value of a local declared (once) with one at the kernel's top level."""
        found: list[tuple[Node, Node | None]] = []
        for n in walk(self.body, ("declaration",)):
            d = single_decl(n, self.data)
            if d is not None and d.name == name:
                found.append((n, d.value))
        if len(found) != 1 or found[0][0].parent is None or found[0][0].parent.type != "compound_statement":
            return None
        decl, value = found[0]
        p = decl.parent
        while p is not None and p.id != self.body.id:  # a compound statement of the top level (a guarded body)
            if p.type not in ("compound_statement", "if_statement"):
                return None
            p = p.parent
        return value

    def _compare_assign(self, st: Node, loop: _Loop, outer_written: set[str], chained: bool = False) -> bool:
        """``if (A > acc) acc = A;`` (a max; ``<`` a min) or ``if (A > acc) { acc = A; idx = J; }`` (an argmax:
        J an expression of the loop's index), the form a running maximum is usually written in.

        True when ``st`` is such an update (recorded as a reduction), False when it is some other ``if``."""
        data = self.data
        c = condition_of(st)
        cons = st.child_by_field_name("consequence")
        if c is None or cons is None or (st.child_by_field_name("alternative") is not None and not chained):
            return False
        parts = binary_parts(c, data)
        if parts is None:
            return False
        left, op, right = parts
        if op not in ("<", ">", "<=", ">="):
            return False
        acc, value, greater = None, None, False
        if unparen(right).type == "identifier" and node_text(unparen(right), data) in outer_written:
            acc, value, greater = node_text(unparen(right), data), left, op in (">", ">=")
        elif unparen(left).type == "identifier" and node_text(unparen(left), data) in outer_written:
            acc, value, greater = node_text(unparen(left), data), right, op in ("<", "<=")
        if acc is None or value is None or acc not in self.scalars:
            return False
        if resolved_type(self.ctx, self.scalars[acc]) not in SHUFFLE_TYPES:
            raise _Reject(f"`{acc}` is compared and kept in `{self.scalars[acc]}`, a type a warp shuffle does "
                          "not move", st)
        sets: dict[str, Node] = {}
        for a in statements(cons):
            e = a.named_children[0] if a.type == "expression_statement" and a.named_child_count == 1 else None
            if e is None or e.type != "assignment_expression":
                raise _Reject(f"the running extreme `{acc}` is updated by {_code(st, data, 40)}, whose branch "
                              f"does more than assign locals ({_code(a, data)})", a)
            lhs, aop, rhs = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
            if lhs is None or aop is None or rhs is None or node_text(aop, data) != "=" \
                    or unparen(lhs).type != "identifier":
                raise _Reject(f"the running extreme `{acc}` is updated by {_code(st, data, 40)}, whose branch "
                              f"does more than assign locals ({_code(a, data)})", a)
            sets[node_text(unparen(lhs), data)] = rhs
        flat = node_text(unparen(value), data).replace(" ", "")
        if acc not in sets or node_text(unparen(sets[acc]), data).replace(" ", "") != flat:
            raise _Reject(f"{_code(st, data, 40)} compares `{acc}` but does not set it to the compared value: "
                          "not a running maximum or minimum", st)
        self._expr(value, loop, outer_written)
        prev = loop.reductions.get(acc)
        typ = resolved_type(self.ctx, self.scalars[acc])
        if len(sets) == 1:
            kind = ("fmaxf" if greater else "fminf") if typ == "float" else \
                ("fmax" if greater else "fmin") if typ == "double" else ("max" if greater else "min")
            if prev is not None and prev.kind != kind:
                raise _Reject(f"`{acc}` is reduced two ways in one loop ({prev.kind} and {kind})", st)
            loop.reductions[acc] = _Reduction(acc, self.scalars[acc], kind)
            return True
        idx = next(n for n in sets if n != acc)
        if len(sets) != 2 or idx not in self.scalars or prev is not None or idx in loop.reductions \
                or resolved_type(self.ctx, self.scalars[idx]) not in SHUFFLE_TYPES:
            raise _Reject(f"{_code(st, data, 40)} keeps more than one value with the running extreme `{acc}` "
                          "(an arg-max keeps one index, of a type a shuffle moves, in one update)", st)
        self._expr(sets[idx], loop, outer_written)
        loop.reductions[acc] = _Reduction(acc, self.scalars[acc], "argmax" if greater else "argmin", idx,
                                          self.scalars[idx], op in ("<", ">"), st.id)
        return True

    def _access(self, sub: Node, loop: _Loop, outer_written: set[str], *, write: bool = False) -> None:
        data = self.data
        parts = subscript_parts(sub, data)
        if parts is None:
            raise _Reject(f"{_code(sub, data)} is not a plain `p[i]` access", sub)
        base, idx = unparen(parts[0]), parts[1]
        if base.type != "identifier" or node_text(base, data) not in self.root:
            raise _Reject(f"{_code(sub, data)} accesses memory through {_code(base, data)}, which this rule "
                          "cannot trace to a kernel parameter (a view `p + offset` declared before is followed)",
                          sub)
        name = node_text(base, data)
        root = self.root[name]
        if root in self.scalar_roots:
            raise _Reject(f"the loop over `{loop.var}` accesses {_code(sub, data)}, but `{root}` is also stored "
                          "once per row at the top level (by one lane): the lanes would race on it", sub)
        if root in self.atomic_roots:
            raise _Reject(f"the loop over `{loop.var}` accesses {_code(sub, data)} plainly, but `{root}` is also "
                          "updated atomically", sub)
        if _ids(idx, data) & outer_written:
            raise _Reject(f"the index of {_code(sub, data)} reads "
                          f"`{sorted(_ids(idx, data) & outer_written)[0]}`, which the loop accumulates: "
                          "each lane holds only its part of it", sub)
        if any(n.type == "subscript_expression" for n in walk(idx)) or any(n.type == "call_expression"
                                                                             for n in walk(idx)):
            raise _Reject(f"the index of {_code(sub, data)} reads memory or calls a function (an indirect "
                          "access): which element a lane touches is not known", sub)
        if root in self.written_roots:
            eff = loop.aliases.get(node_text(unparen(idx), data), idx)
            if not _lane_index(eff, data, loop.var):
                raise _Reject(f"the loop over `{loop.var}` accesses {_code(sub, data)} of `{root}`, which the "
                              f"kernel writes, at an index other than `E + {loop.var}`: a lane could read or "
                              "overwrite an element another lane owns", sub)
            key = (name, node_text(unparen(eff), data).replace(" ", ""))
            if self.written_access.setdefault(root, key) != key:
                first = self.written_access[root]
                raise _Reject(f"`{root}` is written and accessed at two indices (`{first[0]}[{first[1]}]` and "
                              f"{_code(sub, data)}): a lane could read an element another lane wrote", sub)
            if _ids(eff, data) & self.outer_vars:
                self.outer_indexed.add(root)
            if not write:
                self.read_roots.add(root)
        self._expr(idx, loop, outer_written)

    def _expr(self, node: Node, loop: _Loop, outer_written: set[str]) -> None:
        """Reads inside a loop: subscripts go through ``_access``; no reads of values the loop accumulates."""
        data = self.data
        for n in walk(node, cut=lambda n: n.type == "subscript_expression"):
            if n.type == "subscript_expression":
                self._access(n, loop, outer_written)
            elif n.type == "identifier" and node_text(n, data) in outer_written:
                raise _Reject(f"the loop over `{loop.var}` reads `{node_text(n, data)}` while accumulating it: "
                              "each lane holds only its part of it, not the serial running value", n)
            elif n.type == "pointer_expression":
                raise _Reject(f"{_code(n, data)} in the loop takes an address or dereferences a pointer: only "
                              "`p[i]` accesses are followed", n)
            elif n.type in ("assignment_expression", "update_expression") and n != node:
                # assignments inside expressions: keep it simple
                raise _Reject(f"{_code(n, data)} assigns inside an expression", n)

