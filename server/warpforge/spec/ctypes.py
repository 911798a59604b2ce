"""What type a kernel parameter really has: through template arguments, typedefs, ``using`` and enums.

Why one place: a scalar passed with the wrong width or kind is a different program. A templated histogram
(``IndexType nbins``) once received the bits of ``768.0f`` as its bin count, and an enum parameter passed as
a float took no branch at all, so every variant "matched" all-zero outputs. Annotations, inference and the
element-type check all read a parameter's type here, and a type that cannot be resolved is an error at its
line, never a silent ``float32``.

Resolution is a fixed point over three maps, in any order they apply: the kernel's template parameters to
the spec's (or the launch's) template arguments (``IndexType`` -> ``int``), the file's and its headers' type
aliases (``typedef float real;``, ``using idx_t = long long;``), and the enums of the file and its headers to
their underlying integer type (``enum Act`` -> ``int``, ``enum class Mode : uint8_t`` -> ``uint8_t``): an enum
value is passed as that integer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..cuda.model import FileModel, Kernel
from ..cuda.text import SourceText
from ..cuda.types import Aliases, clean, file_aliases, file_enums
from .model import canonical_dtype

#: how many substitutions one resolution may take (aliases of aliases, a template argument naming an alias)
_MAX_STEPS = 16


def with_enumerators(text: str, values: Mapping[str, int]) -> str:
    """``text`` with the file's enumerators (``GELU``, ``Act::GELU``) replaced by their values: an enum
    argument at a launch or in an annotation is the integer the kernel receives."""
    if not values:
        return text

    def sub(m: re.Match[str]) -> str:
        return str(values[m.group(1)]) if m.group(1) in values else m.group(0)

    return _ENUMERATOR.sub(sub, text)


_ENUMERATOR = re.compile(r"\b(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)\b")


@dataclass(frozen=True)
class TypeScope:
    """The names a kernel's parameter types may go through: template arguments, aliases, enums."""

    aliases: Aliases = field(default_factory=dict)
    enums: Mapping[str, str] = field(default_factory=dict)
    template: Mapping[str, str] = field(default_factory=dict)

    def resolve(self, written: str) -> tuple[str, int]:
        """``written`` through template arguments, aliases and enums: the C type it ends at and the pointer
        depth the aliases added on the way (``typedef float* fptr;``)."""
        t = clean(written)
        extra = 0
        for _ in range(_MAX_STEPS):
            if canonical_dtype(t) is not None:
                break
            if t in self.template:
                t = clean(self.template[t])
            elif t in self.aliases:
                target, stars = self.aliases[t]
                t, extra = clean(target), extra + stars
            elif t in self.enums:
                t = clean(self.enums[t])
            else:
                break
        return t, extra

    def dtype(self, written: str) -> str | None:
        """The canonical dtype of ``written``, or None when it does not end at a known scalar type."""
        return canonical_dtype(self.resolve(written)[0])

    def unresolved(self, written: str) -> str:
        """The name resolution stopped at (for the error: ``IndexType``)."""
        return self.resolve(written)[0]


def kernel_scope(src: SourceText, model: FileModel, kernel: Kernel, file: str | None,
                 template_args: tuple[str, ...] = ()) -> TypeScope:
    """The type scope of ``kernel`` in its file, with ``template_args`` for its template parameters."""
    template = {t.name: a for t, a in zip(kernel.template_params, template_args, strict=False)
                if t.kind == "type"}
    return TypeScope(file_aliases(src, model, file), file_enums(src, model, file), template)


def type_fix(name: str, written: str, scope: TypeScope, kernel: Kernel) -> str:
    """What to write when the type of parameter ``name`` (written ``written``) cannot be resolved."""
    stuck = scope.unresolved(written)
    ctype = "int" if name.lower().startswith(("n", "num", "len", "size", "count")) else "float"
    tparam = next((t for t in kernel.template_params if t.name == stuck and t.kind == "type"), None)
    if tparam is not None:
        return f"add `// @warpforge template {stuck} = {ctype}` or `// @warpforge arg {name}: {ctype} = ...`"
    return f"write `// @warpforge arg {name}: TYPE = ...` with its C type (int, float, uint8, ...)"
