"""Block items: a block-per-item cooperative reduction rewritten as the thread-per-item serial loop it computes.

Why: many kernels give one *block* to each output item (``o = blockIdx.x``), let its threads stride over the
item's loop (``for (i = tid; i < n; i += blockDim.x) acc += x[i * C + o]``), fold the partials with a block
reduction and let one thread store (``if (tid == 0) out[o] = sh[0]``). When the loop walks down a column, the
threads of a warp read ``x`` a row apart (uncoalesced) while neighbouring *items* are contiguous. The rules
that fix that (``column_split``, ``warp_per_row``, ``column_remap``, ``lane_remap``) read the thread-per-item
form and decline a kernel with shared memory and barriers. Handing them the serial loop the block computes
lets them propose their variants; the canonical text is analysis input only (a rule's rewrite is a whole kernel
the search verifies against the original like any candidate, with the tolerances of every reduction rewrite).

The rewrite (``block_items``)::

    int o = blockIdx.x;                      ->  int o = blockIdx.x * blockDim.x + threadIdx.x;
                                                 if (o >= BOUND) return;
    int tid = threadIdx.x; int bs = blockDim.x;  (dropped)
    for (int i = tid; i < n; i += bs) ...    ->  for (int i = 0; i < n; ++i) ...
    sh[tid] = (float) acc;                   ->  float sh_total = (float) acc;
    __syncthreads(); tree over sh;           ->  (dropped)
    if (tid == 0) { out[o] = sh[0]; }        ->  out[o] = sh_total;

``BOUND`` is the original launch's ``grid.x`` in the kernel's names (a spec size named by a scalar parameter
whose spec value is exactly that size, or a constant), so the text is exact under any 1-D launch with at least
``BOUND`` threads. Exact when (each condition is checked; a failure is a ``Skipped`` in words):

* the item is ``blockIdx.x`` (directly, or through one local assigned once); the grid is 1-D and the block 1-D
  at every size of the spec; ``blockIdx.y/z``, ``gridDim``, ``threadIdx.y/z``, ``blockDim.y/z`` are not used;
* one top-level loop ``for (i = tid; i < n; i += bs)`` (``tid`` is ``threadIdx.x`` or a local equal to it,
  ``bs`` ``blockDim.x`` or a local equal to it; ``n`` the same for the whole block), whose carried values are
  accumulators (``remap.carried_scalars``: sums, min/max), each declared before it — a sum from zero (every
  thread's partial starts there), a min/max from any value the same for the block (idempotent);
* after it, one store per shared array ``sh[tid] = acc`` (or a cast of ``acc``), barriers, and one shared-memory
  tree (``warp_reduce.tree.match_tree_loop``: the halving and interleaved spellings) whose combine is the
  accumulator's (a sum folds sums, fmaxf/max a maximum), starting at half the block, which is a power of two at
  every size: the tree then folds exactly the block's partials into ``sh[0]``; nothing else runs between them;
* then the stores by one thread (``if (tid == 0) { ... }``, or ``if (tid != 0) return;`` and what follows),
  which read the shared arrays only as ``sh[0]`` and name neither the thread index nor the block size;
* no other write of memory, no atomic, no other barrier or shared array, no ``return`` elsewhere;
  ``threadIdx.x`` and ``blockDim.x`` appear nowhere else.

Other spellings read the same way: partials kept in the thread's own shared slot (``sh[tid] = 0; ... sh[tid] +=
e``: the slot is read as a register first, exact since no other thread reads it before the barrier); no tree but
thread 0 folding the slots itself after a barrier (``for (i = 0; i < B; ++i) out[o] += sh[i]``, ``B`` the block at
every size); the block size as a parameter, a literal or a literal local equal to the launch's block at every size;
the strided loop nested in uniform loops with nothing else in them but declarations; and the thread's offset inside
the body (``for (i = s; i < n; i += bs) { ... tid + i ... }``, every mention of ``tid`` and ``i`` in a sum
``tid + i + ...``, every read and accumulator update under the guard ``tid + i < n``): the threads then cover each
element of ``[s, n)`` once, and the serial loop is the body with ``tid`` dropped and a step of 1.

The pass is three modules: ``block_shape`` (how the kernel names its thread, block size and item, and where its
strided loop is), ``block_forms`` (the shared-slot and thread-offset spellings) and this one (the reduction after
the loop, the one thread's stores, the bound, and the rewrite).
"""


from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tree_sitter import Node

