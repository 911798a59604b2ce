"""The canonical form of a kernel definition, so that analyses see one shape for equivalent code.

Why: a transformation reasons about what threads do, but code that does the same thing is written many
ways. A guard is an early ``return`` in one file and an ``if (i < n) { ... }`` around the whole body in the
next; a row pointer is ``const float* x = in + row * C`` here and ``in += row * C`` there; an index is
spelled through a function-like macro, an element type through a typedef, a thread index through a local
copy ``int tid = threadIdx.x``. Teaching every rule every spelling is how rules become recognizers of
their authors' files. Instead, the offline policy hands a rule that finds nothing in a candidate the
candidate's canonical form, and the rule's rewrite is applied to that text.

Every pass is exact: the canonical text computes the same thing as the input, by construction (the
passes are rewrites the C semantics guarantee, each with the conditions under which it holds). A pass
that cannot prove its condition leaves the code as it is. The canonical form is only ever a starting
point for a rule: it never becomes a candidate by itself, so it costs no evaluation.

The passes, applied to the kernel's body until nothing changes:

* **function-like macros expanded** (``IDX(r, c)`` -> its definition with the arguments substituted, as
  the preprocessor would), for macros whose replacement is an expression (no ``#``, ``;`` or braces);
* **typedef'd scalar types resolved** (``real_t acc`` -> ``float acc``), for file-level typedefs and
  ``using`` aliases of builtin scalar types;
* **copies of thread coordinates inlined** (``int tid = threadIdx.x;`` then ``tid`` ->
  ``((int)threadIdx.x)``), for top-level locals initialized with one coordinate and never written;
* **a guarded body becomes an early exit** (``if (i < n) { BODY }`` as the last statement ->
  ``if (i >= n) return; BODY``), when the body's declarations cannot clash with the enclosing scope;
* **pointer bumping becomes base + offset** (``x += row * C;`` -> ``const float* x_at = x + (row * C);``
  and later uses of ``x`` read ``x_at``), for a pointer parameter bumped once, at the top level;
* **pointer walking becomes indexing** (``for (j = 0; j < n; j++) *dst++ = *src++;`` ->
  ``dst[j] = src[j]``), for a counted loop whose body walks each pointer exactly once per iteration,
  unconditionally, and whose pointers are not used after the loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from tree_sitter import Node

from . import conditionals
from .parser import file_tree, parse_tree
from .rewrite import splice
from .tree import member, node_text, unparen, walk, written_names

#: builtin scalar types a typedef may stand for (others are left alone: structs, vectors, pointers)
_SCALARS = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "long", "unsigned long", "long long",
    "unsigned long long", "short", "unsigned short", "char", "signed char", "unsigned char", "bool",
    "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "__half", "half", "__nv_bfloat16", "nv_bfloat16",
})
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_MAX_ROUNDS = 12


@dataclass(frozen=True)
class Macro:
    params: tuple[str, ...]
    body: str


@dataclass(frozen=True)
class FileFacts:
    """What the passes need from the whole file: typedefs of scalar types and expression macros."""

    typedefs: dict[str, str]
    macros: dict[str, Macro]
    #: every typedef and alias of the file, resolved through chains (``cData`` -> ``float2``): what a struct is
    aliases: dict[str, str] = field(default_factory=dict)


@lru_cache(maxsize=64)
def file_facts(text: str) -> FileFacts:
    """Typedefs and function-like macros of a file (cached: one file, many candidates).

    A typedef in an ``#if`` branch that does not hold under the file's own ``#define``s is not read: llm.c picks
    ``floatX`` as ``__nv_bfloat16`` or ``float`` by ``ENABLE_BF16``, and the last one written is not the one the
    compiler sees (``conditionals``; a condition it cannot evaluate keeps every branch, as before)."""
    data = text.encode("utf-8")
    tree = file_tree(data)
    typedefs: dict[str, str] = {}
    macros: dict[str, Macro] = {}
    marks = conditionals.marks(data, {})
    for n in walk(tree.root_node, ("type_definition", "alias_declaration", "preproc_function_def"),
                  cut=lambda n: n.type == "function_definition"):
        if n.type != "preproc_function_def" and not conditionals.live(n.start_byte, marks):
            continue
        if n.type == "type_definition":
            t = n.child_by_field_name("type")
            decls = n.children_by_field_name("declarator")
            if t is None or len(decls) != 1 or decls[0].type != "type_identifier":
                continue
            typedefs[node_text(decls[0], data)] = " ".join(node_text(t, data).split())
        elif n.type == "alias_declaration":
            name = n.child_by_field_name("name")
            t = n.child_by_field_name("type")
            if name is not None and t is not None:
                typedefs[node_text(name, data)] = " ".join(node_text(t, data).split())
        else:
            name = n.child_by_field_name("name")
            params = n.child_by_field_name("parameters")
            value = n.child_by_field_name("value")
            if name is None or params is None or value is None:
                continue
            ps = tuple(node_text(p, data) for p in params.named_children if p.type == "identifier")
            if len(ps) != len([p for p in params.named_children if p.type != "comment"]):
                continue  # variadic
            body = node_text(value, data).replace("\\\n", " ").strip()
            if any(c in body for c in "#;{}") or not body:
                continue
            macros[node_text(name, data)] = Macro(ps, body)
    for _ in range(4):  # a typedef of a typedef
        for k, v in list(typedefs.items()):
            if v in typedefs:
                typedefs[k] = typedefs[v]
    scalars = {k: b for k, v in typedefs.items() if (b := _scalar(v)) is not None}
    return FileFacts(scalars, macros, typedefs)


def _scalar(text: str) -> str | None:
    t = " ".join(text.split())
    if t.startswith("const "):
        return None
    return t if t in _SCALARS else None


def normalize_definition(definition: str, kernel: str, facts: FileFacts) -> str:
    """The canonical form of ``definition`` (the text defining ``kernel``; see the module docstring)."""
    text = definition
    for _ in range(_MAX_ROUNDS):
        for step in (_expand_macros, _resolve_typedefs, _inline_coordinates, _guard_to_exit, _pointer_bumps,
                     _pointer_walks):
            got = _body(text, kernel)
            if got is None:
                return text
            new = step(text, got[0], got[1], facts)
            if new is not None and new != text:
                text = new
                break
        else:
            return text
    return text


# ------------------------------------------------------------------------------------------ plumbing

def _body(text: str, kernel: str) -> tuple[Node, bytes] | None:
    data = text.encode("utf-8")
    tree = parse_tree(data)
    found: Node | None = None
    for n in walk(tree.root_node, ("function_definition",)):
        d = n.child_by_field_name("declarator")
        name = d.child_by_field_name("declarator") if d is not None else None
        if name is not None and node_text(name, data).split("::")[-1] == kernel:
            found = n
    if found is None:
        return None
    body = found.child_by_field_name("body")
    if body is None or body.has_error:
        return None
    return body, data


def _stmts(node: Node) -> list[Node]:
    return [c for c in node.named_children if c.type != "comment"]


def _declared(nodes: list[Node], data: bytes) -> set[str]:
    out: set[str] = set()
    for st in nodes:
        for n in walk(st, ("declaration",)):
            for d in n.children_by_field_name("declarator"):
                cur: Node | None = d
                while cur is not None and cur.type != "identifier":
                    cur = cur.child_by_field_name("declarator")
                if cur is not None:
                    out.add(node_text(cur, data))
    return out


def _single_decl(st: Node, data: bytes) -> tuple[str, str, Node, bool] | None:
    """(type, name, value, is_const) of ``[const] T name = value;`` (one plain declarator)."""
    if st.type != "declaration":
        return None
    ds = st.children_by_field_name("declarator")
    t = st.child_by_field_name("type")
    if len(ds) != 1 or t is None or ds[0].type != "init_declarator":
        return None
    name = ds[0].child_by_field_name("declarator")
    value = ds[0].child_by_field_name("value")
    if name is None or value is None or name.type != "identifier":
        return None
    quals = [node_text(c, data) for c in st.children if c.type in ("type_qualifier", "storage_class_specifier")]
    if any(q not in ("const",) for q in quals):
        return None
    return node_text(t, data), node_text(name, data), value, "const" in quals


# ------------------------------------------------------------------------------------------ passes

def _expand_macros(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    if not facts.macros:
        return None
    edits: list[tuple[int, int, str]] = []
    for n in walk(body, ("call_expression",)):
        fn = n.child_by_field_name("function")
        args = n.child_by_field_name("arguments")
        if fn is None or args is None or fn.type != "identifier":
            continue
        m = facts.macros.get(node_text(fn, data))
        if m is None:
            continue
        xs = [node_text(a, data) for a in args.named_children if a.type != "comment"]
        if len(xs) != len(m.params):
            continue
        expanded = _substitute(m.body, dict(zip(m.params, xs, strict=True)))
        # no added parentheses: the preprocessor adds none (``#define SQ(x) x*x`` in ``1/SQ(2)`` is 1/2*2)
        edits.append((n.start_byte, n.end_byte, expanded))
        break  # one at a time: nested calls are found again in the next round
    return splice(data, edits) if edits else None


def _substitute(body: str, args: dict[str, str]) -> str:
    """A macro's replacement with its parameters replaced by the arguments' text (as the preprocessor does)."""
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda mm: args.get(mm.group(0), mm.group(0)), body)


def _resolve_typedefs(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    if not facts.typedefs:
        return None
    edits = [(n.start_byte, n.end_byte, facts.typedefs[node_text(n, data)])
             for n in walk(body, ("type_identifier",)) if node_text(n, data) in facts.typedefs]
    return splice(data, edits) if edits else None


def _coordinate(value: Node, data: bytes) -> str | None:
    """``threadIdx.x`` and friends (through parentheses and casts): the text, else None."""
    m = member(value, data)
    if m is None or m[1] not in _COORDS or m[2] not in ("x", "y", "z"):
        return None
    return node_text(m[0], data)


def _inline_coordinates(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    """Inline copies of coordinates that a global index is built from (``int i = bid * bs + tid``).

    Only those: a copy used on its own (``int row = blockIdx.x``, a block per row) names something the
    reader and the rules both want to keep."""
    sts = _stmts(body)
    written = written_names(body, data)
    copies: dict[str, str] = {}
    for st in sts:
        d = _single_decl(st, data)
        if d is not None and "*" not in d[0] and d[1] not in written:
            coord = _coordinate(d[2], data)
            if coord is not None:
                copies[d[1]] = coord.split(".")[0]
    composite: set[str] = set()
    for st in sts:
        d = _single_decl(st, data)
        if d is None or d[1] in copies:
            continue
        used = {node_text(n, data) for n in walk(d[2], ("identifier",))}
        objs = {copies[u] for u in used if u in copies} | (used & _COORDS)
        if {"threadIdx", "blockIdx"} <= objs:
            composite |= used & set(copies)
    for st in sts:
        d = _single_decl(st, data)
        if d is None or d[1] not in composite:
            continue
        typ, name, value, _ = d
        coord = _coordinate(value, data)
        if coord is None:
            continue
        uses = [n for n in walk(body, ("identifier",)) if node_text(n, data) == name and n.start_byte > st.end_byte]
        if any(n.parent is not None and n.parent.type in ("init_declarator", "declaration") and
               n.parent.child_by_field_name("declarator") == n for n in uses):
            continue  # redeclared in an inner scope
        edits = [(st.start_byte, st.end_byte, f"/* {name} = {coord} */")]
        edits += [(n.start_byte, n.end_byte, f"(({typ}){coord})") for n in uses]
        return splice(data, edits)
    return None


def _negate(cond: Node, data: bytes) -> str:
    c = unparen(cond)
    if c.type == "binary_expression":
        op = c.child_by_field_name("operator")
        a, b = c.child_by_field_name("left"), c.child_by_field_name("right")
        if op is not None and a is not None and b is not None:
            o = node_text(op, data)
            if o in _NEGATE:
                return f"{node_text(a, data)} {_NEGATE[o]} {node_text(b, data)}"
            if o == "&&":
                return f"{_negate_wrapped(a, data)} || {_negate_wrapped(b, data)}"
    return f"!({node_text(c, data)})"


def _negate_wrapped(n: Node, data: bytes) -> str:
    s = _negate(n, data)
    return f"({s})" if "||" in s else s


def _guard_to_exit(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    sts = _stmts(body)
    if not sts:
        return None
    last = sts[-1]
    tail = 1
    if last.type == "return_statement" and last.named_child_count == 0 and len(sts) >= 2:
        last, tail = sts[-2], 2
    if last.type != "if_statement" or last.child_by_field_name("alternative") is not None:
        return None
    cond = last.child_by_field_name("condition")
    cons = last.child_by_field_name("consequence")
    if cond is None or cons is None or cons.type != "compound_statement":
        return None
    c = cond.named_children[-1] if cond.named_child_count else None
    if c is None or c.type in ("declaration", "init_statement") or cond.named_child_count != 1:
        return None
    inner = _stmts(cons)
    if not inner or _declared(inner, data) & _declared(sts[: len(sts) - tail], data):
        return None
    first, end = inner[0].start_byte, inner[-1].end_byte
    indent = _line_indent(data, last.start_byte)
    moved = _dedent(data[first:end].decode("utf-8"), _line_indent(data, first), indent)
    new = f"if ({_negate(c, data)}) {{\n{indent}    return;\n{indent}}}\n{indent}{moved}"
    return splice(data, [(last.start_byte, sts[-1].end_byte, new)])


def _line_indent(data: bytes, offset: int) -> str:
    start = data.rfind(b"\n", 0, offset) + 1
    line = data[start:offset].decode("utf-8", errors="replace")
    return line[: len(line) - len(line.lstrip())]


def _dedent(code: str, old: str, new: str) -> str:
    lines = code.split("\n")
    return "\n".join([lines[0]] + [new + ln[len(old):] if ln.startswith(old) else ln for ln in lines[1:]])


def _pointer_bumps(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    fn = body.parent
    if fn is None:
        return None
    params = _pointer_params(fn, data)
    if not params:
        return None
    sts = _stmts(body)
    taken = {node_text(n, data) for n in walk(body, ("identifier", "type_identifier", "field_identifier"))}
    for st in sts:
        e = st.named_children[0] if st.type == "expression_statement" and st.named_child_count == 1 else None
        if e is None or e.type != "assignment_expression":
            continue
        left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or op is None or right is None or unparen(left).type != "identifier":
            continue
        p = node_text(unparen(left), data)
        if p not in params:
            continue
        o = node_text(op, data)
        if o == "+=":
            offset = node_text(right, data)
        elif o == "=" and unparen(right).type == "binary_expression":
            r = unparen(right)
            a, bop, b = (r.child_by_field_name(f) for f in ("left", "operator", "right"))
            if a is None or bop is None or b is None or node_text(bop, data) != "+" \
                    or node_text(unparen(a), data) != p:
                continue
            offset = node_text(b, data)
        else:
            continue
        # exactly one write of p in the whole body (this one), no address taken
        writes = [n for n in walk(body, ("assignment_expression", "update_expression"))
                  if (t := n.child_by_field_name("left" if n.type == "assignment_expression" else "argument"))
                  is not None and node_text(unparen(t), data) == p]
        if len(writes) != 1 or any(node_text(n, data).replace(" ", "") == f"&{p}"
                                   for n in walk(body, ("pointer_expression",))):
            continue
        new = f"{p}_at"
        k = 2
        while new in taken:
            new, k = f"{p}_at{k}", k + 1
        uses = [n for n in walk(body, ("identifier",)) if node_text(n, data) == p and n.start_byte >= st.end_byte]
        edits = [(st.start_byte, st.end_byte, f"{params[p]}{new} = {p} + ({offset});")]
        edits += [(n.start_byte, n.end_byte, new) for n in uses]
        return splice(data, edits)
    return None


def _pointer_params(fn: Node, data: bytes) -> dict[str, str]:
    """Pointer parameter name -> the declaration prefix of a local pointing into it (``const float* ``)."""
    out: dict[str, str] = {}
    d = fn.child_by_field_name("declarator")
    plist = d.child_by_field_name("parameters") if d is not None else None
    if plist is None:
        return out
    for p in plist.named_children:
        if p.type != "parameter_declaration":
            continue
        t = p.child_by_field_name("type")
        decl = p.child_by_field_name("declarator")
        if t is None or decl is None or decl.type != "pointer_declarator":
            continue
        inner = decl.child_by_field_name("declarator")
        if inner is None or inner.type != "identifier":
            continue  # pointer to pointer
        const = any(c.type == "type_qualifier" and node_text(c, data) == "const" for c in p.children)
        out[node_text(inner, data)] = f"{'const ' if const else ''}{node_text(t, data)}* "
    return out


def _counted_loop(st: Node, data: bytes) -> tuple[str, Node] | None:
    """(index, body) of ``for (T j = 0; j < E; j++)`` (also ``++j``, ``j += 1``), else None."""
    init, cond, upd, body = (st.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None:
        return None
    d = _single_decl(init, data)
    if d is None or node_text(d[2], data).strip() not in ("0", "0u", "0ul", "0UL", "0U"):
        return None
    j = d[1]
    c = unparen(cond)
    op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
    left = c.child_by_field_name("left") if c.type == "binary_expression" else None
    if op is None or left is None or node_text(op, data) not in ("<", "!=") or node_text(left, data) != j:
        return None
    if node_text(upd, data).replace(" ", "") not in (f"{j}++", f"++{j}", f"{j}+=1"):
        return None
    return j, body


def _walk_site(n: Node, data: bytes) -> str | None:
    """The pointer of ``*p++`` (a ``pointer_expression`` dereferencing a postfix increment), else None."""
    if n.type != "pointer_expression" or not node_text(n, data).lstrip().startswith("*"):
        return None
    arg = n.child_by_field_name("argument")
    arg = unparen(arg) if arg is not None else None
    if arg is None or arg.type != "update_expression" or not node_text(arg, data).rstrip().endswith("++"):
        return None
    p = arg.child_by_field_name("argument")
    return node_text(p, data) if p is not None and p.type == "identifier" else None


_BRANCHY = frozenset({"if_statement", "conditional_expression", "for_statement", "while_statement", "do_statement",
                      "switch_statement", "return_statement", "break_statement", "continue_statement",
                      "goto_statement"})


def _pointer_walks(text: str, body: Node, data: bytes, facts: FileFacts) -> str | None:
    for st in walk(body, ("for_statement",)):
        got = _counted_loop(st, data)
        if got is None:
            continue
        j, lbody = got
        if any(n.type in _BRANCHY for n in walk(lbody)) or j in written_names(lbody, data):
            continue
        if any(n.type == "binary_expression" and (o := n.child_by_field_name("operator")) is not None
               and node_text(o, data) in ("&&", "||") for n in walk(lbody)):
            continue
        sites: dict[str, list[Node]] = {}
        for n in walk(lbody, ("pointer_expression",)):
            p = _walk_site(n, data)
            if p is not None:
                sites.setdefault(p, []).append(n)
        if not sites:
            continue
        ok = True
        for p, ns in sites.items():
            # once per iteration, no other use inside the loop, none after it
            uses = [n for n in walk(lbody, ("identifier",)) if node_text(n, data) == p]
            after = [n for n in walk(body, ("identifier",)) if node_text(n, data) == p and n.start_byte >= st.end_byte]
            if len(ns) != 1 or len(uses) != 1 or after:
                ok = False
        if not ok:
            continue
        return splice(data, [(ns[0].start_byte, ns[0].end_byte, f"{p}[{j}]") for p, ns in sites.items()])
    return None
