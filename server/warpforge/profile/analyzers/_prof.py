"""Shared machinery of the profile-aware analyzers (``p_*.py``, codes WF2xx).

Every profile analyzer asks the same first questions — is there a profile, does this analyzer run for the
kernel's bottleneck class (``roofline.AFFINITY``), which of the profile's source lines belong to this
kernel — and turns Nsight Compute's estimated speedups into gains the same way. Keeping that here keeps
each analyzer one page about its one subject.

Gains: Nsight Compute's "estimated speedup" of a rule is the share of the kernel's time the advice could
save at best ("global"); a share ``s`` is a speedup factor ``1 / (1 - s)``. These are upper bounds, so
factors are capped at ``MAX_GAIN`` and the basis always says "up to" and where the number comes from.
"""

from __future__ import annotations

from ...cuda.text import Range
from ..context import KernelContext
from ..ncu_parse import NcuProfile, Rule, SourceLine
from ..roofline import KernelProfile, runs_for

#: the largest gain factor a profile finding states (estimates beyond it are not credible as numbers)
MAX_GAIN = 4.0


def profile_for(ctx: KernelContext, analyzer: str) -> KernelProfile | None:
    """The kernel's profile when there is one and ``analyzer`` runs for its class."""
    prof = ctx.profile
    if prof is None or not runs_for(analyzer, prof.cls):
        return None
    return prof


def ncu_for(ctx: KernelContext, analyzer: str) -> tuple[KernelProfile, NcuProfile] | None:
    """Profile and Nsight Compute data, for analyzers that need counters (not timing alone)."""
    prof = profile_for(ctx, analyzer)
    if prof is None or prof.ncu is None:
        return None
    return prof, prof.ncu


def kernel_lines(ctx: KernelContext, ncu: NcuProfile) -> dict[int, SourceLine]:
    """The profile's source lines of this kernel (1-based lines of ``ctx.file`` inside the kernel)."""
    lo, hi = ctx.kernel.start_line + 1, ctx.kernel.end_line + 1
    return {n: ln for n, ln in ncu.lines_of(ctx.file).items() if lo <= n <= hi}


def kernel_range(ctx: KernelContext) -> Range:
    """Where kernel-level findings go: the kernel's name."""
    return ctx.src.range(ctx.kernel.name_span)


def gain_of_share(saved: float) -> float | None:
    """Speedup factor when a share ``saved`` (0..1) of the time disappears, capped at ``MAX_GAIN``."""
    if saved <= 0.01:
        return None
    if saved >= 1.0 - 1.0 / MAX_GAIN:
        return MAX_GAIN
    return round(1.0 / (1.0 - saved), 2)


def rule_gain(rule: Rule | None, share: float = 1.0) -> tuple[float | None, str | None]:
    """(gain, basis) from a rule's estimated speedup, scaled by ``share`` (this line's part of the issue)."""
    if rule is None or rule.speedup is None or rule.speedup_type not in ("global", ""):
        return None, None
    saved = rule.speedup / 100.0 * share
    gain = gain_of_share(saved)
    if gain is None:
        return None, None
    part = f" x {share:.0%} of it at this line" if share < 0.999 else ""
    cap = f" (capped at {MAX_GAIN:g}x)" if gain >= MAX_GAIN else ""
    return gain, (f"up to: Nsight Compute rule {rule.name} estimates {rule.speedup:.0f} % of the kernel's "
                  f"time{part}{cap}")


def best_rule(ncu: NcuProfile, *names: str, mention: str = "") -> Rule | None:
    """The OPT result of any of ``names`` with the largest estimated speedup (whose text mentions ``mention``)."""
    found = [r for r in ncu.details.rules if r.name in names and r.type == "OPT"
             and (not mention or mention in r.description)]
    found.sort(key=lambda r: -(r.speedup or 0.0))
    return found[0] if found else None


def fmt_count(n: float) -> str:
    """``14,680,064`` style."""
    return f"{n:,.0f}"
