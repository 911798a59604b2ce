"""Parse a CUDA file with tree-sitter-cuda into the plain ``FileModel``.

Why this shape: tree-sitter's error recovery is local but not perfect — an unbalanced parenthesis in a
host function can swallow the kernels after it into an ERROR node. A user typing in one function must
never lose the hints on the others, so every ``__global__`` that the whole-file parse did not yield
cleanly is re-parsed from its own text (``_recover``), and its spans are shifted back.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser, Tree

from .model import (
    Declaration,
    DeclKind,
    FileModel,
    Include,
    Kernel,
    LaunchBounds,
    LaunchSite,
    Param,
    SyntaxProblem,
    TemplateParam,
)
from .text import SourceText, Span
from .tree import declares_function, node_text, walk

LANGUAGE = Language(tree_sitter_cuda.language())
_local = threading.local()

_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_PUNCT = frozenset({"(", ")", ",", "<<<", ">>>", "<", ">", "{", "}", ";"})
_ID_TYPES = frozenset(
    {"identifier", "type_identifier", "namespace_identifier", "field_identifier", "statement_identifier"}
)


def _parser() -> Parser:
    p: Parser | None = getattr(_local, "parser", None)
    if p is None:
        p = Parser(LANGUAGE)
        _local.parser = p
    return p


_ALIGN = re.compile(rb"__align__\s*\(\s*[^()]*\)")
#: the third argument of ``__launch_bounds__(threads, blocks, cluster)`` (group 1)
_LB_ARG = rb"(?:[^(),]|\([^()]*\))+"  # an argument, with at most one level of parentheses
_LB3 = re.compile(rb"__launch_bounds__\s*\(" + _LB_ARG + rb"," + _LB_ARG + rb"(," + _LB_ARG + rb")\)")
#: ``__device__``/``__host__`` of an extended lambda ``[=] __device__ (float v) { ... }`` (group 1)
_LAMBDA = re.compile(rb"\]\s*((?:(?:__host__|__device__)\s*)+)(?=[({])")


#: ``#define DEV __forceinline__ __device__``: an object-like macro that is nothing but function qualifiers.
#: tree-sitter reads ``template <typename T> DEV T f(...)`` as a function whose type is ``DEV`` with an ERROR
#: for ``T``; CUDA projects write their device helpers this way (issue 29). ``__global__`` is not among them:
#: a kernel is found by its own token.
_QUALIFIER = rb"(?:__device__|__host__|__forceinline__|__noinline__|__inline__|inline|static|constexpr)"
_QUALIFIER_MACRO = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+((?:" + _QUALIFIER
                              + rb"[ \t]*)+)(?://[^\n]*)?$", re.MULTILINE)


def qualifier_macros(data: bytes) -> dict[str, frozenset[str]]:
    """The file's macros that expand to function qualifiers only: name -> the qualifiers."""
    if b"define" not in data:
        return {}
    return {m.group(1).decode(): frozenset(q.decode() for q in m.group(2).split())
            for m in _QUALIFIER_MACRO.finditer(data)}


def _blank_qualifier_macros(data: bytes, known: Iterable[str] = ()) -> bytes:
    """``data`` with each use of a qualifier macro (``qualifier_macros``; ``known`` names more, defined in the
    headers the file includes) blanked, so the function it qualifies parses; the collector reads the original
    bytes and knows what the macro stands for."""
    defs = list(_QUALIFIER_MACRO.finditer(data)) if b"define" in data else []
    names = sorted({m.group(1) for m in defs} | {n.encode() for n in known}, key=len, reverse=True)
    if not names:
        return data
    keep = [(m.start(), m.end()) for m in defs]
    use = re.compile(rb"(?<![\w])(?:" + b"|".join(re.escape(n) for n in names) + rb")(?![\w])")

    def sub(m: re.Match[bytes]) -> bytes:
        return m.group(0) if any(a <= m.start() < b for a, b in keep) else b" " * (m.end() - m.start())

    return use.sub(sub, data)


def _blank(m: re.Match[bytes]) -> bytes:
    return b" " * (m.end() - m.start())


def _blank_group(m: re.Match[bytes]) -> bytes:
    whole = m.group(0)
    a, b = m.start(1) - m.start(), m.end(1) - m.start()
    return whole[:a] + b" " * (b - a) + whole[b:]


#: tree-sitter parses in this process of the texts in ``watched_parses``, by ``hash()`` of the bytes given to
#: ``parse_tree``: what a test reads to hold a job to one parse of its file (issue 15), with the real parser at
#: work rather than a stand-in. Only watched texts are counted, so a long-running server neither grows this
#: nor hashes every text it parses.
parse_counts: Counter[int] = Counter()
watched_parses: set[int] = set()


def parse_tree(data: bytes, old: Tree | None = None, macros: Iterable[str] = ()) -> Tree:
    """Parse bytes (incrementally when ``old`` was edited with ``Tree.edit``).

    The grammar's gaps are blanked to spaces of the same length before parsing, so every byte offset stays
    true to the original text (which is what the collector reads names and arguments from):
    ``__align__(N)`` would turn a whole struct into an ERROR, the third argument of ``__launch_bounds__``
    and the ``__device__`` of an extended lambda would each leave an ERROR in an otherwise valid function,
    and so would a qualifier macro (``DEV T f()`` with ``#define DEV __forceinline__ __device__``).
    """
    if watched_parses:
        key = hash(data)
        if key in watched_parses:
            parse_counts[key] += 1
    if b"__align__" in data:
        data = _ALIGN.sub(_blank, data)
    if b"__launch_bounds__" in data:
        data = _LB3.sub(_blank_group, data)
    if b"__device__" in data or b"__host__" in data:
        data = _LAMBDA.sub(_blank_group, data)
    data = _blank_qualifier_macros(data, macros)
    return _parser().parse(data, old) if old is not None else _parser().parse(data)



