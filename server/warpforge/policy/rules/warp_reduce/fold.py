"""One thread folding the block's shared partials serially: the other block reduction people write.

Why a module of its own: besides the tree (``tree.py``), the most common way to finish a block reduction in
code written by others is to let thread 0 walk the shared array alone (darknet's batch-norm and bias
gradients, teaching code, mmcv's deformable attention)::

    __syncthreads();                                   // the partials are complete
    if (tid == 0) {                                    // or threadIdx.x == 0, !tid, 0 == tid
        ...
        for (i = S; i < N; ++i) X += sh[i];            // or X = X + sh[i], X = fmaxf(X, sh[i]), |=, ^=;
        ...                                            //   several such updates, each on its own array or
    }                                                  //   element (sh[2*i], sh[2*i + 1])

One thread reading ``N`` shared words in a dependent chain costs N shared-memory latencies while the other
threads of the block idle: with 512 partials that is thousands of cycles per block, often more than the
block's whole loop over global memory. The rewrite lets every thread take part: each thread folds the
elements ``j = S + tid, S + tid + blockDim.x, ...`` below N, each warp folds its lanes with
``__shfl_down_sync``, the warps' values go through a 32-element shared array to warp 0, which folds them the
same way; thread 0 (lane 0 of warp 0) then applies ``X = X op v`` where the loop was and runs the rest of its
branch unchanged.

Legality (each declined in words when it fails):

* the combine is commutative and associative (``+``, ``|``, ``^``, min, max), so another order folds the same
  values (floating-point sums within rounding); min and max are idempotent, so lanes without an element of
  their own repeat element S instead of needing an identity value;
* ``S`` and ``N`` are the same in every thread of the block (parameters, literals, macros, ``blockDim``,
  ``blockIdx``, and locals made of those only), and ``X`` and the array's index do not change in the loop;
* every thread of the block reaches the new code: the ``if`` follows a block barrier in the same statement
  list (the author's barrier, which already requires every thread to arrive there), and no ``return`` comes
  before it in the kernel;
* the block is one-dimensional (thread 0 is lane 0 of warp 0, the only thread that tests true) and, checked at
  run time, a whole number of warps (full-mask shuffles); otherwise the user's loop runs, unchanged;
* the loop's variable is not read after the loop (its final value is no longer computed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from .._structural import (
    MINMAX_FUNCS,
    binary_parts,
    condition_of,
    declared_names,
    identifiers,
    indent,
    is_zero_literal,
    line_indent_of,
    render,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    written_names,
)
from .._why import Stage, declined
from .tree import SHUFFLE_ELEMS, Threads, is_barrier, is_tid

#: names this rewrite introduces (shared with the tree's rewrite: one prefix per rule)
_P = "wfr_f"
_FULL = "0xffffffffu"
_COMPOUND = {"+=": "+", "|=": "|", "^=": "^"}


@dataclass(frozen=True)
class FoldTerm:
    """One update of the loop: ``target = fmt(target, array[index(i)])``."""

    target: str
    array: str
    #: the index with the loop's variable as ``{i}``
    index: str
    #: ``{a} op {b}``
    fmt: str
    elem: str
    #: min/max: folding an element twice changes nothing (lanes without an element repeat element S)
    idempotent: bool


@dataclass
class Fold:
    """A recognized serial fold: the ``if`` that runs it, the loop, and what the loop folds."""

    node: Node
    loop: Node
    var: str
    start: str
    bound: str
    terms: list[FoldTerm]
    tid: str
    #: induction variables stepped by the loop (their final values are no longer computed)
    inductions: list[str] = field(default_factory=list)


def _is_tid_zero(cond: Node, data: bytes, th: Threads) -> str | None:
    """``tid == 0`` / ``0 == tid`` / ``!tid``: the thread's index, else None."""
    c = unparen(cond)
    if c.type == "unary_expression" and node_text(c, data).lstrip().startswith("!"):
        arg = c.child_by_field_name("argument")
        return is_tid(arg, data, th)
    b = binary_parts(c, data)
    if b is None or b[1] != "==":
        return None
    for t, z in ((b[0], b[2]), (b[2], b[0])):
        if is_zero_literal(unparen(z), data) and (got := is_tid(t, data, th)) is not None:
            return got
    return None


