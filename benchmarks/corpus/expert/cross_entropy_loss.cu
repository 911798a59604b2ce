// Softmax cross-entropy loss per row -- hand-optimized drop-in for
// corpus/cross_entropy_loss.cu: one 256-thread block per sample, a single read of the
// logits (float4 when aligned) with an online running max / sum-of-exp per thread, merged
// across the warp with __shfl_xor_sync and across warps in shared memory.
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

// @warpforge size B = 4096
// @warpforge size V = 8192
// @warpforge arg logits: in float[B*V] normal(0, 4)
// @warpforge arg targets: in int[B] int(0, V)
// @warpforge arg losses: out float[B]
// @warpforge arg B = B
// @warpforge arg V = V
// @warpforge launch grid=B, block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * B * V
// @warpforge bytes (B * V + 2 * B) * sizeof(float)
__global__ void __launch_bounds__(256) cross_entropy_forward(const float* logits, const int* targets,
                                                             float* losses, int B, int V)
{
    __shared__ float sm[32], ss[32];
    const int b = blockIdx.x;
    if (b >= B) return;  // block-uniform
    const float* __restrict__ row = logits + (size_t)b * V;
    const bool vec = ((V & 3) == 0) && (((uintptr_t)logits) & 15) == 0;

    float m = -INFINITY, s = 0.0f;
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        const int n4 = V >> 2;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = __ldcs(r4 + i);
            float nm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            s = s * expf(m - nm) + (expf(v.x - nm) + expf(v.y - nm)) + (expf(v.z - nm) + expf(v.w - nm));
            m = nm;
        }
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float v = __ldcs(row + i);
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
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { sm[wid] = m; ss[wid] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        float M = sm[0], S = ss[0];
        for (int i = 1; i < nw; i++) lse_merge(M, S, sm[i], ss[i]);
        const int t = targets[b];
        losses[b] = logf(S) + M - row[t];
    }
}
