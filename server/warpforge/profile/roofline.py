"""Where a kernel sits on the roofline, and what bounds it: one class that decides which analyzers run.

Ceilings: the GPU's copy bandwidth, FP32 FMA rate and tensor (mma.sync) rate, *measured* once per GPU by
``roofline_measure`` in a child process and kept on disk (``~/.cache/warpforge/roofline``) keyed by the GPU's
name, its driver and the measurement's version (``MEASURE_VERSION``): a driver update can change clocks and
power limits, and a changed measurement must not read old numbers. They are measured once per GPU and driver,
so an optimize job pays for them only the first time on a machine (in its profile's share of the budget).

Classes, decided in this order (the first that holds):

1. **launch-bound** — the launch cannot fill the GPU: a kernel of a few microseconds (launch overhead is
   of the same order), or a grid of fewer blocks than the GPU has SMs while no unit is busy (< 60 % of
   peak). Nothing inside the kernel matters until the launch gives the GPU enough work.
2. **memory-bound** / **compute-bound** — a unit runs at >= 60 % of its peak (Nsight Compute's own
   speed-of-light threshold): the memory system (the busiest of DRAM, L2, L1/shared, named as ``unit``) or
   the SM's pipelines, whichever is higher. Without a profile the achieved bandwidth and FLOP rate against
   the measured ceilings stand in for the speed-of-light percentages.
3. **occupancy-limited** — no unit is busy and too few warps are resident to hide latency: theoretical
   occupancy <= 50 %, limited by registers, shared memory or the block size (the limiter is named).
4. **latency-bound** — no unit is busy although warps are resident: the warps are stalled (dependencies,
   barriers, atomics, memory latency); the stall analyzers say where.

The class gates analyzers (tool affinity, ``AFFINITY``): a memory-bound kernel skips the tensor-core
analyzer, a launch-bound one skips everything that tunes the inside of the kernel, and so on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.sandbox import run_tool
from ..defaults import user_cache_dir
from .ncu_parse import NcuProfile

MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"
LATENCY_BOUND = "latency-bound"
LAUNCH_BOUND = "launch-bound"
OCCUPANCY_LIMITED = "occupancy-limited"
CLASSES: tuple[str, ...] = (MEMORY_BOUND, COMPUTE_BOUND, LATENCY_BOUND, LAUNCH_BOUND, OCCUPANCY_LIMITED)

#: a unit at or above this % of its peak is the bottleneck (Nsight Compute's speed-of-light rule uses 60 %)
BUSY_PCT = 60.0
#: kernels shorter than this are dominated by launch overhead (a launch costs a few microseconds)
TINY_KERNEL_NS = 5_000.0
#: DRAM is named as the limiting level when within this many points of the busiest one (see ``classify``)
UNIT_MARGIN = 10.0
#: theoretical occupancy at or below this % starves latency hiding
LOW_OCCUPANCY_PCT = 50.0

#: which classes each profile analyzer runs for (an analyzer not listed runs for every class)
AFFINITY: dict[str, frozenset[str]] = {
    "p-coalescing": frozenset({MEMORY_BOUND, LATENCY_BOUND, OCCUPANCY_LIMITED, LAUNCH_BOUND}),
    "p-bank-conflicts": frozenset({MEMORY_BOUND, LATENCY_BOUND, OCCUPANCY_LIMITED}),
    "p-occupancy": frozenset({OCCUPANCY_LIMITED, LATENCY_BOUND, MEMORY_BOUND}),
    "p-vectorize": frozenset({MEMORY_BOUND, LATENCY_BOUND}),
    "p-tensor-cores": frozenset({COMPUTE_BOUND, MEMORY_BOUND}),  # memory-bound: only when L1-bound, see there
    "p-divergence": frozenset({COMPUTE_BOUND, LATENCY_BOUND, OCCUPANCY_LIMITED, MEMORY_BOUND}),
    "p-tail": frozenset({MEMORY_BOUND, COMPUTE_BOUND, LATENCY_BOUND, OCCUPANCY_LIMITED}),
    "p-launch": frozenset({LAUNCH_BOUND}),
    "p-stalls": frozenset({LATENCY_BOUND, OCCUPANCY_LIMITED, MEMORY_BOUND, COMPUTE_BOUND, LAUNCH_BOUND}),
}


def runs_for(analyzer: str, cls: str) -> bool:
    """Does ``analyzer`` run for a kernel of class ``cls`` (tool affinity)?"""
    classes = AFFINITY.get(analyzer)
    return classes is None or cls in classes


# --------------------------------------------------------------------------------------------- ceilings
@dataclass(frozen=True)
class Ceilings:
    """What one GPU reaches, measured: the roofs every kernel is judged against."""

    gpu: str
    bandwidth_gbps: float
    fp32_gflops: float | None = None
    tensor_gflops: float | None = None
    tensor_kind: str = ""
    sm_count: int = 0
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    shared_per_sm: int = 0
    l2_bytes: int = 0
    theoretical_gbps: float = 0.0
    measured_at: str = ""
    #: the driver they were measured under ("" where unknown, as in caches written before it was kept)
    driver: str = ""

    @property
    def ridge(self) -> float | None:
        """FLOP per DRAM byte at which the FP32 roof meets the bandwidth roof."""
        if not self.fp32_gflops or not self.bandwidth_gbps:
            return None
        return self.fp32_gflops / self.bandwidth_gbps

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ceilings:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


#: bump when ``roofline_measure`` measures differently: ceilings kept by an older measurement are measured again
MEASURE_VERSION = 1


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") or "gpu"


def ceilings_path(gpu: str, driver: str = "") -> Path:
    """Where ``gpu``'s ceilings under ``driver`` are kept (one file per GPU name, driver and measurement)."""
    kept = _slug(driver) if driver else "any"
    return user_cache_dir() / "roofline" / f"{_slug(gpu)}__{kept}__m{MEASURE_VERSION}.json"