from ...cuda.tree import member, plain_assignment, unparen, walk, written_names
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .block_forms import _guarded_updates, _offset, _slot_in_register
from .block_shape import (
    _builtin_uses,
    _find,
    _Found,
    _fresh,
    _is,
    _is_barrier,
    _locals,
    _loop_var,
    _mentions,
    _Names,
    _shared,
    _sized,
)
from .passes import (
    Changed,
    Kernel,
    PassEnv,
    Result,
    Skipped,
    find_kernel,
    register,
    side_effect_free,
    splice,
    statements,
)
from .passes import Unmet as _No
from .remap import NotLegal, Reduction, carried_scalars

_SUM = "sum"


_MAX = ("fmaxf", "fmax", "max")


_MIN = ("fminf", "fmin", "min")


def _kind(combine: str) -> str:
    """"sum", "max" or "min" for an accumulator's combine or a tree step's format (``{a} + {b}``)."""
    c = "".join(combine.split())
    if c in (_SUM, "{a}+{b}", "{b}+{a}"):
        return "sum"
    for fn in _MAX:
        if c == fn or c in (f"{fn}({{a}},{{b}})", f"{fn}({{b}},{{a}})"):
            return "max"
    for fn in _MIN:
        if c == fn or c in (f"{fn}({{a}},{{b}})", f"{fn}({{b}},{{a}})"):
            return "min"
    return c


@register("block_items", "one block per item (blockIdx.x) whose threads stride over the item's loop, a "
                         "shared-memory tree over their partials, and one thread storing the result")
def block_items(k: Kernel, env: PassEnv) -> Result:
    if "__syncthreads" not in k.text or "blockIdx" not in k.text:
        return None
    nm = _sized(k, env, _locals(k))
    loops = [got for st in statements(k.body) if (got := _find(st, k, nm)) is not None]
    if not loops:
        return None
    try:
        if len(loops) > 1:
            raise _No("the kernel has several loops strided by the block: one reduction per item is lowered",
                      loops[1].top)
        slot = _slot_in_register(k, nm, loops[0].top)
        if slot is None:
            return _lower(k, env, nm, loops[0])
    except _No as e:
        return Skipped(e.reason, k.line(e.node))
    # the partial kept in a register, then lowered (the rewrite keeps every line where it was)
    k2 = find_kernel(slot, _name(k))
    if k2 is None:
        return Skipped("the shared slot's partial, kept in a register, does not parse", k.line(loops[0].top))
    nm2 = _sized(k2, env, _locals(k2))
    loops2 = [got for st in statements(k2.body) if (got := _find(st, k2, nm2)) is not None]
    try:
        if len(loops2) != 1:
            raise _No("the strided loop is not found again after its shared slot is kept in a register", k2.fn)
        return _lower(k2, env, nm2, loops2[0])
    except _No as e:
        return Skipped(e.reason, k2.line(e.node))


def _name(k: Kernel) -> str:
    d = k.fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    nm = d.child_by_field_name("declarator") if d is not None else None
    return k.t(nm).split("::")[-1] if nm is not None else ""


