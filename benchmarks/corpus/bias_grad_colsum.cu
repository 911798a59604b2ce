// Bias gradient of a linear layer: dbias[c] = sum over the B rows of dout[b][c] (B x C,
// row-major). Written the way a first backward pass usually is: one thread per column,
// a serial loop down the rows (reads coalesce across threads, but only C threads run).
// Tolerance: a serial float sum of 8192 normal(0, 1) terms (|sum| ~ 90) drifts by ~2e-4
// from a tree-ordered one; atol covers columns whose sum is near zero.
// @warpforge size B = 8192
// @warpforge size C = 4096
// @warpforge arg dout: in float[B*C] normal(0, 1)
// @warpforge arg dbias: out float[C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(C, 256), block=256
// @warpforge tol rtol=1e-4 atol=2e-3
// @warpforge flops B * C
// @warpforge bytes (B * C + C) * sizeof(float)
__global__ void bias_grad_colsum(const float* dout, float* dbias, int B, int C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) {
        sum += dout[b * C + col];
    }
    dbias[col] = sum;
}
