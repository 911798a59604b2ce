"""Source surgery: what a candidate becomes before it is built and launched.

A candidate carries only its kernel's text, defines and launch overrides (``cuda.candidate``); the evaluator
needs a whole translation unit and concrete launch dimensions. This module splices the candidate into the
original file where its kernel was (so the kernel's dependencies are found in the original's context),
reduces what a candidate brings to device code, and resolves its launch configuration against the spec.
It is pure CPU work on text and expressions, kept apart from ``evaluator.py`` so the evaluator reads as the
verification pipeline it is. A candidate that cannot be assembled raises ``Rejected`` with the reason.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from ..cuda import FileModel, Kernel, SourceText, parse
from ..cuda.candidate import Candidate
from ..cuda.extract import standalone
from ..cuda.reduce import device_source
from ..cuda.text import Span
from ..spec import KernelSpec, SpecError
from ..spec.expr import ExprError
from ..spec.expr import parse as parse_expr
from .inputs import Layout


class Rejected(Exception):
    """The candidate cannot be turned into something to build or launch; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def translation_unit(src: SourceText, model: FileModel, kernel: Kernel, spec: KernelSpec, file: str,
                     original_source: str, cand: Candidate) -> str:
    """The standalone translation unit that builds ``cand`` in the context of the original file."""
    inst = tuple(spec.template_args) if kernel.template_params else None
    if cand.source == original_source:
        return standalone(src, model, kernel, filename=file, instantiate=inst)
    # Put the candidate where the kernel was, so its dependencies are found in the original file's
    # context; the candidate's whole text (new helpers first, then the kernel) is emitted verbatim, as
    # the "kernel", and declarations inside it are not pulled in a second time.
    span = kernel.span
    # Only device code of a candidate is ever compiled, whoever wrote it (``cuda.reduce``).
    body = device_source(cand.source, kernel.name).encode("utf-8")
    merged = src.data[: span.start] + body + src.data[span.end :]
    msrc = SourceText(merged)
    mmodel = parse(msrc.data)
    mk = mmodel.kernel(kernel.name)
    if mk is None:
        raise Rejected(f"the candidate does not define kernel `{kernel.name}`")
    region = Span(span.start, span.start + len(body))
    if region.contains_span(mk.span):
        mk = replace(mk, span=region)
    return standalone(msrc, mmodel, mk, filename=file, instantiate=inst)


def defines(spec: KernelSpec, cand: Candidate) -> dict[str, str]:
    """The ``-D`` values of a build: the spec's tunables at their first value, overridden by the candidate's."""
    base = {t.name: t.values[0] for t in spec.tunables}
    base.update(cand.defines)
    return base


def launch(spec: KernelSpec, want: Layout, cand: Candidate, variant: str,
           base: dict[str, int] | None = None) -> tuple[list[int], list[int], int]:
    """Grid, block and dynamic shared memory of ``cand`` at the size ``variant`` ("spec", "odd", or "small"
    with ``base``, the spec's ``small_sizes``; "odd" takes ``base`` too where the evaluator verifies at
    aligned perturbed sizes, ``Evaluator._aligned_baseline``).

    ``want`` is the original's buffer layout at that size: a candidate whose defines change the buffer sizes
    computes another problem and is rejected."""
    perturbed = variant in ("odd", "small")
    tun = {t.name: cand.defines.get(t.name, t.values[0]) for t in spec.tunables}
    try:
        resolved = spec.resolve(perturbed=perturbed, tunables=tun, base=base if perturbed else None)
    except SpecError as e:
        raise Rejected(f"the candidate's defines make the spec unusable: {e}") from e
    got = Layout.from_resolved(resolved, variant)
    if [a.count for a in got.args] != [a.count for a in want.args]:
        raise Rejected("the candidate's defines change the buffer sizes; a variant must compute the "
                       "same problem")
    if not cand.overrides_launch:
        return list(resolved.grid), list(resolved.block), int(resolved.smem)
    env: dict[str, int | float] = dict(resolved.sizes)
    for k, v in cand.defines.items():
        with contextlib.suppress(ExprError):
            env.setdefault(k, parse_expr(v).evaluate({}))

    def dims(exprs: tuple[str, ...] | None, default: tuple[int, int, int], what: str) -> list[int]:
        if exprs is None:
            return list(default)
        vals = []
        for e in exprs:
            try:
                vals.append(int(parse_expr(e).evaluate(env)))
            except ExprError as err:
                raise Rejected(f"launch {what} `{e}`: {err}") from err
        return [*vals, 1, 1, 1][:3]

    grid = dims(cand.grid, resolved.grid, "grid")
    block = dims(cand.block, resolved.block, "block")
    smem = int(resolved.smem)
    if cand.smem is not None:
        try:
            smem = int(parse_expr(cand.smem).evaluate(env))
        except ExprError as err:
            raise Rejected(f"launch smem `{cand.smem}`: {err}") from err
    return grid, block, smem
