"""Inputs made on the GPU: the device half of ``generator``, checked against the host half before use.

The worker and the one-launch harnesses that compute-sanitizer and Nsight Compute wrap (``oneshot``) fill
their input buffers here. The device kernel (``wf_generate``, in the comparison module every worker loads)
computes exactly the host's bits (``generator``); ``DeviceGenerator.selftest`` proves that on this GPU for
every element type and distribution before the first buffer is made, and a caller falls back to the host
when it does not hold. Host copies of inputs are then made only where something needs them.

Only numpy and a pycuda-like driver object are needed (CPU tests drive this with the fake driver).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import generator
from .inputs import TAIL, ArgLayout, InputError, Layout, draw, generate, perturb_last, poison_memset, storage_dtype

#: the kernel's prepared argument format after the output pointer (see ``generator.device_source``)
_ARGS = "QQIIiiddqQdd"
#: what the self-test draws: every element type with each distribution it can take
SELFTEST_CASES: tuple[tuple[str, tuple[str, float, float]], ...] = (
    ("float32", ("uniform", -1.0, 1.0)), ("float32", ("normal", 0.5, 2.0)), ("float32", ("int", -3.0, 7.0)),
    ("float16", ("normal", 0.0, 1.0)), ("bfloat16", ("uniform", 0.0, 1.0)), ("float64", ("normal", 1.0, 3.0)),
    ("float64", ("uniform", -1e3, 1e3)), ("int8", ("normal", 0.0, 40.0)), ("uint8", ("int", 0.0, 256.0)),
    ("int16", ("uniform", -500.0, 500.0)), ("int32", ("int", 0.0, 100.0)), ("int64", ("int", -5.0, 1e12)),
    ("uint32", ("int", 3.0, 4e9)), ("uint64", ("uniform", 0.0, 1e15)), ("int32", ("const", 7.0, 0.0)),
    ("float32", ("zeros", 0.0, 0.0)), ("uint16", ("normal", 100.0, 30.0)),
)
SELFTEST_N = 4099


class DeviceGenerator:
    """``wf_generate`` of a loaded module: fills one device buffer with one argument's data for one seed."""

    def __init__(self, cuda: Any, module: Any, sm_count: int, stream: Any = None) -> None:
        self.cuda = cuda
        self.fn = module.get_function("wf_generate")
        self.fn.prepare(np.dtype(np.uintp).char + _ARGS)
        self.sm_count = max(1, int(sm_count))
        self.stream = stream

    def fill(self, ptr: int, arg: ArgLayout, seed: int, count: int | None = None, first: int = 0) -> None:
        """Queue the generation of elements [first, first + count) of ``arg`` for ``seed`` at ``ptr``."""
        n = int(arg.count or 0) if count is None else int(count)
        if n == 0:
            return
        if arg.dist is not None and arg.dist[0] == "offsets":  # sorted on the host (``inputs.offsets``)
            host = generate(arg, seed)[first : first + n]
            if self.stream is not None:
                self.stream.synchronize()
            self.cuda.memcpy_htod(ptr, host)
            return
        d = draw(arg)
        grid = max(1, min((n + 255) // 256, self.sm_count * 32))
        args = (ptr, n, int(first), int(seed) & 0xFFFFFFFF, generator.stream_of(arg.name), d.dtype, d.dist,
                d.a, d.b, d.lo, d.span % (1 << 64), d.cmin, d.cmax)
        if self.stream is not None:
            self.fn.prepared_async_call((grid, 1, 1), (256, 1, 1), self.stream, *args)
        else:
            self.fn.prepared_call((grid, 1, 1), (256, 1, 1), *args)

    def selftest(self, alloc: Callable[[int], int], release: Callable[[int], None]) -> str | None:
        """None when the device draws the host's exact bits for every case (at an offset too), else why not."""
        cuda = self.cuda
        for dtype, dist in SELFTEST_CASES:
            arg = ArgLayout("selftest", "in", dtype, SELFTEST_N, dist=dist)
            store = storage_dtype(dtype)
            first = 1 << 33  # element indices past 2^32: the counter's high word is in use
            want = generator.to_storage(generator.values(draw(arg), 11, generator.stream_of(arg.name), first,
                                                         SELFTEST_N), dtype, store)
            ptr = alloc(SELFTEST_N * store.itemsize)
            try:
                self.fill(ptr, arg, 11, SELFTEST_N, first)
                got = np.empty(SELFTEST_N, dtype=store)
                if self.stream is not None:
                    self.stream.synchronize()
                cuda.memcpy_dtoh(got, ptr)
            finally:
                release(ptr)
            unsigned = np.dtype(f"u{store.itemsize}")
            bad = np.flatnonzero(got.view(unsigned) != want.view(unsigned))
            if bad.size:
                i = int(bad[0])
                return (f"{dtype} {dist[0]}: {bad.size} of {SELFTEST_N} elements differ from the host "
                        f"(element {first + i}: device {got[i]!r}, host {want[i]!r})")
        return None


def load(cuda: Any, cubin_or_module: Any, sm_count: int, stream: Any = None,
         alloc: Callable[[int], int] | None = None,
         release: Callable[[int], None] | None = None) -> tuple[DeviceGenerator | None, str]:
    """A checked generator, or None and why (the host draws the inputs then).

    ``cubin_or_module`` is the comparison module's cubin (bytes) or that module already loaded. The self-test
    needs scratch buffers: ``alloc``/``release`` make and drop them (the worker passes its pooled allocator);
    without them they come from ``cuda.mem_alloc`` and are freed at once (the one-launch harnesses).
    """
    if not cubin_or_module:
        return None, "no device module: inputs are generated on the host"
    live: dict[int, Any] = {}

    def own_alloc(nbytes: int) -> int:
        a = cuda.mem_alloc(max(1, nbytes))
        live[int(a)] = a
        return int(a)

    try:
        module = (cuda.module_from_buffer(bytes(cubin_or_module))
                  if isinstance(cubin_or_module, (bytes, bytearray)) else cubin_or_module)
        gen = DeviceGenerator(cuda, module, sm_count, stream)
        if alloc is None or release is None:
            problem = gen.selftest(own_alloc, lambda p: live.pop(p).free())
        else:
            problem = gen.selftest(alloc, release)
    except (cuda.Error, InputError) as e:
        return None, f"device input generator unavailable ({e}): inputs are generated on the host"
    if problem:
        return None, f"device input generator disabled, using the host: {problem}"
    return gen, "inputs generated on the GPU (checked against the host generator)"


def fill_buffers(cuda: Any, layout: Layout, seed: int, allocs: dict[str, Any], gen: DeviceGenerator | None) -> None:
    """Every buffer as it is right before a launch (``inputs.initial_buffers``), written straight to the
    device: inputs drawn there (or on the host without ``gen``), outputs poisoned by a memset."""
    for a in layout.buffers:
        if not a.nbytes:
            continue
        ptr = int(allocs[a.name])
        if a.role == "out":
            poison_memset(cuda, ptr, a.nbytes, a.dtype)
        elif gen is not None:
            gen.fill(ptr, a, seed)
        else:
            cuda.memcpy_htod(ptr, generate(a, seed))
    cuda.Context.synchronize()


def perturb_tail_on_device(cuda: Any, ptr: int, arg: ArgLayout) -> None:
    """Apply ``inputs.perturb_tail`` to a buffer already on the device: only its last elements travel."""
    n = int(arg.count or 0)
    k = min(n, TAIL)
    if k == 0:
        return
    store = storage_dtype(arg.dtype)
    last = np.empty(k, dtype=store)
    cuda.memcpy_dtoh(last, ptr + (n - k) * store.itemsize)
    cuda.memcpy_htod(ptr + (n - k) * store.itemsize, perturb_last(arg, last))

