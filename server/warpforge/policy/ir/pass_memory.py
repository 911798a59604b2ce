"""Memory passes: accumulators through global memory become registers, multi-term views one offset.

Why: ``y[i] = 0; for (j...) y[i] += A[i*n+j] * x[j];`` is how many people write a matrix-vector product;
the rules want a scalar accumulator (a loop-carried register) and decline "one array updated two ways".
And ``in + b*T*C + t*C`` parses as ``(in + b*T*C) + t*C``, so a view's base is not a name.
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.tree import element_use, node_text, plain_assignment, unparen, walk, written_names
from .passes import Changed, Kernel, PassEnv, Result, Skipped, declared_names, idents, register, splice

_SCALARS = frozenset({"float", "double", "int", "unsigned", "unsigned int", "long", "long long",
                      "unsigned long long", "__half", "half", "__nv_bfloat16", "size_t", "int64_t", "uint32_t"})


def _param_elements(k: Kernel, env: PassEnv) -> dict[str, str]:
    """Pointer parameter -> its element type (typedefs and template arguments resolved), one level only."""
    out: dict[str, str] = {}
    decl = k.fn.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    for p in plist.named_children if plist is not None else []:
        t, d = p.child_by_field_name("type"), p.child_by_field_name("declarator")
        if t is None or d is None or d.type != "pointer_declarator":
            continue
        inner = d.child_by_field_name("declarator")
        if inner is None or inner.type != "identifier":
            continue
        tt = k.t(t).strip()
        tt = env.template_args.get(tt, env.typedefs.get(tt, tt))
        out[k.t(inner)] = tt
    return out


@register("register_accumulator",
          "`y[e]` the only access of y inside a loop (e's names not written there, no call passes y), "
          "y a pointer parameter written only at `y[e]` in the whole kernel, e containing a thread coordinate")
def register_accumulator(k: Kernel, env: PassEnv) -> Result:
    """``y[e] = v; for (...) { ... y[e] += t; }`` -> ``T y_acc = v; for (...) { ... y_acc += t; } y[e] = y_acc;``.

    Exact because inside the loop every access of ``y`` is that one element, whose address does not
    change (its index's names are not written in the loop), and nothing else in the loop can reach it:
    ``y`` is not passed on, and buffers are distinct allocations (the spec's contract; in-place kernels
    pass the same parameter, which is the same name here). Other threads: ``y`` is written at ``e`` only,
    and ``e`` depends on the thread, so no other thread's loop touches this element between the load
    before and the store after."""
    elems = _param_elements(k, env)
    skipped: Skipped | None = None
    taken = {node_text(n, k.data) for n in walk(k.fn, ("identifier",))}
    for loop in walk(k.body, ("for_statement", "while_statement")):
        lbody = loop.child_by_field_name("body")
        if lbody is None or loop.parent is None or loop.parent.type != "compound_statement":
            continue  # the register's declaration must go in a block of its own, before the loop
        for y, et in elems.items():
            uses = idents(loop, k.data, y)
            if not uses:
                continue
            subs = [u.parent for u in uses if u.parent is not None and u.parent.type == "subscript_expression"
                    and u.parent.child_by_field_name("argument") == u]
            if len(subs) != len(uses):
                skipped = skipped or Skipped(f"`{y}` is used inside the loop other than as `{y}[...]`", k.line(loop))
                continue
            idx_texts = {_index_text(s, k) for s in subs}
            if len(idx_texts) != 1 or not any(element_use(s)[1] for s in subs):
                continue
            e = subs[0].child_by_field_name("indices") or subs[0].child_by_field_name("index")
            assert e is not None
            names = {node_text(n, k.data) for n in walk(e, ("identifier",))}
            if names & written_names(loop, k.data) or names & declared_names(loop, k.data):
                skipped = skipped or Skipped(f"the index of `{y}` changes inside the loop", k.line(loop))
                continue
            if not any(c in node_text(e, k.data) for c in ("threadIdx", "blockIdx")) and not _thread_local(e, k):
                skipped = skipped or Skipped(f"`{y}[{_index_text(subs[0], k)}]` does not depend on the thread",
                                             k.line(loop))
                continue
            # y written anywhere else at another index: another thread might own that element
            all_writes = [n.parent for n in idents(k.body, k.data, y) if n.parent is not None
                          and n.parent.type == "subscript_expression" and element_use(n.parent)[1]]
            if any(_index_text(w, k) not in idx_texts for w in all_writes):
                skipped = skipped or Skipped(f"`{y}` is also written at another index", k.line(loop))
                continue
            if next(walk(lbody, ("return_statement", "goto_statement")), None) is not None:
                skipped = skipped or Skipped("a `return` inside the loop would skip the store after it", k.line(loop))
                continue
            if et not in _SCALARS:
                skipped = skipped or Skipped(f"`{y}`'s element type `{et}` is not a known scalar", k.line(loop))
                continue
            acc = f"{y}_acc"
            while acc in taken:
                acc += "_"
            elem = f"{y}[{next(iter(idx_texts))}]"
            edits = [(s.start_byte, s.end_byte, acc) for s in subs]
            init = _initial_store(loop, y, idx_texts, k)
            if init is not None:  # ``y[e] = v;`` right before: the register starts at v, the store is the last one
                edits.append((init[0].start_byte, init[0].end_byte, f"{et} {acc} = {init[1]};"))
            else:
                edits.append((loop.start_byte, loop.start_byte, f"{et} {acc} = {elem};\n"))
            edits.append((loop.end_byte, loop.end_byte, f"\n{_indent(loop, k)}{elem} = {acc};"))
            return Changed(splice(k.data, edits), f"`{elem}` accumulated in a register (line {k.line(loop)})")
    return skipped


def _indent(n: Node, k: Kernel) -> str:
    start = k.data.rfind(b"\n", 0, n.start_byte) + 1
    line = k.data[start:n.start_byte].decode("utf-8", "replace")
    return line if not line.strip() else ""


def _initial_store(loop: Node, y: str, idx: set[str], k: Kernel) -> tuple[Node, str] | None:
    """The statement right before ``loop`` when it is ``y[e] = v;`` (same index, ``v`` not reading ``y``)."""
    prev = loop.prev_named_sibling
    while prev is not None and prev.type == "comment":
        prev = prev.prev_named_sibling
    got = plain_assignment(prev, k.data) if prev is not None else None
    if prev is None or got is None:
        return None
    left, right = unparen(got[0]), got[1]
    if left.type != "subscript_expression" or _index_text(left, k) not in idx:
        return None
    arg = left.child_by_field_name("argument")
    if arg is None or k.t(arg) != y or idents(right, k.data, y):
        return None
    return prev, k.t(right)


def _index_text(sub: Node, k: Kernel) -> str:
    idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
    return "".join(k.t(idx).strip("[]").split()) if idx is not None else ""


def _thread_local(e: Node, k: Kernel) -> bool:
    """Whether an index names a local whose value (followed through its declaration) reads a thread coordinate."""
    seen: set[str] = set()
    todo = [node_text(n, k.data) for n in walk(e, ("identifier",))]
    decls = {}
    for d in walk(k.body, ("init_declarator",)):
        nm = d.child_by_field_name("declarator")
        v = d.child_by_field_name("value")
        if nm is not None and v is not None and nm.type == "identifier":
            decls[k.t(nm)] = v
    while todo:
        n = todo.pop()
        if n in seen or n not in decls:
            continue
        seen.add(n)
        v = decls[n]
        if any(c in k.t(v) for c in ("threadIdx", "blockIdx")):
            return True
        todo += [node_text(x, k.data) for x in walk(v, ("identifier",))]
    return False


def _sum_terms(n: Node, k: Kernel) -> list[Node]:
    n = unparen(n)
    if n.type == "binary_expression":
        op = n.child_by_field_name("operator")
        a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
        if op is not None and a is not None and b is not None and k.t(op) == "+":
            return _sum_terms(a, k) + _sum_terms(b, k)
    return [n]


@register("view_offset", "`P + a + b + ...` with P a pointer parameter and the rest integer terms")
def view_offset(k: Kernel, env: PassEnv) -> Result:
    """``in + b*T*C + t*C`` -> ``in + (b*T*C + t*C)``: the view's base is the parameter, its offset one term.

    Exact: pointer arithmetic adds each term in turn, and the terms' sum is the same offset (an index
    computation that overflows its integer type is undefined behaviour in both)."""
    params = set(_param_elements(k, env))
    for n in walk(k.body, ("binary_expression",)):
        if n.parent is not None and n.parent.type == "binary_expression" and \
                (op := n.parent.child_by_field_name("operator")) is not None and k.t(op) == "+":
            continue  # the outermost sum only
        terms = _sum_terms(n, k)
        if len(terms) < 3:
            continue
        base = [t for t in terms if t.type == "identifier" and k.t(t) in params]
        if len(base) != 1 or terms[0] is not base[0]:
            continue
        rest = " + ".join(k.t(t) for t in terms[1:])
        return Changed(splice(k.data, [(n.start_byte, n.end_byte, f"{k.t(base[0])} + ({rest})")]),
                       f"view `{k.t(n)}` as one offset")
    return None
