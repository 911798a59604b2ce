"""Extract a kernel into a standalone translation unit.

Why: a candidate is compiled to a cubin on its own, without the host code around it (host code proposed
by a model must never be compiled for the host or run), and compiling only what a kernel needs is also
what keeps compilation fast. ``#line`` directives keep compiler messages, ``-lineinfo`` and SASS line
tables pointing at the user's file.
"""

from __future__ import annotations

import re

from .model import Declaration, DeclKind, FileModel, Kernel
from .reduce import device_source
from .text import SourceText, Span

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def needed_declarations(model: FileModel, kernel: Kernel, template_args: tuple[str, ...] = ()) -> list[Declaration]:
    """The transitive closure of top-level declarations a kernel refers to, in source order.

    Host functions are never included: a kernel cannot call them, and a name they share with a device
    helper must resolve to the device one. ``template_args`` are the arguments the kernel is instantiated
    with: what they name is needed too (``trimul<matmul_tri_naive>`` needs the ``__device__`` function,
    ``apply<Square, Tile<4>>`` the functor and the constant's template), though the kernel's own text
    never mentions it.
    """
    by_name: dict[str, list[Declaration]] = {}
    for d in model.declarations:
        if d.kind is DeclKind.HOST_FUNCTION:
            continue
        for n in d.names:
            by_name.setdefault(n, []).append(d)
    # Other kernels launched or referenced (dynamic parallelism, forward declarations) are not pulled in.
    own = {kernel.name}
    named = {n for a in template_args for n in _IDENT.findall(a)}
    todo = list((kernel.uses | named) - own)
    seen_names: set[str] = set(own)
    # Scope declarations (using-directives, namespace aliases) change how names resolve: always carried.
    chosen: dict[int, Declaration] = {d.span.start: d for d in model.declarations if d.kind is DeclKind.USING}
    while todo:
        name = todo.pop()
        if name in seen_names:
            continue
        seen_names.add(name)
        for d in by_name.get(name, ()):
            # A declaration inside the kernel's span (a helper a candidate brings along with its kernel) is
            # emitted with the kernel, but what it uses is still needed: a new helper may be the only user
            # of one of the file's macros or constants.
            inside = kernel.span.contains_span(d.span)
            if inside or d.span.start not in chosen:
                if not inside:
                    chosen[d.span.start] = d
                todo.extend(d.uses - seen_names)
    return [chosen[k] for k in sorted(chosen)]


def _line_directive(src: SourceText, offset: int, filename: str | None) -> str:
    """``#line N "FILE"`` with FILE escaped as a C string: a quote, backslash or line break in a file name
    must neither break the directive nor start a directive of its own (nvcc prints the unescaped name)."""
    line = src.line_of(offset) + 1
    if not filename:
        return f"#line {line}\n"
    quoted = filename.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "?").replace("\r", "?")
    return f'#line {line} "{quoted}"\n'


def _wrap_namespace(text: str, namespace: tuple[str, ...]) -> str:
    """Re-open the declaration's namespaces around it.

    The opening goes on the same line as the first line of the text, so that the ``#line`` directive
    emitted just before still numbers the text's lines as in the original file. A macro knows no
    namespace (and a directive must start its line): it is emitted as is.
    """
    if not namespace or text.lstrip().startswith("#"):
        return text
    opening = " ".join(f"namespace {n} {{" for n in namespace)
    return f"{opening} {text}\n{'}' * len(namespace)}\n"


