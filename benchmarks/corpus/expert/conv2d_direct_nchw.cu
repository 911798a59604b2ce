typedef float real;

// Hand-tuned direct 3x3 convolution, NCHW / KCRS, stride 1, zero padding 1: a 16x16 block owns a
// 16x16 output tile for 8 output channels at once; for each group of 4 input channels it stages
// the 18x18 zero-padded input patches and the 8x4x9 weights (channel-innermost, read as float4)
// in shared memory, and each thread keeps 8 accumulators. Per output the sum still runs over
// c, then r, then s, as in the naive loop.
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
// @warpforge launch grid=(cdiv(W, 16), cdiv(H, 16), N * cdiv(K, 8)), block=(16, 16)
// @warpforge tol rtol=1e-4 atol=1e-4
// @warpforge flops 2 * N * K * H * W * C * 9
// @warpforge bytes (N * C * H * W + K * C * 9 + N * K * H * W) * sizeof(float)
__global__ void __launch_bounds__(256) conv2d_3x3_nchw(const real* input, const real* weight, real* output,
                                int N, int C, int H, int W, int K)
{
    constexpr int T = 16;          // output tile edge
    constexpr int P = T + 2;       // input patch edge (halo 1)
    constexpr int KT = 8;          // output channels per block
    constexpr int CT = 4;          // input channels staged per step
    __shared__ real patch[CT][P][P];
    __shared__ __align__(16) real wts[CT][9][KT];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * T + tx;
    const int kblocks = (K + KT - 1) / KT;
    const int n = blockIdx.z / kblocks;
    const int k0 = (blockIdx.z % kblocks) * KT;
    const int ox0 = blockIdx.x * T, oy0 = blockIdx.y * T;
    if (n >= N) return;

    real acc[KT];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) acc[kk] = 0;

    for (int c0 = 0; c0 < C; c0 += CT) {
        for (int e = tid; e < CT * P * P; e += T * T) {
            const int ci = e / (P * P), rem = e % (P * P);
            const int r = rem / P, s = rem % P;
            const int c = c0 + ci, iy = oy0 + r - 1, ix = ox0 + s - 1;
            real v = 0;
            if (c < C && iy >= 0 && iy < H && ix >= 0 && ix < W)
                v = input[((size_t)(n * C + c) * H + iy) * W + ix];
            patch[ci][r][s] = v;
        }
        for (int e = tid; e < CT * 9 * KT; e += T * T) {
            const int kk = e / (CT * 9), rem = e % (CT * 9);   // rem = ci * 9 + tap: weight-contiguous reads
            const int ci = rem / 9, tap = rem % 9;
            const int k = k0 + kk, c = c0 + ci;
            wts[ci][tap][kk] = (k < K && c < C) ? weight[((size_t)k * C + c) * 9 + tap] : real(0);
        }
        __syncthreads();

#pragma unroll
        for (int ci = 0; ci < CT; ++ci) {
#pragma unroll
            for (int r = 0; r < 3; ++r) {
#pragma unroll
                for (int s = 0; s < 3; ++s) {
                    const real x = patch[ci][ty + r][tx + s];
                    const float4 w0 = *reinterpret_cast<const float4*>(&wts[ci][r * 3 + s][0]);
                    const float4 w1 = *reinterpret_cast<const float4*>(&wts[ci][r * 3 + s][4]);
                    acc[0] += x * w0.x; acc[1] += x * w0.y; acc[2] += x * w0.z; acc[3] += x * w0.w;
                    acc[4] += x * w1.x; acc[5] += x * w1.y; acc[6] += x * w1.z; acc[7] += x * w1.w;
                }
            }
        }
        __syncthreads();
    }

    const int ox = ox0 + tx, oy = oy0 + ty;
    if (ox < W && oy < H) {
#pragma unroll
        for (int kk = 0; kk < KT; ++kk)
            if (k0 + kk < K) output[((size_t)(n * K + k0 + kk) * H + oy) * W + ox] = acc[kk];
    }
}