@functools.lru_cache(maxsize=16)
def file_tree(data: bytes) -> Tree:
    """The tree of a whole file, parsed once while it is in use.

    A job reads the file it works on three ways: its source model (``app.PreparedKernel``), the typedefs and
    macros the canonical form expands (``normalize.file_facts``) and the constructs the device-code reducer
    keeps (``reduce.file_facts``); through this they share one parse. Only file-level readers come here,
    so candidates' texts do not push the file out; the trees are only read, never edited.
    """
    return parse_tree(data)


def _span(node: Node, base: int = 0) -> Span:
    return Span(node.start_byte + base, node.end_byte + base)


def _has_token(node: Node, token: str) -> bool:
    return any(c.type == token for c in node.children)


def _uses(node: Node, data: bytes) -> frozenset[str]:
    """Identifiers a subtree refers to, including those inside macro bodies and preprocessor args."""
    out: set[str] = set()
    for n in walk(node):
        t = n.type
        if t in _ID_TYPES:
            out.add(node_text(n, data))
        elif t == "preproc_arg":
            out.update(m.decode() for m in _IDENT.findall(data[n.start_byte : n.end_byte]))
    return frozenset(out)


def _declarator_name(node: Node | None, data: bytes) -> tuple[str, Node | None]:
    """Walk nested declarators down to the declared identifier."""
    while node is not None:
        if node.type in ("identifier", "field_identifier", "type_identifier", "operator_name"):
            return node_text(node, data), node
        if node.type in ("qualified_identifier",):
            name = node.child_by_field_name("name")
            return (node_text(name, data), name) if name is not None else (node_text(node, data), node)
        if node.type == "template_function":
            name = node.child_by_field_name("name")
            return (node_text(name, data), name) if name is not None else ("", None)
        nxt = node.child_by_field_name("declarator")
        if nxt is None:
            named = [c for c in node.named_children if c.type not in ("type_qualifier", "attribute_specifier")]
            nxt = named[0] if named else None
        node = nxt
    return "", None


def _param(node: Node, data: bytes, base: int) -> Param:
    is_const = False
    const_span: Span | None = None
    for c in node.children:
        if c.type == "type_qualifier" and node_text(c, data) == "const":
            is_const = True
            const_span = _span(c, base)
    type_node = node.child_by_field_name("type")
    base_type = node_text(type_node, data) if type_node is not None else ""
    # `unsigned int`, `long long`: sized_type_specifier covers them; keep what is written.
    depth = 0
    restrict = False
    restrict_span: Span | None = None
    star_end: int | None = None
    reference = False
    dims: list[str] = []
    decl = node.child_by_field_name("declarator")
    cur = decl
    while cur is not None:
        if cur.type == "pointer_declarator":
            depth += 1
            # The parameter's own pointer is the innermost pointer_declarator, the `*` next to the name:
            # in `float* __restrict__* g` the restrict qualifies the pointee, `float** __restrict__ g`
            # is the restrict parameter. So each level overwrites what the outer ones found.
            restrict = False
            restrict_span = None
            for c in cur.children:
                if c.type == "*":
                    star_end = c.end_byte + base
                if c.type == "type_qualifier":
                    q = node_text(c, data)
                    if q in ("__restrict__", "__restrict", "restrict"):
                        restrict = True
                        restrict_span = _span(c, base)
            cur = cur.child_by_field_name("declarator")
        elif cur.type == "reference_declarator":
            reference = True
            named = cur.named_children
            cur = named[-1] if named else None
        elif cur.type == "array_declarator":
            size = cur.child_by_field_name("size")
            dims.append(node_text(size, data) if size is not None else "")
            cur = cur.child_by_field_name("declarator")
        elif cur.type == "parenthesized_declarator":
            named = cur.named_children
            cur = named[0] if named else None
        else:
            break
    name, name_node = _declarator_name(decl, data) if decl is not None else ("", None)
    name_span = _span(name_node, base) if name_node is not None else _span(node, base)
    return Param(
        name=name,
        type=base_type,
        pointer_depth=depth,
        is_const=is_const,
        is_restrict=restrict,
        is_reference=reference,
        array_dims=tuple(dims),
        text=node_text(node, data),
        span=_span(node, base),
        name_span=name_span,
        const_span=const_span,
        restrict_span=restrict_span,
        star_end=star_end,
    )


def _name_unnamed(params: tuple[Param, ...]) -> tuple[Param, ...]:
    """Give each unnamed parameter a name (``arg2`` for the third) that no other parameter has.

    Why: the spec, the annotations and the worker refer to arguments by name; a tag parameter
    (``std::bool_constant<Atomic>``) or ``int /*unused*/`` would otherwise be the empty name, and a fix
    such as ``// @warpforge arg  = VALUE`` could not be written. Only the model gets the name: the
    parameter's text, and so the user's file, is left as it is."""
    taken = {p.name for p in params if p.name}
    out: list[Param] = []
    for i, p in enumerate(params):
        if p.name:
            out.append(p)
            continue
        name = f"arg{i}"
        while name in taken:
            name = "_" + name
        taken.add(name)
        out.append(replace(p, name=name, unnamed=True))
    return tuple(out)