def _lower(k: Kernel, env: PassEnv, nm: _Names, f: _Found) -> Changed:
    loop, start, update = f.top, f.start, f.update
    bound: Node = f.loop
    strict = True
    sts = statements(k.body)
    # the launch: 1-D grid, 1-D block of a power of two at every size
    if env.grid_dims != 1 or not env.grid:
        raise _No("the launch's grid is not known to be 1-D: the items are not `blockIdx.x` alone", k.fn)
    if not env.blocks:
        raise _No("the launch's block at the spec's sizes is unknown: whether the tree folds the whole block "
                  "cannot be told", k.fn)
    for b in env.blocks:
        if b[1:] != (1, 1):
            raise _No(f"the block {b} is not 1-D", k.fn)
        if b[0] & (b[0] - 1):
            raise _No(f"the block's size {b[0]} is not a power of two: a halving tree does not fold every "
                      "partial", k.fn)
    for n, obj, axis in _builtin_uses(k):
        if axis != "x" or obj == "gridDim":
            raise _No(f"`{k.t(n)}` is used: the items are not `blockIdx.x` alone over a 1-D block", n)
    items = sorted(nm.items)
    direct = [n for n, obj, _ in _builtin_uses(k) if obj == "blockIdx"
              and not any(nm.decls[i].start_byte <= n.start_byte < nm.decls[i].end_byte for i in items)]
    if len(items) > 1 or (items and direct):
        raise _No("the block index is named by several locals or read directly beside its local", k.fn)
    if any(s.type == "return_statement" for s in walk(k.body, ("return_statement",))) and not _tail_exit(sts, k, nm):
        raise _No("a thread may leave before the block's reduction: every thread must reach the barriers", k.fn)
    # the loops: the same bounds for the whole block, each variable written only by its update
    li = sts.index(loop)
    for lp in f.chain:
        lvar = _loop_var(lp, k)
        cond = lp.child_by_field_name("condition")
        c = unparen(cond) if cond is not None else None
        cl, co, cr = (c.child_by_field_name(x) for x in ("left", "operator", "right")) if c is not None \
            else (None,) * 3
        if lvar is None or c is None or c.type != "binary_expression" or cl is None or co is None or cr is None \
                or k.t(unparen(cl)) != lvar or k.t(co) not in ("<", "<="):
            raise _No(f"the loop's condition is not `{lvar or 'i'} < n`", lp)
        lbody = lp.child_by_field_name("body")
        assert lbody is not None
        if _mentions(cr, k, nm) or lvar in {k.t(i) for i in walk(cr, ("identifier",))}:
            raise _No(f"the loop's bound `{k.t(cr)}` differs between the threads of a block", lp)
        if written_names(lbody, k.data) & ({lvar} | {k.t(i) for i in walk(cr, ("identifier",))}):
            raise _No("the loop's body writes its variable or its bound", lp)
        if lp is not f.loop:
            head = [x for x in (lp.child_by_field_name("initializer"), lp.child_by_field_name("update"))
                    if x is not None]
            if any(_mentions(x, k, nm) for x in head) or any(
                    _mentions(d, k, nm) for d in statements(lbody) if d.type == "declaration"):
                raise _No("a loop around the strided loop names the thread index or the block size", lp)
        else:
            bound, strict = cr, k.t(co) == "<"
    body = loop.child_by_field_name("body")
    inner = f.loop.child_by_field_name("body")
    assert body is not None and inner is not None
    offsets: list[tuple[int, int, str]] = []
    if not f.offset:
        if _mentions(inner, k, nm):
            raise _No("the strided loop's body names the thread index or the block size: a thread's iterations "
                      "are not the item's", f.loop)
    else:
        if not strict:
            raise _No("the strided loop's condition is not `i < n`: the thread's offset cannot be folded", f.loop)
        offsets = _offset(k, nm, f, inner, bound)
    for jump in walk(body, ("break_statement", "goto_statement", "return_statement")):
        up = jump.parent
        while up is not None and up != loop and up.type not in ("for_statement", "while_statement",
                                                                "do_statement", "switch_statement"):
            up = up.parent
        if jump.type != "break_statement" or up in f.chain:
            raise _No(f"`{k.t(jump)}` leaves the strided loop: a thread's iterations stop where the item's would "
                      "not", jump)
    red = carried_scalars(body, _loop_var(loop, k) or "", k, env.template_args, elements=False)
    if isinstance(red, NotLegal):
        raise _No(red.reason, loop)
    if not red:
        raise _No("the strided loop carries no accumulator", loop)
    if any("." in r.name for r in red):
        raise _No("an accumulator is a member of a vector", loop)
    accs = {r.name: r for r in red}
    for r in red:
        _check_start(k, nm, sts[:li], r, loop)
    if f.offset:
        _guarded_updates(k, nm, f, inner, bound, accs)
    # the statements after the loop: the stores of the partials, barriers and the tree, then the tail
    rest = sts[li + 1:]
    stores: dict[str, tuple[Node, Node, str]] = {}  # array -> (statement, stored value, accumulator)
    shared = _shared(k)
    j = 0
    while j < len(rest) and (got := _partial_store(rest[j], k, nm, shared, accs)) is not None:
        if got[0] in stores:
            raise _No(f"`{got[0]}` is stored twice", rest[j])
        stores[got[0]] = (rest[j], got[1], got[2])
        j += 1
    if not stores:
        raise _No("the loop's partials are not stored as `sh[threadIdx.x] = acc` right after it", loop)
    if set(accs) != {a for _, _, a in stores.values()}:
        raise _No("an accumulator's partial is not stored for the block's reduction", loop)
    # after the loop an accumulator is the thread's partial, not the item's total: read only by its store
    stored = [(st.start_byte, st.end_byte) for st, _, _ in stores.values()]
    for n in walk(k.body, ("identifier",)):
        if k.t(n) in accs and n.start_byte >= loop.end_byte and not any(a <= n.start_byte < b for a, b in stored):
            raise _No(f"`{k.t(n)}` is read after the strided loop: there it is one thread's partial", n)
    from ..rules._why import furthest, recording
    from ..rules.warp_reduce.tree import Threads, match_tree_loop

    th = Threads(nm.tids)
    tree = None
    dropped: list[Node] = []
    while j < len(rest):
        st = rest[j]
        if _is_barrier(st, k):
            dropped.append(st)
            j += 1
            continue
        if tree is not None or st.type != "for_statement":
            break
        with recording() as notes:
            tree = match_tree_loop(st, k.data, th, {a: shared[a][0] for a in stores},
                                   lambda t: env.template_args.get(t, env.typedefs.get(t, t)))
        if tree is None:
            why = furthest(notes)
            raise _No(f"the block's reduction is not a shared-memory tree: {why.reason if why else 'unrecognized'}",
                      st)
        dropped.append(st)
        j += 1
    serial = _Serial(env, nm, {a: _kind(accs[acc].combine) for a, (_, _, acc) in stores.items()})
    if tree is None:
        # no tree: thread 0 may fold the slots itself after a barrier (darknet's `for (i = 0; i < BLOCK; ++i)
        # out[f] += part[i];`), else the shape is not recognized
        if not dropped or not any(_serial_sums(s, k, stores) for s in rest[j:]):
            if j < len(rest):
                raise _No(f"no shared-memory tree reduction follows the stores of the partials: `{k.t(rest[j])}` "
                          "stands between", rest[j])
            raise _No("no shared-memory tree reduction follows the stores of the partials", loop)
        serial.on = True
    else:
        if {c.array for c in tree.combines} != set(stores):
            raise _No("the tree does not fold exactly the stored partials", tree.node)
        for cb in tree.combines:
            acc = accs[stores[cb.array][2]]
            if _kind(cb.fmt) != _kind(acc.combine):
                raise _No(f"the tree folds `{cb.array}` with `{cb.fmt.format(a='a', b='b')}` and the loop "
                          f"accumulates `{acc.name}` as a {_kind(acc.combine)}", tree.node)
        _check_start_of_tree(k, env, nm, tree.start, tree.node)
    if set(shared) != set(stores):
        raise _No(f"the kernel has other shared arrays ({', '.join(sorted(set(shared) - set(stores)))})", k.fn)
    for arr in stores:
        if _total(arr) in {k.t(i) for i in walk(k.fn, ("identifier",))}:
            raise _No(f"`{_total(arr)}` (the name the reduced value would get) is taken", k.fn)
    tail = rest[j:]
    # with no local for the block index, one is declared and every `blockIdx.x` reads it
    item = next(iter(nm.items)) if nm.items else _fresh(k, "item")
    edits = _tail_edits(k, nm, tail, stores, None if nm.items else item, serial)
    # every use of the thread index, the block size and the shared arrays is in what the rewrite replaces
    allowed = [(start.start_byte, start.end_byte), (update.start_byte, update.end_byte)] + [(x, y) for x, y, _ in
                                                                                            offsets]
    allowed += [(s.start_byte, s.end_byte) for s in dropped] + [(s.start_byte, s.end_byte) for s, _, _ in
                                                                stores.values()]
    allowed += [(d.start_byte, d.end_byte) for n, d in nm.decls.items() if n in nm.tids | nm.sizes]
    allowed += [(d.start_byte, d.end_byte) for _, d in shared.values()]
    allowed += [(s, e) for s, e, _ in edits]
    for n in walk(k.body, ("identifier", "field_expression")):
        inside = any(s <= n.start_byte < e for s, e in allowed)
        if inside:
            continue
        if n.type == "identifier" and k.t(n) in nm.tids | nm.sizes:
            raise _No(f"`{k.t(n)}` is used outside the strided loop's start and step and the block's reduction", n)
        if n.type == "identifier" and k.t(n) in shared and (n.parent is None or n.parent.type != "field_expression"):
            raise _No(f"the shared array `{k.t(n)}` is used outside the block's reduction", n)
        m = member(n, k.data) if n.type == "field_expression" else None
        if m is not None and m[0] == n and m[1] in ("threadIdx", "blockDim"):
            raise _No(f"`{k.t(n)}` is used outside the strided loop's start and step and the block's reduction", n)
    _check_writes(k, tail, dropped, stores)
    changed = _emit(k, nm, item, f, stores, shared, dropped, edits + offsets, _bound(k, env))
    # the text is exact under any launch with enough threads; the one it is meant for gives each item a thread
    # (the rules that scale the launch read it: the original's grid of one block per item would give them the
    # items times the block's threads)
    grid = (f"cdiv({env.grid[0]}, {env.block[0]})",) if env.block else None
    return replace(changed, grid=grid)


