#include <cuda_fp16.h>
#include <stdint.h>

// Expert scaled residual add in half precision: 8 halves per thread through one 128-bit
// (uint4) load of a and of b and one 128-bit store, math in float exactly as the naive
// kernel does it (so results are bit-identical); a scalar path for the n % 8 tail and
// for buffers that are not 16-byte aligned.
// @warpforge size N = 1 << 26
// @warpforge arg a: in half[N] normal(0, 1)
// @warpforge arg b: in half[N] normal(0, 1)
// @warpforge arg out: out half[N]
// @warpforge arg alpha = 0.5
// @warpforge arg n = N
// @warpforge launch grid=cdiv(cdiv(N, 8), 256), block=256
// @warpforge tol rtol=1e-2 atol=1e-3
// @warpforge flops 2 * N
// @warpforge bytes 3 * N * sizeof(half)
__global__ void residual_add_scale_fp16(const __half* a, const __half* b, __half* out,
                                        float alpha, int n)
{
    const int base = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (base >= n) return;
    const bool aligned = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)
                           | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    if (aligned && base + 7 < n) {
        const uint4 va = __ldg(reinterpret_cast<const uint4*>(a + base));
        const uint4 vb = __ldg(reinterpret_cast<const uint4*>(b + base));
        const __half2* ha = reinterpret_cast<const __half2*>(&va);
        const __half2* hb = reinterpret_cast<const __half2*>(&vb);
        uint4 vo;
        __half2* ho = reinterpret_cast<__half2*>(&vo);
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 fa = __half22float2(ha[k]);
            const float2 fb = __half22float2(hb[k]);
            ho[k] = __floats2half2_rn(fa.x + alpha * fb.x, fa.y + alpha * fb.y);
        }
        *reinterpret_cast<uint4*>(out + base) = vo;
    } else {
        for (int i = base; i < n && i < base + 8; ++i)
            out[i] = __float2half(__half2float(a[i]) + alpha * __half2float(b[i]));
    }
}
