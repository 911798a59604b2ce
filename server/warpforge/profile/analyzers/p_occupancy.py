"""WF201: what limits occupancy, and the change that lifts it.

Occupancy — resident warps per SM out of the 64 an sm_80/sm_90 SM holds — is how a GPU hides latency:
while one warp waits for memory, another issues. It is capped by whichever resource runs out first per
block: registers (65,536 per SM, allocated per warp in units of 256), shared memory (per block, plus 1 KB
the driver reserves), the block count (32 per SM: blocks of one or two warps cannot fill an SM), or warps
(the block size itself, which is no limit at all). Nsight Compute reports the blocks each resource
allows (``launch__occupancy_limit_*``); the smallest is the limiter.

The finding names the limiter and computes the change that raises occupancy a level: registers per thread
that allow one more block (``__launch_bounds__(threads, blocks)`` makes ptxas meet it; beyond ~16 fewer
registers expect spills), the shared memory per block that fits one more block, or a block size for the
block-count limit. Reported when theoretical occupancy is at most 50 %, or below 100 % for a kernel that
is latency-bound or occupancy-limited (where more warps are what it needs). Gain: Nsight Compute's
TheoreticalOccupancy estimate, capped.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..roofline import LATENCY_BOUND, OCCUPANCY_LIMITED, occupancy_limiter
from . import analyzer
from ._prof import best_rule, fmt_count, kernel_range, ncu_for, rule_gain

define("WF201", "occupancy limited by registers, shared memory or block size", Severity.INFO, "profile",
       "launch_bounds")

REG_UNIT = 256  # registers are allocated per warp in units of 256


def regs_for_blocks(blocks: int, warps_per_block: int, regs_per_sm: int = 65536) -> int:
    """The most registers per thread that still let ``blocks`` blocks be resident (multiple of 8, <= 255)."""
    per_warp = regs_per_sm // max(1, blocks * warps_per_block)
    per_warp -= per_warp % REG_UNIT
    return min(255, per_warp // 32)


@analyzer("p-occupancy", ("WF201",), needs=("profile",))
def occupancy(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-occupancy")
    if got is None:
        return
    prof, ncu = got
    theo = ncu.theoretical_occupancy
    limits = ncu.block_limits
    limiter = occupancy_limiter(limits)
    threads = ncu.block_threads
    if theo is None or limiter is None or not threads or limiter == "warps" or theo >= 99.9:
        return
    if theo > 50.0 and prof.cls not in (LATENCY_BOUND, OCCUPANCY_LIMITED):
        return
    max_warps = int(ncu.metric("device__attribute_max_warps_per_multiprocessor") or 64)
    max_blocks = int(ncu.metric("device__attribute_max_blocks_per_multiprocessor") or 32)
    warps = -(-threads // 32)
    blocks = limits[limiter]
    target = min(max_warps // warps, max_blocks)
    nxt = min(blocks + 1, target)
    regs = ncu.registers or 0
    ev: dict[str, object] = {"limiter": limiter, "theoretical_occupancy_pct": theo,
                             "achieved_occupancy_pct": ncu.achieved_occupancy, "block_threads": threads,
                             "resident_blocks": blocks, "block_limits": limits, "registers": regs}
    action = "launch_bounds"
    if limiter == "registers":
        regs_sm = int(ncu.metric("device__attribute_max_registers_per_multiprocessor") or 65536)
        r_next, r_full = regs_for_blocks(nxt, warps, regs_sm), regs_for_blocks(target, warps, regs_sm)
        ev.update(registers_for_next_block=r_next, registers_for_full_occupancy=r_full)
        fix = (f"`__launch_bounds__({threads}, {nxt})` makes ptxas fit {r_next} registers per thread (now {regs}) "
               f"for {nxt} blocks ({100 * nxt * warps / max_warps:.0f} %)")
        if target > nxt:
            fix += f"; {r_full} registers would allow {target} blocks (100 %)"
        if regs - r_next > 16:
            fix += "; that many fewer registers may spill: check WF011 after the change"
        what = f"{regs} registers per thread"
    elif limiter == "shared_mem":
        per_block = ncu.metric("launch__shared_mem_per_block_allocated") or ncu.metric("launch__shared_mem_per_block")
        driver = ncu.metric("launch__shared_mem_per_block_driver") or 1024.0
        sm_smem = ncu.metric("device__attribute_max_shared_memory_per_multiprocessor") or 0.0
        if not per_block or not sm_smem:
            return
        fit_next = int(sm_smem // nxt - driver)
        fit_full = int(sm_smem // target - driver)
        ev.update(shared_bytes_per_block=per_block, shared_bytes_for_next_block=fit_next,
                  shared_bytes_for_full_occupancy=fit_full)
        fix = (f"at most {fmt_count(fit_next)} B of shared memory per block (now {fmt_count(per_block - driver)} B, "
               f"plus {fmt_count(driver)} B the driver reserves) lets {nxt} blocks fit; {fmt_count(fit_full)} B "
               f"allows {target} blocks (100 %): smaller tiles, or fewer buffers per block")
        what = f"{fmt_count(per_block)} B of shared memory per block"
        action = "tunables" if ctx.spec is not None and ctx.spec.tunables else "block_size"
    elif limiter == "blocks":
        bigger = max(64, 32 * (max_warps // max_blocks))
        fix = (f"an SM holds at most {max_blocks} blocks, so {threads}-thread blocks fill {blocks * warps} of its "
               f"{max_warps} warp slots; blocks of {bigger} threads or more can fill them all")
        what = f"the block size ({threads} threads)"
        action = "block_size"
    else:
        fix = f"the {limiter} limit allows {blocks} blocks per SM"
        what = limiter
    rule = best_rule(ncu, "TheoreticalOccupancy")
    gain, basis = rule_gain(rule)
    msg = (f"occupancy is limited to {theo:.0f} % ({blocks} blocks of {warps} warps per SM) by {what}: {fix}")
    yield make("WF201", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
               gain_basis=basis, action=action)
