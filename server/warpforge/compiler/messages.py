"""nvcc's log read into messages, each anchored at the line of the user's file it belongs to.

Why a module: nvcc runs several programs and each prints its own format, and a message is only useful where
the user can act on it. What nvcc 13 prints (all checked against the real tools):

* the host preprocessor (gcc), which also preprocesses device code: ``a.cu:3:10: fatal error: x.h: No such
  file or directory``, ``a.cu:1:2: error: #error ...``, ``warning: ... [-Wcpp]``, preceded for a header by
  ``In file included from a.cu:2:`` (and ``from b.h:4,`` lines), followed by source excerpts and
  ``compilation terminated.``;
* the front end (EDG/cudafe++/cicc): ``a.cu(12): error: ...``, ``warning #177-D: ...``, ``catastrophic error:
  cannot open source file "x.h"``, with ``detected during instantiation of ... at line 9 of a.cu`` after
  an error inside a template, and ``1 error detected in the compilation of "a.cu".`` at the end;
* ptxas: ``ptxas error   : Entry function '_Z1kPf' uses too much shared data ...``, ``ptxas fatal   :
  Unresolved extern function '_Z3extv'``, ``ptxas warning : Registers are spilled ...`` and, for a line of
  the PTX, ``ptxas x.ptx, line 5; error   : ...``;
* nvlink (a relocatable build): ``nvlink error   : Undefined reference to '_Z3extv' in 'x.o'``;
* the driver itself: ``nvcc fatal   : Unknown option '-foo'``.

``parse`` reads them all; ``anchor`` moves a message reported inside a header to the ``#include`` line of the
user's file that brings the header in (the header's own place stays in ``origin``), so an error in a
project header, or a header that is not found, is shown where the user can fix it, never as the log's last
line ("compilation terminated.").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from .files import read_text_regular


@dataclass(frozen=True)
class CompilerMessage:
    """An nvcc/ptxas diagnostic at a line of the original file (1-based line; 0 when unknown)."""

    file: str
    line: int
    severity: str  # "error" | "warning" | "remark"
    code: str
    text: str
    #: 1-based column where the tool gave one (gcc-style messages), else 0
    column: int = 0
    #: ``header.h:4`` where the message was reported, when it is anchored on the including line of ``file``
    origin: str = ""
    #: the function a ptxas/nvlink message names (mangled), so it can be shown on that kernel
    function: str = ""
    #: the header a "No such file" / "cannot open source file" message could not find, as written
    missing_header: str = ""
    #: where a header's message came from, outermost first: the preprocessor's ``In file included from`` lines
    #: or an instantiation's ``at line N of F`` (read by ``anchor``, which empties it)
    chain: tuple[tuple[str, int], ...] = ()


#: gcc-style (the host preprocessor): ``file:line[:col]: severity: text``
_CC = re.compile(r":(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<text>.*)$")
_CC_LINE = re.compile(r"^(?P<file>[^\s:][^:]*?)" + _CC.pattern)
_INCLUDED = re.compile(r"^(?:In file included|\s+) from (?P<file>.+?):(?P<line>\d+)(?::\d+)?[:,]$")
#: EDG-style (the CUDA front end): ``file(line): severity[ #code]: text``
_EDG_AT = (r"\((?P<line>\d+)\): (?P<sev>error|warning|remark|catastrophic error)"
           r"(?: #(?P<code>[\w-]+))?\s*:\s*(?P<text>.*)$")
_EDG = re.compile(r"^(?P<file>[^\n(]*?)" + _EDG_AT)
_EDG_AFTER = re.compile(_EDG_AT)
_DETECTED = re.compile(r'at line (?P<line>\d+) of "?(?P<file>[^"]+?)"?\s*$')
#: ptxas / nvlink / the nvcc driver: ``tool severity : text`` (ptxas may name a PTX line first)
_TOOL = re.compile(r"^(?P<tool>ptxas|nvlink|nvcc|fatbinary|cicc|cudafe\+\+)(?: [^;:]*?, line \d+;)?\s*"
                   r"(?P<sev>error|warning|fatal|info)\s*: (?P<text>.*)$")
_FUNCTION = re.compile(r"'(?P<name>_Z\w+|[A-Za-z_]\w*)'")
_MISSING = (re.compile(r"^(?P<name>[^:]+): No such file or directory$"),
            re.compile(r'^cannot open source file "(?P<name>[^"]+)"'))
#: lines that end a failed compile and say nothing of their own
NOISE = re.compile(r"^(compilation terminated\.|Compilation terminated\.|\d+ (?:catastrophic )?errors? detected in "
                   r"the compilation of .*|Remark: The warnings can be suppressed.*)$")


def missing_header(text: str) -> str:
    """The header a preprocessor message says it could not find ("" for any other message)."""
    for rx in _MISSING:
        m = rx.match(text.strip())
        if m:
            return m.group("name").strip()
    return ""


def _severity(word: str) -> str:
    return "error" if "error" in word or word == "fatal" else "warning" if word == "warning" else "remark"


def _located(stripped: str, names: tuple[str, ...]) -> tuple[str, re.Match[str] | None, str]:
    """(file, match, style) for a gcc- or EDG-style line; known ``names`` are read whole (they may hold
    parentheses or colons)."""
    for known in names:
        if known and stripped.startswith(known):
            rest = len(known)
            m = _EDG_AFTER.match(stripped, rest) if stripped[rest:rest + 1] == "(" else _CC.match(stripped, rest)
            if m is not None:
                return known, m, "edg" if stripped[rest] == "(" else "cc"
    m = _EDG.match(stripped)
    if m is not None:
        return m.group("file"), m, "edg"
    m = _CC_LINE.match(stripped)
    if m is not None:
        return m.group("file"), m, "cc"
    return "", None, ""


def parse(log: str, default_file: str, files: tuple[str, ...] = ()) -> list[CompilerMessage]:
    """Every error, warning and remark in ``log`` (notes, source excerpts and closing lines are left out).

    ``default_file`` is the unit's name, used where a message names no file (ptxas, nvlink, nvcc); ``files``
    are further names known to appear. A header's message keeps the header as its file and records the
    ``In file included from`` chain / ``detected during ... at line N of F`` in ``chain`` for ``anchor``.
    """
    msgs: list[CompilerMessage] = []
    included: list[tuple[str, int]] = []
    names = tuple(sorted({*files, default_file} - {""}, key=len, reverse=True))
    for line in log.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        inc = _INCLUDED.match(line)
        if inc is not None:
            included.append((inc.group("file"), int(inc.group("line"))))
            continue
        det = _DETECTED.search(stripped)
        if det is not None and msgs and ("detected during" in stripped or line[:1].isspace()):
            last = msgs[-1]
            msgs[-1] = replace(last, chain=(*last.chain, (det.group("file"), int(det.group("line")))))
            continue
        file, m, style = _located(stripped, names)
        if m is not None:
            if m.group("sev") == "note":
                included = []
                continue
            text = m.group("text").strip()
            col = int(m.group("col") or 0) if style == "cc" else 0
            code = (m.group("code") or "") if style == "edg" else ""
            msgs.append(CompilerMessage(file or default_file, int(m.group("line")), _severity(m.group("sev")),
                                        code, text, column=col, missing_header=missing_header(text),
                                        chain=tuple(reversed(included))))  # outermost (the unit's line) first
            included = []
            continue
        t = _TOOL.match(stripped)
        if t is not None and t.group("sev") != "info":
            text = t.group("text").strip()
            fn = _FUNCTION.search(text)
            msgs.append(CompilerMessage(default_file, 0, _severity(t.group("sev")), t.group("tool"), text,
                                        function=fn.group("name") if fn and t.group("tool") != "nvcc" else ""))
    return msgs


def rename(messages: Iterable[CompilerMessage], names: dict[str, str]) -> list[CompilerMessage]:
    """Messages with the compile's fixed temporary names replaced by the user's (longest first)."""
    order = sorted(names, key=len, reverse=True)

    def ren(text: str) -> str:
        for fixed in order:
            text = text.replace(fixed, names[fixed])
        return text

    return [replace(m, file=ren(m.file), chain=tuple((ren(f), n) for f, n in m.chain)) for m in messages]


_INCLUDE = re.compile(r'^\s*#\s*include\s*(?P<q>["<])(?P<name>[^">\n]+)[">]')
_LINE = re.compile(r'^\s*#\s*line\s+(?P<n>\d+)(?:\s+"(?P<file>(?:[^"\\]|\\.)*)")?')


def unit_includes(unit: str) -> list[tuple[int, str, bool]]:
    """(line in the original file, header name, quoted) of each ``#include`` of a unit, following the
    ``#line`` directives ``cuda.extract`` writes (without them, the unit's own lines)."""
    out: list[tuple[int, str, bool]] = []
    line = 0
    for raw in unit.splitlines():
        line += 1
        d = _LINE.match(raw)
        if d is not None:
            line = int(d.group("n")) - 1
            continue
        m = _INCLUDE.match(raw)
        if m is not None:
            out.append((line, m.group("name").strip(), m.group("q") == '"'))
    return out


