"""Un-staging: a textbook shared-memory tiled dot product rewritten as the plain k-loop it computes.

Why: the classic one-output-per-thread tiling (each thread of a T x T block loads one element of an A tile
and one of a B tile into shared memory, a barrier, a T-long inner loop over the tiles, a barrier) is how
courses teach GEMM, and it is still bound by shared-memory loads: one output per thread reuses nothing in
registers. The register-tiling rule (``smem_tiling``) reads a plain ``for (k...) acc += A[..k..] * B[..k..]``
and declines a kernel that already has shared memory. Handing it the loop the staging computes lets it propose
its register-tiled variants; the canonical text is analysis input only (the rule's rewrite is a whole kernel
the search verifies like any candidate).

The rewrite (``unstage_tiles``): a tile loop ``for (c = I; c < E; c += St) { stores; __syncthreads();
for (j = 0; j < T; ++j) acc += F; __syncthreads(); }`` becomes ``for (j = 0; j < D; ++j) acc += F';`` with
``D = E - I`` (``E + 1 - I`` for ``<=``), each shared read in ``F`` replaced by the global read the thread that
filled that slot made, with the tile counters at their start and the tile's position folded into ``j``; the
shared arrays' declarations go. Exact when (each condition is checked; a failure is a ``Skipped`` in words):

* the tile loop's body is exactly: one store per shared array ``S[ty][tx] = P[e]`` (or ``S[ty * W + tx]``,
  ``W`` the tile width) of a read of a pointer parameter the kernel never writes, at the thread's own slot;
  ``__syncthreads()``; the inner loop over ``j`` in ``[0, T)`` whose one statement updates an accumulator and
  reads the shared arrays only at ``(ty, j)`` or ``(j, tx)`` (and names ``j`` nowhere else);
  ``__syncthreads()``. Its counters (one, or two stepped together: ``a += aStep, b += bStep``) are written
  only by its update, by a uniform step;
* the tile loop is a top-level statement of the kernel and no ``return`` comes before it (every thread of the
  block runs the stores: a slot the reader uses was loaded);
* the shared arrays are used nowhere else in the kernel, and it has no others (the barriers removed with the
  tiles could be ordering them);
* the launch's block is square and equal to the tile: ``blockDim.x == blockDim.y == T`` (and ``blockDim.z
  == 1``) at every size of the spec (the launch is a run-time fact: without a spec, or with a block that
  differs, the pass skips). Then slot ``(r, c)`` holds what thread ``(x = c, y = r)`` of the same block
  loaded in the same tile: a read at ``(ty, j)`` is the stored read with ``threadIdx.x := j`` (the A side),
  one at ``(j, tx)`` with ``threadIdx.y := j`` (the B side). That substitution is made in the text, so
  ``threadIdx.x``/``y`` (or a local that is exactly it) must reach the stored read's index only directly:
  every other local the index names must not depend on the substituted coordinate;
* the stored index is affine in the tile counters and ``j`` with ``sum(coefficient of c * St_c) == T *
  coefficient of j`` (the tile's start and ``j`` fold into one ``k = tile * T + j``), the first counter steps
  by ``T`` (or by 1: a loop counting tiles, whose range is ``D * T``), and ``D`` is the same for every thread
  and reads no name the kernel writes (it is spelled out from the locals' values). ``D`` must be a whole
  number of tiles at every size of the spec (the perturbed one too): elsewhere the staged loop reads the last
  tile whole, past its arrays, and a variant computing the same sums would read there too — compute-sanitizer
  rejects it at the end of the search (it did, on an H200, for every variant of cuda-samples'
  ``MatrixMulNaive`` while ``D`` was rounded up); the decline says to give that size an ``odd=`` that is a
  multiple of the tile. The canonical text never names ``blockDim`` (a rule's rewrite changes the block).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.parser import parse_tree
from ...cuda.poly import padd, pmul
from ...cuda.tree import node_text, unparen, walk, written_names
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .affine import NonAffine, Poly, Scope, poly
from .passes import Changed, Kernel, PassEnv, Result, Skipped, register, side_effect_free, splice, statements
from .passes import Unmet as _No
from .polyops import coefficient, evaluate, names_read, rename, render, substitute
from .summary import params_of, scope_of

_TX, _TY = "threadIdx.x", "threadIdx.y"
_BLOCK = ("blockDim.x", "blockDim.y", "blockDim.z")




@dataclass(frozen=True)
class _Store:
    array: str
    stmt: Node
    #: the pointer parameter read and the read's index node
    source: str
    index: Node


@dataclass(frozen=True)
class _Read:
    node: Node
    array: str
    #: the coordinate the slot's loader had where the reader has ``j``
    coord: str


def _shared_decls(body: Node, k: Kernel) -> dict[str, Node]:
    out: dict[str, Node] = {}
    for n in walk(body, ("declaration",)):
        quals = {k.t(c) for c in n.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if "__shared__" not in quals:
            continue
        for d in n.children_by_field_name("declarator"):
            while d.type == "array_declarator":
                inner = d.child_by_field_name("declarator")
                if inner is None:
                    break
                d = inner
            if d.type == "identifier":
                out[k.t(d)] = n
    return out


def _slot(sub: Node, k: Kernel, scope: Scope, width: Poly, norm: Mapping[str, int],
          j: str) -> tuple[Poly, Poly] | None:
    """(row, column) polynomials of a shared-array access ``S[r][c]`` or ``S[r * W + c]`` (W the tile width),
    or None when the index is not of that form in the thread coordinates and ``j``."""
    idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
    arg = sub.child_by_field_name("argument")
    if idx is None or arg is None or idx.named_child_count != 1:
        return None
    try:
        if unparen(arg).type == "subscript_expression":
            inner = unparen(arg).child_by_field_name("indices") or unparen(arg).child_by_field_name("index")
            base = unparen(arg).child_by_field_name("argument")
            if inner is None or inner.named_child_count != 1 or base is None or base.type != "identifier":
                return None  # three subscripts or more: not a tile
            return (substitute(poly(inner.named_children[0], scope), norm),
                    substitute(poly(idx.named_children[0], scope), norm))
        flat = substitute(poly(idx.named_children[0], scope), norm)
    except NonAffine:
        return None
    # r * W + c with r, c each one coordinate (or j): split by which atom carries W
    for r_atom in (_TY, j):
        r: Poly = {(r_atom,): 1}
        rest = padd(flat, substitute(pmul(r, width), norm), -1)
        if len(rest) == 1 and next(iter(rest.values())) == 1 and len(next(iter(rest))) == 1:
            return r, rest
    return None


def _array_of(sub: Node, k: Kernel) -> str | None:
    arg = sub.child_by_field_name("argument")
    while arg is not None and unparen(arg).type == "subscript_expression":
        arg = unparen(arg).child_by_field_name("argument")
    return k.t(arg) if arg is not None and arg.type == "identifier" else None


def _counters(loop: Node, k: Kernel, scope: Scope) -> tuple[dict[str, tuple[Node, Poly]], dict[str, Poly]]:
    """The tile loop's counters: name -> (initial value node, its polynomial), and name -> step."""
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        raise _No("the tile loop does not declare its counters", loop)
    starts: dict[str, tuple[Node, Poly]] = {}
    for d in init.children_by_field_name("declarator"):
        nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if d.type != "init_declarator" or nm is None or v is None or nm.type != "identifier":
            raise _No("a tile loop counter has no start value", loop)
        try:
            starts[k.t(nm)] = (v, poly(v, scope))
        except NonAffine as e:
            raise _No(f"the start of `{k.t(nm)}` is not affine: {e}", loop) from None
    upd = loop.child_by_field_name("update")
    parts: list[Node] = []
    todo = [upd] if upd is not None else []
    while todo:
        n = unparen(todo.pop())
        if n.type == "comma_expression":
            todo += [c for c in (n.child_by_field_name("right"), n.child_by_field_name("left")) if c is not None]
        else:
            parts.append(n)
    steps: dict[str, Poly] = {}
    for n in parts:
        arg = n.child_by_field_name("argument")
        if n.type == "update_expression" and arg is not None and k.t(arg) in starts and k.t(arg) not in steps \
                and "++" in k.t(n):
            steps[k.t(arg)] = {(): 1}
            continue
        left, op, right = (n.child_by_field_name(f) for f in ("left", "operator", "right"))
        if n.type != "assignment_expression" or left is None or op is None or right is None \
                or k.t(left) not in starts or k.t(left) in steps:
            raise _No(f"the tile loop's update `{k.t(n)}` is not `counter += step`", n)
        name = k.t(left)
        step = right
        if k.t(op) == "=":
            b = unparen(right)
            bl, bo, br = (b.child_by_field_name(f) for f in ("left", "operator", "right"))
            if b.type != "binary_expression" or bl is None or bo is None or br is None or k.t(bo) != "+" \
                    or k.t(bl) != name:
                raise _No(f"the tile loop's update `{k.t(n)}` is not `counter += step`", n)
            step = br
        elif k.t(op) != "+=":
            raise _No(f"the tile loop's update `{k.t(n)}` is not `counter += step`", n)
        try:
            sp = poly(step, scope)
        except NonAffine as e:
            raise _No(f"the step of `{name}` is not affine: {e}", n) from None
        if any(a.startswith(("threadIdx", "blockIdx")) or a in scope.counters for m in sp for a in m):
            raise _No(f"the step of `{name}` differs between threads or iterations", n)
        steps[name] = sp
    if set(steps) != set(starts):
        raise _No("every tile loop counter must step once per tile", loop)
    return starts, steps


