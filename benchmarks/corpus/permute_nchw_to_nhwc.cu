// Layout conversion of an activation tensor from NCHW to NHWC (dst[n][h][w][c] = src[n][c][h][w]),
// as written in inference-engine glue code: a flat 1D grid over the output, the NHWC coordinates
// recovered with / and %, size_t offsets; writes coalesced, reads strided by H*W.
// @warpforge size N = 32
// @warpforge size C = 64
// @warpforge size H = 56
// @warpforge size W = 56
// @warpforge arg src: in float[N*C*H*W] uniform(-1, 1)
// @warpforge arg dst: out float[N*H*W*C]
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge launch grid=cdiv(N * C * H * W, 256), block=256
// @warpforge tol rtol=0 atol=0
// @warpforge bytes 2 * N * C * H * W * sizeof(float)
__global__ void nchw_to_nhwc(const float* src, float* dst, int N, int C, int H, int W)
{
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)N * C * H * W;
    if (idx >= total) return;

    // idx walks the NHWC output: c fastest, then w, h, n
    size_t t = idx;
    int c = t % C;  t /= C;
    int w = t % W;  t /= W;
    int h = t % H;  t /= H;
    int n = (int)t;

    dst[idx] = src[(((size_t)n * C + c) * H + h) * W + w];
}
