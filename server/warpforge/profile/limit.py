"""How close a measured time is to the kernel's physical limit: the roofline, as a percentage.

A speedup says how much faster a variant is than the original; it does not say how much is left. The
limit does: the least time the kernel's compulsory work can take on this GPU, over the time measured.

Which limit applies:

- **memory** — the spec's ``bytes`` (the compulsory traffic: every input read once, every output written
  once) at the *measured* copy bandwidth (``TimingReport.peak_gbps``: a device-to-device copy timed by the
  same worker, so 100 % is what a copy kernel reaches, not the datasheet number);
- **compute** — the spec's ``flops`` at the *measured* FP32 FMA rate (``roofline.Ceilings.fp32_gflops``,
  measured once per GPU and cached). FP64 kernels (any ``float64`` buffer) get no compute floor: no FP64
  peak is measured, and judging them against the FP32 roof would report a fraction of the wrong limit.
  Half-precision arithmetic is counted against the FP32 rate as well (packed ``half2`` can exceed it; a
  percentage above 100 then says so rather than being clipped). Tensor-core kernels are not treated apart.

The bound is the resource with the larger floor (the time the other one needs is hidden under it). Where
one floor cannot be computed (no bandwidth measured, no FP32 peak), the spec's FLOP per byte against
``RIDGE_FALLBACK`` (about the FP32 ridge point of an H100/H200) decides the bound, and the percentage is
given only when that bound's floor is known.

Nothing is invented: a spec without ``bytes`` and ``flops`` has no limit (the evaluator's own fallback,
the bytes of the outputs, is a floor for its anti-cheat check, not the kernel's compulsory traffic), an
evaluation without a time has none either, and ``Limit.why`` says what is missing instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..spec.model import KernelSpec
from .roofline import Ceilings

#: FLOP per byte above which a kernel without a measured compute peak is not called memory-bound (about the
#: FP32 ridge point of an H100/H200: ~60 TFLOP/s over ~3.3 TB/s)
RIDGE_FALLBACK = 20.0
#: a search stops once its best verified variant reaches this percentage of the limit (within 5 % of it)
NEAR_LIMIT_PCT = 95.0


@dataclass(frozen=True)
class SpecWork:
    """What the spec says the kernel must do at its sizes (None: the spec does not say)."""

    bytes: float | None
    flops: float | None
    fp64: bool


def spec_work(spec: KernelSpec) -> SpecWork:
    """The spec's compulsory bytes and FLOPs at its own sizes, and whether it works in double precision."""
    r = spec.resolve()
    fp64 = any(a.is_buffer and a.dtype == "float64" for a in spec.args)
    return SpecWork(r.bytes, r.flops, fp64)


@dataclass(frozen=True)
class Limit:
    """One time against the physical limit (see the module docstring for which limit applies)."""

    #: "memory" | "compute" | None (the spec gives neither bytes nor flops)
    bound: str | None
    #: the time against the bound's floor, in % (None: that floor is unknown; ``why`` says why)
    pct_limit: float | None
    #: the time against the memory floor, in %, whatever the bound
    pct_copy_bw: float | None
    #: the bound's least time, in ms
    floor_ms: float | None
    #: the spec's FLOP per byte
    intensity: float | None
    #: the time judged, in ms
    best_ms: float | None = None
    #: the roof the percentage is against, in words ("3010 GB/s measured copy bandwidth")
    against: str = ""
    #: why there is no percentage, when there is none
    why: str = ""

    def near(self, pct: float = NEAR_LIMIT_PCT) -> bool:
        """Within ``100 - pct`` % of the limit: nothing left worth searching for."""
        return self.pct_limit is not None and self.pct_limit >= pct

    def text(self) -> str:
        """In words, for the CLI, the report and the editor."""
        if self.pct_limit is None:
            return f"% of the physical limit unknown: {self.why}"
        return f"{self.pct_limit:.0f} % of the {self.bound} limit ({self.against})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _round(v: float | None, nd: int) -> float | None:
    return round(v, nd) if v is not None else None