def _conditional_text(src: SourceText, model: FileModel, span: Span) -> str:
    """A top-level ``#if``/``#ifdef`` block as needed by a kernel: its text without the kernels and host
    functions in it.

    The block is emitted whole so its directives stay balanced, but a kernel inside it (the extracted one
    is emitted on its own, after its dependencies; a second definition would not compile) and host code
    (never part of an extracted unit) are cut out. Cut text becomes blank lines, so line numbers hold.
    What goes with the cut code goes too: explicit instantiations (``template void reduce<int>(...);`` of a
    cut host template, ``template __global__ void k<float>(...);`` of a kernel emitted only after the block:
    left in, nvcc said "reduce is not a template" for a whole file wrapped in an include guard), and the
    ``extern "C"`` in front of a cut item, which would otherwise bind to whatever follows.
    """
    data = src.data
    cuts = [k.span for k in model.kernels if span.contains_span(k.span)]
    cuts += [d.span for d in model.declarations if d.kind is DeclKind.HOST_FUNCTION and span.contains_span(d.span)]
    cuts += [s for s in model.instantiations if span.contains_span(s)]
    cuts += [p for p in model.linkage_prefixes if span.contains_span(p)
             and any(c.start >= p.end and not data[p.end : c.start].strip() for c in cuts)]
    out: list[bytes] = []
    pos = span.start
    for c in sorted(cuts, key=lambda c: c.start):
        if c.start < pos:
            continue
        out.append(data[pos : c.start])
        out.append(b"\n" * data.count(b"\n", c.start, c.end))
        pos = c.end
    out.append(data[pos : span.end])
    return b"".join(out).decode("utf-8", errors="replace").rstrip()


_CONDITION = re.compile(r"\s*#\s*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(.*)")


def _condition_macros(src: SourceText, model: FileModel, span: Span, filename: str | None) -> str:
    """The file's own unconditional macros that a top-level ``#if`` block's conditions name, defined above it.

    Why: the unit keeps the block (a ``typedef`` the kernel needs is in it), and the branch it compiles must be the
    one the file compiles. llm.c's style written in one file, ``#define ENABLE_BF16`` after the system includes
    and then ``#if defined(ENABLE_BF16) typedef __nv_bfloat16 floatX; #else typedef float floatX; #endif``, lost
    the define (it is above no include of the file's own), so the unit compiled ``floatX`` as ``float`` while
    the spec, read through the same ``#if``, said bfloat16: the original wrote past its buffers on the GPU. An
    identical redefinition of a macro the unit already has is allowed, so one given twice does no harm."""
    named: set[str] = set()
    for line in src.slice(span).split("\n"):
        m = _CONDITION.match(line)
        if m is not None:
            named |= set(_IDENT.findall(m.group(1))) - {"defined"}
    out = ""
    for d in model.declarations:
        if d.kind is DeclKind.MACRO and d.conditional is None and d.span.start < span.start and named & set(d.names):
            out += _line_directive(src, d.span.start, filename) + src.slice(d.span).rstrip() + "\n"
    return out


_BRANCH = re.compile(r"\s*#\s*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|include)\b")


def _include_lines(src: SourceText, model: FileModel, filename: str | None) -> list[str]:
    """The file's ``#include`` lines for an extracted unit, each under the conditions it is under in the file.

    An include inside a top-level ``#if``/``#ifdef`` block is emitted with the block's branch directives
    (``#if``/``#ifdef``/``#ifndef``/``#elif``/``#else``/``#endif``) and its includes, every other line of the
    block blanked: ``#ifdef _WIN32 / #include <windows.h> / #endif`` stays off on Linux (emitted bare, it broke
    the build of two cuda-samples kernels on the wide yardstick), and the declarations of the block still come
    with the kernel's needs, in their own place.
    """
    out: list[str] = []
    blocks: set[Span] = set()
    given: set[Span] = set()

    def macros_named(text: str, before: int) -> None:
        """The file's own macros ``text`` names, defined above ``before``, first (an identical redefinition,
        where the kernel needs it too, is allowed)."""
        named = set(_IDENT.findall(text))
        for d in model.declarations:
            if (d.kind is DeclKind.MACRO and d.conditional is None and d.span.start < before
                    and named & set(d.names) and d.span not in given):
                given.add(d.span)
                out.append(_line_directive(src, d.span.start, filename) + src.slice(d.span).rstrip() + "\n")

    def macros_above(before: int) -> None:
        """The file's own unconditional macros defined above an include of its own headers, in order: the
        header may test them (llm.c's dev files write ``#define ENABLE_BF16`` above ``#include "common.h"``,
        whose ``#if`` picks ``floatX``); without them the unit compiled ``floatX`` as ``float`` while the file,
        and the spec read through the same ``#if``, say ``__nv_bfloat16``."""
        for d in model.declarations:
            if d.kind is DeclKind.MACRO and d.conditional is None and d.span.start < before and d.span not in given:
                given.add(d.span)
                out.append(_line_directive(src, d.span.start, filename) + src.slice(d.span).rstrip() + "\n")

    for inc in model.includes:
        if inc.conditional is None:
            line = src.slice(inc.span).rstrip()
            if not inc.system:
                macros_above(inc.span.start)
            # a computed include (``#define S(x) #x`` / ``#include S(path)``) needs its macro: without it nvcc
            # said `#include expects "FILENAME"` for the unit while the file itself compiled
            macros_named(line.split("include", 1)[-1], inc.span.start)
            out.append(_line_directive(src, inc.span.start, filename) + line + "\n")
            continue
        if inc.conditional in blocks:
            continue
        blocks.add(inc.conditional)
        lines = src.slice(inc.conditional).split("\n")
        kept: list[str] = []
        keep = False
        for line in lines:
            keep = bool(_BRANCH.match(line)) or (keep and bool(kept) and kept[-1].rstrip().endswith("\\"))
            kept.append(line if keep else "")
        # a condition on the file's own macro (``#define USE_FP16`` above ``#ifdef USE_FP16``) gets its definition
        # first (an identical redefinition, where the kernel needs it too, is allowed)
        macros_named("\n".join(k for k in kept if k and not k.lstrip().startswith("#include")), inc.conditional.start)
        out.append(_line_directive(src, inc.conditional.start, filename) + "\n".join(kept).rstrip() + "\n")
    return out


