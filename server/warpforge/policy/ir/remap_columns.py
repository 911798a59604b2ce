"""Splitting a column walk over ``blockDim.y`` threads per item: legality on the IR.

Why: "one thread per column, a serial loop down the rows" (a bias gradient ``sum += dout[b*T*OC + t*OC + o]``,
per-channel sums of an NHWC tensor) already reads coalesced (neighbouring threads read neighbouring columns),
but only as many threads run as there are columns (768 for a GPT-2 bias), each walking ``B*T`` rows one load
at a time: the GPU sits mostly idle. Giving each column ``R`` threads (a block of ``X x R``), each walking every
``R``-th row of the loop, keeps the loads coalesced along ``x`` and puts ``R`` times more of them in flight;
the ``R`` partials meet in shared memory and the first row of threads finishes the item.

Legality on the lowered text, with the item held fixed (``remap_items``'s reading of the accesses):

* the item is ``blockIdx.x*blockDim.x + threadIdx.x``, declared once at the top, then at most an early exit
  ``if (item >= bound) return;`` (turned into a flag: every thread must reach the barrier, so a thread past the
  bound computes column 0 and stores nothing, after a block-uniform exit when the bound is not positive); no
  other ``return``, no other use of a thread, block or launch coordinate (the block's x size changes too);
* one loop over the item (loops nested in it are fine), reading only, carrying only sums and min/max of a
  shuffle type, with no jump out of it; nothing before it writes memory; what follows it runs once per item;
* the loop the threads split is the outermost one whose counter walks some access at a stride other than 1
  while neighbouring items read neighbouring elements (coefficient 1): the rows of a column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from .passes import Kernel, statements
from .remap import NotLegal, Reduction, _declaration_of, _hidden_write, _loop_parts, is_item
from .remap_items import _WORD, _Acc, _carried, _grid_stride, _item_accesses
from .summary import Summary


@dataclass(frozen=True)
class ColumnPlan:
    index: str
    #: the early exit statement (replaced by a flag) and its condition's text; None when unguarded
    exit: tuple[int, int] | None
    exit_cond: str
    #: the bound of ``item < bound`` (a non-positive bound exits the whole block first)
    bound: str
    #: the loops that walk the column, outermost first (the rule offers splitting the innermost or the outermost)
    walks: tuple[Walk, ...]
    #: the item's top loop (its end: where the partials are combined) and the statements after it
    top_start: int
    top_end: int
    tail: tuple[int, int] | None
    reductions: tuple[Reduction, ...]
    line: int
    #: the ``const`` of the item's declaration, dropped where the early exit moves a thread to column 0
    const: tuple[int, int] | None = None
    #: the items are a grid-stride loop (its header is made uniform over the block, see ``StrideItems``)
    stride: StrideItems | None = None


@dataclass(frozen=True)
class StrideItems:
    """``for (T i = item; i < bound; i += blockDim.x * gridDim.x) { ... }``: the rewrite renames the counter in
    the header to a new one, runs the loop while *some* thread of the block has an item (``new - threadIdx.x <
    bound``, the same in all threads, so all reach the barriers) and declares ``T i`` at the top of the body
    (column 0 past the bound, like an early exit's flag); a barrier ends each pass before the next one's
    partials overwrite the shared ones."""

    type: str
    #: the counter's name in the declaration, the condition, and the counter in the update
    name: tuple[int, int]
    cond: tuple[int, int]
    update_var: tuple[int, int]
    bound: str
    #: just after the body's ``{`` and at its ``}``
    body_open: int
    body_close: int


@dataclass(frozen=True)
class Walk:
    """A loop the column's threads may split: ``for (var = init + threadIdx.y; ...; var += blockDim.y)``."""

    var: str
    init_value: tuple[int, int]
    update: tuple[int, int]
    #: the read it walks down the column (for the rationale)
    strided: str


def plan_columns(k: Kernel, s: Summary, template_args: Mapping[str, str] | None = None) -> ColumnPlan | NotLegal:
    """The plan to split each item's row walk over ``blockDim.y`` threads, or why it is not legal."""
    targs = template_args or {}
    blocking = [n for n in s.notes if n in ("shared memory", "barriers", "shuffles", "atomics")]
    if blocking:
        return NotLegal(f"the kernel uses {', '.join(blocking)}: threads of a block would see another mapping",
                        stage=0)
    items = [p for p in s.parallel if is_item(p.index) and p.form in ("exit", "unguarded", "grid-stride")]
    if not items:
        return NotLegal("no item index `blockIdx.x*blockDim.x + threadIdx.x` with an early exit, no guard or a "
                        "grid-stride loop")
    dim = items[0]
    sts = statements(k.body)
    stride: StrideItems | None = None
    if dim.form == "grid-stride":
        got = _stride_items(dim.var, sts, k)
        if isinstance(got, NotLegal):
            return got
        stride, loop_stmt, value, step = got
        body_node = loop_stmt.child_by_field_name("body")
        assert body_node is not None
        decl_stmt, outside, rest = loop_stmt, sts[:sts.index(loop_stmt)], statements(body_node)
        kept = [value, step]
    else:
        decl = _declaration_of(dim.var, sts, k)
        if decl is None:
            return NotLegal(f"the item index `{dim.var}` is not declared once at the top of the body", dim.line)
        decl_stmt, value = decl
        outside, rest, kept = [], sts[sts.index(decl_stmt) + 1:], [value]
    # ``blockDim.x * gridDim.x`` (the grid's x threads: X * gridDim.x*B/X) is the same on the (X, R) launch
    used = next((n for n in walk(k.body, ("field_expression",)) if k.t(n.child_by_field_name("argument") or n) in
                 ("threadIdx", "blockIdx", "blockDim", "gridDim") and not _grid_threads(n, k)
                 and not any(v.start_byte <= n.start_byte < v.end_byte for v in kept)), None)
    # a ``const`` item is written once more by the rewrite (a thread past the bound moves to column 0): the
    # qualifier goes, which changes nothing else (the kernel never writes it, or it would not compile)
    const = next((c for c in decl_stmt.children if c.type == "type_qualifier" and k.t(c) == "const"), None)
    exit_node, cond, bound = None, "", ""
    if stride is not None:
        # every pass over the items ends at a barrier: no thread may leave a pass or the loop early
        leave = next((j for st in rest for j in walk(st, ("return_statement", "goto_statement", "break_statement",
                                                          "continue_statement"), cut=lambda n: n.type in (
            "for_statement", "while_statement", "do_statement", "switch_statement")) if j is not None), None)
        leave = leave or next(walk(decl_stmt, ("return_statement", "goto_statement")), None)
        if leave is not None:
            return NotLegal(f"`{k.t(leave).split()[0].rstrip(';')}` leaves a pass over the items early (line "
                            f"{k.line(leave)}): every thread must reach its barrier", k.line(leave))
    first_loop = next((st for st in rest if st.type in ("for_statement", "while_statement", "do_statement")), None)
    before = rest[:rest.index(first_loop)] if first_loop is not None else rest
    for st in before:
        if st.type == "if_statement" and next(walk(st, ("return_statement",)), None) is not None:
            if exit_node is not None:
                return NotLegal("more than one early exit", k.line(st))
            ex = _exit_bound(st, dim.var, k)
            if ex is None:
                return NotLegal(f"the early exit `{k.t(st).split(chr(10))[0]}` is not `if ({dim.var} >= bound) "
                                "return;`", k.line(st))
            exit_node, (cond, bound) = st, ex
            early_use = next((x for x in rest[:rest.index(st)] if dim.var in _WORD.findall(k.t(x))), None)
            if early_use is not None:
                return NotLegal(f"`{k.t(early_use).strip()}` uses `{dim.var}` before the early exit (line "
                                f"{k.line(early_use)})", k.line(early_use))
    # a return after the loop is in the tail, which runs after the barrier (on the first row of threads)
    after = first_loop.end_byte if first_loop is not None else k.body.end_byte
    if next((r for r in walk(k.body, ("return_statement", "goto_statement")) if r.start_byte < after and (
            exit_node is None or not (exit_node.start_byte <= r.start_byte < exit_node.end_byte))), None):
        return NotLegal("a `return` besides the early exit before the barrier: every thread must reach it")
    loops = [st for st in rest if st.type in ("for_statement", "while_statement", "do_statement")]
    branch = next((st for st in rest if st.type == "if_statement" and next(walk(st, ("for_statement",)), None)), None)
    if not loops and branch is not None:
        test = k.t(branch.child_by_field_name("condition") or branch)
        return NotLegal(f"the item's loop is inside a branch `if {test}` (line "
                        f"{k.line(branch)}): the barrier that ends each pass would be in it, and every thread must "
                        "reach it", k.line(branch))
    if len(loops) != 1 or loops[0].type != "for_statement":
        return NotLegal("not exactly one counted loop over the item" if loops else "no serial loop over the item",
                        k.line(loops[-1]) if loops else dim.line)
    top = loops[0]
    parts = _loop_parts(top, k)
    if isinstance(parts, NotLegal):
        return parts
    body = top.child_by_field_name("body")
    assert body is not None
    jump = next(walk(body, ("break_statement",), cut=lambda n: n.type in ("for_statement", "while_statement",
                                                                          "do_statement", "switch_statement")
                     and n is not body), None)
    if jump is not None:
        return NotLegal(f"`break` leaves the loop early (line {k.line(jump)})", k.line(jump))
    reductions = _carried(top, body, parts[0], k, targs)
    if isinstance(reductions, NotLegal):
        return reductions
    accs = _item_accesses(k, s, dim.var, [top])
    if isinstance(accs, NotLegal):
        return accs
    accesses, derived = accs
    # the shape first: a loop that walks no column is not this remap's kind of kernel at all
    walks = _walks(top, accesses, derived, k)
    if isinstance(walks, NotLegal):
        return walks
    if used is not None:
        return NotLegal(f"`{''.join(k.t(used).split())}` is used besides the item index (line {k.line(used)}): the "
                        "(X, R) block changes it", k.line(used))
    stored = next((a for a in accesses if a.stored and a.loop >= 0), None)
    if stored is not None:
        return NotLegal(f"the loop writes `{stored.text}` (line {stored.line})", stored.line)
    if not reductions:
        return NotLegal("the loop carries no sum or min/max to combine", k.line(top))
    written = {a.param for a in accesses if a.stored}
    read_back = next((a for a in accesses if a.loop >= 0 and a.param in written), None)
    if read_back is not None:
        return NotLegal(f"the loop reads `{read_back.param}`, which the kernel writes (line {read_back.line})",
                        read_back.line)
    pre_end = top.start_byte
    early = next((a for a in accesses if a.stored and a.loop < 0 and a.line < k.line(top)), None)
    if early is not None:
        return NotLegal(f"`{early.text}` is written before the loop (line {early.line}): every row of threads "
                        "would write it", early.line)
    for st in [*outside, *(x for x in rest if x.end_byte <= pre_end), body]:
        hidden = _hidden_write(st, k)
        if hidden is not None:
            return NotLegal(f"`{k.t(hidden)}` (line {k.line(hidden)}) may write memory, and every row of "
                            "threads would run it", k.line(hidden))
    tail_sts = rest[rest.index(top) + 1:]
    tail = (tail_sts[0].start_byte, tail_sts[-1].end_byte) if tail_sts else None
    return ColumnPlan(dim.var, (exit_node.start_byte, exit_node.end_byte) if exit_node is not None else None,
                      cond, bound, walks, top.start_byte, top.end_byte, tail, reductions, k.line(top),
                      (const.start_byte, const.end_byte) if const is not None and exit_node is not None else None,
                      stride)


def _grid_threads(n: Node, k: Kernel) -> bool:
    """Whether the coordinate ``n`` is a factor of ``blockDim.x * gridDim.x`` (either order): the (X, R) launch
    keeps that product (the block's x shrinks by the factor the grid's x grows)."""
    up = n.parent
    while up is not None and up.type == "parenthesized_expression":
        up = up.parent
    if up is None or up.type != "binary_expression" or k.t(up.child_by_field_name("operator") or up) != "*":
        return False
    sides = {"".join(k.t(unparen(x)).split()) for x in (up.child_by_field_name("left"), up.child_by_field_name("right"))
             if x is not None}
    return sides == {"blockDim.x", "gridDim.x"}


def _stride_items(var: str, sts: list[Node], k: Kernel) -> tuple[StrideItems, Node, Node, Node] | NotLegal:
    """The grid-stride loop over the items, the last statement of the body, ``var < bound`` its condition."""
    found = _grid_stride(var, sts, k)
    if isinstance(found, NotLegal):
        return found
    loop, value, (s0, s1) = found
    step = next((n for n in walk(loop, ("binary_expression",)) if (n.start_byte, n.end_byte) == (s0, s1)), None)
    init, cond, upd = (loop.child_by_field_name(x) for x in ("initializer", "condition", "update"))
    body = loop.child_by_field_name("body")
    if loop is not sts[-1] or step is None or init is None or cond is None or upd is None or body is None \
            or body.type != "compound_statement":
        return NotLegal(f"the grid-stride loop over `{var}` is not the last statement, with a block", k.line(loop))
    if var in written_names(body, k.data):
        return NotLegal(f"the grid-stride loop's counter `{var}` is written in its body", k.line(loop))
    c = unparen(cond)
    left, op, right = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if c.type != "binary_expression" or left is None or op is None or right is None or k.t(op) != "<" \
            or k.t(unparen(left)) != var or var in _WORD.findall(k.t(right)):
        return NotLegal(f"the grid-stride loop's condition `{k.t(cond)}` is not `{var} < bound`", k.line(loop))
    d = next(walk(init, ("init_declarator",)), None)
    name = d.child_by_field_name("declarator") if d is not None else None
    t = init.child_by_field_name("type")
    target = unparen(upd).child_by_field_name("left")
    if name is None or t is None or target is None:
        return NotLegal(f"the grid-stride loop over `{var}` does not declare its counter", k.line(loop))
    ty = " ".join(k.t(t).split())
    return (StrideItems(ty, (name.start_byte, name.end_byte), (cond.start_byte, cond.end_byte),
                        (target.start_byte, target.end_byte), k.t(right), body.start_byte + 1, body.end_byte - 1),
            loop, value, step)


def _exit_bound(st: Node, item: str, k: Kernel) -> tuple[str, str] | None:
    """(condition, bound) of ``if (item >= bound) return;`` (or ``bound <= item``), nothing else in it."""
    cond, cons = st.child_by_field_name("condition"), st.child_by_field_name("consequence")
    if cond is None or cons is None or st.child_by_field_name("alternative") is not None:
        return None
    inner = statements(cons)
    if len(inner) != 1 or inner[0].type != "return_statement" or inner[0].named_child_count:
        return None
    c = unparen(cond.named_children[0] if cond.type == "condition_clause" and cond.named_children else cond)
    if c.type != "binary_expression":
        return None
    left, op, right = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if left is None or op is None or right is None:
        return None
    if k.t(op) == ">=" and k.t(unparen(left)) == item and item not in _WORD.findall(k.t(right)):
        return k.t(c), k.t(right)
    if k.t(op) == "<=" and k.t(unparen(right)) == item and item not in _WORD.findall(k.t(left)):
        return k.t(c), k.t(left)
    return None


def _walks(top: Node, accesses: list[_Acc], derived: set[str], k: Kernel) -> tuple[Walk, ...] | NotLegal:
    """The loops (the top one or nested in it) whose counter walks a read at a stride other than 1 while
    neighbouring items read neighbouring elements: the rows of a column."""
    out: list[Walk] = []
    for loop in walk(top, ("for_statement",)):
        parts = _loop_parts(loop, k)
        if isinstance(parts, NotLegal):
            continue
        var = parts[0]
        lo, hi = k.line(loop), loop.end_point[0] + 1
        for a in accesses:
            if a.loop < 0 or a.index is None or not (lo <= a.line <= hi):
                continue
            walks = [m for m in a.index if var in m]
            unit = [m for m, c in a.index.items() if len(m) == 1 and set(_WORD.findall(m[0])) & derived and c == 1]
            if walks and a.index.get((var,)) != 1 and unit:
                out.append(Walk(var, parts[1], parts[2], a.text))
                break
    if out:
        return tuple(out)
    return NotLegal("no loop walks a column: no read in the loop is strided in its counter while neighbouring "
                    "items read neighbouring elements", k.line(top), stage=0)
