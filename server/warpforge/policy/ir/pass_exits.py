"""Exit passes: a ``return`` that leaves a loop over the items becomes structured control flow.

Why: mmcv's ``CUDA_1D_KERNEL_LOOP(i, n) { if (bs_idx >= b) return; ... }`` (and kernels written like it) leave
the grid-stride loop with a ``return`` whose condition depends only on the block (``bs_idx = blockIdx.y``): a
thread that returns would have returned in every later iteration too. The rules that remap the items put a
barrier in each pass over them, so they cannot take a ``return`` there (every thread must reach the barrier).
Guarding the rest of the body with the negated condition says the same thing without leaving the loop.
Each pass below rewrites one spelling, exactly, under its stated precondition, and otherwise says why not.

A top-level ``if (c) return; REST`` is deliberately left as it is: it is the canonical early exit the rules read
(``cuda.normalize`` turns a final ``if (i < n) { BODY }`` into exactly that), so rewriting it into a guard would
undo normalize's work and hide the bound from ``column_remap`` and the summary's ``exit`` form.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from .passes import Changed, Kernel, PassEnv, Result, Skipped, declared_names, register, splice, statements

_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
#: device math without side effects (a call of another name might write memory or synchronize)
_PURE_CALLS = frozenset({"min", "max", "abs", "fabsf", "fabs", "fminf", "fmaxf", "fmin", "fmax", "floorf", "ceilf",
                         "floor", "ceil", "sqrtf", "sqrt", "rsqrtf", "expf", "exp", "logf", "log", "__float2int_rd",
                         "__float2int_rn", "roundf", "truncf"})
_THREAD_UNIFORM = ("blockDim", "gridDim")
#: barriers and warp collectives (``__syncthreads``, ``__shfl_xor_sync``, ``block.sync()``, ``__ballot_sync``)
_COLLECTIVE = re.compile(r"sync|__shfl|__ballot|__any|__all|__activemask|__reduce_|__match|barrier")


def _pure(node: Node, k: Kernel, env: PassEnv) -> bool:
    """No write, no call (but device math), no read of memory: evaluating it once more changes nothing and
    cannot fault."""
    for n in walk(node):
        if n.type in ("assignment_expression", "update_expression", "new_expression", "delete_expression",
                      "subscript_expression", "co_await_expression", "lambda_expression"):
            return False
        if n.type == "pointer_expression" and not k.t(n).lstrip().startswith("&"):
            return False
        if n.type == "field_expression" and "->" in k.t(n)[len(k.t(n.child_by_field_name("argument") or n)):]:
            return False
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            name = k.t(fn) if fn is not None else ""
            if name not in _PURE_CALLS or name in env.functions:
                return False
    return True


def _invariant(node: Node, loop: Node, k: Kernel, env: PassEnv) -> bool:
    """The same value in every iteration of ``loop`` for one thread: pure, and no name in it is written in the
    loop (header included) or declared inside it."""
    if not _pure(node, k, env):
        return False
    varying = written_names(loop, k.data) | declared_names(loop, k.data)
    return not any(k.t(n) in varying for n in walk(node, ("identifier",)))


def _positive_step(loop: Node, var: str, k: Kernel) -> bool:
    """The loop's update adds a positive amount to ``var``: ``var++``, ``++var``, ``var += c`` (c a positive
    literal or a product of ``blockDim``/``gridDim`` fields and positive literals), and nothing else writes it."""
    upd = loop.child_by_field_name("update")
    body = loop.child_by_field_name("body")
    if upd is None or body is None or var in written_names(body, k.data):
        return False
    u = unparen(upd)
    text = "".join(k.t(u).split())
    if text in (f"{var}++", f"++{var}"):
        return True
    if u.type != "assignment_expression" or text.split("+=", 1)[0] != var or "+=" not in text:
        return False
    right = u.child_by_field_name("right")
    return right is not None and _positive(right, k)


def _positive(e: Node, k: Kernel) -> bool:
    """A positive literal, a ``blockDim``/``gridDim`` field, or a sum or product of such."""
    e = unparen(e)
    if e.type == "number_literal":
        digits = k.t(e).rstrip("uUlL")
        return digits.isdigit() and int(digits) > 0
    if e.type == "field_expression":
        arg = e.child_by_field_name("argument")
        return arg is not None and k.t(arg) in _THREAD_UNIFORM and "->" not in k.t(e)
    if e.type == "binary_expression":
        op, left, right = (e.child_by_field_name(x) for x in ("operator", "left", "right"))
        return (op is not None and k.t(op) in ("*", "+") and left is not None and right is not None
                and _positive(left, k) and _positive(right, k))
    return False


def _sticky(cond: Node, loop: Node, var: str | None, k: Kernel, env: PassEnv) -> bool:
    """Once ``cond`` holds in an iteration of ``loop``, it holds in every later one: it is invariant, or
    ``var >= e`` / ``var > e`` (or ``e <= var`` / ``e < var``) with ``var`` the loop's counter stepped up and ``e``
    invariant, or ``&&`` / ``||`` of such conditions."""
    c = unparen(cond)
    if _invariant(c, loop, k, env):
        return True
    if c.type != "binary_expression":
        return False
    op, left, right = (c.child_by_field_name(x) for x in ("operator", "left", "right"))
    if op is None or left is None or right is None:
        return False
    o = k.t(op)
    if o in ("&&", "||"):
        return _sticky(left, loop, var, k, env) and _sticky(right, loop, var, k, env)
    if var is None or not _positive_step(loop, var, k):
        return False
    if o in (">=", ">"):
        counter, bound = left, right
    elif o in ("<=", "<"):
        counter, bound = right, left
    else:
        return False
    return k.t(unparen(counter)) == var and _invariant(bound, loop, k, env)


def _bare_return(st: Node, k: Kernel) -> bool:
    """``return;`` or ``{ return; }``."""
    inner = statements(st) if st.type == "compound_statement" else [st]
    return len(inner) == 1 and inner[0].type == "return_statement" and "".join(k.t(inner[0]).split()) == "return;"


def _body(loop: Node) -> list[Node]:
    body = loop.child_by_field_name("body")
    return statements(body) if body is not None and body.type == "compound_statement" else []


def _return_at(sts: list[Node], k: Kernel) -> int | None:
    """Where ``if (e) return;`` (no ``else``) stands among a loop body's statements."""
    return next((i for i, st in enumerate(sts) if st.type == "if_statement"
                 and st.child_by_field_name("alternative") is None
                 and _bare_return(st.child_by_field_name("consequence") or st, k)), None)


