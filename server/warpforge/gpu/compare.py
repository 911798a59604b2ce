"""Differential comparison of a buffer against the oracle's: dtype-aware tolerances and NaN rules.

The rules, per element (identical on the host, in numpy, and on the device, in ``DEVICE_SOURCE``):

- bitwise-identical elements match (this covers NaN == NaN with the same bits, and poison == poison where the
  oracle itself left an element unwritten);
- an element still holding the poison pattern (see ``inputs``) is *unwritten*, and mismatches unless the
  oracle's element is poison too;
- an element the *oracle* leaves holding the poison pattern is one the original never writes: a candidate that
  writes a value there mismatches (the program's memory would differ), and is counted apart
  (``original_unwritten``) so the message says so instead of "got 0, want nan";
- floating point: a NaN matches only a NaN (NaN never matches unless the oracle has NaN there, and an
  oracle NaN is not matched by a number); an infinity only the same infinity; otherwise
  ``|got - want| <= atol + rtol * |want|``;
- integers: exact when both tolerances are 0 (the default), else the same formula.

Max absolute/relative error are taken over the finite elements that differ at all (relative error only where
the oracle's element is non-zero), so they are honest numbers even when everything matched within tolerance.

Why a device version: outputs of the spec sizes are hundreds of MB; copying them to the host and comparing
there costs far more than the kernel. The worker compares where the data is and copies back only counts and
the first mismatching element. It checks the device version against this module once at start, and falls
back to the host version if they ever disagree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import generator
from .inputs import is_float, poison_scalar, storage_dtype, to_float64
from .tolerance import tolerance_text

#: kind codes shared with DEVICE_SOURCE
KIND_FLOAT, KIND_BFLOAT16, KIND_SIGNED, KIND_UNSIGNED = 0, 1, 2, 3


def kind_code(dtype: str) -> int:
    if dtype == "bfloat16":
        return KIND_BFLOAT16
    if is_float(dtype):
        return KIND_FLOAT
    return KIND_SIGNED if dtype.startswith("int") else KIND_UNSIGNED


@dataclass(frozen=True)
class BufferReport:
    """How one buffer compared with the oracle's."""

    name: str
    dtype: str
    count: int
    mismatches: int = 0
    unwritten: int = 0
    nan_mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first_index: int | None = None
    got: float | None = None
    want: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    #: mismatches where the original never writes the element (it still holds the poison fill there)
    original_unwritten: int = 0
    #: whether the first mismatch is at such an element (its ``want`` is the poison, not a value)
    first_never_written: bool = False
    #: the ``norm`` component and the output's largest finite magnitude in the original's run: the comparison
    #: allowed ``atol + norm * scale`` (``normwise_atol``)
    norm: float = 0.0
    scale: float = 0.0

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def summary(self) -> str:
        """One line for people."""
        tol = tolerance_text(self.rtol, self.atol, self.norm, self.scale)
        errs = f"max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g} ({tol})"
        if self.ok:
            return f"`{self.name}`: all {self.count} elements match; {errs}"
        parts = [f"`{self.name}`: {self.mismatches} of {self.count} elements differ"]
        extra = []
        if self.unwritten:
            extra.append(f"{self.unwritten} never written")
        if self.nan_mismatches:
            extra.append(f"{self.nan_mismatches} NaN where the original has a number")
        if self.original_unwritten:
            extra.append(f"{self.original_unwritten} written where the original never writes")
        if extra:
            parts.append(" (" + ", ".join(extra) + ")")
        if self.first_index is not None:
            parts.append(f"; first at [{self.first_index}]: got {_fmt(self.got)}, want {_fmt(self.want)}")
            if self.first_never_written:
                parts.append(f" (the original never writes [{self.first_index}]: it still holds the poison fill "
                             f"{self.poison_text()} every output starts from)")
        parts.append(f"; {errs}")
        if self.original_unwritten:
            parts.append("; if those elements are not part of the output, give the buffer the length the original "
                         "writes, or declare it `inout` so both kernels start from the same data")
        return "".join(parts)

    def poison_text(self) -> str:
        return "(NaN)" if is_float(self.dtype) else f"(0x{poison_scalar(self.dtype):X})"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        for k in ("max_abs", "max_rel", "got", "want"):
            v = d[k]
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = repr(v)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BufferReport:
        vals: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__ if k in d}
        for k in ("max_abs", "max_rel", "got", "want"):
            if isinstance(vals.get(k), str):
                vals[k] = float(vals[k])
        return cls(**vals)


