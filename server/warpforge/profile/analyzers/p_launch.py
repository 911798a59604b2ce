"""WF202 (a grid smaller than the GPU) and WF204 (launch overhead of a tiny kernel): launch-bound kernels.

When a launch has fewer blocks than the GPU has SMs, the idle SMs cannot be helped by anything inside
the kernel: the naive row-wise softmax launches one thread per row, 16 blocks of 256 threads for 4096
rows, and 116 of an H200's 132 SMs have nothing to do for its whole 0.8 ms. The fix is more, smaller
blocks (the same threads spread over more SMs) or more threads per unit of work (a warp per row). Gain:
Nsight Compute's LaunchConfiguration estimate, capped (see ``_prof``).

A kernel of a few microseconds costs about as much to launch (driver and GPU front end) as to run; the
remedy is outside the kernel (fuse it with its neighbours, batch launches, CUDA graphs), so WF204 names
no transformation family.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..roofline import TINY_KERNEL_NS
from . import analyzer
from ._prof import best_rule, kernel_range, profile_for, rule_gain

define("WF202", "grid smaller than the GPU: idle SMs", Severity.INFO, "profile", "block_size")
define("WF204", "launch overhead: a kernel of a few microseconds", Severity.INFO, "profile", None)


@analyzer("p-launch", ("WF202", "WF204"), needs=("profile",))
def launch(ctx: KernelContext) -> Iterator[Finding]:
    prof = profile_for(ctx, "p-launch")
    if prof is None:
        return
    p = prof.perf
    sms = p.sm_count or (prof.ceilings.sm_count if prof.ceilings else 0)
    blocks, threads = p.grid_blocks, p.block_threads
    if blocks and sms and blocks < sms:
        smaller = max(32, (threads or 32) // max(1, -(-sms // blocks)))
        smaller = 1 << (smaller.bit_length() - 1)
        ev: dict[str, object] = {"grid_blocks": blocks, "block_threads": threads, "sm_count": sms,
                                 "idle_sms": sms - blocks, "threads_launched": (threads or 0) * blocks}
        if p.achieved_occupancy is not None:
            ev["achieved_occupancy_pct"] = p.achieved_occupancy
        rule = best_rule(prof.ncu, "LaunchConfiguration", mention="multiprocessors") if prof.ncu else None
        gain, basis = rule_gain(rule)
        msg = (f"the launch has {blocks} blocks of {threads} threads for {sms} SMs: {sms - blocks} SMs stay idle "
               f"for the whole kernel. Spread the same work over more blocks (e.g. {smaller}-thread blocks give "
               f"{blocks * (threads or smaller) // smaller} blocks) or give each unit of work more threads (a warp "
               "per row)")
        yield make("WF202", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis=basis)
    if p.duration_ns is not None and p.duration_ns < TINY_KERNEL_NS:
        ev2: dict[str, object] = {"duration_us": round(p.duration_ns / 1e3, 2), "grid_blocks": blocks,
                                  "block_threads": threads}
        msg = (f"`{ctx.kernel.name}` runs {p.duration_ns / 1e3:.1f} µs, about what launching it costs (a few µs of "
               "driver and front-end time): fuse it with the kernels around it, or launch a batch of them at once "
               "(CUDA graphs)")
        yield make("WF204", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name, evidence=ev2)