_ZERO = re.compile(r"\(?\s*[0.]+[fFlLuU]*\s*\)?|0[xX]0+")


def _check_start(k: Kernel, nm: _Names, before: list[Node], r: Reduction, loop: Node) -> None:
    """The accumulator's declaration before the loop: a sum from zero, a min/max from a block-uniform value,
    and nothing else writing it before the loop."""
    decl: Node | None = None
    value: Node | None = None
    for st in before:
        for d in st.children_by_field_name("declarator") if st.type == "declaration" else []:
            cur: Node | None = d
            while cur is not None and cur.type != "identifier":
                cur = cur.child_by_field_name("declarator")
            if cur is not None and k.t(cur) == r.name:
                decl, value = st, d.child_by_field_name("value") if d.type == "init_declarator" else None
    if decl is None or value is None:
        raise _No(f"the accumulator `{r.name}` is not declared with a start value before the strided loop", loop)
    if any(r.name in written_names(st, k.data) for st in before if st is not decl):
        raise _No(f"`{r.name}` is written before the strided loop", loop)
    if _kind(r.combine) == "sum":
        if not _ZERO.fullmatch(k.t(value).strip()) or not any(ch == "0" for ch in k.t(value)):
            raise _No(f"the sum `{r.name}` starts at `{k.t(value)}`, not 0: every thread's partial would add it",
                      decl)
    elif _mentions(value, k, nm) or not side_effect_free(value):
        raise _No(f"`{r.name}` starts at a value that differs between threads", decl)