def _fmt(v: float | None) -> str:
    return "?" if v is None else f"{v:.6g}"


def compare(
    name: str,
    got: npt.NDArray[Any],
    want: npt.NDArray[Any],
    dtype: str,
    rtol: float,
    atol: float,
    *,
    chunk: int = 1 << 20,
) -> BufferReport:
    """Compare ``got`` with the oracle's ``want`` (storage dtype arrays of equal length)."""
    store = storage_dtype(dtype)
    got = np.ascontiguousarray(got, dtype=store).reshape(-1)
    want = np.ascontiguousarray(want, dtype=store).reshape(-1)
    if got.shape != want.shape:
        raise ValueError(f"`{name}`: {got.size} elements against the oracle's {want.size}")
    n = int(got.size)
    unsigned = np.dtype(f"u{store.itemsize}")
    gu_all = got.view(unsigned)
    wu_all = want.view(unsigned)
    if np.array_equal(gu_all, wu_all):
        return BufferReport(name, dtype, n, rtol=rtol, atol=atol)
    poison = unsigned.type(poison_scalar(dtype))
    floating = is_float(dtype)
    exact = rtol == 0 and atol == 0
    bad = unw = nanbad = orig_unw = 0
    first_never = False
    first: int | None = None
    max_abs = max_rel = 0.0
    for start in range(0, n, chunk):
        gu = gu_all[start : start + chunk]
        wu = wu_all[start : start + chunk]
        idx = np.flatnonzero(gu != wu)
        if idx.size == 0:
            continue
        g = to_float64(got[start : start + chunk][idx], dtype)
        w = to_float64(want[start : start + chunk][idx], dtype)
        unwritten = gu[idx] == poison
        never = wu[idx] == poison
        ok = np.zeros(idx.size, dtype=bool)
        if floating:
            gn, wn = np.isnan(g), np.isnan(w)
            either_nan = gn | wn
            ok[either_nan] = (gn & wn)[either_nan]
            nanbad += int(np.count_nonzero(gn & ~wn & ~unwritten))
            inf = ~either_nan & (np.isinf(g) | np.isinf(w))
            ok[inf] = (g == w)[inf]
            finite = ~either_nan & ~inf
        else:
            finite = np.ones(idx.size, dtype=bool)
        if finite.any():
            gf, wf = g[finite], w[finite]
            d = np.abs(gf - wf)
            if floating or not exact:
                ok[finite] = d <= atol + rtol * np.abs(wf)
            max_abs = max(max_abs, float(d.max()))
            nz = wf != 0
            if nz.any():
                max_rel = max(max_rel, float((d[nz] / np.abs(wf[nz])).max()))
        badmask = ~ok
        nbad = int(np.count_nonzero(badmask))
        if nbad:
            bad += nbad
            unw += int(np.count_nonzero(badmask & unwritten))
            orig_unw += int(np.count_nonzero(badmask & never))
            if first is None:
                at = int(np.argmax(badmask))
                first = start + int(idx[at])
                first_never = bool(never[at])
    got_v = want_v = None
    if first is not None:
        got_v = float(to_float64(got[first : first + 1], dtype)[0])
        want_v = float(to_float64(want[first : first + 1], dtype)[0])
    return BufferReport(name, dtype, n, bad, unw, nanbad, max_abs, max_rel, first, got_v, want_v, rtol, atol,
                        orig_unw, first_never)


