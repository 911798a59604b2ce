"""Canonical parameter types: what a parameter's type *is*, whatever spelling, alias or qualifier order.

Why: real code names its element type through ``typedef float floatX;`` or ``using real = float;`` and
writes qualifiers where it likes (``float const*``, ``const float* __restrict__``). A variant that spells
``floatX* out`` as ``float* out`` passes the same bytes to the same kernel: the signature guard, the LLM's
parameter check and spec inference must compare and read types through the file's aliases, not as text.

``type_aliases`` reads the aliases a file (or a candidate's helpers) declares at top level, ``file_aliases``
adds those of the headers it includes;
``canonical_type`` resolves a written type through them to ``(base, extra pointer depth)``.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tree_sitter import Node

from ..compiler.files import read_text_regular
from . import conditionals
from .model import DeclKind, FileModel, Param
from .parser import parse as parse_model
from .parser import parse_tree
from .text import SourceText
from .tree import node_text, walk

#: qualifiers and elaborations that do not change which type a parameter has
_NOISE = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|struct|class|typename|union|enum)\b")
#: spellings of one builtin type (``unsigned`` is ``unsigned int``; ``std::`` fixed-width names are the plain ones)
_SYNONYMS = {
    "unsigned": "unsigned int", "signed": "int", "signed int": "int", "long int": "long",
    "long long int": "long long", "unsigned long int": "unsigned long", "unsigned long long int": "unsigned long long",
    "short int": "short", "unsigned short int": "unsigned short",
}

#: alias name -> (aliased base type as written, pointer depth the alias adds)
Aliases = Mapping[str, tuple[str, int]]


def clean(text: str) -> str:
    """A type's spelling without qualifiers, extra spaces or a synonym (``unsigned`` -> ``unsigned int``)."""
    t = _NOISE.sub(" ", text)
    t = re.sub(r"\s*::\s*", "::", t).strip()
    t = re.sub(r"^::", "", t)
    t = re.sub(r"^(?:std|cuda::std)::(u?int\d+_t|size_t|ptrdiff_t)$", r"\1", " ".join(t.split()))
    t = re.sub(r"\s*([<>,*&])\s*", r"\1", t)
    return _SYNONYMS.get(t, t)


def canonical_type(written: str, aliases: Aliases, depth: int = 0) -> tuple[str, int]:
    """``written`` (a parameter's base type) resolved through ``aliases``: the canonical base type and the
    pointer depth the aliases add (``typedef float* fptr;`` makes ``fptr`` one pointer deeper)."""
    base = clean(written)
    extra = 0
    seen: set[str] = set()
    while base in aliases and base not in seen and depth < 16:
        seen.add(base)
        target, stars = aliases[base]
        base = clean(target)
        extra += stars
        depth += 1
    return base, extra


def param_key(p: Param, aliases: Aliases) -> tuple[str, int, bool, tuple[str, ...]]:
    """What must not change in a parameter: its canonical type, pointer depth, reference-ness and array dims.

    ``const``/``__restrict__`` (anywhere), the spelling through an alias and the parameter's name are not
    part of it."""
    base, extra = canonical_type(p.type, aliases)
    return base, p.pointer_depth + extra, p.is_reference, tuple(p.array_dims)


