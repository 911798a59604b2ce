"""The plan -> apply skeleton every structural rule shares, as one base class.

A structural rule recognizes a shape in the kernel body (``analyse``), works out from the spec which of its
parameters give a launch that fits (``launches``), and for the one chosen writes a new body (``body``) and
says why (``rationale``). What is left is the same for all of them, and is what this class does once: the
variants are the parameters with a launch; applying one re-checks the shape and the plan on the candidate it
is given (a rule is a pure function of candidate and parameter, so a replayed step proposes what it proposed
the first time), splices the body into the definition and derives the child with the plan's launch.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ...cuda.candidate import Candidate
from ..ir.passes import Kernel, find_kernel
from ..ir.remap import NotLegal
from ._structural import launch_ok, with_body
from .base import Rule, RuleContext

S = TypeVar("S")


class _OnKernel(Protocol):
    @property
    def kernel(self) -> Kernel: ...


K = TypeVar("K", bound=_OnKernel)


def ir_kernel(ctx: RuleContext, prefixes: tuple[str, ...], done: str) -> tuple[Kernel, dict[str, str]] | NotLegal:
    """The candidate's kernel as the IR passes read it, with the spec's template arguments by parameter name, or
    why there is none. The start every IR-planned rule shares: ``done`` is the reason when a name of one of
    ``prefixes`` shows the rewrite (or one it excludes) has already been applied."""
    if ctx.cand_kernel is None:
        return NotLegal("the candidate does not parse")
    k = find_kernel(ctx.candidate.definition, ctx.kernel.name)
    if k is None:
        return NotLegal("the kernel's body does not parse")
    if any(p in k.text for p in prefixes):
        return NotLegal(done)
    return k, {p.name: a for p, a in zip(ctx.cand_kernel.template_params, ctx.spec.template_args, strict=False)}


def analysed(got: K | NotLegal) -> tuple[K, bytes] | None:
    """``analyse``'s answer for a rule decided on the kernel IR (its ``analysis`` gives a shape or ``NotLegal``):
    the shape and the text it was read from, or None. The words of a decline reach users and the wide funnel
    through the rule's ``why_not`` (``policy.whynot``)."""
    return None if isinstance(got, NotLegal) else (got, got.kernel.data)


@dataclass(frozen=True)
class Launch:
    """What a variant changes in the launch; None keeps the candidate's own."""

    grid: tuple[str, ...] | None = None
    block: tuple[str, ...] | None = None
    smem: str | None = None


def fitting(ctx: RuleContext, proposed: dict[str, Launch]) -> dict[str, Launch]:
    """The proposed launches (in their order) whose grid and block fit the spec at every size it gives: what
    ``launches`` returns once a rule has said what each of its parameters would launch."""
    return {p: lc for p, lc in proposed.items()
            if launch_ok(ctx, lc.grid if lc.grid is not None else ctx.grid,
                         lc.block if lc.block is not None else ctx.block)}


class StructuralRule(Rule, Generic[S]):
    """A rule that rewrites a recognized shape ``S`` of the kernel body (see the module docstring)."""

    @abstractmethod
    def analyse(self, ctx: RuleContext) -> tuple[S, bytes] | None:
        """The shape in the current candidate and the bytes its nodes index, or None when it is not there."""

    @abstractmethod
    def launches(self, ctx: RuleContext, shape: S, data: bytes) -> dict[str, Launch]:
        """Parameter -> launch, most promising first, for every parameter whose launch fits the spec."""

    @abstractmethod
    def body(self, ctx: RuleContext, shape: S, data: bytes, param: str) -> str | None:
        """The new kernel body (braces included) for ``param``, or None when it cannot be written."""

    @abstractmethod
    def rationale(self, shape: S, param: str) -> str:
        """Why the variant should be faster, in one line: the candidate's rationale."""

    def _plan(self, ctx: RuleContext) -> tuple[S, bytes, dict[str, Launch]] | None:
        got = self.analyse(ctx)
        if got is None:
            return None
        shape, data = got
        return shape, data, self.launches(ctx, shape, data)

    def variants(self, ctx: RuleContext) -> list[str]:
        plan = self._plan(ctx)
        return list(plan[2]) if plan is not None else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        plan = self._plan(ctx)
        if plan is None or param not in plan[2]:
            return None
        shape, data, launches = plan
        body = self.body(ctx, shape, data, param)
        definition = with_body(ctx, body) if body is not None else None
        if definition is None:
            return None
        launch = launches[param]
        return ctx.derive(self.family, param, self.rationale(shape, param), definition=definition,
                          grid=launch.grid, block=launch.block, smem=launch.smem)
