"""WF209: warp divergence, measured — lines that run with most of the warp's lanes idle.

A warp executes one instruction for all its 32 lanes; when lanes take different branches, each path runs
with only its own lanes active and the others idle. Nsight Compute counts, per SASS instruction, warp
instructions executed and thread instructions executed; their ratio per line is the average number of
lanes doing work there. ``if (threadIdx.x % 8 == 0) { long loop }`` runs its loop with 4 of 32 lanes.

Reported for lines averaging fewer than 16 active lanes that account for at least 5 % of the kernel's
warp instructions (a short tail such as a bounds check costs nothing). Gain: Nsight Compute's
ThreadDivergence estimate, shared among the lines by instructions, capped. No transformation family: the
remedy is to give a warp uniform work (assign work per warp rather than per lane, sort or compact work
items, or move the rare path out of the hot loop).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..ncu_parse import INST
from . import analyzer
from ._prof import best_rule, kernel_lines, ncu_for, rule_gain

define("WF209", "warp divergence: lanes idle on a hot line", Severity.INFO, "profile", None)

MAX_ACTIVE = 16.0
MIN_INST_SHARE = 0.05


@analyzer("p-divergence", ("WF209",), needs=("profile",))
def divergence(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-divergence")
    if got is None:
        return
    _prof, ncu = got
    total = ncu.total(INST)
    if total <= 0:
        return
    lines = kernel_lines(ctx, ncu)
    flagged = [(n, ln) for n, ln in sorted(lines.items())
               if (a := ln.active_threads) is not None and a < MAX_ACTIVE and ln.get(INST) / total >= MIN_INST_SHARE]
    if not flagged:
        return
    flagged_inst = sum(ln.get(INST) for _, ln in flagged) or 1.0
    rule = best_rule(ncu, "ThreadDivergence")
    kernel_avg = ncu.active_threads_per_warp
    for n, ln in flagged:
        active = ln.active_threads or 0.0
        share = ln.get(INST) / total
        gain, basis = rule_gain(rule, ln.get(INST) / flagged_inst)
        msg = (f"line {n} runs with {active:.1f} of 32 lanes active on average ({1 - active / 32:.0%} of each warp "
               f"idle) and executes {share:.0%} of the kernel's warp instructions: its lanes diverge. Give each "
               "warp uniform work (decide per warp, not per lane, or move the rare path out of the hot loop)")
        ev: dict[str, object] = {"active_threads": round(active, 2), "instruction_share": round(share, 3),
                                 "warp_instructions": ln.get(INST)}
        if kernel_avg is not None:
            ev["kernel_active_threads_per_warp"] = kernel_avg
        yield make("WF209", ctx.file, ctx.line_range(n), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis=basis)