def type_aliases(source: str | SourceText, model: FileModel, marks: Sequence[tuple[int, bool]] | None = None
                 ) -> dict[str, tuple[str, int]]:
    """Top-level ``typedef`` and ``using X = ...;`` aliases of a file: name -> (type, added pointer depth).

    Struct typedefs (``typedef struct {...} S;``) name a type of their own and are left out; template
    aliases are left out (their meaning depends on arguments). With ``marks`` (``conditionals.walk``'s
    offsets and flags for this file) only the aliases in ``#if`` branches that hold are read."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    out = {name: value for at, name, value in _aliases_at(src, model) if marks is None or conditionals.live(at, marks)}
    for macro, target in macro_type_aliases(src.text).items():
        out.setdefault(macro, (target, 0))
    return out


def _aliases_at(source: str | SourceText, model: FileModel) -> list[tuple[int, str, tuple[str, int]]]:
    """``type_aliases`` in file order, each with the byte offset of its declaration."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    out: list[tuple[int, str, tuple[str, int]]] = []
    for d in model.declarations:
        if d.kind is not DeclKind.TYPE:
            continue
        data = src.data[d.span.start : d.span.end]
        if not data.lstrip().startswith((b"typedef", b"using")):
            continue
        root = parse_tree(data).root_node
        for node in root.named_children:
            if node.type == "type_definition":
                tnode = node.child_by_field_name("type")
                if tnode is None or (tnode.type in ("struct_specifier", "union_specifier", "enum_specifier",
                                                   "class_specifier") and tnode.child_by_field_name("body")):
                    continue
                for decl in node.children_by_field_name("declarator"):
                    stars = 0
                    cur: Node | None = decl
                    while cur is not None and cur.type == "pointer_declarator":
                        stars += 1
                        cur = cur.child_by_field_name("declarator")
                    if cur is not None and cur.type in ("type_identifier", "identifier"):
                        out.append((d.span.start, node_text(cur, data), (node_text(tnode, data), stars)))
            elif node.type == "alias_declaration":
                name = node.child_by_field_name("name")
                tdesc = node.child_by_field_name("type")
                if name is None or tdesc is None:
                    continue
                atype = tdesc.child_by_field_name("type")
                stars = 0
                cur = tdesc.child_by_field_name("declarator")
                while cur is not None and cur.type == "abstract_pointer_declarator":
                    stars += 1
                    cur = cur.child_by_field_name("declarator")
                if atype is not None and cur is None:
                    out.append((d.span.start, node_text(name, data), (node_text(atype, data), stars)))
    return out


#: builtin element types an object-like macro may stand for (``#define ELEM float``)
_MACRO_TYPES = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "long", "long long", "unsigned long long", "short",
    "unsigned short", "char", "signed char", "unsigned char", "bool", "size_t", "int8_t", "int16_t", "int32_t",
    "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "__half", "half", "__half2", "half2",
    "__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162", "float2", "float4", "double2", "int2", "int4",
})
_MACRO_DEF = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([A-Za-z_][\w \t]*?)[ \t]*$", re.M)


def macro_type_aliases(text: str) -> dict[str, str]:
    """Object-like macros naming a builtin element type (``#define ELEM float``), defined once in the file.

    Why: the preprocessor makes ``ELEM* y`` a ``float* y``; a variant whose text was expanded (``policy.ir``)
    spells it so. A macro defined more than once (under ``#if`` branches) is left out: which one holds
    depends on the build."""
    return {name: value[0] for _at, name, value in _macro_aliases_at(text)}


def _macro_aliases_at(text: str) -> list[tuple[int, str, tuple[str, int]]]:
    """``macro_type_aliases`` with the byte offset of each definition's line (for ``#if`` branches)."""
    seen: dict[str, list[tuple[int, str]]] = {}
    for m in _MACRO_DEF.finditer(text):
        at = m.start() if text.isascii() else len(text[: m.start()].encode("utf-8"))
        seen.setdefault(m.group(1), []).append((at, " ".join(m.group(2).split())))
    return [(v[0][0], k, (v[0][1], 0)) for k, v in seen.items() if len(v) == 1 and v[0][1] in _MACRO_TYPES]


#: how far ``header_aliases`` follows quoted includes, and how much it reads
HEADER_DEPTH = 4
HEADER_MAX_FILES = 64
HEADER_MAX_BYTES = 2 << 20
#: headers whose reading is kept (``_header``), least recently used dropped first
HEADER_CACHE_MAX = 256


@dataclass(frozen=True)
class _Header:
    """What ``header_aliases`` needs of one header, as written (before any ``#if`` is decided): its
    preprocessor lines, and its declarations each at its byte offset, so that a reading under given defines
    (``_reached``) keeps those in branches that hold."""

    directives: tuple[conditionals.Directive, ...]
    aliases: tuple[tuple[int, str, tuple[str, int]], ...]
    #: its enums -> the integer type their values are passed as (``enum_types``)
    enums: tuple[tuple[str, str], ...]
    #: its enumerators with known values (``enumerators``)
    enum_values: tuple[tuple[str, int], ...]
    #: its object-like ``#define NAME VALUE`` lines, as written (``header_defines``)
    macros: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class _Reading:
    """One header as ``_reached`` read it under the defines in effect where it was included: the aliases and
    defines of its branches that hold."""

    aliases: dict[str, tuple[str, int]]
    enums: tuple[tuple[str, str], ...]
    enum_values: tuple[tuple[str, int], ...]
    macros: dict[str, str]


