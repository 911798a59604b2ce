"""Turning a model's code into a candidate: strict checks on what it wrote, and only device code kept.

Why strict: a candidate's text replaces the kernel's definition in the user's file when accepted and is
compiled and run on the GPU before that, so what a model returns is parsed (tree-sitter, the same model
the editor uses) and reduced to what a candidate may hold — new device helpers, macros, constant data,
system includes, and the kernel itself with the original's exact signature. Host code, ``main``, launches
and other kernels are dropped; a different signature, a missing kernel or launch expressions that do not
evaluate are errors shown to the model so it can correct them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...cuda.model import DeclKind, FileModel, Kernel
from ...cuda.parser import parse
from ...cuda.text import SourceText
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from ...spec.model import KernelSpec

_FENCE = re.compile(r"```[a-zA-Z+]*\n(.*?)```", re.S)
MAX_BLOCK_THREADS = 1024


def _norm(text: str) -> str:
    return " ".join(text.split())


def _param_key(k: Kernel) -> list[tuple[str, str, int, bool, tuple[str, ...]]]:
    return [(p.name, _norm(p.type), p.pointer_depth, p.is_reference, p.array_dims) for p in k.params]


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
    k = model.kernel(original.name)
    if k is None:
        names = ", ".join(x.name for x in model.kernels) or "none"
        out.errors.append(f"no __global__ kernel named `{original.name}` in the code (kernels found: {names})")
        return out
    if [t.name for t in k.template_params] != [t.name for t in original.template_params]:
        out.errors.append("the template parameters differ from the original's "
                          f"(<{', '.join(t.name for t in original.template_params)}>)")
    if _param_key(k) != _param_key(original):
        want = file_src.slice(original.params_span)
        got = src.slice(k.params_span)
        out.errors.append(f"the parameter list differs from the original's: expected {_norm(want)}, got {_norm(got)}")
    # Syntax errors inside the kernel are left to nvcc: its messages are what the fixer works from.
    existing = {_norm(file_src.slice(d.span)) for d in file_model.declarations}
    file_names = {n for d in file_model.declarations for n in d.names}
    parts: list[tuple[int, str]] = []
    for inc in model.includes:
        if inc.system:
            parts.append((inc.span.start, src.slice(inc.span).rstrip()))
        else:
            out.dropped.append(f'#include "{inc.path}" (only system headers may be added)')
    seen_conditionals: set[int] = set()
    for d in model.declarations:
        if d.kind is DeclKind.HOST_FUNCTION:
            out.dropped.append(f"host function {', '.join(d.names)}")
            continue
        if k.span.contains_span(d.span):
            continue
        if d.conditional is not None:
            if d.conditional.start in seen_conditionals:
                continue
            seen_conditionals.add(d.conditional.start)
            span = d.conditional
        else:
            span = d.span
        body = src.slice(span)
        if _norm(body) in existing:
            continue  # the model repeated a declaration the file already has
        if d.kind is DeclKind.MACRO and set(d.names) & file_names:
            out.dropped.append(f"macro {', '.join(d.names)} (the file defines it; a tunable is set with defines)")
            continue
        parts.append((span.start, body.rstrip()))
    for other in model.kernels:
        if other is not k:
            out.dropped.append(f"kernel {other.name} (only `{original.name}` is launched)")
    ktext = src.slice(k.span).rstrip()
    if original.extern_c and not k.extern_c:
        ktext = 'extern "C" ' + ktext
    pieces = [body for _, body in sorted(parts)]
    out.source = ("\n\n".join([*pieces, ktext]) if pieces else ktext) + "\n"
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
