// Per-channel mean of an N x C x H x W activation (the first half of a BatchNorm
// statistics pass), as a quick port of a CPU loop nest: one thread per channel walks
// every image and every pixel of its plane. Neighbouring threads read H*W floats apart.
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
// @warpforge launch grid=cdiv(C, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops N * C * H * W + C
// @warpforge bytes (N * C * H * W + C) * sizeof(float)
__global__ void channel_mean_nchw(const float* x, float* mean, int N, int C, int H, int W)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) {
        int hw = H * W;
        float acc = 0.0f;
        for (int n = 0; n < N; ++n) {
            const float* plane = x + ((size_t)n * C + c) * hw;
            for (int i = 0; i < hw; ++i) {
                acc += plane[i];
            }
        }
        mean[c] = acc / (float)(N * hw);
    }
}
