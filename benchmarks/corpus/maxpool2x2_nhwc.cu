#include <float.h>

// 2x2 max pooling, stride 2, NHWC layout, returning the max and its argmax (h * W + w within
// the input plane, like max_pool2d(..., return_indices=True)): two outputs, a grid-stride loop
// over the output elements launched with a fixed grid, as in many PyTorch extension kernels.
// @warpforge size N = 32
// @warpforge size H = 112
// @warpforge size W = 112
// @warpforge size C = 64
// @warpforge arg in: in float[N*H*W*C] normal(0, 1)
// @warpforge arg out: out float[N*(H/2)*(W/2)*C]
// @warpforge arg argmax: out int[N*(H/2)*(W/2)*C]
// @warpforge arg N = N
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge arg C = C
// @warpforge launch grid=1024, block=256
// @warpforge tol rtol=0 atol=0
// @warpforge flops 3 * N * (H/2) * (W/2) * C
// @warpforge bytes (N * H * W * C + 2 * N * (H/2) * (W/2) * C) * sizeof(float)
__global__ void maxpool2x2_nhwc(const float* in, float* out, int* argmax, int N, int H, int W, int C)
{
    int OH = H / 2;
    int OW = W / 2;
    int total = N * OH * OW * C;

    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += blockDim.x * gridDim.x) {
        int c = i % C;
        int ow = (i / C) % OW;
        int oh = (i / (C * OW)) % OH;
        int n = i / (C * OW * OH);

        float best = -FLT_MAX;
        int best_idx = -1;
        for (int dy = 0; dy < 2; dy++) {
            for (int dx = 0; dx < 2; dx++) {
                int h = oh * 2 + dy;
                int w = ow * 2 + dx;
                float v = in[((n * H + h) * W + w) * C + c];
                if (v > best || best_idx < 0) {
                    best = v;
                    best_idx = h * W + w;
                }
            }
        }
        out[i] = best;
        argmax[i] = best_idx;
    }
}
