"""Reduce a candidate's code to device code, and say what was dropped and why.

Why: a candidate's text (written by a model, by hand for ``warpforge verify``, or by a rule) is compiled by
nvcc and, when accepted, written into the user's file, where the user's next build compiles its host part
and runs it. So a candidate may only hold what runs on the GPU or only exists at compile time: kernels,
``__device__`` (and ``__host__ __device__``) functions, ``__device__``/``__constant__``/``__shared__``
variables, ``constexpr`` constants, types whose member functions are device code, scope declarations,
macros the kept code uses, a few pragmas and includes of toolkit headers from a fixed list. Everything
else -- host functions and variables (whose initializers run at program start), structs with host member
functions or static data that runs code, ``extern "C"`` blocks, file-scope ``asm``, includes of other
files (their content would come back in compiler messages, which go to the model) -- is cut out and
listed with its line, so callers can show what happened.

This is an allow-list on the parse tree: a construct not recognised as device code is dropped, never
kept by default. Host-callable device code (``__host__ __device__``) is kept only where the user's own host
code cannot reach it by name: with the user's file known, such a function (or a type with such members)
whose name the file uses is dropped, as are ``__host__ __device__`` operators and the unqualified
customisation points generic host code calls (``swap``, ``begin``, ...).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from tree_sitter import Node

from .parser import _declarator_name, _uses, file_tree, parse, parse_tree
from .text import SourceText, Span
from .tree import declares_function, node_text, walk

#: toolkit headers a candidate may include (``#include <...>`` only): device types and intrinsics,
#: cooperative groups, warp matrix and async-copy APIs, fixed-width integers and math
ALLOWED_INCLUDES: frozenset[str] = frozenset({
    "cuda_runtime.h", "device_launch_parameters.h", "vector_types.h", "vector_functions.h",
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "math_constants.h",
    "cooperative_groups.h", "mma.h", "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_awbarrier.h",
    "cuda_awbarrier_primitives.h", "curand_kernel.h",
    "stdint.h", "cstdint", "stddef.h", "cstddef", "math.h", "cmath", "float.h", "cfloat", "limits.h",
    "climits", "limits", "type_traits",
    "cuda/barrier", "cuda/pipeline", "cuda/atomic", "cuda/ptx", "cuda/annotated_ptr", "cuda/cmath",
    "cuda/functional", "cuda/type_traits", "cuda/bit",
})
#: header families allowed by prefix: ``cooperative_groups/reduce.h``, ``cub/...``, ``cuda/std/...``
ALLOWED_INCLUDE_PREFIXES: tuple[str, ...] = ("cooperative_groups/", "cub/", "cuda/std/")
#: pragmas a candidate may hold; others (``redefine_extname``, ``weak``, ``GCC poison``, ...) act on host code
ALLOWED_PRAGMAS: frozenset[str] = frozenset({
    "once", "unroll", "nounroll", "nv_diag_suppress", "nv_diag_warning", "nv_diag_default", "nv_diag_once",
    "nv_diag_error", "nv_diagnostic", "diag_suppress", "diag_warning", "diag_default",
})
#: namespaces a candidate may not add to: what it puts there changes library code the host calls
RESERVED_NAMESPACES: frozenset[str] = frozenset({
    "std", "cuda", "cub", "thrust", "cooperative_groups", "nvcuda", "cutlass", "cute", "__gnu_cxx", "nv",
})
#: names generic host code calls unqualified (argument-dependent lookup): a host-callable function with one
#: of them could be picked by a library template instantiated for the user's types
ADL_NAMES: frozenset[str] = frozenset({
    "swap", "iter_swap", "iter_move", "begin", "end", "cbegin", "cend", "rbegin", "rend", "size", "ssize",
    "empty", "data", "get", "hash_value", "to_string",
})
#: attributes that make code run without being called, or bind a name to another symbol
_BAD_ATTRIBUTES: frozenset[str] = frozenset({
    "constructor", "destructor", "init_priority", "alias", "ifunc", "weak", "weakref", "section", "symver",
    "cleanup", "used", "visibility", "copy",
})
#: C++ keywords, and names a macro must not take over (a macro named ``system`` changes what calls it run)
_KEYWORD_TEXT = (
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t "
    "class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield "
    "decltype default delete do double dynamic_cast else enum explicit export extern false float for friend "
    "goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private "
    "protected public register reinterpret_cast requires return short signed sizeof static static_assert "
    "static_cast struct switch template this thread_local throw true try typedef typeid typename union "
    "unsigned using virtual void volatile wchar_t while xor xor_eq "
    "main system exec execl execv execve execvp popen fork dlopen"
)
_KEYWORDS: frozenset[str] = frozenset(_KEYWORD_TEXT.split(" "))
_INCLUDE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./]*")
_IDENT_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_SPECIFIERS = ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier")
_FUNCTION_SPECS = frozenset({"__device__", "__host__", "__global__"})
_SIMPLE_CONST = frozenset({
    "number_literal", "char_literal", "true", "false", "identifier", "parenthesized_expression",
    "unary_expression", "binary_expression", "sizeof_expression", "conditional_expression", "type_descriptor",
    "primitive_type", "(", ")", "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "~", "!", "<", ">", "<=",
    ">=", "==", "!=", "&&", "||", "?", ":", "sizeof",
})


class Kind(str, Enum):
    KERNEL = "kernel"
    DEVICE_FUNCTION = "__device__ function"
    HOST_DEVICE_FUNCTION = "__host__ __device__ function"
    DEVICE_VARIABLE = "device variable"
    CONSTANT = "constant"
    TYPE = "type"
    SCOPE = "scope declaration"
    MACRO = "macro"
    PRAGMA = "pragma"
    INCLUDE = "include"
    NAMESPACE = "namespace"
    CONDITIONAL = "conditional block"
    ASSERT = "static_assert"


@dataclass(frozen=True)
class Item:
    """A kept top-level construct: its text (inner cuts applied, a type's ``;`` included) and its names."""

    kind: Kind
    names: tuple[str, ...]
    uses: frozenset[str]
    span: Span
    line: int
    text: str
    #: only macros (or a conditional of macros): kept when kept code uses one of its names
    macro_like: bool = False


@dataclass(frozen=True)
class Dropped:
    """What was cut, where (1-based line of the candidate's text), and why.

    ``host`` marks code that is, or may act as, host code (or reaches outside the toolkit); the rest is
    housekeeping (a macro nothing uses, another kernel). Accept refuses a candidate with host drops.
    """

    line: int
    what: str
    reason: str
    host: bool = True

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} ({self.reason})"