#: (resolved path, mtime_ns, size) -> the header as read then (None: tree-sitter could not read it)
_header_cache: OrderedDict[tuple[str, int, int], _Header | None] = OrderedDict()
_header_lock = threading.Lock()


def _read_header(path: Path) -> _Header | None:
    """Read and parse one header (OSError when it cannot be read; None when it cannot be parsed)."""
    text = read_text_regular(path)
    try:
        hsrc = SourceText(text)
        hmodel = parse_model(hsrc.data)
    except Exception:  # a header tree-sitter cannot read is skipped, never fatal
        return None
    macros = tuple((len(text[: m.start()].encode("utf-8")) if not text.isascii() else m.start(), m.group(1),
                    re.sub(r"/\*.*?\*/|//.*$", " ", m.group(2)).strip()) for m in _OBJECT_MACRO.finditer(text))
    # its typedefs, then its macros naming a type (``# define DATA_TYPE float`` in PolyBench's headers), which a
    # nearer typedef of the same name overrides as before
    named = _aliases_at(hsrc, hmodel)
    typed = {n for _at, n, _v in named}
    named += [m for m in _macro_aliases_at(text) if m[1] not in typed]
    return _Header(conditionals.directives(hsrc.data), tuple(named),
                   tuple(enum_types(hsrc, hmodel).items()), tuple(enumerators(hsrc, hmodel).items()),
                   tuple((at, n, v) for at, n, v in macros if v))


def _header(path: Path, mtime_ns: int, size: int) -> _Header | None:
    """``_read_header``, kept per (path, mtime, size): spec inference runs again after every edit of the kernel
    file (hints, the signature guard), and its headers rarely change in between; a header that does gets a
    new key and is read again. Bounded (LRU), like the hints cache."""
    key = (str(path), mtime_ns, size)
    with _header_lock:
        if key in _header_cache:
            _header_cache.move_to_end(key)
            return _header_cache[key]
    entry = _read_header(path)
    with _header_lock:
        _header_cache[key] = entry
        while len(_header_cache) > HEADER_CACHE_MAX:
            _header_cache.popitem(last=False)
    return entry


_OBJECT_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n\\]+)$", re.M)


def header_defines(file: str | Path | None, model: FileModel, include_dirs: Sequence[str | Path] = ()) -> dict[
        str, str]:
    """The object-like ``#define``s of the headers a file reaches through quoted includes, as written (nearer
    headers win, like ``header_aliases``): a size a project keeps in a header (``#define N (1 << 20)`` in
    ``config.h``) is a size of every file that includes it. The caller keeps those that are constants."""
    out: dict[str, str] = {}
    for h in _reached(file, model, include_dirs)[0]:
        out.update(h.macros)
    return out


def header_aliases(file: str | Path | None, model: FileModel, include_dirs: Sequence[str | Path] = ()) -> dict[
        str, tuple[str, int]]:
    """The type aliases of the headers a file reaches through quoted includes (``#include "llmc/common.cuh"``):
    real code declares its element type once in a project header (llm.c's ``typedef float floatX;``), and a
    kernel file that only includes it must read ``floatX*`` as ``float*`` like one that declares it.

    A quoted include is looked up next to the including file, then in ``include_dirs`` (the project's ``-I``
    folders where the caller knows them), as nvcc does; system includes (``<...>``) are not read. Bounded in
    depth, files and bytes; a header that cannot be read or parsed is skipped. Read only, nothing runs.
    Nearer declarations win: the file's own aliases (``type_aliases``) override these at the caller, and an
    including header's override the ones it includes."""
    found: dict[str, tuple[str, int]] = {}
    for h in _reached(file, model, include_dirs)[0]:
        found.update(h.aliases)
    return found


