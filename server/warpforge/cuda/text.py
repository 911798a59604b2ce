"""Source text with byte <-> LSP position conversion.

tree-sitter speaks UTF-8 byte offsets; the Language Server Protocol speaks (line, UTF-16 code unit).
Every span in the source model is a byte range, and this class is the single place that converts, so a
comment with an emoji above a kernel cannot shift a diagnostic or an edit by a column.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    """A zero-based LSP position: line and UTF-16 code-unit column."""

    line: int
    character: int


@dataclass(frozen=True)
class Range:
    """A half-open LSP range."""

    start: Position
    end: Position


@dataclass(frozen=True)
class Span:
    """A half-open byte range into the UTF-8 encoded source."""

    start: int
    end: int

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self.start <= offset < self.end

    def contains_span(self, other: Span) -> bool:
        return self.start <= other.start and other.end <= self.end

    def shifted(self, delta: int) -> Span:
        return Span(self.start + delta, self.end + delta)


def _utf16_len(data: bytes) -> int:
    return len(data.decode("utf-8", errors="replace").encode("utf-16-le")) // 2


class SourceText:
    """An immutable UTF-8 source with a line index."""

    __slots__ = ("data", "line_starts", "text")

    def __init__(self, text: str | bytes) -> None:
        if isinstance(text, bytes):
            self.data = text
            self.text = text.decode("utf-8", errors="replace")
        else:
            self.text = text
            self.data = text.encode("utf-8")
        starts = [0]
        find = self.data.find
        i = find(b"\n")
        while i >= 0:
            starts.append(i + 1)
            i = find(b"\n", i + 1)
        self.line_starts = starts

    @property
    def line_count(self) -> int:
        return len(self.line_starts)

    def slice(self, span: Span) -> str:
        return self.data[span.start : span.end].decode("utf-8", errors="replace")

    def line_of(self, offset: int) -> int:
        """Zero-based line containing byte ``offset``."""
        return bisect.bisect_right(self.line_starts, offset) - 1

    def line_text(self, line: int) -> str:
        start = self.line_starts[line]
        end = self.line_starts[line + 1] - 1 if line + 1 < len(self.line_starts) else len(self.data)
        return self.data[start:end].decode("utf-8", errors="replace").rstrip("\r")

    def position(self, offset: int) -> Position:
        offset = max(0, min(offset, len(self.data)))
        line = self.line_of(offset)
        start = self.line_starts[line]
        return Position(line, _utf16_len(self.data[start:offset]))

    def range(self, span: Span) -> Range:
        return Range(self.position(span.start), self.position(span.end))

    def offset(self, position: Position) -> int:
        """Byte offset of an LSP position; columns past the line end clamp to the end of the line."""
        if position.line < 0:
            return 0
        if position.line >= len(self.line_starts):
            return len(self.data)
        start = self.line_starts[position.line]
        end = (
            self.line_starts[position.line + 1] - 1
            if position.line + 1 < len(self.line_starts)
            else len(self.data)
        )
        line = self.data[start:end].decode("utf-8", errors="replace")
        units = 0
        consumed = 0
        for ch in line:
            if units >= position.character:
                break
            units += 2 if ord(ch) > 0xFFFF else 1
            consumed += len(ch.encode("utf-8"))
        return start + consumed