class Uniform:
    """Which expressions have the same value in every thread of a block."""

    def __init__(self, body: Node, data: bytes) -> None:
        self.data = data
        self.written = written_names(body, data)
        self.defs: dict[str, Node | None] = {}
        for d in walk(body, ("declaration",)):
            for name in declared_names(d, data):
                one = single_decl(d, data)
                # a name declared twice, or in a list, is judged by no definition: not uniform
                self.defs[name] = one.value if one is not None and name not in self.defs else None

    def __call__(self, n: Node, depth: int = 0) -> bool:
        if depth > 8:
            return False
        for x in walk(n):
            if x.type == "identifier":
                name = node_text(x, self.data)
                if name in ("threadIdx", "laneid"):
                    return False
                if name in self.defs:  # a local: never written, defined from uniform values
                    v = self.defs[name]
                    if name in self.written or v is None or not self(v, depth + 1):
                        return False
            elif x.type in ("call_expression", "subscript_expression", "assignment_expression",
                            "update_expression", "pointer_expression"):
                return False
        return True


def _combine(left: Node, op: str, right: Node, data: bytes) -> tuple[str, str, Node, bool] | None:
    """``(target, fmt, element read, idempotent)`` for one update statement's parts, else None."""
    t = node_text(left, data)
    if op in _COMPOUND:
        return t, f"{{a}} {_COMPOUND[op]} {{b}}", right, False
    if op != "=":
        return None
    r = unparen(right)
    b = binary_parts(r, data)
    if b is not None and b[1] in ("+", "|", "^"):
        for me, other in ((b[0], b[2]), (b[2], b[0])):
            if node_text(unparen(me), data) == t:
                return t, f"{{a}} {b[1]} {{b}}", other, False
        return None
    if r.type == "call_expression":
        fn = node_text(r.child_by_field_name("function") or r, data)
        args = [a for a in (r.child_by_field_name("arguments") or r).named_children]
        if fn in MINMAX_FUNCS and len(args) == 2:
            for me, other in ((args[0], args[1]), (args[1], args[0])):
                if node_text(unparen(me), data) == t:
                    return t, f"{fn}({{a}}, {{b}})", other, True
    return None


