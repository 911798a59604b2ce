"""The offset-stepped thread loop: ``for (i = 0; i < E; i += S) { ... i + id ... }`` as the block-strided loop.

Why: darknet (``fast_mean_kernel``, ``backward_bias_kernel``), CUDA teaching code and many others let a block's
threads stride over a row by stepping an offset shared by the block and adding the thread's index to it::

    for (int i = 0; i < spatial; i += BLOCK) {
        int index = base + i + id;                        // id == threadIdx.x
        local[id] += (i + id < spatial) ? x[index] : 0;   // or: if (i + id < spatial) { ... }
    }

Every rule that reads a row shared by a block's threads (``vectorize_strided``, ``warp_per_row``'s loops) reads
the canonical spelling ``for (int k = id; k < spatial; k += S)``, where the element is the loop's variable and
the guard is the loop's condition. This pass writes the first as the second.

Exactness, for one thread with ``id >= 0`` and ``S > 0``: the original runs ``i = 0, S, 2S, ...`` while
``i < E``, and at each ``i`` handles element ``i + id`` when ``i + id < E``. Since ``i + id < E`` implies
``i < E``, the elements it handles are ``{m*S + id : m*S + id < E}`` in increasing ``m``: exactly the values
``k = id, id + S, ...`` the new loop visits, in the same order. The iterations the original runs past the end
(``i < E <= i + id``) do nothing: the body there is only pure declarations that read no memory and the guarded
statements, whose guard is false (an ``if`` without ``else`` skips them; a ternary ``(i + id < E) ? a : z``
applied with ``op=`` adds ``z``, which must be the identity of ``op``). Every use of ``i`` in the body sits in a
sum with ``id`` (``base + i + id``, either order), which is the new variable: the ``id`` term goes.

The step must be the block's width (``blockDim.x``, or a literal, constant, tunable or ``const`` local equal to
the launch's block x at every size of the spec): the rewrite is exact for any positive step, but the canonical
form means "the block's threads cover the row together", which is what the rules reading it rely on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from .passes import (
    Changed,
    Kernel,
    PassEnv,
    Result,
    Skipped,
    declared_names,
    idents,
    register,
    side_effect_free,
    splice,
    statements,
)
from .passes import Unmet as _No

#: the identity of each compound assignment: the guard's false branch must be one of these literals
_IDENTITY = {"+=": "0", "-=": "0", "|=": "0", "^=": "0", "*=": "1"}
_ZERO = re.compile(r"^\(?\s*([01])(?:\.0*)?(?:[eE][+-]?0+)?[fFlLuU]*\s*\)?$")
_THREAD_X = ("threadIdx.x", "(int)threadIdx.x", "(unsigned)threadIdx.x", "(unsigned int)threadIdx.x")
_INTEGER_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "unsigned long",
                            "unsigned long long", "size_t", "int64_t", "uint64_t", "int32_t", "uint32_t"})




@dataclass(frozen=True)
class _Header:
    var: str
    #: the ``0`` the counter starts at (replaced by the thread's index)
    start: Node
    bound: Node
    step: Node
    #: False for ``for (i = 0; ...)`` with ``i`` declared before the loop
    declared: bool = True


def _squash(s: str) -> str:
    return "".join(s.split())


def _header(f: Node, k: Kernel) -> _Header | None:
    """``for (T i = 0; i < E; i += S)`` (also ``E > i``, ``i = i + S``); None for any other header."""
    init, cond, upd = (f.child_by_field_name(x) for x in ("initializer", "condition", "update"))
    if init is None or cond is None or upd is None:
        return None
    if init.type == "assignment_expression":
        op = init.child_by_field_name("operator")
        if op is None or k.t(op) != "=":
            return None
        name, value = init.child_by_field_name("left"), init.child_by_field_name("right")
    elif init.type == "declaration":
        ds = init.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator":
            return None
        name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    else:
        return None
    if name is None or value is None or name.type != "identifier" or _squash(k.t(value)).rstrip("uUlL") != "0":
        return None
    var = k.t(name)
    c = unparen(cond)
    if c.type != "binary_expression":
        return None
    cl, co, cr = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if cl is None or co is None or cr is None:
        return None
    if k.t(co) == "<" and k.t(unparen(cl)) == var:
        bound = cr
    elif k.t(co) == ">" and k.t(unparen(cr)) == var:
        bound = cl
    else:
        return None
    u = unparen(upd)
    if u.type != "assignment_expression":
        return None
    left, op, right = (u.child_by_field_name(x) for x in ("left", "operator", "right"))
    if left is None or op is None or right is None or k.t(unparen(left)) != var:
        return None
    if k.t(op) == "+=":
        step = right
    elif k.t(op) == "=" and unparen(right).type == "binary_expression":
        r = unparen(right)
        rl, ro, rr = (r.child_by_field_name(x) for x in ("left", "operator", "right"))
        if rl is None or ro is None or rr is None or k.t(ro) != "+":
            return None
        if k.t(unparen(rl)) == var:
            step = rr
        elif k.t(unparen(rr)) == var:
            step = rl
        else:
            return None
    else:
        return None
    return _Header(var, value, bound, step, init.type == "declaration")


def _terms(node: Node, k: Kernel, sign: int = 1) -> list[tuple[int, Node]]:
    """The signed terms of a sum: ``a - (b + c)`` -> ``[(+1, a), (-1, b), (-1, c)]`` (through parentheses)."""
    n = unparen(node)
    if n.type == "binary_expression":
        op = n.child_by_field_name("operator")
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if op is not None and left is not None and right is not None and k.t(op) in ("+", "-"):
            return _terms(left, k, sign) + _terms(right, k, sign if k.t(op) == "+" else -sign)
    return [(sign, node)]


def _sum_top(n: Node) -> Node:
    """The largest sum ``n`` is a term of (climbing through ``+``, ``-`` and parentheses inside a sum)."""
    cur = n
    while True:
        p = cur.parent
        if p is None:
            return cur
        op = p.child_by_field_name("operator") if p.type == "binary_expression" else None
        if op is not None and op.type in ("+", "-"):
            cur = p
            continue
        if p.type == "parenthesized_expression" and p.parent is not None and p.parent.type == "binary_expression":
            op = p.parent.child_by_field_name("operator")
            if op is not None and op.type in ("+", "-"):
                cur = p
                continue
        return cur


def _thread_ids(k: Kernel, f: Node) -> set[str]:
    """Spellings of the thread's x index visible at the loop ``f``: ``threadIdx.x`` and the integer locals
    declared (once, before the loop, in a block enclosing it) with that value and never written."""
    out = set(_THREAD_X)
    written = written_names(k.body, k.data)
    counts: dict[str, int] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        for nm in declared_names(n, k.data) if n.type == "declaration" else []:
            counts[nm] = counts.get(nm, 0) + 1
    for decl in walk(k.body, ("declaration",)):
        scope = decl.parent
        if scope is None or decl.end_byte > f.start_byte or not (scope.start_byte <= f.start_byte
                                                                  and f.end_byte <= scope.end_byte):
            continue
        t = decl.child_by_field_name("type")
        tt = " ".join(k.t(t).replace("const", " ").split()) if t is not None else ""
        if tt not in _INTEGER_TYPES:
            continue
        for d in decl.children_by_field_name("declarator"):
            if d.type != "init_declarator":
                continue
            nd, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if nd is None or v is None or nd.type != "identifier":
                continue
            name = k.t(nd)
            if counts.get(name) == 1 and name not in written and _squash(k.t(unparen(v))) in out:
                out.add(name)
    return out


def _is_id(n: Node, k: Kernel, ids: set[str]) -> bool:
    return _squash(k.t(unparen(n))) in ids


def _guard(cond: Node, k: Kernel, var: str, bound: str, ids: set[str]) -> Node | None:
    """The id term of ``cond`` when it is ``i + id < E`` (either order, or ``E > i + id``), else None."""
    c = unparen(cond)
    if c.type != "binary_expression":
        return None
    cl, co, cr = (c.child_by_field_name(x) for x in ("left", "operator", "right"))
    if cl is None or co is None or cr is None:
        return None
    if k.t(co) == "<":
        total, other = cl, cr
    elif k.t(co) == ">":
        total, other = cr, cl
    else:
        return None
    if _squash(k.t(other)) != bound:
        return None
    terms = _terms(total, k)
    if len(terms) != 2 or any(s != 1 for s, _ in terms):
        return None
    names = [unparen(t) for _, t in terms]
    if k.t(names[0]) == var and _is_id(names[1], k, ids):
        return names[1]
    if k.t(names[1]) == var and _is_id(names[0], k, ids):
        return names[0]
    return None


def _conjuncts(node: Node, k: Kernel) -> list[Node]:
    n = unparen(node)
    if n.type == "binary_expression":
        op = n.child_by_field_name("operator")
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if op is not None and left is not None and right is not None and k.t(op) == "&&":
            return _conjuncts(left, k) + _conjuncts(right, k)
    return [node]


def _drop_operand(operand: Node, k: Kernel) -> tuple[int, int, str]:
    """The edit that removes ``operand`` (a direct operand, maybe parenthesized, of a binary ``+``/``-``/``&&``)
    with its operator: ``a + x`` -> ``a``; ``x + b`` -> ``b``; ``x - b`` -> ``-b``."""
    p = operand.parent
    while p is not None and p.type == "parenthesized_expression":
        operand, p = p, p.parent
    if p is None or p.type != "binary_expression":
        raise _No("a term of the sum is not an operand of `+`", operand)
    left, op, right = (p.child_by_field_name(x) for x in ("left", "operator", "right"))
    assert left is not None and op is not None and right is not None
    if right == operand:
        return left.end_byte, right.end_byte, ""
    return left.start_byte, right.start_byte, "-" if k.t(op) == "-" else ""


def _pure(n: Node, k: Kernel) -> bool:
    """Side-effect free and reading no memory (safe to run, and to stop running, past the row's end): no
    subscript, no ``*p`` or ``p->f``; a member of the thread coordinates (``threadIdx.x``) is a register."""
    if not side_effect_free(n):
        return False
    for m in walk(n, ("subscript_expression", "pointer_expression", "field_expression")):
        if m.type == "subscript_expression" or (m.type == "pointer_expression" and k.t(m).lstrip().startswith("*")):
            return False
        if m.type == "field_expression":
            obj, op = m.child_by_field_name("argument"), m.child_by_field_name("operator")
            if (op is not None and k.t(op) == "->") or obj is None or unparen(obj).type != "identifier":
                return False
    return True


def _identity_ternary(st: Node, k: Kernel) -> tuple[Node, Node, Node, Node] | None:
    """``X op= (c) ? a : z``: (assignment, conditional, a, z); None when the statement is not of that form."""
    e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
    if e is None or e.type != "assignment_expression":
        return None
    right = e.child_by_field_name("right")
    c = unparen(right) if right is not None else None
    if c is None or c.type != "conditional_expression":
        return None
    a, z = c.child_by_field_name("consequence"), c.child_by_field_name("alternative")
    if a is None or z is None:
        return None
    return e, c, a, z


def _rewrite(f: Node, h: _Header, k: Kernel, env: PassEnv) -> Changed:
    var = h.var
    body = f.child_by_field_name("body")
    assert body is not None
    bound = _squash(k.t(h.bound))
    ids = _thread_ids(k, f)
    written = written_names(body, k.data)
    if var in written:
        raise _No(f"`{var}` is written in the loop's body", f)
    if not side_effect_free(h.bound) or {k.t(n) for n in idents(h.bound, k.data)} & (written | {var}):
        raise _No(f"the bound `{k.t(h.bound)}` may change inside the loop", f)
    if not side_effect_free(h.step) or {k.t(n) for n in idents(h.step, k.data)} & (written | {var}):
        raise _No(f"the step `{k.t(h.step)}` may change inside the loop", f)
    if ids & written:
        raise _No(f"the thread's index `{sorted(ids & written)[0]}` is written in the loop", f)
    sts = statements(body)
    decls = [s for s in sts if s.type == "declaration"]
    rest = [s for s in sts if s.type != "declaration"]
    for d in decls:
        if not _pure(d, k):
            raise _No(f"the declaration `{k.t(d)}` before the guard has an effect or reads memory: it runs in "
                      "the iterations past the row's end too", d)
    edits: list[tuple[int, int, str]] = []
    removed: list[Node] = []  # the guards: the uses of `i` inside them go with them
    id_text = ""
    if not rest:
        raise _No("the loop's body has no statement besides declarations", f)
    if len(rest) == 1 and rest[0].type == "if_statement" and rest[0] == sts[-1]:
        st = rest[0]
        cond, cons = st.child_by_field_name("condition"), st.child_by_field_name("consequence")
        if cond is not None and cond.type == "condition_clause":
            cond = cond.child_by_field_name("value")
        if cond is None or cons is None:
            raise _No("the `if` in the loop has no condition or body", st)
        if st.child_by_field_name("alternative") is not None:
            raise _No("the guard `if` has an `else`: it runs in the iterations past the row's end", st)
        parts = _conjuncts(cond, k)
        at = [(p, g) for p in parts if (g := _guard(p, k, var, bound, ids)) is not None]
        if not at:
            raise _No(f"the `if` in the loop is not guarded by `{var} + id < {k.t(h.bound)}`", st)
        guard, gid = at[0]
        id_text = k.t(unparen(gid))
        removed.append(guard)
        if len(parts) == 1:
            edits.append((st.start_byte, cons.start_byte, ""))
            inner = statements(cons)
            mine = set().union(*(declared_names(s, k.data) for s in inner)) if inner else set()
            outer = set().union(*(declared_names(d, k.data) for d in decls)) if decls else set()
            if cons.type == "compound_statement" and not mine & outer:  # its statements join the loop's body
                edits.append((cons.start_byte, cons.start_byte + 1, ""))
                edits.append((cons.end_byte - 1, cons.end_byte, ""))
        else:
            edits.append(_drop_operand(guard, k))
    else:
        for st in rest:
            got = _identity_ternary(st, k)
            if got is None:
                raise _No(f"`{k.t(st)}` is neither guarded by `{var} + id < {k.t(h.bound)}` nor a pure "
                          "declaration: it would run in the iterations past the row's end", st)
            e, c, a, z = got
            test = c.child_by_field_name("condition")
            tid = _guard(test, k, var, bound, ids) if test is not None else None
            if test is None or tid is None:
                raise _No(f"the condition of `{k.t(c)}` is not `{var} + id < {k.t(h.bound)}`", st)
            op = e.child_by_field_name("operator")
            ident = _IDENTITY.get(k.t(op) if op is not None else "")
            m = _ZERO.match(k.t(z))
            if ident is None or m is None or m.group(1) != ident:
                raise _No(f"the guard's false branch `{k.t(z)}` is not the identity of "
                          f"`{k.t(op) if op is not None else '='}`: the threads past the row's end apply it", st)
            if not _pure(z, k) or not _pure(test, k):
                raise _No(f"the guard `{k.t(c)}` reads memory outside its true branch", st)
            target = e.child_by_field_name("left")
            if target is None or not side_effect_free(target):
                raise _No(f"the target of `{k.t(e)}` has an effect", st)
            id_text = id_text or k.t(unparen(tid))
            removed.append(test)
            edits.append((c.start_byte, a.start_byte, ""))
            edits.append((a.end_byte, c.end_byte, ""))
    # every other use of `i` is a term of a sum with the thread's index: that sum is the new counter
    tops: dict[int, Node] = {}
    for u in idents(body, k.data, var):
        if any(r.start_byte <= u.start_byte < r.end_byte for r in removed):
            continue
        top = _sum_top(u)
        tops[top.start_byte] = top
    for top in tops.values():
        terms = _terms(top, k)
        counters = [(sg, t) for sg, t in terms if unparen(t).type == "identifier" and k.t(unparen(t)) == var]
        if sum(1 for _, t in terms for _ in idents(t, k.data, var)) != len(counters):
            raise _No(f"`{var}` is used in `{k.t(top)}` other than as a term `{var} + id`", top)
        pool = [(sg, t) for sg, t in terms if _is_id(t, k, ids)]
        for sg, _ in counters:
            j = next((n for n, (ps, _) in enumerate(pool) if ps == sg), None)
            if j is None:
                raise _No(f"`{var}` is used in `{k.t(top)}` without the thread's index added: the loop's "
                          "counter alone is not the element", top)
            edits.append(_drop_operand(unparen(pool.pop(j)[1]), k))
    edits.append((h.start.start_byte, h.start.end_byte, id_text))
    return Changed(splice(k.data, edits),
                   f"`for ({var} = 0; ...; {var} += {k.t(h.step)})` over `{var} + {id_text}` as the block-strided "
                   f"loop from `{id_text}` (line {k.line(f)})")


def _block_width(step: Node, f: Node, k: Kernel, env: PassEnv) -> str | None:
    """Why ``step`` is not the launch's block x at every size of the spec (None when it is)."""
    text = _squash(k.t(unparen(step)))
    if text == "blockDim.x":
        return None
    local = _locals(k, f)
    seen: set[str] = set()
    while text in local and text not in seen:  # ``const int threads = blockDim.x;``
        seen.add(text)
        text = local[text]
        if text == "blockDim.x":
            return None
    if not env.blocks:
        return f"the launch's block is unknown: the step `{k.t(step)}` cannot be checked to be the block's width"
    for at, block in enumerate(env.blocks):
        names: dict[str, int] = {}
        for src in (env.names[at] if at < len(env.names) else {}, env.values[at] if at < len(env.values) else {}):
            names.update(src)
        for _ in range(4):  # constants and locals defined from each other
            for name, value in [*env.constants.items(), *local.items()]:
                if name in names:
                    continue
                try:
                    v = parse_expr(value).evaluate(dict(names))
                except ExprError:
                    continue
                if isinstance(v, int):
                    names[name] = v
        try:
            got = parse_expr(_squash(k.t(unparen(step)))).evaluate(dict(names))
        except ExprError:
            words = set(re.findall(r"[A-Za-z_]\w*", k.t(step)))
            free = sorted(words - set(names)) or ["?"]
            via = "".join(f" (`{n}` is `{local[n]}`)" for n in sorted(local) if n in words)
            unknown = sorted({w for n in free for w in [n, *re.findall(r"[A-Za-z_]\w*", local.get(n, ""))]}
                             - set(names) - set(local))
            return (f"the step `{k.t(step)}`{via} has no value here: `{', '.join(unknown or free)}` is not a "
                    "constant, tunable or scalar the spec gives (a macro of a header the build does not include, "
                    "or one defined only under a flag?), so it cannot be checked to be the block's width")
        if got != block[0]:
            return (f"the step `{k.t(step)}` is {got} and the block's width {block[0]} at a size of the spec: the "
                    "threads do not cover the row together")
    return None


def _locals(k: Kernel, f: Node) -> dict[str, str]:
    """The kernel's locals declared once, before ``f``, with a value and never written: name -> value text."""
    written = written_names(k.body, k.data)
    counts: dict[str, int] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        for nm in declared_names(n, k.data) if n.type == "declaration" else []:
            counts[nm] = counts.get(nm, 0) + 1
    out: dict[str, str] = {}
    for decl in walk(k.body, ("declaration",)):
        if decl.end_byte > f.start_byte:
            continue
        for d in decl.children_by_field_name("declarator"):
            nd = d.child_by_field_name("declarator") if d.type == "init_declarator" else None
            v = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if nd is not None and v is not None and nd.type == "identifier" and counts.get(k.t(nd)) == 1 \
                    and k.t(nd) not in written and side_effect_free(v):
                out[k.t(nd)] = _squash(k.t(unparen(v)))
    return out


def _has_offset_use(f: Node, h: _Header, k: Kernel) -> bool:
    """Whether the body adds the thread's x index to the counter somewhere (the pass's shape)."""
    body = f.child_by_field_name("body")
    if body is None:
        return False
    ids = _thread_ids(k, f)
    for u in idents(body, k.data, h.var):
        if any(s == 1 and _is_id(t, k, ids) for s, t in _terms(_sum_top(u), k)):
            return True
    return False


@register("offset_stepped_loop",
          "`for (T i = 0; i < E; i += S)` with S the block's width, every use of i in `i + id` (id the thread's x "
          "index), the body guarded by `i + id < E` (an `if` around it, or `op= (i + id < E) ? a : identity`) "
          "after pure declarations; i, E, S and id not written in the loop")
def offset_stepped_loop(k: Kernel, env: PassEnv) -> Result:
    skipped: Skipped | None = None
    for f in walk(k.body, ("for_statement",)):
        h = _header(f, k)
        if h is None or not _has_offset_use(f, h, k):
            continue
        if not h.declared:
            skipped = skipped or Skipped(f"`{h.var}` is declared before the loop (`hoisted_loop_variable` "
                                         "left it there: it is read outside the loop): after the loop it holds "
                                         "the block's offset, which the thread's counter would not",
                                         k.line(f))
            continue
        why = _block_width(h.step, f, k, env)
        if why is not None:
            skipped = skipped or Skipped(why, k.line(f))
            continue
        try:
            return _rewrite(f, h, k, env)
        except _No as e:
            skipped = skipped or Skipped(e.reason, k.line(e.node))
    return skipped
