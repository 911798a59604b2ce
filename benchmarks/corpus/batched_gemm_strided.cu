// Strided batched SGEMM, C[p] = A[p] * B[p] for `batch` row-major problems stored at fixed
// element strides (the cublasSgemmStridedBatched layout). blockIdx.z picks the problem, the
// strides arrive as 64-bit scalar arguments, one thread per output with early returns.
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
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16), BATCH), block=(16, 16)
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * BATCH * M * N * K
// @warpforge bytes BATCH * (M * K + K * N + M * N) * sizeof(float)
__global__ void batched_sgemm_strided(const float* A, const float* B, float* C, int M, int N, int K,
                                      long long strideA, long long strideB, long long strideC, int batch)
{
    int p = blockIdx.z;
    if (p >= batch) return;

    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;

    const float* Ap = A + p * strideA;
    const float* Bp = B + p * strideB;
    float* Cp = C + p * strideC;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += Ap[row * K + k] * Bp[k * N + col];
    }
    Cp[row * N + col] = acc;
}