def _inner(loop: Node, k: Kernel) -> tuple[str, str, Node, Node]:
    """The inner loop ``for (T j = 0; j < W; ++j) stmt``: (type, counter, bound node, the one statement)."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
    if init is None or len(ds) != 1 or ds[0].type != "init_declarator":
        raise _No("the inner loop does not declare one counter", loop)
    nm, v, t = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value"), \
        init.child_by_field_name("type")
    if nm is None or v is None or t is None or k.t(v).strip() != "0":
        raise _No("the inner loop does not start at 0", loop)
    j = k.t(nm)
    c = unparen(cond) if cond is not None else None
    cl, co, cr = (c.child_by_field_name(f) for f in ("left", "operator", "right")) if c is not None else (None,) * 3
    if c is None or c.type != "binary_expression" or cl is None or co is None or cr is None \
            or k.t(cl) != j or k.t(co) != "<":
        raise _No("the inner loop's condition is not `j < T`", loop)
    if upd is None or "".join(k.t(upd).split()) not in (f"++{j}", f"{j}++", f"{j}+=1", f"{j}={j}+1"):
        raise _No("the inner loop does not step by 1", loop)
    body = statements(loop.child_by_field_name("body"))
    if len(body) != 1 or body[0].type != "expression_statement":
        raise _No("the inner loop's body is not one statement", loop)
    return k.t(t), j, cr, body[0]


def _values(env: PassEnv) -> list[dict[str, int]]:
    """Per size of the spec: the kernel's scalar parameters and the file's integer constants as numbers."""
    out: list[dict[str, int]] = []
    for vals in env.values:
        got = dict(vals)
        for _ in range(4):  # constants defined from other constants
            for name, text in env.constants.items():
                if name in got:
                    continue
                try:
                    v = parse_expr(text).evaluate(dict(got))
                except ExprError:
                    continue
                if isinstance(v, int):
                    got[name] = v
        out.append(got)
    return out


@register("unstage_tiles", "a tile loop that stages one A and one B element per thread of a square block in "
                           "shared memory, syncs, runs a tile-long inner loop over them and syncs again")
def unstage_tiles(k: Kernel, env: PassEnv) -> Result:
    shared = _shared_decls(k.body, k)
    if not shared:
        return None
    skipped: Skipped | None = None
    for loop in walk(k.body, ("for_statement",)):
        body = [s for s in statements(loop.child_by_field_name("body"))
                if s.type not in ("preproc_call",) and not (s.type == "declaration" and s in shared.values())]
        if not any(s.type == "expression_statement" and "__syncthreads" in k.t(s) for s in body):
            continue
        try:
            return _unstage(k, env, loop, body, shared)
        except _No as e:
            skipped = skipped or Skipped(e.reason, k.line(e.node))
        except NonAffine as e:
            skipped = skipped or Skipped(f"an index is not affine: {e}", k.line(loop))
    return skipped


def _resolved(t: str, env: PassEnv) -> str:
    t = " ".join(t.replace("const", " ").split())
    return env.template_args.get(t, env.typedefs.get(t, t))


def _is_sync(s: Node, k: Kernel) -> bool:
    return s.type == "expression_statement" and "".join(k.t(s).split()) == "__syncthreads();"


def _unstage(k: Kernel, env: PassEnv, loop: Node, body: list[Node], shared: dict[str, Node]) -> Changed:
    params, uniform = params_of(k)
    written = written_names(k.body, k.data)
    scope = scope_of(k, uniform | {c for c in env.constants if c not in written}, set())
    syncs = [i for i, s in enumerate(body) if _is_sync(s, k)]
    if len(syncs) != 2 or syncs[1] != len(body) - 1 or syncs[0] != len(body) - 3 or syncs[0] < 1:
        raise _No("the tile loop's body is not `stores; __syncthreads(); inner loop; __syncthreads();` (a barrier "
                  "is missing or something else runs between them)", loop)
    if loop.parent != k.body:
        raise _No("the tile loop is not a top-level statement of the kernel: every thread of the block must run its "
                  "stores", loop)
    if any(n.start_byte < loop.start_byte for n in walk(k.body, ("return_statement", "goto_statement"))):
        raise _No("a thread may leave the kernel before the tile loop: its slots would not be loaded", loop)
    inner = body[syncs[0] + 1]
    if inner.type != "for_statement":
        raise _No("between the tile loop's barriers there is no inner loop", inner)
    blocks = env.blocks
    if not blocks:
        raise _No("the launch's block is unknown: the un-staged loop is exact only on a square block equal to "
                  "the tile", loop)
    norm = dict(zip(_BLOCK, blocks[0], strict=True)) if len(set(blocks)) == 1 else {}
    jtype, j, bound, stmt = _inner(inner, k)
    width = substitute(poly(bound, scope), norm)
    values = _values(env)
    for b, vals in zip(blocks, values or [{}] * len(blocks), strict=False):
        t = evaluate(substitute(width, dict(zip(_BLOCK, b, strict=True))), vals)
        if b[2] != 1 or b[0] != b[1] or t != b[0]:
            raise _No(f"the tile is not square: the launch's block is {b[0]}x{b[1]}x{b[2]} and the inner loop runs "
                      f"{t if t is not None else k.t(bound)} steps (slot (r, c) holds thread (c, r)'s load only on a "
                      "square block equal to the tile)", loop)
    # the stores: S[ty][tx] = P[e] (or S[ty * W + tx]), each array once
    stores: dict[str, _Store] = {}
    pointers = {n for n, _, ptr, _ in params if ptr}
    jscope = Scope(scope.values, scope.counters | {j}, scope.uniform, scope.varying, scope.data)
    for s in body[:syncs[0]]:
        a = s.named_children[0] if s.type == "expression_statement" and s.named_child_count == 1 else None
        left, op, right = (a.child_by_field_name(f) for f in ("left", "operator", "right")) if a is not None \
            and a.type == "assignment_expression" else (None,) * 3
        if left is None or op is None or right is None or k.t(op) != "=" \
                or unparen(left).type != "subscript_expression":
            raise _No(f"`{k.t(s)}` in the tile loop is not a store to a shared array", s)
        arr = _array_of(unparen(left), k)
        if arr is None or arr not in shared or arr in stores:
            raise _No(f"`{k.t(s)}` is not the one store of a shared array in the tile loop", s)
        slot = _slot(unparen(left), k, jscope, width, norm, j)
        if slot != ({(_TY,): 1}, {(_TX,): 1}):
            raise _No(f"`{k.t(left)}` is not the thread's own slot (threadIdx.y, threadIdx.x): another thread's "
                      "load would be read", s)
        src = unparen(right)
        sarg = src.child_by_field_name("argument") if src.type == "subscript_expression" else None
        sidx = (src.child_by_field_name("indices") or src.child_by_field_name("index")) if sarg is not None else None
        if sarg is None or sidx is None or sidx.named_child_count != 1 or k.t(sarg) not in pointers:
            raise _No(f"the value stored in `{arr}` is not a read of a pointer parameter", s)
        if k.t(sarg) in written or any(_array_of(w, k) == k.t(sarg) for w in _stored(k)):
            raise _No(f"`{k.t(sarg)}` is written in the kernel: a value loaded earlier may differ", s)
        elem = {n: t for n, t, ptr, _ in params if ptr}[k.t(sarg)]
        tile = shared[arr].child_by_field_name("type")
        if tile is None or _resolved(k.t(tile), env) != _resolved(elem, env):
            raise _No(f"`{arr}` holds `{k.t(tile) if tile is not None else '?'}` and `{k.t(sarg)}` `{elem}`: the store "
                      "converts, and a read of the global would not", s)
        stores[arr] = _Store(arr, s, k.t(sarg), sidx.named_children[0])
    # every use of a shared array is its declaration, its store, or a read in the inner statement
    reads: list[_Read] = []
    for sub in walk(stmt, ("subscript_expression",)):
        if sub.parent is not None and sub.parent.type == "subscript_expression" \
                and sub.parent.child_by_field_name("argument") == sub:
            continue
        arr = _array_of(sub, k)
        if arr is None or arr not in shared:
            continue
        if arr not in stores:
            raise _No(f"`{arr}` is read in the inner loop but not stored in this tile loop", sub)
        slot = _slot(sub, k, jscope, width, norm, j)
        if slot == ({(_TY,): 1}, {(j,): 1}):
            reads.append(_Read(sub, arr, _TX))
        elif slot == ({(j,): 1}, {(_TX,): 1}):
            reads.append(_Read(sub, arr, _TY))
        else:
            raise _No(f"`{k.t(sub)}` reads the tile at neither (threadIdx.y, {j}) nor ({j}, threadIdx.x)", sub)
    allowed = [(r.node.start_byte, r.node.end_byte) for r in reads]
    for st in stores.values():
        left = st.stmt.named_children[0].child_by_field_name("left")
        assert left is not None
        allowed.append((left.start_byte, left.end_byte))
    for name, decl in shared.items():
        for n in walk(k.body, ("identifier",)):
            if k.t(n) == name and not decl.start_byte <= n.start_byte < decl.end_byte \
                    and not any(s <= n.start_byte < e for s, e in allowed):
                raise _No(f"the shared array `{name}` is used outside the staged tile loop's stores and tile reads", n)
    if set(shared) != set(stores):
        raise _No(f"the kernel has other shared arrays ({', '.join(sorted(set(shared) - set(stores)))}): the tile "
                  "loop's barriers may order their accesses", loop)
    if not reads or {r.coord for r in reads} != {_TX, _TY}:
        raise _No("the inner loop does not read one tile along its row and one along its column", stmt)
    if any(k.t(n) == j for n in walk(stmt, ("identifier",)) if not any(r.node.start_byte <= n.start_byte
                                                                        < r.node.end_byte for r in reads)):
        raise _No(f"the inner loop names `{j}` outside its tile reads", stmt)
    acc = stmt.named_children[0] if stmt.named_child_count == 1 else None
    target = acc.child_by_field_name("left") if acc is not None and acc.type == "assignment_expression" else None
    if acc is None or target is None:
        raise _No("the inner loop's statement is not an update of an accumulator", stmt)
    if any(k.t(n) in shared for n in walk(target, ("identifier",))):
        raise _No("the inner loop writes a tile", stmt)
    # the tile loop: counters, the first one in the condition stepping by the tile
    starts, steps = _counters(loop, k, scope)
    if written_names(loop.child_by_field_name("body") or loop, k.data) & set(starts):
        raise _No("a tile loop counter is written in its body", loop)
    cond = loop.child_by_field_name("condition")
    c = unparen(cond) if cond is not None else None
    cl, co, cr = (c.child_by_field_name(f) for f in ("left", "operator", "right")) if c is not None else (None,) * 3
    if c is None or cl is None or co is None or cr is None or k.t(cl) not in starts or k.t(co) not in ("<", "<="):
        raise _No("the tile loop's condition is not `counter < end` (or `<=`)", loop)
    first = k.t(cl)
    by_tile = substitute(steps[first], norm) == width
    if not by_tile and steps[first] != {(): 1}:
        raise _No(f"`{first}` steps neither by the tile width nor by 1", loop)
    span = padd(padd(poly(cr, scope), {(): 1} if k.t(co) == "<=" else {}), starts[first][1], -1)
    span = substitute(span, norm)
    if any(a.startswith(("threadIdx", "blockIdx", "blockDim", "gridDim")) or a in scope.counters
           for m in span for a in m):
        raise _No(f"the tile loop's trip count ({render(span)}) differs between threads or names the launch", loop)
    if not values:
        raise _No("the spec's sizes are unknown: whether the tile loop covers whole tiles cannot be told", loop)
    if any(a.startswith("(") and "blockDim" in a for m in span for a in m):
        raise _No("the tile loop's range names the launch's block", loop)
    if names_read(span) & written:
        raise _No(f"the tile loop's range ({render(span)}) reads a name the kernel writes", loop)
    # the k range as written where it can be: `i < E` from 0 is `k < E`
    written_limit = k.t(cr) if not any(starts[first][1].values()) and k.t(co) == "<" else render(span)
    if not by_tile:  # a tile index stepping by 1: its range counts tiles
        if len(set(blocks)) != 1:
            raise _No("the tile loop counts tiles and the tile differs between the spec's sizes", loop)
        return _emit(k, loop, shared, stores, reads, starts, steps, norm, width, jscope, stmt, jtype, j,
                     f"({written_limit}) * {blocks[0][0]}")
    for b, vals in zip(blocks, values, strict=False):
        count = evaluate(span, vals)
        if count is None:
            raise _No(f"the tile loop's range ({render(span)}) cannot be evaluated at the spec's sizes", loop)
        if count % b[0]:
            # the staged loop reads the last tile whole, past its arrays' ends: a variant that computes the same
            # sums reads there too, and compute-sanitizer rejects it (as it would the original); on an H200
            # every register-tiled variant of cuda-samples' MatrixMulNaive was rejected so at the end
            raise _No(f"the tile loop's range ({render(span)} = {count} at one of the spec's sizes) is not a whole "
                      f"number of {b[0]}-wide tiles: the original reads past its arrays there; give that size an "
                      "`odd=` that is a multiple of the tile, or mark it `fixed`", loop)
    return _emit(k, loop, shared, stores, reads, starts, steps, norm, width, jscope, stmt, jtype, j,
                 written_limit)


def _emit(k: Kernel, loop: Node, shared: dict[str, Node], stores: dict[str, _Store], reads: list[_Read],
          starts: dict[str, tuple[Node, Poly]], steps: dict[str, Poly], norm: dict[str, int], width: Poly,
          jscope: Scope, stmt: Node, jtype: str, j: str, limit: str) -> Changed:
    """The tile loop replaced by its k-loop (each read folded, checked), the shared declarations removed."""
    # each read: the stored read with the loader's coordinate := j, then tile start + j folded into one index
    edits: list[tuple[int, int, str]] = []
    for r in reads:
        st = stores[r.array]
        p = substitute(poly(st.index, jscope), norm)
        pj = rename(p, r.coord, "#j")
        total: Poly = {}
        for name in starts:
            total = padd(total, pmul(coefficient(pj, name), substitute(steps[name], norm)))
        coefs = [coefficient(pj, name) for name in starts] + [coefficient(pj, "#j")]
        if any(a in starts or a == "#j" for c in coefs for m in c for a in m):
            raise _No(f"`{st.source}[{k.t(st.index)}]` multiplies a tile counter by another index", st.stmt)
        if total != pmul(width, coefficient(pj, "#j")):
            raise _No(f"`{st.source}[{k.t(st.index)}]`: the tile's start and the slot do not fold into one index "
                      "(its coefficients of the counters times their steps differ from the tile width times its "
                      f"coefficient of {r.coord})", st.stmt)
        edits.append((r.node.start_byte, r.node.end_byte, _reread(k, st, r.coord, starts, j, jscope)))
    new_stmt = _within(k, stmt, edits)
    ind = _indent(loop, k)
    text = (f"for ({jtype} {j} = 0; {j} < {limit}; ++{j}) {{\n{ind}    {new_stmt}\n{ind}}}")
    out = [(loop.start_byte, loop.end_byte, text)]
    for decl in {d.start_byte: d for d in shared.values() if not (loop.start_byte <= d.start_byte < loop.end_byte)
                 }.values():
        start = k.data.rfind(b"\n", 0, decl.start_byte) + 1
        whole = not k.data[start:decl.start_byte].strip()
        out.append((start if whole else decl.start_byte, decl.end_byte + (1 if whole and k.data[decl.end_byte:
                    decl.end_byte + 1] == b"\n" else 0), ""))
    out += _dead_locals(k, loop, text)
    return Changed(splice(k.data, out), f"the shared-memory tiles of {', '.join(sorted(stores))} un-staged into "
                                        f"their k-loop (line {k.line(loop)})")


def _dead_locals(k: Kernel, loop: Node, new_loop: str) -> list[tuple[int, int, str]]:
    """Deletions of the kernel's top-level ``T x = v;`` (``v`` free of effects) that only the staged loop read
    (``const int tx = threadIdx.x;``): with the loop un-staged nothing reads them, and a rule would otherwise see
    a thread coordinate outside the index declarations."""
    out: list[tuple[int, int, str]] = []
    for d in k.body.named_children:
        ds = d.children_by_field_name("declarator") if d.type == "declaration" else []
        if len(ds) != 1 or ds[0].type != "init_declarator" or d.start_byte >= loop.start_byte:
            continue
        nm, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if nm is None or v is None or nm.type != "identifier" or not side_effect_free(v) \
                or next(walk(v, ("subscript_expression",)), None) is not None:
            continue
        name = k.t(nm)
        uses = [n for n in walk(k.body, ("identifier",)) if k.t(n) == name and n != nm]
        if not uses or any(not loop.start_byte <= n.start_byte < loop.end_byte for n in uses) \
                or re.search(rf"\b{re.escape(name)}\b", new_loop):
            continue
        start = k.data.rfind(b"\n", 0, d.start_byte) + 1
        whole = not k.data[start:d.start_byte].strip() and k.data[d.end_byte:d.end_byte + 1] == b"\n"
        out.append((start, d.end_byte + 1, "") if whole else (d.start_byte, d.end_byte, ""))
    return out


def _stored(k: Kernel) -> list[Node]:
    out: list[Node] = []
    for a in walk(k.body, ("assignment_expression", "update_expression")):
        t = a.child_by_field_name("left") or a.child_by_field_name("argument")
        if t is not None and unparen(t).type == "subscript_expression":
            out.append(unparen(t))
    return out


def _reread(k: Kernel, st: _Store, coord: str, starts: dict[str, tuple[Node, Poly]], j: str, scope: Scope) -> str:
    """``P[e]`` with the loader's coordinate (``threadIdx.x``/``y``, or a local that is exactly it) as ``j`` and
    each tile counter at its start; any other local ``e`` names must not depend on that coordinate."""
    edits: list[tuple[int, int, str]] = []
    for n in walk(st.index, ("identifier", "field_expression")):
        if any(s <= n.start_byte < e for s, e, _ in edits):
            continue
        name = k.t(n)
        if n.type == "field_expression":
            if "".join(name.split()) == coord:
                edits.append((n.start_byte, n.end_byte, j))
            continue
        if n.parent is not None and n.parent.type == "field_expression":
            continue
        if name in starts:
            v, vp = starts[name]
            # a name or a literal bare: `(aBegin) + x` reads as a cast of `+x` to the syntax tree
            plain = unparen(v).type in ("identifier", "number_literal")
            edits.append((n.start_byte, n.end_byte, "0" if not any(vp.values()) else k.t(unparen(v)) if plain
                          else f"({k.t(v)})"))
            continue
        try:
            p = poly(n, scope)
        except NonAffine:
            if name in scope.values:
                raise _No(f"`{name}` in the stored read is not affine: whether it depends on {coord} cannot be told",
                          st.stmt) from None
            continue
        if p == {(coord,): 1}:
            edits.append((n.start_byte, n.end_byte, j))
        elif any(coord in m for m in p):
            raise _No(f"`{name}` in the stored read depends on {coord} through a local: the slot's loader is not "
                      "this thread with one coordinate changed in the text", st.stmt)
    return f"{st.source}[{_zeros(_within(k, st.index, edits))}]"


def _within(k: Kernel, node: Node, edits: list[tuple[int, int, str]]) -> str:
    sub = k.data[node.start_byte:node.end_byte]
    return splice(sub, [(s - node.start_byte, e - node.start_byte, t) for s, e, t in edits])


def _zeros(expr: str) -> str:
    """``expr`` without the terms a counter started at 0 left behind (``0 * N +``, ``+ 0``)."""
    data = f"int wf_ = {expr};".encode()
    tree = parse_tree(data)
    vals = [n for n in walk(tree.root_node, ("init_declarator",))]
    v = vals[0].child_by_field_name("value") if vals else None
    if v is None or tree.root_node.has_error:
        return expr

    def render(n: Node) -> str:
        if n.type == "binary_expression":
            left, op, right = (n.child_by_field_name(f) for f in ("left", "operator", "right"))
            if left is not None and op is not None and right is not None:
                o = node_text(op, data)
                a, b = render(left), render(right)
                if o == "*" and "0" in (a, b):
                    return "0"
                if o == "+" and a == "0":
                    return b
                if o in ("+", "-") and b == "0":
                    return a
                return a + data[left.end_byte:right.start_byte].decode() + b
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            inner = render(n.named_children[0])
            return "0" if inner == "0" else f"({inner})"
        return node_text(n, data)

    return render(v)


def _indent(n: Node, k: Kernel) -> str:
    start = k.data.rfind(b"\n", 0, n.start_byte) + 1
    line = k.data[start:n.start_byte].decode("utf-8", "replace")
    return line if not line.strip() else ""
