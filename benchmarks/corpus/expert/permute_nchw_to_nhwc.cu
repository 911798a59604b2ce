// Hand-tuned NCHW -> NHWC: per image the permute is a transpose of a C x (H*W) matrix, so a 32x8
// block moves a 32 (channels) x 32 (pixels) tile through padded shared memory; reads are
// coalesced along H*W, writes along C, no division in the index math.
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
// @warpforge launch grid=(cdiv(H * W, 32), cdiv(C, 32), N), block=(32, 8)
// @warpforge tol rtol=0 atol=0
// @warpforge bytes 2 * N * C * H * W * sizeof(float)
__global__ void __launch_bounds__(256) nchw_to_nhwc(const float* src, float* dst, int N, int C, int H, int W)
{
    constexpr int TILE = 32, STEP = 8;
    __shared__ float tile[TILE][TILE + 1];

    const int n = blockIdx.z;
    if (n >= N) return;
    const int HW = H * W;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int p0 = blockIdx.x * TILE;   // pixel (h*W + w) tile origin
    const int c0 = blockIdx.y * TILE;   // channel tile origin

    const float* s = src + (size_t)n * C * HW;
    float* d = dst + (size_t)n * HW * C;

    const int p = p0 + tx;
#pragma unroll
    for (int k = 0; k < TILE; k += STEP) {
        const int c = c0 + ty + k;
        if (c < C && p < HW) tile[ty + k][tx] = s[(size_t)c * HW + p];
    }
    __syncthreads();

    const int c = c0 + tx;
#pragma unroll
    for (int k = 0; k < TILE; k += STEP) {
        const int pp = p0 + ty + k;
        if (pp < HW && c < C) d[(size_t)pp * C + c] = tile[tx][ty + k];
    }
}
