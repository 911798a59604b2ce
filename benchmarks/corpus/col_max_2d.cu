// Column max of a batch of row-major matrices: out[b][c] = max over r of in[b][r][c].
// Imitates code with a scalar typedef and a 2D grid (x: columns, y: batch entry), one
// thread per output column looping down the rows.
typedef float real_t;

// @warpforge size BATCH = 16
// @warpforge size ROWS = 2048
// @warpforge size COLS = 1024
// @warpforge arg in: in float[BATCH*ROWS*COLS] normal(0, 1)
// @warpforge arg out: out float[BATCH*COLS]
// @warpforge arg batch = BATCH
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=(cdiv(COLS, 128), BATCH), block=(128, 1)
// @warpforge tol rtol=0 atol=0
// @warpforge flops BATCH * ROWS * COLS
// @warpforge bytes (BATCH * ROWS * COLS + BATCH * COLS) * sizeof(float)
__global__ void col_max_2d(const real_t* in, real_t* out, int batch, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (col < cols && b < batch) {
        const real_t* mat = in + (size_t)b * rows * cols;
        real_t m = mat[col];
        for (int r = 1; r < rows; r++) {
            real_t v = mat[(size_t)r * cols + col];
            if (v > m) m = v;
        }
        out[b * cols + col] = m;
    }
}
