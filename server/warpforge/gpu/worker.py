"""The GPU worker process: the only place in WarpForge that imports pycuda and touches CUDA.

One worker owns one CUDA context on one GPU and serves requests from its supervisor over a pipe. It is
persistent (loading a context costs a second; a request costs milliseconds) and disposable: a sticky CUDA
error (illegal address, misaligned access, ...) poisons the context for good, and a hung kernel cannot be
stopped from inside, so in both cases the worker answers with ``fatal`` set and exits; the supervisor
starts a fresh one. Nothing a candidate kernel does can take the server or the CLI down with it.

What the worker does for the verification rules (see docs/architecture.md "Verification"):

- inputs are generated here from the spec's layout (``inputs``) and kept as *pristine* device copies per
  (size, seed); ``inout`` buffers are copied from them into freshly allocated buffers for every run, and
  ``in`` buffers (read-only per the spec) are passed to verification runs in place, guarded like every
  buffer and checksummed (``compare.checksum``) when drawn and after every run that used them: a candidate
  that writes its input is rejected, an original that does is told (its buffer is copied from then on), and
  a set that was written is dropped and drawn again, so no run ever sees inputs an earlier run changed;
  timing sets and energy runs copy every input, as before;
- outputs are poisoned before every run, including every timed repetition;
- every buffer is surrounded by guard bytes; a write past either end of a buffer is reported;
- a run's buffers are scrubbed (poisoned) when released, and freed only after the next run's buffers
  are allocated, so consecutive runs never get the same pointers (a kernel caching results keyed by
  pointer, or finding an oracle's results in recycled memory, is caught);
- outputs are compared with the oracle's on the device (``compare.DEVICE_SOURCE``, checked against the
  host implementation at start), and only counts and the first mismatch travel back;
- timing is cold: CUDA events around each launch, warm-up by time, L2 flushed before every launch (by a
  memset of a buffer twice its size, as Triton's ``do_bench`` and nvbench flush), inout buffers restored and
  outputs re-poisoned before every launch (outside the events), sides interleaved ABBA on buffer sets
  they rotate through together (placement cannot favour a side), adaptive repetitions (``timing``);
  each timed launch is waited for before the next one's reset and flush are submitted (a queue of them added
  ~0.5 µs per launch, see ``op_time``), and the flush just before each launch keeps the GPU busy while the CPU
  submits the events and the launch, so microsecond kernels see no CPU gap either; where asked
  (``graph``), the same sequence (reset, flush,
  event, launch, event) is captured in a CUDA graph per side instead (``_cold_graphs_for``); on request
  both sides are also timed back to back with no flush (the "hot" figure, ``_time_hot``: CUDA graphs of
  many launches for microsecond kernels, ``timing.use_graphs``);
- verification can also run on inputs whose last elements are perturbed (``inputs.perturb_tail``): a
  run's third element ``"tail"`` asks for that, for the subject and the oracle alike;
- after timing, each side is called once more on the buffers it was timed on and its outputs are compared
  with the oracle's, so a kernel that skips work when called again on the same buffers is caught.

Requests are dicts with an ``op``; replies are dicts with a ``status`` in ok | rejected | crashed |
timeout | unavailable | error. ``python -m warpforge.gpu.worker --oneshot JOB`` runs one kernel once
(for compute-sanitizer and ncu, which must wrap a whole process).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import pickle
import sys
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from . import compare as cmp
from . import device_inputs
from .compare import sensitivity_tolerance
from .device_inputs import DeviceGenerator, perturb_tail_on_device
from .energy import NvmlDevice, NvmlUnavailable
from .energy import measure as measure_energy
from .input_cache import inputs_for
from .inputs import (
    ArgLayout,
    Layout,
    generate,
    is_poison,
    itemsize,
    perturb_tail,
    poison_memset,
    poison_scalar,
    scalar_format,
    scalar_value,
    storage_dtype,
    tail_plan,
    to_float64,
)
from .timing import (
    TimingSettings,
    cold_launches_per_replay,
    converged,
    interleave,
    launches_per_replay,
    speedup,
    use_graphs,
)
from .tolerance import normwise_atol

Msg = dict[str, Any]
Launch = tuple[tuple[int, int, int], tuple[int, int, int], int]

#: guard bytes before and after every buffer of a verification run
GUARD = 16384
CANARY = 0x5A
#: dynamic shared memory a kernel may use without opting in
DEFAULT_SMEM = 48 * 1024
#: the fraction of device memory the worker may keep in caches (pristine inputs, oracle outputs)
CACHE_FRACTION = 0.4
MAX_MODULES = 64
#: buffer sets the timed sides rotate through (see ``Engine.op_time``)
TIMING_SETS = 2
#: a launch this long (s) needs no CUDA graph: its per-launch time comes from the events around its warm-up launch
LONG_LAUNCH_S = 0.002
#: kernels this long (s) may stop after LONG_KERNEL_MIN_REPS repetitions (when stable to the target)
LONG_KERNEL_S = 0.02
LONG_KERNEL_MIN_REPS = 5
#: repetitions after which such a kernel may be given up on as clearly slower than the best (``abandon_below``)
LONG_KERNEL_ABANDON_REPS = 2
#: aim for this much GPU time (s) per batch of repetitions between checks of the stopping rule
BATCH_TARGET_S = 0.1
#: the GPU counts as warm when its SM clock is at least this fraction of the maximum
WARM_CLOCK_FRACTION = 0.85
#: retired buffers kept for reuse, as a fraction of device memory (see ``Engine._alloc``)
POOL_FRACTION = 0.2
#: buffers retired in the last this-many batches are not handed out again, so a run never gets the
#: pointers of the runs just before it
POOL_DEPTH = 2
#: size classes: powers of two below this, multiples of it above
POOL_GRAIN = 2 << 20


class KernelTimeout(Exception):
    """A kernel did not finish in time; the context cannot be used any more."""


class Rejected(Exception):
    """The launch cannot be made as asked (too much shared memory, too many threads, ...)."""


@dataclass(eq=False)
class _Buf:
    alloc: Any
    base: int
    total: int
    ptr: int
    nbytes: int
    guarded: bool
    owned: bool = False  # held by a cache (pristine inputs, oracle outputs, flush buffer)


@dataclass
class _Module:
    key: str
    module: Any
    function: Any
    symbol: str
    attrs: dict[str, int]
    prepared: str | None = None


@dataclass
class _Oracle:
    bufs: dict[str, _Buf]
    guard: list[str]
    #: per output, its largest finite magnitude (the ``norm`` tolerance's scale), measured when first needed
    scales: dict[str, float] = field(default_factory=dict)


@dataclass
class _Problem:
    id: str
    layouts: dict[str, Layout]
    #: per output (rtol, atol, norm): ``spec.model.KernelSpec.tolerance_for``
    tolerances: dict[str, tuple[float, float, float]]
    pristine: dict[tuple[str, int, bool], dict[str, _Buf]] = field(default_factory=dict)
    #: per pristine set, the checksum of each ``in`` buffer shared in place, taken when the set was drawn
    sums: dict[tuple[str, int, bool], dict[str, int]] = field(default_factory=dict)
    oracles: dict[tuple[str, str, int, bool], _Oracle] = field(default_factory=dict)
    #: ``in`` buffers the original kernel writes (the spec calls a scratch buffer an input): copied per run
    written_by_original: set[str] = field(default_factory=set)
    nbytes: int = 0


@dataclass
class _Run:
    layout: Layout
    bufs: dict[str, _Buf]
    guard: list[str]
    #: the buffers that are the pristine inputs themselves (used in place): not the run's to release
    shared: frozenset[str] = frozenset()

    def own(self) -> list[_Buf]:
        """The buffers allocated for this run (what its caller retires)."""
        return [b for name, b in self.bufs.items() if name not in self.shared]


def _launch_of(value: Any) -> Launch:
    grid, block, smem = value
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    b = tuple(int(x) for x in block) + (1,) * (3 - len(block))
    return (g[0], g[1], g[2]), (b[0], b[1], b[2]), int(smem)


class _Graphs:
    """CUDA graph capture through the driver API (pycuda has no graph bindings): same context, same stream.

    Also the events that time launches inside a graph: pycuda's events expose no handle, and an event recorded
    during capture becomes an event-record node only when recorded with ``CU_EVENT_RECORD_EXTERNAL``."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        vp, ull = ctypes.c_void_p, ctypes.c_ulonglong
        self.lib.cuStreamBeginCapture_v2.argtypes = [vp, ctypes.c_int]
        self.lib.cuStreamEndCapture.argtypes = [vp, ctypes.POINTER(vp)]
        self.lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ull]
        self.lib.cuGraphLaunch.argtypes = [vp, vp]
        self.lib.cuGraphExecDestroy.argtypes = [vp]
        self.lib.cuGraphDestroy.argtypes = [vp]
        self.lib.cuEventCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
        self.lib.cuEventRecordWithFlags.argtypes = [vp, vp, ctypes.c_uint]
        self.lib.cuEventDestroy_v2.argtypes = [vp]
        # CUDA 12.8 added the _v2 (the old one is deprecated); older drivers have only the first
        self._elapsed = getattr(self.lib, "cuEventElapsedTime_v2", None) or self.lib.cuEventElapsedTime
        self._elapsed.argtypes = [ctypes.POINTER(ctypes.c_float), vp, vp]

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    def capture(self, stream: int, body: Callable[[], None]) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        self._check(self.lib.cuStreamBeginCapture_v2(ctypes.c_void_p(stream), 2), "cuStreamBeginCapture")  # relaxed
        graph = ctypes.c_void_p()
        try:
            body()
        finally:
            self._check(self.lib.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph)), "cuStreamEndCapture")
        exe = ctypes.c_void_p()
        self._check(self.lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0), "cuGraphInstantiate")
        return graph, exe

    def launch(self, exe: ctypes.c_void_p, stream: int) -> None:
        self._check(self.lib.cuGraphLaunch(exe, ctypes.c_void_p(stream)), "cuGraphLaunch")

    def destroy(self, graph: ctypes.c_void_p, exe: ctypes.c_void_p) -> None:
        self.lib.cuGraphExecDestroy(exe)
        self.lib.cuGraphDestroy(graph)

    def event(self) -> ctypes.c_void_p:
        """A timing event (flags 0: timing enabled)."""
        ev = ctypes.c_void_p()
        self._check(self.lib.cuEventCreate(ctypes.byref(ev), 0), "cuEventCreate")
        return ev

    def record(self, event: ctypes.c_void_p, stream: int) -> None:
        """Record ``event`` on ``stream``; during capture this adds an event-record node to the graph."""
        self._check(self.lib.cuEventRecordWithFlags(event, ctypes.c_void_p(stream), 1), "cuEventRecordWithFlags")

    def elapsed_ms(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        ms = ctypes.c_float()
        self._check(self._elapsed(ctypes.byref(ms), start, end), "cuEventElapsedTime")
        return float(ms.value)

    def destroy_event(self, event: ctypes.c_void_p) -> None:
        self.lib.cuEventDestroy_v2(event)


@dataclass
class _ColdGraph:
    """One side's cold graph on one buffer set: per launch, reset + L2 flush + launch between two events."""

    graph: Any
    exe: Any
    events: list[tuple[Any, Any]]


class Engine:
    """Everything the worker does, on one context. Methods ``op_*`` serve requests."""

    def __init__(self, device: int) -> None:
        import pycuda.driver as cuda

        self.cuda: Any = cuda
        cuda.init()
        self.device_index = device
        self.dev: Any = cuda.Device(device)
        self.ctx: Any = self.dev.make_context()
        self.stream: Any = cuda.Stream()
        self.modules: OrderedDict[str, _Module] = OrderedDict()
        self.problems: OrderedDict[str, _Problem] = OrderedDict()
        self.live: set[_Buf] = set()
        self.retired: list[_Buf] = []
        #: retired allocations by size class, oldest first, with the batch (generation) that retired them
        self.pool: dict[int, deque[tuple[int, Any]]] = {}
        self.pool_bytes = 0
        self.generation = 0
        #: device allocations made and reused (how well the pool works; ``op_info`` reports them)
        self.allocations = 0
        self.reuses = 0
        self.cmp_fns: dict[int, Any] = {}
        self.cmp_res: _Buf | None = None
        #: ``wf_checksum``, once checked against ``compare.checksum``: without it every input is copied per run
        self.sum_fn: Any = None
        self.sum_res: _Buf | None = None
        self.sum_note = "inputs copied for every run (no device checksum yet)"
        #: pristine sets shared by a run whose write check has not run yet (``_cleanup`` drops them)
        self.unchecked: list[tuple[_Problem, tuple[str, int, bool]]] = []
        #: the verification launch in progress (``_run``): a crash names it (``during`` in the reply)
        self.during: Msg | None = None
        #: buffers of dropped pristine sets, retired when the request ends (``_drop_pristine``)
        self.dropped: list[_Buf] = []
        self.device_compare = False
        self.compare_note = "device comparison not set up"
        #: the device input generator, once checked against the host's (``device_inputs``)
        self.gen: DeviceGenerator | None = None
        self.gen_note = "inputs generated on the host (no device module yet)"
        self.flush: _Buf | None = None
        self.last_busy = 0.0
        self.peak_gbps: float | None = None
        self.graphs: _Graphs | None = None
        try:
            self.nvml: NvmlDevice | None = NvmlDevice(self._bus_id(), device)
        except NvmlUnavailable:
            self.nvml = None
        self.info = self._info()
        self.budget = int(self.info["total_mem"] * CACHE_FRACTION)
        self.pool_cap = int(self.info["total_mem"] * POOL_FRACTION)

    # ----------------------------------------------------------------- device facts
    def _bus_id(self) -> str | None:
        try:
            return str(self.dev.pci_bus_id())
        except Exception:
            return None

    def _attr(self, name: str) -> int:
        try:
            return int(self.dev.get_attribute(getattr(self.cuda.device_attribute, name)))
        except Exception:
            return 0

    def _info(self) -> Msg:
        cc = self.dev.compute_capability()
        mem_khz = self._attr("MEMORY_CLOCK_RATE")
        bus = self._attr("GLOBAL_MEMORY_BUS_WIDTH")
        cuda_version = int(self.cuda.get_driver_version())
        driver = self.nvml.driver_version() if self.nvml else None
        return {
            "name": str(self.dev.name()),
            "device": self.device_index,
            "cc": f"{cc[0]}.{cc[1]}",
            "arch": f"sm_{cc[0]}{cc[1]}",
            "sm_count": self._attr("MULTIPROCESSOR_COUNT"),
            "l2_bytes": self._attr("L2_CACHE_SIZE"),
            "clock_mhz": self._attr("CLOCK_RATE") // 1000,
            "mem_clock_mhz": mem_khz // 1000,
            "bus_width": bus,
            "theoretical_gbps": 2.0 * mem_khz * 1e3 * bus / 8 / 1e9,
            "total_mem": int(self.dev.total_memory()),
            "smem_per_block": self._attr("MAX_SHARED_MEMORY_PER_BLOCK") or DEFAULT_SMEM,
            "smem_optin": self._attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") or DEFAULT_SMEM,
            "max_threads": self._attr("MAX_THREADS_PER_BLOCK") or 1024,
            "max_block": [self._attr("MAX_BLOCK_DIM_X") or 1024, self._attr("MAX_BLOCK_DIM_Y") or 1024,
                          self._attr("MAX_BLOCK_DIM_Z") or 64],
            "max_grid": [self._attr("MAX_GRID_DIM_X") or 2**31 - 1, self._attr("MAX_GRID_DIM_Y") or 65535,
                         self._attr("MAX_GRID_DIM_Z") or 65535],
            "cuda_driver": cuda_version,
            "driver": driver or f"CUDA {cuda_version // 1000}.{cuda_version % 1000 // 10}",
            "pci_bus_id": self._bus_id(),
            "nvml": self.nvml is not None,
            "pid": os.getpid(),
        }

    # ----------------------------------------------------------------- memory
    def _alloc(self, nbytes: int, guarded: bool) -> _Buf:
        """A device buffer for one run, from the pool of retired buffers when one of its size is there.

        Every verification run and timing set gets fresh buffers. Allocating them with ``cuMemAlloc`` and
        freeing them with ``cuMemFree`` each time meant a dozen of each per candidate, each a driver call
        that may synchronize the device. Retired buffers are therefore scrubbed and kept by size class, and
        one is handed out again only when ``POOL_DEPTH`` later batches have been retired, so a run never sees
        the pointers of the runs just before it; outputs are poisoned and inputs copied afresh as before, so
        a kernel that skips work shows wrong results. (Measured on 2 H200s: throughput within run-to-run
        noise of the unpooled engine; benchmarks/RESULTS.md, "Scale-out".)
        """
        cuda = self.cuda
        pad = GUARD if guarded else 0
        size = _size_class(max(nbytes + 2 * pad, 256))
        alloc = self._reuse(size)
        if alloc is None:
            try:
                alloc = cuda.mem_alloc(size)
            except cuda.MemoryError:
                self._drain_pool()  # the pool may hold what is missing
                alloc = cuda.mem_alloc(size)
            self.allocations += 1
        else:
            self.reuses += 1
        base = int(alloc)
        buf = _Buf(alloc, base, size, base + pad, nbytes, guarded)
        if guarded:
            cuda.memset_d8_async(base, CANARY, GUARD, self.stream)
            cuda.memset_d8_async(buf.ptr + nbytes, CANARY, GUARD, self.stream)
        self.live.add(buf)
        return buf

    def _poison(self, buf: _Buf, dtype: str) -> None:
        poison_memset(self.cuda, buf.ptr, buf.nbytes, dtype, self.stream)

    def _retire(self, bufs: list[_Buf]) -> None:
        """Scrub buffers now; free them after the next allocation (so pointers are never reused at once)."""
        for b in bufs:
            if b in self.live:
                self.live.discard(b)
                self.cuda.memset_d8_async(b.base, 0xF8, b.total, self.stream)
                self.retired.append(b)

    def _free_retired(self) -> None:
        """Put retired buffers (scrubbed on the stream, which orders any reuse) into the pool."""
        if not self.retired:
            return
        self.generation += 1
        for b in self.retired:
            self.pool.setdefault(b.total, deque()).append((self.generation, b.alloc))
            self.pool_bytes += b.total
        self.retired.clear()
        if self.pool_bytes > self.pool_cap:
            self._drain_pool(self.pool_cap // 2)

    def _reuse(self, size: int) -> Any:
        q = self.pool.get(size)
        if not q or q[0][0] > self.generation - POOL_DEPTH:
            return None
        self.pool_bytes -= size
        return q.popleft()[1]

    def _drain_pool(self, keep: int = 0) -> None:
        """Free pooled buffers, largest size classes and oldest first, until at most ``keep`` bytes remain."""
        if self.pool_bytes <= keep:
            return
        self.stream.synchronize()
        for size in sorted(self.pool, reverse=True):
            q = self.pool[size]
            while q and self.pool_bytes > keep:
                q.popleft()[1].free()
                self.pool_bytes -= size
        self.pool = {k: q for k, q in self.pool.items() if q}

    def _release_problem(self, prob: _Problem) -> None:
        bufs = [b for d in prob.pristine.values() for b in d.values()]
        bufs += [b for o in prob.oracles.values() for b in o.bufs.values()]
        self._retire(bufs)
        prob.pristine.clear()
        prob.sums.clear()
        prob.oracles.clear()
        prob.nbytes = 0

    def _evict(self, keep: str) -> None:
        total = sum(p.nbytes for p in self.problems.values())
        for pid in list(self.problems):
            if total <= self.budget:
                break
            if pid == keep:
                continue
            prob = self.problems.pop(pid)
            total -= prob.nbytes
            self._release_problem(prob)

    # ----------------------------------------------------------------- problems, modules
    def _problem(self, payload: Msg) -> _Problem:
        pid = str(payload["id"])
        prob = self.problems.get(pid)
        if prob is None:
            prob = _Problem(pid, dict(payload["layouts"]),
                            {k: (float(v[0]), float(v[1]), float(v[2]) if len(v) > 2 else 0.0)
                             for k, v in payload["tolerances"].items()})
            self.problems[pid] = prob
        self.problems.move_to_end(pid)
        return prob

    def _module(self, ref: Msg) -> _Module:
        key = str(ref["key"])
        mod = self.modules.get(key)
        if mod is not None:
            self.modules.move_to_end(key)
            return mod
        cuda = self.cuda
        module = cuda.module_from_buffer(ref["cubin"])
        fn = module.get_function(ref["symbol"])
        fa = cuda.function_attribute

        def get(name: str) -> int:
            try:
                return int(fn.get_attribute(getattr(fa, name)))
            except Exception:
                return 0

        attrs = {
            "registers": get("NUM_REGS"),
            "shared_bytes": get("SHARED_SIZE_BYTES"),
            "local_bytes": get("LOCAL_SIZE_BYTES"),
            "max_threads_per_block": get("MAX_THREADS_PER_BLOCK") or 1024,
        }
        mod = _Module(key, module, fn, str(ref["symbol"]), attrs)
        self.modules[key] = mod
        while len(self.modules) > MAX_MODULES:
            self.modules.popitem(last=False)
        return mod

    def _precheck(self, mod: _Module, launch: Launch) -> None:
        """Refuse launches the GPU would refuse, with a reason a person can act on."""
        grid, block, smem = launch
        info = self.info
        threads = block[0] * block[1] * block[2]
        if min(grid) < 1 or min(block) < 1:
            raise Rejected(f"launch grid {grid} / block {block} has an empty dimension")
        limit = mod.attrs["max_threads_per_block"]
        if threads > limit:
            raise Rejected(f"a block of {threads} threads exceeds this kernel's limit of {limit} "
                           f"({mod.attrs['registers']} registers per thread)")
        for i, (b, mb) in enumerate(zip(block, info["max_block"], strict=True)):
            if b > mb:
                raise Rejected(f"block dimension {'xyz'[i]} = {b} exceeds the GPU's {mb}")
        for i, (g, mg) in enumerate(zip(grid, info["max_grid"], strict=True)):
            if g > mg:
                raise Rejected(f"grid dimension {'xyz'[i]} = {g} exceeds the GPU's {mg}")
        static = mod.attrs["shared_bytes"]
        optin = int(info["smem_optin"])
        if static + smem > optin:
            raise Rejected(f"asks for {static + smem} bytes of shared memory per block (static {static} + "
                           f"dynamic {smem}); {info['name']} allows at most {optin}")
        if static + smem > DEFAULT_SMEM:
            try:
                mod.function.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            except self.cuda.Error as e:
                raise Rejected(f"cannot raise the dynamic shared memory limit to {smem} bytes: {e}") from e

    # ----------------------------------------------------------------- launching
    def _format(self, layout: Layout) -> str:
        ptr = np.dtype(np.uintp).char
        return "".join(ptr if a.is_buffer else scalar_format(a.dtype) for a in layout.args)

    def _launch(self, mod: _Module, launch: Launch, layout: Layout, ptrs: dict[str, int]) -> None:
        fmt = self._format(layout)
        if mod.prepared != fmt:
            mod.function.prepare(fmt)
            mod.prepared = fmt
        args = [ptrs[a.name] if a.is_buffer else scalar_value(a) for a in layout.args]
        grid, block, smem = launch
        mod.function.prepared_async_call(grid, block, self.stream, *args, shared_size=smem)

    def _launcher(self, mod: _Module, launch: Launch, layout: Layout, ptrs: dict[str, int]) -> Callable[[], None]:
        """``_launch`` with everything but the submission done once: timing calls it per repetition."""
        fmt = self._format(layout)
        if mod.prepared != fmt:
            mod.function.prepare(fmt)
            mod.prepared = fmt
        args = [ptrs[a.name] if a.is_buffer else scalar_value(a) for a in layout.args]
        grid, block, smem = launch
        call, stream = mod.function.prepared_async_call, self.stream

        def go() -> None:
            call(grid, block, stream, *args, shared_size=smem)

        return go

    def _sync(self, timeout: float) -> None:
        """Wait for the stream, polling so that a hung kernel becomes a timeout instead of a hung worker."""
        ev = self.cuda.Event()
        ev.record(self.stream)
        self._wait(ev, timeout)

    def _wait(self, ev: Any, timeout: float) -> None:
        """Wait for an event recorded on the stream (``_sync``)."""
        start = time.monotonic()
        deadline = start + timeout
        while not ev.query():
            now = time.monotonic()
            if now > deadline:
                raise KernelTimeout(f"a kernel did not finish within {timeout:g} s (hang?)")
            time.sleep(0 if now - start < 0.002 else 0.0002)
        self.last_busy = time.monotonic()

    # ----------------------------------------------------------------- runs
    def _pristine(self, prob: _Problem, variant: str, seed: int, tail: bool = False) -> dict[str, _Buf]:
        """The inputs of (variant, seed) on the device, kept; ``tail``: with their last elements perturbed.

        ``in`` buffers are guarded (verification runs use them in place, so a write next to one must show in
        its canary bands like next to any buffer) and checksummed once here (``_shared``)."""
        key = (variant, int(seed), bool(tail))
        bufs = prob.pristine.get(key)
        if bufs is not None:
            return bufs
        layout = prob.layouts[variant]
        bufs = {}
        for a in layout.buffers:
            if not a.readable:
                continue
            guarded = a.role == "in"
            if self.gen is not None:  # drawn where it is used: nothing crosses the bus
                b = self._alloc(a.nbytes, guarded=guarded)
                b.owned = True
                self.gen.fill(b.ptr, a, int(seed))
                if tail and a.nbytes:
                    self.stream.synchronize()
                    perturb_tail_on_device(self.cuda, b.ptr, a)
            else:
                host = inputs_for(a, int(seed))  # generated once per machine, shared by its workers
                if tail:
                    host = perturb_tail(a, host)
                b = self._alloc(host.nbytes, guarded=guarded)
                b.owned = True
                if host.nbytes:
                    self.cuda.memcpy_htod(b.ptr, host)
            bufs[a.name] = b
            prob.nbytes += b.total
        prob.pristine[key] = bufs
        names = sorted(self._shared(prob, layout))
        if names:
            prob.sums[key] = dict(zip(names, self._checksums([bufs[n] for n in names], 60.0), strict=True))
        self._evict(prob.id)
        return bufs

    def _shared(self, prob: _Problem, layout: Layout) -> frozenset[str]:
        """The buffers verification runs may use in place: read-only per the spec, not written by the
        original, not empty, and only where the device checksum (the write check) is available."""
        if self.sum_fn is None:
            return frozenset()
        return frozenset(a.name for a in layout.buffers
                         if a.role == "in" and a.nbytes and a.name not in prob.written_by_original)

    def _drop_pristine(self, prob: _Problem, key: tuple[str, int, bool]) -> None:
        """Forget a pristine set (a run wrote it): the next run of (variant, seed) draws it again.

        Its buffers are retired (scrubbed) only when the request ends: a caller may still hold the set (timing
        restores ``inout`` buffers from it between repetitions, and its oracle run may be the one that wrote)."""
        bufs = prob.pristine.pop(key, None)
        prob.sums.pop(key, None)
        if bufs:
            prob.nbytes -= sum(b.total for b in bufs.values())
            self.dropped.extend(bufs.values())

    def _checksums(self, bufs: list[_Buf], timeout: float) -> list[int]:
        """``compare.checksum`` of each buffer, computed on the device (one launch each, one copy back)."""
        if not bufs:
            return []
        cuda = self.cuda
        if self.sum_res is None or self.sum_res.nbytes < 8 * len(bufs):
            if self.sum_res is not None:
                self._retire([self.sum_res])
            self.sum_res = self._alloc(max(256, 8 * len(bufs)), guarded=False)
            self.sum_res.owned = True
        res = self.sum_res.ptr
        cuda.memset_d32_async(res, 0, 2 * len(bufs), self.stream)
        sms = max(1, int(self.info["sm_count"] or 1))
        for i, b in enumerate(bufs):
            words = max(1, b.nbytes // 8)
            grid = max(1, min((words + 255) // 256, sms * 16))
            self.sum_fn.prepared_async_call((grid, 1, 1), (256, 1, 1), self.stream, b.ptr, b.nbytes, res + 8 * i)
        self._sync(timeout)
        out = np.empty(len(bufs), dtype=np.uint64)
        cuda.memcpy_dtoh(out, res)
        return [int(x) for x in out]

    def _fresh(self, layout: Layout, pristine: dict[str, _Buf], guarded: bool,
               shared: frozenset[str] = frozenset()) -> dict[str, _Buf]:
        """A run's buffers: ``shared`` inputs are the pristine buffers themselves, other inputs fresh copies of
        them, outputs fresh and poisoned."""
        bufs: dict[str, _Buf] = {}
        for a in layout.buffers:
            if a.name in shared:
                bufs[a.name] = pristine[a.name]
                continue
            b = self._alloc(a.nbytes, guarded)
            if a.readable:
                if a.nbytes:
                    self.cuda.memcpy_dtod_async(b.ptr, pristine[a.name].ptr, a.nbytes, self.stream)
            else:
                self._poison(b, a.dtype)
            bufs[a.name] = b
        self._free_retired()
        return bufs

    def _run(self, prob: _Problem, mod: _Module, launch: Launch, variant: str, seed: int, timeout: float,
             tail: bool = False, original: bool = False) -> _Run:
        """One verification launch on fresh outputs, its read-only inputs used in place and checked after.

        ``original``: the launch is the original kernel's; a write to an input is then not a finding but a
        fact about the spec (``_Problem.written_by_original``)."""
        layout = prob.layouts[variant]
        key = (variant, int(seed), bool(tail))
        self.during = self._during(prob, mod, layout, variant, seed, tail, original)
        pristine = self._pristine(prob, variant, seed, tail)
        sums = prob.sums.get(key, {})
        shared = frozenset(n for n in self._shared(prob, layout) if n in sums)
        bufs = self._fresh(layout, pristine, guarded=True, shared=shared)
        if shared:
            self.unchecked.append((prob, key))
        self._launch(mod, launch, layout, {k: b.ptr for k, b in bufs.items()})
        self._sync(timeout)
        hit: set[str] = set()
        guard = self._guards(layout, bufs, hit)
        if shared:
            names = sorted(shared)
            after = self._checksums([bufs[n] for n in names], timeout)
            written = [n for n, v in zip(names, after, strict=True) if v != sums[n]]
            for name in written:
                if original:
                    prob.written_by_original.add(name)
                else:
                    guard.append(f"writes its input `{name}` (the spec lists it read-only; the original leaves it "
                                 "unchanged)")
            if written or hit & shared:  # never reuse inputs a run changed (or their canaries)
                self._drop_pristine(prob, key)
            self.unchecked.pop()
        return _Run(layout, bufs, guard, shared)

    @staticmethod
    def _during(prob: _Problem, mod: _Module, layout: Layout, variant: str, seed: int, tail: bool,
                original: bool) -> Msg:
        """What a crash of this launch is reported with: which kernel, which run (purpose, seed, sizes, the
        inputs the sensitivity run perturbs and those it leaves alone) and whether this kernel already ran
        cleanly on plain inputs at the spec size (then the inputs of this run are what differs)."""
        moved, left = tail_plan(layout) if tail else ((), {})
        plain_ok = any(k[0] == mod.key and k[1] == "spec" and not k[3] for k in prob.oracles)
        return {"side": "original" if original else "candidate", "variant": variant, "seed": int(seed),
                "tail": bool(tail), "sizes": layout.describe(), "perturbed": list(moved), "left": dict(left),
                "plain_ok": plain_ok}

    def _guards(self, layout: Layout, bufs: dict[str, _Buf], hit: set[str] | None = None) -> list[str]:
        """Out-of-bounds writes: canary bytes changed around any buffer (their names go into ``hit``)."""
        found: list[str] = []
        host = np.empty(GUARD, dtype=np.uint8)
        for a in layout.buffers:
            b = bufs[a.name]
            for where, addr in (("before the start", b.base), ("past the end", b.ptr + b.nbytes)):
                self.cuda.memcpy_dtoh(host, addr)
                bad = np.flatnonzero(host != CANARY)
                if bad.size:
                    size = itemsize(a.dtype)
                    if where == "past the end":
                        what = f"element {int(a.count or 0) + int(bad[0]) // size}"
                    else:
                        what = f"element {-((GUARD - int(bad[-1])) // size + 1)}"
                    found.append(f"out-of-bounds write {where} of `{a.name}` ({what}; {bad.size} guard bytes "
                                 "changed)")
                    if hit is not None:
                        hit.add(a.name)
        return found

    def _oracle(self, prob: _Problem, mod: _Module, launch: Launch, variant: str, seed: int,
                timeout: float, tail: bool = False) -> _Oracle:
        key = (mod.key, variant, int(seed), bool(tail))
        found = prob.oracles.get(key)
        if found is not None:
            return found
        run = self._run(prob, mod, launch, variant, seed, timeout, tail, original=True)
        keep = {a.name: run.bufs[a.name] for a in run.layout.writable}
        for b in keep.values():
            b.owned = True
            prob.nbytes += b.total
        self._retire([b for b in run.own() if b not in keep.values()])
        oracle = _Oracle(keep, run.guard)
        prob.oracles[key] = oracle
        self._evict(prob.id)
        return oracle

    # ----------------------------------------------------------------- comparison
    def _tolerance(self, prob: _Problem, oracle: _Oracle, a: ArgLayout) -> tuple[float, float, float, float]:
        """(rtol, atol, norm, scale) for output ``a`` against ``oracle``: the spec's tolerance and, where it
        has a ``norm`` part, the largest finite magnitude of that output in the original's run (measured once
        per oracle: one copy of the output to the host)."""
        rtol, atol, norm = prob.tolerances.get(a.name, (0.0, 0.0, 0.0))
        if norm <= 0:
            return rtol, atol, 0.0, 0.0
        scale = oracle.scales.get(a.name)
        if scale is None:
            count = int(a.count or 0)
            w = np.empty(count, dtype=storage_dtype(a.dtype))
            if count:
                self.cuda.memcpy_dtoh(w, oracle.bufs[a.name].ptr)
            scale = oracle.scales[a.name] = cmp.largest_magnitude(w, a.dtype)
        return rtol, atol, norm, scale

    def _compare(self, a: ArgLayout, got: int, want: int, tol: tuple[float, float, float, float],
                 timeout: float) -> cmp.BufferReport:
        """``got`` against ``want`` element by element; ``tol`` is (rtol, atol, norm, scale) (``_tolerance``):
        the absolute floor is ``atol + norm * scale``, and the report names both parts."""
        rtol, atol, norm, scale = tol
        floor = normwise_atol(atol, norm, scale)
        count = int(a.count or 0)
        if self.device_compare:
            rep = self._compare_device(a.name, a.dtype, count, got, want, rtol, floor, timeout)
        else:
            store = storage_dtype(a.dtype)
            g = np.empty(count, dtype=store)
            w = np.empty(count, dtype=store)
            if count:
                self.cuda.memcpy_dtoh(g, got)
                self.cuda.memcpy_dtoh(w, want)
            rep = cmp.compare(a.name, g, w, a.dtype, rtol, floor)
        return replace(rep, atol=atol, norm=norm, scale=scale) if norm > 0 else rep

    def _compare_device(self, name: str, dtype: str, count: int, got: int, want: int, rtol: float, atol: float,
                        timeout: float) -> cmp.BufferReport:
        cuda = self.cuda
        assert self.cmp_res is not None
        size = itemsize(dtype)
        fn = self.cmp_fns[size]
        res = self.cmp_res.ptr
        cuda.memset_d32_async(res, 0, 2 * cmp.RESULT_WORDS, self.stream)
        cuda.memset_d32_async(res + 24, 0xFFFFFFFF, 2, self.stream)
        grid = max(1, min((count + 255) // 256, max(1, self.info["sm_count"]) * 16))
        fn.prepared_async_call((grid, 1, 1), (256, 1, 1), self.stream, got, want, count, cmp.kind_code(dtype),
                               float(rtol), float(atol), poison_scalar(dtype), res)
        self._sync(timeout)
        out = np.empty(cmp.RESULT_WORDS, dtype=np.uint64)
        cuda.memcpy_dtoh(out, res)
        got_v = want_v = None
        never = False
        if int(out[0]):
            first = int(out[3])
            store = storage_dtype(dtype)
            one = np.empty(1, dtype=store)
            cuda.memcpy_dtoh(one, got + first * size)
            got_v = float(to_float64(one, dtype)[0])
            cuda.memcpy_dtoh(one, want + first * size)
            want_v = float(to_float64(one, dtype)[0])
            never = bool(is_poison(one, dtype)[0])
        return cmp.from_device_result(name, dtype, count, rtol, atol, out, got_v, want_v, never)

    def _setup_compare(self, ref: Msg) -> None:
        """Load the device comparison kernels and check them against the host implementation."""
        module = self.cuda.module_from_buffer(ref["cubin"])
        fns = {}
        ptr = np.dtype(np.uintp).char
        for size, poison in ((1, "I"), (2, "I"), (4, "I"), (8, "Q")):
            fn = module.get_function(f"wf_compare_{size}")
            fn.prepare(ptr + ptr + "Qidd" + poison + ptr)
            fns[size] = fn
        self._cmp_module = module
        self.cmp_fns = fns
        if self.cmp_res is None:
            self.cmp_res = self._alloc(64, guarded=False)
            self.cmp_res.owned = True
        self._setup_checksum(module)
        self.device_compare = True
        problem = self._selftest()
        if problem:
            self.device_compare = False
            self.compare_note = f"device comparison disabled, using the host: {problem}"
        else:
            self.compare_note = "device comparison checked against the host implementation"
        self._setup_generator(module)

    def _setup_checksum(self, module: Any) -> None:
        """Load ``wf_checksum`` and check it against ``compare.checksum``; without it every input is copied."""
        ptr = np.dtype(np.uintp).char
        self.sum_fn = None
        try:
            fn = module.get_function("wf_checksum")
            fn.prepare(ptr + "Q" + ptr)
        except self.cuda.Error as e:
            self.sum_note = f"inputs copied for every run (no device checksum: {_cuda_error_text(e)})"
            return
        self.sum_fn = fn
        try:
            problem = self._checksum_selftest()
        except self.cuda.Error as e:
            problem = _cuda_error_text(e)
        if problem:
            self.sum_fn = None
            self.sum_note = f"inputs copied for every run (device checksum disabled: {problem})"
        else:
            self.sum_note = "read-only inputs used in place, checksummed after every run"

    def _checksum_selftest(self) -> str | None:
        """None when the device checksum equals the host's on buffers of awkward lengths and tells a one-bit
        change apart, else why not."""
        rng = np.random.default_rng(4321)
        for n in (1, 7, 8, 4099, 65536 * 8 + 5):
            data = rng.integers(0, 256, n, dtype=np.uint8)
            flipped = data.copy()
            flipped[n // 2] ^= 0x10
            bufs = [self._alloc(n, guarded=False) for _ in range(2)]
            try:
                self.cuda.memcpy_htod(bufs[0].ptr, data)
                self.cuda.memcpy_htod(bufs[1].ptr, flipped)
                dev = self._checksums(bufs, 10.0)
            finally:
                self._retire(bufs)
            host = [cmp.checksum(data), cmp.checksum(flipped)]
            if dev != host:
                return f"{n} bytes: device {dev}, host {host}"
            if host[0] == host[1]:
                return f"{n} bytes: a one-bit change left the checksum equal"
        return None

    def _setup_generator(self, module: Any) -> None:
        """Load the device input generator and prove it draws the host's bits; else keep the host's.

        ``device_inputs.load`` does it, with this engine's pooled allocator for the self-test's buffers.
        """
        held: dict[int, _Buf] = {}

        def alloc(nbytes: int) -> int:
            b = self._alloc(nbytes, guarded=False)
            held[b.ptr] = b
            return b.ptr

        self.gen, self.gen_note = device_inputs.load(self.cuda, module, int(self.info["sm_count"] or 1),
                                                     self.stream, alloc, lambda p: self._retire([held.pop(p)]))

    def _selftest(self) -> str | None:
        rng = np.random.default_rng(1234)
        cases = [("float32", 1e-4, 1e-5), ("float16", 1e-2, 1e-3), ("bfloat16", 2e-2, 1e-2), ("float64", 1e-10, 1e-12),
                 ("int32", 0.0, 0.0), ("uint8", 0.0, 0.0), ("int64", 0.0, 1.0)]
        n = 4099
        for dtype, rtol, atol in cases:
            arg = ArgLayout("x", "in", dtype, n, dist=("normal", 0.0, 3.0) if dtype.startswith(("f", "b"))
                            else ("int", 0.0, 100.0))
            want = generate(arg, 7)
            got = want.copy()
            idx = rng.choice(n, 60, replace=False)
            u = got.view(f"u{got.itemsize}")
            u[idx[:10]] = poison_scalar(dtype)
            if dtype.startswith(("f", "b")):
                f = to_float64(want, dtype)
                noisy = f[idx[10:30]] * (1 + rng.normal(0, rtol * 3, 20))
                if dtype == "bfloat16":
                    from .inputs import _bfloat16_bits

                    got[idx[10:30]] = _bfloat16_bits(noisy.astype(np.float32))
                else:
                    got[idx[10:30]] = noisy.astype(got.dtype)
                got[idx[30:35]] = np.nan if dtype != "bfloat16" else 0x7FC0
                if dtype != "bfloat16":
                    want[idx[35:38]] = np.nan
                    got[idx[35:37]] = np.nan
                    got[idx[40:42]] = np.inf
            else:
                u[idx[10:30]] += 1
            # Elements the oracle never wrote (poison in `want`) that the candidate wrote: counted apart.
            want.view(f"u{want.itemsize}")[idx[45:50]] = poison_scalar(dtype)
            host = cmp.compare("x", got, want, dtype, rtol, atol)
            g = self._alloc(got.nbytes, guarded=False)
            w = self._alloc(want.nbytes, guarded=False)
            try:
                self.cuda.memcpy_htod(g.ptr, got)
                self.cuda.memcpy_htod(w.ptr, want)
                dev = self._compare_device("x", dtype, n, g.ptr, w.ptr, rtol, atol, 10.0)
            finally:
                self._retire([g, w])
            for fld in ("mismatches", "unwritten", "nan_mismatches", "first_index", "original_unwritten",
                        "first_never_written"):
                if getattr(host, fld) != getattr(dev, fld):
                    return f"{dtype}: {fld} host={getattr(host, fld)} device={getattr(dev, fld)}"
            for fld in ("max_abs", "max_rel"):
                h, d = getattr(host, fld), getattr(dev, fld)
                if not math.isclose(h, d, rel_tol=1e-9, abs_tol=1e-300):
                    return f"{dtype}: {fld} host={h} device={d}"
        return None

    # ----------------------------------------------------------------- ops
    def op_info(self, msg: Msg) -> Msg:
        return {"status": "ok", "info": self.info, "compare": self.compare_note, "inputs": self.gen_note,
                "inputs_in_place": self.sum_note,
                "memory": {"allocations": self.allocations, "reuses": self.reuses, "pooled_bytes": self.pool_bytes,
                           "live": len(self.live)}}

    def op_setup(self, msg: Msg) -> Msg:
        if msg.get("compare"):
            self._setup_compare(msg["compare"])
        return {"status": "ok", "device_compare": self.device_compare, "note": self.compare_note,
                "device_inputs": self.gen is not None, "inputs_note": self.gen_note,
                "inputs_in_place": self.sum_fn is not None, "in_place_note": self.sum_note}

    def op_peak(self, msg: Msg) -> Msg:
        if self.peak_gbps is None:
            self.peak_gbps = self._measure_peak()
        return {"status": "ok", "peak_gbps": self.peak_gbps}

    def _measure_peak(self) -> float:
        """Device-to-device copy bandwidth (bytes read + written), after warming the clocks up."""
        cuda = self.cuda
        free, _total = cuda.mem_get_info()
        size = max(1 << 20, min(1 << 30, int(free) // 8) & ~((1 << 20) - 1))
        a = self._alloc(size, guarded=False)
        b = self._alloc(size, guarded=False)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.3:
                cuda.memcpy_dtod_async(b.ptr, a.ptr, size, self.stream)
                self._sync(30.0)
            times = []
            for _ in range(15):
                s, e = cuda.Event(), cuda.Event()
                s.record(self.stream)
                cuda.memcpy_dtod_async(b.ptr, a.ptr, size, self.stream)
                e.record(self.stream)
                self._sync(30.0)
                times.append(e.time_since(s))
        finally:
            self._retire([a, b])
            self._free_retired()
        ms = float(np.median(times))
        return 2 * size / (ms * 1e-3) / 1e9

    def op_check(self, msg: Msg) -> Msg:
        """Run the subject (default: the oracle itself) for each (variant, seed) and compare with the oracle."""
        prob = self._problem(msg["problem"])
        oref = msg["oracle"]
        sref = msg.get("subject") or oref
        omod = self._module(oref)
        smod = self._module(sref)
        timeout = float(msg.get("kernel_timeout", 10.0))
        # A run is [variant, seed] or [variant, seed, "tail"] (inputs with their last elements perturbed).
        runs = [(str(r[0]), int(r[1]), len(r) > 2 and r[2] == "tail") for r in msg["runs"]]
        det = tuple(msg["determinism"]) if msg.get("determinism") else None
        for variant in {r[0] for r in runs}:
            try:
                self._precheck(omod, _launch_of(oref["launch"][variant]))
            except Rejected as e:
                return {"status": "error", "reason": f"the original kernel cannot be launched: {e}"}
            self._precheck(smod, _launch_of(sref["launch"][variant]))
        reports: list[Msg] = []
        determinism: list[cmp.BufferReport] | None = None
        itself = smod.key == omod.key  # the original checked against itself (the baseline)
        for variant, seed, tail in runs:
            layout = prob.layouts[variant]
            oracle = self._oracle(prob, omod, _launch_of(oref["launch"][variant]), variant, seed, timeout, tail)
            run = self._run(prob, smod, _launch_of(sref["launch"][variant]), variant, seed, timeout, tail,
                            original=itself)
            report: Msg = {"variant": variant, "seed": seed, "label": layout.label, "sizes": layout.describe(),
                           "guard": run.guard, "oracle_guard": oracle.guard, "buffers": [], "tail": tail}
            tols = {a.name: self._tolerance(prob, oracle, a) for a in layout.writable}
            if tail:
                changes = self._tail_changes(prob, omod, oref, variant, seed, oracle, timeout)
                report["tail_changes"] = {k: n for k, (n, _) in changes.items()}
                tols = {k: (*sensitivity_tolerance(tols[k][:2], changes[k][1]), *tols[k][2:]) for k in tols}
            if det is not None and not tail and (variant, seed) == (det[0], int(det[1])) and determinism is None:
                again = self._run(prob, smod, _launch_of(sref["launch"][variant]), variant, seed, timeout,
                                  original=itself)
                determinism = [self._compare(a, again.bufs[a.name].ptr, run.bufs[a.name].ptr,
                                             self._tolerance(prob, oracle, a), timeout)
                               for a in layout.writable]
                report["guard"] = run.guard + [g for g in again.guard if g not in run.guard]
                self._retire(again.own())
                if not all(b.ok for b in determinism):
                    self._retire(run.own())
                    reports.append(report)
                    break
            report["buffers"] = [self._compare(a, run.bufs[a.name].ptr, oracle.bufs[a.name].ptr, tols[a.name], timeout)
                                 for a in layout.writable]
            if msg.get("count_unwritten"):
                report["unwritten"] = self._count_unwritten(layout, oracle, timeout)
            self._retire(run.own())
            reports.append(report)
            failed = bool(report["guard"]) or not all(b.ok for b in report["buffers"])
            if failed and msg.get("stop_on_failure", True):
                break
        # ``in`` buffers the original writes (found on this worker, in this request or before): the evaluator
        # tells the user once that the spec should call them ``inout``
        return {"status": "ok", "runs": reports, "determinism": determinism, "attrs": smod.attrs,
                "oracle_attrs": omod.attrs, "original_writes": sorted(prob.written_by_original)}

    def _tail_changes(self, prob: _Problem, omod: _Module, oref: Msg, variant: str, seed: int, perturbed: _Oracle,
                      timeout: float) -> dict[str, tuple[int, float]]:
        """Per output: how many elements the tail perturbation changed in the original's results, and the
        largest change.

        Evidence for the sensitivity check: where the count is 0 the original does not depend on the perturbed
        elements (nothing to check there); elsewhere the candidate had to follow the change, and the largest
        change sets how closely (``sensitivity_tolerance``).
        """
        plain = self._oracle(prob, omod, _launch_of(oref["launch"][variant]), variant, seed, timeout)
        out: dict[str, tuple[int, float]] = {}
        for a in prob.layouts[variant].writable:
            # the count of changed elements at the spec's own (rtol, atol): the ``norm`` floor is for the
            # rounding of a reordered sum, not for whether the original depends on the perturbed elements
            rtol, atol, _ = prob.tolerances.get(a.name, (0.0, 0.0, 0.0))
            rep = self._compare(a, perturbed.bufs[a.name].ptr, plain.bufs[a.name].ptr, (rtol, atol, 0.0, 0.0),
                                timeout)
            out[a.name] = (rep.mismatches, rep.max_abs)
        return out

    def _count_unwritten(self, layout: Layout, oracle: _Oracle, timeout: float) -> dict[str, int]:
        """Elements of each output the oracle left holding the poison (a spec length larger than the kernel's)."""
        out: dict[str, int] = {}
        for a in layout.writable:
            if a.role != "out":
                continue
            ref = self._alloc(a.nbytes, guarded=False)
            try:
                self._poison(ref, a.dtype)
                rep = self._compare(a, oracle.bufs[a.name].ptr, ref.ptr, (0.0, 0.0, 0.0, 0.0), timeout)
            finally:
                self._retire([ref])
            out[a.name] = int(a.count or 0) - rep.mismatches
        return out

    def _flush_buffer(self) -> _Buf:
        if self.flush is None:
            size = max(2 * int(self.info["l2_bytes"] or 0), 64 << 20)
            self.flush = self._alloc(size, guarded=False)
            self.flush.owned = True
        return self.flush

    def _flush_l2(self, flush: _Buf, counter: list[int]) -> None:
        """Evict L2 by overwriting a buffer of twice its size (a memset, as Triton's ``do_bench`` and nvbench do).

        Why writing, not reading: a written flush leaves L2 full of dirty lines that the timed kernel pays to
        write back (a few µs), as it would after the kernel before it in a real program; a read flush leaves
        clean lines and made microsecond variants look up to ~10 % faster than the harnesses users compare
        against (H200, benchmarks/RESULTS.md "Cold timing"). The value changes every flush so no pass of the
        memory system can skip it."""
        counter[0] += 1
        self.cuda.memset_d32_async(flush.ptr, counter[0] & 0xFFFF, flush.nbytes // 4, self.stream)

    def op_time(self, msg: Msg) -> Msg:
        """Interleaved timing of one or more modules on the same inputs (see the module docstring).

        Buffer placement can change a kernel's speed (an atomics-bound kernel whose few hot words land in one
        L2 slice or two can differ 2x), so the sides share ``TIMING_SETS`` buffer sets and every repetition
        moves all sides to the next set: no side keeps a lucky or unlucky placement for itself.
        """
        cuda = self.cuda
        prob = self._problem(msg["problem"])
        variant, seed = str(msg["variant"]), int(msg["seed"])
        settings = TimingSettings(**msg.get("settings", {}))
        timeout = float(msg.get("kernel_timeout", 10.0))
        refs = list(msg["sides"])
        mods = [self._module(r) for r in refs]
        launches = [_launch_of(r["launch"][variant]) for r in refs]
        for m, la in zip(mods, launches, strict=True):
            self._precheck(m, la)
        layout = prob.layouts[variant]
        pristine = self._pristine(prob, variant, seed)
        sets = [self._fresh(layout, pristine, guarded=False) for _ in range(TIMING_SETS)]
        ptrs = [{k: b.ptr for k, b in bufs.items()} for bufs in sets]
        flush = self._flush_buffer() if settings.flush_l2 else None
        counter = [0]

        def prep(si: int, flush_l2: bool = True) -> None:
            for a in layout.buffers:
                b = sets[si][a.name]
                # restored before every repetition: what the kernel writes, and an input the original writes
                # (a scratch buffer the spec calls "in": read before written, it would drift between repetitions)
                if (a.role == "inout" or a.name in prob.written_by_original) and a.nbytes:
                    cuda.memcpy_dtod_async(b.ptr, pristine[a.name].ptr, a.nbytes, self.stream)
                elif a.role == "out":
                    self._poison(b, a.dtype)
            if flush is not None and flush_l2:
                self._flush_l2(flush, counter)

        # each (side, set)'s launch with its arguments bound once: a timed launch is submitted in a few µs of
        # CPU, well inside the flush the GPU is still running (see the stream loop below)
        bound = [[self._launcher(mods[i], launches[i], layout, ptrs[si]) for si in range(TIMING_SETS)]
                 for i in range(len(refs))]

        def launch(i: int, si: int) -> None:
            bound[i][si]()

        # Warm-up by state: from idle, clocks need time to ramp up (warm up by time); right after other work at
        # full clock (the check runs that precede timing, the previous candidate), one repetition loads what
        # the timing sets need, and more would only spend the GPU (a cold first sample of the other set moves
        # the median of ten by nothing).
        warm, min_reps = self._warmup_plan(settings)
        t0 = time.monotonic()
        reps = 0
        # events around each side's warm-up launch (after its preparation), read once the repetition is done
        marks = [(cuda.Event(), cuda.Event()) for _ in refs]
        lone_ms = [0.0] * len(refs)
        while True:
            for i in range(len(refs)):
                prep(reps % TIMING_SETS)
                marks[i][0].record(self.stream)
                launch(i, reps % TIMING_SETS)
                marks[i][1].record(self.stream)
            reps += 1
            self._sync(timeout * len(refs))
            lone_ms = [float(e.time_since(s)) for s, e in marks]
            if time.monotonic() - t0 >= warm and reps >= min_reps:
                break
        warmed = time.monotonic() - t0
        # What a launch of each side costs: from the events around its last warm-up launch where that is a long
        # launch (no CUDA graph needed, and five more launches of a 90 ms kernel would cost half a second), else
        # measured back to back (a lone event-timed launch of microseconds is not its time). Per side and on the
        # device's clock, not the warm-up's wall time per launch: that also holds the host's work (resets, the
        # L2 flush: a 64 MB memset on the CPU stand-in, ~20 ms) and is one mean of both sides, so a 25 ms
        # original beside a 72 ms candidate read as two 11-18 ms kernels, and the candidate, timed as a short
        # one, was given up on only after 10 repetitions, not 2 (``LONG_KERNEL_ABANDON_REPS``).
        graph_info: Msg | None = None
        cold: list[list[_ColdGraph]] = []
        short = [i for i, ms in enumerate(lone_ms) if ms < LONG_LAUNCH_S * 1e3]
        measured = self._per_launch_ms(short, prep, launch, timeout)
        estimates = [measured.get(i, ms) for i, ms in enumerate(lone_ms)]
        # Cold launches are timed on the stream, events around each, as users' own harnesses do: the L2 flush
        # just before each launch keeps the GPU busy while the CPU submits the start event and the launch, so
        # no CPU gap falls inside the events. A graph of cold launches only where asked (``graph``), or where
        # nothing is flushed and a microsecond launch would wait for the CPU (``use_graphs``).
        graphed = use_graphs(settings, estimates)
        hot_only = bool(msg.get("hot_only"))  # a winner's back-to-back figure, its cold timing made earlier
        if (settings.graph or (graphed and flush is None)) and not hot_only:
            k = cold_launches_per_replay(settings, estimates, self._prep_ms(prep, timeout))
            try:
                cold = self._cold_graphs_for(len(refs), k, prep, launch)
                graph_info = {"cold_launches_per_replay": k, "per_launch_ms": estimates,
                              "auto": not settings.graph, "below_ms": settings.graph_below_ms}
            except (OSError, RuntimeError) as err:
                # no driver library, or a driver that cannot capture event records: events around each launch
                # (cold as well), and the report says so
                if settings.graph and isinstance(err, OSError):
                    raise
                graph_info = {"unavailable": str(err), "per_launch_ms": estimates}
        # Long kernels: fewer repetitions per batch (a batch of 8 of a 90 ms kernel is 0.7 s between checks of
        # the stopping rule) and fewer before the rule may stop (their run-to-run spread is tiny).
        slowest = max(estimates) / 1e3
        batch = max(1, min(settings.batch, math.ceil(BATCH_TARGET_S / max(slowest * len(refs), 1e-6))))
        # ... and may be given up on sooner: two repetitions of a 20 ms kernel already bound its speed tightly, and
        # the bound used (each side's whole range below six samples, ``timing.speedup``) assumes nothing
        abandon_after = settings.min_reps
        if slowest >= LONG_KERNEL_S:
            settings = replace(settings, min_reps=min(settings.min_reps, LONG_KERNEL_MIN_REPS))
            abandon_after = LONG_KERNEL_ABANDON_REPS
        abandon = msg.get("abandon_below")
        abandoned: Msg | None = None
        samples: list[list[float]] = [[] for _ in refs]
        start = time.monotonic()
        rep = 0
        handle = int(self.stream.handle)

        def stop() -> bool:
            nonlocal abandoned
            # Given up on before "converged" is asked: a candidate clearly slower than the best verified so far
            # cannot win, so its exact time is not worth the GPU, and saying so (``abandoned``) is what lets a
            # two-step check skip its remaining runs; a timing that converges in the same repetition (fast,
            # steady samples) must not hide that. Stopped with its interval (wider), which the report keeps.
            if abandon is not None and len(refs) == 2 and len(samples[1]) >= abandon_after:
                sp = speedup(samples[0], samples[1])
                if sp.high < float(abandon):
                    abandoned = {"below": float(abandon), "high": sp.high, "samples": len(samples[1])}
                    return True
            return converged(samples, settings, time.monotonic() - start)

        try:
            if hot_only:
                pass
            elif cold:
                # Every launch alone and cold, inside the graph: one replay per side per repetition, and its
                # events read before the graph runs again (they are the graph's own).
                assert self.graphs is not None
                while True:
                    si = rep % TIMING_SETS
                    for i in interleave(rep, len(refs)):
                        self.graphs.launch(cold[i][si].exe, handle)
                    rep += 1
                    self._sync(timeout * len(refs) * len(cold[0][si].events))
                    for i in range(len(refs)):
                        samples[i].extend(self.graphs.elapsed_ms(e0, e1) for e0, e1 in cold[i][si].events)
                    if stop():
                        break
            else:
                # One cold launch at a time, waited for before the next one's reset and flush are submitted, as
                # the per-launch harnesses users compare against do (nvbench's cold mode, ``gpu.independent``).
                # Queueing a batch of them instead (reset, flush, event, launch, event, reset, ...) added ~0.5 µs
                # to every launch and made the times of microsecond kernels bimodal: a 16.6 µs variant measured
                # 17.4 µs, an identical pair of 4.7 µs kernels 0.96x-1.06x (H200, benchmarks/RESULTS.md "Cold
                # timing"). No CPU gap falls inside the events: the flush, submitted last before them, keeps the
                # GPU busy while the CPU submits the start event and the launch (its arguments bound above).
                events = [(cuda.Event(), cuda.Event()) for _ in refs]
                while True:
                    for _ in range(batch):
                        si = rep % TIMING_SETS
                        for i in interleave(rep, len(refs)):
                            prep(si)
                            s, e = events[i]
                            s.record(self.stream)
                            launch(i, si)
                            e.record(self.stream)
                            self._wait(e, timeout)
                            samples[i].append(float(e.time_since(s)))
                        rep += 1
                    if stop():
                        break
        finally:
            self._destroy_cold(cold)
        hot: Msg | None = None
        if (msg.get("hot") or hot_only) and abandoned is None:
            hot = self._time_hot(len(refs), settings, estimates, graphed, prep, launch, timeout)
        # One more call per side (``recheck_sides``: by default all) on the buffers the timed launches used,
        # checked against the oracle: a kernel that behaves differently when called again on the same buffers
        # (cached results) shows here.
        outputs: list[list[cmp.BufferReport]] = []
        if msg.get("oracle") is not None and not (abandoned and msg.get("recheck_unless_abandoned")):
            oref = msg["oracle"]
            omod = self._module(oref)
            oracle = self._oracle(prob, omod, _launch_of(oref["launch"][variant]), variant, seed, timeout)
            si = (rep - 1) % TIMING_SETS
            for i in msg.get("recheck_sides") or range(len(refs)):
                prep(si)
                launch(i, si)
                self._sync(timeout)
                outputs.append([self._compare(a, sets[si][a.name].ptr, oracle.bufs[a.name].ptr,
                                              self._tolerance(prob, oracle, a), timeout)
                                for a in layout.writable])
        for bufs in sets:
            self._retire(list(bufs.values()))
        clock = self.nvml.sm_clock_mhz() if self.nvml else None
        return {"status": "ok", "samples": samples, "outputs": outputs, "graph": graph_info, "hot": hot,
                "sm_clock_mhz": clock, "elapsed": time.monotonic() - start, "warmup_seconds": warmed,
                "abandoned": abandoned}

    def _warmup_plan(self, settings: TimingSettings) -> tuple[float, int]:
        """(seconds to warm up for at least, repetitions at least): see ``op_time``."""
        idle = time.monotonic() - self.last_busy
        clock = self.nvml.sm_clock_mhz() if self.nvml is not None else None
        top = int(self.info.get("clock_mhz") or 0)
        at_speed = clock is None or top <= 0 or clock >= WARM_CLOCK_FRACTION * top
        if idle <= settings.idle_rewarm_seconds and at_speed:
            return 0.0, 1
        return settings.warmup_seconds, 2 * TIMING_SETS

    def _per_launch_ms(self, sides: list[int], prep: Callable[[int], None], launch: Callable[[int, int], None],
                       timeout: float) -> dict[int, float]:
        """These sides' time per launch (ms) from a few back-to-back launches: decides graph mode and its size.

        Back-to-back launches keep the queue full, so this is close to the kernel's own time even for a
        microsecond kernel (a single event-timed launch is not).
        """
        cuda = self.cuda
        out: dict[int, float] = {}
        for i in sides:
            prep(0)
            s, e = cuda.Event(), cuda.Event()
            s.record(self.stream)
            for _ in range(5):
                launch(i, 0)
            e.record(self.stream)
            self._sync(timeout * 5)
            out[i] = max(float(e.time_since(s)) / 5, 1e-4)
        return out

    def _prep_ms(self, prep: Callable[..., None], timeout: float) -> float:
        """What one launch's preparation (outputs reset, inputs restored, L2 flushed) takes on the GPU (ms)."""
        cuda = self.cuda
        s, e = cuda.Event(), cuda.Event()
        s.record(self.stream)
        for _ in range(3):
            prep(0)
        e.record(self.stream)
        self._sync(timeout)
        return max(float(e.time_since(s)) / 3, 0.0)

    def _graphs_for(self, sides: int, k: int, launch: Callable[[int, int], None]) -> list[list[tuple[Any, Any]]]:
        """Capture ``k`` back-to-back launches per side and buffer set (the same ``k`` for every side): the hot
        figure's graphs."""
        if self.graphs is None:
            self.graphs = _Graphs()
        handle = int(self.stream.handle)
        execs: list[list[tuple[Any, Any]]] = []
        for i in range(sides):
            per_set: list[tuple[Any, Any]] = []
            for si in range(TIMING_SETS):

                def body(i: int = i, si: int = si) -> None:
                    for _ in range(k):
                        launch(i, si)

                per_set.append(self.graphs.capture(handle, body))
            execs.append(per_set)
        return execs

    def _cold_graphs_for(self, sides: int, k: int, prep: Callable[..., None],
                         launch: Callable[[int, int], None]) -> list[list[_ColdGraph]]:
        """Capture, per side and buffer set, ``k`` cold launches: each one's reset, inputs restored and L2 flush,
        then an event-record node, the launch, an event-record node. The GPU runs a replay without the CPU in
        between, and each launch is timed alone, cold, like a lone launch after a flush."""
        if self.graphs is None:
            self.graphs = _Graphs()
        graphs = self.graphs
        handle = int(self.stream.handle)
        out: list[list[_ColdGraph]] = []
        try:
            for i in range(sides):
                per_set: list[_ColdGraph] = []
                out.append(per_set)
                for si in range(TIMING_SETS):
                    events = [(graphs.event(), graphs.event()) for _ in range(k)]
                    cg = _ColdGraph(None, None, events)
                    per_set.append(cg)

                    def body(i: int = i, si: int = si, events: list[tuple[Any, Any]] = events) -> None:
                        for e0, e1 in events:
                            prep(si)
                            graphs.record(e0, handle)
                            launch(i, si)
                            graphs.record(e1, handle)

                    cg.graph, cg.exe = graphs.capture(handle, body)
        except BaseException:
            self._destroy_cold(out)
            raise
        return out

    def _destroy_cold(self, cold: list[list[_ColdGraph]]) -> None:
        if self.graphs is None:
            return
        for per_set in cold:
            for cg in per_set:
                if cg.exe is not None:
                    self.graphs.destroy(cg.graph, cg.exe)
                for e0, e1 in cg.events:
                    self.graphs.destroy_event(e0)
                    self.graphs.destroy_event(e1)

    def _time_hot(self, sides: int, settings: TimingSettings, estimates: list[float], graphed: bool,
                  prep: Callable[..., None], launch: Callable[[int, int], None], timeout: float) -> Msg:
        """The back-to-back ("hot") figure: each sample is ``k`` launches in a row with no flush anywhere (outputs
        reset before each group), as a CUDA graph where the cold timing used one, else as direct launches.
        Interleaved ABBA like the cold timing, within half its time budget."""
        cuda = self.cuda
        k = max(2, launches_per_replay(settings, estimates))
        execs: list[list[tuple[Any, Any]]] = []
        if graphed:
            with contextlib.suppress(OSError, RuntimeError):  # else direct launches, as for a long kernel
                execs = self._graphs_for(sides, k, launch)
        hs = replace(settings, max_seconds=max(0.2, settings.max_seconds / 2),
                     min_reps=min(settings.min_reps, LONG_KERNEL_MIN_REPS) if max(estimates) * k >= 1e3 * LONG_KERNEL_S
                     else settings.min_reps)
        batch = max(1, min(settings.batch, math.ceil(BATCH_TARGET_S / max(max(estimates) * k * sides / 1e3, 1e-6))))
        events = [[(cuda.Event(), cuda.Event()) for _ in range(batch)] for _ in range(sides)]
        samples: list[list[float]] = [[] for _ in range(sides)]
        handle = int(self.stream.handle)
        start = time.monotonic()
        rep = 0
        try:
            while True:
                for b in range(batch):
                    si = rep % TIMING_SETS
                    for i in interleave(rep, sides):
                        prep(si, flush_l2=False)
                        s, e = events[i][b]
                        s.record(self.stream)
                        if execs:
                            assert self.graphs is not None
                            self.graphs.launch(execs[i][si][1], handle)
                        else:
                            for _ in range(k):
                                launch(i, si)
                        e.record(self.stream)
                    rep += 1
                self._sync(timeout * batch * sides * k)
                for i in range(sides):
                    samples[i].extend(float(e.time_since(s)) / k for s, e in events[i])
                if converged(samples, hs, time.monotonic() - start):
                    break
        finally:
            if self.graphs is not None:
                for per_set in execs:
                    for g, x in per_set:
                        self.graphs.destroy(g, x)
        return {"samples": samples, "launches_per_sample": k, "graph": bool(execs),
                "elapsed": time.monotonic() - start}

    def op_energy(self, msg: Msg) -> Msg:
        """Joules per launch over >= ``seconds`` of back-to-back launches (see ``energy``)."""
        if self.nvml is None:
            return {"status": "unavailable", "reason": "NVML (nvidia-ml-py) is not available"}
        prob = self._problem(msg["problem"])
        ref = msg["subject"]
        mod = self._module(ref)
        variant, seed = str(msg["variant"]), int(msg["seed"])
        la = _launch_of(ref["launch"][variant])
        self._precheck(mod, la)
        timeout = float(msg.get("kernel_timeout", 10.0))
        layout = prob.layouts[variant]
        bufs = self._fresh(layout, self._pristine(prob, variant, seed), guarded=False)
        ptrs = {k: b.ptr for k, b in bufs.items()}
        cuda = self.cuda
        s, e = cuda.Event(), cuda.Event()
        s.record(self.stream)
        for _ in range(3):
            self._launch(mod, la, layout, ptrs)
        e.record(self.stream)
        self._sync(timeout * 3)
        est = max(float(e.time_since(s)) / 3, 1e-4)
        n = int(min(10000, max(1, math.ceil(5.0 / est))))

        def batch() -> int:
            for _ in range(n):
                self._launch(mod, la, layout, ptrs)
            self._sync(timeout * n)
            return n

        try:
            assert self.nvml is not None
            reading = measure_energy(self.nvml.energy_mj, batch, min_seconds=float(msg.get("seconds", 1.0)))
        except NvmlUnavailable as err:
            return {"status": "unavailable", "reason": str(err)}
        finally:
            self._retire(list(bufs.values()))
        return {"status": "ok", "reading": reading.to_json()}

    # ----------------------------------------------------------------- dispatch
    def _healthy(self) -> bool:
        try:
            self.ctx.synchronize()
            probe = self.cuda.mem_alloc(1024)
            self.cuda.memset_d8(int(probe), 0, 1024)
            self.ctx.synchronize()
            probe.free()
            return True
        except self.cuda.Error:
            return False

    def dispatch(self, msg: Msg) -> tuple[Msg, bool]:
        """Serve one request. Returns (reply, fatal): fatal means the context is unusable and the worker exits."""
        op = str(msg.get("op"))
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"status": "error", "reason": f"unknown op `{op}`"}, False
        self.during = None
        try:
            reply: Msg = handler(msg)
            self._retire(self.dropped)
            self.dropped.clear()
            return reply, False
        except KernelTimeout as e:
            return {"status": "timeout", "reason": str(e), "during": self.during}, True
        except Rejected as e:
            self._cleanup()
            return {"status": "rejected", "reason": str(e)}, False
        except self.cuda.Error as e:
            healthy = self._healthy()
            if healthy:
                self._cleanup()
            kind = "" if healthy else " (a sticky error: the CUDA context is lost and the worker restarts)"
            return {"status": "crashed", "reason": f"{_cuda_error_text(e)}{kind}", "sticky": not healthy,
                    "during": self.during}, not healthy
        except Exception as e:
            try:
                healthy = self._healthy()
            except Exception:
                healthy = False
            if healthy:
                self._cleanup()
            return {"status": "error", "reason": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}, \
                not healthy

    def _cleanup(self) -> None:
        """Release buffers a failed request left behind, and inputs a run used in place but never checked."""
        for prob, key in self.unchecked:
            self._drop_pristine(prob, key)
        self.unchecked.clear()
        self._retire(self.dropped)
        self.dropped.clear()
        self._retire([b for b in list(self.live) if not b.owned])
        self._free_retired()

    def close(self) -> None:
        try:
            self.ctx.synchronize()
            self.modules.clear()
            self.ctx.pop()
            self.ctx.detach()
        except Exception:
            pass
        if self.nvml is not None:
            self.nvml.close()


def _cuda_error_text(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:400]


def _start_error(e: BaseException) -> str:
    if isinstance(e, ImportError):
        if "pycuda" in str(e) and "libcuda" not in str(e):
            from .supervisor import install_hint  # the worker runs in the server's environment
            return f"pycuda is not installed ({install_hint()})"
        return f"no CUDA driver ({e})"
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _size_class(nbytes: int) -> int:
    """Allocation size for ``nbytes``: the next power of two below ``POOL_GRAIN``, else a multiple of it."""
    if nbytes >= POOL_GRAIN:
        return -(-nbytes // POOL_GRAIN) * POOL_GRAIN
    return 1 << max(8, (nbytes - 1).bit_length())


# --------------------------------------------------------------------------- entry points
def _preemptions() -> int:
    """Involuntary context switches of this process so far (the CPU was taken away while it could run)."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)
    except (ImportError, OSError):
        return 0


def serve(fd: int, device: int) -> int:
    """Serve requests on the connection ``fd`` until it closes or a fatal error."""
    conn = Connection(fd)
    try:
        engine = Engine(device)
    except BaseException as e:
        conn.send({"status": "error", "reason": _start_error(e)})
        return 2
    conn.send({"status": "ready", "info": engine.info})
    # Diagnostics: WARPFORGE_WORKER_PROFILE=DIR profiles request handling (cProfile, wall time) and writes
    # DIR/worker-<device>-<pid>.prof when the worker is asked to exit.
    prof_dir = os.environ.get("WARPFORGE_WORKER_PROFILE")
    profiler = None
    if prof_dir:
        import cProfile

        profiler = cProfile.Profile()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            engine.close()
            return 0
        if msg.get("op") == "exit":
            engine.close()
            if profiler is not None and prof_dir:
                with contextlib.suppress(OSError):
                    profiler.dump_stats(os.path.join(prof_dir, f"worker-{device}-{os.getpid()}.prof"))
            conn.send({"status": "ok"})
            return 0
        t0, c0, sw0 = time.monotonic(), time.process_time(), _preemptions()
        if profiler is not None:
            profiler.enable()
        reply, fatal = engine.dispatch(msg)
        if profiler is not None:
            profiler.disable()
        # What serving this request cost the worker: wall time, CPU time (its Python launch loops and the
        # driver's threads) and how often the kernel took the CPU away from it. The parent subtracts these
        # from the time it held the device to tell device work from its own overhead and from contention.
        reply["cost"] = {"wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0,
                         "preempted": _preemptions() - sw0}
        if fatal:
            reply = {**reply, "fatal": True}
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return 1
        if fatal:
            conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)


def _sm_count(cuda: Any, ctx: Any) -> int:
    """The current context's multiprocessor count (sizes the input generator's grid)."""
    try:
        return int(ctx.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))
    except Exception:
        return 1


def oneshot(path: str) -> int:
    """Run the kernel described by a pickled job once (or ``repeat`` times) in a fresh context and exit.

    Buffers are allocated at their exact sizes (no guards), so compute-sanitizer's memcheck sees the real
    bounds. Job keys: cubin, symbol, layout, seed, launch, repeat, device.
    """
    with open(path, "rb") as f:
        job: Msg = pickle.load(f)
    import pycuda.driver as cuda

    cuda.init()
    ctx = cuda.Device(int(job.get("device", 0))).make_context()
    try:
        fn = cuda.module_from_buffer(job["cubin"]).get_function(job["symbol"])
        layout: Layout = job["layout"]
        grid, block, smem = _launch_of(job["launch"])
        if smem > DEFAULT_SMEM:
            fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        allocs = {a.name: cuda.mem_alloc(max(1, a.nbytes)) for a in layout.buffers}
        gen, _ = device_inputs.load(cuda, job.get("generator"), _sm_count(cuda, ctx))
        device_inputs.fill_buffers(cuda, layout, int(job.get("seed", 0)), allocs, gen)
        fn.prepare("".join(np.dtype(np.uintp).char if a.is_buffer else scalar_format(a.dtype) for a in layout.args))
        args = [int(allocs[a.name]) if a.is_buffer else scalar_value(a) for a in layout.args]
        for _ in range(int(job.get("repeat", 1))):
            fn.prepared_call(grid, block, *args, shared_size=smem)
        ctx.synchronize()
        return 0
    except cuda.Error as e:
        print(f"warpforge oneshot: CUDA error: {_cuda_error_text(e)}", file=sys.stderr)
        return 3
    finally:
        with contextlib.suppress(Exception):
            ctx.pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m warpforge.gpu.worker")
    p.add_argument("--fd", type=int, help="serve requests on this inherited socket")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--oneshot", metavar="JOB", help="run one pickled job and exit")
    args = p.parse_args(argv)
    if args.oneshot:
        return oneshot(args.oneshot)
    if args.fd is None:
        p.error("--fd or --oneshot is required")
    return serve(args.fd, args.device)


if __name__ == "__main__":
    raise SystemExit(main())
