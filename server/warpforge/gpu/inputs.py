"""Host buffers for a kernel run, from its resolved spec: random inputs per seed, and poison for outputs.

Why poison: a kernel must write every element it owns. Outputs are filled with a pattern before every run,
so an element the kernel skipped still holds the pattern afterwards and cannot pass for a result, however
plausible the stale data underneath would have looked. The pattern is the 16-bit word ``0x7FF8`` repeated:
read as float16, bfloat16, float32 or float64 it is a NaN in every case (all-ones exponent, non-zero
mantissa), and it is an unusual integer (``0x7FF87FF8`` as int32); one-byte types get ``0xF8``. One pattern
means one device memset poisons a buffer, and "unwritten" is simply "still bitwise equal to the poison",
which a NaN computed by the kernel (canonically ``0x7FC00000``/``0x7FFFFFFF``) is not.

Inputs are drawn per (seed, argument name), so adding an argument does not change the others' data, and a
seed always gives the same data on every machine, host or GPU (``generator``: counter-based Philox,
computed bit-identically by numpy here and by a CUDA kernel in the worker).

This module only needs numpy: the GPU worker imports it, and so do CPU-side tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import generator

#: the 16-bit poison word; see the module docstring
POISON_WORD16 = 0x7FF8
#: the same pattern as a 32-bit word (for memset_d32)
POISON_WORD32 = (POISON_WORD16 << 16) | POISON_WORD16
#: little-endian bytes of one poison word: even offsets hold 0xF8, odd offsets 0x7F
POISON_BYTES = bytes([POISON_WORD16 & 0xFF, POISON_WORD16 >> 8])

#: canonical dtype -> numpy storage dtype (bfloat16 has no numpy type: it is stored as its 16 raw bits)
_STORAGE: dict[str, str] = {
    "float32": "float32", "float16": "float16", "bfloat16": "uint16", "float64": "float64",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
}
FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64"})
#: the largest integer magnitude up to which every integer is exactly representable in each float type: an
#: ``int(lo, hi)`` domain stored in floats (indices kept as floats) must stay below it, or rounding could move a
#: drawn or reflected index out of its range
EXACT_INTEGERS = {"float16": 1 << 11, "bfloat16": 1 << 8, "float32": 1 << 24, "float64": 1 << 53}


class InputError(ValueError):
    """The spec asks for data that cannot be produced (e.g. an integer range outside the type)."""


def storage_dtype(dtype: str) -> np.dtype[Any]:
    """The numpy dtype that holds ``dtype``'s bits."""
    try:
        return np.dtype(_STORAGE[dtype])
    except KeyError as e:
        raise InputError(f"unsupported element type `{dtype}`") from e


def itemsize(dtype: str) -> int:
    return storage_dtype(dtype).itemsize


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class ArgLayout:
    """One kernel argument of one run, in plain numbers (what a worker needs, nothing else).

    ``role`` is "in", "out", "inout" or "scalar"; ``dist`` is (kind, a, b) as in the spec.
    """

    name: str
    role: str
    dtype: str
    count: int | None = None
    value: int | float | None = None
    dist: tuple[str, float, float] | None = None

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"

    @property
    def writable(self) -> bool:
        return self.role in ("out", "inout")

    @property
    def readable(self) -> bool:
        return self.role in ("in", "inout")

    @property
    def nbytes(self) -> int:
        return (self.count or 0) * itemsize(self.dtype) if self.is_buffer else 0


