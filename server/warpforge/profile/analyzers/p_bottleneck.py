"""WF200: the kernel's bottleneck class and its speed-of-light numbers, at the kernel's name.

The one sentence a performance engineer says first ("memory-bound: DRAM at 79 % of what this GPU can
copy"), because it decides what is worth trying: a memory-bound kernel gains from moving fewer or better
coalesced bytes, not from cheaper arithmetic; a launch-bound one from more parallelism per launch, not
from anything inside the kernel. The class comes from ``roofline.classify``; the headroom to the roof is
the gain when the roof is known (memory-bound on DRAM: the measured copy bandwidth over the achieved one;
compute-bound: the measured FP32 rate over the achieved one), an upper bound by construction.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..roofline import COMPUTE_BOUND, LATENCY_BOUND, LAUNCH_BOUND, MEMORY_BOUND, OCCUPANCY_LIMITED
from . import analyzer
from ._prof import MAX_GAIN, kernel_range, profile_for

define("WF200", "bottleneck class (roofline and speed of light)", Severity.INFO, "profile", None)

#: what to try first for each class and memory level (none where the class alone does not say: at the
#: DRAM or compute roof, latency-bound; occupancy-limited kernels get theirs from WF201)
_ACTIONS: dict[str, str] = {
    f"{MEMORY_BOUND}:L2": "coalesce", f"{MEMORY_BOUND}:L1": "smem_tiling", LAUNCH_BOUND: "block_size",
}

_ADVICE: dict[str, str] = {
    f"{MEMORY_BOUND}:DRAM": "only moving fewer bytes (fusion, reuse, narrower types) makes it faster",
    f"{MEMORY_BOUND}:L2": "the L2 traffic exceeds the DRAM traffic: uncoalesced or repeated accesses; see the "
                          "per-line findings",
    f"{MEMORY_BOUND}:L1": "L1/shared-memory traffic limits it: reuse operands from registers (register tiling) "
                          "or remove bank conflicts",
    COMPUTE_BOUND: "cheaper instructions (fused multiply-adds, fast-math intrinsics within tolerance, tensor "
                   "cores) or less redundant work make it faster",
    LAUNCH_BOUND: "give each launch more parallel work (more blocks, a warp per row) or fuse launches",
    LATENCY_BOUND: "the stall findings say what warps wait on; more independent work per thread (ILP) or "
                   "per SM hides it",
    OCCUPANCY_LIMITED: "see the occupancy finding for the resource to give back",
}


@analyzer("p-bottleneck", ("WF200",), needs=("profile",))
def bottleneck(ctx: KernelContext) -> Iterator[Finding]:
    prof = profile_for(ctx, "p-bottleneck")
    if prof is None:
        return
    b = prof.bottleneck
    key = f"{b.cls}:{b.unit}"
    advice = _ADVICE.get(key) or _ADVICE.get(b.cls, "")
    p = prof.perf
    timing = f"{p.duration_ns / 1e3:.1f} µs" if p.duration_ns else "?"
    src = "Nsight Compute" if prof.ncu is not None else "timing only (no profile)"
    msg = f"`{ctx.kernel.name}` is {b.cls}: {b.reason}; {advice} [{timing}, {src}]"
    ev: dict[str, object] = {"class": b.cls, "gpu": prof.gpu, "duration_us": round(p.duration_ns / 1e3, 2)
                             if p.duration_ns else None}
    if b.unit:
        ev["unit"] = b.unit
    for name, val, nd in (("memory_pct", b.memory_pct, 1), ("compute_pct", b.compute_pct, 1),
                          ("achieved_gbps", b.achieved_gbps, 0), ("achieved_gflops", b.achieved_gflops, 0),
                          ("arithmetic_intensity", b.arithmetic_intensity, 2), ("ridge_flop_per_byte", b.ridge, 1),
                          ("theoretical_occupancy_pct", p.theoretical_occupancy, 1),
                          ("achieved_occupancy_pct", p.achieved_occupancy, 1), ("waves_per_sm", p.waves, 2)):
        if val is not None:
            ev[name] = round(val, nd)
    if prof.ceilings is not None:
        ev["peak_gbps_measured"] = round(prof.ceilings.bandwidth_gbps)
        if prof.ceilings.fp32_gflops:
            ev["peak_fp32_gflops_measured"] = round(prof.ceilings.fp32_gflops)
    gain: float | None = None
    basis: str | None = None
    if b.cls == MEMORY_BOUND and b.unit == "DRAM" and b.bandwidth_fraction and b.bandwidth_fraction > 0.2:
        gain = min(MAX_GAIN, round(1.0 / b.bandwidth_fraction, 2))
        basis = "up to: the kernel's DRAM bytes at the measured copy bandwidth"
    elif b.cls == COMPUTE_BOUND and b.compute_fraction and b.compute_fraction > 0.2:
        gain = min(MAX_GAIN, round(1.0 / b.compute_fraction, 2))
        basis = "up to: the kernel's FP32 work at the measured FMA rate"
    if gain is not None and gain < 1.05:
        gain, basis = None, None
    yield make("WF200", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
               gain_basis=basis, action=_ACTIONS.get(key) or _ACTIONS.get(b.cls))
