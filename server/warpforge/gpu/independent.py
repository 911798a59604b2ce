"""A second, minimal timing harness that shares no timing code with WarpForge: ``verify --independent``.

Why: a speedup is only as good as the harness that measured it. Sixteen winners re-timed by a harness of this
kind (issue 28) found WarpForge's old graph timing optimistic on microsecond kernels whose buffers fit in L2;
users compare against tools that flush before each launch (Triton's ``do_bench``, nvbench's cold measurement).
This module is that comparison, shipped: it re-times the original and a variant in a process of its own, and
``verify`` prints its numbers beside WarpForge's.

What it does, and nothing more (it uses none of ``timing``, ``worker`` or the worker's kernels; only the input
generator, so both harnesses time the same inputs): load both cubins with pycuda; fill the inputs once and keep
a pristine copy of every buffer; then, per sample and side, alternately: copy every buffer back from its
pristine copy (outputs reset, inputs restored), flush L2, record an event, launch once, record an event,
synchronize. The median of each side's samples and their ratio are the result.

L2 is flushed two ways, each for half the samples, and both results are kept, because the way matters
(measured on an H200, benchmarks/RESULTS.md "Cold timing"): **by reading** a buffer of twice the L2 size
with a kernel compiled here (``READ_FLUSH``: L2 ends up holding clean lines, as after Nsight Compute's cache
control), and **by writing** it with ``cuMemsetD8`` (as Triton's ``do_bench``, nvbench and WarpForge
do: L2 ends up full of dirty lines, and the timed kernel pays for writing them back, a few µs on a
kernel that streams tens of MB). The second is WarpForge's method measured independently and what those tools
report; the first is what Nsight Compute's one-launch figure sees.

Runs as ``python -m warpforge.gpu.independent JOB`` (a pickled job), so it owns its own CUDA context.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.sandbox import run_tool
from .confirm import Side, _side_job
from .inputs import Layout
from .oneshot import generator_cubin

TAG = "WARPFORGE_INDEPENDENT "
#: at least this many samples per side and flush, at most ``MAX_SAMPLES``, within the time budget
MIN_SAMPLES, MAX_SAMPLES = 30, 1000
#: the read flush, compiled in the harness (no code of WarpForge's): every thread reads words of the buffer and
#: stores only if their XOR hits a constant, so the loads stay and nothing is written
READ_FLUSH = r"""
extern "C" __global__ void independent_read_flush(const unsigned int* __restrict__ p, unsigned long long n,
                                                  unsigned int* sink)
{
    unsigned int acc = 0;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += step) {
        acc ^= p[i];
    }
    if (acc == 0x9E3779B9u) {
        *sink = acc;
    }
}
"""


@dataclass
class IndependentTiming:
    """Both sides' per-launch times (µs) from the independent harness, L2 flushed by reading (``baseline_us``,
    ``candidate_us``: clean lines, WarpForge's and Nsight Compute's way) and by writing (``written_*``: dirty
    lines, Triton's ``do_bench`` and nvbench's way), and the ratios of their medians."""

    baseline_us: list[float] = field(default_factory=list)
    candidate_us: list[float] = field(default_factory=list)
    written_baseline_us: list[float] = field(default_factory=list)
    written_candidate_us: list[float] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    @property
    def ran(self) -> bool:
        return bool(self.baseline_us and self.candidate_us) or bool(self.written_baseline_us
                                                                   and self.written_candidate_us)

    @property
    def baseline_median_us(self) -> float:
        return statistics.median(self.baseline_us) if self.baseline_us else 0.0

    @property
    def candidate_median_us(self) -> float:
        return statistics.median(self.candidate_us) if self.candidate_us else 0.0

    @property
    def ratio(self) -> float | None:
        """Original over candidate, L2 flushed by reading (None where that flush could not be made)."""
        c = self.candidate_median_us
        return self.baseline_median_us / c if self.baseline_us and c > 0 else None

    @property
    def written_ratio(self) -> float | None:
        """Original over candidate, L2 flushed by writing (``cuMemsetD8``)."""
        if not self.written_baseline_us or not self.written_candidate_us:
            return None
        return statistics.median(self.written_baseline_us) / statistics.median(self.written_candidate_us)

    def lines(self) -> list[str]:
        """For people: one line per flush method."""
        if not self.ran:
            return [f"independent harness did not run: {self.note}"]
        out = []
        what = "independent harness (one launch per sample, every buffer reset and L2 flushed before each, CUDA events)"
        if self.ratio is not None:
            out.append(f"{what}, L2 flushed by reading it: original {self.baseline_median_us:.2f} µs, candidate "
                       f"{self.candidate_median_us:.2f} µs = {self.ratio:.3f}x over {len(self.candidate_us)} samples")
        if self.written_ratio is not None:
            out.append(f"{what}, L2 flushed by writing it (as Triton's do_bench and nvbench): original "
                       f"{statistics.median(self.written_baseline_us):.2f} µs, candidate "
                       f"{statistics.median(self.written_candidate_us):.2f} µs = {self.written_ratio:.3f}x over "
                       f"{len(self.written_candidate_us)} samples")
        if self.note:
            out.append(f"independent harness: {self.note}")
        return out

    def text(self) -> str:
        return "; ".join(self.lines())

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ratio=self.ratio, written_ratio=self.written_ratio, baseline_median_us=self.baseline_median_us,
                 candidate_median_us=self.candidate_median_us, text=self.text())
        return d


def measure(baseline: Side, candidate: Side, layout: Layout, *, seed: int = 0, device: int = 0,
            seconds: float = 2.0, timeout: float = 300.0, python: str = sys.executable) -> IndependentTiming:
    """Run the harness in its own process; never raises for what the GPU or the kernels do (``note`` says)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warpforge-independent-") as tmp:
        job = Path(tmp) / "job.pkl"
        with open(job, "wb") as f:
            pickle.dump({"sides": [_side_job(baseline), _side_job(candidate)], "layout": layout, "seed": seed,
                         "device": device, "seconds": seconds, "generator": generator_cubin()}, f)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        try:
            proc = run_tool([python, "-m", "warpforge.gpu.independent", str(job)], tool="gpu-worker",
                            timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return IndependentTiming(seconds=time.perf_counter() - t0, note=f"no result within {timeout:g} s")
    out = IndependentTiming(seconds=time.perf_counter() - t0)
    for line in (proc.stdout or "").splitlines():
        if line.startswith(TAG):
            d = json.loads(line[len(TAG):])
            out.baseline_us, out.candidate_us = list(d["read"][0]), list(d["read"][1])
            out.written_baseline_us, out.written_candidate_us = list(d["write"][0]), list(d["write"][1])
            out.note = str(d.get("note") or "")
    if not out.ran:
        tail = " ".join((proc.stderr or "").strip().splitlines()[-2:])[:300]
        out.note = f"exit {proc.returncode}: {tail or 'no samples'}"
    return out


# --------------------------------------------------------------------------- the harness (own process)
def harness(path: str) -> int:
    """Time both kernels alternately, one cold launch per sample; print the samples as one tagged JSON line."""
    import numpy as np
    import pycuda.driver as cuda

    from . import device_inputs
    from .inputs import scalar_format, scalar_value

    with open(path, "rb") as f:
        job: dict[str, Any] = pickle.load(f)
    cuda.init()
    dev = cuda.Device(int(job.get("device", 0)))
    ctx = dev.make_context()
    try:
        layout: Layout = job["layout"]
        fmt = "".join(np.dtype(np.uintp).char if a.is_buffer else scalar_format(a.dtype) for a in layout.args)
        bufs = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        sms = int(dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
        gen, _ = device_inputs.load(cuda, job.get("generator"), sms)
        device_inputs.fill_buffers(cuda, layout, int(job.get("seed", 0)), bufs, gen)
        pristine = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        for a in layout.buffers:
            if a.nbytes:
                cuda.memcpy_dtod(pristine[a.name], bufs[a.name], a.nbytes)
        l2 = int(dev.get_attribute(cuda.device_attribute.L2_CACHE_SIZE))
        scrub_bytes = max(2 * l2, 64 << 20)
        scrub = cuda.mem_alloc(scrub_bytes)
        args = [int(bufs[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args]
        kernels = []
        for side in job["sides"]:
            fn = cuda.module_from_buffer(side["cubin"]).get_function(side["symbol"])
            grid_l, block_l, smem = side["launch"]
            if smem > 48 * 1024:
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            fn.prepare(fmt)
            kernels.append((fn, tuple(int(x) for x in [*grid_l, 1, 1][:3]),
                            tuple(int(x) for x in [*block_l, 1, 1][:3]), int(smem)))
        stream = cuda.Stream()
        start, end = cuda.Event(), cuda.Event()
        sink = cuda.mem_alloc(4)
        note = ""
        try:
            from pycuda.compiler import SourceModule

            reader: Any = SourceModule(READ_FLUSH, no_extern_c=True).get_function("independent_read_flush")
            reader.prepare(np.dtype(np.uintp).char + "Q" + np.dtype(np.uintp).char)
        except Exception as e:  # no nvcc where this runs: the written flush only, and the output says why
            reader = None
            note = f"L2 not flushed by reading (the flush kernel did not compile: {str(e).strip()[:160]})"
        fill = [0]

        def flush(read: bool) -> None:
            if read and reader is not None:
                reader.prepared_async_call((sms * 8, 1, 1), (256, 1, 1), stream, int(scrub), scrub_bytes // 4,
                                           int(sink))
            else:
                fill[0] = (fill[0] + 1) & 0xFF
                cuda.memset_d8_async(scrub, fill[0], scrub_bytes, stream)

        def sample(side: int, read: bool) -> float:
            for a in layout.buffers:  # every buffer back to its first state: outputs reset, inputs restored
                if a.nbytes:
                    cuda.memcpy_dtod_async(bufs[a.name], pristine[a.name], a.nbytes, stream)
            flush(read)
            fn, grid, block, smem = kernels[side]
            start.record(stream)
            fn.prepared_async_call(grid, block, stream, *args, shared_size=smem)
            end.record(stream)
            end.synchronize()
            return float(end.time_since(start)) * 1e3

        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:  # clocks up from idle
            sample(0, True)
            sample(1, False)
        times: dict[str, list[list[float]]] = {"read": [[], []], "write": [[], []]}
        modes = (["read"] if reader is not None else []) + ["write"]
        budget = float(job.get("seconds", 2.0)) / len(modes)
        for mode in modes:
            t0 = time.monotonic()
            n = 0
            while n < MAX_SAMPLES and (n < MIN_SAMPLES or time.monotonic() - t0 < budget):
                for side in ((0, 1) if n % 2 == 0 else (1, 0)):
                    times[mode][side].append(sample(side, mode == "read"))
                n += 1
        print(TAG + json.dumps({**times, "note": note}), flush=True)
        return 0
    except cuda.Error as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"warpforge independent: CUDA error: {text}", file=sys.stderr)
        return 3
    finally:
        with contextlib.suppress(Exception):
            ctx.pop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpforge.gpu.independent")
    p.add_argument("job", metavar="JOB", help="a pickled job: both kernels, their layout, seed and time budget")
    return harness(p.parse_args(argv).job)


if __name__ == "__main__":
    raise SystemExit(main())
