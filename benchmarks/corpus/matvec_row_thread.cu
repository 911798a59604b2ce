// Dense matrix-vector product y = A x, A row-major M x N, one thread per row, like a first
// port of the CPU loop: the body sits in `if (row < M) { }` and a pointer is bumped along the
// row, so the 32 threads of a warp read 32 different rows at once.
// Tolerance: a 4096-term dot product (|y| ~ 20) moves by ~1e-4 when reordered.
// @warpforge size M = 16384
// @warpforge size N = 4096
// @warpforge arg A: in float[M*N] uniform(-1, 1)
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg y: out float[M]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge launch grid=cdiv(M, 256), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * M * N
// @warpforge bytes (M * N + N + M) * sizeof(float)
__global__ void matvec_rows(const float* A, const float* x, float* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        const float* a = A + (size_t)row * N;
        const float* v = x;
        float sum = 0.0f;
        for (int j = 0; j < N; j++) {
            sum += *a++ * *v++;
        }
        y[row] = sum;
    }
}
