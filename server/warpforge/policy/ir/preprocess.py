"""The real preprocessor, run on a kernel's file, with the user's lines kept one for one.

Why: other people's kernels hide loops, types and sizes in macros (``LOOP(i, n) { ... }``,
``#define ELEM float``, ``#define TILE 32``), in headers and in the build's ``-D`` options. Expanding them
by hand is a second, wrong preprocessor; nvcc's own (``nvcc -E``, with the build's defines and include
folders) is exact. Analysis sees the expanded code; the user's file is never changed here.

Only the user's own macros are expanded in the result: those defined in the file, in the project's headers
or by the build's ``-D`` (nvcc's ``-dD`` output says where each macro was defined; a system header is
flagged ``3`` in its line markers). A line that uses none of them keeps its text exactly as written, so
``INFINITY`` or ``assert(...)`` stay as the user wrote them and a rewrite started from this text changes
no more lines than it must.

The line map is kept as simple as it can be: the expanded text has exactly the lines of the user's file,
line N being what line N became (a macro call spread over several lines lands on its first line and the
others are left empty; ``#define``/``#include`` lines become empty). The ``# N "file"`` markers nvcc writes
say which output line belongs to which source line; text from headers is dropped.

Two things are deliberately *not* expanded:

* CUDA's own qualifiers (``__global__``, ``__device__``, ``__shared__``, ``__launch_bounds__``, ...): nvcc
  expands them to ``__attribute__((...))`` spellings, which are written back, so the parser (and every rule)
  still sees a kernel;
* the names of tunables (``keep``: the spec's tunables, the candidate's defines): a variant that changes
  ``-DTILE=64`` must find ``TILE`` in the text, not the ``32`` the file defaults it to. They are passed as
  ``-DNAME=NAME`` (a macro that names itself expands to itself), which also wins over an ``#ifndef`` default.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...compiler.includes import check_includes
from ...compiler.sandbox import run_tool
from ...compiler.toolchain import ToolMissing, UnsafeArgument, find_tool, guard_argv

#: seconds one ``nvcc -E`` may take (a file with a deep include tree takes ~1 s here)
TIMEOUT_S = 60.0
#: missing headers read as empty before giving up
MAX_STUBS = 16
_MISSING = re.compile(r"fatal error: ([^:\s]+): No such file or directory")

_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"(?: \d+)*\s*$')

#: nvcc's expansion of CUDA's qualifiers -> the qualifier as users write it
_QUALIFIERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"__inline__\s+__attribute__\(\(always_inline\)\)"), "__forceinline__"),
    (re.compile(r"__attribute__\(\(noinline\)\)"), "__noinline__"),
    (re.compile(r"__attribute__\(\((global|device|host|shared|constant|managed)\)\)"), r"__\1__"),
    (re.compile(r"__attribute__\(\(launch_bounds\(((?:[^()]|\([^()]*\))*)\)\)\)"), r"__launch_bounds__(\1)"),
)


class PreprocessError(RuntimeError):
    """nvcc -E failed or is missing: ``line`` (1-based, 0 when unknown) and nvcc's first error."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Expanded:
    """The user's file after the preprocessor, line for line (see the module docstring)."""

    text: str
    #: 1-based source lines whose text the preprocessor changed (macros used or directives dropped)
    changed: frozenset[int]
    #: macros defined outside system headers (the file, the project's headers, the build's ``-D``)
    user_macros: frozenset[str] = frozenset()
    #: headers that could not be found and were read as empty (see ``expand``)
    stubbed: tuple[str, ...] = ()
    #: the project's own headers as expanded (not the toolkit's or the system's): their typedefs and
    #: device functions mean the same in the kernel as the file's own
    headers: str = ""


def restore_qualifiers(text: str) -> str:
    """``__attribute__((global))`` -> ``__global__`` and the like (what nvcc's headers expand them to)."""
    for pat, rep in _QUALIFIERS:
        text = pat.sub(rep, text)
    return text


