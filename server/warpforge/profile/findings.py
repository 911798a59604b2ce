"""Findings: one type for every hint WarpForge gives, static or profiler-grounded.

A finding is what an engineer would say pointing at a line: what is slow or wrong there and why, the
numbers that show it, the transformation family the optimizer will try (``action``), and the expected
gain when it can be estimated. Codes are stable (WF0xx compiler, WF1xx source/SASS, WF2xx profiler)
and each is documented in docs/findings.md, so a user can look one up and a test can hold us to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..cuda.text import Position, Range


class Severity(str, Enum):
    """LSP's four levels. Hazards are warnings; opportunities are information or hints."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    HINT = "hint"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2, "hint": 3}[self.value]


@dataclass(frozen=True)
class CodeInfo:
    code: str
    title: str
    severity: Severity
    source: str  # "compiler" | "spec" | "source" | "sass" | "profile" | "editor"
    action: str | None  # the transformation family the optimizer uses to act on it
    #: the squiggle's words from (message, evidence), for a code whose first clause is not its point
    headline: Callable[[str, dict[str, Any]], str] | None = None


#: The catalogue of stable codes. Adding an analyzer adds its code here and a section to docs/findings.md.
CODES: dict[str, CodeInfo] = {}


def define(code: str, title: str, severity: Severity, source: str, action: str | None,
           headline: Callable[[str, dict[str, Any]], str] | None = None) -> CodeInfo:
    if code in CODES and CODES[code].title != title:
        raise ValueError(f"finding code {code} defined twice")
    info = CodeInfo(code, title, severity, source, action, headline)
    CODES[code] = info
    return info


define("WF000", "compile error", Severity.ERROR, "compiler", None)
define("WF001", "compiler warning", Severity.WARNING, "compiler", None)
define("WF002", "toolchain missing", Severity.INFO, "compiler", None)
define("WF003", "benchmark spec error", Severity.WARNING, "spec", None)
define("WF004", "document not analyzed", Severity.INFO, "editor", None)


DOCS_URL = "https://github.com/warpforge/warpforge/blob/main/docs/findings.md"


def doc_url(code: str) -> str:
    return f"{DOCS_URL}#{code.lower()}"


