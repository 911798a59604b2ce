"""Reading the user's files in-process: regular files only, never more than a limit.

Why: the analyses read files the user's text names — headers reached by ``#include``, sources scanned for
launch sites across a workspace, the file itself — in the language server's own process. A FIFO or a device
there (``mkfifo kernels/x.cu``, an include of ``/dev/stdin``) would block the reader forever, or never end, and
starve the editor: the same hole the compile sandbox closes for nvcc (``compiler.sandbox``,
``compiler.includes``). So every such read opens without blocking, checks on the open descriptor that it is a
regular file (no race between a check and the read), and stops at a size limit.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: the most one read returns (a header or a source file of a real project is far smaller)
MAX_BYTES = 64 << 20


def read_regular(path: str | os.PathLike[str], limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; ``OSError`` otherwise (a FIFO,
    socket or device is refused without reading it, and without waiting for a writer)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe, socket or device is never read)", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
        chunks: list[bytes] = []
        got = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_regular(path: str | os.PathLike[str], limit: int = MAX_BYTES, *, strict: bool = False) -> str:
    """``read_regular`` decoded as UTF-8 (bad bytes replaced, or ``UnicodeDecodeError`` with ``strict``)."""
    data = read_regular(path, limit)
    return data.decode("utf-8") if strict else data.decode("utf-8", errors="replace")


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (links not followed) is a regular file."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False
