"""fast_math: what ``-use_fast_math`` does to single-precision math, written into the kernel's own source.

Why as source and not as the flag: a flag lives in the project's build (CMake, a Makefile), which an accepted
variant never changes, so the code the user gets would not be the code that was measured (issue 18, item 2).
The intrinsics are per kernel, too: the flag changes every kernel of the translation unit.

What ``-use_fast_math`` implies (nvcc's documentation, "Intrinsic Functions", checked on nvcc 13's SASS) and
what this rule writes instead, per expression of the kernel and of the device functions it calls that the
same file defines (a called helper is copied as ``NAME_fastmath`` before the kernel, so its other callers keep
the exact one; helpers from headers are left alone):

* ``expf``/``exp10f``/``logf``/``log2f``/``log10f``/``sinf``/``cosf``/``tanf``/``sincosf``/``powf``/``tanhf``
  → ``__expf``, ``__exp10f``, ``__logf``, ``__log2f``, ``__log10f``, ``__sinf``, ``__cosf``, ``__tanf``,
  ``__sincosf``, ``__powf``, ``__tanhf`` (also the C++ overloads ``exp(x)``... where every argument is a float);
* ``x / y`` computed in float (a float operand, the other float or an integer; ``--prec-div=false``) →
  ``__fdividef(x, y)``, and ``1.0f / sqrtf(x)``
  → ``rsqrtf(x)`` (``--prec-div=false --prec-sqrt=false`` give the same ``MUFU.RSQ``). Double division and
  double math are not affected by the flag and are not touched here.

What it does not reproduce, said honestly: ``--ftz=true`` (denormals flushed in every float instruction)
has no source form, so the intrinsics here keep denormal inputs (a few more instructions each, the same
MUFU); ``--prec-sqrt=false`` alone (an approximate ``sqrtf``) has no intrinsic and ``sqrtf`` stays IEEE;
``--fmad=true`` is nvcc's default already. So the variant is at most as inexact as the flag's, never more.

When it is safe: it changes numerics like the flag does, so it is proposed only where it changes
something (at least one rewrite), and it is verified like any other variant: outputs within the spec's
tolerances at the spec's size, an odd size and perturbed tails. A kernel whose result the approximate
functions move beyond its tolerance is rejected by verification, not by this rule. Expressions whose
type the rule cannot tell (a call of an unknown function, a struct field) are left exact.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ...compiler.project import project_build
from ...cuda.candidate import Candidate
from ...cuda.model import DeclKind
from ...cuda.parser import parse_tree
from ...cuda.tree import node_text, walk
from ...cuda.types import Aliases, canonical_type, type_aliases
from . import register
from .base import Rule, RuleContext

#: the single-precision functions -use_fast_math maps to intrinsics, and their intrinsics
INTRINSIC = {"expf": "__expf", "exp10f": "__exp10f", "logf": "__logf", "log2f": "__log2f", "log10f": "__log10f",
             "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf", "sincosf": "__sincosf", "powf": "__powf",
             "tanhf": "__tanhf"}
#: C++ overloads that resolve to the float function when every argument is a float
OVERLOAD = {"exp": "__expf", "exp10": "__exp10f", "log": "__logf", "log2": "__log2f", "log10": "__log10f",
            "sin": "__sinf", "cos": "__cosf", "tan": "__tanf", "pow": "__powf", "tanh": "__tanhf"}
#: CUDA math functions and intrinsics that return float, for typing expressions (a name merely ending in
#: ``f`` proves nothing: a user's ``leaf()`` may return an int, and its division must stay an integer one)
_FLOAT_FUNCS = frozenset(
    f"{b}f" for b in ("exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "logb", "pow", "sqrt",
                      "rsqrt", "cbrt", "rcbrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan",
                      "atan2", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "erfcinv", "erfcx", "lgamma",
                      "tgamma", "fabs", "fmin", "fmax", "fmod", "floor", "ceil", "round", "trunc", "rint",
                      "nearbyint", "hypot", "copysign", "fma", "fdim", "normcdf", "normcdfinv", "sinpi", "cospi",
                      "ldexp", "scalbn", "remainder", "norm3d", "rnorm3d", "rhypot")
) | frozenset({"__fdividef", "__saturatef", "__half2float", "__low2float", "__high2float", "__bfloat162float"})
_FLOAT_INTRINSIC = re.compile(r"^__(f(add|sub|mul|div|rcp|sqrt|rsqrt|maf)_r[nzud]|u?int2float_r[nzud]|"
                              r"u?ll2float_r[nzud])$")
_INT_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "unsigned long", "long long",
                        "unsigned long long", "short", "unsigned short", "char", "unsigned char", "signed char",
                        "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "bool", "ptrdiff_t"})
_ONE = re.compile(r"^1(\.0*)?([eE][+-]?0+)?[fF]$|^1\.0*[fF]?$")
SUFFIX = "_fastmath"


def _kind(type_text: str, aliases: Aliases) -> str | None:
    """"float", "double" or "int" for a scalar type (through the file's aliases), None for anything else."""
    base, stars = canonical_type(type_text, aliases)
    base = re.sub(r"\b(const|volatile|__restrict__|restrict|static|register)\b", " ", base)
    base = " ".join(base.split())
    if stars:
        return None
    if base == "float":
        return "float"
    if base == "double":
        return "double"
    if base in _INT_TYPES:
        return "int"
    return None


class _Function:
    """One function's text, tree, and the types of its names (parameters and locals)."""

    def __init__(self, text: str, aliases: Aliases, returns: dict[str, str | None] | None = None) -> None:
        self.text = text
        #: what the file's own device functions return ("float", "double", "int", None)
        self.returns = returns or {}
        self.data = text.encode("utf-8")
        self.root = parse_tree(self.data).root_node
        self.aliases = aliases
        #: name -> (kind of the value, kind of the pointee when it is a pointer or array)
        self.names: dict[str, tuple[str | None, str | None]] = {}
        for n in walk(self.root, ("parameter_declaration", "declaration")):
            tnode = n.child_by_field_name("type")
            if tnode is None:
                continue
            ty = node_text(tnode, self.data)
            decls = n.children_by_field_name("declarator")
            for d in decls:
                ptr = False
                cur: Node | None = d
                while cur is not None and cur.type in ("init_declarator", "pointer_declarator", "array_declarator",
                                                       "reference_declarator"):
                    if cur.type in ("pointer_declarator", "array_declarator"):
                        ptr = True
                    cur = cur.child_by_field_name("declarator") if cur.type != "reference_declarator" else (
                        cur.named_children[0] if cur.named_children else None)
                if cur is None or cur.type != "identifier":
                    continue
                k = _kind(ty, aliases)
                name = node_text(cur, self.data)
                got = (None, k) if ptr else (k, None)
                # One name declared with two types (two scopes): its type here is not known.
                self.names[name] = got if self.names.get(name, got) == got else (None, None)

    def kind(self, n: Node) -> str | None:
        """The arithmetic type of an expression: "float", "double", "int", or None when not known."""
        t = n.type
        if t == "number_literal":
            s = node_text(n, self.data).lower()
            if s.startswith("0x"):
                return "int"
            if "." in s or "e" in s:
                return "float" if s.endswith("f") else "double"
            return "float" if s.endswith("f") else "int"
        if t == "identifier":
            return self.names.get(node_text(n, self.data), (None, None))[0]
        if t == "subscript_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                return self.names.get(node_text(arg, self.data), (None, None))[1]
            return None
        if t == "parenthesized_expression":
            return self.kind(n.named_children[0]) if n.named_children else None
        if t == "unary_expression":
            op = n.child_by_field_name("operator")
            arg = n.child_by_field_name("argument")
            if op is not None and node_text(op, self.data) in ("-", "+") and arg is not None:
                return self.kind(arg)
            return None
        if t == "binary_expression":
            op = n.child_by_field_name("operator")
            if op is None or node_text(op, self.data) not in ("+", "-", "*", "/"):
                return None
            a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
            ka = self.kind(a) if a is not None else None
            kb = self.kind(b) if b is not None else None
            if ka is None or kb is None:
                return None
            return "double" if "double" in (ka, kb) else "float" if "float" in (ka, kb) else "int"
        if t == "conditional_expression":
            a, b = n.child_by_field_name("consequence"), n.child_by_field_name("alternative")
            ka = self.kind(a) if a is not None else None
            kb = self.kind(b) if b is not None else None
            return ka if ka == kb else None
        if t == "cast_expression":
            tnode = n.child_by_field_name("type")
            return _kind(node_text(tnode, self.data), self.aliases) if tnode is not None else None
        if t == "call_expression":
            fn = n.child_by_field_name("function")
            name = node_text(fn, self.data) if fn is not None else ""
            if name in INTRINSIC or name in INTRINSIC.values() or name in _FLOAT_FUNCS or _FLOAT_INTRINSIC.match(name):
                return "float"
            if name in self.returns:
                return self.returns[name]
            if name in OVERLOAD:
                return "float" if self._args_float(n) else None
            return None
        return None

    def _args_float(self, call: Node) -> bool:
        args = call.child_by_field_name("arguments")
        kids = args.named_children if args is not None else []
        return bool(kids) and all(self.kind(a) == "float" for a in kids)

    def rewritten(self, rename: dict[str, str]) -> tuple[str, int]:
        """The function's text with fast-math intrinsics (and calls renamed by ``rename``); how many rewrites."""
        count = 0

        def emit(n: Node) -> str:
            nonlocal count
            if n.type == "call_expression":
                fn = n.child_by_field_name("function")
                name = node_text(fn, self.data) if fn is not None else ""
                new = INTRINSIC.get(name) or (OVERLOAD.get(name) if self._args_float(n) else None)
                args = n.child_by_field_name("arguments")
                if fn is not None and args is not None and (new or name in rename):
                    if new:
                        count += 1
                    return (new or rename[name]) + emit(args)
            if n.type == "binary_expression":
                op = n.child_by_field_name("operator")
                a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
                if (op is not None and a is not None and b is not None and node_text(op, self.data) == "/"
                        and self.kind(n) == "float"):
                    count += 1
                    inner = b
                    while inner.type == "parenthesized_expression" and inner.named_children:
                        inner = inner.named_children[0]
                    fnode = inner.child_by_field_name("function") if inner.type == "call_expression" else None
                    if (a.type == "number_literal" and _ONE.match(node_text(a, self.data))
                            and fnode is not None and node_text(fnode, self.data) == "sqrtf"):
                        iargs = inner.child_by_field_name("arguments")
                        if iargs is not None:
                            return "rsqrtf" + emit(iargs)
                    return f"__fdividef({emit(a)}, {emit(b)})"
            if n.child_count == 0:
                return node_text(n, self.data)
            out: list[str] = []
            pos = n.start_byte
            for c in n.children:
                out.append(self.data[pos : c.start_byte].decode("utf-8"))
                out.append(emit(c))
                pos = c.end_byte
            out.append(self.data[pos : n.end_byte].decode("utf-8"))
            return "".join(out)

        text = self.data[: self.root.start_byte].decode() + emit(self.root) + self.data[self.root.end_byte :].decode()
        return text, count


def _returns(text: str, aliases: Aliases) -> str | None:
    """What a device function's definition returns, as ``_kind`` says (None for a template or a non-scalar)."""
    if text.lstrip().startswith("template"):
        return None
    data = text.encode("utf-8")
    fn = next(iter(walk(parse_tree(data).root_node, ("function_definition",))), None)
    tnode = fn.child_by_field_name("type") if fn is not None else None
    decl = fn.child_by_field_name("declarator") if fn is not None else None
    if tnode is None or decl is None or decl.type != "function_declarator":
        return None  # a pointer or reference return
    return _kind(node_text(tnode, data), aliases)


def _called(fn: _Function) -> set[str]:
    names: set[str] = set()
    for n in walk(fn.root, ("call_expression",)):
        f = n.child_by_field_name("function")
        if f is not None and f.type == "identifier":
            names.add(node_text(f, fn.data))
    return names


def fast_math_source(ctx: RuleContext) -> tuple[str, int, list[str]] | None:
    """The candidate's text with fast-math intrinsics, the number of rewrites, and the helpers copied."""
    k = ctx.cand_kernel
    if k is None:
        return None
    aliases = {**type_aliases(ctx.source, ctx.model), **type_aliases(ctx.cand_src, ctx.cand_model)}
    own = {d.names[0]: d for d in ctx.cand_model.declarations
           if d.kind is DeclKind.DEVICE_FUNCTION and d.names}
    taken = {n for d in ctx.model.declarations for n in d.names} | set(own) | {k.name}
    # Device functions of the file the kernel reaches (not templates: their types depend on arguments).
    helpers: dict[str, str] = {}
    file_fns = {d.names[0]: d for d in ctx.model.declarations if d.kind is DeclKind.DEVICE_FUNCTION and d.names}
    returns = {**{n: _returns(ctx.source.slice(d.span), aliases) for n, d in file_fns.items()},
               **{n: _returns(ctx.cand_src.slice(d.span), aliases) for n, d in own.items()}}
    todo = list(_called(_Function(ctx.cand_src.slice(k.span), aliases, returns)))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in own or name not in file_fns:
            continue
        seen.add(name)
        text = ctx.source.slice(file_fns[name].span)
        if text.lstrip().startswith("template") or not text.rstrip().endswith("}"):
            continue
        helpers[name] = text
        todo.extend(_called(_Function(text, aliases, returns)))
    # Copy a helper only when its copy differs: a rewrite in it, or a call of a copied helper.
    copies: dict[str, str] = {}
    changed = True
    rename: dict[str, str] = {}
    while changed:
        changed = False
        for name, text in helpers.items():
            if name in copies:
                continue
            new, n = _Function(text, aliases, returns).rewritten(rename)
            if n or new != text:
                copy = name + SUFFIX
                while copy in taken:
                    copy += "_"
                copies[name] = new
                rename[name] = copy
                changed = True
    total = 0
    parts: list[str] = []
    for name in helpers:
        if name in copies:
            new, n = _Function(helpers[name], aliases, returns).rewritten(rename)
            total += n
            parts.append(re.sub(rf"\b{re.escape(name)}\b(?=\s*\()", rename[name], new, count=1))
    cand, n = _Function(ctx.candidate.source, aliases, returns).rewritten(rename)
    total += n
    if total == 0:
        return None
    # Copied helpers must precede the kernel; they go first, ahead of the candidate's own helpers.
    text = "\n\n".join([*parts, cand]) if parts else cand
    return text, total, [rename[n] for n in copies]


class FastMath(Rule):
    family = "fast_math"
    #: ncu's FPInstructions advice (action ``compile_flags``) motivated ``-use_fast_math`` before it became source
    motivated_by = ("fast_math", "compile_flags")

    def variants(self, ctx: RuleContext) -> list[str]:
        if self.already_applied(ctx) or any(f in ("-use_fast_math", "--use_fast_math") for f in ctx.candidate.flags):
            return []
        proj = project_build(ctx.file)
        if proj is not None and "-use_fast_math" in proj.flags:
            return []  # the project builds with the flag already: the intrinsics compile to the same code
        return ["intrinsics"] if fast_math_source(ctx) is not None else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        got = fast_math_source(ctx) if param == "intrinsics" else None
        if got is None:
            return None
        text, count, copied = got
        why = (f"fast-math intrinsics in the source ({count} rewrite{'s' if count != 1 else ''}"
               + (f"; helpers copied as {', '.join(copied)}" if copied else "") + "): what -use_fast_math does to "
               "this kernel's float math, without a build flag")
        return ctx.derive(self.family, param, why, definition=text)


register(FastMath())
