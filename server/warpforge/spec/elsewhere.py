"""The launch of a kernel in another file of its project, for inference when the kernel's own file has none.

Real projects define kernels in ``ops.cu`` and launch them from ``main.cu``: reading only the kernel's own
file, inference found no launch and "Add benchmark spec" wrote placeholders (``n = 1 << 20``, ``a = 1.0``)
while the host said ``1 << 22`` and ``0.5f``. This module finds the file that launches the kernel, with
``cuda.workspace`` (bounded, inert: nothing is executed), so inference can read sizes, scalars and the launch
configuration there (``spec.infer``'s ``host``).

The project root is the folder of the build description that governs the file (``warpforge.toml`` or a
compilation database, ``compiler.project``), else the nearest folder holding ``.git``, else the file's own
folder and the one above it (``search_roots``); the editor searches its workspace folder. Results are kept
for half a minute: an editor asks for code actions at every cursor move.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compiler.project import config_for
from ..cuda.model import FileModel
from ..cuda.text import SourceText
from ..cuda.workspace import find_launches

#: seconds a search result is reused (code actions are asked for at every cursor move)
TTL_S = 30.0


@dataclass(frozen=True)
class HostFile:
    """A file of the project that launches the kernel (parsed), where inference reads the host's values."""

    path: Path
    src: SourceText
    model: FileModel

    def where(self, root: Path | None = None) -> str:
        """The file's name as the user knows it: relative to ``root`` when under it."""
        if root is not None:
            try:
                return str(self.path.relative_to(root.resolve()))
            except ValueError:
                pass
        return self.path.name


def project_root(file: str | Path) -> Path | None:
    """The root of ``file``'s project: the build description's folder (a ``build/compile_commands.json``
    belongs to the folder above ``build``), else the nearest folder holding ``.git``; None when neither is
    found (or the file is not on disk)."""
    try:
        p = Path(file).resolve()
    except (OSError, ValueError):
        return None
    if not p.is_file():
        return None
    cfg = config_for(p)
    if cfg is not None:
        root = cfg.parent
        return root.parent if cfg.name == "compile_commands.json" and root.name == "build" else root
    for d in (p.parent, *p.parent.parents):
        if (d / ".git").exists():
            return d
    return None


def search_roots(file: str | Path) -> list[Path]:
    """The folders a CLI run searches, in order: the project root (``project_root``), else the file's folder
    and then the one above it (``src/ops.cu`` launched from ``main.cu``)."""
    root = project_root(file)
    if root is not None:
        return [root]
    try:
        p = Path(file).resolve()
    except (OSError, ValueError):
        return []
    return [p.parent, p.parent.parent] if p.parent != p.parent.parent else [p.parent]


_lock = threading.Lock()
_cache: dict[tuple[str, str, str, str], tuple[float, HostFile | None]] = {}


def find_host(file: str | Path, kernel: str, root: str | Path | None,
              overlay: Mapping[Path, str] | None = None) -> HostFile | None:
    """The first file under ``root`` (other than ``file``) with a readable launch of ``kernel``, or None.
    ``overlay`` holds the editor's unsaved texts, read instead of the files."""
    if root is None:
        return None
    texts = dict(overlay or {})
    digest = hashlib.sha256(repr(sorted((str(k), v) for k, v in texts.items())).encode()).hexdigest()
    key = (str(Path(root).resolve()), kernel, str(Path(file).resolve()), digest)
    now = time.monotonic()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < TTL_S:
            return hit[1]
    found = find_launches(root, kernel, overlay=texts, exclude=file)
    host: HostFile | None = None
    for f in found.files:
        if f.model.readable_launches_of(kernel):
            host = HostFile(f.path, f.source, f.model)
            break
    with _lock:
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = (now, host)
    return host