@dataclass(frozen=True)
class Layout:
    """All arguments of one run, in kernel parameter order, plus the sizes for reports."""

    label: str
    args: tuple[ArgLayout, ...]
    sizes: tuple[tuple[str, int | float], ...] = ()

    @property
    def buffers(self) -> tuple[ArgLayout, ...]:
        return tuple(a for a in self.args if a.is_buffer)

    @property
    def writable(self) -> tuple[ArgLayout, ...]:
        return tuple(a for a in self.args if a.writable)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.args)

    def describe(self) -> str:
        """``N=33554432`` style text for reports."""
        return ", ".join(f"{k}={v}" for k, v in self.sizes)

    @classmethod
    def from_resolved(cls, resolved: Any, label: str) -> Layout:
        """From a ``warpforge.spec.ResolvedSpec`` (duck-typed so workers need not import the spec package)."""
        args = []
        for a in resolved.args:
            role = a.role.value if hasattr(a.role, "value") else str(a.role)
            dist = None
            if a.distribution is not None:
                dist = (str(a.distribution.kind), float(a.distribution.a), float(a.distribution.b))
            args.append(ArgLayout(a.name, role, a.dtype, a.count, a.value, dist))
        sizes = tuple((str(k), v) for k, v in resolved.sizes.items())
        return cls(label, tuple(args), sizes)