def _template_params(node: Node, data: bytes, base: int) -> tuple[TemplateParam, ...]:
    plist = node.child_by_field_name("parameters")
    out: list[TemplateParam] = []
    if plist is None:
        return ()
    for c in plist.named_children:
        default = c.child_by_field_name("default_value") or c.child_by_field_name("default_type")
        if c.type in ("type_parameter_declaration", "optional_type_parameter_declaration"):
            names = [x for x in c.named_children if x.type == "type_identifier"]
            nm = node_text(names[0], data) if names else ""
            out.append(TemplateParam(nm, "type", "typename", node_text(default, data) if default else None,
                                     _span(c, base)))
        elif c.type in ("parameter_declaration", "optional_parameter_declaration"):
            decl = c.child_by_field_name("declarator")
            nm, _ = _declarator_name(decl, data)
            tnode = c.child_by_field_name("type")
            out.append(TemplateParam(nm, "value", node_text(tnode, data) if tnode else "",
                                     node_text(default, data) if default else None, _span(c, base)))
        elif c.type == "variadic_type_parameter_declaration":
            out.append(TemplateParam(node_text(c, data), "pack", "typename", None, _span(c, base)))
    return tuple(out)


def _split_args(text: str) -> list[str]:
    """Split on commas outside parentheses: ``MAX(a, b), 2`` -> ``["MAX(a, b)", "2"]``."""
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _comment_block_above(src: SourceText, offset: int) -> Span | None:
    """The run of ``//`` comment lines ending on the line directly above ``offset``."""
    line = src.line_of(offset)
    first = line
    while first > 0 and src.line_text(first - 1).lstrip().startswith("//"):
        first -= 1
    if first == line:
        return None
    return Span(src.line_starts[first], src.line_starts[line] - 1)


def _kernel(
    fn: Node,
    outer: Node,
    data: bytes,
    src: SourceText,
    base: int,
    namespace: tuple[str, ...],
    template: Node | None,
    extern_c: bool,
    recovered: bool,
) -> Kernel | None:
    declarator = fn.child_by_field_name("declarator")
    body = fn.child_by_field_name("body")
    if declarator is None or body is None:
        return None
    # Find the function_declarator (it may sit under pointer/reference declarators for odd returns).
    fdecl: Node | None = declarator
    while fdecl is not None and fdecl.type != "function_declarator":
        fdecl = fdecl.child_by_field_name("declarator")
    if fdecl is None:
        return None
    name, name_node = _declarator_name(fdecl.child_by_field_name("declarator"), data)
    plist = fdecl.child_by_field_name("parameters")
    if not name or name_node is None or plist is None:
        return None
    params = _name_unnamed(tuple(
        _param(c, data, base) for c in plist.named_children if c.type == "parameter_declaration"
    ))
    lb: LaunchBounds | None = None
    for c in fn.children:
        if c.type == "launch_bounds":
            # Read the arguments from the text as written: the grammar cannot parse the 3-argument form
            # (``parse_tree`` blanks its third argument, or it lands in an ERROR when it has parentheses).
            inner = data[c.start_byte : c.end_byte].decode("utf-8", errors="replace")
            inner = inner[inner.index("(") + 1 : inner.rindex(")")] if "(" in inner and ")" in inner else ""
            args = tuple(a for a in _split_args(inner) if a)
            lb = LaunchBounds(args, _span(c, base))
    abs_start = outer.start_byte + base
    comment = _comment_block_above(src, abs_start)
    sig_end = plist.end_byte + base
    return Kernel(
        name=name,
        namespace=namespace,
        template_params=_template_params(template, data, base) if template is not None else (),
        params=params,
        launch_bounds=lb,
        extern_c=extern_c,
        span=Span(abs_start, outer.end_byte + base),
        definition_span=_span(fn, base),
        signature_span=Span(fn.start_byte + base, sig_end),
        body_span=_span(body, base),
        name_span=_span(name_node, base),
        params_span=_span(plist, base),
        declarator_start=declarator.start_byte + base,
        comment_span=comment,
        start_line=src.line_of(abs_start),
        end_line=src.line_of(max(abs_start, outer.end_byte + base - 1)),
        uses=_uses(fn, data) | (_uses(template, data) if template is not None else frozenset()),
        recovered=recovered,
    )


