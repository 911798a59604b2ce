"""Why does WarpForge's cold time of a ~15 µs variant differ from a minimal per-launch harness's? (issue 28)

One process, one GPU: WarpForge's own figures first (the evaluator, as the GPU tests run it), then a harness
written here that times the same cubins under variants of the procedure, one factor at a time, between the
minimal harness of ``tests/test_gpu_cold_timing.py`` (``ref``) and a copy of WarpForge's stream procedure
(``wf``): buffer sets and how they rotate, what is reset before a launch, synchronizing after every sample or
queueing batches, the flush (written or read, its size, its value), pages touched before the flush.
Prints one table per pair. Run on the GPU machine: ``python benchmarks/cold_timing_diag.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from warpforge.gpu import device_inputs  # noqa: E402
from warpforge.gpu.confirm import Side  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.inputs import Layout, poison_memset, scalar_format, scalar_value  # noqa: E402
from warpforge.gpu.oneshot import generator_cubin  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402

AFFINE = (ROOT / "tests" / "test_gpu_cold_timing.py").read_text(encoding="utf-8").split('AFFINE = """\\\n')[1] \
    .split('"""')[0]
GELU_SMALL = (ROOT / "kernels" / "gelu.cu").read_text(encoding="utf-8").replace("size N = 1 << 25", "size N = 1 << 18")

HELPERS = r"""
extern "C" __global__ void diag_read(const unsigned int* __restrict__ p, unsigned long long n, unsigned int* sink)
{
    unsigned int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        acc ^= p[i];
    }
    if (acc == 0x9E3779B9u) { *sink = acc; }
}
// one word per 64 KiB: the pages' translations warm, next to nothing of the data in L2
extern "C" __global__ void diag_touch(const unsigned int* __restrict__ p, unsigned long long words, unsigned int* sink)
{
    unsigned long long i = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * 16384ull;
    if (i < words && p[i] == 0x9E3779B9u) { *sink = 1; }
}
"""


@dataclass(frozen=True)
class Proc:
    name: str
    sets: int = 1
    rotate: str = "rep"  # rep: set = rep % sets; pair: (rep // 2) % sets; batch: per batch of reps
    settle: bool = False  # an untimed launch (reset, flush, launch) on a set before timing on it
    restore: str = "all"  # all: every buffer copied back; out: outputs poisoned only (WarpForge)
    sync: str = "each"  # each: synchronize after every sample; batch: queue 8 repetitions
    flush: str = "write"  # write (memset) | read (kernel)
    mult: float = 2.0  # flush size in L2 sizes (at least 64 MB when wf_size)
    wf_size: bool = False
    vary: bool = False  # the flush value changes every flush
    touch: bool = False  # touch every page of the set's buffers before the flush


REF = Proc("ref: 1 set, copy all, sync each, memset 2xL2")
WF = Proc("wf: 2 sets/rep, poison out, batch, memset", sets=2, restore="out", sync="batch", wf_size=True, vary=True)


def procs() -> list[Proc]:
    return [
        REF,
        replace(REF, name="ref + 2 sets rotated per rep", sets=2),
        replace(REF, name="ref + poison outputs only", restore="out"),
        replace(REF, name="ref + batches (no sync)", sync="batch"),
        replace(REF, name="ref + flush 4xL2", mult=4.0),
        replace(REF, name="ref, read flush", flush="read"),
        WF,
        replace(WF, name="wf + 1 set", sets=1),
        replace(WF, name="wf + sync each", sync="each"),
        replace(WF, name="wf + copy all", restore="all"),
        replace(WF, name="wf + pages touched", touch=True),
        replace(WF, name="wf + flush 4xL2", mult=4.0),
        replace(WF, name="wf + sets per batch, settle", rotate="batch", settle=True),
        replace(WF, name="wf + sets per 2 reps", rotate="pair"),
        replace(WF, name="wf, read flush", flush="read"),
        replace(WF, name="wf + 1 set, read flush", sets=1, flush="read"),
    ]


class Harness:
    def __init__(self, cuda: Any, base: Side, cand: Side, layout: Layout, seed: int) -> None:
        from pycuda.compiler import SourceModule

        self.cuda = cuda
        self.layout = layout
        dev = cuda.Context.get_device()
        self.sms = int(dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
        self.l2 = int(dev.get_attribute(cuda.device_attribute.L2_CACHE_SIZE))
        ptr = np.dtype(np.uintp).char
        fmt = "".join(ptr if a.is_buffer else scalar_format(a.dtype) for a in layout.args)
        gen, _ = device_inputs.load(cuda, generator_cubin(), self.sms)
        self.sets = [{a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers} for _ in range(2)]
        device_inputs.fill_buffers(cuda, layout, seed, self.sets[0], gen)
        self.keep = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        for a in layout.buffers:
            cuda.memcpy_dtod(self.keep[a.name], self.sets[0][a.name], a.nbytes)
            cuda.memcpy_dtod(self.sets[1][a.name], self.sets[0][a.name], a.nbytes)
        self.flush_bytes = int(4 * self.l2) + (64 << 20)
        self.flush_buf = cuda.mem_alloc(self.flush_bytes)
        cuda.memset_d8(self.flush_buf, 1, self.flush_bytes)
        self.sink = cuda.mem_alloc(4)
        mod = SourceModule(HELPERS, no_extern_c=True)
        self.reader = mod.get_function("diag_read")
        self.reader.prepare(ptr + "Q" + ptr)
        self.toucher = mod.get_function("diag_touch")
        self.toucher.prepare(ptr + "Q" + ptr)
        self.args = [[int(s[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args] for s in self.sets]
        self.fns = []
        for s in (base, cand):
            fn = cuda.module_from_buffer(s.cubin).get_function(s.symbol)
            fn.prepare(fmt)
            grid, block, smem = s.launch
            self.fns.append((fn, tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)), smem))
        self.stream = cuda.Stream()
        self.counter = 0

    def prep(self, p: Proc, si: int, side: int) -> None:
        cuda, st = self.cuda, self.stream
        bufs = self.sets[si]
        for a in self.layout.buffers:
            if not a.nbytes:
                continue
            if p.restore == "all" or a.role == "inout":
                cuda.memcpy_dtod_async(bufs[a.name], self.keep[a.name], a.nbytes, st)
            elif a.role == "out":
                poison_memset(cuda, int(bufs[a.name]), a.nbytes, a.dtype, st)
        if p.touch:
            for a in self.layout.buffers:
                words = a.nbytes // 4
                n = max(1, (words + 16383) // 16384)
                self.toucher.prepared_async_call(((n + 127) // 128, 1, 1), (128, 1, 1), st, int(bufs[a.name]),
                                                 words, int(self.sink))
        size = int(p.mult * self.l2)
        if p.wf_size:
            size = max(size, 64 << 20)
        size -= size % 16
        if p.flush == "read":
            self.reader.prepared_async_call((self.sms * 8, 1, 1), (256, 1, 1), st, int(self.flush_buf), size // 4,
                                            int(self.sink))
        else:
            self.counter += 1
            value = (self.counter & 0xFFFF) if p.vary else side + 7
            cuda.memset_d32_async(self.flush_buf, value, size // 4, st)

    def launch(self, si: int, side: int) -> None:
        fn, grid, block, smem = self.fns[side]
        fn.prepared_async_call(grid, block, self.stream, *self.args[si], shared_size=smem)

    def run(self, p: Proc, reps: int) -> tuple[list[float], list[float]]:
        """``reps`` ABBA repetitions; per side, µs per launch."""
        cuda = self.cuda
        batch = 8 if p.sync == "batch" else 1
        ev = [[(cuda.Event(), cuda.Event()) for _ in range(batch)] for _ in range(2)]
        times: list[list[float]] = [[], []]
        rep = 0
        b_index = 0
        last_set = -1
        while rep < reps:
            si_batch = b_index % p.sets
            for b in range(batch):
                if p.rotate == "rep":
                    si = rep % p.sets
                elif p.rotate == "pair":
                    si = (rep // 2) % p.sets
                else:
                    si = si_batch
                order = (0, 1) if rep % 2 == 0 else (1, 0)
                if p.settle and si != last_set:
                    self.prep(p, si, order[0])
                    self.launch(si, order[0])
                last_set = si
                for side in order:
                    self.prep(p, si, side)
                    s, e = ev[side][b]
                    s.record(self.stream)
                    self.launch(si, side)
                    e.record(self.stream)
                    if p.sync == "each":
                        e.synchronize()
                rep += 1
            self.stream.synchronize()
            b_index += 1
            for side in (0, 1):
                times[side].extend(float(e.time_since(s)) * 1e3 for s, e in ev[side])
        return times[0][:reps], times[1][:reps]


def q(v: list[float], f: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(f * (len(s) - 1) + 0.5))]


def row(name: str, t0: list[float], t1: list[float]) -> str:
    m0, m1 = statistics.median(t0), statistics.median(t1)
    pr = statistics.median(a / b for a, b in zip(t0, t1, strict=True))
    return (f"{name:36s} {m0:8.2f} {m1:8.2f} [{q(t1, .25):6.2f} {q(t1, .75):6.2f}] {m0 / m1:7.3f}x  pairs {pr:6.3f}x "
            f"n={len(t1)}")


def header(title: str) -> str:
    return f"\n== {title}\n{'procedure':36s} {'orig µs':>8s} {'var µs':>8s} {'var p25  p75':>15s} {'ratio':>8s}"


def warpforge(src: str, kernel: str, derive: dict[str, Any], runs: int) -> tuple[Side, Side, Layout, int, list[str]]:
    settings = EngineSettings(kernel_timeout=4.0, compile_timeout=60.0, confirm=False,
                              timing=TimingSettings(max_seconds=1.5))
    backend = Backend()
    loop = asyncio.new_event_loop()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cu"
        path.write_text(src, encoding="utf-8")
        try:
            for _ in range(runs):
                ev = Evaluator(path, kernel, backend=backend, settings=settings)
                cand = ev.original.derive(**derive)
                e = loop.run_until_complete(ev.evaluate(cand))
                t = e.timing
                assert t is not None and t.baseline and t.candidate and t.speedup, (e.status, e.reason)
                c = t.candidate
                lines.append(f"{'WarpForge (evaluator)':36s} {t.baseline.median * 1e3:8.2f} {c.median * 1e3:8.2f} "
                             f"[{c.p25 * 1e3:6.2f} {c.p75 * 1e3:6.2f}] {t.speedup.ratio:7.3f}x  "
                             f"[{t.speedup.low:.3f}, {t.speedup.high:.3f}] n={c.n} {e.gpu}")
            base, var, layout, seed = loop.run_until_complete(ev.launch_sides(cand))
            loop.run_until_complete(ev.close())
        finally:
            backend.close()
            loop.close()
    return base, var, layout, seed, lines


def main() -> int:
    import pycuda.driver as cuda

    pairs = [("affine 32 MB: uncoalesced original vs coalesced variant", AFFINE, "affine",
              {"defines": {"CHUNK": "1"}, "grid": ("cdiv(N, 256)",), "block": ("256",)}, 400, procs()),
             ("gelu 2^18 (~5 µs): identical pair", GELU_SMALL, "gelu_forward", {"flags": ("-DWF_SAME=1",)}, 300,
              None)]
    out: list[str] = []
    for title, src, kernel, derive, reps, plist in pairs:
        base, var, layout, seed, wf_lines = warpforge(src, kernel, derive, int(sys.argv[1]) if sys.argv[1:] else 2)
        cuda.init()
        ctx = cuda.Device(0).make_context()
        try:
            h = Harness(cuda, base, var, layout, seed)
            t_end = time.monotonic() + 0.5
            while time.monotonic() < t_end:
                h.run(REF, 20)
            out.append(header(f"{title} (L2 {h.l2 >> 20} MiB)"))
            out.extend(wf_lines)
            if plist is not None:
                for rnd in range(2):
                    for p in (plist if rnd == 0 else plist[::-1]):
                        out.append(row(f"{'' if rnd == 0 else '(2) '}{p.name}", *h.run(p, reps)))
                        print(out[-1], flush=True)
            else:
                chosen = [REF, WF, replace(WF, name="wf + 1 set", sets=1),
                          replace(WF, name="wf + sets per batch, settle", rotate="batch", settle=True)]
                for rnd in range(4):
                    for p in chosen:
                        out.append(row(f"({rnd}) {p.name}", *h.run(p, reps)))
                        print(out[-1], flush=True)
        finally:
            ctx.pop()
            ctx.detach()
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
