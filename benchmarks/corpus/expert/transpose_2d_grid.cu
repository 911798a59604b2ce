// Hand-tuned out-of-place transpose B = A^T: a 32x8 block moves a 32x32 tile through shared
// memory padded to 33 columns (no bank conflicts on the column-wise read), so both the loads
// from A and the stores into B are coalesced 128-byte rows; ragged edge tiles are guarded.
// @warpforge size ROWS = 4096
// @warpforge size COLS = 8192
// @warpforge arg A: in float[ROWS*COLS] uniform(-1, 1)
// @warpforge arg B: out float[COLS*ROWS]
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=(cdiv(COLS, 32), cdiv(ROWS, 32)), block=(32, 8)
// @warpforge tol rtol=0 atol=0
// @warpforge bytes 2 * ROWS * COLS * sizeof(float)
__global__ void __launch_bounds__(256) transpose_naive(const float* A, float* B, int rows, int cols)
{
    constexpr int TILE = 32, STEP = 8;
    __shared__ float tile[TILE][TILE + 1];

    const int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TILE + tx;
    int row = blockIdx.y * TILE + ty;
#pragma unroll
    for (int k = 0; k < TILE; k += STEP)
        if (col < cols && row + k < rows)
            tile[ty + k][tx] = A[(size_t)(row + k) * cols + col];
    __syncthreads();

    // B is cols x rows: its tile row is A's tile column
    const int out_col = blockIdx.y * TILE + tx;   // index along rows of A
    const int out_row = blockIdx.x * TILE + ty;   // index along cols of A
#pragma unroll
    for (int k = 0; k < TILE; k += STEP)
        if (out_col < rows && out_row + k < cols)
            B[(size_t)(out_row + k) * rows + out_col] = tile[tx][ty + k];
}