@dataclass(frozen=True)
class Reduced:
    """A candidate text reduced to device code."""

    #: the text with every dropped construct cut out (unchanged when nothing was dropped)
    source: str
    items: tuple[Item, ...]
    dropped: tuple[Dropped, ...]

    @property
    def host_dropped(self) -> tuple[Dropped, ...]:
        return tuple(d for d in self.dropped if d.host)

    def kernel(self, name: str) -> Item | None:
        return next((i for i in self.items if i.kind is Kind.KERNEL and name in i.names), None)

    def assembled(self, kernel: str) -> str:
        """The kept constructs in source order with the kernel ``kernel`` last (helpers before their use)."""
        k = self.kernel(kernel)
        rest = [i.text.strip() for i in self.items if i is not k]
        parts = [t for t in rest if t]
        if k is not None:
            parts.append(k.text.strip())
        return "\n\n".join(parts) + "\n" if parts else ""


@dataclass(frozen=True)
class FileFacts:
    """What the reduction needs to know about the user's file: its constructs' texts and the names it uses."""

    texts: frozenset[str]
    names: frozenset[str]


def _norm(text: str) -> str:
    return " ".join(text.split())


def include_allowed(path: str) -> bool:
    """Whether ``#include <path>`` is a toolkit header of the allow-list (no absolute or ``..`` paths)."""
    if not _INCLUDE_PATH.fullmatch(path) or ".." in path.split("/"):
        return False
    return path in ALLOWED_INCLUDES or path.startswith(ALLOWED_INCLUDE_PREFIXES)


def _reserved_macro(name: str) -> bool:
    """A macro name that would redefine a keyword, a CUDA specifier or an implementation name."""
    return name in _KEYWORDS or name.startswith("__") or (len(name) > 1 and name[0] == "_" and name[1].isupper())



def _top_nodes(children: Iterable[Node]) -> list[tuple[Node, int]]:
    """Sibling constructs with the end of each: a type definition ends after the ``;`` that follows it."""
    kids = list(children)
    out: list[tuple[Node, int]] = []
    skip: set[int] = set()
    for i, c in enumerate(kids):
        if i in skip:
            continue
        end = c.end_byte
        if c.type in _TYPE_SPECIFIERS and i + 1 < len(kids) and kids[i + 1].type == ";":
            end = kids[i + 1].end_byte
            skip.add(i + 1)
        out.append((c, end))
    return out