def _clause(st: Node) -> Node:
    """The expression an ``if`` tests (inside its ``( ... )`` clause)."""
    c = st.child_by_field_name("condition")
    assert c is not None
    if c.type == "condition_clause":
        v = c.child_by_field_name("value")
        c = v if v is not None else c.named_children[-1]
    return c


def _counter(loop: Node, k: Kernel) -> str | None:
    init = loop.child_by_field_name("initializer")
    if init is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    nm = ds[0].child_by_field_name("declarator") if len(ds) == 1 else None
    return k.t(nm) if nm is not None and nm.type == "identifier" else None


@register("sticky_loop_return",
          "`for (...; c; s) { pure declarations; if (e) return; REST }` as the kernel's last statement: once e "
          "holds it holds in every later iteration (e invariant in the loop, or the counter stepped up compared "
          "`>=`/`>` with an invariant), c and s read no memory")
def sticky_loop_return(k: Kernel, env: PassEnv) -> Result:
    """``for (...) { D; if (e) return; REST }`` -> ``for (...) { D; if (!(e)) { REST } }``.

    Exact when the loop is the kernel's last statement (the ``return`` skipped nothing after it), ``e`` is
    *sticky* (once true in an iteration of this thread, true in every later one: it reads no memory and no name
    written in the loop, or it compares the counter, stepped by a positive amount, ``>=``/``>`` with such a
    value), the declarations ``D`` before it are pure (no write, call or memory read: running them in the
    iterations the ``return`` skipped changes nothing and cannot fault), and the loop's condition and step are
    pure but for the step's write of the counter, and the loop has no barrier or warp collective (a thread that
    returned stops counting for them; one that skips its items does not). Then the iterations the ``return``
    skipped run with ``e`` true and do nothing, and the loop ends by its own condition (which it has: one
    without a condition ends only by the ``return``). For a compared counter this assumes, as the loop's own
    condition does, that stepping it does not wrap around before that condition fails."""
    top = statements(k.body)
    found = next(((lp, sts, at) for lp in top if lp.type == "for_statement" for sts in [_body(lp)]
                  for at in [_return_at(sts, k)] if at is not None), None)
    if found is None:
        return None
    loop, sts, at = found
    st = sts[at]
    test = _clause(st)
    line = k.line(st)
    if loop != top[-1] or next(walk(k.body, ("goto_statement",)), None) is not None:
        return Skipped("statements follow the loop (or a `goto` jumps): the `return` skipped them", line)
    collective = next((n for n in walk(loop, ("call_expression",)) if _COLLECTIVE.search(
        k.t(n.child_by_field_name("function") or n))), None)
    if collective is not None:
        return Skipped(f"`{k.t(collective)}` in the loop waits for the block's or warp's live threads: a thread "
                       "that returned no longer counts, one that skips the rest of its items does", line)
    cond, upd = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
    if cond is None or upd is None:
        return Skipped("the loop has no condition or no step: it may end only by the `return`", line)
    var = _counter(loop, k)
    if not _pure(cond, k, env) or (var is None or written_names(upd, k.data) != {var}
                                   or not _pure_step(upd, var, k, env)):
        return Skipped("the loop's condition or step is not pure (or the loop declares no single counter)", line)
    impure = next((x for x in sts[:at] if x.type != "declaration" or not _pure(x, k, env)), None)
    if impure is not None:
        return Skipped(f"`{k.t(impure).split(chr(10))[0]}` before the `return` is not a pure declaration: the "
                       "iterations the `return` skipped would run it", k.line(impure))
    if not _sticky(test, loop, var, k, env):
        return Skipped(f"`{k.t(test)}` may hold in one iteration and not in a later one (it reads memory or a "
                       "value the loop changes)", line)
    rest = sts[at + 1:]
    c = k.t(unparen(test))
    if not rest:
        return Changed(splice(k.data, [(st.start_byte, st.end_byte, "")]), f"`return` at line {line} dropped")
    rest_text = k.data[st.end_byte:rest[-1].end_byte].decode("utf-8").strip("\n")
    return Changed(splice(k.data, [(st.start_byte, rest[-1].end_byte, f"if (!({c})) {{\n{rest_text}\n}}")]),
                   f"`if ({c}) return;` in the loop (line {line}) guards the rest of the body")


