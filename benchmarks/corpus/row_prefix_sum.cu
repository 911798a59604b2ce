// Inclusive prefix sum along each row of a rows x cols matrix (torch.cumsum(x, dim=1)), one
// thread per row doing the serial CPU loop with a running total and long offsets, so a warp's
// 32 threads touch 32 rows that lie cols floats apart.
// Tolerance: row sums reach ~1000; a serial against a blocked summation order differs by a few ulp.
// @warpforge size ROWS = 16384
// @warpforge size COLS = 2048
// @warpforge arg in: in float[ROWS*COLS] uniform(0, 1)
// @warpforge arg out: out float[ROWS*COLS]
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=cdiv(ROWS, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops ROWS * COLS
// @warpforge bytes 2 * ROWS * COLS * sizeof(float)
__global__ void row_inclusive_scan(const float* in, float* out, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        long base = (long)row * cols;
        float running = 0.0f;
        for (int j = 0; j < cols; j++) {
            running += in[base + j];
            out[base + j] = running;
        }
    }
}
