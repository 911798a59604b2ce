"""A CPU stand-in for ``pycuda.driver``, so the GPU worker's plumbing runs in CPU tests (and CI).

It implements the subset of pycuda the worker uses, with pycuda's signatures: device memory is host memory
at fake addresses (an access outside every allocation is a sticky "illegal address" error, as on a GPU),
every operation completes at once and advances a simulated clock that events read, and kernels are
Python functions chosen by the cubin's entry symbol. Tags compiled into a cubin as ``__device__``
variables (``wf_fake_hang``, ``wf_fake_crash``, ``wf_fake_skip_repeat``, ``wf_fake_oob``, ``wf_fake_nan``,
``wf_fake_fast``/``wf_fake_slow``: 10x faster/slower, ``wf_fake_write_input``: adds 1 to ``x[0]`` after
computing ``y``, i.e. writes its read-only input and is otherwise correct; ``wf_fake_write_scratch``: writes
``x[n]``, an element past the ones it reads, as an original with a scratch buffer the spec calls ``in`` does)
select misbehaviours, so a test can plant faults in a real nvcc-built candidate. Launch arguments are
packed with ``struct`` from the prepared format, exactly as pycuda packs them, so a wrong format or
argument type fails here as it would there.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
import time
from typing import Any

import numpy as np


class Error(Exception):
    pass


class LogicError(Error):
    pass


class LaunchError(Error):
    pass


class MemoryError(Error):
    pass


class _State:
    def __init__(self) -> None:
        self.bases: list[int] = []
        self.allocs: dict[int, np.ndarray] = {}
        self.next = 0x7F0000000000
        self.clock_ms = 0.0
        self.sticky: str | None = None
        self.hung = False
        self.last_ptrs: dict[str, tuple[int, ...]] = {}
        self.rng = np.random.default_rng(0)
        self.scale = 1.0  # how much slower this fake device is (see ``_device_scale``)


_S = _State()
TOTAL = 1 << 30


def _check() -> None:
    if _S.sticky:
        raise LaunchError(_S.sticky)


def _tick(nbytes: int, rate: float = 2.5e12, fixed_us: float = 1.0) -> None:
    jitter = 1.0 + float(_S.rng.normal(0, 0.001))
    _S.clock_ms += (nbytes / rate * 1e3 + fixed_us * 1e-3) * jitter * _S.scale


def _device_scale(index: int) -> float:
    """``WF_FAKE_DEVICE_SLOWDOWN="1=2.0"``: physical device 1 runs everything 2x slower.

    For the scale-out tests: with devices of different speeds, a speedup is right only if the original
    is timed on the same device as the candidate. The physical id honours ``CUDA_VISIBLE_DEVICES`` (a Ray
    actor's worker is device 0 of the GPU Ray gave it).
    """
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    physical = visible[index] if index < len(visible) else str(index)
    for item in os.environ.get("WF_FAKE_DEVICE_SLOWDOWN", "").split(","):
        dev, _, factor = item.partition("=")
        if dev.strip() == physical and factor:
            return float(factor)
    return 1.0


def _find(addr: int, nbytes: int) -> tuple[np.ndarray, int]:
    i = bisect.bisect_right(_S.bases, addr) - 1
    if i >= 0:
        base = _S.bases[i]
        arr = _S.allocs[base]
        if addr + nbytes <= base + arr.size:
            return arr, addr - base
    _S.sticky = "an illegal memory access was encountered"
    raise LaunchError(_S.sticky)


def _view(addr: int, count: int, dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    arr, off = _find(int(addr), count * dt.itemsize)
    return arr[off : off + count * dt.itemsize].view(dt)


# --------------------------------------------------------------------------- attributes
class _Names:
    def __getattr__(self, name: str) -> str:
        return name


device_attribute = _Names()
function_attribute = _Names()

_DEVICE_ATTRS = {
    "MULTIPROCESSOR_COUNT": 4, "L2_CACHE_SIZE": 1 << 20, "CLOCK_RATE": 1980000, "MEMORY_CLOCK_RATE": 2619000,
    "GLOBAL_MEMORY_BUS_WIDTH": 5120, "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448, "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024,
    "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64, "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535,
    "MAX_GRID_DIM_Z": 65535,
}


def init(flags: int = 0) -> None:
    pass


def get_driver_version() -> int:
    return 13000


class Context:
    @staticmethod
    def synchronize() -> None:
        _check()
        while _S.hung:
            time.sleep(0.1)

    def pop(self) -> None:
        pass

    def detach(self) -> None:
        pass


class Device:
    def __init__(self, index: int) -> None:
        self.index = index

    def name(self) -> str:
        return "Fake GPU"

    def compute_capability(self) -> tuple[int, int]:
        return (9, 0)

    def total_memory(self) -> int:
        return TOTAL

    def get_attribute(self, attr: str) -> int:
        return _DEVICE_ATTRS[attr]

    def pci_bus_id(self) -> str:
        return "0000:00:00.0"

    def make_context(self) -> Context:
        _S.scale = _device_scale(self.index)
        return Context()


class DeviceAllocation:
    def __init__(self, base: int) -> None:
        self.base = base

    def __int__(self) -> int:
        return self.base

    def __index__(self) -> int:
        return self.base

    def free(self) -> None:
        _check()
        if self.base in _S.allocs:
            del _S.allocs[self.base]
            _S.bases.remove(self.base)


def mem_alloc(nbytes: int) -> DeviceAllocation:
    _check()
    base = _S.next
    _S.next += ((int(nbytes) + (1 << 20) - 1) >> 20 << 20) + (1 << 20)  # a gap after every allocation
    _S.allocs[base] = np.zeros(int(nbytes), dtype=np.uint8)
    bisect.insort(_S.bases, base)
    return DeviceAllocation(base)


def mem_get_info() -> tuple[int, int]:
    return (64 << 20, TOTAL)


def _memset(dest: Any, value: int, count: int, width: int) -> None:
    _check()
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    _view(int(dest), int(count), dt)[:] = value
    _tick(count * width)


def memset_d8(dest: Any, value: int, count: int) -> None:
    _memset(dest, value, count, 1)


def memset_d16(dest: Any, value: int, count: int) -> None:
    _memset(dest, value, count, 2)


def memset_d32(dest: Any, value: int, count: int) -> None:
    _memset(dest, value, count, 4)


def memset_d8_async(dest: Any, value: int, count: int, stream: Any = None) -> None:
    _memset(dest, value, count, 1)


def memset_d16_async(dest: Any, value: int, count: int, stream: Any = None) -> None:
    _memset(dest, value, count, 2)


def memset_d32_async(dest: Any, value: int, count: int, stream: Any = None) -> None:
    _memset(dest, value, count, 4)


def memcpy_htod(dest: Any, src: np.ndarray) -> None:
    _check()
    raw = np.ascontiguousarray(src).view(np.uint8).reshape(-1)
    _view(int(dest), raw.size, np.uint8)[:] = raw


def memcpy_dtoh(dest: np.ndarray, src: Any) -> None:
    _check()
    raw = dest.view(np.uint8).reshape(-1)
    raw[:] = _view(int(src), raw.size, np.uint8)


def memcpy_dtod(dest: Any, src: Any, size: int) -> None:
    _check()
    _view(int(dest), int(size), np.uint8)[:] = _view(int(src), int(size), np.uint8)
    _tick(2 * int(size))


def memcpy_dtod_async(dest: Any, src: Any, size: int, stream: Any = None) -> None:
    memcpy_dtod(dest, src, size)


class Stream:
    handle = 1

    def synchronize(self) -> None:
        Context.synchronize()


class Event:
    def __init__(self, flags: int = 0) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        _check()
        self.t = _S.clock_ms

    def query(self) -> bool:
        _check()
        return not _S.hung

    def synchronize(self) -> None:
        Context.synchronize()

    def time_since(self, start: Event) -> float:
        return self.t - start.t


# --------------------------------------------------------------------------- kernels
def _saxpy(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    n, a, x, y = args
    covered = min(int(n), int(np.prod(grid)) * int(np.prod(block)))
    if "wf_fake_skip_repeat" in fn.tags:
        if _S.last_ptrs.get(fn.symbol) == (x, y):
            _tick(0)
            return
        _S.last_ptrs[fn.symbol] = (x, y)
    xv, yv = _view(x, covered, np.float32), _view(y, covered, np.float32)
    yv[:] = np.float32(a) * xv + yv
    if "wf_fake_nan" in fn.tags and covered:
        yv[::97] = np.nan
    if "wf_fake_oob" in fn.tags:
        _view(y + 4 * int(n), 1, np.float32)[0] = 0.0
    if "wf_fake_write_input" in fn.tags and covered:
        _view(x, 1, np.float32)[0] += np.float32(1.0)
    if "wf_fake_write_scratch" in fn.tags:
        _view(x + 4 * int(n), 1, np.float32)[0] = np.float32(1234.5)
    rate = 30e12 if "wf_fake_fast" in fn.tags else 0.3e12 if "wf_fake_slow" in fn.tags else 3.0e12
    _tick(12 * covered, rate)


def _gather_rows(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """``gather_rows(float* out, const float* ids, const float* table, int m, int c)``: ``out[r, :] =
    table[(int)ids[r], :]``, an embedding lookup with its ids stored as floats. A row outside the table reads
    outside its allocation: the sticky illegal-address error a GPU gives (``wf_fake_skip_last``: a candidate
    that ignores the last id and reads row 0 for it)."""
    out, ids, table, m, c = args
    m, c = int(m), int(c)
    rows = _view(ids, m, np.float32).astype(np.int64)
    if "wf_fake_skip_last" in fn.tags and m:
        rows[-1] = 0
    if m:
        lo, hi = int(rows.min()), int(rows.max())
        _find(int(table) + 4 * lo * c, 4 * c)  # the first and last rows read must be memory (else: sticky)
        _find(int(table) + 4 * hi * c, 4 * c)
        width = (hi + 1) * c
        tab = _view(table, width, np.float32).reshape(hi + 1, c) if lo >= 0 else None
        if tab is None:
            _S.sticky = "an illegal memory access was encountered"
            raise LaunchError(_S.sticky)
        _view(out, m * c, np.float32).reshape(m, c)[:] = tab[rows]
    _tick(8 * m * c)


def _compare(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    from warpforge.gpu import compare as cmp

    got, want, n, kind, rtol, atol, _poison, res = args
    size = int(fn.symbol.rsplit("_", 1)[1])
    if kind == 0:
        dtype = {2: "float16", 4: "float32", 8: "float64"}[size]
    elif kind == 1:
        dtype = "bfloat16"
    else:
        dtype = f"{'int' if kind == 2 else 'uint'}{size * 8}"
    store = {"bfloat16": "uint16"}.get(dtype, dtype)
    rep = cmp.compare("x", _view(got, int(n), store).copy(), _view(want, int(n), store).copy(), dtype, rtol, atol)
    out = _view(res, cmp.RESULT_WORDS, np.uint64)
    out[0], out[1], out[2] = rep.mismatches, rep.unwritten, rep.nan_mismatches
    out[6] = rep.original_unwritten
    if rep.first_index is not None:
        out[3] = rep.first_index
    out[4] = np.array([rep.max_abs]).view(np.uint64)[0]
    out[5] = np.array([rep.max_rel]).view(np.uint64)[0]
    _tick(2 * int(n) * size)


def _flush(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    buf, n16, _sink = args
    _view(buf, int(n16) * 16, np.uint8)  # must be a valid buffer
    _tick(int(n16) * 16)


def _generate(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """``wf_generate``: the host generator's values for elements [first, first + n) (what the device computes)."""
    from warpforge.gpu import generator as gen

    out, n, first, seed, stream, dtype_code, dist, a, b, lo, span, cmin, cmax = args
    dtype = {v: k for k, v in gen.DTYPE_CODES.items()}[dtype_code]
    store = np.dtype({"bfloat16": "uint16"}.get(dtype, dtype))
    d = gen.Draw(dtype_code, dist, a, b, lo, span, cmin, cmax)
    _view(out, int(n), store)[:] = gen.to_storage(gen.values(d, seed, stream, int(first), int(n)), dtype, store)
    _tick(int(n) * store.itemsize)


def _checksum(fn: Function, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """``wf_checksum``: adds the host checksum of the bytes to ``*out`` (what every block's atomicAdd sums to)."""
    from warpforge.gpu import compare as cmp

    ptr, nbytes, out = args
    data = _view(ptr, int(nbytes), np.uint8).copy() if nbytes else np.zeros(0, dtype=np.uint8)
    res = _view(out, 1, np.uint64)
    res[0] = np.uint64((int(res[0]) + cmp.checksum(data)) % (1 << 64))
    _tick(int(nbytes))


_KERNELS = {"saxpy": _saxpy, "gather_rows": _gather_rows,
            "wf_flush": _flush, "wf_generate": _generate, "wf_checksum": _checksum,
            "wf_compare_1": _compare, "wf_compare_2": _compare,
            "wf_compare_4": _compare, "wf_compare_8": _compare}


class Function:
    def __init__(self, symbol: str, tags: set[str]) -> None:
        self.symbol = symbol
        self.tags = tags
        self.arg_format = ""
        m = re.match(r"_Z\d+(\w+?)P", symbol)
        self.base = symbol if not symbol.startswith("_Z") else (m.group(1) if m else symbol)

    def get_attribute(self, attr: str) -> int:
        return {"NUM_REGS": 16, "SHARED_SIZE_BYTES": 0, "LOCAL_SIZE_BYTES": 0, "MAX_THREADS_PER_BLOCK": 1024}[attr]

    def set_attribute(self, attr: str, value: int) -> None:
        _check()

    def prepare(self, arg_types: str) -> Function:
        self.arg_format = arg_types
        return self

    def _launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], shared_size: int) -> None:
        _check()
        if not isinstance(block, tuple) or not isinstance(grid, tuple):
            raise TypeError("grid and block must be tuples")
        # pack and unpack as pycuda does, so a wrong argument type fails here too
        values = struct.unpack("@" + self.arg_format, struct.pack("@" + self.arg_format, *args))
        if "wf_fake_crash" in self.tags:
            _S.sticky = "an illegal memory access was encountered"
            return
        if "wf_fake_hang" in self.tags:
            _S.hung = True
            return
        impl = _KERNELS.get(self.base)
        if impl is None:
            raise LogicError(f"cuLaunchKernel failed: the fake driver has no kernel `{self.base}`")
        impl(self, grid, block, values)

    def prepared_async_call(self, grid: tuple[int, ...], block: tuple[int, ...], stream: Any, *args: Any,
                            shared_size: int = 0) -> None:
        self._launch(grid, block, args, shared_size)

    def prepared_call(self, grid: tuple[int, ...], block: tuple[int, ...], *args: Any, shared_size: int = 0) -> None:
        self._launch(grid, block, args, shared_size)


class Module:
    def __init__(self, cubin: bytes) -> None:
        self.tags = {t.decode() for t in re.findall(rb"wf_fake_\w+", cubin)}
        self.symbols = {s.decode() for s in re.findall(rb"[A-Za-z_][\w]{2,}", cubin)}

    def get_function(self, symbol: str) -> Function:
        if symbol not in self.symbols:
            raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({symbol})")
        return Function(symbol, self.tags)


def module_from_buffer(buffer: bytes, options: Any = None, message_handler: Any = None) -> Module:
    _check()
    return Module(bytes(buffer))
