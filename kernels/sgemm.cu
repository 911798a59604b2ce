// Naive SGEMM, row-major: C = alpha * A * B + beta * C with A M x K, B K x N, C M x N.
// One thread per element of C, each a K-long dot product straight from global memory.
// Tolerance: a 1024-term dot product of uniform(-1, 1) values (|sum| ~ 10) is off by ~2e-5
// (at most ~1.2e-4 over 1M outputs, against fp64) whatever the order: atol covers |C| ~ 0.
// @warpforge size M = 1024
// @warpforge size N = 1024
// @warpforge size K = 1024
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge arg alpha = 1.5
// @warpforge arg A: in float[M*K] uniform(-1, 1)
// @warpforge arg B: in float[K*N] uniform(-1, 1)
// @warpforge arg beta = 0.5
// @warpforge arg C: inout float[M*N] uniform(-1, 1)
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16)), block=(16, 16)
// @warpforge tol rtol=1e-4 atol=1e-3
// @warpforge flops 2 * M * N * K + 3 * M * N
// @warpforge bytes (M * K + K * N + 2 * M * N) * sizeof(float)
__global__ void sgemm_naive(int M, int N, int K, float alpha, const float* A,
                            const float* B, float beta, float* C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = alpha * acc + beta * C[row * N + col];
    }
}
