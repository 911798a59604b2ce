"""What a hand-written variant file says about how to build and launch its kernel.

A variant that needs its own launch (a warp per row, another block shape with shared memory) or its own
build (a tunable at another value, ``-use_fast_math``) says so the way an accepted variant does: its own
``// @warpforge launch`` and ``tune`` lines above the kernel, and ``// warpforge: compile with ...`` /
``// warpforge: launch with grid G and block B`` comments (what ``search.optimize.apply_candidate`` writes
when the launch or a flag cannot live in the annotation). ``warpforge verify`` reads them here, so the variant
is run the way its author wrote it, not with the original's launch and reported only as "incorrect".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..cuda import SourceText, parse
from .annotations import parse_annotation, parse_dims
from .model import LaunchSpec, SpecError

#: ``// warpforge: compile with -DNAME=V`` or ``// warpforge: compile with -use_fast_math -Xptxas -O3``
_COMPILE = re.compile(r"^\s*//+\s*warpforge:\s*compile with\s+(.+?)\s*$")
#: ``// warpforge: launch with grid (N + 255) / 256 and block 256``
_LAUNCH = re.compile(r"^\s*//+\s*warpforge:\s*launch with grid\s+(.+?)\s+and block\s+(.+?)\s*$")


@dataclass(frozen=True)
class VariantDirectives:
    """The variant's own launch, tunable values and compile flags, each with the line that gave it."""

    launch: LaunchSpec | None = None
    #: NAME -> value: the first value of each ``tune`` line and every ``-DNAME=V`` of a compile comment
    defines: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    #: where each part came from, for the report: ``launch`` / ``define NAME`` / ``flags`` -> line (1-based)
    lines: dict[str, int] = field(default_factory=dict)


def read_variant_directives(text: str, kernel: str, file: str) -> VariantDirectives:
    """The directives in the comment block above ``kernel`` in a variant file (empty when it has none).

    Errors are the annotation's own (``SpecError`` naming the variant's file and line)."""
    src = SourceText(text)
    model = parse(src.data)
    k = model.require(kernel, file)
    ann = parse_annotation(src, k, file)
    defines: dict[str, str] = {}
    lines: dict[str, int] = {}
    for t in ann.tunables:
        defines[t.name] = t.values[0]
        if t.line is not None:
            lines[f"define {t.name}"] = t.line
    launch = ann.launch
    if launch is not None and launch.line is not None:
        lines["launch"] = launch.line
    flags: list[str] = []
    if k.comment_span is not None:
        first = src.line_of(k.comment_span.start)
        for ln in range(first, src.line_of(k.comment_span.end) + 1):
            raw = src.line_text(ln)
            if m := _COMPILE.match(raw):
                more = _compile_flags(m.group(1), defines, lines, file, ln + 1)
                if more and "flags" not in lines:
                    lines["flags"] = ln + 1
                flags.extend(more)
            elif m := _LAUNCH.match(raw):
                if launch is not None:
                    raise SpecError(file, ln + 1, "the launch is given twice (an `@warpforge launch` line and a "
                                    "`warpforge: launch with` comment)", "keep one of them")
                launch = LaunchSpec(parse_dims(m.group(1), file, ln + 1, "grid"),
                                    parse_dims(m.group(2), file, ln + 1, "block"),
                                    "0", "variant", ln + 1)
                lines["launch"] = ln + 1
    return VariantDirectives(launch, defines, tuple(flags), lines)


def _compile_flags(text: str, defines: dict[str, str], lines: dict[str, int], file: str, line: int) -> list[str]:
    """The flags of one ``compile with`` comment: ``-DNAME=V`` become defines, the rest nvcc options."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise SpecError(file, line, f"cannot read the flags `{text}`: {e}",
                        "write `// warpforge: compile with -use_fast_math`") from e
    flags: list[str] = []
    it = iter(words)
    for w in it:
        if w.startswith("-D"):
            body = w[2:] or next(it, "")
            name, eq, value = body.partition("=")
            if not name:
                raise SpecError(file, line, f"`{w}` defines no macro", "write `-DNAME=VALUE`")
            defines[name] = value if eq else "1"
            lines[f"define {name}"] = line
        else:
            flags.append(w)
    return flags
