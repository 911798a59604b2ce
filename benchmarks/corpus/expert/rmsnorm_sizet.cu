// RMSNorm -- hand-optimized drop-in for corpus/rmsnorm_sizet.cu: one warp per row,
// float4 loads (scalar fallback for unaligned/odd widths), sum of squares reduced with
// __shfl_xor_sync, then a second sweep that mostly hits L1/L2 and streams the output.
#include <stddef.h>
#include <stdint.h>
#include <math.h>

#define FULL_MASK 0xffffffffu

// @warpforge size R = 8192
// @warpforge size D = 4096
// @warpforge arg x: in float[R*D] normal(0, 1)
// @warpforge arg w: in float[D] uniform(0.5, 1.5)
// @warpforge arg y: out float[R*D]
// @warpforge arg rows = R
// @warpforge arg dim = D
// @warpforge arg eps = 1e-6
// @warpforge launch grid=cdiv(R, 8), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * R * D
// @warpforge bytes (2 * R * D + D) * sizeof(float)
__global__ void __launch_bounds__(256) rmsnorm_kernel(const float* x, const float* w, float* y,
                                                      size_t rows, size_t dim, float eps)
{
    const unsigned lane = threadIdx.x & 31;
    const size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;  // warp-uniform

    const float* __restrict__ xr = x + r * dim;
    float* __restrict__ yr = y + r * dim;
    const bool vec = ((dim & 3) == 0) &&
                     ((((uintptr_t)x) | ((uintptr_t)w) | ((uintptr_t)y)) & 15) == 0;

    float ss = 0.0f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const size_t n4 = dim >> 2;
#pragma unroll 4
        for (size_t i = lane; i < n4; i += 32) {
            float4 v = __ldg(x4 + i);
            ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
        }
    } else {
        for (size_t i = lane; i < dim; i += 32) {
            float v = __ldg(xr + i);
            ss += v * v;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(FULL_MASK, ss, o);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);

    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4* y4 = reinterpret_cast<float4*>(yr);
        const size_t n4 = dim >> 2;
#pragma unroll 4
        for (size_t i = lane; i < n4; i += 32) {
            float4 v = __ldcs(x4 + i), g = __ldg(w4 + i), o;
            o.x = v.x * scale * g.x;
            o.y = v.y * scale * g.y;
            o.z = v.z * scale * g.z;
            o.w = v.w * scale * g.w;
            __stcs(y4 + i, o);
        }
    } else {
        for (size_t i = lane; i < dim; i += 32)
            yr[i] = __ldcs(xr + i) * scale * __ldg(w + i);
    }
}
