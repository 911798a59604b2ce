#include <stdint.h>

// Expert per-channel mean of an N x C x H x W tensor: one 512-thread block per channel.
// The block's threads stream the channel's N planes as one flattened range, 16-byte
// float4 loads when H*W is a multiple of 4 and x is 16-byte aligned (every plane is then
// aligned), scalar loads otherwise; warp-shuffle + shared-memory block reduction.
// @warpforge size N = 32
// @warpforge size C = 256
// @warpforge size H = 56
// @warpforge size W = 56
// @warpforge arg x: in float[N*C*H*W] normal(0.5, 1)
// @warpforge arg mean: out float[C]
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge launch grid=C, block=512
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops N * C * H * W + C
// @warpforge bytes (N * C * H * W + C) * sizeof(float)
__global__ void channel_mean_nchw(const float* x, float* mean, int N, int C, int H, int W)
{
    const int c = blockIdx.x;
    if (c >= C) return;  // uniform per block
    const int hw = H * W;
    const float* __restrict__ base = x + (size_t)c * hw;
    const size_t plane_stride = (size_t)C * hw;

    float a0 = 0.f, a1 = 0.f;
    if ((hw & 3) == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
        const int hw4 = hw >> 2;
        const int total = N * hw4;
        for (int k = threadIdx.x; k < total; k += blockDim.x) {
            const int n = k / hw4;
            const int i = k - n * hw4;
            const float4 v = __ldg(reinterpret_cast<const float4*>(base + n * plane_stride) + i);
            a0 += v.x + v.y;
            a1 += v.z + v.w;
        }
    } else {
        const int total = N * hw;
        for (int k = threadIdx.x; k < total; k += blockDim.x) {
            const int n = k / hw;
            const int i = k - n * hw;
            a0 += __ldg(base + n * plane_stride + i);
        }
    }
    float acc = a0 + a1;

    __shared__ float warp_sums[32];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        const int nwarps = (blockDim.x + 31) >> 5;
        acc = lane < nwarps ? warp_sums[lane] : 0.f;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) mean[c] = acc / (float)(N * hw);
    }
}