def largest_magnitude(values: npt.NDArray[Any], dtype: str) -> float:
    """The largest finite ``|value|`` of an output (0 when it has none): ``scale`` of ``normwise_atol``."""
    if not values.size or not is_float(dtype):
        return 0.0
    v = np.abs(to_float64(values, dtype))
    v = v[np.isfinite(v)]
    return float(v.max()) if v.size else 0.0


def sensitivity_tolerance(tol: tuple[float, float], largest_change: float) -> tuple[float, float]:
    """The (rtol, atol) a candidate's outputs must meet on tail-perturbed inputs (``inputs.perturb_tail``).

    The perturbation moves inputs by 10^4 times their scale, so every rounding error of the computation
    grows with it: a matrix-vector product whose perturbed terms (~10^4) cancel to an output near 1 is off by
    ~4e-3 in fp32 merely for summing in another order (measured on an H100: a warp-per-row matvec, one of
    16384 outputs, against rtol = atol = 1e-3). The spec's tolerance was written for plain inputs. What this
    check asks is whether the candidate *follows the change* the perturbation made, so the absolute part
    grows by ``rtol`` times the largest change it made to that output in the original's results: a
    candidate that ignores the perturbed elements is off by the whole change where it is largest (far
    beyond ``rtol`` of it for any rtol < 1), one that sums them in another order is not. An exact tolerance
    (rtol 0) and a change that is not finite leave the tolerance as it is.
    """
    rtol, atol = tol
    if rtol <= 0 or not math.isfinite(largest_change) or largest_change <= 0:
        return tol
    return rtol, atol + rtol * largest_change


def from_device_result(
    name: str, dtype: str, count: int, rtol: float, atol: float, res: npt.NDArray[np.uint64],
    got_first: float | None, want_first: float | None, first_never_written: bool = False,
) -> BufferReport:
    """A report from the seven counters written by the device kernel (see ``DEVICE_SOURCE``)."""
    bad, unw, nanbad, first, abs_bits, rel_bits, orig_unw = (int(x) for x in res[:RESULT_WORDS])
    max_abs = float(np.array([abs_bits], dtype=np.uint64).view(np.float64)[0])
    max_rel = float(np.array([rel_bits], dtype=np.uint64).view(np.float64)[0])
    return BufferReport(name, dtype, count, bad, unw, nanbad, max_abs, max_rel,
                        first if bad else None, got_first if bad else None, want_first if bad else None, rtol, atol,
                        orig_unw, bool(bad) and first_never_written)


#: constants of ``checksum`` (shared with ``wf_checksum`` in DEVICE_SOURCE): the word index is spread by the
#: golden-ratio increment and an offset, then each word goes through splitmix64's finalizer
CHECKSUM_STEP, CHECKSUM_OFFSET = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = np.uint64


def checksum(data: bytes | npt.NDArray[Any], *, chunk: int = 1 << 22) -> int:
    """An order-independent 64-bit checksum of a buffer's bytes (the host half of ``wf_checksum``).

    Why: inputs the spec calls read-only are shared in place between runs (the worker copies them no more),
    and a kernel that writes one must be caught: the checksum is taken when the inputs are drawn and again
    after every run that used them. The bytes are read as little-endian 64-bit words, the last one padded
    with zero bytes (any length works), and the result is the sum mod 2^64 of ``mix(word XOR (index * STEP +
    OFFSET))``, ``mix`` being splitmix64's finalizer. A sum can be taken by threads in any order; ``mix`` and
    the XOR are bijections, so a change to any one word (one bit, one element) always changes the sum, and a
    change to several leaves it equal with probability about 2^-64. Where it stands in a word is in the sum
    too (the index), so swapped words change it.
    """
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else \
        np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    n = int(raw.size)
    words = n // 8
    total = _U64(0)
    with np.errstate(over="ignore"):
        for start in range(0, words, chunk):
            stop = min(words, start + chunk)
            w = raw[start * 8 : stop * 8].view("<u8").astype(_U64)
            idx = np.arange(start, stop, dtype=_U64)
            total = _U64(total + _mix(w ^ (idx * _U64(CHECKSUM_STEP) + _U64(CHECKSUM_OFFSET))).sum(dtype=_U64))
        if n % 8:
            tail = np.zeros(8, dtype=np.uint8)
            tail[: n % 8] = raw[words * 8 :]
            w = tail.view("<u8").astype(_U64)
            idx = np.array([words], dtype=_U64)
            total = _U64(total + _mix(w ^ (idx * _U64(CHECKSUM_STEP) + _U64(CHECKSUM_OFFSET)))[0])
    return int(total)


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = (z ^ (z >> _U64(30))) * _U64(_MIX1)
    z = (z ^ (z >> _U64(27))) * _U64(_MIX2)
    return z ^ (z >> _U64(31))