class _Collector:
    """One pass over the tree collecting kernels, declarations, includes and launch sites."""

    def __init__(
        self,
        src: SourceText,
        data: bytes,
        base: int,
        recovered: bool,
        namespace: tuple[str, ...] = (),
        extern_c: bool = False,
    ) -> None:
        self.src = src
        self.data = data
        self.base = base
        self.recovered = recovered
        #: the context a recovered chunk sits in (namespaces and ``extern "C" {`` blocks around it)
        self.namespace = namespace
        self.extern_c = extern_c
        self.kernels: list[Kernel] = []
        self.decls: list[Declaration] = []
        self.includes: list[Include] = []
        self.instantiations: list[Span] = []
        self.linkage_prefixes: list[Span] = []
        self.launches: list[LaunchSite] = []
        self.problems: list[SyntaxProblem] = []
        #: macros that stand for function qualifiers (``qualifier_macros``), of the whole file
        self.qualifier_macros: dict[str, frozenset[str]] = {}

    def macro_qualifiers(self, outer: Node, end: int) -> tuple[frozenset[str], frozenset[str], int]:
        """(the qualifier macros written in ``outer`` before byte ``end`` or just before it, the qualifiers they
        stand for, where the item starts with them): the parse saw blanks where they are (``parse_tree``), so
        a leading ``DEV`` lies before the node."""
        start = outer.start_byte
        if not self.qualifier_macros:
            return frozenset(), frozenset(), start
        data = self.data
        while True:  # leading macros, right to left
            i = start
            while i > 0 and data[i - 1:i] in b" \t\r\n":
                i -= 1
            j = i
            while j > 0 and (data[j - 1:j].isalnum() or data[j - 1:j] == b"_"):
                j -= 1
            if j == i or data[j:i].decode() not in self.qualifier_macros:
                break
            start = j
        used = frozenset(n for m in _IDENT.findall(data[start:end]) if (n := m.decode()) in self.qualifier_macros)
        return used, frozenset(q for n in used for q in self.qualifier_macros[n]), start

    def top(self, root: Node) -> None:
        for child in root.children:
            # One problem per broken top-level item, located at its first error. A host function with an
            # unclosed call is a function_definition (not an ERROR) that merely *contains* an error, and
            # it may swallow the rest of the file: it must be reported all the same.
            if child.has_error or child.is_missing:
                self.problems.append(self._problem(child))
            self.item(child, self.namespace, None)

    def _problem(self, node: Node) -> SyntaxProblem:
        bad = _first_error(node) or node
        offset = bad.start_byte + self.base
        if bad.is_missing:
            message = f"syntax error: missing `{bad.type}`"
        else:
            message = "syntax error: tree-sitter could not parse this region"
        return SyntaxProblem(Span(offset, max(offset, bad.end_byte + self.base)), self.src.line_of(offset), message)

    def item(self, node: Node, namespace: tuple[str, ...], conditional: Span | None) -> None:
        t = node.type
        data = self.data
        base = self.base
        if t == "namespace_definition":
            nm = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            # `namespace a::b {` (C++17) is two levels, as `namespace a { namespace b {` would be.
            inner = (*namespace, *node_text(nm, data).replace(" ", "").split("::")) if nm is not None else namespace
            if body is not None:
                for c in body.children:
                    self.item(c, inner, conditional)
            return
        if t in ("preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef"):
            cond = conditional if conditional is not None else _span(node, base)
            for i, c in enumerate(node.children):
                if c.is_named and node.field_name_for_child(i) not in ("name", "condition"):
                    self.item(c, namespace, cond)
            return
        if t == "linkage_specification":
            body = node.child_by_field_name("body")
            if body is None:
                return
            lang = node.child_by_field_name("value")
            outer_c = self.extern_c
            # The flag (not a parameter) so that kernels nested deeper, in a namespace or an #if inside the
            # `extern "C" { ... }` block, get C linkage too.
            self.extern_c = lang is not None and node_text(lang, data) == '"C"'
            if body.type != "declaration_list":
                self.linkage_prefixes.append(Span(node.start_byte + base, body.start_byte + base))
            try:
                if body.type == "function_definition":
                    self.function(body, node, namespace, None, False, conditional)
                elif body.type == "declaration_list":
                    for c in body.children:
                        self.item(c, namespace, conditional)
                else:
                    self.item(body, namespace, conditional)
            finally:
                self.extern_c = outer_c
            return
        if t == "template_instantiation":
            self.instantiations.append(_span(node, base))
            return
        if t == "template_declaration":
            inner_fn = next((c for c in node.named_children if c.type == "function_definition"), None)
            if inner_fn is not None:
                self.function(inner_fn, node, namespace, node, False, conditional)
            else:
                names = self.declared_names(node)
                self.decls.append(Declaration(DeclKind.TYPE, names, _span(node, base),
                                              _uses(node, data), "", namespace, conditional))
            return
        if t == "function_definition":
            self.function(node, node, namespace, None, False, conditional)
            return
        if t == "preproc_include":
            path = node.child_by_field_name("path")
            if path is not None:
                ptxt = node_text(path, data)
                self.includes.append(Include(ptxt.strip('<>"'), path.type == "system_lib_string",
                                             _span(node, base), conditional))
            return
        if t in ("preproc_def", "preproc_function_def"):
            nm = node.child_by_field_name("name")
            if nm is not None:
                self.decls.append(Declaration(DeclKind.MACRO, (node_text(nm, data),), _span(node, base),
                                              _uses(node, data) - {node_text(nm, data)}, "", namespace,
                                              conditional))
            return
        if t == "declaration":
            # Forward declarations of kernels/functions and global variables.
            space = next((node_text(c, data) for c in node.children
                          if node_text(c, data) in ("__constant__", "__device__", "__managed__", "__shared__")),
                         "")
            names = self.declared_names(node)
            declarators = node.children_by_field_name("declarator")
            is_fn = any(declares_function(d) for d in declarators)
            macros, quals, lead = self.macro_qualifiers(
                node, declarators[0].start_byte if declarators else node.end_byte)
            space = space or ("__device__" if is_fn and "__device__" in quals else "")
            kind = DeclKind.GLOBAL if not is_fn else (
                DeclKind.DEVICE_FUNCTION if space or _has_token(node, "__global__") else DeclKind.HOST_FUNCTION)
            self.decls.append(Declaration(kind, names, Span(lead + base, node.end_byte + base),
                                          (_uses(node, data) | macros) - set(names), space, namespace, conditional))
            self.scan_launches(node, "")
            return
        if t in ("using_declaration", "namespace_alias_definition"):
            nm = node.child_by_field_name("name")
            names = (node_text(nm, data),) if nm is not None and t == "namespace_alias_definition" else ()
            self.decls.append(Declaration(DeclKind.USING, names, _span(node, base), _uses(node, data),
                                          "", namespace, conditional))
            return
        if t in ("type_definition", "struct_specifier", "class_specifier", "union_specifier",
                 "enum_specifier", "alias_declaration"):
            names = self.declared_names(node)
            self.decls.append(Declaration(DeclKind.TYPE, names, _span(node, base), _uses(node, data),
                                          "", namespace, conditional))
            return
        if t == "ERROR":
            # Reported by ``top`` (once per top-level item); launches inside are still worth having.
            self.scan_launches(node, "")
            return
        if t in ("comment", ";", "{", "}", "preproc_call", "#endif", "#else"):
            return
        self.scan_launches(node, "")


    def declared_names(self, node: Node) -> tuple[str, ...]:
        data = self.data
        names: list[str] = []
        nm = node.child_by_field_name("name")
        if nm is not None:
            # `template <> struct Bomb<0>` declares `Bomb` (a specialization): the name without its arguments
            inner = nm.child_by_field_name("name") if nm.type == "template_type" else None
            names.append(node_text(inner if inner is not None else nm, data))
        for d in node.children_by_field_name("declarator"):
            n, _ = _declarator_name(d, data)
            if n:
                names.append(n)
        if node.type == "template_declaration":
            for c in node.named_children:
                if c.type not in ("template_parameter_list",):
                    names.extend(self.declared_names(c))
        # Enumerators are names too; struct bodies of typedefs carry the struct tag.
        for c in node.named_children:
            if c.type in ("struct_specifier", "enum_specifier", "class_specifier", "union_specifier"):
                tag = c.child_by_field_name("name")
                if tag is not None:
                    inner = tag.child_by_field_name("name") if tag.type == "template_type" else None
                    names.append(node_text(inner if inner is not None else tag, data))
                names.extend(self._enumerators(c))
        if node.type == "enum_specifier":
            names.extend(self._enumerators(node))
        return tuple(dict.fromkeys(names))

    def _enumerators(self, node: Node) -> list[str]:
        body = node.child_by_field_name("body")
        if body is None or body.type != "enumerator_list":
            return []
        out = []
        for e in body.named_children:
            nm = e.child_by_field_name("name")
            if nm is not None:
                out.append(node_text(nm, self.data))
        return out

    def function(
        self,
        fn: Node,
        outer: Node,
        namespace: tuple[str, ...],
        template: Node | None,
        extern_c: bool,
        conditional: Span | None,
    ) -> None:
        data = self.data
        if _has_token(fn, "__global__"):
            k = _kernel(fn, outer, data, self.src, self.base, namespace, template, extern_c or self.extern_c,
                        self.recovered)
            if k is not None and not _contains_error(fn.child_by_field_name("declarator")):
                self.kernels.append(k)
            return
        declarator = fn.child_by_field_name("declarator")
        name, _ = _declarator_name(declarator, data)
        # `DEV T f(...)` with `#define DEV __forceinline__ __device__`: a device function that needs the macro
        macros, quals, lead = self.macro_qualifiers(
            outer, declarator.start_byte if declarator is not None else fn.end_byte)
        is_device = _has_token(fn, "__device__") or "__device__" in quals
        kind = DeclKind.DEVICE_FUNCTION if is_device else DeclKind.HOST_FUNCTION
        self.decls.append(Declaration(kind, (name,) if name else (), Span(lead + self.base, outer.end_byte + self.base),
                                      (_uses(outer, data) | macros) - {name}, "", namespace, conditional))
        if not is_device or _has_token(fn, "__host__") or "__host__" in quals:
            self.scan_launches(fn, name)

    def scan_launches(self, node: Node, function: str) -> None:
        for n in walk(node, ("call_expression",)):
            cfg = next((c for c in n.children if c.type == "kernel_call_syntax"), None)
            site: LaunchSite | None = None
            if cfg is not None:
                site = self._launch(n, cfg, function)
            else:
                callee = n.child_by_field_name("function")
                name = node_text(callee, self.data).replace(" ", "").removeprefix("::") if callee is not None else ""
                if name in _API_LAUNCHES:
                    site = self._api_launch(n, node, function, name)
            if site is not None:
                self.launches.append(site)

    def _api_launch(self, call: Node, scope: Node, function: str, api: str) -> LaunchSite | None:
        """``cudaLaunchKernel(func, grid, block, args, smem, stream)`` or ``cudaLaunchKernelEx(&cfg, func,
        args...)``: the kernel from ``func`` (through casts and ``&``), the kernel's arguments from the
        ``void* args[] = {&a, &b}`` array of the same function, or from the call; ``cfg``'s grid, block and
        shared memory from its last assignments (or aggregate initializer) before the call in ``scope``."""
        data, base = self.data, self.base
        al = call.child_by_field_name("arguments")
        a = [c for c in al.named_children if c.type != "comment"] if al is not None else []
        ex = api == "cudaLaunchKernelEx"
        if len(a) < (2 if ex else 3):
            return None
        named = _launched_kernel(a[1] if ex else a[0], data)
        if named is None:
            return None
        kname, targs = named
        head = LaunchSite(kernel=kname.split("::")[-1], template_args=targs, grid="?", block="?", smem=None,
                          stream=None, args=(), span=_span(call, base),
                          config_span=_span(al, base) if al is not None else _span(call, base), function=function,
                          line=self.src.line_of(call.start_byte + base))
        if not ex:
            args: tuple[str, ...] = ()
            known = False
            if len(a) > 3 and a[3].type == "identifier":
                found = _argument_array(scope, node_text(a[3], data), call.start_byte, data)
                if found is not None:
                    args, known = found, True
            return replace(
                head, grid=node_text(a[1], data), block=node_text(a[2], data),
                smem=node_text(a[4], data) if len(a) > 4 else None,
                stream=node_text(a[5], data) if len(a) > 5 else None,
                args=args, style="launch_kernel", grid_span=_span(a[1], base), block_span=_span(a[2], base),
                smem_span=_span(a[4], base) if len(a) > 4 else None,
                smem_insert=a[3].end_byte + base if len(a) == 4 else None, args_known=known)
        target = a[0]
        if target.type == "pointer_expression" and node_text(target, data).startswith("&"):
            target = target.child_by_field_name("argument") or target
        var = node_text(target, data) if target.type == "identifier" else None
        fields = _config_fields(scope, var, call.start_byte, data) if var is not None else {}
        stmt = call
        while stmt.parent is not None and stmt.type != "expression_statement":
            stmt = stmt.parent
        grid, block, smem = fields.get("gridDim"), fields.get("blockDim"), fields.get("dynamicSmemBytes")
        return replace(
            head, grid=node_text(grid, data) if grid is not None else "?",
            block=node_text(block, data) if block is not None else "?",
            smem=node_text(smem, data) if smem is not None else None,
            stream=node_text(fields["stream"], data) if "stream" in fields else None,
            args=tuple(node_text(x, data) for x in a[2:]), style="launch_kernel_ex",
            grid_span=_span(grid, base) if grid is not None else None,
            block_span=_span(block, base) if block is not None else None,
            smem_span=_span(smem, base) if smem is not None else None,
            smem_insert=stmt.start_byte + base if smem is None and stmt.type == "expression_statement" else None,
            config_var=var, config_known=grid is not None and block is not None)

    def _launch(self, call: Node, cfg: Node, function: str) -> LaunchSite | None:
        data = self.data
        fn = call.child_by_field_name("function")
        if fn is None:
            return None
        targs: tuple[str, ...] = ()
        # `ops::fill<float><<<...>>>`: the template sits under the qualified name; walk down to it.
        while fn.type == "qualified_identifier":
            inner = fn.child_by_field_name("name")
            if inner is None:
                break
            fn = inner
        if fn.type == "template_function":
            nm = fn.child_by_field_name("name")
            al = fn.child_by_field_name("arguments")
            targs = tuple(node_text(a, data) for a in al.named_children) if al is not None else ()
            name = node_text(nm, data) if nm is not None else node_text(fn, data)
        else:
            name = node_text(fn, data)
        parts = [c for c in cfg.children if c.type not in _PUNCT and c.is_named and c.type != "comment"]
        config = [node_text(c, data) for c in parts]
        if len(config) < 2:
            return None
        args_node = call.child_by_field_name("arguments")
        args = tuple(node_text(a, data) for a in args_node.named_children
                     if a.type != "comment") if args_node is not None else ()
        return LaunchSite(
            kernel=name.split("::")[-1],
            template_args=targs,
            grid=config[0],
            block=config[1],
            smem=config[2] if len(config) > 2 else None,
            stream=config[3] if len(config) > 3 else None,
            args=args,
            span=_span(call, self.base),
            config_span=_span(cfg, self.base),
            function=function,
            line=self.src.line_of(call.start_byte + self.base),
            grid_span=_span(parts[0], self.base),
            block_span=_span(parts[1], self.base),
            smem_span=_span(parts[2], self.base) if len(parts) > 2 else None,
        )


