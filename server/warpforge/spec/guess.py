"""Values a CUDA developer accepts as a starting point, for what inference cannot pin.

Inference reads sizes, scalars and the launch from the host code; when the host code has no constant for a
value (a runtime size, a struct member, a kernel launched nowhere, a template never instantiated), the spec
it proposes must still *run*, or the kernel is never measured at all. Every placeholder used to be
``1 << 20``: a product of four of them (``outer * inner * c * h``) was 2^80 elements and the spec failed,
and a filter width of a million read far outside its buffer. The rules here are derived from the kernel's own
analysis, not from any one file:

- **a problem budget**: the sizes that multiply together in a length, a scalar or the grid share about 2^22
  elements (two dims 2048 x 2048, four 16 x 64 x 64 x 64), so the largest buffer runs in milliseconds;
- **small parameters by name**: filter and kernel widths 3, strides, pads, dilations, radii and groups 1,
  offsets 0, flags (``bool``, ``is_*``, ``use_*``) 0 — fixed, so the perturbed run keeps them;
- **moderate counts**: a size in no product (a loop bound, a dimension only used in index arithmetic) 64;
- **template parameters** with no instantiation: types ``float``, values their default, else 256;
- **the launch from the kernel's index form**: ``blockIdx.x*blockDim.x+threadIdx.x`` guarded by ``n`` is
  ``cdiv(n, 256)`` x 256; two such indices guarded by ``w`` and ``h`` are 16 x 16 blocks over them; a
  grid-stride loop a fixed grid of 4 blocks per SM of an H100; a block per row (``blockIdx.x`` the row, a
  ``threadIdx.x``-strided loop) one block per row; a block size the host sweeps (``for (bs = 32; ...)``) 256;
  ``extern __shared__`` memory one element per thread.

Each guess comes with its reason, written after the line as ``// guessed: WHY`` (``spec.resolve.Draft``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..cuda.model import Kernel
from ..cuda.text import SourceText
from .expr import ExprError, Number
from .expr import parse as expr_parse

#: log2 of the elements the sizes of one product share (2^22 floats: 16 MiB, milliseconds on any GPU)
BUDGET_LOG2 = 22
#: a count in no product: a loop bound, a dimension used only in index arithmetic
MODERATE = "64"
#: threads per block of a guessed launch, and the value of a block size the host sweeps
BLOCK = "256"
#: blocks of a grid-stride loop: 4 per SM of a 132-SM H100
GRID_STRIDE_BLOCKS = "528"

#: (pattern over the name lowercased without underscores, value, what it is)
_SMALL: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^(?:kernel|filter|ksize|window|win|patch|mask)(?:size|width|height|dim|len|[hwdxy])?$"
                r"|^k(?:size|sz|[hwd])$"), "3", "a filter width"),
    (re.compile(r"^(?:stride|dilation|dil|pad|padding|radius|rad|groups?)(?:size|[hwdxy])?$"),
     "1", "a stride, pad, dilation, radius or group count"),
    (re.compile(r"^(?:offset|off|start|begin|shift)"), "0", "an offset"),
    (re.compile(r"^(?:is|use|has|do|with|enable)[a-z]|flag"), "0", "a flag"),
)


def small_value(name: str, ctype: str = "") -> tuple[str, str] | None:
    """``(value, what)`` for a parameter whose name (or ``bool`` type) says it is small: ``kernel_h`` 3,
    ``stride_w`` 1, ``pad`` 1, ``offset`` 0, ``is_train`` 0; None for any other name."""
    if " ".join(ctype.replace("const", " ").split()) == "bool":
        return "0", "a flag"
    key = name.lower().replace("_", "")
    for rx, value, what in _SMALL:
        if rx.search(key):
            return value, what
    return None


def split_bits(k: int, total: int = BUDGET_LOG2) -> list[int]:
    """``total`` bits over ``k`` factors, the first (the outermost: a batch) taking what the others leave:
    1 -> [22], 2 -> [11, 11], 3 -> [6, 8, 8], 4 -> [4, 6, 6, 6]."""
    if k <= 1:
        return [total]
    hi = -(-total // k)
    return [max(total - hi * (k - 1), 1)] + [hi] * (k - 1)


def names_of(text: str) -> list[str]:
    """The names an expression uses, in order of appearance (none when it does not parse)."""
    try:
        found = expr_parse(text).names()
    except ExprError:
        return []
    return [n for n in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", text)) if n in found]


#: log2 of the most a size that also bounds a serial loop of the kernel gets (a quadratic kernel: 2^28 steps)
LOOPED_LOG2 = 14


def budget_values(free: list[str], products: list[tuple[str, int]], known: Mapping[str, Number] | None = None,
                  loops: Collection[str] = ()) -> dict[str, tuple[str, str]]:
    """A value and its reason for each name of ``free`` (sizes with no value), from the ``products`` it takes
    part in (each length, integer scalar and grid expression, with the bits it may take: a grid that counts
    blocks takes what the block's threads leave): the names of one product share those bits, less what its
    ``known`` sizes and numbers take (``M * K`` with ``K = 2048``, or ``M * 2048``, leave ``M`` 2^11); a name
    in several takes the smallest share; a name in none is a moderate count. A name that also bounds a serial
    loop of the kernel (``loops``: every thread iterates up to it) gets at most ``2^LOOPED_LOG2``."""
    out: dict[str, tuple[str, str]] = {}
    for n in free:
        best: tuple[int, list[str], int, int] | None = None
        for text, total in products:
            mine = [m for m in names_of(text) if m in free]
            if n in mine:
                try:  # the expression with every free name 1: what its known sizes and numbers multiply to
                    fixed = float(expr_parse(text).evaluate({**(known or {}), **dict.fromkeys(free, 1)}))
                except (ExprError, ZeroDivisionError, OverflowError, TypeError, ValueError):
                    fixed = 1.0
                taken = max(0, round(math.log2(fixed))) if fixed >= 1 else 0
                left = max(total - taken, 4 * len(mine))
                bits = split_bits(len(mine), left)[mine.index(n)]
                if best is None or bits < best[0]:
                    best = (bits, mine, total, taken)
        if best is None:
            out[n] = (MODERATE, "a count used in no length: a moderate value")
            continue
        bits, names, total, taken = best
        if n in loops and bits > LOOPED_LOG2:
            out[n] = (f"1 << {LOOPED_LOG2}", f"it also bounds a loop of the kernel (every thread iterates up to "
                      f"it): 2^{LOOPED_LOG2}")
            continue
        what = f"a problem of 2^{total} elements" if total >= BUDGET_LOG2 else \
            f"a grid of 2^{total} blocks (2^{BUDGET_LOG2} threads)"
        what += " with the known sizes in it" if taken else ""
        out[n] = (f"1 << {bits}", f"{' x '.join(names)} share {what}" if len(names) > 1 else what)
    return out


@dataclass(frozen=True)
class LaunchForm:
    """How the kernel maps threads to its problem, read from its index expressions.

    ``kind``: ``1d`` (a global x index guarded by ``x``), ``2d`` (x and y indices guarded by ``x`` and
    ``y``), ``grid-stride`` (a loop striding by ``gridDim``), ``block-per-row`` (``blockIdx.x`` a row
    guarded by ``x``, threads striding over it), or ``unknown``. ``xvar``/``yvar`` are the index variables;
    ``guarded`` is False where no guard bounds them and ``x``/``y`` were read from the subscripts instead (the
    kernel assumes the launch covers its problem exactly: those sizes must not be perturbed)."""

    kind: str
    x: str | None = None
    y: str | None = None
    xvar: str | None = None
    yvar: str | None = None
    guarded: bool = True

    def extents(self) -> dict[str, str]:
        """Each index variable's extent (for ``cuda.access.index_bounds``)."""
        out = {}
        if self.xvar is not None and self.x is not None:
            out[self.xvar] = self.x
        if self.yvar is not None and self.y is not None:
            out[self.yvar] = self.y
        return out


def _index_vars(body: str, axis: str) -> list[str]:
    """Variables assigned a global index along ``axis``: ``i = blockIdx.x * blockDim.x + threadIdx.x``."""
    out = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*([^;=][^;]*);", body):
        rhs = m.group(2)
        if re.search(rf"\bblockIdx\s*\.\s*{axis}\b", rhs) and re.search(rf"\bthreadIdx\s*\.\s*{axis}\b", rhs) \
                and re.search(rf"\bblockDim\s*\.\s*{axis}\b", rhs):
            out.append(m.group(1))
    return out


def _guard(body: str, var: str, ints: Collection[str]) -> str | None:
    """The integer parameter that bounds ``var``: ``var < n``, ``n > var``, ``if (var >= n) return``."""
    for rx in (rf"\b{re.escape(var)}\s*<=?\s*([A-Za-z_]\w*)\b(?!\s*[\[(.])",
               rf"\b([A-Za-z_]\w*)\s*>\s*{re.escape(var)}\b",
               rf"\b{re.escape(var)}\s*>=\s*([A-Za-z_]\w*)\b(?!\s*[\[(.])"):
        for m in re.finditer(rx, body):
            if m.group(1) in ints:
                return m.group(1)
    return None


def serial_loop_bounds(body: str) -> set[str]:
    """The names bounding the kernel's serial ``for`` loops (``for (k = 0; k < K; k++)``): every thread iterates
    up to them. Grid- and block-stride loops (their step names ``gridDim``/``blockDim``) share the work out and
    are not counted."""
    out = set()
    for m in re.finditer(r"\bfor\s*\(([^;()]*);([^;]*);([^)]*)\)", body):
        if re.search(r"\b(?:gridDim|blockDim)\b", m.group(3)):
            continue
        b = re.match(r"\s*[A-Za-z_]\w*\s*<=?\s*([A-Za-z_]\w*)\s*$", m.group(2))
        if b:
            out.add(b.group(1))
    return out


def _row_length(body: str, var: str, ints: list[str]) -> str | None:
    """The integer parameter a row index is multiplied by where ``var`` is the column: ``row * M + col``."""
    m = re.search(rf"\*\s*([A-Za-z_]\w*)\s*\+\s*{re.escape(var)}\b(?!\s*\*)", body)
    return m.group(1) if m and m.group(1) in ints else None


def launch_form(src: SourceText, kernel: Kernel, ints: list[str]) -> LaunchForm:
    """The kernel's thread mapping (``LaunchForm``), ``ints`` its integer parameters in signature order."""
    body = src.data[kernel.body_span.start : kernel.body_span.end].decode("utf-8", "replace")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)
    xs, ys = _index_vars(body, "x"), _index_vars(body, "y")
    gx, xvar = next(((g, v) for v in xs if (g := _guard(body, v, ints)) is not None), (None, xs[0] if xs else None))
    gy, yvar = next(((g, v) for v in ys if (g := _guard(body, v, ints)) is not None), (None, ys[0] if ys else None))
    # a stride through the whole grid: in the loop's header, added directly, or through a variable
    # (`gridSize = blockDim.x * 2 * gridDim.x; ... i += gridSize;`)
    strides = {m.group(1) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*[^;=]*\bgridDim\s*\.\s*x", body)}
    if (re.search(r"\bgridDim\s*\.\s*x\b", body) and re.search(r"(?:for|while)\s*\([^)]*gridDim", body)) \
            or re.search(r"\+=\s*[^;]*\bgridDim\s*\.\s*x", body) \
            or any(re.search(rf"\+=\s*{re.escape(s)}\s*;", body) for s in strides):
        return LaunchForm("grid-stride", gx, xvar=xvar)
    if xvar is not None and yvar is not None and (gx is None or gy is None):
        # no guard (teaching code that assumes exact multiples): the column's extent is the row length it is
        # added to (`row * M + col`), the row's the first other integer parameter that bounds no loop
        gx = gx or _row_length(body, xvar, ints)
        loops = serial_loop_bounds(body)
        gy = gy or next((n for n in ints if n != gx and n not in loops and small_value(n) is None), None)
        if gx is not None and gy is not None:
            return LaunchForm("2d", gx, gy, xvar, yvar, guarded=False)
    if gx is not None and gy is not None:
        return LaunchForm("2d", gx, gy, xvar, yvar)
    if gx is not None:
        return LaunchForm("1d", gx, xvar=xvar)
    if not xs and re.search(r"\bblockIdx\s*\.\s*x\b", body) and re.search(r"\+=\s*blockDim\s*\.\s*x\b", body):
        rows = next((g for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*blockIdx\s*\.\s*x\s*;", body)
                     if (g := _guard(body, m.group(1), ints)) is not None), None)
        rows = rows or next((m.group(1) for m in re.finditer(r"\bblockIdx\s*\.\s*x\s*<\s*([A-Za-z_]\w*)", body)
                             if m.group(1) in ints), None)
        return LaunchForm("block-per-row", rows)
    return LaunchForm("unknown")


_EXTERN_SHARED = re.compile(r"\bextern\s+(?:volatile\s+)?__shared__\s+(?:volatile\s+)?"
                            r"(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:<> ]*?)\s*"
                            r"(?:__align__\s*\(\s*\d+\s*\)\s*)?\b([A-Za-z_]\w*)\s*\[\s*\]")


def dynamic_shared_type(src: SourceText, kernel: Kernel) -> str | None:
    """The element type of the kernel's ``extern __shared__ T s[]`` array, None when it has none."""
    body = src.data[kernel.body_span.start : kernel.body_span.end].decode("utf-8", "replace")
    m = _EXTERN_SHARED.search(body)
    return " ".join(m.group(1).split()) if m else None


def template_values(kernel: Kernel) -> tuple[tuple[str, ...], str]:
    """Arguments for a template no launch instantiates: ``float`` for a type, a value's default, else a small
    value by name (``small_value``) or 256; with the reason."""
    out = []
    for t in kernel.template_params:
        if t.default is not None:
            out.append(t.default)
        elif t.kind == "type":
            out.append("float")
        elif " ".join(t.type.split()) == "bool":
            out.append("false")
        else:
            small = small_value(t.name, t.type)
            out.append(small[0] if small is not None else BLOCK)
    return tuple(out), "no launch instantiates the template: float for a type, else the default or 256"
