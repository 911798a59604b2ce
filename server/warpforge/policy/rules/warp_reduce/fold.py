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
from dataclasses import dataclass

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


def _terms(loop: Node, var: str, data: bytes, shared: dict[str, str], resolve: Callable[[str], str],
           uniform: Uniform, type_of: Callable[[str], str | None]) -> list[FoldTerm] | str:
    """The loop's updates, or why the loop is not a fold of shared partials."""
    body = loop.child_by_field_name("body")
    sts = statements(body) if body is not None and body.type == "compound_statement" else \
        ([body] if body is not None else [])
    out: list[FoldTerm] = []
    targets: set[str] = set()
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
        if var not in identifiers(sp[1], data) or any(
                not uniform(x) for x in sp[1].named_children if var not in identifiers(x, data)):
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
        index = render(sp[1], data, lambda n: "{i}" if n.type == "identifier" and node_text(n, data) == var
                       else None)
        out.append(FoldTerm(target, array, index.replace("{", "{{").replace("}", "}}").replace("{{i}}", "{i}"),
                            fmt, elem, idem))
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
    terms = _terms(loop, var, data, shared, resolve, uniform, type_of)
    if isinstance(terms, str):
        declined(terms, loop, Stage.SHAPE)
        return None
    return Fold(st, loop, var, start, bound, terms, tid)


def _after_uses(body: Node, loop: Node, var: str, data: bytes) -> bool:
    """The loop's variable is read after the loop (anywhere later in the kernel's text)."""
    return any(n.type == "identifier" and node_text(n, data) == var and n.start_byte >= loop.end_byte
               for n in walk(body))


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
        if arrays & (written_names(s, data) | {node_text(n, data) for n in walk(s) if n.type == "identifier"}):
            break
    if barrier is None:
        return ("no block barrier precedes the `if` in its block with nothing touching "
                f"`{', '.join(sorted(arrays))}` in between (every thread must reach the new code, and the "
                "partials must be complete)")
    if any(n.type == "return_statement" and n.start_byte < fold.node.start_byte for n in walk(body)):
        return "a `return` comes before the fold: threads that left would miss the new barrier"
    if _after_uses(body, fold.loop, fold.var, data):
        return f"the loop's variable `{fold.var}` is read after the loop"
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
