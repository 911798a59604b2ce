// Full sum of n floats -- hand-optimized drop-in for corpus/full_sum_atomic.cu: a
// persistent-style grid (about 8 blocks per SM) walks the array with a grid-stride float4
// loop (scalar tail), reduces in registers -> warp shuffles -> shared memory, and issues
// ONE atomicAdd per block instead of one per thread. `chunk` is accepted for drop-in
// compatibility but not needed: the grid stride decides each thread's share.
#include <stdint.h>

#define FULL_MASK 0xffffffffu

// @warpforge size N = 1 << 25
// @warpforge arg x: in float[N] uniform(0, 1)
// @warpforge arg total: inout float[1] zeros
// @warpforge arg n = N
// @warpforge arg chunk = 64
// @warpforge launch grid=min(cdiv(N, 256 * 4), 132 * 8), block=256
// @warpforge tol rtol=1e-3 atol=1e-2
// @warpforge flops N
// @warpforge bytes N * sizeof(float)
__global__ void __launch_bounds__(256) sum_chunks_atomic(const float* x, float* total, int n, int chunk)
{
    (void)chunk;
    __shared__ float warp_part[32];
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;

    float s0 = 0.0f, s1 = 0.0f;
    int done = 0;
    if ((((uintptr_t)x) & 15) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n >> 2;
        int i = tid;
        for (; i + stride < n4; i += 2 * stride) {  // two loads in flight per thread
            float4 a = __ldcs(x4 + i), b = __ldcs(x4 + i + stride);
            s0 += (a.x + a.y) + (a.z + a.w);
            s1 += (b.x + b.y) + (b.z + b.w);
        }
        if (i < n4) {
            float4 a = __ldcs(x4 + i);
            s0 += (a.x + a.y) + (a.z + a.w);
        }
        done = n4 << 2;
    }
    for (int i = done + tid; i < n; i += stride)  // tail (or everything, if unaligned)
        s0 += x[i];
    float s = s0 + s1;

#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(FULL_MASK, s, o);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) warp_part[wid] = s;
    __syncthreads();
    if (wid == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        s = (lane < nw) ? warp_part[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(FULL_MASK, s, o);
        if (lane == 0) atomicAdd(total, s);
    }
}
