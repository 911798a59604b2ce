"""launch_bounds: tell ptxas the block size (and optionally a minimum of resident blocks per SM).

Why it helps: without ``__launch_bounds__`` ptxas must assume blocks of up to 1024 threads and budgets
registers for that; knowing the real block size lets it use more registers where that is free, or — with
``MINBLOCKS`` — cap registers so that many blocks stay resident (trading registers, sometimes spills, for
occupancy and latency hiding). Which way pays is kernel-specific, so ``MINBLOCKS`` ∈ {none, 2, 4} are
separate variants (params ``1``, ``2``, ``4``; ``1`` writes no second argument).

When it is safe: a launch with more threads than the bound fails, so the bound must be exactly the
launch's block. It is resolved from the candidate's launch (the spec's, or a ``block_size`` step's
override) and is only proposed when it cannot change under the search at this node: a constant block
gets a number; a block written in terms of spec tunables (``block=BLOCK_SIZE``) gets the same expression
(``__launch_bounds__(BLOCK_SIZE)``), which the ``-D`` define keeps right for every tunable value; a block
that depends on problem sizes gets nothing. A later ``block_size`` step rewrites the bound from its new
launch (``_util.refresh_launch_bounds``, which any rule that changes the block should call).
``MINBLOCKS`` that no block could meet (threads × blocks above the SM's thread slots, for any
tunable value) is not proposed; a bound with a cluster argument is left alone.
"""

from __future__ import annotations

import itertools
import re

from ...cuda.candidate import Candidate
from ...cuda.rewrite import apply_edits, set_launch_bounds
from ...profile.analyzers.resources import max_threads_per_sm
from . import register
from ._util import (
    MAX_BLOCK_THREADS,
    constant_block,
    eval_expr,
    expr_names,
    families,
    size_env,
)
from .base import Rule, RuleContext

MIN_BLOCKS = (1, 2, 4)
#: a block expression that is also valid C in a ``__launch_bounds__`` (names, numbers, + - * / and parens;
#: the spec evaluator truncates integer division like C)
_C_SAFE = re.compile(r"[A-Za-z_0-9\s+\-*/()]+")


class LaunchBounds(Rule):
    family = "launch_bounds"
    motivated_by = ("WF010", "WF011")

    def bounds(self, ctx: RuleContext) -> tuple[str, int] | None:
        """(the bound as C text, the largest thread count it can take) for the candidate's launch."""
        tunables = {t.name: t for t in ctx.spec.tunables}
        names: set[str] = set()
        for b in ctx.block:
            found = expr_names(b)
            if found is None:
                return None
            names |= found
        if not names:
            dims = constant_block(ctx)
            if dims is None:
                return None
            threads = dims[0] * dims[1] * dims[2]
            return (str(threads), threads) if threads <= MAX_BLOCK_THREADS else None
        if not names <= set(tunables) or not all(_C_SAFE.fullmatch(b) for b in ctx.block):
            return None  # depends on a problem size, or is not C (cdiv, ?:): cannot be a constant bound
        dims_text = [b.strip() for b in ctx.block if b.strip() != "1"]
        text = " * ".join(f"({d})" if not re.fullmatch(r"\w+", d) else d for d in dims_text) or "1"
        try:
            env = size_env(ctx)
        except ValueError:
            return None
        # The largest block over every tunable combination the search could still pick.
        chosen = ctx.candidate.define_map()
        pools = [[chosen[t]] if t in chosen else list(tunables[t].values) for t in sorted(names)]
        most = 0
        for combo in itertools.product(*pools):
            e = dict(env)
            for name, v in zip(sorted(names), combo, strict=True):
                val = eval_expr(v, {})
                if val is None:
                    return None
                e[name] = val
            t = eval_expr(text, e)
            if not isinstance(t, int) or t < 1:
                return None
            most = max(most, t)
        return text, most

    def variants(self, ctx: RuleContext) -> list[str]:
        k = ctx.cand_kernel
        if k is None or self.family in families(ctx):
            return []
        if k.launch_bounds is not None and len(k.launch_bounds.args) > 2:
            return []
        b = self.bounds(ctx)
        if b is None:
            return []
        text, most = b
        out = []
        for m in MIN_BLOCKS:
            if m > 1 and most * m > max_threads_per_sm(ctx.arch):
                continue
            args = (text,) if m == 1 else (text, str(m))
            if k.launch_bounds is not None and tuple(a.strip() for a in k.launch_bounds.args) == args:
                continue
            out.append(str(m))
        return out

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        k = ctx.cand_kernel
        b = self.bounds(ctx)
        if k is None or b is None or param not in self.variants(ctx):
            return None
        m = int(param)
        edit = set_launch_bounds(ctx.cand_src, k, b[0], None if m == 1 else m)
        why = f"__launch_bounds__({b[0]}" + (f", {m})" if m > 1 else ")")
        return ctx.derive(self.family, param, f"declare {why}: ptxas budgets registers for the real block",
                          definition=apply_edits(ctx.cand_src, [edit]))


register(LaunchBounds())