def expand(source: str, *, path: str | None = None, defines: Sequence[tuple[str, str]] = (),
           include_dirs: Sequence[str] = (), keep: Sequence[str] = (), std: str | None = None) -> Expanded:
    """``source`` (the text of the file at ``path``) through ``nvcc -E``; raises ``PreprocessError``.

    ``defines`` are the build's and the spec's ``-D``s, ``include_dirs`` the build's ``-I``s (the file's own
    folder is searched first, as for the real build); ``keep`` names macros left unexpanded (tunables).

    A header that cannot be found (a generated one, a library's that is not installed here) is read as
    empty and the run repeated: the user's own macros still expand, and the result is only ever read by
    the analysis (a candidate is built with the project's real include path). ``Expanded.stubbed`` says
    which."""
    folder = str(Path(path).resolve().parent) if path else ""
    return _expand_cached(source, folder, tuple(defines), tuple(include_dirs), tuple(sorted(set(keep))), std)


@lru_cache(maxsize=128)
def _expand_cached(source: str, folder: str, defines: tuple[tuple[str, str], ...], include_dirs: tuple[str, ...],
                   keep: tuple[str, ...], std: str | None) -> Expanded:
    try:
        nvcc = find_tool("nvcc")
    except ToolMissing as e:
        raise PreprocessError(f"nvcc is needed to expand macros: {e}") from e
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]
    with tempfile.TemporaryDirectory(prefix="warpforge-pp-") as tmp:
        # The same include check as every build (compiler.includes): an include of /dev/stdin or /dev/zero
        # must never reach the preprocessor, whose output is only ever read by the analysis.
        for problem in check_includes(source, f"k{digest}.cu", include_dirs=[*([folder] if folder else []),
                                                                             *include_dirs],
                                      system_dirs=[], nvcc=nvcc, build_dir=tmp, own=None):
            if problem.severity == "error":
                raise PreprocessError(problem.text, problem.line)
        src = Path(tmp) / f"k{digest}.cu"
        src.write_text(source, encoding="utf-8")
        args = [str(nvcc), "-E", "-dD", "-x", "cu"]
        if std:
            args.append(f"-std={std}")
        for d in ([folder] if folder else []) + list(include_dirs):
            args += ["-I", d]
        for name, value in defines:
            args.append(f"-D{name}={value}" if value != "" else f"-D{name}")
        args += [f"-D{name}={name}" for name in keep]
        stubs = Path(tmp) / "stubs"
        args += ["-I", str(stubs), str(src), "-o", str(Path(tmp) / "out.ii")]
        stubbed: list[str] = []
        while True:
            proc = _run(args, tmp)
            missing = _MISSING.search(proc.stderr) if proc.returncode != 0 else None
            if missing is None or len(stubbed) >= MAX_STUBS or not _stub(stubs, missing.group(1)):
                break
            stubbed.append(missing.group(1))
        if proc.returncode != 0:
            raise _error(proc.stderr, src.name, str(Path(tmp)))
        out = (Path(tmp) / "out.ii").read_text(encoding="utf-8", errors="replace")
        out = out.replace(str(src), src.name)  # assert() spells the file: keep it the marker name
    got = _user_lines(out, src.name, source, _system_roots(nvcc))
    return Expanded(got.text, got.changed, got.user_macros, tuple(stubbed), got.headers)