#: the runtime API's launch calls (the driver API's cuLaunchKernel takes a CUfunction, not a kernel name)
_API_LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel"})
#: the fields of ``cudaLaunchConfig_t`` in declaration order (what a positional aggregate initializer sets)
_CONFIG_FIELDS = ("gridDim", "blockDim", "dynamicSmemBytes", "stream")


def _launched_kernel(node: Node, data: bytes) -> tuple[str, tuple[str, ...]] | None:
    """The kernel a launch API call names: ``k``, ``&k``, ``(void*)k``, ``(const void*)&ns::k<float>``,
    ``reinterpret_cast<void*>(k)``; its name and template arguments (None: not a kernel name)."""
    n = node
    while True:
        if n.type in ("cast_expression", "parenthesized_expression"):
            n = n.child_by_field_name("value") or n.named_children[-1]
        elif n.type == "pointer_expression" and node_text(n, data).startswith("&"):
            n = n.child_by_field_name("argument") or n
            if n.type == "pointer_expression":
                return None
        elif n.type == "call_expression" and node_text(n.child_by_field_name("function") or n, data).startswith(
                ("reinterpret_cast", "static_cast", "const_cast")):
            args = n.child_by_field_name("arguments")
            if args is None or len(args.named_children) != 1:
                return None
            n = args.named_children[0]
        else:
            break
    while n.type == "qualified_identifier" and n.child_by_field_name("name") is not None:
        n = n.child_by_field_name("name")  # type: ignore[assignment]
    if n.type == "template_function":
        nm, al = n.child_by_field_name("name"), n.child_by_field_name("arguments")
        if nm is None:
            return None
        return node_text(nm, data), tuple(node_text(x, data) for x in al.named_children) if al is not None else ()
    return (node_text(n, data), ()) if n.type == "identifier" else None


