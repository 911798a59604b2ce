"""Confirming a winner's speedup with Nsight Compute's ``gpu__time_duration`` before it is offered.

Why a second measurement: the engine's timing measures from the host's side of the GPU (CUDA events around
each cold launch). For a kernel of a few microseconds, launch latency and queueing
are a large share of what events see: a 5 µs kernel timed 1.056x faster (interval [1.029, 1.070]) measured
0.99x by ``ncu``. Nsight Compute's ``gpu__time_duration`` is the kernel's own duration on the GPU, read
from the hardware, with nothing of the host in it. A speedup the two disagree on by more than the timing's
own interval is not offered as a win (``Confirmation.agrees`` is False and the evidence says why).

Unless ncu sees a clear win of its own (``CLEAR_WIN``, well above its launch-to-launch noise): then the win
is real and only its size is in question, so it is offered at the smaller of the two measurements
(``Confirmation.reduced``). Measured on an H100: a privatized histogram timed 77.2x [77.0, 77.3] over an
atomic-bound original was 65.9x to ncu, because the contended original ran 2777 µs under ncu and 3288 µs
in the timing (contention varies between the harnesses); turning down a 66x win for that was wrong, and
offering 77x would claim more than the independent measurement reproduces.

What is compared: the time each launch saves, not the ratio, whenever the timed baseline's per-launch
time is known. The timing's events around a lone launch include the stream launch's own cost (about 2 µs
on an H200) that ncu's kernel duration leaves out. That fixed part cancels in a difference but compresses a
ratio towards 1: a real 1.3x on a 1.6 µs kernel looks smaller to the timing than to ncu, and a ratio rule
would call that a disagreement. The claimed saving's interval comes from the speedup's interval; ncu's
saving must not fall below it by more than the interval's width (at least ``MIN_ALLOWED`` of the
baseline's time). Seeing *more* saving than claimed does not contradict a win.

How: one isolated process (``python -m warpforge.gpu.confirm --harness JOB``, run by ``ncu`` like the
worker's ``--oneshot`` jobs under compute-sanitizer) loads both kernels, warms the clocks up with both,
then launches original and candidate alternately ``launches`` times each between ``cuProfilerStart`` and
``cuProfilerStop``. ncu (``--profile-from-start off``) sees exactly those launches, in that order, and
reports one duration per launch. Clocks are left alone (``--clock-control none``, house rule). Like with
like: the timing flushes L2 before every launch of either side (issue 28; microsecond kernels too), so ncu
does too (``--cache-control all``): one launch, cold, both sides. Only timing settings that turn the flush
off confirm with caches left alone (``--cache-control none``).

The ``ncu`` executable and its failure messages come from ``profile.ncu``; where ncu is missing or may not
read the counters, the confirmation is skipped with a note, never silently passed.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..compiler.nsight import (
    PERMISSION_CODE,
    ProfilerUnavailable,
    missing_message,
    ncu_path,
    permission_message,
    run_ncu,
)
from .oneshot import generator_cubin
from .timing import Speedup

if TYPE_CHECKING:  # numpy: loaded by the process that lays inputs out, not by importing the evaluator's reports
    from .inputs import Layout

METRIC = "gpu__time_duration.sum"
#: launches of each side that ncu measures
LAUNCHES = 7
#: ncu's own launch-to-launch noise on a microsecond kernel: the least disagreement that counts (as a
#: ratio), so that a very tight timing interval does not turn ncu's jitter into a verdict
MIN_ALLOWED = 0.02
#: a speedup ncu itself measures at least this large is a win whatever the timing said; offered at ncu's size
CLEAR_WIN = 1.10
HARNESS_TAG = "WARPFORGE_CONFIRM "

Launch = tuple[Sequence[int], Sequence[int], int]


@dataclass(frozen=True)
class Side:
    """One kernel to measure: its cubin, mangled symbol and launch configuration."""

    cubin: bytes
    symbol: str
    launch: Launch


@dataclass
class Confirmation:
    """ncu's view of a claimed speedup. ``agrees`` is None when ncu did not run (``note`` says why)."""

    claimed: float
    low: float
    high: float
    ran: bool = False
    agrees: bool | None = None
    ncu_ratio: float | None = None
    baseline_us: list[float] = field(default_factory=list)
    candidate_us: list[float] = field(default_factory=list)
    allowed: float = 0.0
    #: per-launch time saved (µs) as timed and as ncu sees it, and the allowed shortfall (saving mode)
    timed_saving_us: float | None = None
    ncu_saving_us: float | None = None
    allowed_us: float | None = None
    #: ncu confirms a win, smaller than timed: the offered speedup becomes ncu's ratio
    reduced: bool = False
    cache: str = ""
    seconds: float = 0.0
    note: str = ""

    def text(self) -> str:
        """One line for people."""
        if not self.ran or self.ncu_ratio is None:
            return f"speedup not confirmed by Nsight Compute: {self.note}"
        b, c = statistics.median(self.baseline_us), statistics.median(self.candidate_us)
        what = (f"Nsight Compute gpu__time_duration: {b:.2f} µs -> {c:.2f} µs = {self.ncu_ratio:.3f}x over "
                f"{len(self.candidate_us)} launches each (caches {self.cache})")
        if self.reduced:
            return (f"confirmed at a smaller speedup: {what}, where the timing says [{self.low:.3f}x, "
                    f"{self.high:.3f}x]; offered at Nsight Compute's {self.ncu_ratio:.3f}x")
        if self.timed_saving_us is not None and self.ncu_saving_us is not None and self.allowed_us is not None:
            saved = (f"saves {self.ncu_saving_us:.2f} µs per launch where the timing "
                     f"[{self.low:.3f}x, {self.high:.3f}x] says {self.timed_saving_us:.2f} µs")
            if self.agrees:
                return f"confirmed: {what}; it {saved} (allowed shortfall {self.allowed_us:.2f} µs)"
            return (f"not significant: {what}; it {saved}, short by more than the interval "
                    f"({self.allowed_us:.2f} µs)")
        if self.agrees and self.ncu_ratio > self.claimed + self.allowed:
            return f"confirmed: {what}, more than the timed {self.claimed:.3f}x (the timed figure is offered)"
        if self.agrees:
            return f"confirmed: {what}, within {self.allowed:.3f} of the timed {self.claimed:.3f}x"
        return (f"not significant: {what} disagrees with the timed {self.claimed:.3f}x "
                f"[{self.low:.3f}, {self.high:.3f}] by more than its interval ({self.allowed:.3f})")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["text"] = self.text()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Confirmation:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def judge(claimed: Speedup, baseline_ns: Sequence[float], candidate_ns: Sequence[float],
          cache: str = "", timed_baseline_ms: float | None = None) -> Confirmation:
    """Does ncu see the win that was timed, within the timing's own interval?

    With ``timed_baseline_ms`` (the timed original's median per launch) the per-launch saving is compared
    (see the module docstring for why); without it, the ratios. The allowed disagreement is the interval's
    width (at least ``MIN_ALLOWED``): a measurement whose independent check lands further off than its own
    stated uncertainty was not measuring the kernels.
    """
    c = Confirmation(claimed.ratio, claimed.low, claimed.high, cache=cache)
    if not baseline_ns or not candidate_ns:
        c.note = "Nsight Compute reported no kernel durations"
        return c
    b, k = statistics.median(baseline_ns), statistics.median(candidate_ns)
    if k <= 0:
        c.note = "Nsight Compute reported a zero duration"
        return c
    c.ran = True
    c.baseline_us = [x / 1e3 for x in baseline_ns]
    c.candidate_us = [x / 1e3 for x in candidate_ns]
    c.ncu_ratio = b / k
    if timed_baseline_ms is None or timed_baseline_ms <= 0 or claimed.low <= 0:
        c.allowed = max(claimed.high - claimed.low, MIN_ALLOWED)
        c.agrees = abs(c.ncu_ratio - claimed.ratio) <= c.allowed
        return _clear_win(c)
    tb = timed_baseline_ms * 1e3  # µs, like the durations kept for people
    low_saving = tb * (1.0 - 1.0 / claimed.low)
    high_saving = tb * (1.0 - 1.0 / claimed.high)
    c.timed_saving_us = tb * (1.0 - 1.0 / claimed.ratio)
    c.ncu_saving_us = (b - k) / 1e3
    c.allowed_us = max(high_saving - low_saving, MIN_ALLOWED * tb)
    c.allowed = max(claimed.high - claimed.low, MIN_ALLOWED)
    c.agrees = c.ncu_saving_us > 0 and c.ncu_saving_us >= low_saving - c.allowed_us
    return _clear_win(c)