# --------------------------------------------------------------------------- random inputs
def _bfloat16_bits(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """Round-to-nearest-even float32 -> bfloat16 bits."""
    return generator.bf16_bits(x)


def bfloat16_to_float32(bits: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def default_dist(dtype: str) -> tuple[str, float, float]:
    return ("uniform", -1.0, 1.0) if is_float(dtype) else ("int", 0.0, 100.0)


def draw(arg: ArgLayout) -> generator.Draw:
    """How ``arg``'s data is drawn (``generator.Draw``), after checking the spec asks for something possible."""
    kind, a, b = arg.dist or default_dist(arg.dtype)
    if kind not in generator.DIST_CODES:
        raise InputError(f"`{arg.name}`: unknown distribution `{kind}`")
    store = storage_dtype(arg.dtype)
    cmin = cmax = 0.0
    if not is_float(arg.dtype):
        info = np.iinfo(store)
        if kind == "int":
            lo, hi = int(np.ceil(a)), int(np.ceil(b))
            if lo < info.min or hi - 1 > info.max:
                raise InputError(f"`{arg.name}`: int({a:g}, {b:g}) does not fit in {arg.dtype} "
                                 f"[{info.min}, {info.max}]")
        limit = float(1 << 53)
        cmin, cmax = max(float(info.min), -limit), min(float(info.max), limit)
    if kind == "int" and int(np.ceil(b)) <= int(np.ceil(a)):
        raise InputError(f"`{arg.name}`: int({a:g}, {b:g}) is an empty range")
    if kind == "int" and is_float(arg.dtype):
        exact = EXACT_INTEGERS[arg.dtype]
        if max(abs(int(np.ceil(a))), abs(int(np.ceil(b)) - 1)) > exact:
            raise InputError(f"`{arg.name}`: int({a:g}, {b:g}) holds integers that {arg.dtype} cannot store "
                             f"exactly (beyond {exact}): rounded, some would leave the range; store the "
                             "indices in a wider type or narrow the range")
    return generator.draw_of(arg.dtype, (kind, a, b), cmin, cmax)


def generate(arg: ArgLayout, seed: int) -> npt.NDArray[Any]:
    """Fresh input data for one ``in``/``inout`` buffer (storage dtype, C order), computed on the host.

    The same bits as the GPU worker's device generator (``generator``): that one is checked against this.
    ``offsets`` buffers are made here only (``offsets``): the worker copies them to the device.
    """
    n = int(arg.count or 0)
    if arg.dist is not None and arg.dist[0] == "offsets":
        return offsets(arg, seed)
    return generator.host_generate(draw(arg), arg.dtype, storage_dtype(arg.dtype), int(seed) & 0xFFFFFFFF,
                                   generator.stream_of(arg.name), n)


def offsets(arg: ArgLayout, seed: int) -> npt.NDArray[Any]:
    """``offsets(LO, HI)``: a non-decreasing sequence from exactly LO to exactly HI, the other elements drawn
    uniformly from [LO, HI] and sorted: CSR row pointers (``rowptr[0] = 0``, ``rowptr[rows] = nnz``), segment
    offsets. Element i - 1 to i is the length of segment i - 1, so every index a kernel derives from two
    neighbours lies in [LO, HI), and the lengths vary as real sparse rows do (some empty, some long).

    Drawn with the counter-based generator (as ``int(LO, HI + 1)``), so a seed gives the same offsets
    everywhere; sorted on the host (the worker copies them to the device)."""
    _, a, b = arg.dist or ("offsets", 0.0, 0.0)
    store = storage_dtype(arg.dtype)
    if is_float(arg.dtype):
        raise InputError(f"`{arg.name}`: offsets are integers: declare it with an integer element type")
    lo, hi = int(np.ceil(a)), int(np.floor(b))
    info = np.iinfo(store)
    if hi < lo or lo < info.min or hi > info.max:
        raise InputError(f"`{arg.name}`: offsets({a:g}, {b:g}) is empty or does not fit in {arg.dtype} "
                         f"[{info.min}, {info.max}]")
    n = int(arg.count or 0)
    d = generator.draw_of("int64", ("int", float(lo), float(hi) + 1.0), -float(1 << 53), float(1 << 53))
    vals = np.sort(generator.values(d, int(seed) & 0xFFFFFFFF, generator.stream_of(arg.name), 0, n)
                   .view(np.int64))
    if n:
        vals[0] = lo
    if n > 1:
        vals[-1] = hi
    out: npt.NDArray[Any] = vals.astype(store)
    return out


def make_inputs(layout: Layout, seed: int) -> dict[str, npt.NDArray[Any]]:
    """Input data of every ``in``/``inout`` buffer for ``seed``."""
    return {a.name: generate(a, seed) for a in layout.buffers if a.readable}


# --------------------------------------------------------------------------- tail perturbation
#: how many elements at the end of each input buffer the sensitivity check changes
TAIL = 32
#: how far a perturbed floating-point element moves, in units of its distribution's scale
TAIL_SCALE = 1e4
#: the largest move for float16 elements (its largest finite value is 65504)
TAIL_MAX_FLOAT16 = 1024.0


def _scale(dist: tuple[str, float, float]) -> float:
    """A typical magnitude of values drawn from ``dist`` (at least 1)."""
    kind, a, b = dist
    if kind == "normal":
        return max(1.0, abs(a) + 3 * abs(b))
    return max(1.0, abs(a), abs(b))


def tail_exclusion(arg: ArgLayout) -> str | None:
    """Why the sensitivity run leaves ``arg`` as drawn (None: it is perturbed), from its declared domain alone.

    A domain the move cannot keep is not moved: an integer buffer of ``const``/``zeros`` or of a one-value
    ``int`` range, an integer buffer drawn from ``uniform``/``normal`` (what its valid values are is unknown:
    it may hold indices), a float buffer drawn from a one-value ``int`` range. Moving them could make the
    original itself read out of bounds, and the crash would be the check's, not the kernel's."""
    if not arg.readable or not arg.count:
        return None
    kind, a, b = arg.dist or default_dist(arg.dtype)
    if kind == "int":
        if int(np.ceil(b)) - int(np.ceil(a)) < 2:
            return f"its domain int({a:g}, {b:g}) has a single value"
        return None
    if kind == "offsets":
        return "fewer than 3 offsets: only the fixed first and last ones" if arg.count < 3 else None
    if is_float(arg.dtype):
        return None
    what = "zeros" if kind == "zeros" else f"const({a:g})" if kind == "const" else f"{kind}({a:g}, {b:g})"
    return (f"an integer buffer drawn from {what} has no declared domain to stay in (declare it "
            "`int(LO, HI)` to have it perturbed inside [LO, HI))")


def tail_plan(layout: Layout) -> tuple[tuple[str, ...], dict[str, str]]:
    """The buffers the sensitivity run perturbs, and those it leaves alone with the reason (``tail_exclusion``):
    what the reports say about a sensitivity run, and whether there is anything to run."""
    moved: list[str] = []
    left: dict[str, str] = {}
    for a in layout.buffers:
        if not a.readable or not a.count:
            continue
        why = tail_exclusion(a)
        if why is None:
            moved.append(a.name)
        else:
            left[a.name] = why
    return tuple(moved), left


def perturb_tail(arg: ArgLayout, data: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A copy of one input buffer with its last ``TAIL`` elements changed so much that any output depending
    on them changes beyond a tolerance: the sensitivity check of verification.

    Why: a tolerance hides small omissions. A sum of 2^24 uniform(0, 1) values under rtol 1e-4 passes with
    ~100 of its last elements dropped (each contributes 1e-7 of the total). Moved by ``TAIL_SCALE`` times
    their scale, in one direction (so that a sum cannot cancel the moves), the same elements contribute far
    more than the tolerance: a kernel that ignores them no longer matches the original on these inputs.

    Every element stays inside the domain the spec declares (``offsets`` stay sorted between their ends, see
    ``perturb_last``). Floating-point data (``uniform``, ``normal``,
    ``const``, ``zeros``) moves up by ``TAIL_SCALE`` times the distribution's scale (float16 at most by
    ``TAIL_MAX_FLOAT16``). Elements drawn from ``int(lo, hi)`` are reflected inside that range
    (``lo + hi - 1 - x``) whatever their element type, so indices stay valid indices, floats holding indices
    (``const float* ids`` read as ``(int)ids[n]``) included. A buffer whose domain the move cannot keep
    (``tail_exclusion``) is left as drawn.
    """
    n = int(arg.count or 0)
    out = np.array(data, copy=True)
    k = min(TAIL, n)
    if k:
        out[n - k:] = perturb_last(arg, out[n - k:])
    return out


def perturb_last(arg: ArgLayout, last: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``perturb_tail`` applied to the buffer's last ``min(TAIL, count)`` elements alone (a new array): what
    the worker needs when the rest of the buffer was made on the device and never comes to the host."""
    out = np.array(last, copy=True)
    if out.size == 0 or tail_exclusion(arg) is not None:
        return out
    dist = arg.dist or default_dist(arg.dtype)
    kind, a, b = dist
    if kind == "offsets":
        # the elements between the first and the last of the tail, reflected inside [first, last] and reversed:
        # still non-decreasing, still between their neighbours, the buffer's ends unchanged, the segment lengths
        # of the last rows different
        if out.size >= 3:
            p, q = int(out[0]), int(out[-1])
            out[1:-1] = (p + q - out[1:-1].astype(np.int64))[::-1].astype(out.dtype)
        return out
    if kind == "int":
        lo, hi = int(np.ceil(a)), int(np.ceil(b))
        if is_float(arg.dtype):
            # reflected in float64 (exact for every domain ``draw`` accepts), then stored back; an element the
            # spec's range does not hold (data written by hand) is kept rather than moved outside it
            x = to_float64(out, arg.dtype)
            inside = (x >= lo) & (x <= hi - 1) & (x == np.floor(x))
            moved = np.where(inside, lo + hi - 1 - x, x)
            out[:] = _store_float(moved, arg.dtype, out.dtype)
        else:
            out[:] = (lo + hi - 1 - out.astype(np.int64)).astype(out.dtype)
        return out
    move = TAIL_SCALE * _scale(dist)
    if arg.dtype == "float16":
        move = min(move, TAIL_MAX_FLOAT16)
    out[:] = _store_float(to_float64(out, arg.dtype) + move, arg.dtype, out.dtype)
    return out


def _store_float(values: npt.NDArray[np.float64], dtype: str, store: np.dtype[Any]) -> npt.NDArray[Any]:
    """float64 values in a float element type's storage (bfloat16 as its bits)."""
    if dtype == "bfloat16":
        return _bfloat16_bits(values.astype(np.float32))
    return values.astype(store)


# --------------------------------------------------------------------------- poison
def poison_bytes(nbytes: int) -> bytes:
    """``nbytes`` of the poison pattern, starting at an even (aligned) offset."""
    return (POISON_BYTES * (nbytes // 2 + 1))[:nbytes]


def poison_fill(dtype: str) -> tuple[int, int]:
    """How a device memset poisons a buffer of ``dtype``: (width in bytes, value).

    One-byte types get 0xF8 in every byte (-8 as int8) so that every element holds the same poison value;
    wider types get the 16-bit word, which is a NaN for every float type.
    """
    return (1, POISON_BYTES[0]) if itemsize(dtype) == 1 else (2, POISON_WORD16)


def poison_memset(cuda: Any, ptr: int, nbytes: int, dtype: str, stream: Any = None) -> None:
    """Poison ``nbytes`` of device memory at ``ptr`` for elements of ``dtype`` with one memset (``poison_fill``).

    ``cuda`` is ``pycuda.driver`` (or a stand-in); with a ``stream`` the memset is queued on it, else it runs
    at once. The worker's outputs and the one-launch harnesses' (``device_inputs.fill_buffers``) are poisoned
    here, so both start from the same bits.
    """
    if nbytes <= 0:
        return
    width, value = poison_fill(dtype)
    if width == 1:
        if stream is not None:
            cuda.memset_d8_async(ptr, value, nbytes, stream)
        else:
            cuda.memset_d8(ptr, value, nbytes)
    elif stream is not None:
        cuda.memset_d16_async(ptr, value, nbytes // 2, stream)
    else:
        cuda.memset_d16(ptr, value, nbytes // 2)


def poison_array(dtype: str, count: int) -> npt.NDArray[Any]:
    """A host array of ``count`` poisoned elements (storage dtype): what an untouched output holds."""
    store = storage_dtype(dtype)
    if store.itemsize == 1:
        return np.full(count, POISON_BYTES[0], dtype=np.uint8).view(store)
    return np.frombuffer(poison_bytes(count * store.itemsize), dtype=store).copy()


def poison_scalar(dtype: str) -> int:
    """The poison element's bits as an unsigned integer of the element's width."""
    size = itemsize(dtype)
    return POISON_BYTES[0] if size == 1 else int.from_bytes(poison_bytes(size), "little")


def is_poison(values: npt.NDArray[Any], dtype: str) -> npt.NDArray[np.bool_]:
    """Elementwise: does the element still hold the poison bits?"""
    store = storage_dtype(dtype)
    unsigned = np.dtype(f"u{store.itemsize}")
    ref = poison_array(dtype, 1).view(unsigned)[0]
    mask: npt.NDArray[np.bool_] = np.asarray(values).view(unsigned) == ref
    return mask


def initial_buffers(layout: Layout, seed: int) -> dict[str, npt.NDArray[Any]]:
    """Every buffer as it is right before a launch: inputs for in/inout, poison for out."""
    out = make_inputs(layout, seed)
    for a in layout.buffers:
        if a.role == "out":
            out[a.name] = poison_array(a.dtype, int(a.count or 0))
    return out


# --------------------------------------------------------------------------- scalars and conversion
_SCALAR_FORMAT = {
    "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "uint64": "Q", "float32": "f", "float64": "d", "float16": "H", "bfloat16": "H",
}


def scalar_format(dtype: str) -> str:
    """``struct`` format character of a scalar kernel argument (16-bit floats are passed as their bits)."""
    try:
        return _SCALAR_FORMAT[dtype]
    except KeyError as e:
        raise InputError(f"unsupported scalar type `{dtype}`") from e


def scalar_value(arg: ArgLayout) -> int | float:
    """The value to pack for a scalar argument (16-bit floats as raw bits)."""
    v = arg.value if arg.value is not None else 0
    if arg.dtype == "float16":
        return int(np.array([v], dtype=np.float16).view(np.uint16)[0])
    if arg.dtype == "bfloat16":
        return int(_bfloat16_bits(np.array([v], dtype=np.float32))[0])
    if is_float(arg.dtype):
        return float(v)
    return int(v)


def to_float64(values: npt.NDArray[Any], dtype: str) -> npt.NDArray[np.float64]:
    """Values as float64 for error arithmetic (bfloat16 bits decoded)."""
    if dtype == "bfloat16":
        return bfloat16_to_float32(np.asarray(values)).astype(np.float64)
    return np.asarray(values).astype(np.float64)