def _reached(file: str | Path | None, model: FileModel, include_dirs: Sequence[str | Path] = (),
             data: bytes | None = None, defines: Mapping[str, str] | None = None
             ) -> tuple[list[_Reading], list[tuple[int, bool]]]:
    """The headers ``file`` reaches through quoted includes, each read after the headers it includes (so that
    a later entry's declarations win when merged in order), bounded in depth, files and bytes; and the file's
    own ``#if`` marks (``conditionals.walk``), for its own declarations.

    The file (``data``, else read from disk) is walked in order with ``defines`` (the build's ``-D``; else the
    project build's, where one governs the file): a ``#define`` above an ``#include`` is seen by that header,
    an include in a branch that does not hold is not followed, and a header's declarations in such a branch
    are left out (``conditionals``)."""
    if file is None:
        return [], []
    try:
        start = Path(file).resolve()
    except OSError:
        return [], []
    if data is None:
        if not start.is_file():
            return [], []
        try:
            data = read_text_regular(start).encode("utf-8")
        except (OSError, ValueError):
            return [], []
    if defines is None:
        defines = project_defines(start)
    macros: dict[str, str | None] = dict(defines)
    dirs = [Path(d) for d in include_dirs]
    seen: set[Path] = {start}
    budget = [HEADER_MAX_FILES, HEADER_MAX_BYTES]
    found: list[_Reading] = []

    def follow(path: Path, inc: str, depth: int) -> None:
        for base in (path.parent, *dirs):
            cand = base / inc
            try:
                if not cand.is_file():
                    continue
                cand = cand.resolve()
                if cand in seen or budget[0] <= 0:
                    return
                st = cand.stat()
                if st.st_size > budget[1]:
                    return
                header = _header(cand, st.st_mtime_ns, st.st_size)
            except OSError:
                continue
            seen.add(cand)
            budget[0] -= 1
            budget[1] -= st.st_size
            if header is None:
                return
            marks = walk_file(cand, header.directives, depth + 1)
            found.append(_Reading({n: v for at, n, v in header.aliases if conditionals.live(at, marks)},
                                  header.enums, header.enum_values,
                                  {n: v for at, n, v in header.macros if conditionals.live(at, marks)}))
            return

    def walk_file(path: Path, items: tuple[conditionals.Directive, ...], depth: int) -> list[tuple[int, bool]]:
        marks: list[tuple[int, bool]] = []
        for d, on in conditionals.walk(items, macros):
            marks.append((d.offset, on))
            inc = conditionals.include_target(d)
            if on and inc is not None and depth < HEADER_DEPTH:
                # what this header includes first, then its own declarations over them
                follow(path, inc, depth)
        return marks

    own = walk_file(start, conditionals.directives(data), 0)
    return found, own


def enum_types(source: str | SourceText, model: FileModel) -> dict[str, str]:
    """The file's enums (``enum E {...}``, ``enum class E : T {...}``, ``typedef enum {...} E;``) -> the C type
    their values are passed as: the declared underlying type, else ``int`` (what every compiler in CUDA's
    reach uses for an enum whose values fit in it)."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    out: dict[str, str] = {}
    for d in model.declarations:
        if d.kind is not DeclKind.TYPE:
            continue
        data = src.data[d.span.start : d.span.end]
        if b"enum" not in data:
            continue
        root = parse_tree(data).root_node
        for node in walk(root, ("enum_specifier",)):
            base = node.child_by_field_name("base")
            underlying = node_text(base, data) if base is not None else "int"
            tag = node.child_by_field_name("name")
            if tag is not None:
                out[node_text(tag, data)] = underlying
            parent = node.parent
            if parent is not None and parent.type == "type_definition":
                for decl in parent.children_by_field_name("declarator"):
                    if decl.type in ("type_identifier", "identifier"):
                        out[node_text(decl, data)] = underlying
    return out


def enumerators(source: str | SourceText, model: FileModel) -> dict[str, int]:
    """The values of the file's enumerators whose value is a number or implicit (``GELU = 3``, ``TANH``):
    what a spec may pass for an enum parameter by name (``arg act = GELU``)."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    out: dict[str, int] = {}
    for d in model.declarations:
        if d.kind is not DeclKind.TYPE:
            continue
        data = src.data[d.span.start : d.span.end]
        if b"enum" not in data:
            continue
        for node in walk(parse_tree(data).root_node, ("enumerator_list",)):
            nxt = 0
            for e in node.named_children:
                if e.type != "enumerator":
                    continue
                name = e.child_by_field_name("name")
                value = e.child_by_field_name("value")
                if value is not None:
                    try:
                        nxt = int(node_text(value, data).rstrip("uUlL"), 0)
                    except ValueError:
                        break  # an expression: the values from here on are not known
                if name is not None:
                    out[node_text(name, data)] = nxt
                nxt += 1
    return out