def _resolve(name: str, quoted: bool, here: Path | None, dirs: list[str]) -> Path | None:
    for d in ([str(here)] if quoted and here is not None else []) + dirs:
        p = Path(d) / name
        try:
            if p.is_file():
                return p.resolve()
        except OSError:
            continue
    return None


def header_lines(unit: str, own_dir: Path | None, dirs: list[str], limit: int = 300) -> dict[Path, int]:
    """Each header the unit reaches in ``dirs`` (followed through the headers' own includes, at most
    ``limit`` files) → the line of the unit's file whose ``#include`` brings it in."""
    found: dict[Path, int] = {}
    todo: list[tuple[Path, int]] = []
    for line, name, quoted in unit_includes(unit):
        p = _resolve(name, quoted, own_dir, dirs)
        if p is not None and p not in found:
            found[p] = line
            todo.append((p, line))
    while todo and len(found) < limit:
        header, line = todo.pop()
        try:
            body = read_text_regular(header)
        except OSError:
            continue
        for raw in body.splitlines():
            m = _INCLUDE.match(raw)
            if m is None:
                continue
            p = _resolve(m.group("name").strip(), m.group("q") == '"', header.parent, dirs)
            if p is not None and p not in found:
                found[p] = line
                todo.append((p, line))
    return found


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError):
        return False


