"""WF208: where warps stall, and on what — the top warp-stall lines of the profile.

Nsight Compute samples, at a fixed interval, what every warp is doing; a sample at an instruction that
could not issue names the reason (``long_scoreboard``: waiting for an L1TEX — global, local, texture —
result; ``barrier``: waiting at ``__syncthreads``; ``mio_throttle``/``short_scoreboard``: the shared
memory or special-function queue is full or a result from it is pending; ``lg_throttle``: too many global
memory instructions queued; ``drain``: stores and atomics still in flight at exit; ...). The lines with
most samples are where the time goes, and the dominant reason says why.

Reported for the lines holding at least 10 % of the kernel's samples (at most ``MAX_LINES``; none when
the kernel has fewer than ``MIN_SAMPLES``: too few to locate anything), whose top reason is a stall (not
"selected"/"not selected", which mean issuing), with their top reasons. The action follows the reason: a
barrier stall, warp-level reductions instead of block-wide barriers; an LSU queue or memory latency on
coalesced loads, fewer and wider memory instructions; on uncoalesced ones, coalescing; in an L1-bound
kernel, reuse from shared memory; atomics draining at exit, privatization. No gain: a stall is a
symptom, and what removing it is worth depends on what replaces it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..ncu_parse import SECTORS_EXCESSIVE, SourceLine
from ..roofline import MEMORY_BOUND, KernelProfile
from . import analyzer
from ._prof import kernel_lines, ncu_for

define("WF208", "warp-stall hotspot", Severity.INFO, "profile", None)

MIN_SHARE = 0.10
MAX_LINES = 4
#: below this many samples in the kernel the per-line shares are noise (a microsecond kernel)
MIN_SAMPLES = 200
#: reasons that are not stalls: the warp issued, or was ready and another one issued
NOT_STALLS = frozenset({"selected", "not_selected"})

#: reason -> (what it means, action)
REASONS: dict[str, tuple[str, str | None]] = {
    "long_scoreboard": ("waiting for global/local memory loads (L1TEX) to return", "vectorize"),
    "barrier": ("waiting at a block-wide barrier for the block's other warps", "warp_reduce"),
    "mio_throttle": ("the shared-memory / special-function instruction queue is full", None),
    "short_scoreboard": ("waiting for a shared-memory, special-register (S2R) or special-function (MUFU) "
                         "result", None),
    "lg_throttle": ("the global/local memory instruction queue is full: too many memory instructions",
                    "vectorize"),
    "drain": ("at exit, waiting for its stores and atomics to complete", None),
    "membar": ("waiting at a memory fence", None),
    "math_pipe_throttle": ("the arithmetic pipeline is saturated", None),
    "wait": ("fixed-latency dependencies between consecutive instructions", "unroll"),
    "not_selected": ("ready but another warp was picked: the scheduler is busy (issue-bound)", None),
    "selected": ("issuing", None),
    "branch_resolving": ("waiting for a branch target to resolve", None),
    "no_instruction": ("waiting for instructions (instruction cache miss or a jump)", None),
    "imc_miss": ("waiting for a constant-cache miss", None),
    "dispatch": ("waiting on the dispatch stage", None),
    "tex_throttle": ("the texture queue is full", None),
    "sleeping": ("sleeping (nanosleep or warp-synchronous wait)", None),
    "misc": ("a miscellaneous hardware reason", None),
    "gmma": ("waiting on warpgroup MMA", None),
}


def _action(ctx: KernelContext, reason: str, line: SourceLine, prof: KernelProfile) -> str | None:
    if reason == "drain" and ctx.sass is not None and any(
            i.opcode.split(".")[0] in ("RED", "REDG", "ATOMG", "ATOM") for i in ctx.sass.instructions):
        return "atomics_privatize"
    if reason == "long_scoreboard":
        if prof.bottleneck.cls == MEMORY_BOUND and prof.bottleneck.unit == "L1":
            return "smem_tiling"  # the same operands reloaded: reuse them from shared memory or registers
        if line.get(SECTORS_EXCESSIVE) > 0:
            return "coalesce"
    return REASONS.get(reason, ("", None))[1]


@analyzer("p-stalls", ("WF208",), needs=("profile",))
def stalls(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-stalls")
    if got is None:
        return
    prof, ncu = got
    total = ncu.total("Warp Stall Sampling (All Samples)")
    if total < MIN_SAMPLES:
        return
    lines = kernel_lines(ctx, ncu)
    hot = sorted((ln for ln in lines.values() if ln.samples / total >= MIN_SHARE), key=lambda ln: -ln.samples)
    for ln in hot[:MAX_LINES]:
        reasons = ln.stalls
        if not reasons:
            continue
        top = next(iter(reasons))
        if top in NOT_STALLS:
            continue  # issue-bound, not stalled: the class and WF209/WF212 speak for it
        top_share = reasons[top] / ln.samples if ln.samples else 0.0
        meaning = REASONS.get(top, (top.replace("_", " "), None))[0]
        second = [f"{k.replace('_', ' ')} {v / ln.samples:.0%}" for k, v in list(reasons.items())[1:3]
                  if ln.samples and v / ln.samples >= 0.05]
        msg = (f"line {ln.line} holds {ln.samples / total:.0%} of the kernel's warp-stall samples, "
               f"{top_share:.0%} of them {top.replace('_', ' ')}: {meaning}"
               + (f" (then {', '.join(second)})" if second else ""))
        ev: dict[str, object] = {"samples": ln.samples, "kernel_samples": total, "share": round(ln.samples / total, 3),
                                 "reasons": {k: v for k, v in list(reasons.items())[:5]}}
        yield make("WF208", ctx.file, ctx.line_range(ln.line), msg, kernel=ctx.kernel.name, evidence=ev,
                   action=_action(ctx, top, ln, prof))
