"""Loop passes: every loop the rules read becomes ``for (T v = start; cond; step)`` with affine uses.

Why: the rules read a loop from its ``for`` header (``_structural.for_parts``): where its variable starts,
stops and steps. Benchmark suites write ``int k; for (k = 0; k < n; k++)``, grid-stride loops as ``while``,
and walk an index or pointer by bumping it (``c += plane``) instead of computing it from the counter.
Each pass below rewrites one of these into the header form, exactly, under its stated precondition.
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.tree import unparen, walk, written_names
from .passes import (
    Changed,
    Kernel,
    PassEnv,
    Result,
    Skipped,
    declared_names,
    idents,
    loop_counter,
    register,
    splice,
    statements,
)

_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _continues(node: Node) -> bool:
    """A ``continue`` that belongs to ``node``'s loop (not to a loop nested inside it)."""
    return next(walk(node, ("continue_statement",), cut=lambda n: n is not node and n.type in _LOOPS), None) is not None


def _enclosing_for_with_init(n: Node, k: Kernel, var: str) -> Node | None:
    cur = n.parent
    while cur is not None:
        if cur.type == "for_statement":
            init = cur.child_by_field_name("initializer")
            if init is not None and init.type == "assignment_expression":
                left = init.child_by_field_name("left")
                op = init.child_by_field_name("operator")
                if left is not None and op is not None and k.t(op) == "=" and k.t(unparen(left)) == var:
                    return cur
        cur = cur.parent
    return None


@register("hoisted_loop_variable",
          "`T k;` declared without a value (or with one no use reads: a literal or a name), every use of k "
          "inside a `for (k = ...; ...)` that assigns it first")
def hoisted_loop_variable(k: Kernel, env: PassEnv) -> Result:
    """``int k; for (k = 0; k < n; k++)`` -> ``for (int k = 0; k < n; k++)``.

    Exact when every use of ``k`` lies inside a ``for`` whose initializer assigns ``k``: no value of ``k``
    flows into, out of or between those loops, so each may own its variable. A value given at the declaration
    (``int gid = ..., j = 0;``) is then never read; it goes with the declaration when it is a literal or a
    name (evaluating it has no effect)."""
    for decl in walk(k.body, ("declaration",)):
        scope = decl.parent
        if scope is None or scope.type != "compound_statement":
            continue
        decls = decl.children_by_field_name("declarator")
        tnode = decl.child_by_field_name("type")
        if tnode is None or any(c.type in ("storage_class_specifier",) for c in decl.children):
            continue
        prefix = k.data[decl.start_byte:decls[0].start_byte].decode("utf-8").strip() if decls else ""
        for d in decls:
            if d.type == "init_declarator":
                value = d.child_by_field_name("value")
                if value is None or unparen(value).type not in ("number_literal", "identifier"):
                    continue
                d = d.child_by_field_name("declarator") or d
            if d.type != "identifier":
                continue
            var = k.t(d)
            uses = [n for n in idents(scope, k.data, var) if n.start_byte > d.end_byte]
            if not uses:
                continue
            loops: dict[int, Node] = {}
            ok = True
            for u in uses:
                f = _enclosing_for_with_init(u, k, var)
                if f is None:
                    ok = False
                    break
                loops[f.start_byte] = f
            if not ok:
                continue
            fors = list(loops.values())
            if any(a is not b and a.start_byte <= b.start_byte < a.end_byte for a in fors for b in fors):
                continue  # nested loops sharing the variable: the inner one's value flows out
            if sum(1 for n in walk(scope, ("declaration",)) if var in declared_names(n, k.data)) > 1:
                continue  # declared again in an inner scope: uses may mean either
            rest = [k.t(x) for x in decls if x != d and x.child_by_field_name("declarator") != d]
            edits = [(decl.start_byte, decl.end_byte,
                      f"{prefix} {', '.join(rest)};" if rest else "")]
            for f in fors:
                init = f.child_by_field_name("initializer")
                assert init is not None
                edits.append((init.start_byte, init.start_byte, f"{prefix} "))
            return Changed(splice(k.data, edits), f"`{var}` declared in its loops (line {k.line(decl)})")
    return None


