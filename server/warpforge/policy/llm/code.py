"""Turning a model's code into a candidate: strict checks on what it wrote, and only device code kept.

Why strict: a candidate's text replaces the kernel's definition in the user's file when accepted and is
compiled and run on the GPU before that, so what a model returns is parsed (tree-sitter, the same model
the editor uses) and reduced to what a candidate may hold (``cuda.reduce``) — new device helpers, types,
macros it uses, constant data, toolkit includes from a fixed list, and the kernel itself with the
original's exact signature. Host code, ``main``, launches, other kernels and other includes are dropped
and listed (an error when the kernel uses what was dropped); a different signature, a missing kernel or
launch expressions that do not evaluate are errors shown to the model so it can correct them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...cuda.model import FileModel, Kernel, KernelNotFound
from ...cuda.parser import parse
from ...cuda.reduce import reduce_device
from ...cuda.text import SourceText
from ...cuda.types import Aliases, param_key, type_aliases
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from ...spec.model import KernelSpec

#: the name in a drop report (``host function f``, ``#define X``, ``host variable boom``)
_DROPPED_NAME = re.compile(
    r"(?:function|variable|#define|struct|class|union|declaration of(?: host function)?) ([A-Za-z_]\w*)")
_FENCE = re.compile(r"```[a-zA-Z+]*\n(.*?)```", re.S)
MAX_BLOCK_THREADS = 1024


def _norm(text: str) -> str:
    return " ".join(text.split())


def _param_key(k: Kernel, aliases: Aliases, unnamed: frozenset[int] = frozenset()
               ) -> list[tuple[str, tuple[str, int, bool, tuple[str, ...]]]]:
    """Names and canonical types (``cuda.types``): a typedef spelled out or a moved ``const`` is the same list.

    The names at positions ``unnamed`` (parameters the original leaves unnamed: a tag, ``int /*unused*/``)
    are not compared: the code may name them."""
    return [("" if i in unnamed else p.name, param_key(p, aliases)) for i, p in enumerate(k.params)]


@dataclass
class KernelCode:
    """A model's code reduced to a candidate's ``source``, with what was dropped and what is wrong."""

    source: str = ""
    errors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def strip_fences(text: str) -> str:
    """Code from inside Markdown fences when the model wrapped it (it should not, but some do)."""
    blocks = _FENCE.findall(text)
    return "\n".join(blocks) if blocks else text


def extract_kernel(text: str, original: Kernel, file_src: SourceText, file_model: FileModel) -> KernelCode:
    """Reduce ``text`` to helpers + the kernel ``original.name``; errors when it cannot be a candidate."""
    out = KernelCode()
    code = strip_fences(text).strip()
    if not code:
        out.errors.append("the code is empty")
        return out
    src = SourceText(code)
    model = parse(src.data)
    try:
        k = model.require(original.name, "the code")
    except KernelNotFound as e:
        out.errors.append(str(e))
        return out
    if [t.name for t in k.template_params] != [t.name for t in original.template_params]:
        out.errors.append("the template parameters differ from the original's "
                          f"(<{', '.join(t.name for t in original.template_params)}>)")
    aliases = {**type_aliases(src, model), **type_aliases(file_src, file_model)}
    unnamed = frozenset(i for i, p in enumerate(original.params) if p.unnamed)
    if _param_key(k, aliases, unnamed) != _param_key(original, aliases, unnamed):
        want = file_src.slice(original.params_span)
        got = src.slice(k.params_span)
        out.errors.append(f"the parameter list differs from the original's: expected {_norm(want)}, got {_norm(got)}")
    # Syntax errors inside the kernel are left to nvcc: its messages are what the fixer works from.
    # What else the model wrote is reduced to device code the file does not already hold (reduce.py): host
    # code, local or off-list includes, other kernels and macros the file uses are dropped and reported.
    reduced = reduce_device(code, kernel=original.name, file_text=file_src.text)
    out.dropped = [str(d) for d in reduced.dropped]
    kept_names = {n for i in reduced.items for n in i.names}
    used = set(k.uses)
    for i in reduced.items:
        used |= i.uses
    for d in reduced.dropped:
        name = _DROPPED_NAME.search(d.what)
        if d.host and name is not None and name.group(1) in used and name.group(1) not in kept_names:
            out.errors.append(f"line {d.line}: `{name.group(1)}` is used but was dropped: {d.reason}")
    ktext = reduced.kernel(original.name)
    if ktext is None:  # the kernel's own text did not survive (it should always): keep the error visible
        out.errors.append(f"the kernel `{original.name}` could not be kept as device code")
        return out
    text = reduced.assembled(original.name)
    if original.extern_c and not k.extern_c:
        body = ktext.text.strip()
        text = text[: text.rindex(body)] + 'extern "C" ' + body + "\n"
    out.source = text
    return out


def launch_dims(values: Sequence[str]) -> tuple[str, ...] | None:
    """A launch field from the model: [] or [""] means keep the current one."""
    dims = tuple(v.strip() for v in values if v and v.strip())
    return dims or None


def check_launch(
    spec: KernelSpec | None,
    grid: tuple[str, ...] | None,
    block: tuple[str, ...] | None,
    smem: str | None,
    defines: dict[str, str],
) -> list[str]:
    """Errors in launch expressions: they must evaluate at the spec's size and at the perturbed one."""
    errors: list[str] = []
    if spec is None:
        return errors
    for dims, what in ((grid, "grid"), (block, "block")):
        if dims is not None and not 1 <= len(dims) <= 3:
            errors.append(f"{what} must have 1 to 3 dimensions, got {len(dims)}")
    for perturbed in (False, True):
        try:
            env: dict[str, int | float] = dict(spec.size_values(perturbed=perturbed, tunables=defines))
        except Exception as e:  # the spec itself is fine without our defines: report the define
            errors.append(f"the defines do not fit the spec: {e}")
            return errors
        for name, value in defines.items():
            with contextlib.suppress(ExprError):
                env.setdefault(name, parse_expr(value).evaluate({}))
        for dims, what in ((grid, "grid"), (block, "block")):
            if dims is None:
                continue
            vals: list[int] = []
            for text in dims:
                try:
                    vals.append(int(parse_expr(text).evaluate(env)))
                except (ExprError, ValueError, TypeError) as ex:
                    errors.append(f"{what} expression `{text}` does not evaluate over the spec's sizes: {ex}")
                    return errors
            if any(v < 1 for v in vals):
                errors.append(f"{what} {vals} has a dimension below 1"
                              + (" at the perturbed size" if perturbed else "") + "; round up with cdiv")
            if what == "block":
                threads = 1
                for v in vals:
                    threads *= v
                if threads > MAX_BLOCK_THREADS:
                    errors.append(f"block {vals} has {threads} threads; CUDA allows at most {MAX_BLOCK_THREADS}")
        if smem is not None:
            try:
                if int(parse_expr(smem).evaluate(env)) < 0:
                    errors.append(f"smem `{smem}` is negative")
            except (ExprError, ValueError, TypeError) as ex:
                errors.append(f"smem expression `{smem}` does not evaluate: {ex}")
        if errors:
            return errors
    return errors
