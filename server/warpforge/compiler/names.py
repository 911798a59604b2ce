"""The name a build gives the user's file inside the unit, and matching a name from the build's output back.

A unit says which file its lines come from with ``#line N "FILE"``, and nvcc carries FILE into messages, the
cubin's line table (SASS line info, ``-lineinfo``) and Nsight Compute's source view. cicc copies the name into
the PTX ``.file`` directive without escaping it, so a file name holding a quote, a backslash or a line break
makes PTX that ptxas rejects. Such a name is built under an alias instead: the same path with each of those
characters replaced by ``_``. Messages are mapped back to the real name by the build; the line table cannot
be rewritten, so readers of it match names with ``same_file``, which knows the alias.
"""

from __future__ import annotations

import re
from pathlib import Path

#: characters a ``#line`` name cannot carry through cicc and ptxas
_UNSAFE = re.compile(r'["\\\r\n]')


def line_alias(filename: str) -> str:
    """The name a build's ``#line`` directives give ``filename``: itself, unless it holds a quote, backslash or
    line break (each then becomes ``_``)."""
    return _UNSAFE.sub("_", filename)


def same_file(found: str, file: str) -> bool:
    """Whether a file name read from a build's output (line table, profiler source view) is ``file``: by base
    name, as the build knows it (the name itself or its ``line_alias``). Empty names match nothing."""
    if not found or not file:
        return False
    name = Path(found).name
    return name == Path(file).name or name == Path(line_alias(file)).name
