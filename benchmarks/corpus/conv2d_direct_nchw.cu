typedef float real;

// Direct 2D convolution (cross-correlation), NCHW input, KCRS 3x3 weights, stride 1, zero
// padding 1, no bias: the "seven nested loops" version from a CNN-from-scratch project, with a
// typedef'd element type, a 3D grid (x, y over output pixels, z over image * output channel).
// Tolerance: 576-term sums (|out| ~ 8) reordered move by ~1e-5.
// @warpforge size N = 16
// @warpforge size C = 64
// @warpforge size H = 56
// @warpforge size W = 56
// @warpforge size K = 64
// @warpforge arg input: in float[N*C*H*W] uniform(-1, 1)
// @warpforge arg weight: in float[K*C*3*3] uniform(-1, 1)
// @warpforge arg output: out float[N*K*H*W]
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(W, 16), cdiv(H, 16), N * K), block=(16, 16)
// @warpforge tol rtol=1e-4 atol=1e-4
// @warpforge flops 2 * N * K * H * W * C * 9
// @warpforge bytes (N * C * H * W + K * C * 9 + N * K * H * W) * sizeof(float)
__global__ void conv2d_3x3_nchw(const real* input, const real* weight, real* output,
                                int N, int C, int H, int W, int K)
{
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.z / K;
    int k = blockIdx.z % K;

    if (ox < W && oy < H && n < N) {
        real sum = 0;
        for (int c = 0; c < C; c++) {
            for (int r = 0; r < 3; r++) {
                for (int s = 0; s < 3; s++) {
                    int iy = oy + r - 1;
                    int ix = ox + s - 1;
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                        sum += input[((n * C + c) * H + iy) * W + ix] * weight[((k * C + c) * 3 + r) * 3 + s];
                    }
                }
            }
        }
        output[((n * K + k) * H + oy) * W + ox] = sum;
    }
}