def _clear_win(c: Confirmation) -> Confirmation:
    """A disagreement about the size of a win ncu also sees clearly is not a disagreement about the win: it is
    offered at the smaller of the two (ncu's, marked ``reduced``; or the timing's, when ncu sees more)."""
    if c.agrees is False and c.ncu_ratio is not None and c.ncu_ratio >= CLEAR_WIN:
        c.agrees, c.reduced = True, c.ncu_ratio < c.claimed
    return c


def parse_durations(text: str, sides: int = 2) -> list[list[float]]:
    """Per-side ``gpu__time_duration`` values (ns) from ``ncu --csv --print-units base`` output.

    Rows come in launch order (their "ID"), and the harness alternates the sides, so row ``i`` belongs to
    side ``i % sides``. Lines that are not CSV rows (ncu's ``==PROF==`` messages, the harness's own) are
    skipped; numbers may carry thousands separators.
    """
    rows = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not rows:
        return [[] for _ in range(sides)]
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    found: list[tuple[int, float]] = []
    for row in reader:
        if row.get("Metric Name") != METRIC:
            continue
        try:
            ident = int(str(row.get("ID", "")).replace(",", ""))
            value = float(str(row.get("Metric Value", "")).replace(",", ""))
        except ValueError:
            continue
        unit = str(row.get("Metric Unit", "")).strip().lower()
        scale = {"usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1.0)
        found.append((ident, value * scale))
    found.sort()
    out: list[list[float]] = [[] for _ in range(sides)]
    for i, (_ident, value) in enumerate(found):
        out[i % sides].append(value)
    return out


def confirm_command(ncu: str, job: str, *, flush: bool, python: str = sys.executable) -> list[str]:
    """The ``ncu`` command line: one metric, clocks untouched, only the harness's marked launches."""
    return [ncu, "--clock-control", "none", "--cache-control", "all" if flush else "none",
            "--profile-from-start", "off", "--target-processes", "application-only", "--metrics", METRIC,
            "--csv", "--print-units", "base", python, "-m", "warpforge.gpu.confirm", "--harness", job]


def confirm(baseline: Side, candidate: Side, layout: Layout, claimed: Speedup, *, seed: int = 0, device: int = 0,
            flush: bool = False, launches: int = LAUNCHES, warmup_seconds: float = 0.3, timeout: float = 300.0,
            ncu: str | None = None, python: str = sys.executable,
            timed_baseline_ms: float | None = None) -> Confirmation:
    """Measure both kernels under ncu and judge the claimed speedup; never raises for a profiler problem."""
    cache = "flushed" if flush else "warm"
    t0 = time.perf_counter()
    try:
        base_ns, cand_ns = measure(baseline, candidate, layout, seed=seed, device=device, flush=flush,
                                   launches=launches, warmup_seconds=warmup_seconds, timeout=timeout, ncu=ncu,
                                   python=python)
    except ProfilerUnavailable as e:
        c = Confirmation(claimed.ratio, claimed.low, claimed.high, cache=cache, note=str(e))
        c.seconds = time.perf_counter() - t0
        return c
    c = judge(claimed, base_ns, cand_ns, cache, timed_baseline_ms)
    c.seconds = time.perf_counter() - t0
    return c


def measure(baseline: Side, candidate: Side, layout: Layout, *, seed: int = 0, device: int = 0, flush: bool = False,
            launches: int = LAUNCHES, warmup_seconds: float = 0.3, timeout: float = 300.0, ncu: str | None = None,
            python: str = sys.executable) -> tuple[list[float], list[float]]:
    """``launches`` durations (ns) of each kernel, measured alternately; raises ``ProfilerUnavailable``."""
    exe = ncu or ncu_path()
    if exe is None:
        raise ProfilerUnavailable("missing", missing_message())
    with tempfile.TemporaryDirectory(prefix="warpforge-confirm-") as tmp:
        job = Path(tmp) / "job.pkl"
        with open(job, "wb") as f:
            pickle.dump({"sides": [_side_job(baseline), _side_job(candidate)], "layout": layout, "seed": seed,
                         "device": device, "launches": launches, "warmup": warmup_seconds,
                         "generator": generator_cubin()}, f)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = confirm_command(exe, str(job), flush=flush, python=python)
        proc = run_ncu(cmd, timeout=timeout, env=env)
    text = (proc.stdout or "") + "\n" + (proc.stderr or "")
    if PERMISSION_CODE in text:
        raise ProfilerUnavailable("permission", permission_message())
    base_ns, cand_ns = parse_durations(proc.stdout or "")
    if proc.returncode != 0 or len(base_ns) != launches or len(cand_ns) != launches:
        errors = [ln.split("==ERROR==", 1)[1].strip() for ln in text.splitlines() if "==ERROR==" in ln]
        errors += [ln.strip() for ln in text.splitlines() if ln.startswith("warpforge confirm:")]
        why = "; ".join(errors[:3]) or f"exit {proc.returncode}, {len(base_ns)}+{len(cand_ns)} durations " \
                                       f"for {launches}+{launches} launches"
        raise ProfilerUnavailable("failed", f"Nsight Compute could not measure the kernels: {why[:400]}")
    return base_ns, cand_ns


def _side_job(side: Side) -> dict[str, Any]:
    grid, block, smem = side.launch
    return {"cubin": side.cubin, "symbol": side.symbol, "launch": (list(grid), list(block), int(smem))}


# --------------------------------------------------------------------------- the harness (runs under ncu)
def harness(path: str) -> int:
    """Under ncu: load both kernels, warm up with both, then launch them alternately between profiler marks."""
    import ctypes

    import numpy as np

    from . import device_inputs
    from .inputs import scalar_format, scalar_value

    with open(path, "rb") as f:
        job: dict[str, Any] = pickle.load(f)
    import pycuda.driver as cuda

    cuda.init()
    ctx = cuda.Device(int(job.get("device", 0))).make_context()
    try:
        layout: Layout = job["layout"]
        fmt = "".join(np.dtype(np.uintp).char if a.is_buffer else scalar_format(a.dtype) for a in layout.args)
        allocs = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        sms = int(ctx.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
        gen, _ = device_inputs.load(cuda, job.get("generator"), sms)
        device_inputs.fill_buffers(cuda, layout, int(job.get("seed", 0)), allocs, gen)
        args = [int(allocs[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args]
        kernels = []
        for side in job["sides"]:
            fn = cuda.module_from_buffer(side["cubin"]).get_function(side["symbol"])
            grid_l, block_l, smem = side["launch"]
            if smem > 48 * 1024:
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            fn.prepare(fmt)
            grid = tuple(int(x) for x in [*grid_l, 1, 1][:3])
            block = tuple(int(x) for x in [*block_l, 1, 1][:3])
            kernels.append((fn, grid, block, int(smem)))

        def launch_all() -> None:
            for fn, grid, block, smem in kernels:
                fn.prepared_call(grid, block, *args, shared_size=smem)

        t0 = time.monotonic()
        while time.monotonic() - t0 < float(job.get("warmup", 0.3)):
            launch_all()
            ctx.synchronize()
        try:
            api: Any = ctypes.CDLL("libcuda.so.1")
        except OSError:
            api = None
        if api is not None:
            api.cuProfilerStart()
        for _ in range(int(job.get("launches", LAUNCHES))):
            launch_all()
        ctx.synchronize()
        if api is not None:
            api.cuProfilerStop()
        print(HARNESS_TAG + json.dumps({"warmup_seconds": round(time.monotonic() - t0, 3)}), flush=True)
        return 0
    except cuda.Error as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"warpforge confirm: CUDA error: {text}", file=sys.stderr)
        return 3
    finally:
        with contextlib.suppress(Exception):
            ctx.pop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpforge.gpu.confirm")
    p.add_argument("--harness", metavar="JOB", required=True,
                   help="(under ncu) run one pickled job: both kernels, alternately, between profiler marks")
    args = p.parse_args(argv)
    return harness(args.harness)


if __name__ == "__main__":
    raise SystemExit(main())
