"""WF210: vectorization opportunity, measured — coalesced 32-bit global accesses on a memory-hungry line.

A coalesced warp access of 32-bit elements moves 128 bytes per instruction; a 128-bit access (``float4``)
moves 512, so the same bytes take a quarter of the load/store instructions, address computations and
LSU queue slots. For a kernel streaming memory that is often what separates 75 % from 90 % of the copy
bandwidth. Unlike WF104 (static, which this replaces when a profile exists), this speaks only where the
profile shows that the accesses are coalesced already (no excessive sectors: vectorizing an uncoalesced
access does not fix it, see WF205) and carry a real share of the kernel's global traffic (>= 5 %).

Runs for memory-bound kernels whose limit is DRAM or L2, and for latency-bound ones on lines holding at
least 10 % of the warp-stall samples (elsewhere the accesses are not where the time goes). Gain: for a
DRAM-bound kernel, the headroom to the measured copy bandwidth (an upper bound for any access-width
change); otherwise none.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..ncu_parse import SAMPLES, SECTORS, SECTORS_EXCESSIVE
from ..roofline import MEMORY_BOUND
from . import analyzer
from ._prof import MAX_GAIN, kernel_lines, ncu_for

define("WF210", "32-bit global accesses where 128-bit would do (measured)", Severity.INFO, "profile", "vectorize")

MIN_KERNEL_SHARE = 0.05
#: in a latency-bound kernel, the line must hold this share of the warp-stall samples
MIN_STALL_SHARE = 0.10


@analyzer("p-vectorize", ("WF210",), needs=("profile",))
def vectorize(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-vectorize")
    if got is None:
        return
    prof, ncu = got
    b = prof.bottleneck
    if b.cls == MEMORY_BOUND and b.unit == "L1":
        return
    total = ncu.total(SECTORS)
    samples = ncu.total(SAMPLES) or 1.0
    if total <= 0:
        return
    for n, ln in sorted(kernel_lines(ctx, ncu).items()):
        glob = [i for i in ln.instructions if i.space == "Global" and i.operation in ("Load", "Store")]
        narrow = [i for i in glob if (i.size_bits or 32) <= 32 and i.values.get(SECTORS, 0.0) > 0
                  and i.values.get(SECTORS_EXCESSIVE, 0.0) == 0]
        if not narrow or len(narrow) < len(glob):
            continue
        share = sum(i.values.get(SECTORS, 0.0) for i in narrow) / total
        if share < MIN_KERNEL_SHARE:
            continue
        if b.cls != MEMORY_BOUND and ln.samples / samples < MIN_STALL_SHARE:
            continue  # latency-bound elsewhere: this line's accesses are not where the time goes
        ops = ", ".join(i.opcode for i in narrow)
        gain: float | None = None
        basis: str | None = None
        if b.cls == MEMORY_BOUND and b.unit == "DRAM" and b.bandwidth_fraction and 0.2 < b.bandwidth_fraction < 0.95:
            gain = min(MAX_GAIN, round(1.0 / b.bandwidth_fraction, 2))
            basis = "up to: the kernel's DRAM bytes at the measured copy bandwidth"
        bw = f" (the kernel reaches {b.bandwidth_fraction:.0%} of the measured copy bandwidth)" \
            if b.bandwidth_fraction and b.bandwidth_fraction >= 0.2 else ""
        msg = (f"line {n} makes {len(narrow)} coalesced 32-bit global access{'es' if len(narrow) > 1 else ''} "
               f"({ops}) carrying {share:.0%} of the kernel's global sectors: 128-bit accesses (`float4`, "
               f"four elements per thread) move the same bytes with a quarter of the instructions{bw}")
        ev: dict[str, object] = {"sass": [i.opcode for i in narrow], "access_bits": 32,
                                 "sector_share": round(share, 3)}
        yield make("WF210", ctx.file, ctx.line_range(n), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis=basis)