def _argument_array(scope: Node, name: str, before: int, data: bytes) -> tuple[str, ...] | None:
    """The kernel arguments of ``void* name[] = {&x, (void*)&n}`` declared in ``scope`` before byte ``before``
    (the last such declaration), as the expressions whose addresses are taken."""
    found: tuple[str, ...] | None = None
    for d in walk(scope, ("init_declarator",)):
        if d.start_byte >= before:
            break
        decl, val = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if decl is None or val is None or val.type != "initializer_list":
            continue
        ident = next((x for x in walk(decl) if x.type == "identifier"), None)
        if ident is None or node_text(ident, data) != name:
            continue
        out: list[str] = []
        for el in val.named_children:
            e = el
            while e.type in ("cast_expression", "parenthesized_expression"):
                e = e.child_by_field_name("value") or e.named_children[-1]
            if e.type == "pointer_expression" and node_text(e, data).startswith("&"):
                inner = e.child_by_field_name("argument")
                out.append(node_text(inner, data) if inner is not None else node_text(e, data))
            else:
                out.append(f"*{node_text(e, data)}")  # a pointer to the argument: its value is what it points at
        found = tuple(out)
    return found


def _config_fields(scope: Node, var: str, before: int, data: bytes) -> dict[str, Node]:
    """What ``var`` (a ``cudaLaunchConfig_t``) holds at byte ``before`` of ``scope``: the expression last
    assigned to each field (``cfg.gridDim = ...``, ``cfgp->blockDim = ...``), after its initializer
    (``{grid, block, smem, stream}`` or ``{.gridDim = grid, ...}``)."""
    out: dict[str, Node] = {}
    for n in walk(scope, ("init_declarator", "assignment_expression")):
        if n.start_byte >= before:
            break
        if n.type == "init_declarator":
            decl, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if decl is None or val is None or node_text(decl, data) != var or val.type != "initializer_list":
                continue
            out.clear()
            for i, el in enumerate(val.named_children):
                if el.type == "initializer_pair":
                    designator = node_text(el.child_by_field_name("designator") or el, data).lstrip(".").strip()
                    value = el.child_by_field_name("value")
                    if designator in _CONFIG_FIELDS and value is not None:
                        out[designator] = value
                elif i < len(_CONFIG_FIELDS):
                    out[_CONFIG_FIELDS[i]] = el
            continue
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if left is None or right is None or left.type != "field_expression":
            continue
        obj, fld = left.child_by_field_name("argument"), left.child_by_field_name("field")
        if obj is not None and fld is not None and node_text(obj, data) == var \
                and node_text(fld, data) in _CONFIG_FIELDS:
            out[node_text(fld, data)] = right
    return out


