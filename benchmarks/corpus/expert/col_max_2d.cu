// Expert batched column max: each block owns 32 columns of one batch entry and 32 row
// lanes (blockDim 32 x 32), so a warp reads one coalesced 128-byte row segment per step
// and 32x as many threads stream the matrix; 4 independent running maxima per thread,
// then a padded shared-memory transpose and a warp-shuffle max. Exact (max is order-free).
typedef float real_t;

// @warpforge size BATCH = 16
// @warpforge size ROWS = 2048
// @warpforge size COLS = 1024
// @warpforge arg in: in float[BATCH*ROWS*COLS] normal(0, 1)
// @warpforge arg out: out float[BATCH*COLS]
// @warpforge arg batch = BATCH
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=(cdiv(COLS, 32), BATCH), block=(32, 32)
// @warpforge tol rtol=0 atol=0
// @warpforge flops BATCH * ROWS * COLS
// @warpforge bytes (BATCH * ROWS * COLS + BATCH * COLS) * sizeof(float)
__global__ void col_max_2d(const real_t* in, real_t* out, int batch, int rows, int cols)
{
    __shared__ real_t part[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * 32 + tx;
    const int b = blockIdx.y;
    if (b >= batch) return;  // uniform per block
    const real_t* __restrict__ mat = in + (size_t)b * rows * cols;

    real_t m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
    if (col < cols) {
        const size_t step = (size_t)32 * cols;
        size_t off = (size_t)ty * cols + col;
        int r = ty;
        for (; r + 96 < rows; r += 128, off += 4 * step) {
            m0 = fmaxf(m0, __ldg(mat + off));
            m1 = fmaxf(m1, __ldg(mat + off + step));
            m2 = fmaxf(m2, __ldg(mat + off + 2 * step));
            m3 = fmaxf(m3, __ldg(mat + off + 3 * step));
        }
        for (; r < rows; r += 32, off += step) m0 = fmaxf(m0, __ldg(mat + off));
    }
    part[ty][tx] = fmaxf(fmaxf(m0, m1), fmaxf(m2, m3));
    __syncthreads();

    real_t v = part[tx][ty];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    const int out_col = blockIdx.x * 32 + ty;
    if (tx == 0 && out_col < cols) out[b * cols + out_col] = v;
}
