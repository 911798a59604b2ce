// Naive transpose of a ROWS x COLS row-major matrix into COLS x ROWS, one thread per
// element: reads along a row are coalesced, writes are strided by ROWS.
// @warpforge size ROWS = 4096
// @warpforge size COLS = 4096
// @warpforge arg in: in float[ROWS*COLS]
// @warpforge arg out: out float[ROWS*COLS]
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=(cdiv(COLS, 32), cdiv(ROWS, 8)), block=(32, 8)
// @warpforge tol rtol=0 atol=0
// @warpforge bytes 2 * ROWS * COLS * sizeof(float)
__global__ void transpose_naive(const float* in, float* out, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        out[col * rows + row] = in[row * cols + col];
    }
}