@functools.lru_cache(maxsize=64)
@functools.lru_cache(maxsize=8)
def file_facts(text: str) -> FileFacts:
    """The normalised text of every construct of a file (at any namespace or ``#if`` depth) and its names.

    Cached by text: a job checks every candidate it shows against the same file text (diff, variant, Accept),
    and the file is parsed for that once, not once per candidate. ``FileFacts`` is immutable, so sharing is safe.
    """
    data = text.encode("utf-8")
    root = file_tree(data).root_node
    texts: set[str] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        for c, end in _top_nodes(n.children):
            texts.add(_norm(data[c.start_byte : end].decode("utf-8", errors="replace")))
            if c.type == "namespace_definition":
                body = c.child_by_field_name("body")
                if body is not None:
                    stack.append(body)
            elif c.type in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef",
                            "linkage_specification", "declaration_list"):
                stack.append(c)
    return FileFacts(frozenset(t for t in texts if t), _uses(root, data))


@dataclass
class _Cut:
    """A construct to cut, with the reports explaining it (a whole ``#if`` block may carry several)."""

    start: int
    end: int
    reports: list[Dropped] = field(default_factory=list)


#: a kept construct, a cut, or the members of a namespace around the kernel (flattened: see ``namespace``)
_Outcome = Item | _Cut | list[Item]


