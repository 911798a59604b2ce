"""WF205: uncoalesced global accesses, measured — sectors moved per line against the ideal.

A warp's global access is served in 32-byte sectors; when its 32 lanes touch 32 consecutive floats it
needs 4 sectors, when they are ``rows`` floats apart (a column walk, a transposed write, one thread per
row) it needs 32: 8x the L2 traffic for the same useful bytes. Nsight Compute counts, per SASS
instruction, the L2 sectors the access needed (``L2 Theoretical Sectors Global``), what a perfectly
coalesced access of the same size would need (``... Ideal``) and the difference (``... Excessive``); this
analyzer sums them per source line.

Reported for lines whose excessive sectors are at least 25 % of the line's sectors and at least 5 % of
the kernel's: the numbers are measured, so unlike WF103 (the static version, which this replaces when a
profile exists) they include indices the source analysis cannot follow. Gain: Nsight Compute's
UncoalescedGlobalAccess estimate, shared among the lines by their excessive sectors, capped.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..ncu_parse import INST, SECTORS, SECTORS_EXCESSIVE, SECTORS_IDEAL
from . import analyzer
from ._prof import best_rule, fmt_count, kernel_lines, ncu_for, rule_gain

define("WF205", "uncoalesced global accesses (measured excess sectors)", Severity.INFO, "profile", "coalesce")

MIN_LINE_SHARE = 0.25
MIN_KERNEL_SHARE = 0.05


@analyzer("p-coalescing", ("WF205",), needs=("profile",))
def coalescing(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-coalescing")
    if got is None:
        return
    _prof, ncu = got
    total = ncu.total(SECTORS)
    total_excess = ncu.total(SECTORS_EXCESSIVE)
    if total <= 0 or total_excess <= 0:
        return
    rule = best_rule(ncu, "UncoalescedGlobalAccess")
    for n, ln in sorted(kernel_lines(ctx, ncu).items()):
        sectors, excess, ideal = ln.get(SECTORS), ln.get(SECTORS_EXCESSIVE), ln.get(SECTORS_IDEAL)
        if sectors <= 0 or excess / sectors < MIN_LINE_SHARE or excess / total < MIN_KERNEL_SHARE:
            continue
        parts: list[str] = []
        per_instr: list[dict[str, object]] = []
        for ins in ln.instructions:
            s, x = ins.values.get(SECTORS, 0.0), ins.values.get(SECTORS_EXCESSIVE, 0.0)
            req = ins.values.get(INST, 0.0)  # warp-level executions: one request each
            if s <= 0 or req <= 0:
                continue
            per_instr.append({"sass": ins.opcode, "sectors_per_request": round(s / req, 1),
                              "ideal_per_request": round((s - x) / req, 1), "excessive_sectors": x})
            if x > 0:
                kind = {"Load": "load", "Store": "store"}.get(ins.operation, ins.operation.lower() or "access")
                parts.append(f"the {kind} ({ins.opcode}) touches {s / req:.0f} sectors per warp request where "
                             f"{(s - x) / req:.0f} would do")
        what = "; ".join(dict.fromkeys(parts)) or f"{excess / sectors:.0%} of its sectors are excessive"
        gain, basis = rule_gain(rule, excess / total_excess)
        msg = (f"line {n} moves {fmt_count(sectors)} sectors of 32 bytes where {fmt_count(ideal)} would do "
               f"({excess / sectors:.0%} wasted, {excess / total:.0%} of all the kernel's global sectors): {what}. "
               "Make consecutive threads access consecutive addresses (stage through shared memory, or swap "
               "the roles of the thread and loop indices)")
        ev: dict[str, object] = {"sectors": sectors, "ideal_sectors": ideal, "excessive_sectors": excess,
                                 "kernel_sectors": total, "instructions": per_instr}
        yield make("WF205", ctx.file, ctx.line_range(n), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis=basis)