def _pure_step(upd: Node, var: str, k: Kernel, env: PassEnv) -> bool:
    """``var++``, ``++var``, ``var += e`` or ``var = e`` with ``e`` pure."""
    u = unparen(upd)
    if u.type == "update_expression":
        return True
    right = u.child_by_field_name("right") if u.type == "assignment_expression" else None
    return right is not None and _pure(right, k, env)


def _owns(loop: Node, kind: str) -> Node | None:
    """A ``break``/``continue`` that belongs to ``loop`` (not to a loop or switch nested in it)."""
    stops = _LOOPS + (("switch_statement",) if kind == "break_statement" else ())
    body = loop.child_by_field_name("body")
    if body is None:
        return None
    return next(walk(body, (kind,), cut=lambda n: n is not body and n.type in stops), None)


@register("single_pass_loop",
          "`for (T i = v; c; s) { B; return; }` as the kernel's last statement, no `break`/`continue` of it, `i` "
          "not declared at the kernel's top level")
def single_pass_loop(k: Kernel, env: PassEnv) -> Result:
    """``for (T i = v; c; s) { B; return; }`` -> ``T i = v; if (c) { B }``: the body ends by leaving the kernel,
    so the loop runs at most once. Exact without a ``continue`` (which would step and test again) or ``break`` of
    the loop (which has no meaning in an ``if``), with the loop last (the dropped ``return`` skipped nothing) and
    its counter's name free at the kernel's top level (the declaration moves there)."""
    top = statements(k.body)
    if not top or top[-1].type != "for_statement":
        return None
    loop = top[-1]
    body, cond, init = (loop.child_by_field_name(x) for x in ("body", "condition", "initializer"))
    sts = statements(body) if body is not None and body.type == "compound_statement" else []
    if not sts or sts[-1].type != "return_statement" or "".join(k.t(sts[-1]).split()) != "return;":
        return None
    line = k.line(loop)
    if cond is None or init is None or init.type != "declaration":
        return Skipped("the loop that ends by `return` does not declare and test its counter in its header", line)
    jump = _owns(loop, "continue_statement") or _owns(loop, "break_statement")
    if jump is not None:
        return Skipped(f"`{k.t(jump)}` of the loop that ends by `return` (line {k.line(jump)})", k.line(jump))
    names = declared_names(init, k.data)
    outer = set().union(*(declared_names(x, k.data) for x in top[:-1] if x.type == "declaration"),
                        declared_names(k.fn.child_by_field_name("declarator") or k.fn, k.data))
    if names & outer:
        return Skipped(f"`{', '.join(sorted(names & outer))}` is declared at the kernel's top level too", line)
    inner = k.data[sts[0].start_byte:sts[-2].end_byte].decode("utf-8") if len(sts) > 1 else ""
    text = f"{k.t(init).rstrip(';').strip()};\nif ({k.t(unparen(cond))}) {{\n{inner}\n}}"
    return Changed(splice(k.data, [(loop.start_byte, loop.end_byte, text)]),
                   f"the loop ending by `return` (line {line}) runs at most once: an `if`")