def anchor(messages: Iterable[CompilerMessage], filename: str, unit: str, own_dir: Path | None,
           dirs: list[str]) -> list[CompilerMessage]:
    """Messages of ``filename``'s unit, each on a line of ``filename`` where it can be: one reported in a header
    goes to the ``#include`` that brings the header in (from the preprocessor's ``In file included from``
    chain, an instantiation's ``at line N of`` the file, or by following the unit's includes through ``dirs``),
    with ``origin`` naming the header's own line. Messages that name no line (ptxas, nvlink) keep line 0."""
    lines: dict[Path, int] | None = None
    out: list[CompilerMessage] = []
    for m in messages:
        chain = m.chain
        m = replace(m, chain=())
        if m.line <= 0 or _same(m.file, filename):
            out.append(m)
            continue
        origin = f"{Path(m.file).name}:{m.line}"
        at = next((n for f, n in chain if _same(f, filename)), None)
        if at is None:
            if lines is None:
                lines = header_lines(unit, own_dir, dirs)
            try:
                at = lines.get(Path(m.file).resolve())
            except (OSError, ValueError):
                at = None
        if at is None:
            out.append(replace(m, origin=origin))
            continue
        out.append(replace(m, file=filename, line=at, column=0, origin=origin))
    return out


def headline(log: str) -> str:
    """The line that says why a compile failed when no message could be read: the first that is not noise."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not NOISE.match(ln) and not ln.startswith(("|", "^", "ptxas info"))
              and "|" not in ln[:8]]
    return (useful or ["nvcc failed without a message"])[0]