class _Reducer:
    def __init__(self, text: str, kernel: str | None, file: FileFacts | None) -> None:
        self.src = SourceText(text)
        self.data = self.src.data
        self.kernel = kernel
        self.file = file
        self._model = None if b"__global__" not in self.data else parse(self.data)

    # ------------------------------------------------------------------ helpers
    def line(self, offset: int) -> int:
        return self.src.line_of(offset) + 1

    def cut(self, node: Node, end: int, what: str, reason: str, host: bool = True) -> _Cut:
        return _Cut(node.start_byte, end, [Dropped(self.line(node.start_byte), what, reason, host)])

    def item(self, kind: Kind, node: Node, end: int, names: Iterable[str], text: str | None = None,
             macro_like: bool = False, uses: frozenset[str] | None = None) -> Item:
        return Item(kind, tuple(dict.fromkeys(n for n in names if n)),
                    uses if uses is not None else _uses(node, self.data), Span(node.start_byte, end),
                    self.line(node.start_byte),
                    text if text is not None else self.data[node.start_byte : end].decode("utf-8", "replace"),
                    macro_like)

    def existing(self, node: Node, end: int) -> bool:
        """Whether the user's file already holds this construct (it is then not the candidate's to add)."""
        if self.file is None:
            return False
        return _norm(self.data[node.start_byte : end].decode("utf-8", "replace")) in self.file.texts

    def specs(self, node: Node) -> set[str]:
        """The specifiers of a function or variable: ``__device__``, ``static``, ``constexpr``, ...."""
        out: set[str] = set()
        for c in node.children:
            if c.type in _FUNCTION_SPECS or c.type in ("__forceinline__", "__noinline__", "virtual"):
                out.add(c.type)
            elif c.type in ("storage_class_specifier", "type_qualifier"):
                out.add(node_text(c, self.data).strip())
        return out

    def bad_attributes(self, node: Node, skip: Node | None = None) -> str | None:
        """A reason when ``node`` (outside ``skip``, a function body) binds symbols or runs on its own."""
        for n in walk(node, cut=lambda n: skip is not None and n.id == skip.id):
            if skip is not None and n.id == skip.id:
                continue
            if n.type in ("gnu_asm_expression", "asm") or node_text(n, self.data) in ("asm", "__asm__", "__asm"):
                return "an asm label renames a symbol"
            if n.type in ("attribute_specifier", "attribute_declaration", "attribute"):
                bad = set(_IDENT_TEXT.findall(node_text(n, self.data))) & _BAD_ATTRIBUTES
                if bad:
                    return f"attribute `{sorted(bad)[0]}` runs code or binds a symbol outside device code"
        return None

    def host_reachable(self, name: str) -> str | None:
        """Why a host-callable function named ``name`` could be called by the file's host code, or None."""
        if name.startswith("operator"):
            return "a __host__ __device__ operator can change what the file's host code calls; declare it __device__"
        if name in ADL_NAMES:
            return f"`{name}` is called unqualified by generic host code; declare it __device__"
        if name == "main":
            return "`main` is host code"
        if self.file is not None and name in self.file.names:
            return f"the file's code uses the name `{name}`; declare it __device__ or rename it"
        return None

    # ------------------------------------------------------------------ constructs
    def visit(self, node: Node, end: int, ns: tuple[str, ...]) -> _Outcome | None:
        t = node.type
        data = self.data
        if t in ("comment", ";", "{", "}", "#endif", "#else") or not node.is_named:
            return None
        if t == "ERROR" or node.is_missing:
            return self.error(node, end)
        if t == "preproc_include":
            path = node.child_by_field_name("path")
            ptxt = node_text(path, data).strip() if path is not None else ""
            inner = ptxt.strip('<>"')
            if path is not None and path.type == "system_lib_string" and include_allowed(inner):
                return self.item(Kind.INCLUDE, node, end, ())
            return self.cut(node, end, f"#include {ptxt}", "only toolkit headers from WarpForge's list may be "
                            "included; see docs/llm.md")
        if t in ("preproc_def", "preproc_function_def"):
            nm = node.child_by_field_name("name")
            name = node_text(nm, data) if nm is not None else ""
            if not name or _reserved_macro(name):
                return self.cut(node, end, f"#define {name}", "it redefines a keyword or a reserved name")
            if self.file is not None and name in self.file.names:
                return self.cut(node, end, f"#define {name}",
                                "the file uses this name, and a macro would change its code (a tunable is set "
                                "with defines)")
            return self.item(Kind.MACRO, node, end, (name,), macro_like=True,
                             uses=_uses(node, data) - {name})
        if t == "preproc_call":
            directive = node.child_by_field_name("directive")
            arg = node.child_by_field_name("argument")
            d = node_text(directive, data).strip() if directive is not None else ""
            first = (node_text(arg, data).split() or [""])[0] if arg is not None else ""
            if d == "#pragma" and first in ALLOWED_PRAGMAS:
                return self.item(Kind.PRAGMA, node, end, ())
            return self.cut(node, end, f"{d} {first}".strip(), "only unroll, once and diagnostic pragmas are kept")
        if t in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef", "preproc_else"):
            return self.conditional(node, end, ns)
        if t == "namespace_definition":
            return self.namespace(node, end, ns)
        if t in ("using_declaration", "namespace_alias_definition"):
            nm = node.child_by_field_name("name")
            return self.item(Kind.SCOPE, node, end,
                             (node_text(nm, data),) if nm is not None and t == "namespace_alias_definition" else ())
        if t == "static_assert_declaration":
            return self.item(Kind.ASSERT, node, end, ())
        if t == "linkage_specification":
            return self.linkage(node, end)
        if t == "template_instantiation":
            return self.cut(node, end, "explicit instantiation",
                            "WarpForge instantiates the kernel with the spec's template arguments", host=False)
        if t == "template_declaration":
            return self.template(node, end)
        if t == "function_definition":
            return self.function(node, node, end, None)
        if t in (*_TYPE_SPECIFIERS, "type_definition", "alias_declaration"):
            return self.type_item(node, end, node, specialization=False)
        if t == "declaration":
            return self.declaration(node, end)
        what = "file-scope asm" if "asm" in node_text(node, data)[:8] else f"`{_norm(node_text(node, data))[:40]}`"
        return self.cut(node, end, what, "not device code")

    def error(self, node: Node, end: int) -> _Outcome | None:
        """Text that does not parse: dropped, except a kernel recovered from it (nvcc reports its errors)."""
        kernels = [k for k in (self._model.kernels if self._model else ())
                   if node.start_byte <= k.span.start and k.span.end <= end]
        if not kernels:
            if not node_text(node, self.data).strip():
                return None
            return self.cut(node, end, "text that does not parse", "it cannot be checked for host code")
        # One kernel at most per ERROR region in practice; the rest of the region is cut around it.
        k = kernels[0]
        text = self.data[k.span.start : k.span.end].decode("utf-8", "replace")
        if self.kernel is not None and k.name != self.kernel:
            return self.cut(node, end, f"kernel {k.name}", f"only `{self.kernel}` is launched", host=False)
        item = Item(Kind.KERNEL, (k.name,), k.uses, k.span, self.line(k.span.start), text)
        self._error_cuts.extend(s for s in (_Cut(node.start_byte, k.span.start), _Cut(k.span.end, end))
                                if self.data[s.start : s.end].strip())
        return item

    def conditional(self, node: Node, end: int, ns: tuple[str, ...]) -> _Outcome | None:
        """A ``#if`` block is kept whole when all of it is device code, else cut whole (directives balance)."""
        kept: list[Item] = []
        cuts: list[_Cut] = []
        body = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) not in ("name", "condition")]
        for c, cend in _top_nodes(body):
            out = self.visit(c, cend, ns)
            if isinstance(out, Item):
                kept.append(out)
            elif isinstance(out, list):
                kept.extend(out)
            elif isinstance(out, _Cut):
                cuts.append(out)
        if cuts:
            reports = [r for c in cuts for r in c.reports]
            reports.append(Dropped(self.line(node.start_byte), "the #if block around them",
                                   "a conditional block is kept only when all of it is device code",
                                   any(r.host for r in reports)))
            return _Cut(node.start_byte, end, reports)
        names = [n for k in kept for n in k.names]
        return self.item(Kind.CONDITIONAL, node, end, names, macro_like=bool(kept) and all(k.macro_like for k in kept))

    def namespace(self, node: Node, end: int, ns: tuple[str, ...]) -> _Outcome | None:
        """A namespace of kept members; the namespace around the kernel itself is flattened to its members.

        Why flattened: a candidate's text takes the place of the kernel's definition in the user's file, which
        is already inside that namespace; re-opening it there would nest it a second time.
        """
        nm = node.child_by_field_name("name")
        name = node_text(nm, self.data).replace(" ", "") if nm is not None else ""
        parts = tuple(p for p in name.split("::") if p)
        if parts and (parts[0] in RESERVED_NAMESPACES or parts[0].startswith("__")):
            return self.cut(node, end, f"namespace {name}", "adding to a library namespace changes library code")
        body = node.child_by_field_name("body")
        if body is None:
            return self.item(Kind.NAMESPACE, node, end, parts)
        inner: list[Item] = []
        for c, cend in _top_nodes(body.children):
            if self.existing(c, cend) and not self._is_kernel(c):
                self.cuts.append(_Cut(c.start_byte, cend))
                continue
            out = self.visit(c, cend, (*ns, *parts))
            if isinstance(out, Item):
                inner.append(out)
            elif isinstance(out, list):
                inner.extend(out)
            elif isinstance(out, _Cut):
                self.cuts.append(out)
        if self.kernel is not None and any(i.kind is Kind.KERNEL and self.kernel in i.names for i in inner):
            return inner
        if not inner:
            return _Cut(node.start_byte, end) if self.file is not None else None
        text = self.cut_text(node.start_byte, end)
        return Item(Kind.NAMESPACE, tuple(dict.fromkeys((*parts, *(n for i in inner for n in i.names)))),
                    frozenset(parts).union(*(i.uses for i in inner)), Span(node.start_byte, end),
                    self.line(node.start_byte), text)

    def linkage(self, node: Node, end: int) -> _Outcome | None:
        """``extern "C"`` is kept for kernels only (the name a launcher looks up); any other block is host."""
        body = node.child_by_field_name("body")
        if body is not None and body.type == "function_definition" and self.has(body, "__global__"):
            return self.function(body, node, end, None)
        if body is not None and body.type == "declaration_list":
            fns = [c for c, _ in _top_nodes(body.children) if c.is_named and c.type != "comment"]
            if fns and all(c.type == "function_definition" and self.has(c, "__global__") for c in fns):
                names = [_declarator_name(c.child_by_field_name("declarator"), self.data)[0] for c in fns]
                if self.kernel is None or names == [self.kernel]:
                    return self.item(Kind.KERNEL, node, end, names)
        return self.cut(node, end, 'extern "C" block', "only a kernel may have C linkage; the rest is host code")

    def template(self, node: Node, end: int) -> _Outcome | None:
        inner = next((c for c in node.named_children if c.type not in ("template_parameter_list", "comment")), None)
        if inner is None:
            return self.cut(node, end, "template", "not device code")
        params = node.child_by_field_name("parameters")
        explicit = params is not None and not params.named_children
        if inner.type == "function_definition":
            return self.function(inner, node, end, node)
        if inner.type in (*_TYPE_SPECIFIERS, "alias_declaration", "type_definition"):
            return self.type_item(node, end, inner, specialization=explicit or self.specialized(inner))
        if inner.type == "declaration":
            return self.declaration(node, end, inner)
        return self.cut(node, end, "template", "not device code")

    def specialized(self, spec: Node) -> bool:
        nm = spec.child_by_field_name("name")
        return nm is not None and nm.type in ("template_type", "qualified_identifier")

    @staticmethod
    def has(node: Node, token: str) -> bool:
        return any(c.type == token for c in node.children)

    def function(self, fn: Node, outer: Node, end: int, template: Node | None) -> _Outcome | None:
        name, _ = _declarator_name(fn.child_by_field_name("declarator"), self.data)
        body = fn.child_by_field_name("body")
        if self.has(fn, "__global__"):
            if self.kernel is not None and name != self.kernel:
                return self.cut(outer, end, f"kernel {name}", f"only `{self.kernel}` is launched", host=False)
            return self.item(Kind.KERNEL, outer, end, (name,))
        what = f"function {name}" if name else "function"
        if not self.has(fn, "__device__"):
            return self.cut(outer, end, f"host {what}", "only __device__ functions are kept")
        bad = self.bad_attributes(outer, body)
        if bad is not None:
            return self.cut(outer, end, what, bad)
        if self.has(fn, "__host__"):
            why = self.host_reachable(name)
            if why is not None:
                return self.cut(outer, end, f"__host__ __device__ {what}", why)
            return self.item(Kind.HOST_DEVICE_FUNCTION, outer, end, (name,), uses=_uses(outer, self.data) - {name})
        return self.item(Kind.DEVICE_FUNCTION, outer, end, (name,), uses=_uses(outer, self.data) - {name})

    def declaration(self, node: Node, end: int, decl: Node | None = None) -> _Outcome | None:
        """A prototype or a variable: device ones and compile-time constants are kept."""
        d = decl if decl is not None else node
        declarators = d.children_by_field_name("declarator")
        names = [_declarator_name(x, self.data)[0] for x in declarators]
        label = ", ".join(n for n in names if n) or _norm(node_text(d, self.data))[:40]
        bad = self.bad_attributes(d)
        if bad is not None:
            return self.cut(node, end, label, bad)
        specs = self.specs(d)
        if any(declares_function(x) for x in declarators):
            if "__device__" in specs or "__global__" in specs:
                if "__host__" in specs:
                    why = next((w for w in map(self.host_reachable, names) if w), None)
                    if why is not None:
                        return self.cut(node, end, f"declaration of {label}", why)
                return self.item(Kind.DEVICE_FUNCTION, node, end, names)
            return self.cut(node, end, f"declaration of host function {label}", "only device code is kept")
        tnode = d.child_by_field_name("type")
        if tnode is not None and tnode.type in _TYPE_SPECIFIERS and tnode.child_by_field_name("body") is not None:
            why = self.type_problem(tnode, specialization=False)
            if why is not None:
                return self.cut(node, end, label, why)
        type_names = self.type_names(tnode) if tnode is not None else []
        if specs & {"__device__", "__constant__", "__shared__"}:
            return self.item(Kind.DEVICE_VARIABLE, node, end, [*names, *type_names])
        if "__managed__" in specs:
            return self.cut(node, end, f"__managed__ variable {label}", "managed memory is host-visible state")
        if "constexpr" in specs:
            return self.item(Kind.CONSTANT, node, end, [*names, *type_names])
        if "const" in specs and "extern" not in specs and self.simple_constant(d):
            return self.item(Kind.CONSTANT, node, end, [*names, *type_names])
        return self.cut(node, end, f"host variable {label}",
                        "its initializer would run in the host program; use constexpr or __constant__")


    def simple_constant(self, d: Node) -> bool:
        """A ``const`` of a built-in type initialised from literals and names (no call can run)."""
        tnode = d.child_by_field_name("type")
        if tnode is None or tnode.type not in ("primitive_type", "sized_type_specifier"):
            return False
        for x in d.children_by_field_name("declarator"):
            if x.type != "init_declarator":
                return False
            value = x.child_by_field_name("value")
            if value is None:
                return False
            if any(n.type not in _SIMPLE_CONST for n in walk(value)):
                return False
        return True

    def type_names(self, spec: Node) -> list[str]:
        nm = spec.child_by_field_name("name")
        out = [node_text(nm, self.data)] if nm is not None and nm.type == "type_identifier" else []
        body = spec.child_by_field_name("body")
        if spec.type == "enum_specifier" and body is not None:
            out += [node_text(e.child_by_field_name("name"), self.data) for e in body.named_children  # type: ignore[arg-type]
                    if e.type == "enumerator" and e.child_by_field_name("name") is not None]
        return out

    def type_item(self, outer: Node, end: int, node: Node, specialization: bool) -> _Outcome | None:
        """A type definition, typedef or alias; a class body must hold device code only."""
        names: list[str] = []
        specs: list[Node] = []
        if node.type in _TYPE_SPECIFIERS:
            specs.append(node)
        else:
            for c in node.named_children:
                if c.type in _TYPE_SPECIFIERS:
                    specs.append(c)
                elif c.type in ("type_identifier", "primitive_type") and node.type == "type_definition":
                    pass
            for x in node.children_by_field_name("declarator"):
                names.append(_declarator_name(x, self.data)[0])
            nm = node.child_by_field_name("name")
            if nm is not None:
                names.append(node_text(nm, self.data))
        for s in specs:
            names += self.type_names(s)
            why = self.type_problem(s, specialization)
            if why is not None:
                tag = s.child_by_field_name("name")
                label = f"{s.type.split('_')[0]} {node_text(tag, self.data)}" if tag is not None else "type"
                return self.cut(outer, end, label, why)
        bad = self.bad_attributes(outer)
        if bad is not None:
            return self.cut(outer, end, "type", bad)
        return self.item(Kind.TYPE, outer, end, names)

    def type_problem(self, spec: Node, specialization: bool) -> str | None:
        """Why a class body could run host code, or None: its member functions must be device code."""
        body = spec.child_by_field_name("body")
        if body is None or spec.type == "enum_specifier":
            return None
        tag = spec.child_by_field_name("name")
        tag_text = node_text(tag, self.data) if tag is not None else ""
        if "::" in tag_text and tag_text.split("::")[0].strip() in RESERVED_NAMESPACES:
            return "it specialises a library template, which changes library code"
        # Host-callable members are fine on a new type (only new code can name it); not on one the file's
        # code names or a specialisation of a template from elsewhere.
        named = specialization or (self.file is not None and tag_text.split("<")[0].strip() in self.file.names)
        for m in body.children:
            t = m.type
            if t in ("{", "}", ";", ":", "comment", "access_specifier", "alias_declaration", "type_definition",
                     "using_declaration", "static_assert_declaration") or (not m.is_named and t != "ERROR"):
                continue
            if t == "field_declaration":
                why = self.member_field(m, named)
            elif t in ("function_definition", "declaration", "template_declaration", "friend_declaration"):
                why = self.member_function(m, named)
            elif t in _TYPE_SPECIFIERS:
                why = self.type_problem(m, named)
            elif t == "preproc_call" and node_text(m, self.data).split()[:2] == ["#pragma", "unroll"]:
                why = None
            else:
                why = f"a member at line {self.line(m.start_byte)} is not a field, a type or a __device__ function"
            if why is not None:
                return why
        return None

    def member_field(self, m: Node, named: bool) -> str | None:
        specs = self.specs(m)
        line = self.line(m.start_byte)
        if any(declares_function(x) for x in m.children_by_field_name("declarator")):
            if "__device__" not in specs:
                return f"member function declared at line {line} is host code; mark it __device__"
            if "__host__" in specs and named:
                return f"a __host__ __device__ member (line {line}) on a type the file's host code can reach"
            return None
        tnode = m.child_by_field_name("type")
        if tnode is not None and tnode.type in _TYPE_SPECIFIERS:
            why = self.type_problem(tnode, named)
            if why is not None:
                return why
        if "static" in specs and "constexpr" not in specs and not ("const" in specs and "inline" not in specs):
            return f"static data member at line {line} would be initialised by the host program; use constexpr"
        return self.bad_attributes(m)

    def member_function(self, m: Node, named: bool) -> str | None:
        line = self.line(m.start_byte)
        fn: Node | None = m
        if m.type in ("template_declaration", "friend_declaration"):
            fn = next((c for c in m.named_children if c.type in ("function_definition", "declaration",
                                                                   "field_declaration")), None)
            if fn is None:
                return None if m.type == "friend_declaration" else f"member template at line {line} is not a function"
        if fn is None:
            return None
        if fn.type == "field_declaration":
            return self.member_field(fn, named)
        if fn.type == "declaration":
            return None if "__device__" in self.specs(fn) else f"member at line {line} is host code; mark it __device__"
        if any(c.type in ("default_method_clause", "delete_method_clause") for c in fn.children):
            return None
        if not self.has(fn, "__device__"):
            return f"member function at line {line} is host code; mark it __device__"
        if self.has(fn, "__host__") and named:
            return f"a __host__ __device__ member (line {line}) on a type the file's host code can reach"
        return self.bad_attributes(fn, fn.child_by_field_name("body"))

    # ------------------------------------------------------------------ the whole text
    def cut_text(self, start: int, end: int) -> str:
        """The text of ``[start, end)`` with the cuts recorded inside it removed."""
        out: list[bytes] = []
        pos = start
        for c in sorted(self.cuts, key=lambda c: c.start):
            if c.start < pos or c.end > end:
                continue
            s, e = _whole_lines(self.data, c.start, c.end)
            s, e = max(s, start), min(e, end)
            out.append(self.data[pos:s])
            pos = e
        out.append(self.data[pos:end])
        return b"".join(out).decode("utf-8", "replace")

    def run(self, only_needed: bool) -> Reduced:
        self.cuts: list[_Cut] = []
        self._error_cuts: list[_Cut] = []
        root = parse_tree(self.data).root_node
        items: list[Item] = []
        for c, end in _top_nodes(root.children):
            if self.existing(c, end) and not (c.type in ("function_definition", "template_declaration",
                                                         "linkage_specification") and self._is_kernel(c)):
                self.cuts.append(_Cut(c.start_byte, end))
                continue
            out = self.visit(c, end, ())
            if isinstance(out, Item):
                items.append(out)
            elif isinstance(out, list):
                items.extend(out)
            elif isinstance(out, _Cut):
                self.cuts.append(out)
        for ec in self._error_cuts:
            ec.reports.append(Dropped(self.line(ec.start), "text that does not parse",
                                      "it cannot be checked for host code"))
            self.cuts.append(ec)
        items = self.used(items, only_needed)
        dropped = [r for c in self.cuts for r in c.reports]
        src = self.cut_text(0, len(self.data))
        return Reduced(src if dropped or self.cuts else self.src.text, tuple(items),
                       tuple(sorted(dropped, key=lambda d: d.line)))

    def _is_kernel(self, node: Node) -> bool:
        return b"__global__" in self.data[node.start_byte : node.end_byte] and (
            self.kernel is None or self.kernel.encode() in self.data[node.start_byte : node.end_byte])

    def used(self, items: list[Item], only_needed: bool) -> list[Item]:
        """Drop macros nothing kept uses (and, with ``only_needed``, anything the kernel does not need)."""
        def is_root(i: Item) -> bool:
            if i.kind is Kind.KERNEL or not i.names:
                return True
            return not only_needed and not i.macro_like

        by_name: dict[str, list[Item]] = {}
        for i in items:
            for n in i.names:
                by_name.setdefault(n, []).append(i)
        keep = {id(i) for i in items if is_root(i)}
        todo = [n for i in items if id(i) in keep for n in i.uses]
        seen: set[str] = set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            for i in by_name.get(n, ()):
                if id(i) not in keep:
                    keep.add(id(i))
                    todo.extend(i.uses)
        out = []
        for i in items:
            if id(i) in keep:
                out.append(i)
                continue
            what = f"#define {i.names[0]}" if i.kind is Kind.MACRO else f"{i.kind.value} {', '.join(i.names)}"
            why = "nothing kept uses it" if i.macro_like else "the kernel does not use it"
            self.cuts.append(_Cut(i.span.start, i.span.end, [Dropped(i.line, what, why, host=False)]))
        return out


