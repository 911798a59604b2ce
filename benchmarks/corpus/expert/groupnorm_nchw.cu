// GroupNorm forward (NCHW) -- hand-optimized drop-in for corpus/groupnorm_nchw.cu:
// one 512-thread block per (n, group). In NCHW a group is one contiguous run of
// cpg*HW floats, so the block streams it coalesced (float4 when HW % 4 == 0), gathers
// sum and sum of squares in one pass (fp64 accumulation, so no cancellation), reduces
// with warp shuffles, then applies the per-channel affine in a second coalesced pass.
#include <math.h>
#include <stdint.h>

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Data: bias ~ normal(0, 4) (scale 12) against weight ~ uniform(0.8, 1.2) (scale 1.2), so that the
// verifier's tail check (last 32 elements moved up by 1e4 x scale) cannot make n*w + b cancel to ~0,
// where a reordered mean/variance (~1e-6 off) would exceed any sane rtol.
// @warpforge size NB = 16
// @warpforge size G = 32 fixed
// @warpforge size CG = 8
// @warpforge size H = 64
// @warpforge size W = 64
// @warpforge arg x: in float[NB*G*CG*H*W] normal(1, 2)
// @warpforge arg gamma: in float[G*CG] uniform(0.8, 1.2)
// @warpforge arg beta: in float[G*CG] normal(0, 4)
// @warpforge arg y: out float[NB*G*CG*H*W]
// @warpforge arg N = NB
// @warpforge arg C = G * CG
// @warpforge arg HW = H * W
// @warpforge arg groups = G
// @warpforge arg eps = 1e-5
// @warpforge launch grid=NB * G, block=512
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 8 * NB * G * CG * H * W
// @warpforge bytes (2 * NB * G * CG * H * W + 2 * G * CG) * sizeof(float)
__global__ void __launch_bounds__(512) group_norm_nchw_kernel(const float* x, const float* gamma,
                                                              const float* beta, float* y, int N, int C,
                                                              int HW, int groups, float eps)
{
    __shared__ double red_s[32], red_q[32];
    __shared__ float s_stats[2];

    const int ng = blockIdx.x;
    if (ng >= N * groups) return;  // block-uniform
    const int n = ng / groups;
    const int g = ng % groups;
    const int cpg = C / groups;
    const int c0 = g * cpg;
    const size_t base = ((size_t)n * C + c0) * HW;
    const size_t count = (size_t)cpg * HW;
    const float* __restrict__ xg = x + base;
    float* __restrict__ yg = y + base;
    const bool vec = ((HW & 3) == 0) && ((((uintptr_t)x) | ((uintptr_t)y)) & 15) == 0;

    // pass 1: sum and sum of squares over the whole contiguous group
    double s = 0.0, q = 0.0;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xg);
        const size_t n4 = count >> 2;
        for (size_t i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = __ldg(x4 + i);
            float ps = (v.x + v.y) + (v.z + v.w);
            float pq = (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
            s += ps;
            q += pq;
        }
    } else {
        for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
            float v = __ldg(xg + i);
            s += v;
            q += (double)v * v;
        }
    }
    s = warp_sum_d(s);
    q = warp_sum_d(q);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { red_s[wid] = s; red_q[wid] = q; }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        double ts = 0.0, tq = 0.0;
        for (int i = 0; i < nw; i++) { ts += red_s[i]; tq += red_q[i]; }
        double mu = ts / (double)count;
        double var = tq / (double)count - mu * mu;
        if (var < 0.0) var = 0.0;
        s_stats[0] = (float)mu;
        s_stats[1] = rsqrtf((float)var + eps);
    }
    __syncthreads();
    const float mu = s_stats[0];
    const float inv_std = s_stats[1];

    // pass 2: per-channel affine, channel by channel so (a, b) are computed once per channel
    for (int c = 0; c < cpg; c++) {
        const float a = __ldg(gamma + c0 + c) * inv_std;
        const float b = __ldg(beta + c0 + c) - mu * a;
        const float* xc = xg + (size_t)c * HW;
        float* yc = yg + (size_t)c * HW;
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xc);
            float4* y4 = reinterpret_cast<float4*>(yc);
            for (int i = threadIdx.x; i < (HW >> 2); i += blockDim.x) {
                float4 v = __ldcs(x4 + i);
                v.x = v.x * a + b; v.y = v.y * a + b; v.z = v.z * a + b; v.w = v.w * a + b;
                __stcs(y4 + i, v);
            }
        } else {
            for (int i = threadIdx.x; i < HW; i += blockDim.x)
                yc[i] = __ldcs(xc + i) * a + b;
        }
    }
}
