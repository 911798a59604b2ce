"""The context a transformation sees, and the Rule base class.

The context holds the original file (for the declarations a kernel needs), the spec (sizes, launch),
the findings that motivate transformations, and the current candidate — whose definition is parsed on
demand, so a rule edits the variant it is given with the same byte-exact rewrites the editor uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar

from ...cuda.candidate import Candidate
from ...cuda.model import FileModel, Kernel
from ...cuda.parser import parse
from ...cuda.text import SourceText
from ...spec.model import KernelSpec, ResolvedSpec


@dataclass
class RuleContext:
    file: str
    source: SourceText
    model: FileModel
    kernel: Kernel
    spec: KernelSpec
    candidate: Candidate
    findings: Sequence[Any] = ()
    #: streaming multiprocessors of the target GPU (grid-stride launches use k × SMs)
    sm_count: int = 132
    arch: str = "sm_90"
    extra: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def cand_src(self) -> SourceText:
        return SourceText(self.candidate.definition)

    @cached_property
    def cand_model(self) -> FileModel:
        return parse(self.cand_src.data)

    @cached_property
    def cand_kernel(self) -> Kernel | None:
        """The kernel as the current candidate defines it (None if its text no longer parses)."""
        return self.cand_model.kernel(self.kernel.name)

    @property
    def grid(self) -> tuple[str, ...]:
        return self.candidate.grid if self.candidate.grid is not None else self.spec.launch.grid

    @property
    def block(self) -> tuple[str, ...]:
        return self.candidate.block if self.candidate.block is not None else self.spec.launch.block

    @property
    def smem(self) -> str:
        return self.candidate.smem if self.candidate.smem is not None else self.spec.launch.smem

    @cached_property
    def resolved(self) -> ResolvedSpec:
        return self.spec.resolve(tunables=self.candidate.define_map())

    def finding_codes(self) -> set[str]:
        return {str(getattr(f, "code", "")) for f in self.findings}

    def finding_actions(self) -> set[str]:
        return {str(getattr(f, "action", "")) for f in self.findings if getattr(f, "action", None)}

    def derive(
        self,
        family: str,
        param: str,
        rationale: str,
        *,
        definition: str | None = None,
        grid: tuple[str, ...] | None = None,
        block: tuple[str, ...] | None = None,
        smem: str | None = None,
        defines: dict[str, str] | None = None,
        flags: tuple[str, ...] | None = None,
    ) -> Candidate:
        """A child of the current candidate with one more step ``family:param``."""
        c = self.candidate
        merged = dict(c.defines)
        if defines:
            merged.update(defines)
        return replace(
            c,
            source=definition if definition is not None else c.source,
            grid=grid if grid is not None else c.grid,
            block=block if block is not None else c.block,
            smem=smem if smem is not None else c.smem,
            defines=merged,
            flags=flags if flags is not None else c.flags,
            parent=c.id,
            family=family,
            rationale=rationale,
            steps=(*c.steps, f"{family}:{param}"),
        )


class Rule:
    """A transformation family. Subclasses set ``family`` and implement ``variants`` and ``apply``."""

    family: str = ""
    #: finding actions/codes that make this rule worth trying first
    motivated_by: tuple[str, ...] = ()
    #: True for a rule that rewrites the kernel's algorithm or data movement (a new body: warps per row,
    #: shared-memory tiles, vector loads), False for one that tunes what is there (launch, flags, qualifiers,
    #: loops). Benchmarks ask which structural families still apply to each corpus case: a structural rewrite
    #: is where the large speedups come from, and the one most easily lost when a rule's matcher changes.
    structural: ClassVar[bool] = False

    def variants(self, ctx: RuleContext) -> list[str]:
        """Parameters for which the rule applies safely to the current candidate (empty: not applicable)."""
        raise NotImplementedError

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        """The child candidate for ``param``, or None if it turns out not to apply."""
        raise NotImplementedError

    def already_applied(self, ctx: RuleContext) -> bool:
        return any(s.split(":", 1)[0] == self.family for s in ctx.candidate.steps)