def _loop_header(loop: Node, data: bytes, uniform: Uniform) -> tuple[str, str, str] | str:
    """``(var, start, bound)`` of ``for (i = S; i < N; ++i)``, or why not."""
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return "the loop is not `for (i = S; i < N; ++i)`"
    d = single_decl(init, data) if init.type == "declaration" else None
    if d is not None and d.value is not None and not d.pointer:
        var, start = d.name, d.value
    elif init.type == "assignment_expression" and node_text(init.child_by_field_name("operator") or init,
                                                                  data) == "=":
        lhs, start_n = init.child_by_field_name("left"), init.child_by_field_name("right")
        if lhs is None or start_n is None or lhs.type != "identifier":
            return "the loop is not `for (i = S; i < N; ++i)`"
        var, start = node_text(lhs, data), start_n
    else:
        return "the loop is not `for (i = S; i < N; ++i)`"
    b = binary_parts(unparen(cond), data)
    if b is None or b[1] != "<" or node_text(unparen(b[0]), data) != var:
        return f"the loop's condition `{node_text(cond, data)}` is not `{var} < N`"
    u = " ".join(node_text(upd, data).split()).replace(" ", "")
    if u not in (f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1"):
        return f"the loop steps `{node_text(upd, data)}`, not by 1"
    for what, n in (("start", start), ("bound", b[2])):
        if var in identifiers(n, data) or not uniform(n):
            return (f"the loop's {what} `{node_text(n, data)}` may differ between the block's threads (the folded "
                    "range must be the same for all)")
    return var, node_text(start, data), node_text(b[2], data)


def _loop_statements(loop: Node) -> list[Node]:
    body = loop.child_by_field_name("body")
    return statements(body) if body is not None and body.type == "compound_statement" else \
        ([body] if body is not None else [])


def _bump(st: Node, data: bytes) -> tuple[str, Node | None] | None:
    """``v += c;`` / ``v = v + c;`` -> (v, c); ``v++;`` / ``++v;`` -> (v, None); else None."""
    e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
    if e is None:
        return None
    if e.type == "update_expression":
        arg = e.child_by_field_name("argument")
        if arg is not None and arg.type == "identifier" and "++" in node_text(e, data):
            return node_text(arg, data), None
        return None
    if e.type != "assignment_expression":
        return None
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None or left.type != "identifier":
        return None
    v = node_text(left, data)
    if node_text(op, data) == "+=":
        return v, right
    b = binary_parts(unparen(right), data) if node_text(op, data) == "=" else None
    if b is not None and b[1] == "+" and node_text(unparen(b[0]), data) == v:
        return v, b[2]
    return None


def _inductions(loop: Node, var: str, start: str, before: list[Node], inside: set[str], data: bytes,
                uniform: Uniform) -> tuple[dict[str, str], int] | str:
    """Induction variables of the loop (``int sid = 2; for (...) { ... sh[sid] ...; sid += 2; }``, mmcv's
    deformable attention): each trailing bump ``v += c`` with ``v`` started before the loop at a uniform value.
    Returns ``v -> its value at iteration {i}`` (every use precedes the bump) and the number of trailing bumps,
    or why not."""
    sts = _loop_statements(loop)
    out: dict[str, str] = {}
    n = 0
    for st in reversed(sts):
        got = _bump(st, data)
        if got is None:
            break
        v, c = got
        if c is not None and ({v, var} & identifiers(c, data) or not uniform(c)):
            break  # not a step: an update the fold reads (``b += sh[i]``), or declined there
        if v == var or v in out:
            return f"`{node_text(st, data).strip()}` steps the loop's variable or `{v}` twice"
        init = None
        for b in reversed(before):
            if v not in written_names(b, data) and v not in declared_names(b, data):
                continue
            d = single_decl(b, data) if b.type == "declaration" else None
            e = b.named_children[0] if b.type == "expression_statement" and b.named_child_count == 1 else None
            if d is not None and d.name == v and d.value is not None:
                init = d.value
            elif e is not None and e.type == "assignment_expression" \
                    and node_text(e.child_by_field_name("operator") or e, data) == "=" \
                    and node_text(e.child_by_field_name("left") or e, data) == v:
                init = e.child_by_field_name("right")
            break
        if init is None or not uniform(init) or identifiers(init, data) & inside:
            return f"`{v}` does not start before the loop at a value the same for every thread"
        step = "1" if c is None else node_text(c, data)
        out[v] = f"(({node_text(init, data)}) + ({step}) * ({{i}} - ({start})))"
        n += 1
    for v in out:
        if sum(1 for st in sts if v in written_names(st, data)) != 1:
            return f"`{v}` is changed in the loop besides its step"
    return out, n


def _terms(loop: Node, var: str, data: bytes, shared: dict[str, str], resolve: Callable[[str], str],
           uniform: Uniform, type_of: Callable[[str], str | None], inductions: dict[str, str], bumps: int,
           inside: set[str]) -> list[FoldTerm] | str:
    """The loop's updates, or why the loop is not a fold of shared partials."""
    sts = _loop_statements(loop)
    sts = sts[: len(sts) - bumps]
    out: list[FoldTerm] = []
    targets: set[str] = set()
    marks = {var: "\x00i\x00", **{v: "\x00v" + v + "\x00" for v in inductions}}
    for st in sts:
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        parts = None if e is None or e.type != "assignment_expression" else \
            [e.child_by_field_name(f) for f in ("left", "operator", "right")]
        if parts is None or any(p is None for p in parts):
            return f"the loop's statement `{node_text(st, data)}` is not an update `X += sh[i]`"
        left, op, right = parts
        assert left is not None and op is not None and right is not None
        got = _combine(left, node_text(op, data), right, data)
        if got is None:
            return (f"`{node_text(st, data).strip()}` is not a sum, `|`, `^`, min or max of a shared element into "
                    "one value")
        target, fmt, elem_read, idem = got
        sp = subscript_parts(unparen(elem_read), data)
        if sp is None or node_text(unparen(sp[0]), data) not in shared:
            return f"`{node_text(elem_read, data)}` is not an element of a shared array"
        array = node_text(unparen(sp[0]), data)
        moving = {var, *inductions}
        names = [x for x in walk(sp[1]) if x.type == "identifier"]
        if not moving & identifiers(sp[1], data) or any(
                node_text(x, data) not in moving and (not uniform(x) or node_text(x, data) in inside) for x in names) \
                or any(x.type in ("call_expression", "subscript_expression", "assignment_expression",
                                  "update_expression") for x in walk(sp[1])):
            return f"the index `{node_text(sp[1], data)}` is not the loop's variable with uniform offsets"
        if var in identifiers(left, data) or array in identifiers(left, data) or target in targets:
            return f"`{target}` changes with the loop's variable or is updated twice"
        targets.add(target)
        elem = " ".join(shared[array].split())
        real = resolve(elem)
        if real not in SHUFFLE_ELEMS:
            return f"a warp shuffle does not move `{elem}` values (the element type of `{array}`)"
        base = re.split(r"[\[.]", target, maxsplit=1)[0].strip()
        kept = type_of(base)
        if kept is None or resolve(kept) != real:
            return (f"`{target}` is not known to hold `{elem}` values like `{array}` (the fold would be computed in "
                    f"another precision than the original's `{target}`)")
        index = render(sp[1], data, lambda n: marks.get(node_text(n, data)) if n.type == "identifier" else None)
        index = index.replace("{", "{{").replace("}", "}}").replace("\x00i\x00", "{i}")
        for v, value in inductions.items():
            index = index.replace("\x00v" + v + "\x00", value)
        out.append(FoldTerm(target, array, index, fmt, elem, idem))
    if not out:
        return "the loop has no update"
    return out


def match_fold(st: Node, data: bytes, th: Threads, shared: dict[str, str], resolve: Callable[[str], str],
               uniform: Uniform, type_of: Callable[[str], str | None]) -> Fold | None:
    """The fold an ``if (tid == 0) { ... for ... }`` statement runs, or None (declined with the reason)."""
    if st.type != "if_statement" or st.child_by_field_name("alternative") is not None:
        return None
    cond = condition_of(st)
    tid = _is_tid_zero(cond, data, th) if cond is not None else None
    if tid is None:
        return None
    cons = st.child_by_field_name("consequence")
    inner = statements(cons) if cons is not None and cons.type == "compound_statement" else \
        ([cons] if cons is not None else [])
    loops = [s for s in inner if s.type == "for_statement"]
    reads = [lp for lp in loops if any(n.type == "identifier" and node_text(n, data) in shared for n in walk(lp))]
    if len(reads) != 1:
        return None
    loop = reads[0]
    head = _loop_header(loop, data, uniform)
    if isinstance(head, str):
        declined(head, loop, Stage.SHAPE)
        return None
    var, start, bound = head
    # the new code runs before the ``if``: what it names must not be declared inside thread 0's branch
    inside = {nm for d in walk(cons, ("declaration",)) for nm in declared_names(d, data)} if cons is not None \
        else set()
    for what, text in (("start", start), ("bound", bound)):
        if set(re.findall(r"[A-Za-z_]\w*", text)) & inside:
            declined(f"the loop's {what} `{text}` names a local of thread 0's branch (the block-wide fold runs "
                     "before it)", loop, Stage.SHAPE)
            return None
    ind = _inductions(loop, var, start, inner[: inner.index(loop)], inside, data, uniform)
    if isinstance(ind, str):
        declined(ind, loop, Stage.SHAPE)
        return None
    terms = _terms(loop, var, data, shared, resolve, uniform, type_of, ind[0], ind[1], inside)
    if isinstance(terms, str):
        declined(terms, loop, Stage.SHAPE)
        return None
    return Fold(st, loop, var, start, bound, terms, tid, list(ind[0]))


def _after_uses(body: Node, loop: Node, var: str, data: bytes) -> bool:
    """The loop's variable is read after the loop (anywhere later in the kernel's text)."""
    return any(n.type == "identifier" and node_text(n, data) == var and n.start_byte >= loop.end_byte
               for n in walk(body))


def _writes_memory(st: Node) -> bool:
    """A store through a subscript, a dereference or a member (any array may be another name of the partials':
    a thread writing one the others then read would race once every thread reads them)."""
    for n in walk(st):
        if n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is not None and unparen(target).type in ("subscript_expression", "pointer_expression",
                                                               "field_expression"):
                return True
    return False


def fold_legal(body: Node, fold: Fold, data: bytes, th: Threads) -> str | None:
    """Why the fold may not be rewritten where it stands, or None."""
    parent = fold.node.parent
    sibs = statements(parent) if parent is not None and parent.type == "compound_statement" else []
    at = next((n for n, s in enumerate(sibs) if s.id == fold.node.id), None)
    if at is None:
        return "the `if` is not a statement of a block (every thread must reach the new code)"
    arrays = {t.array for t in fold.terms}
    barrier = None
    for s in reversed(sibs[:at]):
        if is_barrier(s, data, th):
            barrier = s
            break
        if arrays & (written_names(s, data) | {node_text(n, data) for n in walk(s) if n.type == "identifier"}) \
                or _writes_memory(s):
            break
    if barrier is None:
        return ("no block barrier precedes the `if` in its block with nothing touching "
                f"`{', '.join(sorted(arrays))}` or writing memory in between (every thread must reach the new "
                "code, and the partials must be complete)")
    if any(n.type == "return_statement" and n.start_byte < fold.node.start_byte for n in walk(body)):
        return "a `return` comes before the fold: threads that left would miss the new barrier"
    for v in (fold.var, *fold.inductions):
        if _after_uses(body, fold.loop, v, data):
            return f"the loop's variable `{v}` is read after the loop"
    return None


def replacement(fold: Fold, n: int, data: bytes) -> str:
    """The statement that takes the ``if``'s place: the block-wide fold, then the ``if`` with the loop
    replaced by ``X = X op v`` (the user's loop kept for blocks that are not whole warps)."""
    tid = fold.tid
    ok = f"{_P}ok{n}"
    s, nb = f"({fold.start})", f"({fold.bound})"
    vs = [f"{_P}v{n}_{k}" for k in range(len(fold.terms))]
    ws = [f"{_P}w{n}_{k}" for k in range(len(fold.terms))]
    j = f"{_P}j{n}"
    lines = [f"const bool {ok} = (blockDim.x & 31u) == 0u;"]
    lines += [f"{t.elem} {v} = {t.elem}();" for t, v in zip(fold.terms, vs, strict=True)]
    lines += [f"__shared__ {t.elem} {w}[32];" for t, w in zip(fold.terms, ws, strict=True)]
    # min/max start from element S (folding it twice changes nothing); the others from zero
    first = "\n".join(f"    {v} = {t.array}[{t.index.format(i=s)}];" for t, v in zip(fold.terms, vs, strict=True)
                      if t.idempotent)
    acc = "\n".join(f"        {v} = {t.fmt.format(a=v, b=f'{t.array}[{t.index.format(i=j)}]')};"
                    for t, v in zip(fold.terms, vs, strict=True))

    def shuffles(count: str) -> str:
        body = "\n".join(f"    const {t.elem} {v}_in = __shfl_down_sync({_FULL}, {v}, {_P}o);\n"
                         f"    {v} = {t.fmt.format(a=v, b=f'{v}_in')};" for t, v in zip(fold.terms, vs, strict=True))
        return f"for (int {_P}o = {count}; {_P}o > 0; {_P}o >>= 1) {{\n{body}\n}}"

    keep = "\n".join(f"        {w}[{tid} >> 5] = {v};" for w, v in zip(ws, vs, strict=True))
    gather = "\n".join(
        f"        {v} = {w}[{tid} < (blockDim.x >> 5) ? {tid} : 0];" if t.idempotent else
        f"        {v} = {tid} < (blockDim.x >> 5) ? {w}[{tid}] : {t.elem}();"
        for t, v, w in zip(fold.terms, vs, ws, strict=True))
    pre = f"""if ({ok} && {s} < {nb}) {{
{first}
    for (int {j} = {s} + {tid}; {j} < {nb}; {j} += blockDim.x) {{
{acc}
    }}
{indent(shuffles("16"), "    ")}
    if (({tid} & 31) == 0) {{
{keep}
    }}
    __syncthreads();
    if ({tid} < 32) {{
{gather}
{indent(shuffles("16"), "        ")}
    }}
}}"""
    applied = "\n".join(f"    {t.target} = {t.fmt.format(a=t.target, b=v)};"
                        for t, v in zip(fold.terms, vs, strict=True))
    loop_txt = node_text(fold.loop, data)
    fast = f"""if ({ok}) {{
    if ({s} < {nb}) {{
{indent(applied, "    ")}
    }}
}} else """
    # the new lines continue at the loop's own indentation (the user's loop keeps its text); the whole ``if``
    # is then written back relative to its first line (the caller indents it where the ``if`` stood)
    at = line_indent_of(fold.loop, data)
    new_loop = "\n".join([fast.split("\n")[0]] + [at + ln if ln else ln for ln in fast.split("\n")[1:]]) + loop_txt
    if_txt = render(fold.node, data, lambda m: new_loop if m.id == fold.loop.id else None)
    base = line_indent_of(fold.node, data)
    if_txt = "\n".join(ln[len(base):] if ln.startswith(base) else ln for ln in if_txt.split("\n"))
    return "\n".join(lines) + "\n" + pre.replace("\n\n", "\n") + "\n" + if_txt
