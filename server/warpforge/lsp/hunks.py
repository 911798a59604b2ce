"""Per-hunk review of a variant: the changes between the document and a variant, a subset of them applied, and
the check that the subset still makes a kernel.

Why: a reviewer who likes the vector loads but not the new launch bounds takes the one hunk, as in any diff
tool. The server, not the editor, splices the hunks: it knows the text the variant was made for (a hunk is
refused when the document no longer holds what the diff showed) and it checks the result before the edit is
sent. A subset of a verified variant is *not* verified: ``check`` refuses what cannot be a kernel any more
(the kernel gone or unparseable, or, with nvcc, a kernel that no longer compiles, e.g. a call taken without
the helper it calls) and says which; what it lets through is for the user to measure (Optimize again).

A variant that changes its launch (``// @warpforge launch``/``tune`` lines: a grid of N/4 for four elements per
thread, a block per row) is taken whole or not at all (``coupled``): its kernel is written for that launch and
the launch for that kernel, so half of the pair computes part of the output, or wrong values, without a
compile error to say so.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from ..compiler.build import BuildResult, compile_cubin
from ..compiler.toolchain import ToolMissing
from ..cuda.extract import standalone
from ..cuda.model import FileModel, Kernel
from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..spec.annotations import is_directive_line


@dataclass(frozen=True)
class Hunk:
    """One change: lines ``[old_start, old_end)`` of the document become lines ``[new_start, new_end)`` of the
    variant (0-based)."""

    index: int
    old_start: int
    old_end: int
    new_start: int
    new_end: int
    old_text: str
    new_text: str


def hunks(old: str, new: str) -> list[Hunk]:
    """The line hunks turning ``old`` into ``new``, in order (the diff editor's changes, the same matcher as
    ``jobs.line_edits``)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    out: list[Hunk] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append(Hunk(len(out), i1, i2, j1, j2, "".join(a[i1:i2]), "".join(b[j1:j2])))
    return out


def apply(old: str, chosen: Sequence[Hunk]) -> str:
    """``old`` with only the ``chosen`` hunks (of ``hunks(old, ...)``) applied."""
    a = old.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    for h in sorted(chosen, key=lambda h: h.old_start):
        out.extend(a[at:h.old_start])
        out.append(h.new_text)
        at = h.old_end
    out.extend(a[at:])
    return "".join(out)


def _spec_only(h: Hunk) -> bool:
    lines = [ln for ln in (h.old_text + h.new_text).splitlines() if ln.strip()]
    return bool(lines) and all(is_directive_line(ln) for ln in lines)


def coupled(all_hunks: Sequence[Hunk], chosen: Sequence[int]) -> str | None:
    """Why the ``chosen`` hunks cannot be taken without the rest: the variant changes its ``@warpforge`` launch
    lines, which go with its kernel (see the module docstring). None when they can."""
    spec = [h for h in all_hunks if _spec_only(h)]
    if not spec or set(chosen) >= {h.index for h in all_hunks}:
        return None
    lines = ", ".join(str(h.old_start + 1) for h in spec)
    return (f"the variant changes its launch (`// @warpforge` line {lines}) together with the kernel, which is "
            "written for that launch: one without the other would compute part of the output or wrong values")


def check(text: str, kernel: str, file: str, *, before: str, nvcc: str | None = None, arch: str | None = None,
          defines: dict[str, str] | None = None, compile: bool = True) -> str | None:
    """Why ``text`` (the document with some hunks applied) cannot be taken, or None. ``before`` is the document
    as it is: syntax problems it already has are the user's and not held against the hunks, and neither is a
    kernel this machine cannot compile as it stands (a header not found, a macro the build defines). With
    ``compile`` and an nvcc, the kernel is compiled alone (``defines``: the spec's tunables)."""
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    if k is None:
        return f"`{kernel}` would no longer be a kernel of the file (take the changes that keep its signature)"
    old_src = SourceText(before)
    old_model = parse(old_src.data)
    had = [(p.message, old_src.slice(p.span)) for p in old_model.problems]
    if len(model.problems) > len(had):
        p = next((p for p in model.problems if (p.message, src.slice(p.span)) not in had), model.problems[0])
        return f"the kernel would not parse: {p.message} at line {p.line + 1}"
    if not compile:
        return None

    def build(s: SourceText, m: FileModel, kern: Kernel) -> BuildResult:
        return compile_cubin(standalone(s, m, kern, filename=file), arch=arch or "sm_90", defines=defines,
                             filename=file, nvcc=nvcc)

    try:
        res = build(src, model, k)
        if res.ok:
            return None
        old_k = old_model.kernel(kernel)
        if old_k is None or not build(old_src, old_model, old_k).ok:
            return None  # the kernel does not compile here as it is: nothing to say about the changes
    except ToolMissing:
        return None  # parsed is all that can be said without nvcc
    first = next((m for m in res.messages if m.severity == "error"), None)
    where = f" at line {first.line}" if first is not None and first.line else ""
    return f"the kernel would not compile: {first.text if first is not None else 'nvcc failed'}{where}"
