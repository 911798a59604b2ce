// Row sums of an R x C float matrix (one float per row).
// Style: rows indexed through a 2D grid -- the developer split the row count over
// gridDim.x * gridDim.y to stay under a grid-size limit and flattens it back by hand.

// @warpforge size R = 32768
// @warpforge size C = 1024
// @warpforge arg mat: in float[R*C] uniform(0, 1)
// @warpforge arg sums: out float[R]
// @warpforge arg R = R
// @warpforge arg C = C
// @warpforge launch grid=(16, cdiv(R, 16 * 256)), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
// @warpforge flops R * C
// @warpforge bytes (R * C + R) * sizeof(float)
__global__ void row_sum_kernel(const float* mat, float* sums, int R, int C)
{
    int row = blockIdx.y * gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x;
    if (row < R) {
        float acc = 0.0f;
        for (int c = 0; c < C; c++) {
            acc += mat[row * C + c];
        }
        sums[row] = acc;
    }
}
