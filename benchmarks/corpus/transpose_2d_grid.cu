// Out-of-place matrix transpose B = A^T of a rows x cols row-major float matrix, written the
// obvious way: a 2D grid of 16x16 blocks, one thread per element, reads along a row of A are
// coalesced and the writes into B jump by `rows` floats.
// @warpforge size ROWS = 4096
// @warpforge size COLS = 8192
// @warpforge arg A: in float[ROWS*COLS] uniform(-1, 1)
// @warpforge arg B: out float[COLS*ROWS]
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=(cdiv(COLS, 16), cdiv(ROWS, 16)), block=(16, 16)
// @warpforge tol rtol=0 atol=0
// @warpforge bytes 2 * ROWS * COLS * sizeof(float)
__global__ void transpose_naive(const float* A, float* B, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols)
        B[col * rows + row] = A[row * cols + col];
}
