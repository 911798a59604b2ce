"""WF010/WF011/WF012: what ptxas and the SASS say about registers, spills and local memory.

Registers decide occupancy: on sm_80/sm_90 an SM has 65,536 registers and 64 warps (2048 threads), so a
kernel above 32 registers per thread cannot keep all 64 warps resident, and above 64 it holds at most
half. Without ``__launch_bounds__`` ptxas may spend registers freely because it does not know the block
size; telling it lets it trade registers for occupancy. Spills and stack frames put data in local
memory (DRAM-backed, cached in L1): each spilled value costs a load/store the kernel did not ask for.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer

define("WF010", "high register use without __launch_bounds__", Severity.INFO, "compiler", "launch_bounds")
define("WF011", "register spills to local memory", Severity.WARNING, "compiler", "launch_bounds")
define("WF012", "local memory (stack) traffic", Severity.INFO, "sass", "registers")

REGS_PER_SM = 65536
MAX_THREADS_PER_SM = {"sm_70": 2048, "sm_75": 1024, "sm_80": 2048, "sm_86": 1536, "sm_87": 1536, "sm_89": 1536,
                      "sm_90": 2048, "sm_100": 2048, "sm_120": 1536}
REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256


def max_threads_per_sm(arch: str) -> int:
    return MAX_THREADS_PER_SM.get(arch.rstrip("af"), 2048)


def occupancy_by_registers(regs: int, block: int, arch: str) -> float:
    """Fraction of the SM's thread slots usable when registers are the only limit."""
    if regs <= 0:
        return 1.0
    per_warp = -(-regs * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    warps_per_block = -(-block // 32)
    blocks = REGS_PER_SM // (per_warp * warps_per_block) if per_warp * warps_per_block else 0
    threads = min(blocks * warps_per_block * 32, max_threads_per_sm(arch))
    return threads / max_threads_per_sm(arch)


@analyzer("registers", ("WF010", "WF011"), needs=("ptxas",))
def registers(ctx: KernelContext) -> Iterator[Finding]:
    r = ctx.resources
    if r is None:
        return
    k = ctx.kernel
    at = ctx.src.range(k.name_span)
    block = ctx.block_threads or 256
    occ = occupancy_by_registers(r.registers, block, ctx.arch)
    evidence = {"registers": r.registers, "block_threads": block, "arch": ctx.arch,
                "occupancy_limit_by_registers": round(occ, 3)}
    if r.spill_stores or r.spill_loads:
        yield make(
            "WF011", ctx.file, at,
            f"kernel `{k.name}` spills {r.spill_stores} bytes to local memory and reloads {r.spill_loads} bytes "
            f"(ptxas, {r.registers} registers): every spill is an extra memory access per thread",
            kernel=k.name,
            evidence={**evidence, "spill_stores": r.spill_stores, "spill_loads": r.spill_loads,
                      "stack_frame": r.stack_frame},
        )
    if k.launch_bounds is None and r.registers > 64 and occ < 1.0:
        yield make(
            "WF010", ctx.file, at,
            f"kernel `{k.name}` uses {r.registers} registers per thread and has no __launch_bounds__: with "
            f"{block}-thread blocks only {occ:.0%} of the SM's thread slots can be resident; "
            f"__launch_bounds__({block}) lets ptxas budget registers for the real block size",
            kernel=k.name, evidence=evidence,
        )


@analyzer("local-memory", ("WF012",), needs=("sass",))
def local_memory(ctx: KernelContext) -> Iterator[Finding]:
    r = ctx.resources
    if r is not None and (r.spill_stores or r.spill_loads):
        return  # WF011 already says it, with the numbers; don't say it twice
    for line, mix in sorted(ctx.sass_lines.items()):
        n = mix.get("ldl", 0) + mix.get("stl", 0)
        if not n or not (ctx.kernel.start_line + 1 <= line <= ctx.kernel.end_line + 1):
            continue
        yield make(
            "WF012", ctx.file, ctx.line_range(line),
            f"line {line} accesses local memory ({mix.get('ldl', 0)} LDL, {mix.get('stl', 0)} STL in SASS): "
            "a per-thread array indexed dynamically (or too large for registers) lives in DRAM-backed local memory",
            kernel=ctx.kernel.name,
            evidence={"ldl": mix.get("ldl", 0), "stl": mix.get("stl", 0),
                      "stack_frame": r.stack_frame if r else None},
        )
