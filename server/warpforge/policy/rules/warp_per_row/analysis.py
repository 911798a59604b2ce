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
from .shape import ELEM_BYTES, PREFIX, _Cache, _Reject, _Shape


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
                if cond is None or s.child_by_field_name("alternative") is not None or _varying(cond, data):
                    raise _Reject
                if is_return_only(s.child_by_field_name("consequence")):
                    down, others = _split_guard(cond, data, d.name, "||", failing_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, True, down, sts[j + 1 :], [])
                elif j == len(sts) - 1:
                    up, others = _split_guard(cond, data, d.name, "&&", upper_bound)
                    shape = _Shape(d, sts[:at], sts[at + 1 : j], s, False, up,
                                   statements(s.child_by_field_name("consequence")), [])
                else:
                    raise _Reject
                shape.others = others
                shape.flat = flat
                # a flattened 2-D index reads blockIdx.y only to rebuild the row: on a 1-D grid it is 0
                inside = {n.id for n in walk(d.node)} if flat else set()
                shape.uses_yz = any(_yz(n, data) for n in walk(self.body, ("field_expression",))
                                    if n.id not in inside)
                return shape
            raise _Reject
        raise _Reject

    # ------------------------------------------------------------------ checks
    def check(self, shape: _Shape) -> None:
        data = self.data
        if any(n.startswith(PREFIX) for n in all_names(self.body, data)):
            raise _Reject
        if any(n.type == "__shared__" for n in walk(self.body)) \
                or any(is_collective(c) and c not in ATOMICS for c in call_names(self.body, data)):
            raise _Reject  # atomics are checked where they are used (result unused, target never read)
        if declared_names(self.body, data) & self.params:
            raise _Reject  # shadowing
        row = shape.row.name
        if row in {w for st in shape.rest for w in written_names(st, data)}:
            raise _Reject
        top = shape.prefix + shape.between + shape.rest
        for st in top:
            if has_jump(st, loops_ok=False) or _varying(st, data):
                raise _Reject
        for st in shape.prefix + shape.between:
            if st.type != "declaration":
                raise _Reject
        if row in {i for st in shape.prefix for i in _ids(st, data)}:
            raise _Reject
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
                        raise _Reject
                    self.written_roots.add(self.root[node_text(base, data)])
                elif target is not None and unparen(target).type != "identifier":
                    raise _Reject  # *p = ..., s.f = ...: not something this rule follows
        for n in walk(self.body, ("call_expression",)):
            at = atomic_target(n, data)
            if at is not None and n.id not in store_targets:
                if at[0] not in self.root:
                    raise _Reject
                self.atomic_roots.add(self.root[at[0]])
        if self.scalar_roots & self.written_roots or self.atomic_roots & (self.written_roots | self.scalar_roots):
            raise _Reject  # one array updated in two ways
        self._scalar_roots_unread(store_targets)
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
                raise _Reject
        if not shape.loops:
            raise _Reject
        if self.outer_indexed & self.read_roots:
            # an element written in one outer iteration might be read in another, by another lane
            raise _Reject
        shape.cache = self._row_cache(shape)

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
            raise _Reject
        if not any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(body)):
            shape.loops.append(self._loop(st))
            return
        if depth >= 2 or has_jump(body, loops_ok=False):
            raise _Reject
        fp = for_parts(st, self.data)
        if fp is None:
            raise _Reject
        d = fp.var
        for part in (d.node, fp.cond, fp.update):
            if _varying(part, self.data):
                raise _Reject
            for n in walk(part, ("subscript_expression",)):
                self._top_read(n)
        if written_names(body, self.data) & {d.name}:
            raise _Reject
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
                raise _Reject
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

    def _scalar_roots_unread(self, stores: set[int]) -> None:
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
            if p is None or p.id not in stores:
                raise _Reject

    def _store(self, st: Node) -> None:
        """``p[E] op= v;`` at the top level: E and v follow the rules of top-level reads."""
        data = self.data
        e = st.named_children[0]
        at = atomic_target(e, data)
        if at is not None:
            checked = [n for n in (at[1], at[2]) if n is not None]
        else:
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            assert left is not None and right is not None
            parts = subscript_parts(unparen(left), data)
            assert parts is not None
            checked = [parts[1], right]
        for part in checked:
            if _varying(part, data):
                raise _Reject
            for n in walk(part):
                if n.type == "subscript_expression":
                    self._top_read(n)
                elif n.type in ("assignment_expression", "update_expression", "for_statement") or (
                        n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
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
                self.scalars[node_text(inner, data)] = node_text(tnode, data)
            return
        if d.pointer:
            v = unparen(d.value) if d.value is not None else None
            base = v
            if v is not None and v.type == "binary_expression":
                op = v.child_by_field_name("operator")
                base = v.child_by_field_name("left")
                if op is None or node_text(op, data) != "+" or base is None:
                    raise _Reject
                base = unparen(base)
            if base is None or base.type != "identifier" or node_text(base, data) not in self.root:
                raise _Reject
            self.root[d.name] = self.root[node_text(base, data)]
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
                self._top_read(n)
            elif n.type == "for_statement" or (
                    n.type == "pointer_expression" and node_text(n, data).lstrip().startswith("*")):
                raise _Reject


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    got = analysis(ctx)
    return (got[1], got[0].data) if got is not None else None


def analysis(ctx: RuleContext) -> tuple[_Analysis, _Shape] | None:
    """The analysis of the candidate's kernel and the row shape it found (column_split reads both), or None."""
    got = kernel_body(ctx)
    if ctx.cand_kernel is None or got is None:
        return None
    a = _Analysis(ctx, *got)
    try:
        shape = a.find()
        a.check(shape)
    except _Reject:
        return None
    return a, shape
