"""tunables: try the spec's other values of each compile-time parameter (``// @warpforge tune N = ...``).

Why it helps: a tunable is the kernel author saying "this knob is safe to turn and I don't know the best
setting" — block sizes of row kernels, tile sizes, items per thread. Each value is a different
specialization the compiler optimizes on its own, and the best one depends on the GPU and the sizes.

When it is safe: the author listed the values as valid, and launch expressions may use the tunable, so
the grid and block follow it. Each non-current value is one variant (``NAME=VALUE`` → ``-DNAME=VALUE``);
a tunable already set on the way to this candidate is not proposed again (its siblings cover the other
values). A value is skipped when the launch would be invalid with it (a block above 1024 threads or a
dimension below 1, at the spec or the perturbed size) or larger than a ``__launch_bounds__`` the kernel
has that does not follow the tunable.
"""

from __future__ import annotations

from ...cuda.candidate import Candidate
from ...spec.expr import Number
from . import register
from ._util import MAX_BLOCK_THREADS, eval_expr, macro_values
from .base import Rule, RuleContext


class Tunables(Rule):
    family = "tunables"
    motivated_by = ("tunables",)

    def _launch_ok(self, ctx: RuleContext, defines: dict[str, str]) -> bool:
        k = ctx.cand_kernel
        for perturbed in (False, True):
            try:
                env: dict[str, Number] = ctx.spec.size_values(perturbed, defines)
            except ValueError:
                return False
            dims: list[int] = []
            for what in (ctx.grid, ctx.block):
                for e in what:
                    v = eval_expr(e, env)
                    if not isinstance(v, int) or v < 1:
                        return False
                    dims.append(v)
            threads = 1
            for v in dims[len(ctx.grid):]:
                threads *= v
            if threads > MAX_BLOCK_THREADS:
                return False
            if k is not None and k.launch_bounds is not None:
                # The bound may be a macro the tunable redefines (then it follows) or a fixed number.
                macros = macro_values(ctx)
                lb_env = dict(env)
                for name, text in macros.items():
                    if name not in lb_env and (mv := eval_expr(text, lb_env)) is not None:
                        lb_env[name] = mv
                bound = eval_expr(k.launch_bounds.max_threads, lb_env)
                if not isinstance(bound, int) or threads > bound:
                    return False
        return True

    def variants(self, ctx: RuleContext) -> list[str]:
        if ctx.cand_kernel is None:
            return []
        chosen = ctx.candidate.define_map()
        out: list[str] = []
        for t in ctx.spec.tunables:
            if t.name in chosen or not t.values:
                continue
            for v in t.values[1:]:
                if v != t.values[0] and self._launch_ok(ctx, {**chosen, t.name: v}):
                    out.append(f"{t.name}={v}")
        return out

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        if param not in self.variants(ctx):
            return None
        name, _, value = param.partition("=")
        return ctx.derive(self.family, param, f"compile with -D{name}={value}", defines={name: value})


register(Tunables())
