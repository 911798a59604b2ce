"""Transposes, found by analysis of the lowered kernel: legality of staging one through a shared tile.

Why: a transpose reads along one index and writes along another, so whichever side the threads of a warp
walk at stride 1, the other side strides by a row and touches 32 cache lines per instruction. Staging a
32x32 block of the index space through shared memory makes both coalesce. People write it in many ways: a
2-D grid with a guard or an early exit; a per-thread tile loop (cuda-samples' ``transposeNaive``:
``odata[index_out + i] = idata[index_in + i*width]``); one thread per item with a loop over the item's
fields (Rodinia kmeans' ``invert_mapping``: ``output[p + npoints*i] = input[p*nfeatures + i]``); a flat index
split by ``/`` and ``%`` into a row and a column. They are the same thing once the store is read as an affine
function of the kernel's own index names, which is what this module does (``plan_transpose``):

* the kernel makes exactly one store ``dst[W] = F(...);`` (plain ``=``, ``dst`` never read) and uses no shared
  memory, barrier, shuffle or atomic; the store may sit behind early exits, inside guards (no ``else``) and
  inside one ``for`` loop; everything else is declarations and early exits;
* the *index names* are the locals computed from ``threadIdx``/``blockIdx`` (``x``, ``point_id``, ``idx``),
  the loop counter, and the quotient and remainder of one of those by a uniform value (``row = idx / C``,
  ``col = idx % C``: ``idx`` is then ``row*C + col``). ``W`` and the index ``R`` of a read ``src[R]`` of another
  parameter are affine in them (``affine.poly``), and the names group into *dimensions* by their coefficient
  pair (``yIndex`` and ``i`` of the tile loop move both indices alike: one dimension ``yIndex + i``);
* there are exactly two dimensions: ``u``, in which the read is contiguous (coefficient 1) and the store is
  not, and ``v``, in which the store is contiguous and the read is not. A read and a store contiguous in the
  same dimension are a copy or a permutation of whole rows (llm.c's ``unpermute``), already coalesced;
* each dimension covers its range once per element: a grid axis ``blockIdx.a*blockDim.a + threadIdx.a``
  (the launch's ``grid.a*block.a`` values), a loop ``for (i = 0; i < B; i++)`` with a uniform bound, a grid
  axis plus a tile loop (``blockIdx.a*T + threadIdx.a + i`` with ``i`` stepping by the block's extent up to
  ``T``: checked at every size of the spec), or the row and column of a flat grid axis;
* no other use of the thread coordinates (they are re-bound) and no read of the tiled source outside the store.

The plan says, for each dimension, how to re-bind the kernel's names to a position ``(u, v)`` of the tile
(``Binding``), the extent to launch over (in spec terms, filled in by the rule), and what must be checked
where the launch does not bound a position by itself. Each decline is a ``NotLegal`` with the reason in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.poly import Poly, padd, pmul, render
from ...cuda.tree import element_use, plain_assignment, unparen, walk
from .affine import COORDS, UNIFORM_COORDS, NonAffine, Scope, poly
from .passes import Kernel, declared_names, statements
from .remap import NotLegal
from .summary import Summary, _affine, params_of, scope_of

#: calls that load through an address (``__ldg(&in[i])``): a tile read replaces the whole call
_LOADS = ("__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv")
_ALL_COORDS = COORDS + UNIFORM_COORDS


@dataclass(frozen=True)
class Binding:
    """How one dimension of the tile binds the kernel's names.

    ``kind``: "grid" (a coordinate local over a whole grid axis), "loop" (a loop counter over ``[0, bound)``),
    "tile" (a coordinate local plus a tile loop's counter; the counter is bound to 0), "flat" (the row or column
    of a flat coordinate)."""

    kind: str
    #: the coordinate local whose declaration is re-bound ("" for a loop)
    local: str
    #: the loop counter ("" when none)
    counter: str
    #: the grid axis ("x"/"y"/"z"; "" for a loop)
    axis: str
    #: the coefficient of ``blockIdx.axis`` in the coordinate (``blockDim.x`` or a number)
    block_coef: str = ""
    #: the loop's bound in the kernel's terms (``nfeatures``, ``32``) and its step
    bound: str = ""
    step: str = "1"
    #: "flat": the divisor ``E`` of ``row = idx / E``, ``col = idx % E`` in the kernel's terms
    divisor: str = ""
    #: the loop counter's declared type
    counter_type: str = "int"


@dataclass(frozen=True)
class TransposePlan:
    src: str
    dst: str
    #: byte ranges of the reads of ``src`` at the transposed index (a load call around one included)
    reads: tuple[tuple[int, int], ...]
    #: the store statement's byte range
    store: tuple[int, int]
    #: u: the read's contiguous dimension; v: the store's
    u: Binding
    v: Binding
    #: the top-level statements before the store's chain (declarations, early exits), byte ranges in order
    prelude: tuple[tuple[int, int], ...]
    #: the store's chain, outermost first: ("if", condition range, inner statements before the next element) or
    #: ("for", condition range, inner statements ...) as (kind, (start, end), ((start, end), ...))
    chain: tuple[tuple[str, tuple[int, int], tuple[tuple[int, int], ...]], ...]
    #: coordinate declarations' value ranges -> the local they declare
    coordinate_values: tuple[tuple[str, tuple[int, int]], ...]
    #: whether some exit or guard's condition depends on each dimension's names (bounds a partial tile)
    guarded: tuple[bool, bool]
    line: int
    #: the conditions of the exits ("exit": leave when true) and guards ("guard": store when true)
    conditions: tuple[tuple[str, tuple[int, int]], ...] = ()
    #: a batch index ``b = blockIdx.z`` (its declaration kept; the launch keeps the grid's z), "" when none
    batch: str = ""


def _coordinate_locals(k: Kernel) -> dict[str, Node]:
    """Locals declared with a value that reads a thread or block coordinate directly: name -> value node."""
    out: dict[str, Node] = {}
    for d in walk(k.body, ("init_declarator",)):
        nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if nm is None or v is None or nm.type != "identifier":
            continue
        if any(k.t(a) in COORDS for f in walk(v, ("field_expression",))
               if (a := f.child_by_field_name("argument")) is not None):
            out[k.t(nm)] = v
    return out


def _flat_parts(k: Kernel, coords: set[str], scope: Scope) -> dict[str, tuple[str, str, Node]]:
    """``row = idx / E`` and ``col = idx % E`` of a coordinate ``idx`` and a uniform ``E``: name -> (op, idx, E)."""
    out: dict[str, tuple[str, str, Node]] = {}
    for name, v in scope.values.items():
        n = unparen(v)
        if n.type != "binary_expression" or name in coords:
            continue
        op, a, b = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op is None or a is None or b is None or k.t(op) not in ("/", "%"):
            continue
        base = unparen(a)
        if base.type != "identifier" or k.t(base) not in coords:
            continue
        if any(k.t(i) in coords or k.t(i) in scope.counters for i in walk(b, ("identifier",))):
            continue
        out[name] = (k.t(op), k.t(base), b)
    return out


def plan_transpose(k: Kernel, s: Summary, template_args: Mapping[str, str] | None = None) -> TransposePlan | NotLegal:
    """The plan to stage the kernel's transpose through a shared tile, or why it is not one (or not legal)."""
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking:
        return NotLegal(f"the kernel already uses {', '.join(blocking)}", stage=0)
    writes = [a for a in s.accesses if a.kind != "read"]
    if not writes:
        return NotLegal("the kernel stores nothing to memory", stage=0)
    if len({a.param for a in writes}) > 1:
        stored = sorted({a.param for a in writes})
        return NotLegal(f"the kernel stores to {len(stored)} arrays ({', '.join(stored)}): a tile stages one "
                        "transpose", writes[1].line, stage=0)
    if len(writes) > 1 or writes[0].kind == "read-write":
        return NotLegal(f"`{writes[0].param}` is stored more than once or updated in place: not a one-element copy",
                        writes[0].line, stage=0)
    dst = writes[0].param
    if any(a.param == dst for a in s.accesses if a.kind == "read"):
        return NotLegal(f"the kernel reads `{dst}`, which it writes: another thread's store could come first",
                        writes[0].line)
    # the store statement and its chain of loops and guards up to the body
    store_sub = next((n for n in walk(k.body, ("subscript_expression",)) if element_use(n)[1]
                      and (a := n.child_by_field_name("argument")) is not None and k.t(unparen(a)) == dst), None)
    if store_sub is None:
        return NotLegal(f"the store to `{dst}` is not a subscript", writes[0].line, stage=0)
    st = store_sub
    while st.parent is not None and st.type != "expression_statement":
        st = st.parent
    pa = plain_assignment(st, k.data)
    if pa is None or unparen(pa[0]).id != store_sub.id:
        return NotLegal(f"`{k.t(st)}` is not a store `{dst}[index] = value;`", k.line(st), stage=0)
    chain_nodes: list[Node] = []
    cur = st.parent
    while cur is not None and cur.id != k.body.id:
        if cur.type in ("for_statement", "if_statement"):
            chain_nodes.append(cur)
        elif cur.type != "compound_statement":
            return NotLegal(f"the store sits in a `{cur.type.replace('_statement', '')}`: only guards and one loop "
                            "are read", k.line(cur))
        cur = cur.parent
    chain_nodes.reverse()
    if sum(1 for c in chain_nodes if c.type == "for_statement") > 1:
        return NotLegal("the store sits in two nested loops: a tile stages a 2-D index space", k.line(chain_nodes[0]))
    # index names: coordinate locals, the loop counter, flat parts
    params, uniform = params_of(k)
    targs = template_args or {}
    base_scope = scope_of(k, uniform, {n for n, a in targs.items() if not a.replace("_", "").isalpha()})
    coords = _coordinate_locals(k)
    counters = set(base_scope.counters)
    flat = _flat_parts(k, set(coords), base_scope)
    atoms = frozenset(set(coords) | counters | set(flat))
    scope = Scope({n: v for n, v in base_scope.values.items() if n not in atoms}, atoms, base_scope.uniform,
                  frozenset(base_scope.varying - atoms), k.data)
    bad_coord = next((c for c in coords if c in base_scope.varying), None)
    if bad_coord is not None:
        return NotLegal(f"the index `{bad_coord}` is written after its declaration", writes[0].line)

    def index_of(n: Node) -> Poly:
        p = poly(n, scope)
        # a flat coordinate used whole where its row and column are atoms: idx = row*E + col
        for name, (op, base, e) in flat.items():
            if op != "/":
                continue
            col = next((c for c, (o, b, ee) in flat.items() if o == "%" and b == base and k.t(ee) == k.t(e)), None)
            if col is None or not any(base in m for m in p):
                continue
            sub = padd(pmul({(name,): 1}, poly(e, scope)), {(col,): 1})
            out: Poly = {}
            for m, c in p.items():
                if base in m:
                    rest = list(m)
                    rest.remove(base)
                    out = padd(out, pmul({tuple(rest): c}, sub))
                else:
                    out = padd(out, {m: c})
            p = out
        return p

    idx_node = store_sub.child_by_field_name("indices") or store_sub.child_by_field_name("index")
    w_inner = idx_node.named_children[0] if idx_node is not None and idx_node.type == "subscript_argument_list" \
        and idx_node.named_children else idx_node
    if w_inner is None:
        return NotLegal("the store has no index", k.line(st), stage=0)
    try:
        w_poly = index_of(w_inner)
    except NonAffine as e:
        return NotLegal(f"the store's index is not affine in the kernel's index names: {e}", k.line(st), stage=0)
    pointers = {n for n, _, ptr, _ in params if ptr}
    # candidate reads: subscripts of other pointer parameters (in the store's value, or in a local it uses)
    cands: dict[tuple[str, str], list[tuple[Node, Poly]]] = {}
    reasons: list[str] = []
    for sub in walk(k.body, ("subscript_expression",)):
        arg = sub.child_by_field_name("argument")
        name = k.t(unparen(arg)) if arg is not None else ""
        if name not in pointers or name == dst:
            continue
        ri = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        inner = ri.named_children[0] if ri is not None and ri.type == "subscript_argument_list" \
            and ri.named_children else ri
        if inner is None:
            continue
        try:
            p = index_of(inner)
        except NonAffine as e:
            reasons.append(f"the read of `{name}` is not affine: {e}")
            continue
        cands.setdefault((name, repr(sorted(p.items()))), []).append((sub, p))
    if not cands:
        return NotLegal(reasons[0] if reasons else "the kernel reads no array: not a copy of one array into another",
                        k.line(st), stage=0)
    plans: list[TransposePlan | NotLegal] = []
    for (src, _), reads in cands.items():
        plans.append(_plan_for(k, s, src, dst, reads, w_poly, st, chain_nodes, coords, flat, scope, atoms))
    good = [p for p in plans if isinstance(p, TransposePlan)]
    if len(good) == 1:
        return good[0]
    if len(good) > 1:
        return NotLegal("the store's value reads two arrays transposed: a tile stages one", k.line(st))
    return max((p for p in plans if isinstance(p, NotLegal)), key=lambda p: p.stage)


