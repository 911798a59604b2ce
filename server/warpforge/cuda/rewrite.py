"""Byte-exact rewrites of a kernel, returned as text edits in both byte and LSP coordinates.

Why edits rather than new text: the editor applies them to the user's buffer (undoable, minimal), and the
search applies the same edits to produce a candidate's source, so what the user accepts is exactly what
was verified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .model import Kernel, Param
from .text import Range, SourceText, Span


@dataclass(frozen=True)
class TextEdit:
    """Replace ``span`` (bytes) — equivalently ``range`` (LSP) — with ``new_text``."""

    span: Span
    range: Range
    new_text: str


def make_edit(src: SourceText, span: Span, new_text: str) -> TextEdit:
    return TextEdit(span, src.range(span), new_text)


def splice(data: bytes, edits: Iterable[tuple[int, int, str]]) -> str:
    """``data`` with byte ranges ``(start, end, new text)`` replaced; raises ValueError on overlap."""
    out: list[bytes] = []
    pos = 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):  # stable: insertions keep their order
        if start < pos:
            raise ValueError(f"overlapping edits at byte {start}")
        out.append(data[pos:start])
        out.append(new.encode("utf-8"))
        pos = end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")


def apply_edits(text: str | SourceText, edits: Iterable[TextEdit]) -> str:
    """Apply non-overlapping edits to a text; raises ValueError on overlap."""
    src = text if isinstance(text, SourceText) else SourceText(text)
    return splice(src.data, ((e.span.start, e.span.end, e.new_text) for e in edits))


def replace_body(src: SourceText, kernel: Kernel, body: str) -> TextEdit:
    """Replace the kernel's body; ``body`` includes the braces."""
    body = body.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError("a kernel body must start with `{` and end with `}`")
    return make_edit(src, kernel.body_span, body)


def replace_signature(src: SourceText, kernel: Kernel, signature: str) -> TextEdit:
    """Replace everything from the first specifier to the closing parenthesis of the parameter list."""
    return make_edit(src, kernel.signature_span, signature.strip())


def replace_definition(src: SourceText, kernel: Kernel, definition: str) -> TextEdit:
    """Replace the whole definition (template prefix and ``extern "C"`` included)."""
    return make_edit(src, kernel.span, definition.strip())


def _param(kernel: Kernel, name: str) -> Param:
    p = kernel.param(name)
    if p is None:
        raise KeyError(f"kernel `{kernel.name}` has no parameter `{name}`")
    return p


def add_const(src: SourceText, kernel: Kernel, name: str) -> TextEdit | None:
    """Make a pointer parameter's pointee const (``float* x`` -> ``const float* x``); None if it is."""
    p = _param(kernel, name)
    if p.is_const:
        return None
    return make_edit(src, Span(p.span.start, p.span.start), "const ")


def remove_const(src: SourceText, kernel: Kernel, name: str) -> TextEdit | None:
    p = _param(kernel, name)
    if p.const_span is None:
        return None
    end = p.const_span.end
    while end < len(src.data) and src.data[end : end + 1] in (b" ", b"\t"):
        end += 1
    return make_edit(src, Span(p.const_span.start, end), "")


def add_restrict(src: SourceText, kernel: Kernel, name: str) -> TextEdit | None:
    """Mark a pointer parameter ``__restrict__`` (after its outermost ``*``); None if already."""
    p = _param(kernel, name)
    if p.is_restrict or p.star_end is None:
        return None
    # `float* x` -> `float* __restrict__ x`, `float *x` -> `float * __restrict__ x`: one space each side.
    after = src.data[p.star_end : p.star_end + 1]
    return make_edit(src, Span(p.star_end, p.star_end), " __restrict__" if after in (b" ", b"\t") else " __restrict__ ")


def remove_restrict(src: SourceText, kernel: Kernel, name: str) -> TextEdit | None:
    p = _param(kernel, name)
    if p.restrict_span is None:
        return None
    start = p.restrict_span.start
    while start > 0 and src.data[start - 1 : start] in (b" ", b"\t"):
        start -= 1
    return make_edit(src, Span(start, p.restrict_span.end), "")


def set_launch_bounds(
    src: SourceText, kernel: Kernel, max_threads: int | str, min_blocks: int | str | None = None
) -> TextEdit:
    """Add or replace ``__launch_bounds__`` (before the kernel's declarator, where nvcc expects it)."""
    args = f"{max_threads}" if min_blocks is None else f"{max_threads}, {min_blocks}"
    text = f"__launch_bounds__({args})"
    if kernel.launch_bounds is not None:
        return make_edit(src, kernel.launch_bounds.span, text)
    return make_edit(src, Span(kernel.declarator_start, kernel.declarator_start), text + " ")


def remove_launch_bounds(src: SourceText, kernel: Kernel) -> TextEdit | None:
    if kernel.launch_bounds is None:
        return None
    end = kernel.launch_bounds.span.end
    while end < len(src.data) and src.data[end : end + 1] in (b" ", b"\t"):
        end += 1
    return make_edit(src, Span(kernel.launch_bounds.span.start, end), "")


def insert_before_kernel(src: SourceText, kernel: Kernel, text: str) -> TextEdit:
    """Insert whole lines directly above the kernel (used for annotation blocks)."""
    line_start = src.line_starts[kernel.start_line]
    if not text.endswith("\n"):
        text += "\n"
    return make_edit(src, Span(line_start, line_start), text)
