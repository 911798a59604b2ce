"""WF203: tail effect — the last wave of blocks leaves most SMs idle.

A GPU runs a grid in *waves*: as many blocks as fit on all SMs at once, then the next batch. A grid of
1.2 waves runs two waves, the second with a fifth of the SMs busy: up to 40 % of the SM time is idle.
This matters when the kernel has few waves (below ~8: beyond, the partial wave is a small share) and the
blocks take similar times. The fix is a grid of whole waves: a grid-stride loop over exactly
``k x SMs x blocks-per-SM`` blocks, or a block size that makes the count come out even.

Gain: the idle share of SM time, ``(ceil(w) - w) / ceil(w)`` for ``w`` waves, as an upper bound (blocks of
equal duration); reported from 10 % up.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._prof import gain_of_share, kernel_range, profile_for

define("WF203", "tail effect: a partial last wave", Severity.INFO, "profile", "grid_stride")

MAX_WAVES = 8.0
MIN_IDLE = 0.10


def idle_share(waves: float) -> float:
    """Share of SM time the partial last wave leaves idle (0 for whole waves or under one wave)."""
    if waves < 1.0:
        return 0.0
    full = math.ceil(waves - 1e-9)
    return (full - waves) / full


@analyzer("p-tail", ("WF203",), needs=("profile",))
def tail(ctx: KernelContext) -> Iterator[Finding]:
    prof = profile_for(ctx, "p-tail")
    if prof is None:
        return
    w = prof.perf.waves
    if w is None or w < 1.0 or w > MAX_WAVES:
        return
    idle = idle_share(w)
    if idle < MIN_IDLE:
        return
    full = math.ceil(w - 1e-9)
    last = w - (full - 1)
    gain = gain_of_share(idle)
    msg = (f"the grid runs {w:.2f} waves of blocks: {full - 1} full wave{'s' if full > 2 else ''} and a last one "
           f"{last:.0%} full, so {idle:.0%} of the SM time is idle. A grid of whole waves (a grid-stride loop over "
           f"{full - 1 or 1} x the resident blocks, or a block size that divides the work evenly) removes the tail")
    ev: dict[str, object] = {"waves_per_sm": round(w, 2), "last_wave_fill": round(last, 2),
                             "idle_share": round(idle, 3), "grid_blocks": prof.perf.grid_blocks,
                             "sm_count": prof.perf.sm_count}
    yield make("WF203", ctx.file, kernel_range(ctx), msg, kernel=ctx.kernel.name, evidence=ev, gain=gain,
               gain_basis="up to: the idle SM time of the last wave (blocks of equal duration)" if gain else None)