def _with_linkage(kernel: Kernel, text: str) -> str:
    """Keep C linkage for a kernel of an ``extern "C" { ... }`` block, whose span does not include it.

    Without it the cubin's entry would get a C++-mangled name while the user's host code, and the name a
    launcher looks up, expect the plain one.
    """
    if kernel.extern_c and not text.lstrip().startswith("extern"):
        return 'extern "C" ' + text
    return text


_SPECIALIZATION = re.compile(r"^\s*template\s*<\s*>")


def _primary_declaration(src: SourceText, model: FileModel, kernel: Kernel, filename: str | None) -> str:
    """For an explicit specialization (``template <> __global__ void k(const half* x, ...)``), the declaration of
    the primary template it specializes, else "".

    Why: nvcc accepts a specialization only after its primary template ("k is not a class or function template
    name in the current scope"); the unit of a specialization alone (mmcv's half-precision sync-BN kernels) did
    not build, so neither did any candidate. The primary's signature is enough: its body is never instantiated
    for the specialized arguments."""
    if kernel.template_params or not _SPECIALIZATION.match(src.slice(kernel.span)):
        return ""
    for k in model.kernels:
        if k.name == kernel.name and k.namespace == kernel.namespace and k.template_params \
                and k.span.start < kernel.span.start:
            head = src.slice(Span(k.span.start, k.body_span.start)).rstrip()
            return _line_directive(src, k.span.start, filename) + _wrap_namespace(head + ";", k.namespace) + "\n"
    return ""


def standalone(
    source: str | SourceText,
    model: FileModel,
    kernel: Kernel,
    *,
    body: str | None = None,
    definition: str | None = None,
    filename: str | None = None,
    instantiate: tuple[str, ...] | None = None,
) -> str:
    """A translation unit holding ``kernel`` and everything it needs.

    ``definition`` replaces the whole kernel definition text (a candidate, reduced to its device code),
    ``body`` only its body.
    ``instantiate`` gives template arguments for an explicit instantiation, needed to get any code for a
    templated kernel out of a cubin build.
    """
    src = source if isinstance(source, SourceText) else SourceText(source)
    parts: list[str] = _include_lines(src, model, filename)
    emitted_conditionals: set[Span] = set()
    for d in needed_declarations(model, kernel, instantiate if kernel.template_params and instantiate else ()):
        if d.conditional is not None:
            if d.conditional in emitted_conditionals:
                continue
            emitted_conditionals.add(d.conditional)
            span = d.conditional
            parts.append(_condition_macros(src, model, span, filename)
                         + _line_directive(src, span.start, filename) + _conditional_text(src, model, span) + "\n")
            continue
        text = src.slice(d.span)
        if d.kind is DeclKind.TYPE and not text.rstrip().endswith(";"):
            text += ";"
        parts.append(_line_directive(src, d.span.start, filename) + _wrap_namespace(text, d.namespace) + "\n")
    primary = _primary_declaration(src, model, kernel, filename)
    if primary:
        parts.append(primary)
    if definition is not None:
        # A candidate's text is compiled only as device code, whoever wrote it (``reduce``): an include of
        # another file or host code in it never reaches nvcc.
        ktext = device_source(definition, kernel.name)
    elif body is not None:
        ktext = src.slice(Span(kernel.span.start, kernel.body_span.start)) + body
    else:
        ktext = src.slice(kernel.span)
    parts.append(_line_directive(src, kernel.span.start, filename)
                 + _wrap_namespace(_with_linkage(kernel, ktext), kernel.namespace))
    if instantiate is not None and kernel.template_params:
        parts.append("\n" + instantiation(kernel, instantiate) + "\n")
    return "\n".join(parts) + "\n"