def _partial_store(st: Node, k: Kernel, nm: _Names, shared: dict[str, tuple[str, Node]],
                   accs: dict[str, Reduction]) -> tuple[str, Node, str] | None:
    """``sh[tid] = acc;`` (or a cast of ``acc``): (array, the stored value, the accumulator)."""
    got = plain_assignment(st, k.data)
    if got is None:
        return None
    left, right = got
    sub = unparen(left)
    arr, idx = sub.child_by_field_name("argument"), sub.child_by_field_name("indices") or \
        sub.child_by_field_name("index")
    if sub.type != "subscript_expression" or arr is None or idx is None or k.t(arr) not in shared:
        return None
    ix = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_child_count == 1 else idx
    if not _is(ix, k, "threadIdx", nm.tids):
        return None
    v = unparen(right)
    while v.type == "cast_expression" and v.child_by_field_name("value") is not None:
        inner = v.child_by_field_name("value")
        assert inner is not None
        v = unparen(inner)
    if v.type != "identifier" or k.t(v) not in accs:
        raise _No(f"`{k.t(sub)}` stores `{k.t(right)}`, not an accumulator (or a cast of one): the tree would fold "
                  "another value", st)
    return k.t(arr), right, k.t(v)


def _check_start_of_tree(k: Kernel, env: PassEnv, nm: _Names, start: str, node: Node, factor: int = 2) -> None:
    """The tree starts at half the block at every size of the spec (``factor`` 2; a serial fold's bound is the
    block: 1): it folds exactly the block's partials."""
    for b, vals in zip(env.blocks, env.values or tuple({} for _ in env.blocks), strict=False):
        text = start.replace("blockDim.x", str(b[0]))
        for s in nm.sizes:
            text = re.sub(rf"\b{re.escape(s)}\b", str(b[0]), text)
        names: dict[str, int | float] = {n: v for n, v in vals.items()}
        for n, t in env.constants.items():
            try:
                v = parse_expr(t).evaluate(dict(names))
            except ExprError:
                continue
            if isinstance(v, int):
                names.setdefault(n, v)
        try:
            got = parse_expr(text).evaluate(names)
        except ExprError:
            raise _No(f"the tree's first step `{start}` cannot be evaluated at the spec's sizes", node) from None
        if not isinstance(got, int) or factor * got != b[0]:
            raise _No(f"the {'tree starts' if factor == 2 else 'fold of the slots stops'} at `{start}` = {got} with "
                      f"a block of {b[0]}: it does not fold exactly the block's partials", node)


def _tid_zero(c: Node, k: Kernel, nm: _Names, negated: bool) -> bool:
    """``tid == 0`` (``negated``: ``tid != 0``, ``tid > 0``, ``tid``), either side."""
    c = unparen(c)
    if c.type == "condition_clause" and c.named_child_count == 1:
        c = unparen(c.named_children[0])
    if negated and _is(c, k, "threadIdx", nm.tids):
        return True
    if not negated and c.type == "unary_expression" and k.t(c).lstrip().startswith("!"):
        arg = c.child_by_field_name("argument")
        return _is(arg, k, "threadIdx", nm.tids)
    left, op, right = (c.child_by_field_name(f) for f in ("left", "operator", "right"))
    if c.type != "binary_expression" or left is None or op is None or right is None:
        return False
    ops = ("!=", ">") if negated else ("==",)
    if _is(left, k, "threadIdx", nm.tids) and k.t(right).strip() == "0":
        return k.t(op) in ops
    flipped = {"!=": "!=", ">": "<", "==": "=="}
    return _is(right, k, "threadIdx", nm.tids) and k.t(left).strip() == "0" and k.t(op) in {flipped[o] for o in ops}


def _tail_exit(sts: list[Node], k: Kernel, nm: _Names) -> bool:
    """Every ``return`` of the body is one ``if (tid != 0) return;`` at the top level."""
    exits = [s for s in sts if s.type == "if_statement" and _is_exit(s, k, nm)]
    return len(exits) == 1 and len(list(walk(k.body, ("return_statement",)))) == 1