def cached_ceilings(gpu: str, driver: str | None = None) -> Ceilings | None:
    """The kept ceilings of ``gpu`` under ``driver``; with no driver given, the newest kept under any driver
    (a reader that knows only the GPU's name: the job's physical-limit readings, ``warpforge profile``)."""
    if driver:
        candidates = [ceilings_path(gpu, driver)]
    else:
        folder = user_cache_dir() / "roofline"
        try:
            candidates = sorted(folder.glob(f"{_slug(gpu)}__*__m{MEASURE_VERSION}.json"),
                                key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            candidates = []
    for path in candidates:
        try:
            return Ceilings.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
    return None


def measure_ceilings(device: int = 0, *, python: str = sys.executable, timeout: float = 180.0,
                     driver: str = "") -> Ceilings:
    """Measure in a child process (it imports pycuda; this process never touches CUDA) and keep the result
    under the GPU's name and ``driver`` (nvidia-smi's, looked up when not given)."""
    env = dict(os.environ)
    proc = run_tool([python, "-m", "warpforge.profile.roofline_measure", "--device", str(device)],
                    tool="cuda-python", timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"measuring the GPU's ceilings failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    data = json.loads(lines[-1])
    if "error" in data:
        raise RuntimeError(f"measuring the GPU's ceilings failed: {data['error']}")
    if not driver:
        from ..gpu.supervisor import gpu_identity

        ident = gpu_identity(device)
        driver = ident[1] if ident is not None else ""
    c = Ceilings.from_json({**data, "driver": driver})
    path = ceilings_path(c.gpu, driver)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(c.to_json(), indent=2))
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache means measuring again next time, nothing worse
    return c


def ceilings_for(gpu: str | None, device: int = 0, *, measure: bool = True, driver: str | None = None,
                 timeout: float = 180.0) -> Ceilings | None:
    """The kept ceilings of ``gpu`` (under ``driver`` when given), else measured now (once) when ``measure``,
    within ``timeout`` seconds; None if neither works."""
    if gpu:
        hit = cached_ceilings(gpu, driver)
        if hit is not None:
            return hit
    if not measure:
        return None
    try:
        return measure_ceilings(device, timeout=timeout, driver=driver or "")
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
        return None


# --------------------------------------------------------------------------------------------- classes
@dataclass
class Perf:
    """The numbers a classification needs, from a profile or from timing alone (fields may be unknown)."""

    source: str  # "ncu" | "timing"
    duration_ns: float | None = None
    dram_bytes: float | None = None
    flops: float | None = None
    memory_pct: float | None = None
    compute_pct: float | None = None
    units_pct: dict[str, float] = field(default_factory=dict)
    theoretical_occupancy: float | None = None
    achieved_occupancy: float | None = None
    occupancy_limiter: str | None = None
    waves: float | None = None
    grid_blocks: int | None = None
    block_threads: int | None = None
    sm_count: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Perf:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**{**known, "units_pct": dict(known.get("units_pct") or {})})


