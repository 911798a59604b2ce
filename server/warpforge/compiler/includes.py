"""What a unit's ``#include`` lines reach, checked before nvcc runs: device files refused, outside files warned.

Why: a kernel file is the user's text, and the preprocessor opens whatever it names. ``#include "/dev/stdin"``
read the language server's LSP pipe, ``"/dev/zero"`` never ends, and ``"/etc/passwd"`` or a ``../../..`` climb
put a private file's text into compiler messages (which may go to the LLM fixer). The sandbox
(``compiler.sandbox``) bounds what a runaway tool can do; this check says, at the line, why a file is not
compiled at all, and which includes leave the project:

* an include that resolves into ``/dev``, ``/proc`` or ``/sys``, or to anything but a regular file (a FIFO,
  a socket, a device), is an **error**: nothing is compiled;
* an include that resolves outside the workspace, the CUDA toolkit and the configured include folders is a
  **warning** (the compile goes on).

Includes are resolved as the preprocessor does: a quoted name relative to the including file first (for the
unit nvcc compiles, its private build folder: a ``..`` climb from there is checked too), then the ``-I``
folders, the ``-isystem`` folders and the toolkit's; an angled name in the folders only. The includes of the
user's own headers (any found outside the toolkit and the ``-isystem`` folders) are followed, at most
``MAX_FILES``. An ``#include MACRO`` is followed when the macro is a plain ``"..."``/``<...>`` definition seen
before; anything cleverer is left to the sandbox. ``#line`` directives (the standalone units ``cuda.extract``
writes) map each include back to the user's file and line;
a problem inside a header is reported at the user's include that leads to it.

The workspace is the nearest folder above the file holding ``.git``, ``warpforge.toml``,
``compile_commands.json`` or ``.vscode`` (else the file's own folder), and in the editor its workspace folders
(``set_workspace_roots``).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .sandbox import run_tool

#: folders whose files are devices or kernel state, never source
SPECIAL_ROOTS = ("/dev", "/proc", "/sys")
#: what marks a workspace's root
WORKSPACE_MARKERS = (".git", "warpforge.toml", "compile_commands.json", ".vscode")
#: headers followed through their own includes, at most
MAX_FILES = 200
#: where a host compiler looks for angled includes by default (a ``..`` climb from them is checked too)
HOST_DIRS = ("/usr/include", "/usr/local/include")

_DIRECTIVE = re.compile(r"^\s*#\s*(include|include_next|import)\b\s*(.*)$")
_LINE = re.compile(r'^\s*#\s*(?:line\s+)?(\d+)(?:\s+"((?:[^"\\]|\\.)*)")?')
_DEFINE = re.compile(r'^\s*#\s*define\s+([A-Za-z_]\w*)\s+("[^"\n]*"|<[^>\n]*>)\s*$')
_TARGET = re.compile(r'^("([^"\n]*)"|<([^>\n]*)>|([A-Za-z_]\w*))')


@dataclass(frozen=True)
class IncludeProblem:
    """One include that is refused (``error``) or leaves the project (``warning``), at the user's line."""

    file: str
    line: int
    severity: str
    text: str