@register("counter_before_loop",
          "`T v = e; for (; c; s)` with the declaration just before the loop, v not used after the loop")
def counter_before_loop(k: Kernel, env: PassEnv) -> Result:
    """``int i = e; for (; i < n; i += s)`` -> ``for (int i = e; i < n; i += s)`` (darknet's grid-stride loops).

    Exact when the declaration (of ``i`` alone) is the statement just before the ``for``, whose initializer is
    empty, and nothing after the loop in that block names ``i``: the value starts where it started, and only the
    variable's scope ends earlier, where nothing reads it."""
    skipped: Skipped | None = None
    for f in walk(k.body, ("for_statement",)):
        scope = f.parent
        if scope is None or scope.type != "compound_statement" or f.child_by_field_name("initializer") is not None:
            continue
        sts = statements(scope)
        at = sts.index(f) if f in sts else -1
        prev = sts[at - 1] if at >= 1 else None
        ds = prev.children_by_field_name("declarator") if prev is not None and prev.type == "declaration" else []
        if prev is None or len(ds) != 1 or ds[0].type != "init_declarator" or any(
                c.type == "storage_class_specifier" for c in prev.children):
            continue
        nm = ds[0].child_by_field_name("declarator")
        if nm is None or nm.type != "identifier":
            continue
        var = k.t(nm)
        header = [x for x in (f.child_by_field_name("condition"), f.child_by_field_name("update")) if x is not None]
        if not any(idents(x, k.data, var) for x in header):
            continue
        if any(idents(s, k.data, var) for s in sts[at + 1:]):
            skipped = skipped or Skipped(f"`{var}` is read after the loop", k.line(f))
            continue
        semi = next(c for c in f.children if c.type == ";")
        decl = k.t(prev).rstrip(";").strip()
        return Changed(splice(k.data, [(prev.start_byte, prev.end_byte, ""), (semi.start_byte, semi.start_byte,
                                                                           decl)]),
                       f"`{var}` declared in the header of its loop (line {k.line(f)})")
    return skipped


@register("while_to_for", "`T i = v; while (c) { ...; i += s; }`: i written only by that last statement, "
                          "no `continue` of the loop, i not used after it")
def while_to_for(k: Kernel, env: PassEnv) -> Result:
    """A ``while`` loop stepping its variable last becomes the ``for`` it spells (grid-stride loops).

    Exact because ``for (init; c; step) body`` is ``init; while (c) { body; step; }`` when the body has no
    ``continue`` (which would skip the step in one form and not the other)."""
    skipped: Skipped | None = None
    for w in walk(k.body, ("while_statement",)):
        scope = w.parent
        body = w.child_by_field_name("body")
        cond = w.child_by_field_name("condition")
        if scope is None or scope.type != "compound_statement" or body is None or cond is None:
            continue
        sts = statements(scope)
        at = next((i for i, s in enumerate(sts) if s == w), -1)
        inner = statements(body)
        if at < 1 or not inner or inner[-1].type != "expression_statement":
            continue
        step = inner[-1].named_children[0] if inner[-1].named_child_count else None
        if step is None or step.type not in ("assignment_expression", "update_expression"):
            continue
        target = step.child_by_field_name("left" if step.type == "assignment_expression" else "argument")
        if target is None or unparen(target).type != "identifier":
            continue
        var = k.t(unparen(target))
        prev = sts[at - 1]
        pd = prev.children_by_field_name("declarator") if prev.type == "declaration" else []
        if len(pd) != 1 or pd[0].type != "init_declarator":
            continue
        name = pd[0].child_by_field_name("declarator")
        if name is None or k.t(name) != var:
            continue
        if _continues(body):
            skipped = skipped or Skipped(f"`continue` in the `while` over `{var}`", k.line(w))
            continue
        others = [s for s in inner[:-1]]
        if any(var in written_names(s, k.data) for s in others):
            skipped = skipped or Skipped(f"`{var}` is also written inside the loop", k.line(w))
            continue
        if any(idents(s, k.data, var) for s in sts[at + 1:]):
            skipped = skipped or Skipped(f"`{var}` is read after the loop", k.line(w))
            continue
        c = k.t(cond)
        c = c[1:-1] if c.startswith("(") and c.endswith(")") else c
        new_body = "\n".join(k.t(s) for s in others)
        text = f"for ({k.t(prev).rstrip(';').strip()}; {c}; {k.t(step)}) {{\n{new_body}\n}}"
        return Changed(splice(k.data, [(prev.start_byte, w.end_byte, text)]), f"`while` over `{var}` as a `for`")
    return skipped