def _whole_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """Widen a cut to whole lines when nothing else is on them, so no blank husk is left behind."""
    ls = data.rfind(b"\n", 0, start) + 1
    le = data.find(b"\n", end)
    le = len(data) if le < 0 else le
    if data[ls:start].strip() or data[end:le].strip():
        return start, end
    return ls, min(len(data), le + 1)


@functools.lru_cache(maxsize=256)
def _reduce_cached(text: str, kernel: str | None, only_needed: bool) -> Reduced:
    return _Reducer(text, kernel, None).run(only_needed)


def reduce_device(text: str, *, kernel: str | None = None, file_text: str | None = None,
                  only_needed: bool = False) -> Reduced:
    """``text`` reduced to device code.

    ``kernel``: other kernels are dropped. ``file_text``: the user's file, so constructs it already holds
    are cut silently (they are not the candidate's) and host-callable code it could reach by name is
    dropped. ``only_needed``: keep only what the kernel ``kernel`` needs (a variant file copied whole).
    """
    if file_text is None:
        return _reduce_cached(text, kernel, only_needed)
    return _Reducer(text, kernel, file_facts(file_text)).run(only_needed)


def device_source(text: str, kernel: str | None = None) -> str:
    """Just the reduced text (what a build compiles)."""
    return reduce_device(text, kernel=kernel).source
