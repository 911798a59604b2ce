"""The kernel's canonical form for static analyzers, with its lines mapped back to the user's text.

Why: the transformations analyse the canonical form (``cuda.normalize``: function-like macros expanded,
typedefs resolved, guarded bodies turned into early exits, pointer bumping into base + offset), so an
``A(row, k)`` index macro or an ``x += row * C`` bump is one shape to them. A hint that read only the raw
text would stay silent on exactly those kernels — a naive SGEMM written with index macros got no hint that
leads to tiling while the tiling rule applied to it. An analyzer that wants the same view calls
``canonical(ctx)``: a ``KernelContext`` over the file with the kernel replaced by its canonical form (the
spec is the same, the compiler evidence is left out: it describes the original's lines), and ``line`` /
``range`` that turn a canonical line back into the line of the user's file where it came from, so the
finding points at what the user wrote.

Lines map exactly where the canonical pass kept them (macro expansion stays on its line); a line a pass
rewrote maps to the first line of the original block it replaced (a line-level diff of the two texts).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from tree_sitter import Node

from ..cuda.normalize import file_facts, normalize_definition
from ..cuda.parser import parse
from ..cuda.text import Range, SourceText
from .context import KernelContext


@dataclass
class Canonical:
    """The canonical view of one kernel (see the module docstring)."""

    ctx: KernelContext
    original: KernelContext
    #: canonical 1-based file line -> original 1-based file line (lines outside the kernel map to themselves)
    lines: dict[int, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.ctx is not self.original

    def line(self, canonical_line: int) -> int:
        """The user's line a canonical line came from."""
        return self.lines.get(canonical_line, canonical_line)

    def node_line(self, node: Node) -> int:
        """The user's line of a node of the canonical tree."""
        return self.line(self.ctx.node_line(node))

    def range(self, node: Node) -> Range:
        """Where a node of the canonical tree is in the user's text: the node itself when the kernel is
        unchanged, else the non-blank text of the line it came from."""
        if not self.changed:
            return self.ctx.range(node)
        return self.original.line_range(self.node_line(node))


def _line_map(old: list[str], new: list[str], old_first: int, new_first: int) -> dict[int, int]:
    """Canonical line -> original line: lines equal up to indentation map to each other (a guard turned into
    an early exit dedents its body); a rewritten line maps to the most similar line of the block it replaced
    (an expanded macro keeps most of its line), an inserted one to the line before it."""
    a = [" ".join(x.split()) for x in old]
    b = [" ".join(x.split()) for x in new]
    out: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            if tag == "equal":
                i = i1 + (j - j1)
            elif i2 > i1:
                i = max(range(i1, i2), key=lambda k: (difflib.SequenceMatcher(None, a[k], b[j]).ratio(), -k))
            else:
                i = max(0, i1 - 1)
            out[new_first + j] = old_first + i
    return out


def canonical(ctx: KernelContext) -> Canonical:
    """The canonical view of ``ctx``'s kernel, built once per context (the context itself when the canonical
    form is the text as written, or cannot be parsed back)."""
    memo = vars(ctx)
    got = memo.get("_wf_canonical")
    if isinstance(got, Canonical):
        return got
    result = Canonical(ctx, ctx)
    memo["_wf_canonical"] = result
    k = ctx.kernel
    definition = ctx.src.slice(k.span)
    try:
        text = normalize_definition(definition, k.name, file_facts(ctx.src.text))
    except Exception:  # a pass that trips on odd code leaves the analyzers the text as written
        return result
    if text == definition:
        return result
    data = ctx.src.data
    src = SourceText(data[: k.span.start] + text.encode("utf-8") + data[k.span.end:])
    model = parse(src.data)
    kernel = next((c for c in model.kernels if c.name == k.name and c.span.start == k.span.start), None)
    if kernel is None:
        return result
    cctx = KernelContext(ctx.file, src, model, kernel, arch=ctx.arch, spec=ctx.spec, spec_error=ctx.spec_error)
    first_old, first_new = ctx.src.line_of(k.span.start) + 1, src.line_of(kernel.span.start) + 1
    lines = _line_map(definition.splitlines(), text.splitlines(), first_old, first_new)
    shift = (src.line_count - ctx.src.line_count)
    after_new = src.line_of(kernel.span.end) + 1
    for ln in range(after_new + 1, src.line_count + 1):
        lines[ln] = ln - shift
    result = Canonical(cctx, ctx, lines)
    memo["_wf_canonical"] = result
    return result