def device_kernel_name(dtype: str) -> str:
    """Entry point of DEVICE_SOURCE for this element width."""
    return f"wf_compare_{storage_dtype(dtype).itemsize}"


#: The device version of ``compare`` (and the input generator, ``generator.device_source``, the L2 flush and
#: the input checksum, ``checksum``);
#: compiled once per toolchain and shipped to workers as a cubin.
#: ``res`` receives: mismatches, unwritten, NaN mismatches, first mismatching index (initialise to ~0),
#: max abs error and max rel error as the bits of non-negative doubles (so integer atomicMax orders them),
#: and mismatches at elements the oracle never wrote (still poison there).
RESULT_WORDS = 7
DEVICE_SOURCE = r"""
__device__ __forceinline__ double wf_value(unsigned char b, int kind) {
    return kind == 2 ? (double)(signed char)b : (double)b;
}
__device__ __forceinline__ double wf_value(unsigned short b, int kind) {
    if (kind == 0) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b)); return (double)f; }
    if (kind == 1) return (double)__uint_as_float(((unsigned int)b) << 16);
    if (kind == 2) return (double)(short)b;
    return (double)b;
}
__device__ __forceinline__ double wf_value(unsigned int b, int kind) {
    if (kind == 0) return (double)__uint_as_float(b);
    if (kind == 2) return (double)(int)b;
    return (double)b;
}
__device__ __forceinline__ double wf_value(unsigned long long b, int kind) {
    if (kind == 0) return __longlong_as_double((long long)b);
    if (kind == 2) return (double)(long long)b;
    return (double)b;
}

template <typename U>
__device__ __forceinline__ void wf_compare(const U* __restrict__ got, const U* __restrict__ want,
                                           unsigned long long n, int kind, double rtol, double atol,
                                           U poison, unsigned long long* res)
{
    unsigned long long bad = 0, unw = 0, nanbad = 0, first = ~0ull, ounw = 0;
    double mabs = 0.0, mrel = 0.0;
    const bool fp = kind <= 1;
    const bool exact = rtol == 0.0 && atol == 0.0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const U gb = got[i];
        const U wb = want[i];
        if (gb == wb) continue;
        const bool unwritten = gb == poison;
        const double g = wf_value(gb, kind);
        const double w = wf_value(wb, kind);
        bool ok;
        if (fp && (isnan(g) || isnan(w))) {
            ok = isnan(g) && isnan(w);
            if (isnan(g) && !isnan(w) && !unwritten) nanbad++;
        } else if (fp && (isinf(g) || isinf(w))) {
            ok = g == w;
        } else {
            const double d = fabs(g - w);
            ok = (fp || !exact) ? d <= atol + rtol * fabs(w) : false;
            mabs = fmax(mabs, d);
            if (w != 0.0) mrel = fmax(mrel, d / fabs(w));
        }
        if (!ok) {
            bad++;
            if (unwritten) unw++;
            if (wb == poison) ounw++;
            if (i < first) first = i;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        bad += __shfl_down_sync(0xffffffffu, bad, off);
        unw += __shfl_down_sync(0xffffffffu, unw, off);
        nanbad += __shfl_down_sync(0xffffffffu, nanbad, off);
        ounw += __shfl_down_sync(0xffffffffu, ounw, off);
        const unsigned long long f2 = __shfl_down_sync(0xffffffffu, first, off);
        first = f2 < first ? f2 : first;
        mabs = fmax(mabs, __shfl_down_sync(0xffffffffu, mabs, off));
        mrel = fmax(mrel, __shfl_down_sync(0xffffffffu, mrel, off));
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad) { atomicAdd(&res[0], bad); atomicMin(&res[3], first); }
        if (unw) atomicAdd(&res[1], unw);
        if (nanbad) atomicAdd(&res[2], nanbad);
        if (ounw) atomicAdd(&res[6], ounw);
        if (mabs > 0.0) atomicMax(&res[4], (unsigned long long)__double_as_longlong(mabs));
        if (mrel > 0.0) atomicMax(&res[5], (unsigned long long)__double_as_longlong(mrel));
    }
}

// The checksum of ``checksum`` (compare.py): nbytes at p (8-byte aligned, as every allocation of the worker is)
// read as little-endian 64-bit words, the last one zero-padded; each thread sums mix(word ^ (i * STEP + OFFSET))
// over its words, a block sums its threads' sums (warp shuffles, then one warp over the warps' sums) and adds
// that to *out with one atomicAdd. Sums mod 2^64 do not depend on the order.
__device__ __forceinline__ unsigned long long wf_mix(unsigned long long w, unsigned long long i)
{
    unsigned long long z = w ^ (i * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

extern "C" __global__ void wf_checksum(const unsigned char* __restrict__ p, unsigned long long nbytes,
                                       unsigned long long* out)
{
    __shared__ unsigned long long warp_sums[32];
    const unsigned long long words = nbytes >> 3;
    const unsigned long long* w = reinterpret_cast<const unsigned long long*>(p);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long acc = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
        acc += wf_mix(w[i], i);
    if (blockIdx.x == 0 && threadIdx.x == 0 && (nbytes & 7ull)) {
        unsigned long long t = 0;
        for (unsigned int k = 0; k < (unsigned int)(nbytes & 7ull); k++)
            t |= (unsigned long long)p[words * 8 + k] << (8 * k);
        acc += wf_mix(t, words);
    }
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        const unsigned int warps = (blockDim.x + 31) >> 5;
        acc = lane < warps ? warp_sums[lane] : 0ull;
        for (int off = 16; off > 0; off >>= 1)
            acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (lane == 0 && acc) atomicAdd(out, acc);
    }
}

extern "C" __global__ void wf_compare_1(const unsigned char* got, const unsigned char* want, unsigned long long n,
                                        int kind, double rtol, double atol, unsigned int poison,
                                        unsigned long long* res)
{ wf_compare<unsigned char>(got, want, n, kind, rtol, atol, (unsigned char)poison, res); }

extern "C" __global__ void wf_compare_2(const unsigned short* got, const unsigned short* want, unsigned long long n,
                                        int kind, double rtol, double atol, unsigned int poison,
                                        unsigned long long* res)
{ wf_compare<unsigned short>(got, want, n, kind, rtol, atol, (unsigned short)poison, res); }

extern "C" __global__ void wf_compare_4(const unsigned int* got, const unsigned int* want, unsigned long long n,
                                        int kind, double rtol, double atol, unsigned int poison,
                                        unsigned long long* res)
{ wf_compare<unsigned int>(got, want, n, kind, rtol, atol, poison, res); }

extern "C" __global__ void wf_compare_8(const unsigned long long* got, const unsigned long long* want,
                                        unsigned long long n, int kind, double rtol, double atol,
                                        unsigned long long poison, unsigned long long* res)
{ wf_compare<unsigned long long>(got, want, n, kind, rtol, atol, poison, res); }
""" + generator.device_source()
