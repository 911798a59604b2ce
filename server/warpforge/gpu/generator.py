"""Counter-based random inputs: one definition, computed bit-identically on the host (numpy) and on the GPU.

Why on the GPU: a row softmax over 8192 x 50257 floats needs two 1.65 GB buffers per seed. numpy drew one
such normal array in ~9 s on a CPU core and the copy to the device took more, for 3 seeds + the odd size +
the tail check, so the original was never even verified within a 45 s budget. A GPU draws it in ~1 ms.

Why counter-based: element ``i`` of the buffer named ``name`` for ``seed`` is a pure function of
(seed, crc32(name), i) — Philox4x32-10 (Salmon et al., SC'11) keyed by (seed, crc32(name)) on the counter
(i, 0) — so any thread of any GPU, or the host, computes it alone, and every worker gets the same data.

Why bit-identical host and device: the host version is the oracle the device version is checked against
(each worker compares the two at start and falls back to the host if they ever differ), and a failing
comparison's report can be reproduced anywhere. So the arithmetic uses only operations IEEE 754 rounds
exactly the same way everywhere: integer math, +, -, *, /, sqrt in double, each rounded on its own (the
device code uses the ``__d*_rn`` intrinsics, so nvcc cannot fuse them into FMAs; numpy never does). The
normal distribution is Box-Muller with ``log`` and ``cos`` written here as fixed polynomials over those
operations rather than the platform's libm (whose last bits differ between glibc and CUDA): accurate to a
few ulp, which is all test data needs, and the same bits on both sides.

Distributions (the spec's ``dist``): ``uniform(a, b)`` = a + (b - a) * u with u in [0, 1) of 53 bits;
``normal(mean, std)``; ``int(lo, hi)``: integers in [ceil(lo), ceil(hi)), unbiased below 2**32 values by
multiply-shift; ``const(a)``; ``zeros``. Values are computed in double and rounded once to the element type
(float16/bfloat16 through float32, round to nearest even); integer types take floor (uniform) or rint
(normal) clipped to the type's range (to +-2**53 for 64-bit types, where doubles stop being exact).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: Philox4x32 multipliers and Weyl key increments (Random123)
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
_M32 = np.uint64(0xFFFFFFFF)

#: element-type and distribution codes shared with DEVICE_SOURCE
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3, "int8": 4, "int16": 5, "int32": 6,
               "int64": 7, "uint8": 8, "uint16": 9, "uint32": 10, "uint64": 11}
DIST_CODES = {"zeros": 0, "const": 1, "uniform": 2, "normal": 3, "int": 4}
#: host generation works in chunks of this many elements: bounded memory for any buffer, and temporaries
#: that stay in the CPU cache (4x faster than 1M-element chunks)
CHUNK = 1 << 13

# Polynomial coefficients: log(m) = 2 atanh(s) = 2 (s + s^3/3 + ... + s^21/21), s = (m-1)/(m+1), |s| <= 0.1716;
# cos/sin by Taylor series on [0, pi/4]. Written into the device source as exact hex literals.
_LOG_C = [1.0 / k for k in range(21, 0, -2)]
_COS_C = [(-1.0) ** (k // 2) / float(np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(18, -1, -2)]
_SIN_C = [(-1.0) ** (k // 2) / float(np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(19, 0, -2)]
_LN2 = 0.6931471805599453
_HALF_PI = 1.5707963267948966
_TWO_M53 = 2.0 ** -53


def stream_of(name: str) -> int:
    """The Philox key half that separates buffers: adding an argument does not change the others' data."""
    return zlib.crc32(name.encode("utf-8")) & 0xFFFFFFFF


@dataclass(frozen=True)
class Draw:
    """Everything the device kernel is told about one buffer's data, derived once on the host."""

    dtype: int
    dist: int
    a: float
    b: float
    lo: int
    span: int
    cmin: float
    cmax: float