@dataclass(frozen=True)
class Finding:
    """A hint at a source range.

    ``range`` is in LSP coordinates (0-based line, UTF-16 column) of ``file``; ``evidence`` holds the
    numbers behind the message (register counts, instruction widths, ...); ``gain`` is an estimated
    speedup factor of the kernel (1.3 = 30 % faster) when it can be estimated, with ``gain_basis``
    saying how.
    """

    code: str
    severity: Severity
    file: str
    range: Range
    message: str
    kernel: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    action: str | None = None
    gain: float | None = None
    gain_basis: str | None = None
    related: tuple[tuple[Range, str], ...] = ()
    source: str = "source"

    def headline(self) -> str:
        """The finding in at most ``HEADLINE_WORDS`` words of plain text, as clangd words a diagnostic: what the
        squiggle shows. The full message (why, the numbers, what to do) goes to the hover. Compiler and spec
        messages (WF0xx) are the tool's or the user's own words and are kept whole."""
        return headline(self.code, self.message, self.evidence)

    def evidence_rows(self) -> list[tuple[str, str]]:
        """The evidence for people, one (what, value) pair per number: ``("sass readonly loads", "0")``. Nested
        structures (per-parameter tables, per-buffer lists, folded findings) are left out: the message says
        what they hold and folded findings come as related lines. The full evidence stays in ``evidence``
        (JSON, diagnostic data)."""
        rows = []
        for key, value in self.evidence.items():
            if value is None or key == "merged" or isinstance(value, dict):
                continue
            if isinstance(value, list | tuple):
                if not value or any(isinstance(v, dict | list | tuple) for v in value):
                    continue
                shown = ", ".join(map(str, value))
            elif isinstance(value, bool):
                shown = "yes" if value else "no"
            else:
                shown = str(value)
            rows.append((key.replace("_", " "), shown))
        return rows

    def evidence_text(self) -> str:
        """The evidence on one line: ``sass readonly loads 0; written y`` (see ``evidence_rows``)."""
        return "; ".join(f"{k} {v}" for k, v in self.evidence_rows())

    @property
    def line(self) -> int:
        """1-based line, for humans."""
        return self.range.start.line + 1

    @property
    def column(self) -> int:
        """1-based column, for humans."""
        return self.range.start.character + 1

    def sort_key(self) -> tuple[int, int, int, str]:
        return (self.range.start.line, self.range.start.character, self.severity.rank, self.code)

    def to_json(self) -> dict[str, Any]:
        r = self.range
        return {
            "code": self.code,
            "severity": self.severity.value,
            "file": self.file,
            "kernel": self.kernel,
            "line": r.start.line + 1,
            "column": r.start.character + 1,
            "range": _range_json(r),
            "message": self.message,
            "evidence": self.evidence,
            "action": self.action,
            "gain": self.gain,
            "gain_basis": self.gain_basis,
            "related": [{"line": rr.start.line + 1, "message": m, "range": _range_json(rr)} for rr, m in self.related],
            "source": self.source,
            "docs": doc_url(self.code),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        """The finding ``to_json`` wrote (an equal one: the workspace store keeps profiles' findings this way)."""
        return cls(code=d["code"], severity=Severity(d["severity"]), file=d["file"], range=_range(d["range"]),
                   message=d["message"], kernel=d.get("kernel"), evidence=dict(d.get("evidence") or {}),
                   action=d.get("action"), gain=d.get("gain"), gain_basis=d.get("gain_basis"),
                   related=tuple((_range(r["range"]) if "range" in r else _line_range(r["line"]), r["message"])
                                 for r in d.get("related") or ()),
                   source=d.get("source", "source"))


def _range_json(r: Range) -> dict[str, Any]:
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


def _range(d: dict[str, Any]) -> Range:
    return Range(Position(int(d["start"]["line"]), int(d["start"]["character"])),
                 Position(int(d["end"]["line"]), int(d["end"]["character"])))


def _line_range(line: int) -> Range:
    """A related line written before related ranges were (1-based line, whole-line start)."""
    return Range(Position(line - 1, 0), Position(line - 1, 0))


def make(
    code: str,
    file: str,
    range: Range,
    message: str,
    *,
    kernel: str | None = None,
    evidence: dict[str, Any] | None = None,
    gain: float | None = None,
    gain_basis: str | None = None,
    severity: Severity | None = None,
    action: str | None = None,
    related: tuple[tuple[Range, str], ...] = (),
) -> Finding:
    """A finding with the catalogue's severity, source and action for ``code`` (overridable)."""
    info = CODES[code]
    return Finding(
        code=code,
        severity=severity or info.severity,
        file=file,
        range=range,
        message=message,
        kernel=kernel,
        evidence=evidence or {},
        action=action if action is not None else info.action,
        gain=gain,
        gain_basis=gain_basis,
        related=related,
        source=info.source,
    )


#: the most words a diagnostic's headline has (``Finding.headline``)
HEADLINE_WORDS = 12
_PAREN = re.compile(r"\s*\([^()]*\)")
_CLAUSE = re.compile(r"(?<=\w|\)|`|')(?:: |; | — | -- |\. )")


def _plain_words(text: str) -> str:
    """``text`` without parentheticals and doubled spaces, code in single quotes as clangd writes it
    (``'x'``, not Markdown's backticks, which a diagnostic shows raw)."""
    text = re.sub(r"`([^`]*)`", r"'\1'", text).replace("`", "")
    while True:
        shorter = _PAREN.sub("", text)
        if shorter == text:
            break
        text = shorter
    return re.sub(r"\s+", " ", text).strip(" ,;:")


def _word_count(text: str) -> int:
    """Words as a reader counts them: ``=`` or ``×`` alone is none."""
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


def headline(code: str, message: str, evidence: dict[str, Any] | None = None) -> str:
    """What ``Finding.headline`` says: the message's first clause, plain; when that runs past
    ``HEADLINE_WORDS``, the code's title with the buffers or parameters the evidence names."""
    if code.startswith("WF0"):
        return message
    own = CODES[code].headline if code in CODES else None
    if own is not None:
        return own(message, evidence or {})
    first = _CLAUSE.split(message, maxsplit=1)[0]
    clause = _plain_words(first)
    if clause and _word_count(clause) <= HEADLINE_WORDS:
        return clause
    info = CODES.get(code)
    title = _plain_words(info.title) if info is not None else code
    ev = evidence or {}
    names = ev.get("buffers") or ev.get("params") or ev.get("names")
    if isinstance(names, dict):
        names = list(names)
    if isinstance(names, list | tuple) and names and all(isinstance(n, str) for n in names):
        subject = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        if len(title.split()) + len(subject.split()) + 1 <= HEADLINE_WORDS:
            title = f"{title}: {subject}"
    words = title.split()
    if len(words) > HEADLINE_WORDS:
        title = " ".join(words[:HEADLINE_WORDS]) + "…"
    return title
