"""What the server will not analyze, and giving memory back after a document closes.

A 5 MB file parsed on open cost 19.5 s and 1.6 GB (tree-sitter tree, the file model, every analyzer's
view of it); a binary file opened as ``.cu`` parses into thousands of ERROR nodes for seconds. Neither
can hold a useful kernel, so such a document gets one notice instead of hints, lenses or actions. The
limit is the ``maxDocumentSize`` setting (bytes of UTF-8).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re

#: C0 controls that do not occur in source text (tab, LF, VT, FF, CR and ESC in string literals do)
_CONTROL = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def skip_reason(text: str, max_bytes: int) -> str | None:
    """Why a document gets no analysis, in words for its notice; None when it is analyzed."""
    # Runs on the event loop for every request: encode only when the character count cannot decide
    # (a character is 1 to 4 bytes of UTF-8).
    size = len(text) if len(text) > max_bytes or 4 * len(text) <= max_bytes else len(
        text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return (f"this file is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:g} MB limit for analysis: WarpForge "
                "shows no hints, lenses or actions for it (setting warpforge.maxDocumentSize)")
    head = text[:65536]
    if "\x00" in head or len(_CONTROL.findall(head)) > max(8, len(head) // 100):
        return "this file is not source text (it holds NUL or control bytes): WarpForge does not analyze it"
    return None


def _malloc_trim() -> None:
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def release_memory() -> None:
    """Collect cycles and hand freed heap pages back to the OS (glibc keeps them otherwise: the 5 MB file's
    parse left the process at 231 MB after it was closed)."""
    gc.collect()
    _malloc_trim()
