"""Calls inlined: same-file ``__device__`` functions and functors become the code they run.

Why: a rule that looks for "a loop over a row" or "a sum" sees ``y[i] = dot(x, w, n)`` and finds neither.
Work hidden in a helper is very common in code written for reuse. Inlining is exact under the conditions
below (the argument's value is what the parameter's would be, evaluated the same number of times, and
names mean the same things at the call site as in the function):

* an expression function (``return E;`` only) replaces the call by ``((R)(E'))``, each parameter in ``E``
  by ``((P)(arg))``; an argument with side effects (a call, an assignment) must be used exactly once;
* a ``void`` function called as a statement, or a value function whose body ends in its only ``return E;``
  used as ``T v = f(...)``, ``v = f(...)`` or ``v op= f(...)``, becomes a block: parameters as locals
  initialised from the arguments (reference parameters stand for their argument, which must be a name
  or an element without side effects), the body, then the assignment of ``E``;
* a functor: ``F()(args)``, ``F{}(args)`` or ``f(args)`` with ``f`` a parameter or local of functor type
  ``F`` (also a template parameter the spec instantiates with ``F``), when its ``operator()`` reads no
  member.

Names the function uses besides its parameters and locals (globals, other functions) must not be
declared in the kernel, where they would mean something else. Templates and recursion are not inlined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tree_sitter import Node

from ...cuda.parser import file_tree
from ...cuda.tree import node_text, unparen, walk, written_names
from .passes import (
    Changed,
    FunctionDef,
    Kernel,
    PassEnv,
    Result,
    Skipped,
    declared_names,
    register,
    side_effect_free,
    splice,
    statements,
)

_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _strip_const(t: str) -> str:
    return " ".join(w for w in t.split() if w not in ("const", "volatile", "__restrict__", "static", "inline",
                                                      "__forceinline__", "__device__", "__host__", "__noinline__"))


def _definition(fn: Node, data: bytes, name: str, template: bool) -> FunctionDef | None:
    decl = fn.child_by_field_name("declarator")
    ret = fn.child_by_field_name("type")
    body = fn.child_by_field_name("body")
    if decl is None or ret is None or body is None:
        return None
    ret_text = _strip_const(node_text(ret, data))
    while decl is not None and decl.type in ("pointer_declarator", "reference_declarator"):
        return None  # returns a pointer or reference: not inlined (an lvalue would be needed)
    if decl is None or decl.type != "function_declarator":
        return None
    plist = decl.child_by_field_name("parameters")
    if plist is None:
        return None
    params: list[tuple[str, str, bool]] = []
    for p in plist.named_children:
        if p.type == "comment":
            continue
        if p.type != "parameter_declaration":
            return None  # variadic, defaults
        t = p.child_by_field_name("type")
        d = p.child_by_field_name("declarator")
        if t is None or d is None:
            return None
        ref = False
        stars = ""
        while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
            if d.type == "reference_declarator":
                ref = True
                d = next((c for c in d.named_children), None)
            else:
                stars += "*"
                d = d.child_by_field_name("declarator")
        if d is None or d.type != "identifier":
            return None
        const = "const " if any(node_text(c, data) == "const" for c in p.children if c.type == "type_qualifier") \
            and stars else ""
        params.append((f"{const}{_strip_const(node_text(t, data))}{stars}", node_text(d, data), ref))
    inner = node_text(body, data).strip()[1:-1]
    return FunctionDef(name, ret_text, tuple(params), inner, template)


def file_functions(text: str) -> tuple[dict[str, FunctionDef], dict[str, FunctionDef]]:
    """The file's ``__device__`` functions by name and its functors (struct name -> ``operator()``).

    Overloaded names are left out (which one a call means depends on the argument types). Read once per text
    (``_file_functions``): the why-not hint lowers every kernel of a file against the same text, and a 2 MB
    generated file with 376 kernels re-read it 376 times; the caller gets its own dicts."""
    functions, functors = _file_functions(text)
    return dict(functions), dict(functors)


@lru_cache(maxsize=16)
def _file_functions(text: str) -> tuple[dict[str, FunctionDef], dict[str, FunctionDef]]:
    data = text.encode("utf-8")
    tree = file_tree(data)
    funcs: dict[str, FunctionDef | None] = {}
    functors: dict[str, FunctionDef] = {}
    for fn in walk(tree.root_node, ("function_definition",)):
        head = data[fn.start_byte:(fn.child_by_field_name("declarator") or fn).start_byte].decode("utf-8", "replace")
        tmpl = fn.parent is not None and fn.parent.type == "template_declaration"
        decl = fn.child_by_field_name("declarator")
        nm = decl.child_by_field_name("declarator") if decl is not None else None
        if nm is None:
            continue
        name = node_text(nm, data)
        owner = fn.parent.parent if fn.parent is not None and fn.parent.type == "field_declaration_list" else None
        if owner is not None and name == "operator()" and "__device__" in head:
            sname = owner.child_by_field_name("name")
            d = _definition(fn, data, "operator()", tmpl)
            if sname is not None and d is not None:
                functors[node_text(sname, data)] = d
            continue
        if "__device__" not in head or "__global__" in head or owner is not None:
            continue
        d = _definition(fn, data, name, tmpl)
        funcs[name] = None if name in funcs else d
    return {k: v for k, v in funcs.items() if v is not None}, functors


def _parse_body(f: FunctionDef) -> tuple[Node, bytes]:
    data = ("void _f() {" + f.body + "}").encode("utf-8")
    tree = file_tree(data)
    fn = next(walk(tree.root_node, ("function_definition",)))
    body = fn.child_by_field_name("body")
    assert body is not None
    return body, data


def _free_names(f: FunctionDef) -> set[str]:
    body, data = _parse_body(f)
    names = {node_text(n, data) for n in walk(body, ("identifier",))}
    return names - declared_names(body, data) - {p[1] for p in f.params}


def _returns(f: FunctionDef) -> tuple[list[str], str | None] | None:
    """(statements before the one final ``return E;``, E) — None when a ``return`` appears elsewhere."""
    body, data = _parse_body(f)
    sts = statements(body)
    rets = list(walk(body, ("return_statement",)))
    if not sts:
        return [], None
    last = sts[-1]
    if last.type == "return_statement":
        if len(rets) != 1:
            return None
        e = last.named_children[0] if last.named_child_count else None
        return [node_text(s, data) for s in sts[:-1]], node_text(e, data) if e is not None else None
    if rets:
        return None
    return [node_text(s, data) for s in sts], None


_MEMBER_BEFORE = re.compile(r"(?:\.|->|::)\s*$")


def _rename(code: str, names: dict[str, str]) -> str:
    """``code`` with each name of ``names`` replaced, except where the word is a member (``grid.size()``,
    ``p->n``, ``cg::sync``): a parameter ``size`` inlined as ``N`` made ``grid.N()`` of ``grid.size()``."""

    def one(m: re.Match[str]) -> str:
        w = m.group(0)
        if w not in names or _MEMBER_BEFORE.search(code, max(0, m.start() - 32), m.start()):
            return w
        return names[w]

    return _WORD.sub(one, code)


def _callee(call: Node, k: Kernel, env: PassEnv, types: dict[str, str]) -> FunctionDef | None:
    fn = call.child_by_field_name("function")
    if fn is None:
        return None
    fn = unparen(fn)
    if fn.type == "identifier":
        name = k.t(fn)
        if name in types:  # a functor object
            return env.functors.get(env.template_args.get(types[name], types[name]))
        return env.functions.get(name)
    if fn.type in ("call_expression", "compound_literal_expression"):  # F()(x), F{}(x)
        inner = fn.child_by_field_name("function") or fn.child_by_field_name("type")
        args = fn.child_by_field_name("arguments") or fn.child_by_field_name("value")
        if inner is not None and (args is None or args.named_child_count == 0):
            t = k.t(inner)
            return env.functors.get(env.template_args.get(t, t))
    return None


def _var_types(k: Kernel) -> dict[str, str]:
    """Declared type name of every parameter and local of a plain (non-pointer) type: functor objects."""
    out: dict[str, str] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        t = n.child_by_field_name("type")
        for d in n.children_by_field_name("declarator"):
            d0 = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            if t is not None and d0 is not None and d0.type == "identifier":
                out[k.t(d0)] = _strip_const(k.t(t))
    return out


@register("inline_calls", "a same-file, non-template, non-recursive __device__ function or functor; arguments "
                          "with side effects used once; no name of the function's shadowed in the kernel")
def inline_calls(k: Kernel, env: PassEnv) -> Result:
    if not env.functions and not env.functors:
        return None
    types = _var_types(k)
    kernel_names = declared_names(k.fn, k.data)
    skipped: Skipped | None = None
    for call in walk(k.body, ("call_expression",)):
        f = _callee(call, k, env, types)
        if f is None:
            continue
        why = _why_not(f, call, k, kernel_names)
        if why is None:
            text = _expression(f, call, k)
            if text is None:
                got = _statement(f, call, k, kernel_names)
                text = got if isinstance(got, Inlined) else None
                why = got.why if isinstance(got, NotInlined) else None
            if text is not None:
                return Changed(str(text), f"`{f.name}` inlined (line {k.line(call)})")
            why = why or "its result is used inside an expression and its body is more than `return E;`"
        skipped = skipped or Skipped(f"`{f.name}` not inlined: {why}", k.line(call))
    return skipped


def _why_not(f: FunctionDef, call: Node, k: Kernel, kernel_names: set[str]) -> str | None:
    if f.template:
        return "a template function"
    free = _free_names(f)
    if f.name in free:
        return "recursive"
    if free & kernel_names:
        return f"`{sorted(free & kernel_names)[0]}` means something else in the kernel"
    args = call.child_by_field_name("arguments")
    if args is None or len([a for a in args.named_children if a.type != "comment"]) != len(f.params):
        return "the arguments do not match its parameters (defaults or overloads)"
    return None


class Inlined(str):
    """The kernel text with a call inlined."""


@dataclass(frozen=True)
class NotInlined:
    """Why a call was not inlined ("" when its position is not one a block can replace)."""

    why: str


def _args(call: Node) -> list[Node]:
    args = call.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def _expression(f: FunctionDef, call: Node, k: Kernel) -> str | None:
    got = _returns(f)
    if got is None or got[0] or got[1] is None or any(ref for _, _, ref in f.params):
        return None
    expr = got[1]
    counts = {p[1]: len(re.findall(rf"\b{re.escape(p[1])}\b", expr)) for p in f.params}
    subst: dict[str, str] = {}
    for (ptype, pname, _), a in zip(f.params, _args(call), strict=True):
        if not side_effect_free(a) and counts[pname] != 1:
            return None
        subst[pname] = f"(({_strip_const(ptype) if '*' not in ptype else ptype})({k.t(a)}))"
    body = _rename(expr, subst)
    ret = f.return_type
    text = f"(({ret})({body}))" if ret not in ("auto", "void") else f"({body})"
    return splice(k.data, [(call.start_byte, call.end_byte, text)])


def _statement(f: FunctionDef, call: Node, k: Kernel, kernel_names: set[str]) -> Inlined | NotInlined:
    got = _returns(f)
    if got is None:
        return NotInlined("a `return` before the end of its body")
    pre, expr = got
    parent = call.parent
    stmt: Node | None = None
    assign: str | None = None  # "NAME = " / "LHS op= " / declaration
    decl_head: str | None = None
    if parent is not None and parent.type == "expression_statement":
        stmt = parent
        if expr is not None and f.return_type != "void":
            return NotInlined("its value is dropped")  # would still have to be evaluated; not worth a special case
    elif parent is not None and parent.type == "assignment_expression" and parent.child_by_field_name("right") == call \
            and parent.parent is not None and parent.parent.type == "expression_statement":
        left, op = parent.child_by_field_name("left"), parent.child_by_field_name("operator")
        if left is None or op is None or not side_effect_free(left):
            return NotInlined("assigned to an element with side effects")
        stmt, assign = parent.parent, f"{k.t(left)} {k.t(op)} "
    elif parent is not None and parent.type == "init_declarator" and parent.child_by_field_name("value") == call \
            and parent.parent is not None and parent.parent.type == "declaration" \
            and len(parent.parent.children_by_field_name("declarator")) == 1:
        d = parent.child_by_field_name("declarator")
        t = parent.parent.child_by_field_name("type")
        if d is None or t is None or d.type != "identifier":
            return NotInlined("declares something other than one variable")
        tt = _strip_const(k.t(t))
        tt = f.return_type if tt == "auto" else tt
        stmt, assign, decl_head = parent.parent, f"{k.t(d)} = ", f"{tt} {k.t(d)};"
    else:
        return NotInlined("")
    if (assign is not None) != (expr is not None):
        return NotInlined("a value function without a value, or the reverse")
    body_locals = declared_names(_parse_body(f)[0], _parse_body(f)[1])
    if assign is not None and {m.group(0) for m in _WORD.finditer(assign)} & body_locals:
        return NotInlined("the result's name is a local of the function")
    lines: list[str] = []
    rename: dict[str, str] = {}
    taken = kernel_names | body_locals | _free_names(f)
    fbody, fdata = _parse_body(f)
    fwritten = written_names(fbody, fdata)
    types = _var_types(k)
    for (ptype, pname, ref), a in zip(f.params, _args(call), strict=True):
        if ref:
            if not side_effect_free(a) or unparen(a).type not in ("identifier", "subscript_expression",
                                                                  "field_expression"):
                return NotInlined(f"the reference argument `{k.t(a)}` is not a plain name or element")
            rename[pname] = f"({k.t(a)})"
            continue
        ua = unparen(a)
        if pname not in fwritten and ua.type == "identifier" and (
                "*" in ptype or _strip_const(types.get(k.t(ua), "")) == _strip_const(ptype)):
            rename[pname] = k.t(ua)  # the argument names a value of the parameter's type: use it directly
            continue
        new = f"{f.name}_{pname}".replace("operator()", "op")
        while new in taken:
            new += "_"
        taken.add(new)
        rename[pname] = new
        lines.append(f"{ptype} {new} = {k.t(a)};")
    lines += [_rename(s, rename) for s in pre]
    if expr is not None and assign is not None:
        lines.append(f"{assign}(({f.return_type})({_rename(expr, rename)}));")
    ind = _indent_of(stmt, k)
    # the block's braces are dropped when its names cannot clash with the kernel's (a flat body is what
    # the rules read: a loop at the top level)
    introduced = body_locals | {n for p, n in rename.items() if n.isidentifier() and n != p and n not in
                                kernel_names and n.startswith(f.name.replace("operator()", "op"))}
    in_block = stmt.parent is not None and stmt.parent.type == "compound_statement"
    flat = in_block and not (introduced & {m.group(0) for m in _WORD.finditer(k.text)})
    inner = f"\n{ind}".join(lines)
    block = inner if flat else "{\n" + ind + "    " + f"\n{ind}    ".join(lines) + "\n" + ind + "}"
    text = f"{decl_head}\n{ind}{block}" if decl_head else block
    if not in_block:  # the body of an ``if`` or a loop: one statement
        text = "{ " + text + " }"
    return Inlined(splice(k.data, [(stmt.start_byte, stmt.end_byte, text)]))


def _indent_of(n: Node, k: Kernel) -> str:
    start = k.data.rfind(b"\n", 0, n.start_byte) + 1
    line = k.data[start:n.start_byte].decode("utf-8", "replace")
    return line if not line.strip() else ""