def _run(args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    try:
        argv = guard_argv("nvcc", args)
    except UnsafeArgument as e:
        raise PreprocessError(f"nvcc -E not run: {e}") from e
    try:
        return run_tool(argv, tool="nvcc", timeout=TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise PreprocessError(f"nvcc -E took longer than {TIMEOUT_S:.0f} s") from e
    except OSError as e:
        raise PreprocessError(f"nvcc -E did not run: {e}") from e


def _stub(stubs: Path, name: str) -> bool:
    """An empty header ``name`` under ``stubs`` (searched last); False for a name that is not a plain relative path."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not name.strip():
        return False
    target = stubs / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("", encoding="utf-8")
    return True


def _system_roots(nvcc: Path) -> tuple[str, ...]:
    """Folders whose headers are the toolkit's or the system's (nvcc passes its own with ``-I``, so line
    markers do not flag them as system headers)."""
    return (os.path.normpath(nvcc.resolve().parent.parent) + os.sep, "/usr/include/", "/usr/lib/",
            "/usr/local/include/")


def _error(stderr: str, name: str, tmp: str) -> PreprocessError:
    """The first error nvcc reported, with its line in the user's file where it names one."""
    lines = [ln.replace(tmp + os.sep, "") for ln in stderr.splitlines()]
    for ln in lines:
        m = re.search(re.escape(name) + r"[:(](\d+)", ln)
        if m and "error" in ln:
            return PreprocessError(ln.split(name, 1)[-1].lstrip(":(0123456789) ").strip(), int(m.group(1)))
    first = next((ln for ln in lines if "error" in ln), next((ln for ln in lines if ln.strip()), "nvcc -E failed"))
    where = next((int(m.group(1)) for ln in lines if (m := re.search(re.escape(name) + r":(\d+)", ln))), 0)
    return PreprocessError(first.strip(), where)


_DEFINE = re.compile(r"^#define ([A-Za-z_]\w*)")
_CODE_ID = re.compile(r"\b[A-Za-z_]\w*\b")


def _user_lines(output: str, name: str, source: str, roots: tuple[str, ...] = ()) -> Expanded:
    """The output lines that belong to the user's file, placed at their source lines (see module docstring)."""
    n_lines = source.count("\n") + 1
    lines: list[list[str]] = [[] for _ in range(n_lines + 1)]  # 1-based
    mine = False
    system = True
    cur = 1
    last_written = 0
    macros: set[str] = set()
    headers: list[str] = []
    for ln in output.split("\n"):
        m = _MARKER.match(ln)
        if m:
            fname = m.group(2)
            mine = Path(fname).name == name
            system = fname == "<built-in>" or " 3" in ln[m.end(2):] or \
                os.path.normpath(fname).startswith(roots) or ("/cuda" in fname and "/include/" in fname)
            cur = int(m.group(1))
            continue
        d = _DEFINE.match(ln)
        if d or ln.startswith("#undef "):
            if d and not system:
                macros.add(d.group(1))
            cur += 1
            continue
        if not mine and not system and not fname.startswith("<"):
            headers.append(ln)
        if mine and 1 <= cur <= n_lines:
            if cur == last_written and lines[cur]:
                lines[cur].append(" " + ln.strip())  # a fragment of the same source line (after a marker)
            else:
                lines[cur].append(ln)
            last_written = cur
        cur += 1
    originals = source.split("\n")
    expanded = [restore_qualifiers("".join(parts)).rstrip() for parts in lines[1:]]
    out_lines: list[str] = []
    take = False
    depth = 0  # parentheses a taken line left open: a macro call continuing on the next line
    for orig, exp in zip(originals, expanded, strict=False):
        code = orig.strip()
        if code.startswith("#"):
            take = True  # a directive: resolved (its continuation lines follow the same decision)
        elif depth > 0 and take:
            pass  # still inside a call of the user's macro
        elif code and (exp.strip() or not take):
            take = bool(set(_CODE_ID.findall(orig)) & macros)
            depth = 0
        if take and not code.startswith("#"):
            depth = max(0, depth + orig.count("(") - orig.count(")"))
        out_lines.append(exp if take else orig.rstrip())
        if not orig.rstrip().endswith("\\") and code.startswith("#"):
            take = False
    out_lines += originals[len(out_lines):]
    changed = frozenset(i + 1 for i, (a, b) in enumerate(zip(originals, out_lines, strict=False))
                        if a.rstrip() != b)
    return Expanded("\n".join(out_lines), changed, frozenset(macros), headers=restore_qualifiers("\n".join(headers)))