def _contains_error(node: Node | None) -> bool:
    return node is not None and (node.has_error)


def _first_error(node: Node) -> Node | None:
    """The first ERROR or MISSING node under ``node`` (itself included), in source order."""
    return next((n for n in walk(node, cut=lambda n: not n.has_error) if n.type == "ERROR" or n.is_missing), None)


_GLOBAL_RE = re.compile(rb"__global__")


def _skip_trivia(data: bytes, i: int) -> int:
    """Where scanning resumes when a comment or a string/char literal starts at ``i`` (else ``i``).

    The lexical scans that back up tree-sitter (recovering kernels, finding their extent and linkage) must
    never count a brace or a ``__global__`` inside a comment or a string.
    """
    n = len(data)
    c = data[i]
    if c == 0x2F and data.startswith(b"//", i):
        j = data.find(b"\n", i)
        return n if j < 0 else j
    if c == 0x2F and data.startswith(b"/*", i):
        j = data.find(b"*/", i + 2)
        return n if j < 0 else j + 2
    if c in (0x22, 0x27):
        j = i + 1
        while j < n and data[j] != c and data[j] != 0x0A:
            j += 2 if data[j] == 0x5C else 1
        return j + 1
    return i


def _iter_global_tokens(data: bytes) -> Iterator[int]:
    """Byte offsets of ``__global__`` tokens outside comments and string literals."""
    i = 0
    n = len(data)
    while i < n:
        c = data[i]
        skipped = _skip_trivia(data, i)
        if skipped != i:
            i = skipped
            continue
        if c == 0x5F and data.startswith(b"__global__", i):
            before = data[i - 1 : i] if i else b" "
            after = data[i + 10 : i + 11]
            if not (before.isalnum() or before == b"_") and not (after.isalnum() or after == b"_"):
                yield i
            i += 10
            continue
        i += 1


_EXTERN_C_TAIL = re.compile(rb'extern\s*"C"\s*$')


def _prefix_start(data: bytes, start: int) -> int:
    """Extend a definition's start (a line start) over a ``template <...>`` or ``extern "C"`` before it.

    Both may sit on lines of their own, and a template parameter list may span several lines
    (``template <typename T,\n          int BLOCK>``): matching the angle brackets backwards finds it.
    """
    while True:
        j = start - 1
        while j >= 0 and data[j] in b" \t\r\n":
            j -= 1
        if j < 0:
            return start
        if data[j] == 0x3E:  # `>`: the end of a template parameter list?
            depth = 0
            k = j
            while k >= 0:
                if data[k] == 0x3E:
                    depth += 1
                elif data[k] == 0x3C:
                    depth -= 1
                    if depth == 0:
                        break
                elif data[k] in b";{}":
                    k = -1
                k -= 1
            if k < 0:
                return start
            head = data[:k].rstrip()
            if not head.endswith(b"template") or (len(head) > 8 and (head[-9:-8].isalnum() or head[-9:-8] == b"_")):
                return start
            start = data.rfind(b"\n", 0, len(head) - 8) + 1
            continue
        m = _EXTERN_C_TAIL.search(data, max(0, j - 64), j + 1)
        if m is not None:
            start = data.rfind(b"\n", 0, m.start()) + 1
            continue
        return start


def _chunk_for(data: bytes, at: int) -> tuple[int, int] | None:
    """The text of the definition starting at the ``__global__`` token at ``at``.

    Starts at the beginning of its line, extended over a preceding ``template <...>`` or ``extern "C"``
    (``_prefix_start``), and ends at the brace that closes its body, counting braces outside comments and
    strings.
    """
    start = _prefix_start(data, data.rfind(b"\n", 0, at) + 1)
    depth = 0
    i = at
    n = len(data)
    opened = False
    while i < n:
        c = data[i]
        skipped = _skip_trivia(data, i)
        if skipped != i:
            i = skipped
            continue
        if c == 0x3B and not opened:  # a declaration, not a definition
            return None
        if c == 0x7B:
            depth += 1
            opened = True
        elif c == 0x7D:
            depth -= 1
            if opened and depth == 0:
                return start, i + 1
        i += 1
    return None


_RESYNC = frozenset({
    b"__global__", b"template", b"namespace", b"extern", b"__device__", b"__host__", b"__constant__",
    b"__managed__", b"struct", b"class", b"union", b"enum", b"typedef", b"using", b"static", b"inline",
    b"__forceinline__", b"void",
})