def _dims(r: Poly, w: Poly, atoms: frozenset[str], scope: Scope) -> dict[tuple[str, str], list[str]] | str:
    """Index names grouped by their (read, store) coefficient pair; or why an index is not affine."""
    def coefs(p: Poly) -> dict[str, str]:
        groups: dict[str, list[tuple[tuple[str, ...], int]]] = {}
        for m, c in p.items():
            idx = [a for a in m if a in atoms]
            if len(idx) > 1:
                raise NonAffine(f"a product of two indices ({' * '.join(idx)})")
            if not idx:
                continue
            rest = list(m)
            rest.remove(idx[0])
            groups.setdefault(idx[0], []).append((tuple(rest), c))
        return {a: render(v, times="*", constant_last=False) for a, v in groups.items()}
    try:
        cr, cw = coefs(r), coefs(w)
    except NonAffine as e:
        return str(e)
    out: dict[tuple[str, str], list[str]] = {}
    for a in sorted(set(cr) | set(cw)):
        out.setdefault((cr.get(a, "0"), cw.get(a, "0")), []).append(a)
    return out


def _plan_for(k: Kernel, s: Summary, src: str, dst: str, reads: list[tuple[Node, Poly]], w: Poly, st: Node,
              chain_nodes: list[Node], coords: dict[str, Node], flat: dict[str, tuple[str, str, Node]],
              scope: Scope, atoms: frozenset[str]) -> TransposePlan | NotLegal:
    line = k.line(st)
    dims = _dims(reads[0][1], w, atoms, scope)
    if isinstance(dims, str):
        return NotLegal(f"the indices are not affine: {dims}", line, stage=0)
    us = [(key, names) for key, names in dims.items() if key[0] == "1" and key[1] != "1"]
    vs = [(key, names) for key, names in dims.items() if key[1] == "1" and key[0] != "1"]
    same = [names for key, names in dims.items() if key[0] == "1" and key[1] == "1"]
    if same:
        return NotLegal(f"`{src}` and `{dst}` are both contiguous in `{' + '.join(same[0])}`: a copy or a permutation "
                        "of whole rows, already coalesced, not a transpose", line, stage=0)
    if not us or not vs:
        side = "the read of `" + src + "`" if not us else "the store to `" + dst + "`"
        return NotLegal(f"{side} is not contiguous in any index (no coefficient 1): not a transpose a tile coalesces",
                        line, stage=0)
    extra = [n for key, n in dims.items() if (key, n) not in (us[0], vs[0])]
    # a batch: one more dimension that is a block index of z alone (``b = blockIdx.z``), kept as it is
    batch = extra[0][0] if len(extra) == 1 and len(extra[0]) == 1 and extra[0][0] in coords else ""
    if batch:
        got, _ = _affine(coords[batch], scope)
        batch = batch if got == {"blockIdx.z": "1"} else ""
    if len(dims) != 2 and not batch:
        also = ", ".join(" + ".join(n) for n in extra)
        return NotLegal(f"the indices move with {len(dims)} dimensions (also `{also}`): a tile stages a 2-D transpose "
                        "(a batch is one more block index of z alone)", line)
    u_names, v_names = us[0][1], vs[0][1]
    # other uses of the thread coordinates than the coordinate declarations would be re-bound wrongly
    coord_spans = [(v.start_byte, v.end_byte) for v in coords.values()]
    for f in walk(k.body, ("field_expression",)):
        a = f.child_by_field_name("argument")
        if a is not None and k.t(a) in _ALL_COORDS and not any(x <= f.start_byte < y for x, y in coord_spans):
            return NotLegal(f"`{k.t(f)}` is used outside the index declarations: the tile re-binds the threads",
                            k.line(f))
    ub = _binding(k, s, u_names, coords, flat, scope, chain_nodes)
    vb = _binding(k, s, v_names, coords, flat, scope, chain_nodes)
    for b in (ub, vb):
        if isinstance(b, NotLegal):
            return b
    assert isinstance(ub, Binding) and isinstance(vb, Binding)
    if ub.axis and ub.axis == vb.axis and not (ub.kind == vb.kind == "flat"):
        return NotLegal(f"both dimensions come from the grid's {ub.axis} axis", line)
    if (ub.kind == "flat") != (vb.kind == "flat"):
        return NotLegal("one dimension is a flat index's row or column, the other is not", line)
    used = {c for b in (ub, vb) for c in (b.local,) if c} | ({batch} if batch else set())
    for c in coords:
        if c not in used and c not in {b for _, b, _ in flat.values()}:
            return NotLegal(f"the index `{c}` is not one of the transpose's two dimensions", k.line(coords[c]))
    # the store's value reads the source only at the transposed index
    spans: list[tuple[int, int]] = []
    for sub, _ in reads:
        node = sub
        p = sub.parent
        if p is not None and p.type == "pointer_expression" and k.t(p).lstrip().startswith("&"):
            call = p.parent.parent if p.parent is not None and p.parent.type == "argument_list" else None
            fn = call.child_by_field_name("function") if call is not None else None
            if call is None or fn is None or k.t(fn) not in _LOADS:
                return NotLegal(f"the address of `{k.t(sub)}` is taken", k.line(sub))
            node = call
        spans.append((node.start_byte, node.end_byte))
    if sum(1 for a in s.accesses if a.param == src) != len(reads):
        return NotLegal(f"`{src}` is also read at another index", line)
    conds = [c.child_by_field_name("condition") for c in chain_nodes] + [
        x.child_by_field_name("condition") for x in statements(k.body) if x.type == "if_statement"]
    for sub, _ in reads:
        if st.start_byte <= sub.start_byte < st.end_byte:
            continue
        decl = sub.parent
        while decl is not None and decl.type not in ("declaration", "expression_statement", "if_statement",
                                                      "for_statement", "return_statement"):
            decl = decl.parent
        if decl is None or decl.type != "declaration":
            return NotLegal(f"`{k.t(sub)}` is read outside the store and the locals it computes", k.line(sub))
        names = declared_names(decl, k.data)
        if any(c is not None and _depends(c, names, k, scope) for c in conds):
            return NotLegal(f"`{k.t(sub)}` decides an exit, a guard or the loop: the tile's value is only there "
                            "for positions that store", k.line(sub))
        later_exit = [x for x in [*statements(k.body), *chain_nodes] if x.type == "if_statement"
                      and x.start_byte > decl.start_byte and decl.parent is not None and decl.parent.id == k.body.id]
        if later_exit:
            return NotLegal(f"`{k.t(sub)}` is read before the exit at line {k.line(later_exit[0])}: the tile would "
                            "read it for positions past the original's threads", k.line(sub))
    # the prelude: the body's top-level statements before the chain; the chain's inner statements before the store
    top = chain_nodes[0] if chain_nodes else st
    sts = statements(k.body)
    prelude: list[tuple[int, int]] = []
    after = False
    for x in sts:
        if x.id == top.id:
            after = True
            continue
        if after:
            if x.type == "return_statement" and x.named_child_count == 0:
                continue
            return NotLegal(f"`{k.t(x)[:60]}` follows the store: the store must be the kernel's last effect", k.line(x))
        bad = _prelude_bad(k, x)
        if bad:
            return NotLegal(bad, k.line(x))
        prelude.append((x.start_byte, x.end_byte))
    chain: list[tuple[str, tuple[int, int], tuple[tuple[int, int], ...]]] = []
    for n, cn in enumerate(chain_nodes):
        nxt = chain_nodes[n + 1] if n + 1 < len(chain_nodes) else st
        if cn.type == "if_statement":
            cond, body = cn.child_by_field_name("condition"), cn.child_by_field_name("consequence")
            if cn.child_by_field_name("alternative") is not None:
                return NotLegal("the guard around the store has an `else`", k.line(cn))
        else:
            cond, body = cn.child_by_field_name("condition"), cn.child_by_field_name("body")
        if cond is None or body is None:
            return NotLegal("a loop or guard around the store has no condition", k.line(cn))
        inner: list[tuple[int, int]] = []
        for x in statements(body):
            if x.id == nxt.id or (x.start_byte <= nxt.start_byte < x.end_byte):
                if x.id != nxt.id and x.type != "compound_statement":
                    return NotLegal("the store is nested in a statement the tile cannot re-run", k.line(x))
                break
            bad = _prelude_bad(k, x)
            if bad:
                return NotLegal(bad, k.line(x))
            inner.append((x.start_byte, x.end_byte))
        rest = [x for x in statements(body) if x.start_byte > nxt.end_byte]
        if rest:
            return NotLegal(f"`{k.t(rest[0])[:60]}` follows the store inside its loop or guard", k.line(rest[0]))
        chain.append(("if" if cn.type == "if_statement" else "for", (cond.start_byte, cond.end_byte), tuple(inner)))
    guard_nodes = [c.child_by_field_name("condition") for c in chain_nodes if c.type == "if_statement"]
    conditions = [("guard", (g.start_byte, g.end_byte)) for g in guard_nodes if g is not None]
    for x in sts:
        if x.type == "if_statement" and (x.start_byte, x.end_byte) in prelude:
            cx = x.child_by_field_name("condition")
            guard_nodes.append(cx)
            if cx is not None:
                conditions.append(("exit", (cx.start_byte, cx.end_byte)))
    guarded = tuple(any(_depends(g, names_of(b), k, scope) for g in guard_nodes if g is not None) for b in (ub, vb))
    if any(b.kind == "tile" for b in (ub, vb)) and guard_nodes:
        return NotLegal("a tile loop's kernel with a guard: the guard reads the index without the loop's offset, so "
                        "re-binding the tile would move it", line)
    for b in (ub, vb):
        if b.kind == "tile":
            left = plain_assignment(st, k.data)
            store_index = (unparen(left[0]).child_by_field_name("indices")
                           or unparen(left[0]).child_by_field_name("index")) if left is not None else None
            allowed = [(n.start_byte, n.end_byte) for n, _ in reads] + ([(store_index.start_byte, store_index.end_byte)]
                                                                        if store_index is not None else []) + [
                (f.start_byte, f.child_by_field_name("body").start_byte) for f in chain_nodes  # type: ignore[union-attr]
                if f.type == "for_statement" and f.child_by_field_name("body") is not None]
            stray = _stray_use(k, names_of(b), allowed)
            if stray is not None:
                return NotLegal(f"`{k.t(stray)}` is used besides the indices (line {k.line(stray)}): the tile moves "
                                f"`{b.local}` by the loop's offset, which only the indices may absorb", k.line(stray))
    values = tuple((b.local, (coords[b.local].start_byte, coords[b.local].end_byte)) for b in (ub, vb)
                   if b.local and b.kind != "flat")
    if ub.kind == "flat":
        values = ((ub.local, (coords[ub.local].start_byte, coords[ub.local].end_byte)),)
    return TransposePlan(src, dst, tuple(spans), (st.start_byte, st.end_byte), ub, vb, tuple(prelude), tuple(chain),
                         values, (guarded[0], guarded[1]), line, tuple(conditions), batch)