def _is_exit(st: Node, k: Kernel, nm: _Names) -> bool:
    cond, cons = st.child_by_field_name("condition"), st.child_by_field_name("consequence")
    if cond is None or cons is None or st.child_by_field_name("alternative") is not None:
        return False
    body = statements(cons)
    return len(body) == 1 and body[0].type == "return_statement" and body[0].named_child_count == 0 \
        and _tid_zero(cond, k, nm, True)


def _tail_edits(k: Kernel, nm: _Names, tail: list[Node], stores: dict[str, tuple[Node, Node, str]],
                item: str | None, serial: _Serial) -> list[tuple[int, int, str]]:
    """The statements after the tree: barriers dropped, ``if (tid == 0) { S }`` as ``S``, ``if (tid != 0)
    return;`` dropped; ``sh[0]`` as the reduced value's local."""
    edits: list[tuple[int, int, str]] = []
    one = False  # past `if (tid != 0) return;`: one thread runs the rest
    for st in tail:
        if _is_barrier(st, k):
            edits.append(_drop(st, k))
            continue
        if st.type == "if_statement" and _is_exit(st, k, nm):
            edits.append(_drop(st, k))
            one = True
            continue
        cond, cons = st.child_by_field_name("condition"), st.child_by_field_name("consequence")
        if st.type == "if_statement" and cond is not None and cons is not None \
                and st.child_by_field_name("alternative") is None and _tid_zero(cond, k, nm, False):
            inner = statements(cons)
            text = "\n".join(_reduced(s, k, nm, stores, item, serial) for s in inner)
            edits.append((st.start_byte, st.end_byte, text if inner else ""))
            continue
        if not one and not (st.type == "declaration" and side_effect_free(st)):
            raise _No("a statement after the block's reduction runs in every thread and is not a declaration: "
                      "only one thread's stores are lowered", st)
        edits.append((st.start_byte, st.end_byte, _reduced(st, k, nm, stores, item, serial)))
    return edits


@dataclass
class _Serial:
    """How the tail reads the partials: after a tree (``on`` False) only ``sh[0]``; with no tree (``on``) only
    thread 0's serial fold over every slot, which must cover the block at every size of the spec."""

    env: PassEnv
    nm: _Names
    #: array -> "sum" / "max" / "min" of its accumulator
    kinds: dict[str, str]
    on: bool = False


