"""GPU tests of cold timing (issue 28): a small-footprint fast variant against a slow original gets the same
speedup from WarpForge's timing as from a per-launch, L2-flushed event harness written here, and
``verify --independent`` prints both numbers.

Why this pair: the variant's buffers (32 MB) fit in L2, so timing it back to back measures a warm cache the
original, uncoalesced and several times slower, gains less from; timed in CUDA-graph replays of many launches
with one flush per replay (WarpForge before issue 28), such a variant was reported faster than a harness
that flushes before each launch. The variant runs a few microseconds, the case graph replays were for.
Measured on an H200 (benchmarks/RESULTS.md, "Cold timing"): graph replays 6.24x (the hot figure now),
WarpForge's cold timing 5.53x (5.62x with the cold launches inside a CUDA graph), harnesses flushing L2 by a
memset 4.99x / 4.97x: a written flush leaves L2 full of dirty lines the timed kernel then writes back (2-3 µs
here), which a read flush does not. WarpForge now flushes by writing, as Triton's ``do_bench`` and nvbench do
(the tools users compare against), so the requirement is checked against the written flush; the read flush is
printed beside it. With the memset flush, WarpForge's timing queued batches of cold launches and said 4.85x
where this harness said 5.06x: queued launches ran ~0.5 µs longer; it now waits for each (4.905x against
4.969x, benchmarks/RESULTS.md "Cold timing").

Run on the GPU machine: ``pytest -m gpu tests/test_gpu_cold_timing.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)

from warpforge.gpu import device_inputs, independent  # noqa: E402
from warpforge.gpu.confirm import Side  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.inputs import Layout, scalar_format, scalar_value  # noqa: E402
from warpforge.gpu.oneshot import generator_cubin  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: out = a * x + b over 2^22 floats: each thread of the original does a contiguous chunk of 64 (uncoalesced),
#: the variant (CHUNK=1, 256 threads a block) one element per thread
AFFINE = """\
#ifndef CHUNK
#define CHUNK 64
#endif
// @warpforge size N = 1 << 22
// @warpforge arg n = N
// @warpforge arg a = 1.5
// @warpforge arg b = -0.25
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg out: out float[N]
// @warpforge launch grid=cdiv(N, 8192), block=128
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge bytes 2 * N * sizeof(float)
extern "C" __global__ void affine(int n, float a, float b, const float* x, float* out)
{
    long t = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (int k = 0; k < CHUNK; ++k) {
        long i = t * CHUNK + k;
        if (i < n) {
            out[i] = a * x[i] + b;
        }
    }
}
"""


#: this test's own L2 flush by reading (no code of WarpForge's or of ``gpu.independent``'s)
TEST_READ_FLUSH = r"""
extern "C" __global__ void test_read_flush(const uint4* __restrict__ p, unsigned long long n, unsigned int* out)
{
    unsigned int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) {
        out[0] = acc;
    }
}
"""


def per_launch_flushed(base: Side, cand: Side, layout: Layout, seed: int, seconds: float = 1.0) -> dict[
        str, tuple[float, float, float]]:
    """The reference: one launch per sample, every buffer reset and L2 flushed before each, CUDA events around
    the launch, sides alternating; written here, sharing nothing with WarpForge's timing or ``gpu.independent``.
    L2 flushed two ways: ``read`` (a kernel reads twice its size: clean lines, as WarpForge and Nsight Compute
    leave it) and ``write`` (a memset of twice its size: dirty lines the timed kernel must write back, as
    Triton's do_bench and nvbench leave it). Per way: (original µs, variant µs, ratio) from the medians."""
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    cuda.init()
    dev = cuda.Device(0)
    ctx = dev.make_context()
    try:
        ptr = np.dtype(np.uintp).char
        fmt = "".join(ptr if a.is_buffer else scalar_format(a.dtype) for a in layout.args)
        bufs = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        sms = int(dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
        gen, _ = device_inputs.load(cuda, generator_cubin(), sms)
        device_inputs.fill_buffers(cuda, layout, seed, bufs, gen)
        keep = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        for a in layout.buffers:
            cuda.memcpy_dtod(keep[a.name], bufs[a.name], a.nbytes)
        flush_bytes = 2 * int(dev.get_attribute(cuda.device_attribute.L2_CACHE_SIZE))
        flush = cuda.mem_alloc(flush_bytes)
        cuda.memset_d8(flush, 1, flush_bytes)
        out = cuda.mem_alloc(4)
        reader = SourceModule(TEST_READ_FLUSH, no_extern_c=True).get_function("test_read_flush")
        reader.prepare(ptr + "Q" + ptr)
        args = [int(bufs[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args]
        fns = []
        for s in (base, cand):
            fn = cuda.module_from_buffer(s.cubin).get_function(s.symbol)
            fn.prepare(fmt)
            grid, block, smem = s.launch
            fns.append((fn, tuple(grid), tuple(block), smem))
        stream = cuda.Stream()
        e0, e1 = cuda.Event(), cuda.Event()

        def one(side: int, read: bool) -> float:
            for a in layout.buffers:
                cuda.memcpy_dtod_async(bufs[a.name], keep[a.name], a.nbytes, stream)
            if read:
                reader.prepared_async_call((sms * 4, 1, 1), (512, 1, 1), stream, int(flush), flush_bytes // 16,
                                           int(out))
            else:
                cuda.memset_d32_async(flush, side + 7, flush_bytes // 4, stream)
            fn, grid, block, smem = fns[side]
            e0.record(stream)
            fn.prepared_async_call(grid, block, stream, *args, shared_size=smem)
            e1.record(stream)
            e1.synchronize()
            return float(e1.time_since(e0)) * 1e3

        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            one(0, True)
            one(1, False)
        result: dict[str, tuple[float, float, float]] = {}
        for way in ("read", "write"):
            times: list[list[float]] = [[], []]
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds or len(times[0]) < 200:
                for side in (0, 1) if len(times[0]) % 2 == 0 else (1, 0):
                    times[side].append(one(side, way == "read"))
            b, c = statistics.median(times[0]), statistics.median(times[1])
            result[way] = (b, c, b / c)
        return result
    finally:
        ctx.pop()


def test_a_small_fast_variant_gets_the_same_ratio_as_a_per_launch_flushed_harness(tmp_path: Path) -> None:
    src = tmp_path / "affine.cu"
    src.write_text(AFFINE, encoding="utf-8")
    settings = EngineSettings(kernel_timeout=4.0, compile_timeout=60.0, confirm=False,
                              timing=TimingSettings(max_seconds=1.5, hot=True))
    backend = Backend()
    loop = asyncio.new_event_loop()
    try:
        ev = Evaluator(src, "affine", backend=backend, settings=settings)
        cand = ev.original.derive(defines={"CHUNK": "1"}, grid=("cdiv(N, 256)",), block=("256",))
        e = loop.run_until_complete(ev.evaluate(cand))
        assert e.status == "ok", f"{e.status}: {e.reason} {e.notes}"
        base, var, layout, seed = loop.run_until_complete(ev.launch_sides(cand))
        loop.run_until_complete(ev.close())
    finally:
        backend.close()
        loop.close()
    t = e.timing
    assert t is not None and t.speedup is not None and t.baseline is not None and t.candidate is not None
    assert t.mode.startswith("events around each launch, L2 flushed"), t.mode
    assert t.hot is not None and t.hot.speedup is not None and t.hot.graph  # microseconds: hot in graph replays
    ref = per_launch_flushed(base, var, layout, seed)
    shipped = independent.measure(base, var, layout, seed=seed, seconds=2.0)
    rows = [("WarpForge cold", t.baseline.median * 1e3, t.candidate.median * 1e3, t.speedup.ratio),
            ("WarpForge hot (back to back)", t.hot.baseline.median * 1e3, t.hot.candidate.median * 1e3,
             t.hot.speedup.ratio),
            ("this test, L2 read", *ref["read"]), ("this test, L2 written", *ref["write"]),
            ("gpu.independent, L2 read", shipped.baseline_median_us, shipped.candidate_median_us,
             shipped.ratio or 0.0)]
    table = "\n".join(f"{n:32s} {b:9.2f} µs {c:9.2f} µs {r:7.3f}x" for n, b, c, r in rows)
    table += f"\ngpu.independent, L2 written: {shipped.written_ratio}"
    print(f"\n{e.gpu}\n{table}")
    assert t.candidate.median * 1e3 < 50, table  # the case of the issue: a microsecond variant
    # the requirement: WarpForge's ratio within 3 % of a per-launch, L2-flushed event harness flushed the way
    # users' tools flush (a memset: dirty lines the timed kernel writes back), this test's and the shipped one
    assert abs(t.speedup.ratio / ref["write"][2] - 1) <= 0.03, table
    assert shipped.written_ratio is not None and abs(shipped.written_ratio / ref["write"][2] - 1) <= 0.03, table


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "warpforge", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)


def test_cli_verify_independent_prints_both_numbers() -> None:
    r = _cli("verify", "kernels/reduce_sum.cu", "--kernel", "reduce_sum", "--candidate",
             "tests/fixtures/variants/reduce_sum_fast.cu", "--json", "--seconds", "0.6", "--independent",
             "--no-sanitize")
    assert r.returncode == 0, r.stderr + r.stdout
    data: dict[str, Any] = json.loads(r.stdout)
    ind = data["independent"]
    assert ind["ratio"] is not None and ind["ratio"] > 1.3, ind
    assert ind["written_ratio"] is not None and ind["written_ratio"] > 1.3, ind
    assert abs(ind["written_ratio"] / data["speedup"] - 1) < 0.05, (ind["written_ratio"], data["speedup"])
    assert data["timing"]["hot"] is not None
    text = _cli("verify", "kernels/reduce_sum.cu", "--kernel", "reduce_sum", "--candidate",
                "tests/fixtures/variants/reduce_sum_fast.cu", "--seconds", "0.4", "--independent", "--no-sanitize")
    assert text.returncode == 0, text.stderr + text.stdout
    assert "independent harness" in text.stdout and "WarpForge" in text.stdout, text.stdout