def _stray_use(k: Kernel, names: set[str], allowed: list[tuple[int, int]]) -> Node | None:
    """A use of ``names`` (or of a local computed from them) outside the ``allowed`` byte ranges, else None."""
    pending, seen = set(names), set(names)
    while pending:
        name = pending.pop()
        for ident in walk(k.body, ("identifier",)):
            if k.t(ident) != name or any(a <= ident.start_byte < b for a, b in allowed):
                continue
            p = ident.parent
            if p is not None and p.type == "init_declarator" and p.child_by_field_name("declarator") == ident:
                continue
            d = p
            while d is not None and d.type != "init_declarator" and d.id != k.body.id:
                d = d.parent
            nm = d.child_by_field_name("declarator") if d is not None and d.type == "init_declarator" else None
            if nm is None or nm.type != "identifier":
                return ident
            if k.t(nm) not in seen:
                seen.add(k.t(nm))
                pending.add(k.t(nm))
    return None


def names_of(b: Binding) -> set[str]:
    return {n for n in (b.local, b.counter) if n}


def _depends(node: Node, names: set[str], k: Kernel, scope: Scope, seen: set[str] | None = None) -> bool:
    """Whether ``node`` reads one of ``names``, directly or through single-assignment locals."""
    seen = seen if seen is not None else set()
    for i in walk(node, ("identifier",)):
        n = k.t(i)
        if n in names:
            return True
        v = scope.values.get(n)
        if v is not None and n not in seen:
            seen.add(n)
            if _depends(v, names, k, scope, seen):
                return True
    return False