_INDEX_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "unsigned long",
                          "unsigned long long", "size_t", "ptrdiff_t", "int64_t", "uint64_t", "int32_t", "uint32_t"})


def _index_like(var: str, k: Kernel) -> bool:
    """Whether ``var`` is declared (in the kernel or its parameters) as an integer or a pointer."""
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        t = n.child_by_field_name("type")
        for d in n.children_by_field_name("declarator"):
            d0 = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if d0 is None:
                continue
            if d0.type == "pointer_declarator":
                inner = d0.child_by_field_name("declarator")
                if inner is not None and k.t(inner) == var:
                    return True
            elif d0.type == "identifier" and k.t(d0) == var and t is not None:
                return " ".join(k.t(t).replace("const", "").split()) in _INDEX_TYPES
    return False


def _counted(f: Node, k: Kernel) -> str | None:
    """The counter of ``for (T j = 0; j < E; j++)`` (``++j``, ``j += 1``), not written in the body."""
    cond, upd, body = (f.child_by_field_name(x) for x in ("condition", "update", "body"))
    head = loop_counter(f)
    if head is None or cond is None or upd is None or body is None:
        return None
    name, value = head
    j = k.t(name)
    if k.t(value).strip().rstrip("uUlL") != "0":
        return None
    if k.t(upd).replace(" ", "") not in (f"{j}++", f"++{j}", f"{j}+=1"):
        return None
    if j in written_names(body, k.data):
        return None
    return j


@register("induction_variable", "`for (T j = 0; ...; j++) { ...; c += s; }`: c bumped only there, last, "
                                "unconditionally, s loop-invariant, c not used after the loop")
def induction_variable(k: Kernel, env: PassEnv) -> Result:
    """An index or pointer bumped once per iteration becomes an affine function of the counter.

    ``for (j...) { x[c] ...; c += plane; }`` -> ``for (j...) { x[c + j * (plane)] ...; }``: at the start of
    iteration ``j`` the bumped value is ``c + j * plane`` (the loop starts at 0 and steps by 1, no
    ``continue`` skips the bump); ``c`` keeps its value before the loop, which is why it must not be used
    after it."""
    skipped: Skipped | None = None
    for f in walk(k.body, ("for_statement",)):
        j = _counted(f, k)
        body = f.child_by_field_name("body")
        scope = f.parent
        if j is None or body is None or body.type != "compound_statement" or scope is None:
            continue
        inner = statements(body)
        bumps: list[tuple[Node, str, str]] = []
        for s in reversed(inner):
            e = s.named_children[0] if s.type == "expression_statement" and s.named_child_count == 1 else None
            if e is None or e.type != "assignment_expression":
                break
            left, op, right = (e.child_by_field_name(x) for x in ("left", "operator", "right"))
            if left is None or op is None or right is None or unparen(left).type != "identifier" \
                    or k.t(op) not in ("+=", "-="):
                break
            sign = "-" if k.t(op) == "-=" else ""
            bumps.append((s, k.t(unparen(left)), f"{sign}({k.t(right)})"))
        if not bumps:
            continue
        s, var, step = bumps[0]  # the last statement
        rest = [x for x in inner if x is not s]
        step_node = s.named_children[0].child_by_field_name("right")
        assert step_node is not None
        if not _index_like(var, k) or next(walk(step_node, ("subscript_expression", "call_expression",
                                                              "pointer_expression")), None) is not None:
            continue  # an accumulator (``s += x[j]``), not an index: the summary reads it as one
        step_names = {k.t(n) for n in idents(step_node, k.data)}
        written = set().union(*(written_names(x, k.data) for x in rest)) if rest else set()
        if var in written or var in declared_names(body, k.data):
            skipped = skipped or Skipped(f"`{var}` is written elsewhere in the loop", k.line(s))
            continue
        if step_names & (written | {j, var}):
            skipped = skipped or Skipped(f"the step of `{var}` changes inside the loop", k.line(s))
            continue
        if _continues(body):
            skipped = skipped or Skipped(f"`continue` skips the bump of `{var}`", k.line(s))
            continue
        after = [n for n in idents(k.body, k.data, var) if n.start_byte >= f.end_byte]
        if after:
            skipped = skipped or Skipped(f"`{var}` is used after the loop", k.line(after[0]))
            continue
        off = f"({j}) * {step}"
        edits: list[tuple[int, int, str]] = [(s.start_byte, s.end_byte, "")]
        for u in idents(body, k.data, var):
            if s.start_byte <= u.start_byte < s.end_byte:
                continue
            p = u.parent
            if p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == u:
                idx = p.child_by_field_name("index") or p.child_by_field_name("indices")
                if idx is None:
                    break
                inner_idx = k.t(idx).strip("[]")
                edits.append((p.start_byte, p.end_byte, f"{var}[{off} + ({inner_idx})]"))
            elif p is not None and p.type == "pointer_expression" and k.t(p).lstrip().startswith("*"):
                edits.append((p.start_byte, p.end_byte, f"{var}[{off}]"))
            else:
                edits.append((u.start_byte, u.end_byte, f"({var} + {off})"))
        else:
            return Changed(splice(k.data, edits), f"`{var} += ...` in the loop over `{j}` as `{var} + {j} * step`")
    return skipped