def _contexts(data: bytes, offsets: list[int]) -> dict[int, tuple[tuple[str, ...], bool]]:
    """The enclosing namespaces and ``extern "C" {`` block at each byte offset, by a lexical scan.

    Recovery re-parses a kernel's own text, which cannot tell that it sits in ``namespace ops {`` or an
    ``extern "C" {`` block: without this a recovered kernel would get a different (mangled) name than the
    compiler gives it. Braces are counted outside comments, strings and preprocessor lines; the braces of a
    broken function may be unbalanced, so an unclosed plain brace is dropped when a line starts (at column 0)
    with a keyword that begins a top-level declaration — kernels never sit inside function bodies.
    """
    want = sorted(set(offsets))
    out: dict[int, tuple[tuple[str, ...], bool]] = {}
    stack: list[tuple[str, tuple[str, ...]]] = []  # ("ns", names) | ("c" | "linkage" | "other", ())
    pending: tuple[str, tuple[str, ...]] | None = None  # a `namespace x` / `extern "C"` waiting for `{`
    n = len(data)
    i = 0
    w = 0

    def snapshot() -> tuple[tuple[str, ...], bool]:
        names: list[str] = []
        for kind, nm in stack:
            if kind == "ns":
                names.extend(nm)
        return tuple(names), any(kind == "c" for kind, _ in stack)

    while i < n and w < len(want):
        while w < len(want) and want[w] <= i:
            out[want[w]] = snapshot()
            w += 1
        c = data[i]
        at_line_start = i == 0 or data[i - 1] == 0x0A
        if at_line_start and c == 0x23:  # a preprocessor line, with its continuations
            while True:
                j = data.find(b"\n", i)
                if j < 0:
                    i = n
                    break
                if data[j - 1 : j] == b"\\" or data[j - 2 : j] == b"\\\r":
                    i = j + 1
                    continue
                i = j + 1
                break
            continue
        skipped = _skip_trivia(data, i)
        if skipped != i:
            if pending is not None and pending[0] == "extern" and data[i:skipped] == b'"C"':
                pending = ("c", ())
            i = skipped
            continue
        m = _IDENT.match(data, i) if (c == 0x5F or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A) else None
        if m is not None:
            word = m.group(0)
            if at_line_start and word in _RESYNC:
                stack = [e for e in stack if e[0] != "other"]
            if word == b"namespace":
                pending = ("ns", ())
            elif word == b"extern":
                pending = ("extern", ())
            elif pending is not None and pending[0] == "ns" and word != b"inline":
                pending = ("ns", (*pending[1], word.decode()))
            else:
                pending = None
            i = m.end()
            continue
        if c == 0x7B:  # {
            if pending is not None and pending[0] == "extern":
                pending = ("linkage", ())  # `extern "C++" {`: a block to close, not C linkage
            stack.append(pending if pending is not None and pending[0] in ("ns", "c", "linkage") else ("other", ()))
            pending = None
        elif c == 0x7D:  # }
            if stack:
                stack.pop()
            pending = None
        elif c == 0x3A and pending is not None and pending[0] == "ns":
            pass  # `namespace a::b {`
        elif c not in b" \t\r\n":
            pending = None
        i += 1
    while w < len(want):
        out[want[w]] = snapshot()
        w += 1
    return out


def parse(text: str | bytes, tree: Tree | None = None,
          macros: Mapping[str, frozenset[str]] | None = None) -> FileModel:
    """Build the ``FileModel`` of a CUDA source. ``tree`` may be a tree already parsed from ``text``; ``macros``
    are qualifier macros the file's headers define (``qualifier_macros`` of their text): a helper written
    ``DEV float f()`` with ``DEV`` from a project header is a device function too."""
    src = SourceText(text)
    data = src.data
    known = {**(macros or {}), **qualifier_macros(data)}
    tree = tree if tree is not None else parse_tree(data, macros=known)
    col = _Collector(src, data, 0, False)
    col.qualifier_macros = known
    col.top(tree.root_node)
    if tree.root_node.has_error:
        _recover(src, col)
    kernels = sorted(col.kernels, key=lambda k: k.span.start)
    return FileModel(
        kernels=tuple(kernels),
        declarations=tuple(sorted(col.decls, key=lambda d: d.span.start)),
        includes=tuple(col.includes),
        # A launch inside a recovered kernel (dynamic parallelism) is also seen in the ERROR node around it.
        launch_sites=tuple(sorted({s.span: s for s in col.launches}.values(), key=lambda s: s.span.start)),
        problems=tuple(col.problems),
        instantiations=tuple(col.instantiations),
        linkage_prefixes=tuple(col.linkage_prefixes),
    )


def _recover(src: SourceText, col: _Collector) -> None:
    """Re-parse each ``__global__`` definition the main parse lost to a neighbouring syntax error."""
    data = src.data
    have = [k.definition_span for k in col.kernels]
    chunks: list[tuple[int, int]] = []
    for at in _iter_global_tokens(data):
        if any(at in s for s in have):
            continue
        chunk = _chunk_for(data, at)
        if chunk is not None and chunk not in chunks:
            chunks.append(chunk)
    contexts = _contexts(data, [start for start, _ in chunks])
    for start, end in chunks:
        namespace, extern_c = contexts[start]
        sub = _Collector(src, data[start:end], start, True, namespace, extern_c)
        # Spans and lines are computed against the whole file: _Collector uses ``base`` for bytes and
        # ``src`` for lines, but slices its own bytes for text.
        sub.data = data[start:end]
        sub.qualifier_macros = col.qualifier_macros
        subtree = parse_tree(sub.data, macros=col.qualifier_macros)
        sub.top(subtree.root_node)
        for k in sub.kernels:
            if not any(k.definition_span.start == s.start for s in have):
                col.kernels.append(k)
                have.append(k.definition_span)
        col.launches.extend(sub.launches)
