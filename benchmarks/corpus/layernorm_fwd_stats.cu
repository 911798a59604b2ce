// LayerNorm forward over the rows of an N x C matrix, writing the normalized output
// plus the per-row mean and rstd that the backward pass needs (llm.c-style signature).
// Style: one thread per row, two-pass mean/variance, straightforward serial loops.
#include <math.h>

// Data: bias ~ normal(0, 4) (scale 12) against weight ~ uniform(0.8, 1.2) (scale 1.2), so that the
// verifier's tail check (last 32 elements moved up by 1e4 x scale) cannot make n*w + b cancel to ~0,
// where a reordered mean/variance (~1e-6 off) would exceed any sane rtol.
// @warpforge size N = 16384
// @warpforge size C = 2048
// @warpforge arg out: out float[N*C]
// @warpforge arg mean: out float[N]
// @warpforge arg rstd: out float[N]
// @warpforge arg inp: in float[N*C] normal(0.5, 2)
// @warpforge arg weight: in float[C] uniform(0.8, 1.2)
// @warpforge arg bias: in float[C] normal(0, 4)
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 8 * N * C
// @warpforge bytes (2 * N * C + 2 * C + 2 * N) * sizeof(float)
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd,
                                         const float* inp, const float* weight,
                                         const float* bias, int N, int C)
{
    const float eps = 1e-5f;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        const float* x = inp + idx * C;
        // mean
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;
        // variance
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        // normalize, scale, shift
        float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) {
            float n = s * (x[i] - m);
            out_idx[i] = n * weight[i] + bias[i];
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}
