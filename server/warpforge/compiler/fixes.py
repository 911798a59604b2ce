"""Ways to make a header that nvcc did not find compile: the project's build, or an include folder.

Why: the commonest false error in a real project is a header in ``include/`` that the editor's build cannot
see, because nothing told WarpForge how the project is built. The fix is one of two lines in a
``warpforge.toml`` (read by ``compiler.project``): ``compile_commands = "build/compile_commands.json"`` when a
compilation database exists somewhere under the workspace (CMake puts it in any build folder), or
``include = ["include"]`` naming the workspace folder that holds the header. This module finds those
candidates and writes the file's new text; the language server offers each as a quick fix
(``lsp.actions``). It reads folders and files and runs nothing.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .project import config_for

CONFIG_NAME = "warpforge.toml"
#: folders never entered looking for a database (VCS, dependencies, caches); build folders are entered
_SKIP = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".cache",
                   ".mypy_cache", ".pytest_cache", ".warpforge"})
MAX_DEPTH = 4
MAX_RESULTS = 3
#: at most this many files are looked at finding a header (a huge workspace answers with what was found)
MAX_FILES = 20000


@dataclass(frozen=True)
class ConfigFix:
    """A new text for ``path`` (``warpforge.toml``): ``create`` when it does not exist yet."""

    title: str
    path: Path
    text: str
    create: bool


def databases(root: Path, governing: Path | None = None) -> list[Path]:
    """``compile_commands.json`` files under ``root`` (at most ``MAX_DEPTH`` folders down, nearest first),
    except ``governing``, the one already used (it evidently lacks the folder)."""
    found: list[Path] = []
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        depth = len(Path(dirpath).parts) - base
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP and not d.startswith(".")) \
            if depth < MAX_DEPTH else []
        if "compile_commands.json" in filenames:
            p = (Path(dirpath) / "compile_commands.json").resolve()
            if governing is None or p != governing.resolve():
                found.append(p)
    found.sort(key=lambda p: (len(p.parts), str(p)))
    return found[:MAX_RESULTS]


def folders_holding(root: Path, header: str, near: Path | None = None) -> list[Path]:
    """Folders X under ``root`` with ``X/header`` a file (``header`` as the ``#include`` wrote it, e.g.
    ``act/act.h``), those nearest ``near`` first."""
    parts = Path(header).parts
    if not parts or ".." in parts or Path(header).is_absolute():
        return []
    out: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP and not d.startswith("."))
        seen += len(filenames)
        if parts[-1] not in filenames:
            if seen > MAX_FILES:
                break
            continue
        f = Path(dirpath) / parts[-1]
        if f.parts[-len(parts):] != parts or not (folder := Path(*f.parts[:-len(parts)])).is_relative_to(root):
            continue
        if (folder / header).is_file() and folder not in out:
            out.append(folder)
        if seen > MAX_FILES:
            break

    def distance(folder: Path) -> tuple[int, str]:
        if near is None:
            return (0, str(folder))
        common = len(os.path.commonpath([str(folder), str(near)]).split(os.sep))
        return (-common, str(folder))

    out.sort(key=distance)
    return out[:MAX_RESULTS]


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_TABLE = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*(#.*)?$")


def with_setting(existing: str | None, key: str, value: str, merge_list: bool = False) -> str | None:
    """``existing`` (a warpforge.toml's text, None when there is none) with ``key = value`` in its ``[build]``
    table; with ``merge_list``, ``value`` joins the list already there. None when the key is written in a
    form this cannot edit safely (a multi-line value): the user edits it by hand."""
    line = f"{key} = [{_toml_string(value)}]" if merge_list else f"{key} = {_toml_string(value)}"
    if existing is None or not existing.strip():
        return f"[build]\n{line}\n"
    try:
        data = tomllib.loads(existing)
    except tomllib.TOMLDecodeError:
        return None
    lines = existing.splitlines()
    build = data.get("build")
    start = next((i for i, ln in enumerate(lines) if (m := _TABLE.match(ln)) and m.group("name").strip() == "build"),
                 None)
    if not isinstance(build, dict) or start is None:
        return existing.rstrip("\n") + f"\n\n[build]\n{line}\n"
    end = next((i for i in range(start + 1, len(lines)) if _TABLE.match(lines[i])), len(lines))
    at = next((i for i in range(start + 1, end) if re.match(rf"\s*{re.escape(key)}\s*=", lines[i])), None)
    if at is None:
        lines.insert(start + 1, line)
    else:
        old = build.get(key)
        if merge_list and isinstance(old, list):
            new = [str(v) for v in old if str(v) != value] + [value]
            candidate = f"{key} = [{', '.join(_toml_string(v) for v in new)}]"
        else:
            candidate = line
        rest = "\n".join([*lines[:at], candidate, *lines[at + 1:]]) + "\n"
        try:  # a value over several lines: replacing its first line would break the file
            if tomllib.loads(rest).get("build", {}).get(key) != tomllib.loads(f"{candidate}\n").get(key):
                return None
        except tomllib.TOMLDecodeError:
            return None
        return rest
    return "\n".join(lines) + "\n"


def _relative(path: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:
        return path.as_posix()


def missing_header_fixes(file: Path, header: str, root: Path) -> list[ConfigFix]:
    """The quick fixes for ``header`` not found compiling ``file``: use each compilation database under
    ``root``, or name each folder under ``root`` that holds the header, in ``root/warpforge.toml``."""
    config = root / CONFIG_NAME
    try:
        existing: str | None = config.read_text(encoding="utf-8") if config.is_file() else None
    except OSError:
        return []
    out: list[ConfigFix] = []
    governing = config_for(file)
    for db in databases(root, governing if governing is not None and governing.name != CONFIG_NAME else None):
        rel = _relative(db, root)
        text = with_setting(existing, "compile_commands", rel)
        if text is not None:
            out.append(ConfigFix(f"Use {rel} (the project's build) for WarpForge's builds", config, text,
                                 existing is None))
    for folder in folders_holding(root, header, file.parent):
        rel = _relative(folder, root)
        text = with_setting(existing, "include", rel, merge_list=True)
        if text is not None:
            verb = "Create" if existing is None else "Add to"
            out.append(ConfigFix(f"{verb} {CONFIG_NAME} with include folder {rel}/", config, text, existing is None))
    return out
