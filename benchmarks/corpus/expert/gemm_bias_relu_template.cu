// Hand-tuned templated linear layer, Y = relu(X * W^T + bias): both operands are K-contiguous,
// so 128x16 slices of X and W are loaded along K (coalesced), stored transposed and padded in
// double-buffered shared memory, and each thread keeps 64 accumulators in registers; the next
// slice is prefetched into registers during the math, and bias + ReLU are applied on the way out.
// @warpforge size M = 2048
// @warpforge size N = 2048
// @warpforge size K = 2048
// @warpforge template T = float
// @warpforge arg X: in float[M*K] uniform(-1, 1)
// @warpforge arg W: in float[N*K] uniform(-1, 1)
// @warpforge arg bias: in float[N] uniform(-1, 1)
// @warpforge arg Y: out float[M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(N, 128), cdiv(M, 128)), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * M * N * K + 2 * M * N
// @warpforge bytes (M * K + N * K + N + M * N) * sizeof(float)
template <typename T>
__global__ void __launch_bounds__(256) linear_bias_relu(const T* X, const T* W, const T* bias, T* Y, int M, int N, int K)
{
    // Block tile 128 x 128 of Y, K consumed 16 at a time; 256 threads, each an 8x8 sub-grid of
    // outputs spaced 16 apart so that shared-memory reads are broadcast or conflict-free.
    constexpr int LB_BM = 128, LB_BN = 128, LB_BK = 16;
    __shared__ T Xs[2][LB_BK][LB_BM + 1];
    __shared__ T Ws[2][LB_BK][LB_BN + 1];

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int bm = blockIdx.y * LB_BM;
    const int bn = blockIdx.x * LB_BN;

    T rx[8], rw[8];
    T acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = T(0);

    auto load = [&](int k0) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int e = tid + t * 256;
            const int r = e >> 4, kk = k0 + (e & 15);
            const bool kin = kk < K;
            rx[t] = (kin && bm + r < M) ? X[(size_t)(bm + r) * K + kk] : T(0);
            rw[t] = (kin && bn + r < N) ? W[(size_t)(bn + r) * K + kk] : T(0);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int e = tid + t * 256;
            Xs[buf][e & 15][e >> 4] = rx[t];
            Ws[buf][e & 15][e >> 4] = rw[t];
        }
    };

    const int ntiles = (K + LB_BK - 1) / LB_BK;
    load(0);
    store(0);
    __syncthreads();

    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < ntiles) load((t + 1) * LB_BK);

#pragma unroll
        for (int kk = 0; kk < LB_BK; ++kk) {
            T xv[8], wv[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) xv[i] = Xs[cur][kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 8; ++j) wv[j] = Ws[cur][kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += xv[i] * wv[j];
        }

        if (t + 1 < ntiles) store(cur ^ 1);
        __syncthreads();
    }

    T bv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int n = bn + tx + 16 * j;
        bv[j] = n < N ? bias[n] : T(0);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = bm + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int n = bn + tx + 16 * j;
            if (n < N) {
                T v = acc[i][j] + bv[j];
                Y[(size_t)m * N + n] = v > T(0) ? v : T(0);
            }
        }
    }
}

