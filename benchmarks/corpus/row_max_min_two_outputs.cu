// Per-row maximum and minimum of an R x C matrix in one sweep (e.g. for a per-row
// quantization range), written to two separate outputs.
// Style: `typedef float real_t;` element type, one thread per row, both extrema tracked
// in a single loop with if/else-if updates.

typedef float real_t;

// @warpforge size R = 16384
// @warpforge size C = 2048
// @warpforge arg data: in float[R*C] normal(0, 10)
// @warpforge arg row_max: out float[R]
// @warpforge arg row_min: out float[R]
// @warpforge arg R = R
// @warpforge arg C = C
// @warpforge launch grid=cdiv(R, 256), block=256
// @warpforge tol rtol=0 atol=0
// @warpforge flops 2 * R * C
// @warpforge bytes (R * C + 2 * R) * sizeof(float)
__global__ void row_minmax(const real_t* data, real_t* row_max, real_t* row_min, int R, int C)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) {
        real_t hi = data[r * C];
        real_t lo = data[r * C];
        for (int c = 1; c < C; c++) {
            real_t v = data[r * C + c];
            if (v > hi) hi = v;
            else if (v < lo) lo = v;
        }
        row_max[r] = hi;
        row_min[r] = lo;
    }
}
