// Row-wise log-softmax over an N x D float matrix -- hand-optimized drop-in for
// corpus/log_softmax_bump.cu: one warp per row, online max/sum-of-exp in a single read
// (float4 when aligned), butterfly shuffle merge, then y = x - logsumexp in a second sweep.
#include <math.h>
#include <stdint.h>

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2)
{
    float nm = fmaxf(m, m2);
    if (nm == -INFINITY) return;
    float a = (m == -INFINITY) ? 0.0f : s * expf(m - nm);
    float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - nm);
    s = a + b;
    m = nm;
}

// @warpforge size N = 16384
// @warpforge size D = 2048
// @warpforge arg x: in float[N*D] normal(0, 3)
// @warpforge arg y: out float[N*D]
// @warpforge arg N = N
// @warpforge arg D = D
// @warpforge launch grid=cdiv(N, 8), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * N * D
// @warpforge bytes 2 * N * D * sizeof(float)
__global__ void __launch_bounds__(256) log_softmax_forward(const float* x, float* y, int N, int D)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;  // warp-uniform

    const bool vec = ((D & 3) == 0) && ((((uintptr_t)x) | ((uintptr_t)y)) & 15) == 0;
    x += (size_t)row * D;
    y += (size_t)row * D;

    float m = -INFINITY, s = 0.0f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = D >> 2;
        for (int i = lane; i < n4; i += 32) {
            float4 v = __ldg(x4 + i);
            float nm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            s = s * expf(m - nm) + (expf(v.x - nm) + expf(v.y - nm)) + (expf(v.z - nm) + expf(v.w - nm));
            m = nm;
        }
    } else {
        for (int i = lane; i < D; i += 32) {
            float v = __ldg(x + i);
            float nm = fmaxf(m, v);
            s = s * expf(m - nm) + expf(v - nm);
            m = nm;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(FULL_MASK, m, o);
        float s2 = __shfl_xor_sync(FULL_MASK, s, o);
        lse_merge(m, s, m2, s2);
    }
    const float lse = m + logf(s);

    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        const int n4 = D >> 2;
        for (int i = lane; i < n4; i += 32) {
            float4 v = __ldg(x4 + i);
            v.x -= lse; v.y -= lse; v.z -= lse; v.w -= lse;
            __stcs(y4 + i, v);
        }
    } else {
        for (int i = lane; i < D; i += 32)
            y[i] = __ldg(x + i) - lse;
    }
}
