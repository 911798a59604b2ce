// Dot product -- hand-optimized drop-in for corpus/dot_product_gridstride.cu: grid-stride
// float4 loads of both vectors (scalar tail), per-thread FMA accumulation, warp-shuffle and
// shared-memory block reduction, and one atomicAdd per block (about 1k atomics, not 262k).
#include <stdint.h>

#define FULL_MASK 0xffffffffu

// Tolerance: normally ~1e-5 relative between runs. The verifier's tail check moves the last 32
// elements of a and b up by 1e4, so 32 products of ~1e8 dominate a total of ~3.2e9 (ulp 256):
// a float accumulator that already holds them absorbs later partials of ~32 entirely, so the
// naive result can lose up to ~0.3 % depending on atomic order. rtol=1e-2 covers that and still
// catches any version that skips the tail (which would be off by ~100 %).
// @warpforge size N = 1 << 25
// @warpforge arg a: in float[N] uniform(0, 1)
// @warpforge arg b: in float[N] uniform(0, 1)
// @warpforge arg result: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=min(cdiv(N, 256 * 4), 132 * 8), block=256
// @warpforge tol rtol=1e-2 atol=1e-2
// @warpforge flops 2 * N
// @warpforge bytes 2 * N * sizeof(float)
__global__ void __launch_bounds__(256) dot_kernel(const float* a, const float* b, float* result, int n)
{
    __shared__ float warp_part[32];
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = blockDim.x * gridDim.x;

    float acc = 0.0f;
    int done = 0;
    if (((((uintptr_t)a) | ((uintptr_t)b)) & 15) == 0) {
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        const int n4 = n >> 2;
        for (int i = tid; i < n4; i += stride) {
            float4 u = __ldcs(a4 + i), v = __ldcs(b4 + i);
            acc = fmaf(u.x, v.x, acc);
            acc = fmaf(u.y, v.y, acc);
            acc = fmaf(u.z, v.z, acc);
            acc = fmaf(u.w, v.w, acc);
        }
        done = n4 << 2;
    }
    for (int i = done + tid; i < n; i += stride)
        acc = fmaf(a[i], b[i], acc);

#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(FULL_MASK, acc, o);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) warp_part[wid] = acc;
    __syncthreads();
    if (wid == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        acc = (lane < nw) ? warp_part[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            acc += __shfl_xor_sync(FULL_MASK, acc, o);
        if (lane == 0) atomicAdd(result, acc);
    }
}
