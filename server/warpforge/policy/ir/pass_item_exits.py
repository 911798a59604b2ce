"""Early exits from a pass over the items become guards around the rest of the item's work.

Why: frameworks walk their items with a grid-stride loop (``CUDA_1D_KERNEL_LOOP(i, n) { ... }``) and leave an
item early: ``int to = map[i]; if (to == -1) continue;``, ``if (k >= N || k < 0) return;``, ``if (masked) {
out[i] = 0; continue; }``. The remaps (``remap_items``, ``remap_columns``) give an item a group of threads and
put shuffles or barriers in its work; a jump out of the pass is what they cannot take (every thread of the group
must reach them). A guard says the same without the jump, and the remaps then read the guard's condition: where
it is one value per item (``remap_items`` checks that), the whole group takes the same branch.

``item_exits`` rewrites, in the top-level grid-stride loop over the items (its counter starts at
``blockIdx.x * blockDim.x + threadIdx.x`` and steps by ``blockDim.x * gridDim.x``), a statement
``if (c) continue;`` / ``if (c) { S; continue; }`` of its body (or of a branch of an ``if`` that ends the body,
recursively: nothing runs after such a branch in the iteration) into ``if (!(c)) { REST }`` /
``if (c) { S } else { REST }``, with REST the statements after it in that block. That is exact: the jump skipped
exactly REST, and ``S`` (kept in its branch) runs under the same condition as before.

``return`` instead of ``continue`` ends the thread's walk, not only the item: it is the same only where each
thread has at most one item, i.e. the launch's ``gridDim.x * blockDim.x`` covers the loop's bound at every size
of the spec (the spec's and the perturbed one), and the loop is the kernel's last statement (nothing after it was
skipped). Otherwise the pass says why not, and the remaps keep declining for the ``return``.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .passes import Changed, Kernel, PassEnv, Result, Skipped, loop_counter, register, splice, statements

_ITEM = frozenset({"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
                   "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"})
_STEP = frozenset({"blockDim.x*gridDim.x", "gridDim.x*blockDim.x"})


def _squash(s: str) -> str:
    return "".join(s.split())


def item_loop(st: Node, k: Kernel) -> str | None:
    """The counter of ``for (int i = <the thread's global x index>; i < n; i += blockDim.x * gridDim.x)``."""
    upd = st.child_by_field_name("update") if st.type == "for_statement" else None
    head = loop_counter(st)
    if head is None or upd is None:
        return None
    name, value = head
    var = k.t(name)
    u = unparen(upd)
    if _squash(k.t(unparen(value))).strip("()") not in _ITEM or u.type != "assignment_expression":
        return None
    op, right = u.child_by_field_name("operator"), u.child_by_field_name("right")
    left = u.child_by_field_name("left")
    if op is None or right is None or left is None or k.t(op) != "+=" or k.t(left) != var:
        return None
    return var if _squash(k.t(unparen(right))).strip("()") in _STEP else None


def _tail_blocks(block: Node) -> Iterator[Node]:
    """``block`` and, where its last statement is an ``if``, the compound branches of that ``if`` (recursively):
    the blocks after whose end nothing else runs in the iteration."""
    yield block
    sts = statements(block)
    if not sts or sts[-1].type != "if_statement":
        return
    for field in ("consequence", "alternative"):
        br = sts[-1].child_by_field_name(field)
        if br is not None and br.type == "else_clause":
            br = br.named_children[0] if br.named_children else None
        if br is not None and br.type == "compound_statement":
            yield from _tail_blocks(br)


def _exit(st: Node, k: Kernel) -> tuple[str, list[Node]] | None:
    """``if (c) continue;`` / ``if (c) { S; return; }`` (no ``else``): the jump's kind and the statements S."""
    if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
        return None
    cons = st.child_by_field_name("consequence")
    sts = statements(cons) if cons is not None else []
    if not sts:
        return None
    last = _squash(k.t(sts[-1]))
    kind = "continue" if last == "continue;" else "return" if last == "return;" else None
    return (kind, sts[:-1]) if kind is not None else None


def _condition(st: Node) -> Node:
    c = st.child_by_field_name("condition")
    assert c is not None
    if c.type == "condition_clause":
        v = c.child_by_field_name("value")
        c = v if v is not None else c.named_children[-1]
    return unparen(c)


def _indent(data: bytes, at: int) -> str:
    start = data.rfind(b"\n", 0, at) + 1
    line = data[start:at].decode("utf-8")
    return line[:len(line) - len(line.lstrip())]


def _lines(data: bytes, nodes: list[Node], ind: str) -> str:
    """The statements as written, one level deeper than ``ind`` (each line ended by a newline; empty when none)."""
    if not nodes:
        return ""
    lines = data[nodes[0].start_byte:nodes[-1].end_byte].decode("utf-8").split("\n")
    return "".join(ln + "\n" for ln in [ind + "    " + lines[0], *(("    " + ln if ln.strip() else ln)
                                                                    for ln in lines[1:])])


def one_item_each(loop: Node, var: str, k: Kernel, env: PassEnv) -> str | None:
    """Why a thread may walk more than one item of ``loop`` at the spec's launch (None: at most one at every size
    of the spec): the loop's bound ``var < n`` with ``n`` the kernel's scalar parameters, evaluated at each size,
    is at most the launch's ``gridDim.x * blockDim.x`` there."""
    cond = loop.child_by_field_name("condition")
    c = unparen(cond) if cond is not None else None
    op = c.child_by_field_name("operator") if c is not None and c.type == "binary_expression" else None
    left = c.child_by_field_name("left") if c is not None else None
    right = c.child_by_field_name("right") if c is not None else None
    if c is None or op is None or left is None or right is None or k.t(op) != "<" or k.t(unparen(left)) != var:
        return f"the pass's condition is not `{var} < n`"
    if not env.grids or not env.blocks or len(env.values) != len(env.grids):
        return "the launch's grid is not known as numbers at every size of the spec"
    bound = k.t(unparen(right))
    for size, (grid, block, values) in enumerate(zip(env.grids, env.blocks, env.values, strict=False)):
        try:
            n = parse_expr(bound).evaluate(values)
        except (ExprError, ValueError) as e:
            first = str(e).splitlines()[0]
            return (f"the bound `{bound}` could not be evaluated at the spec's sizes ({first}; only the scalar "
                    "parameters the spec gives as numbers count)")
        threads = grid[0] * block[0]
        if n > threads:
            at = "the perturbed size" if size else "the spec's size"
            return (f"at {at} the launch has {threads} threads in x for {n} items: a thread walks more than one "
                    "item, and its `return` would skip the later ones")
    return None


@register("item_exits",
          "in the top-level grid-stride loop over the items, `if (c) continue;` or `if (c) { S; continue; }` of its "
          "body (or of a branch of an `if` that ends it); `return` in place of `continue` only where the launch "
          "gives each thread at most one item at every size of the spec and the loop is the kernel's last statement")
def item_exits(k: Kernel, env: PassEnv) -> Result:
    """``if (c) continue; REST`` -> ``if (!(c)) { REST }``; ``if (c) { S; continue; } REST`` -> ``if (c) { S }
    else { REST }``; the same for ``return`` where each thread has at most one item (see the module)."""
    top = statements(k.body)
    found = next(((st, var) for st in top for var in [item_loop(st, k)] if var is not None), None)
    if found is None:
        return None
    loop, var = found
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement" or next(walk(loop, ("goto_statement",)), None) is not None:
        return None
    if var in written_names(body, k.data):
        return None
    for block in _tail_blocks(body):
        sts = statements(block)
        for at, st in enumerate(sts):
            got = _exit(st, k)
            if got is None:
                continue
            kind, before = got
            line = k.line(st)
            if kind == "return":
                if loop is not top[-1]:
                    return Skipped(f"`return` at line {line} ends the thread's walk over the items and skips the "
                                   "statements after the loop: it is no `continue`", line)
                why = one_item_each(loop, var, k, env)
                if why is not None:
                    return Skipped(f"`return` at line {line} ends the thread's walk over the items, not only this "
                                   f"item: {why}", line)
            c = k.t(_condition(st))
            rest = sts[at + 1:]
            ind = _indent(k.data, st.start_byte)
            kept = _lines(k.data, before, ind)
            if not rest:
                text, end = f"if ({c}) {{\n{kept}{ind}}}", st.end_byte
            else:
                rest_text = _lines(k.data, rest, ind)
                text = (f"if ({c}) {{\n{kept}{ind}}} else {{\n{rest_text}{ind}}}" if before
                        else f"if (!({c})) {{\n{rest_text}{ind}}}")
                end = rest[-1].end_byte
            return Changed(splice(k.data, [(st.start_byte, end, text)]),
                           f"`if ({c}) {kind};` in the pass over the items (line {line}) guards the rest of the "
                           "item's work")
    return None
