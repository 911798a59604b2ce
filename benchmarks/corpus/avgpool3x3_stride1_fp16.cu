#include <cuda_fp16.h>

// 3x3 average pooling, stride 1, zero padding 1, count_include_pad (always divided by 9), on an
// NCHW __half tensor; accumulates in float. Written like a mixed-precision port of a float
// kernel: __half2float on every load, a 2D grid over the plane and one plane per blockIdx.z.
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
// @warpforge launch grid=(cdiv(W, 32), cdiv(H, 8), N * C), block=(32, 8)
// @warpforge tol rtol=1e-2 atol=1e-3
// @warpforge flops 10 * N * C * H * W
// @warpforge bytes 2 * N * C * H * W * sizeof(half)
__global__ void avgpool3x3_fp16(const __half* in, __half* out, int N, int C, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int plane = blockIdx.z;
    if (x >= W || y >= H || plane >= N * C) return;

    const __half* p = in + (size_t)plane * H * W;
    float sum = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
            int yy = y + dy;
            int xx = x + dx;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W)
                sum += __half2float(p[yy * W + xx]);
        }
    }
    out[(size_t)plane * H * W + y * W + x] = __float2half(sum / 9.0f);
}
