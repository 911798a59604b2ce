"""const_restrict: mark read-only pointer parameters ``const __restrict__``.

Why it helps: with no aliasing promise the compiler must assume a store through one pointer can change
what another points to, so it re-loads values and cannot route loads through the read-only (non-coherent)
path. ``const __restrict__`` on pointers the kernel never writes is safe exactly when no written pointer
aliases them — which the spec's separately allocated buffers guarantee for the run being verified.
"""

from __future__ import annotations

from ...cuda.candidate import Candidate
from ...cuda.rewrite import add_const, add_restrict, apply_edits
from . import register
from ._util import canonical_access
from .base import Rule, RuleContext


class ConstRestrict(Rule):
    family = "const_restrict"
    motivated_by = ("WF101",)

    def _targets(self, ctx: RuleContext) -> list[str]:
        k = ctx.cand_kernel
        if k is None:
            return []
        access = canonical_access(ctx)
        out = []
        for p in k.params:
            acc = access.get(p.name)
            if not p.is_pointer or p.pointer_depth != 1 or acc is None or acc.write or acc.escapes:
                continue
            if not (p.is_const and p.is_restrict):
                out.append(p.name)
        return out

    def variants(self, ctx: RuleContext) -> list[str]:
        return ["all"] if self._targets(ctx) else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        k = ctx.cand_kernel
        names = self._targets(ctx)
        if k is None or not names:
            return None
        edits = []
        for name in names:
            for e in (add_const(ctx.cand_src, k, name), add_restrict(ctx.cand_src, k, name)):
                if e is not None:
                    edits.append(e)
        text = apply_edits(ctx.cand_src, edits)
        return ctx.derive(self.family, param, f"mark read-only pointers {', '.join(names)} const __restrict__",
                          definition=text)


register(ConstRestrict())