def file_enums(source: str | SourceText, model: FileModel, file: str | Path | None = None,
               include_dirs: Sequence[str | Path] = ()) -> dict[str, str]:
    """``enum_types`` of the file over those of the headers it reaches (as ``file_aliases``): an enum a project
    declares in a header (``enum Op`` in ``include/real.h``) is passed as its integer type, never a float."""
    if not include_dirs and file is not None:
        include_dirs = project_include_dirs(file)
    found: dict[str, str] = {}
    for h in _reached(file, model, include_dirs)[0]:
        found.update(h.enums)
    return {**found, **enum_types(source, model)}


def file_enumerators(source: str | SourceText, model: FileModel, file: str | Path | None = None,
                     include_dirs: Sequence[str | Path] = ()) -> dict[str, int]:
    """``enumerators`` of the file over those of the headers it reaches: ``OP_SCALE`` at a launch site or in
    an annotation is its value wherever the enum is declared."""
    if not include_dirs and file is not None:
        include_dirs = project_include_dirs(file)
    found: dict[str, int] = {}
    for h in _reached(file, model, include_dirs)[0]:
        found.update(h.enum_values)
    return {**found, **enumerators(source, model)}


def file_aliases(source: str | SourceText, model: FileModel, file: str | Path | None = None,
                 include_dirs: Sequence[str | Path] = (), defines: Mapping[str, str] | None = None
                 ) -> dict[str, tuple[str, int]]:
    """``type_aliases`` of the file over those of the headers it includes, looked up in ``include_dirs``, else
    in the ``-I`` folders of the project's build description (``compiler.project``): ``#include "real.h"``
    found through ``-Iinclude``. Read as the compiler reads them under ``defines`` (else the project build's):
    an alias in an ``#if`` branch that does not hold is not one (``conditionals``)."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    if not include_dirs and file is not None:
        include_dirs = project_include_dirs(file)
    if file is None:
        return type_aliases(src, model, conditionals.marks(src.data, defines or {}))
    found: dict[str, tuple[str, int]] = {}
    headers, own = _reached(file, model, include_dirs, src.data, defines)
    for h in headers:
        found.update(h.aliases)
    return {**found, **type_aliases(src, model, own)}


def project_defines(file: str | Path) -> dict[str, str]:
    """The ``-D`` defines of the build description governing ``file`` (``compiler.project``), or none."""
    from ..compiler.project import project_build  # the build description is read only when asked

    build = project_build(file)
    return build.define_map() if build is not None else {}


def project_include_dirs(file: str | Path) -> tuple[str, ...]:
    """The ``-I`` folders of the build description governing ``file`` (``compiler.project``), or none."""
    from ..compiler.project import project_build  # the build description is read only when asked

    build = project_build(file)
    return (*build.include_dirs, *build.system_dirs) if build is not None else ()


def empty_struct(source: str | SourceText, model: FileModel, name: str) -> bool:
    """Is ``name`` a struct or class of the file with no data (only member functions and static members)?

    Such a value (a functor ``struct Square { __device__ float operator()(float) const; }`` passed to a
    kernel templated on it, a tag) is one byte whose contents the kernel cannot read: a spec passes 0."""
    src = source if isinstance(source, SourceText) else SourceText(source)
    for d in model.declarations:
        if d.kind is not DeclKind.TYPE or name not in d.names:
            continue
        data = src.data[d.span.start : d.span.end]
        for node in walk(parse_tree(data).root_node, ("struct_specifier", "class_specifier")):
            tag = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if tag is None or body is None or node_text(tag, data) != name:
                continue
            if any(c.type == "base_class_clause" for c in node.children):
                return False
            for f in body.named_children:
                if f.type != "field_declaration":
                    continue
                static = any(c.type == "storage_class_specifier" and node_text(c, data) == "static"
                             for c in f.children)
                method = any(c.type == "function_declarator" for c in f.named_children)
                if not static and not method:
                    return False
            return True
    return False
