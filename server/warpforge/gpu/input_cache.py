"""Generated inputs shared by the GPU workers of one machine.

Every GPU worker verifies candidates on inputs it generates from the spec and a seed (``inputs.generate``),
and keeps them on its device. With several GPUs each worker generated the same arrays again: numpy draws a
16-million-element float array in 80-190 ms, and the workers of a 2-GPU search each spent 11 s generating
what the other had already made. That work does not shrink as GPUs are added, so it capped the scaling of
a search (benchmarks/RESULTS.md, "Scale-out"). Here the first worker to need an array generates it and
writes it to the machine's cache as ``.npy``; the others map the file (a page-cache read) instead.

Safe to share: an array is a pure function of (argument name, dtype, length, distribution, seed,
``GENERATOR``), which is the file's key, so a reader gets exactly what it would have generated. Writers
hold a per-key lock (two workers needing one array generate it once) and publish by renaming a
complete file; a file whose header does not match the key is regenerated. Small arrays are generated in
place (faster than a file). The cache is bounded (``WARPFORGE_INPUT_CACHE_MB``, default 4096; 0 turns it
off); the least recently used files go first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..defaults import user_cache_dir
from .inputs import ArgLayout, generate, storage_dtype

#: bump when ``inputs.generate`` changes what a seed gives, so old files are never served
GENERATOR = "2"  # 2: counter-based Philox (generator.py) instead of numpy PCG64
#: arrays smaller than this are generated in place
MIN_BYTES = 4 << 20
DEFAULT_LIMIT_MB = 4096


def cache_root() -> Path:
    """``inputs/`` in the per-user folder (``defaults.user_cache_dir``)."""
    return user_cache_dir() / "inputs"


def limit_bytes() -> int:
    try:
        mb = float(os.environ.get("WARPFORGE_INPUT_CACHE_MB", DEFAULT_LIMIT_MB))
    except ValueError:
        mb = DEFAULT_LIMIT_MB
    return max(0, int(mb * (1 << 20)))


def _key(arg: ArgLayout, seed: int) -> str:
    ident = [GENERATOR, arg.name, arg.dtype, int(arg.count or 0), list(arg.dist) if arg.dist else None, int(seed)]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:40]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _load(path: Path, arg: ArgLayout) -> npt.NDArray[Any] | None:
    try:
        x: npt.NDArray[Any] = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    if x.shape != (int(arg.count or 0),) or x.dtype != np.dtype(storage_dtype(arg.dtype)):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: evicted last
    return x


def inputs_for(arg: ArgLayout, seed: int, root: Path | None = None) -> npt.NDArray[Any]:
    """``generate(arg, seed)``, made once per machine for large arrays (see the module docstring).

    Never fails for a cache problem (unwritable directory, full disk): it then generates in place.
    """
    limit = limit_bytes()
    nbytes = int(arg.count or 0) * np.dtype(storage_dtype(arg.dtype)).itemsize
    if limit == 0 or nbytes < MIN_BYTES or nbytes > limit:
        return generate(arg, seed)
    base = root if root is not None else cache_root()
    key = _key(arg, seed)
    path = base / key[:2] / f"{key}.npy"
    hit = _load(path, arg)
    if hit is not None:
        return hit
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_suffix(".lock")):
            hit = _load(path, arg)  # made by another worker while this one waited for the lock
            if hit is not None:
                return hit
            x = generate(arg, seed)
            tmp = path.with_name(f"{key}.{os.getpid()}.tmp.npy")
            np.save(tmp, x, allow_pickle=False)
            tmp.replace(path)
    except OSError:
        return generate(arg, seed)
    _evict(base, limit)
    return x


#: a temporary file this old was left by a writer that died
STALE_TMP_SECONDS = 3600.0


def _evict(base: Path, limit: int) -> None:
    """Remove the least recently used arrays until the cache holds at most ``limit`` bytes.

    An array's lock file goes with it (a worker still waiting on the old lock then generates the array
    once more: wasted work, never a wrong array), and so do temporary files of writers that died.
    """
    files: list[tuple[float, int, Path]] = []
    now = time.time()
    with contextlib.suppress(OSError):
        for p in base.glob("*/*.npy"):
            with contextlib.suppress(OSError):
                st = p.stat()
                if p.name.endswith(".tmp.npy"):
                    if now - st.st_mtime > STALE_TMP_SECONDS:
                        p.unlink()
                    continue
                files.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in files)
    for _, size, p in sorted(files):
        if total <= limit:
            break
        with contextlib.suppress(OSError):
            p.unlink()  # a worker that mapped it keeps its mapping
            total -= size
        with contextlib.suppress(OSError):
            p.with_suffix(".lock").unlink()