def _prelude_bad(k: Kernel, x: Node) -> str:
    """Why a statement before the store cannot be re-run by every thread of the tile ("" when it can)."""
    if x.type == "declaration":
        if next(walk(x, ("assignment_expression", "update_expression")), None) is not None:
            return f"`{k.t(x)[:60]}` assigns inside a declaration"
        return ""
    if x.type == "if_statement" and x.child_by_field_name("alternative") is None:
        cons = x.child_by_field_name("consequence")
        inner = statements(cons) if cons is not None else []
        if len(inner) == 1 and inner[0].type == "return_statement" and inner[0].named_child_count == 0:
            return ""
    if x.type == "comment":
        return ""
    return f"`{k.t(x)[:60]}` runs before the store: only declarations and early exits are re-run by the tile"


def _loop_of(k: Kernel, counter: str, chain_nodes: list[Node]) -> Node | None:
    for c in chain_nodes:
        if c.type == "for_statement":
            init = c.child_by_field_name("initializer")
            if init is not None and counter in declared_names(init, k.data):
                return c
    return None


def _binding(k: Kernel, s: Summary, names: list[str], coords: dict[str, Node], flat: dict[str, tuple[str, str, Node]],
             scope: Scope, chain_nodes: list[Node]) -> Binding | NotLegal:
    locals_ = [n for n in names if n in coords]
    counters = [n for n in names if n in scope.counters and n not in coords and n not in flat]
    flats = [n for n in names if n in flat]
    if flats:
        if len(names) != 1:
            return NotLegal(f"`{' + '.join(names)}` mixes a flat index's part with other indices")
        op, base, e = flat[flats[0]]
        return Binding("flat", base, "", _axis_of(k, coords[base], scope) or "x", divisor=k.t(e),
                       bound="" if op == "/" else k.t(e))
    loop_info: tuple[str, str, str] | None = None
    counter_type = "int"
    if counters:
        if len(counters) > 1:
            return NotLegal(f"two loop counters (`{'`, `'.join(counters)}`) move one dimension")
        lp = next((x for x in s.loops if x.var == counters[0]), None)
        node = _loop_of(k, counters[0], chain_nodes)
        if lp is None or node is None:
            return NotLegal(f"an index moves with `{counters[0]}`, a loop the store is not in: the kernel sums or "
                            "walks over it, it does not copy one element per position")
        if lp.start.strip() != "0" or not lp.bound.startswith("< "):
            return NotLegal(f"the loop over `{lp.var}` does not run `{lp.var} = 0; {lp.var} < bound`", lp.line)
        bound = lp.bound[2:].strip()
        cond = node.child_by_field_name("condition")
        if cond is not None and _depends(cond, set(coords), k, scope):
            return NotLegal(f"the loop over `{lp.var}` has a bound that depends on the thread", lp.line)
        loop_info = (counters[0], bound, lp.step)
        init = node.child_by_field_name("initializer")
        ctype = init.child_by_field_name("type") if init is not None and init.type == "declaration" else None
        counter_type = k.t(ctype) if ctype is not None else "int"
    if len(locals_) > 1:
        return NotLegal(f"two thread indices (`{'`, `'.join(locals_)}`) move one dimension")
    if not locals_:
        if loop_info is None:
            return NotLegal(f"`{' + '.join(names)}` is not a thread index or loop counter")
        if loop_info[2] != "1":
            return NotLegal(f"the loop over `{loop_info[0]}` steps by {loop_info[2]}, not 1")
        return Binding("loop", "", loop_info[0], "", bound=loop_info[1], counter_type=counter_type)
    local = locals_[0]
    idx, why = _affine(coords[local], scope)
    if idx is None:
        return NotLegal(f"the index `{local}` is not affine: {why}", k.line(coords[local]))
    axis = _axis_of(k, coords[local], scope)
    t_atom, b_atom = f"threadIdx.{axis}", f"blockIdx.{axis}"
    if axis is None or idx.get(t_atom) != "1" or set(idx) - {t_atom, b_atom, "1"} or "1" in idx:
        return NotLegal(f"the index `{local}` is not blockIdx.a * extent + threadIdx.a of one axis",
                        k.line(coords[local]))
    coef = idx.get(b_atom, "0")
    if loop_info is None:
        return Binding("grid", local, "", axis, block_coef=coef)
    return Binding("tile", local, loop_info[0], axis, block_coef=coef, bound=loop_info[1], step=loop_info[2],
                   counter_type=counter_type)


def _axis_of(k: Kernel, value: Node, scope: Scope) -> str | None:
    axes = {k.t(f).split(".")[1] for f in walk(value, ("field_expression",))
            if (a := f.child_by_field_name("argument")) is not None and k.t(a) in COORDS and "." in k.t(f)}
    return axes.pop() if len(axes) == 1 else None
