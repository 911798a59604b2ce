"""Hovers in Markdown: what a hint at the cursor means, laid out for reading.

The editor shows the diagnostic's own text (a headline of a dozen words, clangd-style) at the top of the hover;
this adds the explanation the headline left out (what is slow and why, with the numbers), then the code and its
title, the evidence as a small table, what the optimizer does about it (and whether a quick fix applies it now),
the estimated gain with its basis, the other lines of the same root cause, and the code's documentation. Only
the hints the settings show are described.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..profile.findings import CODES, Finding, doc_url
from .convert import range_, ranked_severity

if TYPE_CHECKING:
    from .server import WarpForgeServer

#: codes whose fix is a quick fix of ``actions`` (Ctrl+.), not only a transformation of the search
QUICK_FIXES = {"WF101": "mark the read-only pointers `const __restrict__`", "WF010": "add `__launch_bounds__`"}


def _plain(text: str) -> str:
    """Text shown as is in Markdown: ``__restrict__`` is a name, not bold."""
    return "".join("\\" + ch if ch in "\\`*_[]<>#|" else ch for ch in text).replace("\n", " ")


def _code_spans(text: str) -> str:
    """A message as Markdown: its `code` spans kept as code, the rest escaped (``__restrict__`` is no bold)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: all plain
        return _plain(text)
    return "".join(_plain(p) if i % 2 == 0 else f"`{p}`" for i, p in enumerate(parts))


def markdown(f: Finding) -> str:
    """One finding as Markdown (see the module docstring)."""
    info = CODES.get(f.code)
    title = info.title if info is not None else f.code
    out = [f"**{f.code}** · {_plain(title)} · *{ranked_severity(f).value}*"
           + (f" · estimated gain **{f.gain:.2f}×**" if f.gain is not None else "")]
    if f.message != f.headline():
        out.append(_code_spans(f.message))
    rows = f.evidence_rows()
    if rows:
        out.append("| evidence | |\n|---|---|\n" + "\n".join(f"| {_plain(k)} | {_plain(v)} |" for k, v in rows))
    header = f.evidence.get("missing_header")
    if f.code == "WF000" and isinstance(header, str) and header:
        out.append(f"**Action:** WarpForge builds with the include folders of `warpforge.toml` or "
                   f"`compile_commands.json`, and none names the folder of `{header}`: Ctrl+. offers to use a "
                   f"`compile_commands.json` found in the workspace or to add the folder that holds it.")
    if f.action:
        act = f"**Action:** Optimize Kernel tries `{f.action}`"
        if f.code in QUICK_FIXES:
            act += f"; Ctrl+. applies a quick fix now ({QUICK_FIXES[f.code]})"
        out.append(act + ".")
    elif f.code in QUICK_FIXES:
        out.append(f"**Action:** Ctrl+. applies a quick fix ({QUICK_FIXES[f.code]}).")
    if f.gain is not None:
        out.append(f"**Estimated gain:** {f.gain:.2f}× the kernel's speed" + (f" ({f.gain_basis})" if f.gain_basis
                                                                              else "") + ".")
    if f.related:
        out.append("**Same root cause:**\n" + "\n".join(f"- line {r.start.line + 1}: {m}" for r, m in f.related))
    out.append(f"[{f.code} in the documentation]({doc_url(f.code)})")
    return "\n\n".join(out)


def _contains(f: Finding, pos: lsp.Position) -> bool:
    r = range_(f.range)
    start = (r.start.line, r.start.character)
    end = (r.end.line, r.end.character)
    if start == end:  # an empty range marks its whole line
        return pos.line == r.start.line
    return start <= (pos.line, pos.character) <= end


def hover(server: WarpForgeServer, uri: str, pos: lsp.Position) -> lsp.Hover | None:
    """The Markdown hover at ``pos``: every shown hint whose range holds it, most severe first."""
    found = sorted((f for f in server.diagnostics.shown(uri) if _contains(f, pos)),
                   key=lambda f: (ranked_severity(f).rank, -(f.gain or 1.0), f.code))
    if not found:
        return None
    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, "\n\n---\n\n".join(markdown(f) for f in found)))


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: WarpForgeServer, params: lsp.HoverParams) -> lsp.Hover | None:
        return hover(ls, params.text_document.uri, params.position)
