// Row sums -- hand-optimized drop-in for corpus/row_sum_2d_grid.cu: a plain 1D grid with
// one warp per row (the 2D row split is unnecessary), coalesced float4 loads four deep
// for memory-level parallelism, scalar fallback for odd widths, __shfl_xor_sync reduction.
#include <stdint.h>

#define FULL_MASK 0xffffffffu

// @warpforge size R = 32768
// @warpforge size C = 1024
// @warpforge arg mat: in float[R*C] uniform(0, 1)
// @warpforge arg sums: out float[R]
// @warpforge arg R = R
// @warpforge arg C = C
// @warpforge launch grid=cdiv(R, 8), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
// @warpforge flops R * C
// @warpforge bytes (R * C + R) * sizeof(float)
__global__ void __launch_bounds__(256) row_sum_kernel(const float* mat, float* sums, int R, int C)
{
    const int lane = threadIdx.x & 31;
    const int row = (blockIdx.y * gridDim.x + blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= R) return;  // warp-uniform
    const float* __restrict__ p = mat + (size_t)row * C;

    float acc = 0.0f;
    if (((C & 3) == 0) && (((uintptr_t)mat) & 15) == 0) {
        const float4* p4 = reinterpret_cast<const float4*>(p);
        const int n4 = C >> 2;
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        int k = lane;
        for (; k + 96 < n4; k += 128) {
            float4 v0 = __ldcs(p4 + k), v1 = __ldcs(p4 + k + 32);
            float4 v2 = __ldcs(p4 + k + 64), v3 = __ldcs(p4 + k + 96);
            a0 += (v0.x + v0.y) + (v0.z + v0.w);
            a1 += (v1.x + v1.y) + (v1.z + v1.w);
            a2 += (v2.x + v2.y) + (v2.z + v2.w);
            a3 += (v3.x + v3.y) + (v3.z + v3.w);
        }
        for (; k < n4; k += 32) {
            float4 v = __ldcs(p4 + k);
            a0 += (v.x + v.y) + (v.z + v.w);
        }
        acc = (a0 + a1) + (a2 + a3);
    } else {
        for (int c = lane; c < C; c += 32)
            acc += __ldcs(p + c);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(FULL_MASK, acc, o);
    if (lane == 0) sums[row] = acc;
}