def physical_limit(best_ms: float | None, work: SpecWork, peak_gbps: float,
                   ceilings: Ceilings | None) -> Limit:
    """How close ``best_ms`` is to the roofline: each resource's least time over the measured time."""
    b, f = work.bytes, work.flops
    intensity = f / b if f and b else None
    t_mem = b / (peak_gbps * 1e9) * 1e3 if b and peak_gbps > 0 else None
    peak_flops = ceilings.fp32_gflops if ceilings is not None and not work.fp64 else None
    t_comp = f / (peak_flops * 1e9) * 1e3 if f and peak_flops else None
    bound: str | None
    if t_mem is not None and t_comp is not None:
        bound = "compute" if t_comp > t_mem else "memory"
    elif b:
        bound = "compute" if intensity is not None and intensity > RIDGE_FALLBACK else "memory"
    else:
        bound = "compute" if f else None
    floor = t_mem if bound == "memory" else t_comp if bound == "compute" else None
    why = ""
    if bound is None:
        why = "the spec gives neither `bytes` nor `flops` (add `@warpforge bytes ...`)"
    elif not best_ms or best_ms <= 0:
        why = "no time was measured"
    elif floor is None and bound == "memory":
        why = "the copy bandwidth was not measured"
    elif floor is None:
        why = ("no FP64 peak is measured (a double-precision compute-bound kernel)" if work.fp64 and f
               else "the FP32 peak was not measured" if f else "the spec gives no `flops`")
    against = ""
    if bound == "memory" and t_mem is not None and b:
        against = f"{b / 1e6:.3g} MB at the measured copy bandwidth, {peak_gbps:.0f} GB/s"
    elif bound == "compute" and t_comp is not None and peak_flops and f:
        against = f"{f / 1e9:.3g} GFLOP at the measured FP32 rate, {peak_flops / 1e3:.1f} TFLOP/s"
    timed = best_ms is not None and best_ms > 0
    return Limit(
        bound=bound,
        pct_limit=_round(100 * floor / best_ms, 1) if timed and floor is not None and best_ms else None,
        pct_copy_bw=_round(100 * t_mem / best_ms, 1) if timed and t_mem is not None and best_ms else None,
        floor_ms=_round(floor, 6), intensity=_round(intensity, 3), best_ms=best_ms if timed else None,
        against=against, why=why)


def evaluation_limit(evaluation: Any, work: SpecWork, ceilings: Ceilings | None) -> Limit:
    """The limit of one evaluation's measured time (the engine's ``Evaluation``; duck-typed, as plug-in
    evaluators may have no timing at all, which gives a limit without a percentage)."""
    timing = getattr(evaluation, "timing", None)
    cand = getattr(timing, "candidate", None)
    median = getattr(cand, "median", None)
    best_ms = float(median) if isinstance(median, int | float) else None
    peak = getattr(timing, "peak_gbps", 0.0)
    lim = physical_limit(best_ms, work, float(peak) if isinstance(peak, int | float) else 0.0, ceilings)
    if best_ms is None and lim.bound is not None:
        return Limit(lim.bound, None, None, lim.floor_ms, lim.intensity, None, "",
                     "the evaluator reports no time" if timing is None else "no time was measured")
    return lim


CeilingsOf = Callable[[str], Ceilings | None]


def limit_reader(work: SpecWork, ceilings_of: CeilingsOf) -> Callable[[Any], Limit | None]:
    """What a search's ``limit_of`` needs: a verified node's evaluation against the limit, with the ceilings
    of the GPU that measured it (``ceilings_of(gpu name)``; only the FP32 peak comes from there, the copy
    bandwidth comes with the evaluation). None for a node not verified, or a spec without bytes and flops."""
    def read(node: Any) -> Limit | None:
        ev = getattr(node, "evaluation", None)
        if ev is None or getattr(ev, "status", None) != "ok" or (work.bytes is None and work.flops is None):
            return None
        gpu = str(getattr(ev, "gpu", "") or "")
        return evaluation_limit(ev, work, ceilings_of(gpu) if gpu else None)

    return read
