"""Every launch of a kernel in a workspace: the host files that would break if the kernel's launch changed.

A variant verified with another launch (a warp per row, another block size) is only correct where the kernel
is launched that way. The kernel's own file is rarely the only place that launches it: launchers live in a
``.cpp``, a ``.cuh`` of helpers, a test. So accepting such a variant must find them all, and this module does
the finding, and nothing else: it walks the workspace folder for C/C++/CUDA sources, reads those that mention
the kernel's name, and parses them into ``FileModel``s (``cuda.parser``) to get their launch sites.

It is bounded and inert: build folders, dependency folders and VCS folders are skipped, at most
``max_files`` files are looked at and none above ``max_file_bytes``, links are not followed, and nothing is
executed. Text the editor holds for a file (unsaved changes) replaces the file's contents on disk.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..compiler.files import is_regular, read_regular
from .model import FileModel, LaunchSite
from .parser import parse
from .text import SourceText

#: the sources a launch may be written in
SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl"})
#: folders never entered: build output, dependencies, version control, caches, virtual environments
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "build", "builds", "out", "dist", "_build",
                       "cmake-build-debug", "cmake-build-release", ".cache", ".warpforge", "__pycache__",
                       ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache", "third_party_build"})
MAX_FILES = 5000
MAX_FILE_BYTES = 2_000_000
MAX_TOTAL_BYTES = 64_000_000


@dataclass(frozen=True)
class SiteFile:
    """One file of the workspace that launches the kernel: its text (the editor's, when open), its parse and
    the kernel's launches in it."""

    path: Path
    text: str
    model: FileModel
    sites: tuple[LaunchSite, ...]

    @property
    def source(self) -> SourceText:
        return SourceText(self.text)


@dataclass
class WorkspaceLaunches:
    """The launch sites of one kernel across a workspace, and what the scan could not look at."""

    root: Path
    kernel: str
    files: list[SiteFile] = field(default_factory=list)
    #: files or folders left out, with why (too large, unreadable, the file limit reached)
    skipped: list[str] = field(default_factory=list)

    @property
    def sites(self) -> list[tuple[SiteFile, LaunchSite]]:
        return [(f, s) for f in self.files for s in f.sites]


def _is_build_dir(name: str) -> bool:
    return name in SKIP_DIRS or name.startswith(("cmake-build-", "build-", "bazel-"))


def source_files(root: Path, max_files: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """The source files under ``root`` in a stable order, skipping build, dependency and VCS folders and not
    following links; at most ``max_files`` (the rest is reported as skipped)."""
    out: list[Path] = []
    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not _is_build_dir(d) and not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.suffix.lower() not in SOURCE_SUFFIXES or p.is_symlink():
                continue
            if not is_regular(p):  # a FIFO or device named like a source: never read (it would block)
                skipped.append(f"{p}: not a regular file")
                continue
            if len(out) >= max_files:
                skipped.append(f"{root}: more than {max_files} source files; the rest were not searched")
                return out, skipped
            out.append(p)
    return out, skipped


def find_launches(root: str | Path, kernel: str, *, overlay: Mapping[Path, str] | None = None,
                  exclude: str | Path | None = None, max_files: int = MAX_FILES,
                  max_file_bytes: int = MAX_FILE_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES) -> WorkspaceLaunches:
    """Every launch of ``kernel`` in the sources under ``root`` (see the module docstring). ``overlay`` maps
    paths to the text the editor holds for them; those texts are read instead of the files. ``exclude`` is
    the kernel's own file (its launches are read from the job's snapshot). A file that defines a kernel of
    the same name is another kernel's: its launches are left out, and said so in ``skipped``."""
    base = Path(root).resolve()
    found = WorkspaceLaunches(base, kernel)
    texts = {Path(p).resolve(): t for p, t in (overlay or {}).items()}
    own = Path(exclude).resolve() if exclude is not None else None
    paths, found.skipped = source_files(base, max_files)
    total = 0
    needle = kernel.encode()
    for p in paths:
        rp = p.resolve()
        if rp == own:
            continue
        if rp in texts:
            data = texts[rp].encode("utf-8")
        else:
            try:
                size = p.stat().st_size
                if size > max_file_bytes:
                    found.skipped.append(f"{p}: {size} bytes, above the {max_file_bytes}-byte limit")
                    continue
                if total + size > max_total_bytes:
                    found.skipped.append(f"{p}: the workspace's {max_total_bytes}-byte read limit was reached")
                    continue
                data = read_regular(p, max_file_bytes)
            except OSError as e:
                found.skipped.append(f"{p}: cannot read ({e.strerror or e})")
                continue
            total += len(data)
        if needle not in data or b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
        model = parse(text)
        sites = model.launches_of(kernel)
        if sites and model.kernel(kernel) is not None:
            found.skipped.append(f"{p}: defines its own `{kernel}`; its launches are of that kernel")
        elif sites:
            found.files.append(SiteFile(rp, text, model, sites))
    return found
