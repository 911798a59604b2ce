"""Measure a GPU's ceilings in a child process: copy bandwidth, FP32 FMA rate, tensor (mma.sync) rate.

Runs as ``python -m warpforge.profile.roofline_measure [--device N]`` and prints one JSON object: it
imports pycuda, so it never runs inside the server process (docs/architecture.md "Process model": nothing
there touches CUDA).
``roofline.ceilings`` starts it once per GPU and caches the answer on disk by GPU name.

Why measure rather than take datasheet numbers: a kernel is judged against what this GPU, at this
driver's clocks and power limits, actually reaches — the datasheet's bandwidth is ~10-15 % above any
copy kernel, and boards of one name differ in clocks. Each ceiling is the median of several timed runs
after a warm-up, so the clocks have ramped up (they are never changed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

FMA_SOURCE = r"""
extern "C" __global__ void wf_fma_loop(float* out, int iters, float a, float b)
{
    float x0 = threadIdx.x * 1e-7f, x1 = x0 + 0.1f, x2 = x0 + 0.2f, x3 = x0 + 0.3f;
    float x4 = x0 + 0.4f, x5 = x0 + 0.5f, x6 = x0 + 0.6f, x7 = x0 + 0.7f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
            x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
        }
    }
    float s = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    if (s == 1234.5678f) {
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
}
"""
#: FLOPs of one thread per outer iteration of ``wf_fma_loop``: 8 chains x 16 FMAs x 2
FMA_FLOPS_PER_ITER = 8 * 16 * 2

MMA_SOURCE = r"""
extern "C" __global__ void wf_mma_loop(float* out, int iters)
{
    unsigned a0 = 0x3c003c00u ^ threadIdx.x, a1 = 0x3c003c00u, a2 = 0x3c003c00u, a3 = 0x3c003c00u;
    unsigned b0 = 0x3c003c00u, b1 = 0x3c003c00u ^ threadIdx.x;
    float d[4][4] = {};
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    }
    if (s == 1234.5678f) {
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
}
"""
#: FLOPs of one warp per outer iteration of ``wf_mma_loop``: 4 x m16n8k16 x 2
MMA_FLOPS_PER_WARP_ITER = 4 * 16 * 8 * 16 * 2


def _timed(cuda: Any, run: Callable[[], None], warmup: float = 0.3, reps: int = 7) -> float:
    """Median milliseconds of ``run`` (one enqueue), after ``warmup`` seconds of it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < warmup:
        run()
        cuda.Context.synchronize()
    times = []
    for _ in range(reps):
        s, e = cuda.Event(), cuda.Event()
        s.record()
        run()
        e.record()
        e.synchronize()
        times.append(e.time_since(s))
    times.sort()
    return float(times[len(times) // 2])


def measure(device: int = 0, arch: str | None = None) -> dict[str, Any]:
    """The ceilings of ``device`` (see the module docstring); pieces that cannot be measured are None."""
    import numpy as np
    import pycuda.driver as cuda

    from ..compiler.build import compile_cubin

    cuda.init()
    dev = cuda.Device(device)
    ctx = dev.make_context()
    notes: list[str] = []
    try:
        attr = cuda.device_attribute
        sms = int(dev.get_attribute(attr.MULTIPROCESSOR_COUNT))
        cc = dev.compute_capability()
        arch = arch or f"sm_{cc[0]}{cc[1]}"
        out: dict[str, Any] = {
            "gpu": str(dev.name()), "cc": list(cc), "sm_count": sms,
            "max_threads_per_sm": int(dev.get_attribute(attr.MAX_THREADS_PER_MULTIPROCESSOR)),
            "max_blocks_per_sm": int(dev.get_attribute(attr.MAX_BLOCKS_PER_MULTIPROCESSOR)),
            "registers_per_sm": int(dev.get_attribute(attr.MAX_REGISTERS_PER_MULTIPROCESSOR)),
            "shared_per_sm": int(dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)),
            "l2_bytes": int(dev.get_attribute(attr.L2_CACHE_SIZE)),
            "sm_clock_khz": int(dev.get_attribute(attr.CLOCK_RATE)),
        }
        mem_khz = int(dev.get_attribute(attr.MEMORY_CLOCK_RATE))
        bus = int(dev.get_attribute(attr.GLOBAL_MEMORY_BUS_WIDTH))
        out["theoretical_gbps"] = 2.0 * mem_khz * 1e3 * bus / 8 / 1e9
        # copy bandwidth: device-to-device copy, bytes read + written (as the engine's floor uses)
        free, _ = cuda.mem_get_info()
        size = max(1 << 24, min(1 << 30, int(free) // 8) & ~((1 << 20) - 1))
        a = cuda.mem_alloc(size)
        b = cuda.mem_alloc(size)
        cuda.memset_d8(a, 1, size)
        ms = _timed(cuda, lambda: cuda.memcpy_dtod_async(b, a, size))
        out["bandwidth_gbps"] = 2 * size / (ms * 1e-3) / 1e9
        a.free()
        b.free()
        sink = cuda.mem_alloc(64 << 20)
        # FP32: FMA chains, 2 blocks of 1024 threads per SM... 16 waves of 256-thread blocks
        build = compile_cubin(FMA_SOURCE, arch=arch, filename="wf_fma_loop.cu")
        if build.ok:
            fn = cuda.module_from_buffer(build.cubin).get_function("wf_fma_loop")
            blocks, threads, iters = sms * 16, 256, 512
            ms = _timed(cuda, lambda: fn(sink, np.int32(iters), np.float32(0.9999), np.float32(1e-4),
                                         block=(threads, 1, 1), grid=(blocks, 1)))
            out["fp32_gflops"] = blocks * threads * iters * FMA_FLOPS_PER_ITER / (ms * 1e-3) / 1e9
        else:
            out["fp32_gflops"] = None
            notes.append("the FMA loop did not build: " + build.log[-200:])
        # Tensor cores through mma.sync (the portable path; Hopper's wgmma reaches more)
        out["tensor_gflops"] = None
        if cc[0] >= 8:
            build = compile_cubin(MMA_SOURCE, arch=arch, filename="wf_mma_loop.cu")
            if build.ok:
                fn = cuda.module_from_buffer(build.cubin).get_function("wf_mma_loop")
                blocks, threads, iters = sms * 8, 256, 4096
                ms = _timed(cuda, lambda: fn(sink, np.int32(iters), block=(threads, 1, 1), grid=(blocks, 1)))
                warps = blocks * threads // 32
                out["tensor_gflops"] = warps * iters * MMA_FLOPS_PER_WARP_ITER / (ms * 1e-3) / 1e9
                out["tensor_kind"] = "mma.sync f16 -> f32"
            else:
                notes.append("the mma.sync loop did not build: " + build.log[-200:])
        sink.free()
        out["notes"] = notes
        out["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return out
    finally:
        ctx.pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpforge.profile.roofline_measure")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--arch")
    args = p.parse_args(argv)
    try:
        print(json.dumps(measure(args.device, args.arch)))
    except Exception as e:  # the parent reports it; a traceback here helps nobody
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
