"""Just enough Itanium demangling to match ptxas/nvdisasm symbols to kernels by name.

A full demangler is not needed (and cu++filt is not always installed): a kernel is found by its
unqualified name plus its namespace, which sit at the start of the mangled symbol.
"""

from __future__ import annotations

import re

_SOURCE_NAME = re.compile(r"(\d+)")


def split_name(mangled: str) -> tuple[str, ...]:
    """``_ZN2ns6kernelEPf`` -> ("ns", "kernel"); ``_Z6kernelPf`` -> ("kernel",); C names unchanged."""
    if not mangled.startswith("_Z"):
        return (mangled,)
    s = mangled[2:]
    nested = s.startswith("N")
    if nested:
        s = s[1:]
        # CV-qualifiers of member functions (not used by kernels, harmless to skip)
        while s[:1] in ("K", "V", "r"):
            s = s[1:]
    parts: list[str] = []
    while s:
        m = _SOURCE_NAME.match(s)
        if not m:
            break
        n = int(m.group(1))
        start = m.end()
        parts.append(s[start : start + n])
        s = s[start + n :]
        if not nested:
            break
        if s.startswith("I"):
            # template arguments of a nested name component: stop, the name is complete enough
            break
        if s.startswith("E"):
            break
    return tuple(parts) if parts else (mangled,)


def base_name(mangled: str) -> str:
    """The unqualified function name of a symbol."""
    return split_name(mangled)[-1]