# --------------------------------------------------------------------------- host implementation
def philox(seed: int, stream: int, idx: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], ...]:
    """Philox4x32-10 of counter (idx mod 2^32, idx div 2^32, 0, 0) under key (seed, stream): four 32-bit words
    (held in uint64 arrays)."""
    c0 = idx & _M32
    c1 = idx >> np.uint64(32)
    c2 = np.zeros_like(idx)
    c3 = np.zeros_like(idx)
    k0, k1 = int(seed) & 0xFFFFFFFF, int(stream) & 0xFFFFFFFF
    m0, m1, s32 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(32)
    for _ in range(ROUNDS):
        p0 = c0 * m0
        p1 = c2 * m1
        c0, c1, c2, c3 = (p1 >> s32) ^ c1 ^ np.uint64(k0), p1 & _M32, (p0 >> s32) ^ c3 ^ np.uint64(k1), p0 & _M32
        k0 = (k0 + PHILOX_W0) & 0xFFFFFFFF
        k1 = (k1 + PHILOX_W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def _u53(hi: npt.NDArray[np.uint64], lo: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """A double in [0, 1) from 53 bits of two words (exact: an integer below 2^53 times 2^-53)."""
    k = ((hi >> np.uint64(5)) << np.uint64(26)) | (lo >> np.uint64(6))
    out: npt.NDArray[np.float64] = k.astype(np.float64) * _TWO_M53
    return out


def _horner(x: npt.NDArray[np.float64], coeffs: list[float]) -> npt.NDArray[np.float64]:
    p = np.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        p = p * x + c
    return p


def _log(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log of x in (0, 1] (normal doubles only), from exact exponent extraction and a fixed polynomial."""
    bits = x.view(np.uint64)
    e = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64) - 1022
    m = ((bits & np.uint64(0x000FFFFFFFFFFFFF)) | np.uint64(0x3FE0000000000000)).view(np.float64)  # [0.5, 1)
    small = m < 0.7071067811865476
    m = np.where(small, m * 2.0, m)
    e = np.where(small, e - 1, e)
    s = (m - 1.0) / (m + 1.0)
    logm = (2.0 * s) * _horner(s * s, _LOG_C)
    out: npt.NDArray[np.float64] = e.astype(np.float64) * _LN2 + logm
    return out


def _cos2pi(u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """cos(2 pi u) for u in [0, 1): quadrant by exact scaling, then a series on [0, pi/4]."""
    f = u * 4.0
    q = np.floor(f)
    r = f - q
    flip = r > 0.5
    x = np.where(flip, 1.0 - r, r) * _HALF_PI
    z = x * x
    c = _horner(z, _COS_C)
    s = x * _horner(z, _SIN_C)
    cos_t = np.where(flip, s, c)
    sin_t = np.where(flip, c, s)
    qi = q.astype(np.int64)
    out: npt.NDArray[np.float64] = np.select([qi == 0, qi == 1, qi == 2], [cos_t, -sin_t, -cos_t], sin_t)
    return out


def draw_of(dtype: str, dist: tuple[str, float, float], info_min: float, info_max: float) -> Draw:
    """The device kernel's arguments for one buffer (``info_min``/``info_max``: the integer type's range)."""
    kind, a, b = dist
    lo = span = 0
    if kind == "int":
        lo = int(np.ceil(a))
        span = int(np.ceil(b)) - lo
    return Draw(DTYPE_CODES[dtype], DIST_CODES[kind], float(a), float(b), lo, span, info_min, info_max)


def values(d: Draw, seed: int, stream: int, start: int, count: int) -> npt.NDArray[Any]:
    """Elements [start, start + count) as float64 (floating types) or int64/uint64 (integer types), before the
    final rounding to the element type: exactly what the device kernel computes."""
    idx = np.arange(start, start + count, dtype=np.uint64)
    if d.dist == DIST_CODES["zeros"]:
        return np.zeros(count, dtype=np.float64)
    if d.dist == DIST_CODES["const"]:
        return np.full(count, d.a, dtype=np.float64)
    w0, w1, w2, w3 = philox(seed, stream, idx)
    is_int_type = d.dtype >= 4
    if d.dist == DIST_CODES["int"]:
        span = np.uint64(d.span)
        # multiply-shift (unbiased enough, no division) below 2^32 values, a 64-bit remainder above
        k = (w0 * span) >> np.uint64(32) if d.span <= 1 << 32 else ((w0 << np.uint64(32)) | w1) % span
        if is_int_type:  # two's complement: the low bits of k + lo, whatever the type's width and sign
            wrapped: npt.NDArray[np.uint64] = k + np.uint64(d.lo % (1 << 64))
            return wrapped
        return k.astype(np.float64) + float(d.lo)
    if d.dist == DIST_CODES["uniform"]:
        x = d.a + (d.b - d.a) * _u53(w0, w1)
        if is_int_type:
            x = np.floor(x)
    else:  # normal
        u1 = 1.0 - _u53(w0, w1)  # (0, 1]
        z = np.sqrt(-2.0 * _log(u1)) * _cos2pi(_u53(w2, w3))
        x = d.a + d.b * z
        if is_int_type:
            x = np.rint(x)
    if is_int_type:
        return np.clip(x, d.cmin, d.cmax)
    return x


def bf16_bits(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """float32 -> bfloat16 bits, round to nearest even (finite values)."""
    bits = x.astype(np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def to_storage(x: npt.NDArray[Any], dtype: str, store: np.dtype[Any]) -> npt.NDArray[Any]:
    """Round the computed values to the element type's storage (the device kernel's last step)."""
    if dtype == "float64":
        return x.astype(np.float64)
    if dtype == "float32":
        return x.astype(np.float32)
    if dtype == "float16":
        return x.astype(np.float32).astype(np.float16)
    if dtype == "bfloat16":
        return bf16_bits(x.astype(np.float32))
    if x.dtype == np.float64:  # integral already (floor, rint or a constant): truncation is exact
        return x.astype(np.int64).astype(store)
    return x.astype(store)  # uint64 from the int distribution: a C cast keeps the low bits


def host_generate(d: Draw, dtype: str, store: np.dtype[Any], seed: int, stream: int, n: int) -> npt.NDArray[Any]:
    """The whole buffer on the host, in chunks (memory stays bounded for any length)."""
    out = np.empty(n, dtype=store)
    for start in range(0, n, CHUNK):
        k = min(CHUNK, n - start)
        out[start:start + k] = to_storage(values(d, seed, stream, start, k), dtype, store)
    return out


# --------------------------------------------------------------------------- device implementation
def _hex(x: float) -> str:
    return float(x).hex()


def _horner_c(var: str, coeffs: list[float]) -> str:
    expr = _hex(coeffs[0])
    for c in coeffs[1:]:
        expr = f"__dadd_rn(__dmul_rn({expr}, {var}), {_hex(c)})"
    return expr


def device_source() -> str:
    """CUDA source of ``wf_generate`` (appended to the comparison module, which every worker loads)."""
    return r"""
__device__ __forceinline__ void wf_philox(unsigned long long i, unsigned int k0, unsigned int k1,
                                          unsigned int& c0, unsigned int& c1, unsigned int& c2, unsigned int& c3)
{
    c0 = (unsigned int)i; c1 = (unsigned int)(i >> 32); c2 = 0u; c3 = 0u;
    #pragma unroll
    for (int r = 0; r < %(rounds)d; ++r) {
        const unsigned long long p0 = (unsigned long long)%(m0)du * c0;
        const unsigned long long p1 = (unsigned long long)%(m1)du * c2;
        const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
        const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
        c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
        k0 += %(w0)du; k1 += %(w1)du;
    }
}
__device__ __forceinline__ double wf_u53(unsigned int hi, unsigned int lo)
{
    const unsigned long long k = ((unsigned long long)(hi >> 5) << 26) | (unsigned long long)(lo >> 6);
    return __dmul_rn(__ull2double_rn(k), %(two_m53)s);
}
__device__ __forceinline__ double wf_log(double x)
{
    const unsigned long long bits = (unsigned long long)__double_as_longlong(x);
    long long e = (long long)((bits >> 52) & 0x7FFull) - 1022;
    double m = __longlong_as_double((long long)((bits & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull));
    if (m < %(sqrt_half)s) { m = __dmul_rn(m, 2.0); e -= 1; }
    const double s = __ddiv_rn(__dsub_rn(m, 1.0), __dadd_rn(m, 1.0));
    const double z = __dmul_rn(s, s);
    const double logm = __dmul_rn(__dmul_rn(2.0, s), %(log_poly)s);
    return __dadd_rn(__dmul_rn(__ll2double_rn(e), %(ln2)s), logm);
}
__device__ __forceinline__ double wf_cos2pi(double u)
{
    const double f = __dmul_rn(u, 4.0);
    const double q = floor(f);
    const double r = __dsub_rn(f, q);
    const bool flip = r > 0.5;
    const double x = __dmul_rn(flip ? __dsub_rn(1.0, r) : r, %(half_pi)s);
    const double z = __dmul_rn(x, x);
    const double c = %(cos_poly)s;
    const double s = __dmul_rn(x, %(sin_poly)s);
    const double ct = flip ? s : c;
    const double st = flip ? c : s;
    const int qi = (int)q;
    return qi == 0 ? ct : qi == 1 ? -st : qi == 2 ? -ct : st;
}
__device__ __forceinline__ unsigned short wf_bf16(float f)
{
    const unsigned int bits = __float_as_uint(f);
    return (unsigned short)((bits + (((bits >> 16) & 1u) + 0x7FFFu)) >> 16);
}

// One element per thread and grid-stride step; element i depends only on (seed, stream, i).
// dtype/dist codes: warpforge.gpu.generator.DTYPE_CODES / DIST_CODES.
extern "C" __global__ void wf_generate(void* out, unsigned long long n, unsigned long long first,
                                       unsigned int seed, unsigned int stream, int dtype, int dist,
                                       double a, double b, long long lo, unsigned long long span,
                                       double cmin, double cmax)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long j = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        const unsigned long long i = first + j;
        double x = 0.0;
        long long xi = 0;
        unsigned long long xu = 0;
        bool integral = false;
        if (dist == 1) {
            x = a;
        } else if (dist >= 2) {
            unsigned int w0, w1, w2, w3;
            wf_philox(i, seed, stream, w0, w1, w2, w3);
            if (dist == 4) {
                unsigned long long k;
                if (span <= (1ull << 32)) k = ((unsigned long long)w0 * span) >> 32;
                else k = (((unsigned long long)w0 << 32) | w1) %% span;
                if (dtype >= 4) {
                    integral = true;
                    xi = (long long)k + lo;
                    xu = k + (unsigned long long)lo;
                } else {
                    x = __dadd_rn(__ull2double_rn(k), __ll2double_rn(lo));
                }
            } else if (dist == 2) {
                x = __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), wf_u53(w0, w1)));
                if (dtype >= 4) x = floor(x);
            } else {
                const double u1 = __dsub_rn(1.0, wf_u53(w0, w1));
                const double z = __dmul_rn(__dsqrt_rn(__dmul_rn(-2.0, wf_log(u1))), wf_cos2pi(wf_u53(w2, w3)));
                x = __dadd_rn(a, __dmul_rn(b, z));
                if (dtype >= 4) x = rint(x);
            }
            if (dtype >= 4 && !integral) x = fmin(fmax(x, cmin), cmax);
        }
        if (dtype >= 4 && !integral) { xi = __double2ll_rz(x); xu = (unsigned long long)xi; }
        switch (dtype) {
        case 0: ((float*)out)[j] = __double2float_rn(x); break;
        case 1: { const float f = __double2float_rn(x); unsigned short h;
                  asm("cvt.rn.f16.f32 %%0, %%1;" : "=h"(h) : "f"(f)); ((unsigned short*)out)[j] = h; break; }
        case 2: ((unsigned short*)out)[j] = wf_bf16(__double2float_rn(x)); break;
        case 3: ((double*)out)[j] = x; break;
        case 4: ((signed char*)out)[j] = (signed char)xi; break;
        case 5: ((short*)out)[j] = (short)xi; break;
        case 6: ((int*)out)[j] = (int)xi; break;
        case 7: ((long long*)out)[j] = xi; break;
        case 8: ((unsigned char*)out)[j] = (unsigned char)xu; break;
        case 9: ((unsigned short*)out)[j] = (unsigned short)xu; break;
        case 10: ((unsigned int*)out)[j] = (unsigned int)xu; break;
        default: ((unsigned long long*)out)[j] = xu; break;
        }
    }
}
""" % {  # noqa: UP031 -- %-format: the C source is full of braces that str.format would need doubled
        "rounds": ROUNDS, "m0": PHILOX_M0, "m1": PHILOX_M1, "w0": PHILOX_W0, "w1": PHILOX_W1,
        "two_m53": _hex(_TWO_M53), "sqrt_half": _hex(0.7071067811865476), "ln2": _hex(_LN2),
        "half_pi": _hex(_HALF_PI), "log_poly": _horner_c("z", _LOG_C), "cos_poly": _horner_c("z", _COS_C),
        "sin_poly": _horner_c("z", _SIN_C),
    }
