// Row-wise softmax over __half -- hand-optimized drop-in for corpus/softmax_fp16_macro.cu:
// one warp per row, 16-byte loads of 8 halves (uint4) when C % 8 == 0, scalar otherwise,
// online max/sum in fp32 in one read, shuffle merge, then one vectorized write sweep.
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>

#define FULL_MASK 0xffffffffu
#define H2F(x) __half2float(x)
#define F2H(x) __float2half(x)

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2)
{
    float nm = fmaxf(m, m2);
    if (nm == -INFINITY) return;
    float a = (m == -INFINITY) ? 0.0f : s * __expf(m - nm);
    float b = (m2 == -INFINITY) ? 0.0f : s2 * __expf(m2 - nm);
    s = a + b;
    m = nm;
}

// @warpforge size B = 32768
// @warpforge size C = 1024
// @warpforge arg src: in half[B*C] normal(0, 2)
// @warpforge arg dst: out half[B*C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(B, 8), block=256
// @warpforge tol rtol=1e-2 atol=1e-6
// @warpforge flops 5 * B * C
// @warpforge bytes 2 * B * C * sizeof(half)
__global__ void __launch_bounds__(256) softmax_half_rows(const __half* src, __half* dst, int B, int C)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= B) return;  // warp-uniform
    const __half* __restrict__ x = src + (size_t)r * C;
    __half* __restrict__ y = dst + (size_t)r * C;
    const bool vec = ((C & 7) == 0) && ((((uintptr_t)src) | ((uintptr_t)dst)) & 15) == 0;

    float m = -INFINITY, s = 0.0f;
    if (vec) {
        const uint4* x8 = reinterpret_cast<const uint4*>(x);
        const int n8 = C >> 3;
        for (int k = lane; k < n8; k += 32) {
            uint4 raw = __ldg(x8 + k);
            const __half2* h = reinterpret_cast<const __half2*>(&raw);
            float f[8];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float2 t = __half22float2(h[q]);
                f[2 * q] = t.x;
                f[2 * q + 1] = t.y;
            }
            float mx = f[0];
#pragma unroll
            for (int q = 1; q < 8; q++) mx = fmaxf(mx, f[q]);
            float nm = fmaxf(m, mx);
            float acc = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; q++) acc += __expf(f[q] - nm);
            s = s * __expf(m - nm) + acc;
            m = nm;
        }
    } else {
        for (int k = lane; k < C; k += 32) {
            float v = H2F(x[k]);
            float nm = fmaxf(m, v);
            s = s * __expf(m - nm) + __expf(v - nm);
            m = nm;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(FULL_MASK, m, o);
        float s2 = __shfl_xor_sync(FULL_MASK, s, o);
        lse_merge(m, s, m2, s2);
    }
    const float inv = 1.0f / s;

    if (vec) {
        const uint4* x8 = reinterpret_cast<const uint4*>(x);
        uint4* y8 = reinterpret_cast<uint4*>(y);
        const int n8 = C >> 3;
        for (int k = lane; k < n8; k += 32) {
            uint4 raw = __ldg(x8 + k);
            uint4 res;
            const __half2* h = reinterpret_cast<const __half2*>(&raw);
            __half2* o = reinterpret_cast<__half2*>(&res);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float2 t = __half22float2(h[q]);
                o[q] = __floats2half2_rn(__expf(t.x - m) * inv, __expf(t.y - m) * inv);
            }
            y8[k] = res;
        }
    } else {
        for (int k = lane; k < C; k += 32)
            y[k] = F2H(__expf(H2F(x[k]) - m) * inv);
    }
}