@register("copy_propagation", "`T a = b;` with b a name of the same declared type, neither written after it")
def copy_propagation(k: Kernel, env: PassEnv) -> Result:
    """``int at = c;`` -> uses of ``at`` read ``c``: a second name for one value hides that an index is the
    thread's (``A[at + j * cols]`` is ``A[c + j * cols]``). Exact because neither name changes afterwards: a
    write of a member (``w.x += 1``) changes the struct, so it counts too (after ``float3 w = v;`` it must not
    become a write of ``v``)."""
    written = written_names(k.body, k.data) | _members_written(k)
    types: dict[str, str] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        t = n.child_by_field_name("type")
        for d in n.children_by_field_name("declarator"):
            d0 = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if t is not None and d0 is not None and d0.type == "identifier":
                types[k.t(d0)] = " ".join(k.t(t).replace("const", "").split())
    counts: dict[str, int] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        for name in declared_names(n, k.data) if n.type == "declaration" else []:
            counts[name] = counts.get(name, 0) + 1
    for st in walk(k.body, ("declaration",)):
        ds = st.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator" or st.parent is None:
            continue
        a, b = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if a is None or b is None or a.type != "identifier" or unparen(b).type != "identifier":
            continue
        an, bn = k.t(a), k.t(unparen(b))
        if an in written or bn in written or counts.get(an, 0) != 1 or counts.get(bn, 0) > 1:
            continue
        if types.get(an) is None or types.get(an) != types.get(bn):
            continue
        uses = [u for u in idents(st.parent, k.data, an) if u.start_byte >= st.end_byte]
        edits = [(st.start_byte, st.end_byte, "")] + [(u.start_byte, u.end_byte, bn) for u in uses]
        return Changed(splice(k.data, edits), f"`{an}` is `{bn}`")
    return None


def _members_written(k: Kernel) -> set[str]:
    """The locals one of whose members is assigned or incremented (``v.x = e``, ``(v).a.b++``)."""
    out: set[str] = set()
    for n in walk(k.body, ("assignment_expression", "update_expression")):
        t = n.child_by_field_name("left" if n.type == "assignment_expression" else "argument")
        t = unparen(t) if t is not None else None
        if t is None or t.type != "field_expression":
            continue
        while t.type == "field_expression":
            obj = t.child_by_field_name("argument")
            if obj is None:
                break
            t = unparen(obj)
        if t.type == "identifier":
            out.add(k.t(t))
    return out