_TOKENS = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?|\n', re.S)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line, 1-based; text) of each logical line: ``\\``-newlines spliced, comments blanked.

    A directive may be split by a line continuation or hold a comment (``#/**/include``, a block comment across
    lines); both are undone here as the preprocessor undoes them before reading directives (translation
    phases 2 and 3). Strings and character literals are kept as they are.
    """
    pieces = text.replace("\r\n", "\n").split("\\\n")
    spliced = "".join(pieces)
    splices: list[int] = []  # offsets in ``spliced`` where a continuation was removed
    at = 0
    for piece in pieces[:-1]:
        at += len(piece)
        splices.append(at)
    newlines = [m.start() for m in re.finditer("\n", spliced)]

    def physical(pos: int) -> int:
        return 1 + bisect.bisect_left(newlines, pos) + bisect.bisect_right(splices, pos)

    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start, last = 1, 0
    for m in _TOKENS.finditer(spliced):
        buf.append(spliced[last:m.start()])
        last = m.end()
        tok = m.group(0)
        if tok == "\n":
            out.append((start, "".join(buf)))
            buf, start = [], physical(m.end())
        elif tok.startswith("/"):
            buf.append(" ")
        else:
            buf.append(tok)
    buf.append(spliced[last:])
    out.append((start, "".join(buf)))
    return out


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


#: the editor's workspace folders (set by the language server), inherited by the processes it starts
ROOTS_ENV = "WARPFORGE_WORKSPACE_ROOTS"


def set_workspace_roots(paths: list[str]) -> None:
    """Make ``paths`` (the editor's workspace folders) count as the workspace for every later check, in this
    process and the build processes it starts (an environment variable, so a spawned pool sees it too)."""
    os.environ[ROOTS_ENV] = os.pathsep.join(os.path.realpath(p) for p in paths)


def workspace_roots() -> list[str]:
    return [r for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r]


def workspace_root(file: Path) -> Path:
    """The nearest folder above ``file`` holding a workspace marker, else ``file``'s own folder."""
    for d in (file.parent, *file.parent.parents):
        if any((d / m).exists() for m in WORKSPACE_MARKERS):
            return d
    return file.parent


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _special(path: str) -> str | None:
    """Why ``path`` is not source (a device or kernel file, a FIFO...), or None for a regular file."""
    for p in (os.path.normpath(path), os.path.realpath(path)):
        if any(_inside(p, r) for r in SPECIAL_ROOTS):
            return "a device or kernel file (/dev, /proc, /sys)"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return "not a regular file (a device, FIFO or socket)"
    return None


class IncludeCheck:
    """The include check of one unit (see the module docstring); ``run`` returns its problems."""

    def __init__(self, filename: str, *, include_dirs: list[str], system_dirs: list[str],
                 toolkit_dirs: list[str], toolkit_root: str | None, build_dir: str, own: Path | None) -> None:
        self.filename = filename
        self.own = own
        self.search = [*include_dirs, *system_dirs, *toolkit_dirs]
        self.build_dir = build_dir
        roots = [*include_dirs, *system_dirs, *toolkit_dirs, *([toolkit_root] if toolkit_root else [])]
        if own is not None:
            roots += [str(own.parent), str(workspace_root(own))]
        roots += workspace_roots()
        self.allowed = [os.path.realpath(r) for r in roots]
        #: the toolkit's and the -isystem folders: their headers are not the user's, and are not followed
        self.foreign = [os.path.realpath(r) for r in [*system_dirs, *toolkit_dirs, *([toolkit_root] if toolkit_root
                                                                                      else [])]]
        self.macros: dict[str, str] = {}
        self.seen: set[str] = set()
        self.problems: list[IncludeProblem] = []

    def run(self, source: str) -> list[IncludeProblem]:
        self._scan(source, self.filename, self.own.parent if self.own else None, top=None, main=True)
        return self.problems

    def _candidates(self, target: str, quoted: bool, here: Path | None, main: bool) -> list[str]:
        if os.path.isabs(target):
            return [target]
        dirs: list[str] = []
        if quoted:
            if main:
                dirs.append(self.build_dir)  # nvcc compiles a copy in the build folder: it looks there first
            if here is not None:
                dirs.append(str(here))
        dirs += self.search
        return [os.path.join(d, target) for d in dirs]

    def _resolve(self, target: str, quoted: bool, here: Path | None, main: bool) -> tuple[str | None, str | None]:
        """(the file the preprocessor opens or None, why it is refused or None)."""
        for cand in self._candidates(target, quoted, here, main):
            why = _special(cand)
            if why is not None:
                return cand, why
            if os.path.isfile(cand) or (os.path.lexists(cand) and not os.path.isdir(cand)):
                return cand, None
        if not os.path.isabs(target) and ".." in Path(target).parts:
            # Not found where WarpForge looks: the host compiler's own folders come next.
            for d in HOST_DIRS:
                cand = os.path.join(d, target)
                why = _special(cand)
                if why is not None or os.path.isfile(cand):
                    return cand, why
        return None, None

    def _report(self, file: str, line: int, top: tuple[str, int] | None, severity: str, text: str) -> None:
        if top is not None and (top[0], top[1]) != (file, line):
            text = f"{text} (in {file}:{line}, included from here)"
            file, line = top
        self.problems.append(IncludeProblem(file, line, severity, text))

    def _scan(self, text: str, file: str, here: Path | None, top: tuple[str, int] | None, main: bool) -> None:
        cur_file, base_phys, base_line = file, 1, 1
        for phys, logical in _logical_lines(text):
            m = _DIRECTIVE.match(logical)
            if m is None:
                d = _DEFINE.match(logical)
                if d is not None:
                    self.macros[d.group(1)] = d.group(2)
                ln = _LINE.match(logical) if logical.lstrip().startswith("#") else None
                if ln is not None and main:
                    base_phys, base_line = phys + 1, int(ln.group(1))
                    if ln.group(2) is not None:
                        cur_file = _unescape(ln.group(2))
                        p = Path(cur_file)
                        here = p.parent if p.is_absolute() and p.parent.is_dir() else here
                continue
            user_line = phys - base_phys + base_line
            arg = m.group(2).strip()
            t = _TARGET.match(arg)
            via = ""
            if t is not None and t.group(4):
                via = f" (through the macro `{t.group(4)}`)"
                t = _TARGET.match(self.macros.get(t.group(4), ""))
            if t is None or not (t.group(2) or t.group(3)):
                continue
            quoted = t.group(2) is not None
            target = t.group(2) if quoted else t.group(3)
            written = f'#include "{target}"' if quoted else f"#include <{target}>"
            where = top or (cur_file, user_line)
            resolved, why = self._resolve(target, quoted, here, main)
            if why is not None:
                self._report(cur_file, user_line, top, "error",
                             f"`{written}`{via} reads {os.path.normpath(resolved or target)}, {why}: the compiler "
                             "would read it as source (a terminal or pipe waits for input, /dev/zero never ends), so "
                             "this file is not compiled; remove the include")
                continue
            if resolved is None:
                continue
            real = os.path.realpath(resolved)
            if not any(_inside(real, r) for r in self.allowed):
                self._report(cur_file, user_line, top, "warning",
                             f"`{written}`{via} reads {real}, outside the workspace, the CUDA toolkit and the "
                             "configured include folders: its text reaches the compiler and its messages; move "
                             "it into the workspace or add its folder to `include` in warpforge.toml's [build]")
                continue
            if real in self.seen or len(self.seen) >= MAX_FILES or any(_inside(real, r) for r in self.foreign):
                continue
            self.seen.add(real)
            try:
                body = Path(real).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            self._scan(body, real, Path(real).parent, where, main=False)


@functools.lru_cache(maxsize=8)
def toolkit_folders(nvcc: Path) -> tuple[list[str], str]:
    """The include folders nvcc searches by itself and the toolkit's root (``TOP``), as ``nvcc --dryrun`` prints
    them (nvcc may be a wrapper script elsewhere, e.g. ``/usr/local/bin/nvcc``); asked once per nvcc."""
    root = Path(os.path.realpath(nvcc)).parent.parent
    dirs: list[str] = []
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = run_tool([str(nvcc), "--dryrun", "-E", "-x", "cu", "wf_probe.cu"], tool="nvcc", timeout=30,
                       merge_stderr=True).stdout
        for line in out.splitlines():
            if (top := re.match(r"#\$ TOP=(.+)$", line.strip())) is not None:
                root = Path(os.path.realpath(top.group(1)))
            elif re.match(r"#\$ (SYSTEM_)?INCLUDES=", line.strip()):
                dirs += [d for d in re.findall(r'(?:-I|-isystem"?\s*"?)"?([^"\s]+)', line) if d not in dirs]
    dirs += [str(d) for d in (root / "include", *sorted(root.glob("targets/*/include"))) if str(d) not in dirs]
    real = [os.path.realpath(d) for d in dirs if os.path.isdir(d)]
    return list(dict.fromkeys(real)), str(root)


def check_includes(source: str, filename: str, *, include_dirs: list[str], system_dirs: list[str], nvcc: Path,
                   build_dir: str, own: Path | None) -> list[IncludeProblem]:
    """The refused and outside includes of ``source`` (compiled as ``filename``; see the module docstring)."""
    toolkit_dirs, toolkit_root = toolkit_folders(nvcc)
    return IncludeCheck(filename, include_dirs=include_dirs, system_dirs=system_dirs, toolkit_dirs=toolkit_dirs,
                        toolkit_root=toolkit_root, build_dir=build_dir, own=own).run(source)
