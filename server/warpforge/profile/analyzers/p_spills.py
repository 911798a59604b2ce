"""WF207: local-memory traffic, measured — register spills and per-thread arrays that live in DRAM.

"Local" memory is per-thread memory backed by DRAM and cached in L1/L2: ptxas puts there what does not
fit in registers (spills) and arrays indexed dynamically (a register cannot be indexed). Every access is
a real memory instruction, with memory latency, that the source never asked for. Nsight Compute counts
the local sectors moved (``l1tex__t_sectors_pipe_lsu_mem_local_op_{ld,st}``) and the source page marks
the lines whose instructions access local memory, with their stall samples.

Reported per line that executes local loads or stores, once the kernel moved local sectors; the message
says whether ptxas spilled (then fewer live values, ``__launch_bounds__`` with a larger register budget,
or ``-maxrregcount`` raised, help) or the line indexes a per-thread array dynamically (then unroll the
loops so indices become constants, or move the array to shared memory). Gain: the share of the kernel's
warp-stall samples on these lines, as an upper bound, capped. This replaces WF012 when a profile exists.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._prof import fmt_count, gain_of_share, kernel_lines, ncu_for

define("WF207", "local-memory traffic (spills or dynamically indexed arrays), measured", Severity.WARNING,
       "profile", "registers")


@analyzer("p-spills", ("WF207",), needs=("profile",))
def spills(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-spills")
    if got is None:
        return
    _prof, ncu = got
    ld = ncu.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum") or 0.0
    st = ncu.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum") or 0.0
    if ld + st <= 0:
        return
    lines = kernel_lines(ctx, ncu)
    total_samples = ncu.total("Warp Stall Sampling (All Samples)") or 1.0
    r = ctx.resources
    spilled = r is not None and (r.spill_stores > 0 or r.spill_loads > 0)
    for n, ln in sorted(lines.items()):
        local = [i for i in ln.instructions if i.space == "Local"]
        if not local:
            continue
        loads = sum(1 for i in local if i.operation == "Load")
        stores = len(local) - loads
        share = ln.samples / total_samples
        cause = (f"ptxas spilled {r.spill_stores} bytes (stores) / {r.spill_loads} bytes (loads) with {r.registers} "
                 "registers: raise the register budget (`__launch_bounds__` with fewer blocks, or "
                 "`-maxrregcount`) or shorten live ranges" if spilled and r is not None else
                 "a per-thread array indexed by a run-time value cannot live in registers: unroll the loops over "
                 "it so every index is a constant, or keep it in shared memory")
        msg = (f"line {n} accesses local memory ({loads} load and {stores} store instructions per pass; the kernel "
               f"moved {fmt_count(ld)} local sectors in and {fmt_count(st)} out) and holds {share:.0%} of the "
               f"warp-stall samples: {cause}")
        ev: dict[str, object] = {"local_load_instructions": loads, "local_store_instructions": stores,
                                 "kernel_local_load_sectors": ld, "kernel_local_store_sectors": st,
                                 "stall_sample_share": round(share, 3), "spilled": spilled}
        if r is not None:
            ev.update(registers=r.registers, spill_stores=r.spill_stores, spill_loads=r.spill_loads,
                      stack_frame=r.stack_frame)
        gain = gain_of_share(share)
        yield make("WF207", ctx.file, ctx.line_range(n), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis="up to: the warp-stall samples at this line" if gain else None,
                   action="launch_bounds" if spilled else "registers")
