"""WF212: Nsight Compute's other guided-analysis advice with a real estimated speedup.

Nsight Compute's rules are expert interpretations of the metrics, each with an estimated share of the
kernel's time its advice could save. The analyzers above turn the ones they cover into line-level
findings (coalescing, bank conflicts, occupancy, divergence, launch configuration, stalls); the rest —
e.g. FPInstructions (unfused multiply-adds) — are passed on here, once each, when they are "OPT" advice
estimating at least 5 % of the whole kernel's time. Rules about idle pipes and issue slots restate the
bottleneck class (WF200) and are not repeated. Gain: the rule's estimate, capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._prof import kernel_range, ncu_for, rule_gain

define("WF212", "Nsight Compute rule", Severity.INFO, "profile", None)

#: rules another profile analyzer (or the class) already speaks for
COVERED = frozenset({
    "UncoalescedGlobalAccess", "MemoryCacheAccessPattern", "SharedMemoryConflicts", "UncoalescedSharedAccess",
    "TheoreticalOccupancy", "AchievedOccupancy", "ThreadDivergence", "LaunchConfiguration", "CPIStall",
    "IssueSlotUtilization", "HighPipeUtilization", "SOLBottleneck", "SOLFPRoofline",
})
MIN_SPEEDUP = 5.0
#: rule name -> transformation family, where one fits
ACTIONS = {"FPInstructions": "compile_flags"}


def _sentence(text: str, limit: int = 320) -> str:
    """The rule's description without its links, cut at a sentence boundary."""
    t = re.sub(r"\s*\(https?://[^)]*\)", "", " ".join(text.split()))
    if len(t) <= limit:
        return t
    cut = t[:limit]
    end = cut.rfind(". ")
    return cut[: end + 1] if end > 80 else cut.rstrip() + "..."


@analyzer("p-rules", ("WF212",), needs=("profile",))
def rules(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-rules")
    if got is None:
        return
    _prof, ncu = got
    seen: set[str] = set()
    for r in sorted(ncu.details.rules, key=lambda r: -(r.speedup or 0.0)):
        if r.type != "OPT" or r.name in COVERED or r.name in seen or r.speedup_type != "global":
            continue
        if r.speedup is None or r.speedup < MIN_SPEEDUP:
            continue
        seen.add(r.name)
        gain, basis = rule_gain(r)
        msg = f"Nsight Compute ({r.name}): {_sentence(r.description)}"
        yield make("WF212", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name,
                   evidence={"rule": r.name, "section": r.section, "estimated_speedup_pct": r.speedup},
                   gain=gain, gain_basis=basis, action=ACTIONS.get(r.name))