def _serial_sums(st: Node, k: Kernel, stores: dict[str, tuple[Node, Node, str]]
                 ) -> list[tuple[Node, str, str, Node, Node]]:
    """Every ``for (int i = 0; i < E; ++i) X += sh[i];`` (or ``X = X + sh[i]``) in ``st``: (the loop, the target's
    text, the array, the bound ``E``, the loop's variable)."""
    out: list[tuple[Node, str, str, Node, Node]] = []
    for lp in walk(st, ("for_statement",)):
        init, cond, upd = (lp.child_by_field_name(f) for f in ("initializer", "condition", "update"))
        ds = init.children_by_field_name("declarator") if init is not None and init.type == "declaration" else []
        if len(ds) != 1 or ds[0].type != "init_declarator" or cond is None or upd is None:
            continue
        var, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        c = unparen(cond)
        cl, co, cr = (c.child_by_field_name(f) for f in ("left", "operator", "right"))
        if var is None or v is None or k.t(v).strip() != "0" or c.type != "binary_expression" or cl is None \
                or co is None or cr is None or k.t(unparen(cl)) != k.t(var) or k.t(co) != "<" \
                or "".join(k.t(upd).split()) not in (f"++{k.t(var)}", f"{k.t(var)}++", f"{k.t(var)}+=1"):
            continue
        body = statements(lp.child_by_field_name("body"))
        a = body[0].named_children[0] if len(body) == 1 and body[0].type == "expression_statement" \
            and body[0].named_child_count == 1 else None
        if a is None or a.type != "assignment_expression":
            continue
        left, op, right = (a.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None:
            continue
        term = right if k.t(op) == "+=" else None
        r = unparen(right)
        if k.t(op) == "=" and r.type == "binary_expression":
            rl, ro, rr = (r.child_by_field_name(f) for f in ("left", "operator", "right"))
            if rl is not None and ro is not None and rr is not None and k.t(ro) == "+":
                term = rr if "".join(k.t(rl).split()) == "".join(k.t(left).split()) else \
                    rl if "".join(k.t(rr).split()) == "".join(k.t(left).split()) else None
        t = unparen(term) if term is not None else None
        arr = t.child_by_field_name("argument") if t is not None and t.type == "subscript_expression" else None
        idx = (t.child_by_field_name("indices") or t.child_by_field_name("index")) if t is not None else None
        if arr is None or idx is None or k.t(arr) not in stores \
                or "".join(k.t(idx).split()).strip("[]") != k.t(var):
            continue
        out.append((lp, k.t(left), k.t(arr), cr, var))
    return out


def _reduced(st: Node, k: Kernel, nm: _Names, stores: dict[str, tuple[Node, Node, str]], item: str | None,
             serial: _Serial) -> str:
    """``st``'s text with every ``sh[0]`` read as the reduced value's local (another use of ``sh`` declines),
    or, with no tree, thread 0's serial fold over the slots as one update by it; ``blockIdx.x`` as ``item`` when
    one is given."""
    edits: list[tuple[int, int, str]] = []
    folds = _serial_sums(st, k, stores) if serial.on else []
    for lp, target, arr, bound, _ in folds:
        if serial.kinds[arr] != "sum":
            raise _No(f"thread 0 adds up `{arr}`, whose partials are a {serial.kinds[arr]}", lp)
        _check_start_of_tree(k, serial.env, serial.nm, k.t(bound), lp, factor=1)
        edits.append((lp.start_byte - st.start_byte, lp.end_byte - st.start_byte, f"{target} += {_total(arr)};"))
    inside = [(lp.start_byte, lp.end_byte) for lp, _, _, _, _ in folds]
    if item is not None:
        for n in walk(st, ("field_expression",)):
            m = member(n, k.data)
            if m is not None and m[0] == n and m[1:] == ("blockIdx", "x") \
                    and not any(a <= n.start_byte < b for a, b in inside):
                edits.append((n.start_byte - st.start_byte, n.end_byte - st.start_byte, item))
    for n in walk(st, ("subscript_expression",)):
        base = n.child_by_field_name("argument")
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        if base is None or idx is None or k.t(base) not in stores or any(a <= n.start_byte < b for a, b in inside):
            continue
        if serial.on or "".join(k.t(idx).split()).strip("[]") != "0":
            raise _No(f"`{k.t(n)}` reads the shared array at another index than 0 after the tree", n)
        edits.append((n.start_byte - st.start_byte, n.end_byte - st.start_byte, _total(k.t(base))))
    uses = sum(1 for i in walk(st, ("identifier",)) if k.t(i) in stores
               and not any(a <= i.start_byte < b for a, b in inside))
    if sum(1 for _, _, t in edits if t != item and not t.endswith(";")) != uses:
        raise _No("a shared array is used after the tree other than as `sh[0]`", st)
    rest = [n for n in walk(st, ("identifier", "field_expression")) if not any(a <= n.start_byte < b
                                                                               for a, b in inside)]
    if any(_mentions(n, k, nm) for n in rest if n.type == "identifier" or member(n, k.data) is not None):
        raise _No(f"`{k.t(st)}` names the thread index or the block size after the reduction", st)
    return splice(k.data[st.start_byte:st.end_byte], edits)


def _total(array: str) -> str:
    return f"{array}_total"


def _check_writes(k: Kernel, tail: list[Node], dropped: list[Node],
                  stores: dict[str, tuple[Node, Node, str]]) -> None:
    """No atomic anywhere; memory is written only by the one thread's stores (the tail) and the partials."""
    for n in walk(k.body, ("call_expression",)):
        fn = n.child_by_field_name("function")
        if fn is not None and k.t(fn).startswith("atomic"):
            raise _No(f"`{k.t(fn)}` is called: an atomic is not one thread's store", n)
    tail_span = (tail[0].start_byte, tail[-1].end_byte) if tail else (k.body.end_byte, k.body.end_byte)
    partials = [(s.start_byte, s.end_byte) for s, _, _ in stores.values()] + [(s.start_byte, s.end_byte)
                                                                              for s in dropped]
    for n in walk(k.body, ("assignment_expression", "update_expression")):
        target = n.child_by_field_name("left") or n.child_by_field_name("argument")
        if target is None or unparen(target).type == "identifier":
            continue
        if tail_span[0] <= n.start_byte < tail_span[1] or any(s <= n.start_byte < e for s, e in partials):
            continue
        raise _No(f"`{k.t(n)}` writes memory outside the one thread's stores after the reduction", n)


def _bound(k: Kernel, env: PassEnv) -> str:
    """The launch's ``grid.x`` in the kernel's names: a scalar parameter whose spec value is the whole extent, else
    each spec size as the scalar parameter whose spec value is exactly it; a constant as itself."""
    g = env.grid[0]
    whole = [p for p, v in env.arg_values.items() if "".join(v.split()) == "".join(g.split())]
    if whole:  # a parameter carries the whole extent (`arg N = B * T`, grid `B * T`)
        return whole[0]
    try:
        names = parse_expr(g).names()
    except ExprError:
        raise _No(f"the grid `{g}` is not an expression of the spec's sizes", k.fn) from None
    c = _ceil_divs(g)
    if c is None or re.search(r"[A-Za-z_]\w*\s*\(", c) or re.search(r"[?:<>=!&|^~]", c):
        raise _No(f"the grid `{env.grid[0]}` calls a function or compares: only sizes, numbers, + - * / % and "
                  "cdiv are mapped to the kernel's names", k.fn)
    by_value: dict[str, str] = {}
    for p, v in env.arg_values.items():
        by_value.setdefault(v, p)
    out = c
    for n in sorted(names, key=len, reverse=True):
        if n not in by_value:
            raise _No(f"the grid's `{n}` is no scalar parameter's value in the spec: the items' bound cannot be "
                      f"said in the kernel's names (give a parameter the value `{n}`)", k.fn)
        out = re.sub(rf"\b{re.escape(n)}\b", by_value[n], out)
    return " ".join(out.split())


def _ceil_divs(g: str) -> str | None:
    """``g`` with each ``cdiv(a, b)`` (``ceil_div``) as C's ``((a) + (b) - 1) / (b)`` (the same for the positive
    sizes of a launch); None when a call's arguments cannot be split."""
    while (m := re.search(r"\b(?:cdiv|ceil_div)\s*\(", g)) is not None:
        depth, args, start = 1, [], m.end()
        i = start
        while i < len(g) and depth:
            ch = g[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            if (ch == "," and depth == 1) or depth == 0:
                args.append(g[start:i].strip())
                start = i + 1
            i += 1
        if depth or len(args) != 2:
            return None
        a, b = args
        g = f"{g[:m.start()]}((({a}) + ({b}) - 1) / ({b})){g[i:]}"
    return g


def _wrapped(text: str) -> bool:
    """``text`` is one parenthesized expression (its first ``(`` closes at its end)."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += 1 if ch == "(" else -1 if ch == ")" else 0
        if depth == 0:
            return i == len(text) - 1
    return False


def _drop(st: Node, k: Kernel) -> tuple[int, int, str]:
    """An edit deleting a statement (its whole line when it stands alone on it)."""
    start = k.data.rfind(b"\n", 0, st.start_byte) + 1
    end = st.end_byte
    if not k.data[start:st.start_byte].strip() and k.data[end:end + 1] == b"\n":
        return start, end + 1, ""
    return st.start_byte, st.end_byte, ""


def _emit(k: Kernel, nm: _Names, item: str, f: _Found, stores: dict[str, tuple[Node, Node, str]],
          shared: dict[str, tuple[str, Node]], dropped: list[Node], tail: list[tuple[int, int, str]],
          bound: str) -> Changed:
    loop, start, update, var = f.top, f.start, f.update, f.var
    edits: list[tuple[int, int, str]] = []
    flat = "blockIdx.x * blockDim.x + threadIdx.x"
    guard_bound = bound if re.fullmatch(r"\w+", bound) or _wrapped(bound) else f"({bound})"
    ind = k.data[k.data.rfind(b"\n", 0, loop.start_byte) + 1:loop.start_byte].decode()
    ind = ind if not ind.strip() else "    "
    if nm.items:
        decl = nm.decls[item]
        ds = decl.children_by_field_name("declarator")
        v = ds[0].child_by_field_name("value")
        assert v is not None
        edits.append((v.start_byte, v.end_byte, flat))
        edits.append((decl.end_byte, decl.end_byte, f"\n{ind}if ({item} >= {guard_bound}) return;"))
    else:
        for n, obj, _ in _builtin_uses(k):
            if obj == "blockIdx" and not any(s <= n.start_byte < e for s, e, _ in tail):
                edits.append((n.start_byte, n.end_byte, item))
        edits.append((k.body.start_byte + 1, k.body.start_byte + 1,
                      f"\n{ind}const int {item} = {flat};\n{ind}if ({item} >= {guard_bound}) return;"))
    for local in nm.tids | nm.sizes:
        if local in nm.decls:  # a parameter equal to the block stays a parameter
            edits.append(_drop(nm.decls[local], k))
    for sdecl in {d.start_byte: d for _, d in shared.values()}.values():
        edits.append(_drop(sdecl, k))
    if not f.offset:
        edits.append((start.start_byte, start.end_byte, "0"))
    edits.append((update.start_byte, update.end_byte, f"++{k.t(var)}"))
    for arr, (st, value, _) in stores.items():
        edits.append((st.start_byte, st.end_byte, f"{shared[arr][0]} {_total(arr)} = {k.t(value)};"))
    edits += [_drop(s, k) for s in dropped]
    edits += tail
    return Changed(splice(k.data, edits), f"the block-per-item reduction over `{k.t(var)}` (line {k.line(loop)}) "
                                          f"lowered to one thread per item below `{bound}`")
