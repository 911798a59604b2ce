// Index macros for row-major A (M x K), B (K x N) and C (M x N), the way many first GEMMs
// ported from C are written.
#define A(i, j) a[(i) * K + (j)]
#define B(i, j) b[(i) * N + (j)]
#define C(i, j) c[(i) * N + (j)]

// SGEMM, C = A * B, row-major, in the style of a first CUDA port: A(i,j)-style index macros,
// a 2D grid of 16x16 blocks with one thread per element of C, and the K-long dot product read
// straight from global memory. A 2048-term dot product of uniform(-1, 1) values (|c| ~ 15)
// moves by ~1e-4 when the sum is reordered: rtol/atol 1e-3 cover it.
// @warpforge size M = 2048
// @warpforge size N = 2048
// @warpforge size K = 2048
// @warpforge arg a: in float[M*K] uniform(-1, 1)
// @warpforge arg b: in float[K*N] uniform(-1, 1)
// @warpforge arg c: out float[M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16)), block=(16, 16)
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * M * N * K
// @warpforge bytes (M * K + K * N + M * N) * sizeof(float)
__global__ void sgemm_macro(const float *a, const float *b, float *c, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;

    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; k++)
            sum += A(row, k) * B(k, col);
        C(row, col) = sum;
    }
}
