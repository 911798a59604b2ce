"""WF206: shared-memory bank conflicts, measured per line.

Shared memory has 32 banks of 4 bytes; a warp's access is served in one pass when its lanes hit distinct
banks (or the same word), and in N passes when N lanes need different words of one bank. Nsight Compute
reports, per shared-memory SASS instruction, the average N-way conflict (``L1 Conflicts Shared N-Way``).
An access wider than 4 bytes needs several passes even without conflicts (a 128-bit access by 32 lanes
moves 512 bytes, 4 passes of 128), so the degree here is the N-way figure over that minimum: ``LDS``
32-way is a 32-way conflict, ``LDS.128`` 4-way is none.

Reported for shared-memory instructions of degree 2 or more. This replaces WF105 (the static estimate)
when a profile exists. Gain: Nsight Compute's SharedMemoryConflicts / UncoalescedSharedAccess estimate
(the larger), capped.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..ncu_parse import BANK_NWAY
from . import analyzer
from ._prof import best_rule, fmt_count, kernel_lines, ncu_for, rule_gain

define("WF206", "shared-memory bank conflicts (measured)", Severity.INFO, "profile", "smem_padding")

MIN_DEGREE = 2.0


def conflict_degree(nway: float, size_bits: int | None) -> float:
    """N-way conflict over the passes an access of this width needs anyway (1 for <= 32-bit lanes)."""
    minimum = max(1.0, (size_bits or 32) / 32.0)
    return nway / minimum


@analyzer("p-bank-conflicts", ("WF206",), needs=("profile",))
def bank_conflicts(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-bank-conflicts")
    if got is None:
        return
    _prof, ncu = got
    rule = best_rule(ncu, "SharedMemoryConflicts", "UncoalescedSharedAccess")
    conflicts = ncu.metric("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    for n, ln in sorted(kernel_lines(ctx, ncu).items()):
        worst: tuple[float, str, str, int | None] | None = None
        for ins in ln.instructions:
            if ins.space != "Shared":
                continue
            degree = conflict_degree(ins.values.get(BANK_NWAY, 0.0), ins.size_bits)
            if degree >= MIN_DEGREE and (worst is None or degree > worst[0]):
                worst = (degree, ins.opcode, ins.operation, ins.size_bits)
        if worst is None:
            continue
        degree, opcode, op, bits = worst
        kind = {"Load": "load", "Store": "store"}.get(op, op.lower() or "access")
        msg = (f"the shared-memory {kind} at line {n} ({opcode}) is a {degree:.0f}-way bank conflict: each warp "
               f"access takes {degree:.0f} passes where 1 would do. Pad the array's rows by one 4-byte word "
               "(`[32][33]`) or swizzle the index so a warp's lanes fall in different banks")
        ev: dict[str, object] = {"sass": opcode, "conflict_degree": round(degree, 1), "access_bits": bits}
        if conflicts is not None:
            ev["kernel_bank_conflicts"] = fmt_count(conflicts)
        gain, basis = rule_gain(rule) if degree >= 4 else (None, None)
        yield make("WF206", ctx.file, ctx.line_range(n), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
                   gain_basis=basis)
