// Hand-tuned strided batched SGEMM: blockIdx.z picks the problem, A and B slices staged through
// double-buffered shared memory (A transposed, padded), register prefetch of the next slice
// while the current one is multiplied, 4x4 outputs per thread; ragged M/N/K edges are
// zero-filled on load and guarded on store.
// @warpforge size BATCH = 32
// @warpforge size M = 512
// @warpforge size N = 512
// @warpforge size K = 512
// @warpforge arg A: in float[BATCH*M*K] uniform(-1, 1)
// @warpforge arg B: in float[BATCH*K*N] uniform(-1, 1)
// @warpforge arg C: out float[BATCH*M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge arg strideA = M * K
// @warpforge arg strideB = K * N
// @warpforge arg strideC = M * N
// @warpforge arg batch = BATCH
// @warpforge launch grid=(cdiv(N, 64), cdiv(M, 64), BATCH), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * BATCH * M * N * K
// @warpforge bytes BATCH * (M * K + K * N + M * N) * sizeof(float)
__global__ void __launch_bounds__(256) batched_sgemm_strided(const float* A, const float* B, float* C, int M, int N, int K,
                                      long long strideA, long long strideB, long long strideC, int batch)
{
    // Each block computes a 64x64 tile of one C[p], stepping K by 16; 256 threads, each owning a
    // 4x4 sub-grid of outputs spaced 16 apart (conflict-free shared-memory reads).
    constexpr int TILE_M = 64, TILE_N = 64, TILE_K = 16;
    __shared__ float As[2][TILE_K][TILE_M + 1];
    __shared__ float Bs[2][TILE_K][TILE_N];

    const int p = blockIdx.z;
    if (p >= batch) return;

    const float* Ap = A + p * strideA;
    const float* Bp = B + p * strideB;
    float* Cp = C + p * strideC;

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int bm = blockIdx.y * TILE_M;
    const int bn = blockIdx.x * TILE_N;

    float ra[4], rb[4];
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = tid + i * 256;
            const int ar = bm + (e >> 4), ak = k0 + (e & 15);
            ra[i] = (ar < M && ak < K) ? Ap[(long long)ar * K + ak] : 0.0f;
            const int bk = k0 + (e >> 6), bc = bn + (e & 63);
            rb[i] = (bk < K && bc < N) ? Bp[(long long)bk * N + bc] : 0.0f;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = tid + i * 256;
            As[buf][e & 15][e >> 4] = ra[i];
            Bs[buf][e >> 6][e & 63] = rb[i];
        }
    };

    const int ntiles = (K + TILE_K - 1) / TILE_K;
    load(0);
    store(0);
    __syncthreads();

    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < ntiles) load((t + 1) * TILE_K);

#pragma unroll
        for (int kk = 0; kk < TILE_K; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = As[cur][kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[cur][kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }

        if (t + 1 < ntiles) store(cur ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = bm + ty + 16 * i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = bn + tx + 16 * j;
            if (col < N) Cp[(long long)row * N + col] = acc[i][j];
        }
    }
}