def occupancy_limiter(limits: dict[str, int]) -> str | None:
    """The resource allowing the fewest blocks per SM (``registers``, ``shared_mem``, ``warps``, ``blocks``)."""
    usable = {k: v for k, v in limits.items() if k != "barriers" or v < 32}
    if not usable:
        return None
    return min(usable, key=lambda k: (usable[k], ["warps", "blocks", "registers", "shared_mem", "barriers"].index(k)
                                      if k in ("warps", "blocks", "registers", "shared_mem", "barriers") else 9))


def perf_from_ncu(p: NcuProfile) -> Perf:
    return Perf(
        source="ncu", duration_ns=p.duration_ns, dram_bytes=p.dram_bytes, flops=p.fp32_flops,
        memory_pct=p.memory_pct, compute_pct=p.compute_pct, units_pct=p.unit_pct,
        theoretical_occupancy=p.theoretical_occupancy, achieved_occupancy=p.achieved_occupancy,
        occupancy_limiter=occupancy_limiter(p.block_limits), waves=p.waves, grid_blocks=p.grid_blocks,
        block_threads=p.block_threads, sm_count=p.sm_count,
    )


def blocks_per_sm(threads: int, registers: int, shared_bytes: int, c: Ceilings) -> tuple[int, str]:
    """Resident blocks per SM for a launch, and the resource that limits it (registers per warp allocated
    in units of 256, as the hardware does; 1 KB of shared memory per block reserved by the driver)."""
    warps = -(-threads // 32)
    limits = {"warps": c.max_threads_per_sm // 32 // max(1, warps), "blocks": c.max_blocks_per_sm}
    if registers > 0:
        per_warp = -(-registers * 32 // 256) * 256
        limits["registers"] = c.registers_per_sm // (per_warp * warps)
    if shared_bytes > 0 and c.shared_per_sm:
        limits["shared_mem"] = c.shared_per_sm // (shared_bytes + 1024)
    key = min(limits, key=lambda k: limits[k])
    return limits[key], key


def perf_from_timing(median_ms: float, *, spec_bytes: float | None, spec_flops: float | None, grid_blocks: int,
                     block_threads: int, registers: int, shared_bytes: int, ceilings: Ceilings | None) -> Perf:
    """A classification input without a profile: the spec's bytes and FLOPs over the measured time against
    the measured ceilings, and occupancy and waves computed from the launch and the ptxas numbers."""
    perf = Perf(source="timing", duration_ns=median_ms * 1e6, dram_bytes=spec_bytes, flops=spec_flops,
                grid_blocks=grid_blocks, block_threads=block_threads)
    if ceilings is None:
        return perf
    perf.sm_count = ceilings.sm_count
    secs = median_ms * 1e-3
    if spec_bytes and secs > 0:
        perf.memory_pct = 100.0 * spec_bytes / secs / 1e9 / ceilings.bandwidth_gbps
        perf.units_pct = {"DRAM": perf.memory_pct}
    if spec_flops and secs > 0 and ceilings.fp32_gflops:
        perf.compute_pct = 100.0 * spec_flops / secs / 1e9 / ceilings.fp32_gflops
    per_sm, limiter = blocks_per_sm(block_threads, registers, shared_bytes, ceilings)
    if ceilings.max_threads_per_sm:
        perf.theoretical_occupancy = 100.0 * min(per_sm * block_threads, ceilings.max_threads_per_sm) / \
            ceilings.max_threads_per_sm
    perf.occupancy_limiter = limiter
    if per_sm and ceilings.sm_count:
        perf.waves = grid_blocks / (per_sm * ceilings.sm_count)
    return perf


@dataclass
class Bottleneck:
    """The class and the numbers behind it."""

    cls: str
    reason: str
    unit: str = ""  # memory-bound: DRAM | L2 | L1; occupancy-limited: the limiting resource
    memory_pct: float | None = None
    compute_pct: float | None = None
    arithmetic_intensity: float | None = None  # FLOP per DRAM byte
    achieved_gbps: float | None = None
    achieved_gflops: float | None = None
    bandwidth_fraction: float | None = None  # of the measured copy bandwidth
    compute_fraction: float | None = None  # of the measured FP32 rate
    ridge: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Bottleneck:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _pct(v: float | None) -> str:
    return f"{v:.0f} %" if v is not None else "?"


def classify(perf: Perf, ceilings: Ceilings | None = None) -> Bottleneck:
    """The bottleneck class of a kernel (see the module docstring for the rules and their order)."""
    secs = perf.duration_ns * 1e-9 if perf.duration_ns else None
    gbps = perf.dram_bytes / secs / 1e9 if perf.dram_bytes and secs else None
    gflops = perf.flops / secs / 1e9 if perf.flops and secs else None
    ai = perf.flops / perf.dram_bytes if perf.flops and perf.dram_bytes else None
    bw_frac = gbps / ceilings.bandwidth_gbps if gbps and ceilings and ceilings.bandwidth_gbps else None
    fp_frac = gflops / ceilings.fp32_gflops if gflops and ceilings and ceilings.fp32_gflops else None
    numbers = {"memory_pct": perf.memory_pct, "compute_pct": perf.compute_pct, "arithmetic_intensity": ai,
               "achieved_gbps": gbps, "achieved_gflops": gflops, "bandwidth_fraction": bw_frac,
               "compute_fraction": fp_frac, "ridge": ceilings.ridge if ceilings else None}
    sms = perf.sm_count or (ceilings.sm_count if ceilings else 0)
    full_gpu = bool(perf.grid_blocks and sms and perf.grid_blocks >= sms)
    # Memory: ncu's "Memory Throughput"; the per-level numbers count only when every SM has work (a few
    # busy SMs can saturate their own L1 while the GPU idles); the achieved DRAM bandwidth against the
    # measured copy bandwidth where there is no profile.
    levels = dict(perf.units_pct) if full_gpu else {k: v for k, v in perf.units_pct.items() if k != "L1"}
    mem = max([v for v in (perf.memory_pct, *levels.values()) if v is not None], default=None)
    if bw_frac is not None:
        mem = max(mem or 0.0, 100.0 * bw_frac)
    comp = perf.compute_pct
    if fp_frac is not None:
        comp = max(comp or 0.0, 100.0 * fp_frac)
    # The level that limits: L2 throughput includes the DRAM traffic it relays, so a streaming kernel shows
    # L2 a little above DRAM; DRAM (against the measured copy bandwidth) is named when it is within
    # UNIT_MARGIN points of the busiest level.
    if bw_frac is not None:
        levels["DRAM"] = max(levels.get("DRAM", 0.0), 100.0 * bw_frac)
    unit = max(levels, key=lambda k: levels[k]) if levels else "DRAM"
    if levels and "DRAM" in levels and levels["DRAM"] >= levels[unit] - UNIT_MARGIN:
        unit = "DRAM"
    busiest = max(mem or 0.0, comp or 0.0)

    def out(cls: str, reason: str, u: str = "") -> Bottleneck:
        return Bottleneck(cls, reason, u, mem, comp, ai, gbps, gflops, bw_frac, fp_frac, numbers["ridge"])

    dur = perf.duration_ns
    if perf.grid_blocks and sms and perf.grid_blocks < sms and busiest < BUSY_PCT:
        idle = sms - perf.grid_blocks
        return out(LAUNCH_BOUND, f"the grid has {perf.grid_blocks} blocks for {sms} SMs: {idle} SMs idle, and no "
                                 f"unit is busy (memory {_pct(mem)}, compute {_pct(comp)} of peak)")
    if dur is not None and dur < TINY_KERNEL_NS and (perf.waves is None or perf.waves < 1.0) and busiest < BUSY_PCT:
        return out(LAUNCH_BOUND, f"the kernel runs {dur / 1e3:.1f} µs, about what a launch costs")
    if busiest >= BUSY_PCT:
        if (mem or 0.0) >= (comp or 0.0):
            if unit == "DRAM" and gbps and ceilings and bw_frac is not None:
                return out(MEMORY_BOUND, f"DRAM traffic runs at {_pct(100 * bw_frac)} of the measured copy bandwidth "
                                         f"({gbps:.0f} of {ceilings.bandwidth_gbps:.0f} GB/s), the memory system at "
                                         f"{_pct(mem)} of its peak; compute {_pct(comp)}", unit)
            where = {"DRAM": "DRAM bandwidth", "L2": "the L2 cache", "L1": "L1/shared memory"}.get(unit, unit)
            return out(MEMORY_BOUND, f"{where} runs at {_pct(levels.get(unit, mem))} of its peak "
                                     f"(compute {_pct(comp)})", unit)
        return out(COMPUTE_BOUND, f"the SM pipelines run at {_pct(comp)} of their peak (memory {_pct(mem)})")
    occ = perf.theoretical_occupancy
    if occ is not None and occ <= LOW_OCCUPANCY_PCT and perf.occupancy_limiter not in (None, "warps"):
        lim = {"registers": "registers per thread", "shared_mem": "shared memory per block",
               "blocks": "the block size (the SM's block-slot limit)", "barriers": "barriers"}.get(
                   perf.occupancy_limiter or "", perf.occupancy_limiter or "")
        return out(OCCUPANCY_LIMITED, f"theoretical occupancy is {_pct(occ)}, limited by {lim}; no unit is busy "
                                      f"(memory {_pct(mem)}, compute {_pct(comp)})", perf.occupancy_limiter or "")
    if mem is None and comp is None:
        return out(LATENCY_BOUND, "only the time is known (no counters, no measured ceilings): no unit can be shown "
                                  "to be busy, so latency is the working assumption")
    return out(LATENCY_BOUND, f"no unit is busy (memory {_pct(mem)}, compute {_pct(comp)} of peak) although "
                              f"{_pct(perf.achieved_occupancy or occ)} of the warp slots are occupied: warps "
                              "wait on dependencies")


# --------------------------------------------------------------------------------------------- profile
@dataclass
class KernelProfile:
    """What the profile stage knows about a kernel: its class, its numbers, the ceilings, the raw profile.

    Carried by ``KernelContext.profile`` to the profile-aware analyzers. ``ncu`` is None when only timing
    was available (no Nsight Compute, or no permission to read counters).
    """

    gpu: str
    perf: Perf
    bottleneck: Bottleneck
    ceilings: Ceilings | None = None
    ncu: NcuProfile | None = None
    median_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def cls(self) -> str:
        return self.bottleneck.cls

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        """The profile for readers (``ncu``: the summary a report shows) and, with ``full``, the parsed Nsight
        Compute pages too (``ncu_pages``), so that ``from_json`` gives an equal profile (the workspace store
        keeps it that way; ``warpforge profile --json`` leaves the pages out)."""
        out = {"gpu": self.gpu, "class": self.cls, "bottleneck": self.bottleneck.to_json(),
               "perf": self.perf.to_json(), "ceilings": self.ceilings.to_json() if self.ceilings else None,
               "ncu": self.ncu.summary() if self.ncu else None, "median_ms": self.median_ms, "notes": self.notes}
        if full:
            out["ncu_pages"] = self.ncu.to_json() if self.ncu else None
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelProfile:
        """A profile from ``to_json()`` (full); without the pages (a reader's document) ``ncu`` is None."""
        pages = d.get("ncu_pages")
        return cls(d["gpu"], Perf.from_json(d["perf"]), Bottleneck.from_json(d["bottleneck"]),
                   Ceilings.from_json(d["ceilings"]) if d.get("ceilings") is not None else None,
                   NcuProfile.from_json(pages) if pages is not None else None, d.get("median_ms"),
                   list(d.get("notes") or []))


def from_ncu(p: NcuProfile, ceilings: Ceilings | None) -> KernelProfile:
    perf = perf_from_ncu(p)
    return KernelProfile(p.gpu, perf, classify(perf, ceilings), ceilings, p,
                         median_ms=perf.duration_ns / 1e6 if perf.duration_ns else None)
