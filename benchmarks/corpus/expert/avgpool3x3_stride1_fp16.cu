#include <cuda_fp16.h>

// Hand-tuned 3x3/stride-1 average pooling (zero padding, divide by 9) on NCHW __half: a 32x8
// block owns a 32x32 tile of one plane, stages the 34x34 zero-padded input patch once in shared
// memory (converted to float), and each thread produces 4 outputs from it; the nine taps are
// added in the naive kernel's order, so results match bit for bit.
// @warpforge size N = 32
// @warpforge size C = 64
// @warpforge size H = 64
// @warpforge size W = 64
// @warpforge arg in: in half[N*C*H*W] uniform(-1, 1)
// @warpforge arg out: out half[N*C*H*W]
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge launch grid=(cdiv(W, 32), cdiv(H, 32), N * C), block=(32, 8)
// @warpforge tol rtol=1e-2 atol=1e-3
// @warpforge flops 10 * N * C * H * W
// @warpforge bytes 2 * N * C * H * W * sizeof(half)
__global__ void __launch_bounds__(256) avgpool3x3_fp16(const __half* in, __half* out, int N, int C, int H, int W)
{
    constexpr int TX = 32, TY = 32, PX = TX + 2, PY = TY + 2;
    __shared__ float patch[PY][PX + 1];

    const int plane = blockIdx.z;
    if (plane >= N * C) return;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TX + tx;
    const int x0 = blockIdx.x * TX, y0 = blockIdx.y * TY;
    const __half* p = in + (size_t)plane * H * W;

    for (int e = tid; e < PY * PX; e += TX * 8) {
        const int r = e / PX, s = e % PX;
        const int yy = y0 + r - 1, xx = x0 + s - 1;
        patch[r][s] = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? __half2float(p[yy * W + xx]) : 0.0f;
    }
    __syncthreads();

    const int x = x0 + tx;
    if (x >= W) return;
    __half* o = out + (size_t)plane * H * W;
#pragma unroll
    for (int q = 0; q < TY / 8; ++q) {
        const int ly = ty + 8 * q;
        const int y = y0 + ly;
        if (y >= H) break;
        float sum = 0.0f;
#pragma unroll
        for (int dy = 0; dy < 3; ++dy)
#pragma unroll
            for (int dx = 0; dx < 3; ++dx) sum += patch[ly + dy][tx + dx];
        o[y * W + x] = __float2half(sum / 9.0f);
    }
}
