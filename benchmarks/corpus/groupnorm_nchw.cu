// GroupNorm forward on an NCHW float tensor (G groups of CG channels each), with a
// per-channel affine weight/bias. Style: one thread per (n, group) pair, nested
// c / h*w loops with hand-computed NCHW offsets, as in a first port of a PyTorch CPU loop.
#include <math.h>

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
// @warpforge launch grid=cdiv(NB * G, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 8 * NB * G * CG * H * W
// @warpforge bytes (2 * NB * G * CG * H * W + 2 * G * CG) * sizeof(float)
__global__ void group_norm_nchw_kernel(const float* x, const float* gamma, const float* beta,
                                       float* y, int N, int C, int HW, int groups, float eps)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= N * groups) return;

    int n = tid / groups;
    int g = tid % groups;
    int cpg = C / groups;
    int c0 = g * cpg;
    float count = (float)(cpg * HW);

    float sum = 0.0f;
    for (int c = c0; c < c0 + cpg; c++) {
        for (int i = 0; i < HW; i++) {
            sum += x[((long)n * C + c) * HW + i];
        }
    }
    float mu = sum / count;

    float var = 0.0f;
    for (int c = c0; c < c0 + cpg; c++) {
        for (int i = 0; i < HW; i++) {
            float d = x[((long)n * C + c) * HW + i] - mu;
            var += d * d;
        }
    }
    float inv_std = rsqrtf(var / count + eps);

    for (int c = c0; c < c0 + cpg; c++) {
        float a = gamma[c] * inv_std;
        float b = beta[c] - mu * a;
        for (int i = 0; i < HW; i++) {
            long off = ((long)n * C + c) * HW + i;
            y[off] = x[off] * a + b;
        }
    }
}
