"""warp_per_row's recognizer: is the kernel "one thread per row", and may its rows be split over lanes?

``_Analysis.find`` locates the row index (``blockIdx.x * blockDim.x + threadIdx.x``, or a flattened 2-D
grid) and its guard; ``check`` then walks the row's statements: pointer views and scalars at the top, which
arrays are written and how (element writes, per-row scalar stores done by one lane, atomics), loops split
over the lanes (their bodies are ``loops``' job), outer loops every lane runs whole, and the rows worth
staging in shared memory (``_row_cache``). Every check that fails raises ``_Reject`` with the reason in a
CUDA developer's words and, where one is known, the blocking line: ``why_not`` and the wide yardstick's
funnel show it.

Why a module of its own: it is the legality half of the rule; the code generation only reads its result.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from ...ir.remap import NotLegal
from .._structural import (
    all_names,
    call_names,
    condition_of,
    declared_names,
    failing_bound,
    flat_index_2d,
    for_parts,
    global_index,
    has_jump,
    is_collective,
    is_return_only,
    resolved_type,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from .._util import kernel_body
from ..base import RuleContext
from .loops import _LoopReader
from .reading import (
    ATOMICS,
    _canon_text,
    _ids,
    _lane_index,
    _renamed_canon,
    _split_guard,
    _unconditional,
    _varying,
    _yz,
    atomic_target,
)
from .shape import ELEM_BYTES, PREFIX, _Cache, _code, _Reject, _Shape


class _Analysis(_LoopReader):

    # ------------------------------------------------------------------ shape
    def find(self) -> _Shape:
        data = self.data
        sts = statements(self.body)
        for at, st in enumerate(sts):
            d = single_decl(st, data)
            if d is None or d.pointer or d.value is None:
                continue
            flat = flat_index_2d(d.value, data)
            if not flat and global_index(d.value, data, "x") != "blockDim.x":
                continue
            for j in range(at + 1, len(sts)):
                s = sts[j]
                if s.type != "if_statement":
                    continue
                cond = condition_of(s)
                if cond is None:
                    raise _Reject(f"the `if` after the row index `{d.name}` has no condition this rule reads", s)
                if s.child_by_field_name("alternative") is not None:
                    raise _Reject(f"the guard on the row index `{d.name}` has an `else` branch: only "
                                  f"`if ({d.name} >= n) return;` or `if ({d.name} < n) {{ ... }}` is followed", s)
                if _varying(cond, data):
                    raise _Reject(f"the guard {_code(cond, data)} tests a thread coordinate besides the row index "
                                  f"`{d.name}`: the 32 lanes of a row's warp would disagree on it", s)
                if is_return_only(s.child_by_field_name("consequence")):
                    down, others = _split_guard(cond, data, d.name, "||", failing_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, True, down, sts[j + 1 :], [])
                elif j == len(sts) - 1:
                    up, others = _split_guard(cond, data, d.name, "&&", upper_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, False, up,
                                   statements(s.child_by_field_name("consequence")), [])
                else:
                    raise _Reject(f"the first `if` after the row index `{d.name}` neither returns "
                                  f"(`if ({d.name} >= n) return;`) nor encloses the rest of the kernel: "
                                  "which rows exist is unclear", s)
                shape.others = others
                shape.flat = flat
                # a flattened 2-D index reads blockIdx.y only to rebuild the row: on a 1-D grid it is 0
                inside = {n.id for n in walk(d.node)} if flat else set()
                shape.uses_yz = any(_yz(n, data) for n in walk(self.body, ("field_expression",))
                                    if n.id not in inside)
                return shape
            raise _Reject(f"no guard on the row index `{d.name}` (`if ({d.name} < n) {{ ... }}` or "
                          f"`if ({d.name} >= n) return;`): the rows' count is unknown", d.node)
        raise _Reject("no row index `row = blockIdx.x * blockDim.x + threadIdx.x` (one thread per row) "
                      "declared at the top of the kernel")

    # ------------------------------------------------------------------ checks
    def check(self, shape: _Shape) -> None:
        data = self.data
        if any(n.startswith(PREFIX) for n in all_names(self.body, data)):
            raise _Reject(f"the kernel already has names starting with `{PREFIX}`: warp_per_row rewrote it already")
        shared = next((n for n in walk(self.body) if n.type == "__shared__"), None)
        if shared is not None:
            raise _Reject("the kernel has shared memory of its own: its threads already cooperate, and a warp "
                          "per row would change which threads share it", shared)
        collective = next((n for n in walk(self.body, ("call_expression",)) if (fn := n.child_by_field_name(
            "function")) is not None and is_collective(node_text(fn, data)) and node_text(fn, data) not in ATOMICS),
            None)
        if collective is not None or any(is_collective(c) and c not in ATOMICS for c in call_names(self.body, data)):
            # atomics are checked where they are used (result unused, target never read)
            raise _Reject(f"the kernel calls {_code(collective, data) if collective is not None else 'a collective'}"
                          ": its threads already synchronize or exchange data, which a warp per row would change",
                          collective)
        shadows = declared_names(self.body, data) & self.params
        if shadows:
            raise _Reject(f"a local `{sorted(shadows)[0]}` shadows the kernel parameter of the same name: the "
                          "rewrite must know what every name means")
        row = shape.row.name
        if row in {w for st in shape.rest for w in written_names(st, data)}:
            raise _Reject(f"the row index `{row}` is reassigned in the row's work: a warp's lanes must keep "
                          "one row", next((st for st in shape.rest if row in written_names(st, data)), None))
        top = shape.prefix + shape.between + shape.rest
        for st in top:
            if has_jump(st, loops_ok=False):
                raise _Reject(f"{_code(st, data)} leaves the row early (return, break or goto): the 32 lanes "
                              "of a row's warp must run its work together (the shuffles need every lane)", st)
            if _varying(st, data) and st.type == "declaration":
                raise _Reject(f"{_code(st, data)} is a second thread index besides the row index `{row}` (a 2-D "
                              "thread mapping): only one thread per row along x is re-mapped to a warp (a batch "
                              "may index blockIdx.y/z)", st)
            if _varying(st, data):
                raise _Reject(f"{_code(st, data)} uses a thread coordinate besides the row index `{row}`: after "
                              "the re-mapping a thread is a lane of a row, not a row", st)
        for st in shape.prefix + shape.between:
            if st.type != "declaration":
                raise _Reject(f"{_code(st, data)} runs before the guard on the row index `{row}`: only "
                              "declarations may stand there", st)
        if row in {i for st in shape.prefix for i in _ids(st, data)}:
            raise _Reject(f"a declaration before the row index uses the name `{row}`",
                          next((st for st in shape.prefix if row in _ids(st, data)), None))
        # pass 1: pointer aliases and scalars declared at the top level, and which roots are written (anywhere)
        for st in top:
            if st.type == "declaration":
                self._declare(st)
        store_targets: set[int] = set()
        for st in shape.rest:
            root = self._scalar_store(st)
            if root is not None:
                shape.stores.add(st.id)
                self.scalar_roots.add(root)
                e = st.named_children[0]
                store_targets.add(e.id)
        for n in walk(self.body):
            if n.id in store_targets:
                continue
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
                parts = subscript_parts(target, data) if target is not None else None
                if parts is not None:
                    base = unparen(parts[0])
                    if base.type != "identifier" or node_text(base, data) not in self.root:
                        raise _Reject(f"{_code(n, data)} writes through {_code(base, data)}, which this rule "
                                      "cannot trace to a kernel parameter (a pointer view `p + offset` is)", n)
                    self.written_roots.add(self.root[node_text(base, data)])
                elif target is not None and unparen(target).type != "identifier":
                    # *p = ..., s.f = ...: not something this rule follows
                    raise _Reject(f"{_code(n, data)} writes through a pointer or a member: only element "
                                  "writes `p[i] = ...` and local variables are followed", n)
        for n in walk(self.body, ("call_expression",)):
            at = atomic_target(n, data)
            if at is not None and n.id not in store_targets:
                if at[0] not in self.root:
                    raise _Reject(f"{_code(n, data)} updates `{at[0]}` atomically, which this rule cannot "
                                  "trace to a kernel parameter", n)
                self.atomic_roots.add(self.root[at[0]])
        twice = self.scalar_roots & self.written_roots
        if twice:
            # one array updated in two ways
            name = sorted(twice)[0]
            raise _Reject(f"`{name}` is stored per row at the top level and also written inside a loop (an "
                          "accumulation through global memory such as `y[i] = 0; for (...) y[i] += ...;`): the "
                          "lanes of a warp would race on that element; accumulate in a local variable instead",
                          self._writes_in_loop(name))
        atomic = self.atomic_roots & (self.written_roots | self.scalar_roots)
        if atomic:
            raise _Reject(f"`{sorted(atomic)[0]}` is updated both atomically and by plain stores: the plain "
                          "stores of a warp's lanes would race with the atomics")
        self._scalar_roots_unread(store_targets, row)
        assigned = written_names(self.body, data)
        declared = [single_decl(n, data) for n in walk(self.body, ("declaration",))]
        for st in top:
            d = single_decl(st, data) if st.type == "declaration" else None
            if d is not None and not d.pointer and d.value is not None and d.name not in assigned \
                    and sum(1 for x in declared if x is not None and x.name == d.name) == 1:
                shape.defs[d.name] = d.value
        # pass 2: statements
        for st in shape.prefix + shape.between:
            self._top_level(st)
        for st in shape.rest:
            if st.type == "for_statement":
                self._for(st, shape, 0)
            elif st.id in shape.stores:
                self._store(st)
            elif st.type in ("declaration", "expression_statement", "if_statement"):
                self._top_level(st)
            else:
                raise _Reject(f"{_code(st, data)} in the row's work: only `for` loops, declarations, "
                              "assignments and `if`s are followed there (a `while` or `do` loop is not split)", st)
        if not shape.loops:
            raise _Reject(f"the row's work has no `for` loop to split over the lanes of a warp (one row per "
                          f"thread, `{row}`, with nothing serial to spread)", shape.guard)
        back = self.outer_indexed & self.read_roots
        if back:
            # an element written in one outer iteration might be read in another, by another lane
            raise _Reject(f"`{sorted(back)[0]}` is written inside an outer loop and read back: in a later "
                          "iteration a lane could read an element another lane wrote")
        shape.cache = self._row_cache(shape)

    def _writes_in_loop(self, root: str) -> Node | None:
        """The first element write to ``root`` (through any of its views) inside a loop: where a decline
        about it points."""
        data = self.data
        for n in walk(self.body, ("assignment_expression", "update_expression")):
            target = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
            parts = subscript_parts(target, data) if target is not None else None
            base = unparen(parts[0]) if parts is not None else None
            if base is not None and self.root.get(node_text(base, data)) == root:
                p = n.parent
                while p is not None and p.type not in ("for_statement", "while_statement", "do_statement"):
                    p = p.parent
                if p is not None:
                    return n
        return None

    def _row_cache(self, shape: _Shape) -> list[_Cache]:
        """Rows of read-only arrays that several passes read whole: ``p[E + j]`` for ``j`` over ``[0, L)``
        in two or more top-level loops (softmax: max, exp-sum, write; layernorm: mean, variance, normalize).

        Each is worth one read from global memory into shared memory, the passes then reading it there.
        Required: the array is never written (no store, per-row scalar or atomic reaches its root); the
        reads use one pointer, one offset E and one limit L (``j < L``) in every such loop, loops starting
        at a literal 0 or more; E, L and the pointer are not reassigned from the first such loop on; and
        some loop from 0 reads ``p[E + j]`` on every iteration (not under an ``if``, ``?:``, ``&&``), so
        the original itself reads all of ``[0, L)`` and the fill reads nothing it does not."""
        data = self.data
        unsafe = self.written_roots | self.scalar_roots | self.atomic_roots
        rest = {st.id for st in shape.rest}
        top = [lp for lp in shape.loops if lp.node.id in rest and not lp.scan]
        found: dict[tuple[str, str], _Cache] = {}
        for lp in top:
            fp = for_parts(lp.node, data)
            b = upper_bound(fp.cond, data, lp.var) if fp is not None else None
            if fp is None or b is None or b.inclusive or not re.fullmatch(r"\d+", _canon_text(lp.start)):
                continue
            for n in walk(fp.body, ("subscript_expression",)):
                parts = subscript_parts(n, data)
                base = unparen(parts[0]) if parts is not None else None
                if parts is None or base is None or base.type != "identifier":
                    continue
                name = node_text(base, data)
                if name not in self.root or self.root[name] in unsafe or not _lane_index(parts[1], data, lp.var):
                    continue
                key = (name, _renamed_canon(parts[1], data, lp.var))
                c = found.setdefault(key, _Cache(name, _canon_text(node_text(b.limit, data)), b.limit))
                if c.limit != _canon_text(node_text(b.limit, data)):
                    c.limit = ""  # two limits: not one row
                c.subs[n.id] = lp.var
                c.loops.add(lp.node.id)
                if c.witness is None and _canon_text(lp.start) == "0" and _unconditional(n, lp.node, data):
                    c.witness, c.var_type, c.var = n, fp.var.type, lp.var
        out: list[_Cache] = []
        params = {p.name: p for p in self.ctx.cand_kernel.params} if self.ctx.cand_kernel is not None else {}
        for c in found.values():
            root = params.get(self.root[c.name])
            if root is None or root.pointer_depth != 1 or root.array_dims:
                continue
            c.type = root.type
            c.size = ELEM_BYTES.get(resolved_type(self.ctx, root.type), 0)
            if not c.limit or c.witness is None or len(c.loops) < 2 or not c.size:
                continue
            if out and c.limit != out[0].limit:
                continue  # one row length: every cache region sized alike
            first = min(i for i, st in enumerate(shape.rest) if st.id in c.loops)
            later = {w for st in shape.rest[first:] for w in written_names(st, data)}
            if later & ((_ids(c.witness, data) - {c.var}) | _ids(c.limit_node, data)):
                continue
            c.first = shape.rest[first].id
            out.append(c)
        return out

    def _for(self, st: Node, shape: _Shape, depth: int) -> None:
        """A loop of the row: split among the lanes when it is innermost, else a uniform outer loop.

        An outer loop (``for (n ...) for (i ...) acc += x[(n * C + c) * HW + i]``) runs whole in every lane;
        the loops inside it are split, each combining its partials when it ends. Its header may use only
        values every lane has alike, and its body holds what a row's top level may hold (no stores)."""
        body = st.child_by_field_name("body")
        if body is None:
            raise _Reject("a `for` loop without a body", st)
        if not any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(body)):
            shape.loops.append(self._loop(st))
            return
        if depth >= 2:
            raise _Reject("loops nested three deep in the row: only the innermost loop is split over lanes, "
                          "inside at most two loops every lane runs whole", st)
        if has_jump(body, loops_ok=False):
            raise _Reject(f"the outer loop {_code(st, self.data, 40)} can be left early (return, break or "
                          "goto): every lane must run it whole", st)
        fp = for_parts(st, self.data)
        if fp is None:
            raise _Reject(f"the outer loop {_code(st, self.data, 40)} is not of the form "
                          "`for (int i = a; i < b; i++)`", st)
        d = fp.var
        for part in (d.node, fp.cond, fp.update):
            if _varying(part, self.data):
                raise _Reject(f"the outer loop's header {_code(part, self.data)} uses a thread coordinate: "
                              "every lane must run the same iterations", st)
            for n in walk(part, ("subscript_expression",)):
                self._top_read(n)
        if written_names(body, self.data) & {d.name}:
            raise _Reject(f"the outer loop's variable `{d.name}` is assigned in its body", st)
        self.outer_vars.add(d.name)
        for s2 in statements(body):
            if s2.type == "for_statement":
                self._for(s2, shape, depth + 1)
            elif s2.type == "declaration":
                self._declare(s2)
                self._top_level(s2)
            elif s2.type in ("expression_statement", "if_statement"):
                self._top_level(s2)
            else:
                raise _Reject(f"{_code(s2, self.data)} inside an outer loop: only loops, declarations, "
                              "assignments and `if`s are followed there", s2)
        shape.outer.add(st.id)

    def _scalar_store(self, st: Node) -> str | None:
        """The root of ``p[E] = v;`` / ``p[E] op= v;`` at the top level (a per-row scalar store), else None."""
        data = self.data
        if st.type != "expression_statement" or st.named_child_count != 1:
            return None
        e = st.named_children[0]
        at = atomic_target(e, data)
        if at is not None:
            return self.root.get(at[0])
        if e.type != "assignment_expression":
            return None
        left = e.child_by_field_name("left")
        parts = subscript_parts(unparen(left), data) if left is not None else None
        if parts is None:
            return None
        base = unparen(parts[0])
        if base.type != "identifier" or node_text(base, data) not in self.root:
            return None
        return self.root[node_text(base, data)]

    def _scalar_roots_unread(self, stores: set[int], row: str) -> None:
        """A per-row scalar is stored by one lane: its array may appear only as the target of those stores
        (no lane reads it back, no loop writes it)."""
        data = self.data
        for n in walk(self.body, ("subscript_expression",)):
            parts = subscript_parts(n, data)
            base = unparen(parts[0]) if parts is not None else None
            root = self.root.get(node_text(base, data)) if base is not None and base.type == "identifier" else None
            if root not in self.scalar_roots:
                continue
            p = n.parent
            while p is not None and p.type in ("parenthesized_expression", "pointer_expression", "argument_list"):
                p = p.parent
            if p is not None and p.id not in stores and self._own_element(n, stores):
                continue
            if p is None or p.id not in stores:
                raise _Reject(f"`{root}` is stored once per row (`{root}[{row}] = ...` at the top level, done by "
                              f"one lane) but {_code(n, data)} also reads or writes it: the other lanes would "
                              "not see that store", n)

    def _own_element(self, n: Node, stores: set[int]) -> bool:
        """``n`` is read inside a per-row store of that very element (``d[o] = d[o] + v;``): the one lane that
        stores it reads it first, as the thread did."""
        up = n.parent
        while up is not None and up.id not in stores and up.type != "compound_statement":
            up = up.parent
        if up is None or up.id not in stores or up.type != "assignment_expression":
            return False
        left = up.child_by_field_name("left")
        return left is not None and "".join(node_text(unparen(left), self.data).split()) == \
            "".join(node_text(n, self.data).split())

    def _store(self, st: Node) -> None:
        """``p[E] op= v;`` at the top level: E and v follow the rules of top-level reads."""
        data = self.data
        e = st.named_children[0]
        at = atomic_target(e, data)
        own = ""
        if at is not None:
            checked = [n for n in (at[1], at[2]) if n is not None]
        else:
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            assert left is not None and right is not None
            parts = subscript_parts(unparen(left), data)
            assert parts is not None
            checked = [parts[1], right]
            # `d[o] = d[o] + v`: the one lane that stores the element reads it first, as the thread did
            own = "".join(node_text(unparen(left), data).split())
        for part in checked:
            if _varying(part, data):
                raise _Reject(f"the per-row store {_code(st, data)} uses a thread coordinate besides the row "
                              "index", st)
            for n in walk(part):
                if n.type == "subscript_expression":
                    if at is None and part is not checked[0] and "".join(node_text(n, data).split()) == own:
                        continue
                    self._top_read(n)
                elif n.type in ("assignment_expression", "update_expression", "for_statement") or (
                        n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                    raise _Reject(f"the per-row store {_code(st, data)} assigns or dereferences a pointer "
                                  "inside: one lane stores it, so it must be a plain value", st)

    def _declare(self, st: Node) -> None:
        data = self.data
        d = single_decl(st, data)
        if d is None:
            # several declarators: plain scalars only
            tnode = st.child_by_field_name("type")
            for dn in st.children_by_field_name("declarator"):
                inner = dn.child_by_field_name("declarator") if dn.type == "init_declarator" else dn
                if tnode is None or inner is None or inner.type != "identifier":
                    raise _Reject(f"{_code(st, data)} declares several names, not all plain scalars", st)
                self.scalars[node_text(inner, data)] = node_text(tnode, data)
            return
        if d.pointer:
            v = unparen(d.value) if d.value is not None else None
            base = v
            if v is not None and v.type == "binary_expression":
                op = v.child_by_field_name("operator")
                base = v.child_by_field_name("left")
                if op is None or node_text(op, data) != "+" or base is None:
                    raise _Reject(f"the pointer {_code(st, data)} is not a view `p + offset` of a kernel "
                                  "parameter: which array it reads is unknown", st)
                base = unparen(base)
            if base is None or base.type != "identifier" or node_text(base, data) not in self.root:
                raise _Reject(f"the pointer {_code(st, data)} is not a view `p + offset` of a kernel "
                              "parameter: which array it reads is unknown", st)
            self.root[d.name] = self.root[node_text(base, data)]
        else:
            self.scalars[d.name] = d.type

    def _top_level(self, st: Node) -> None:
        """Executed by every lane: no memory writes, reads only of never-written memory."""
        data = self.data
        if st.type == "expression_statement":
            e = st.named_children[0] if st.named_child_count == 1 else None
            if e is None or e.type not in ("assignment_expression", "update_expression"):
                raise _Reject(f"{_code(st, data)} outside the row's loops is not an assignment: every lane of "
                              "the warp would run it (a call with effects, once per lane)", st)
            target = e.child_by_field_name("left" if e.type == "assignment_expression" else "argument")
            if target is None or unparen(target).type != "identifier":
                raise _Reject(f"{_code(st, data)} outside the row's loops writes memory: every lane of the warp "
                              "would; only per-row stores `p[row] = v;` are done by one lane", st)
        for n in walk(st):
            if n.type == "subscript_expression":
                self._top_read(n)
            elif n.type == "for_statement":
                raise _Reject(f"a loop inside {_code(st, data, 40)}: only `for` loops standing directly in the "
                              "row's work (or in an outer loop) are split over lanes", n)
            elif n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*"):
                raise _Reject(f"{_code(n, data)} dereferences a pointer outside the row's loops: only `p[i]` "
                              "reads of arrays the kernel never writes are followed there", n)


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = analysis(ctx)
    return (got[1], got[0].data) if got is not None else None


def explain(ctx: RuleContext) -> tuple[_Analysis, _Shape] | NotLegal:
    """The analysis of the candidate's kernel and the row shape it found, or why it is not one (in words, at
    the blocking line of the candidate's text where one is known)."""
    got = kernel_body(ctx)
    if ctx.cand_kernel is None or got is None:
        return NotLegal("the kernel does not parse")
    a = _Analysis(ctx, *got)
    try:
        shape = a.find()
        a.check(shape)
    except _Reject as e:
        return NotLegal(e.reason, e.line)
    return a, shape


def analysis(ctx: RuleContext) -> tuple[_Analysis, _Shape] | None:
    """The analysis of the candidate's kernel and the row shape it found (column_split reads both), or None."""
    got = explain(ctx)
    return None if isinstance(got, NotLegal) else got