def instantiation(kernel: Kernel, template_args: tuple[str, ...]) -> str:
    """An explicit instantiation ``template __global__ void k<args>(types);`` for a templated kernel."""
    if len(template_args) != len(kernel.template_params):
        raise ValueError(
            f"kernel `{kernel.name}` has {len(kernel.template_params)} template parameters "
            f"({', '.join(p.name for p in kernel.template_params)}); got {len(template_args)} arguments"
        )
    subst = {p.name: a for p, a in zip(kernel.template_params, template_args, strict=True)}

    def sub(text: str) -> str:
        return _IDENT.sub(lambda m: subst.get(m.group(0), m.group(0)), text)

    types = []
    for p in kernel.params:
        const = "const " if p.is_const else ""
        stars = "*" * p.pointer_depth + ("&" if p.is_reference else "")
        arr = "".join(f"[{d}]" for d in p.array_dims[1:])
        star = "*" if p.array_dims else ""
        types.append(f"{const}{sub(p.type)}{stars}{star}{sub(arr)}")
    prefix = "::".join(kernel.namespace) + "::" if kernel.namespace else ""
    return f"template __global__ void {prefix}{kernel.name}<{', '.join(template_args)}>({', '.join(types)});"


def standalone_many(
    source: str | SourceText,
    model: FileModel,
    kernels: list[Kernel],
    *,
    filename: str | None = None,
    instantiations: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """One translation unit holding several kernels and the union of what they need.

    Why: one nvcc call for twenty kernels costs far less than twenty calls (the front end dominates), so
    the first analysis of a file compiles its kernels together; later edits recompile one kernel alone.
    """
    src = source if isinstance(source, SourceText) else SourceText(source)
    parts: list[str] = _include_lines(src, model, filename)
    chosen: dict[int, Declaration] = {}
    for k in kernels:
        for d in needed_declarations(model, k, (instantiations or {}).get(k.name, ()) if k.template_params else ()):
            chosen.setdefault(d.span.start, d)
    emitted_conditionals: set[Span] = set()
    items: list[tuple[int, str]] = []
    for start in sorted(chosen):
        d = chosen[start]
        if d.conditional is not None:
            if d.conditional in emitted_conditionals:
                continue
            emitted_conditionals.add(d.conditional)
            items.append((d.conditional.start, _condition_macros(src, model, d.conditional, filename)
                          + _line_directive(src, d.conditional.start, filename)
                          + _conditional_text(src, model, d.conditional) + "\n"))
            continue
        text = src.slice(d.span)
        if d.kind is DeclKind.TYPE and not text.rstrip().endswith(";"):
            text += ";"
        items.append((d.span.start, _line_directive(src, d.span.start, filename)
                      + _wrap_namespace(text, d.namespace) + "\n"))
    for k in kernels:
        text = (_line_directive(src, k.span.start, filename)
                + _wrap_namespace(_with_linkage(k, src.slice(k.span)), k.namespace) + "\n")
        if k.template_params and instantiations and k.name in instantiations:
            text += "\n" + instantiation(k, instantiations[k.name]) + "\n"
        items.append((k.span.start, text))
    parts.extend(t for _, t in sorted(items, key=lambda it: it[0]))
    return "\n".join(parts) + "\n"
