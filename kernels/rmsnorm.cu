// Threads per block; must be a power of two (the tree reduction halves it).
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

// RMSNorm over the rows of a B x C matrix: out = x / sqrt(mean(x^2) + eps) * weight.
// One block per row: the block sums x^2 in shared memory, then scales the row.
// @warpforge size B = 8192
// @warpforge size C = 4096
// @warpforge tune BLOCK_SIZE = 256, 128, 512, 1024
// @warpforge arg inp: in float[B*C] normal(0, 1)
// @warpforge arg weight: in float[C] uniform(0.5, 1.5)
// @warpforge arg out: out float[B*C]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge arg eps = 1e-6
// @warpforge launch grid=B, block=BLOCK_SIZE
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 4 * B * C
// @warpforge bytes (2 * B * C + C) * sizeof(float)
__global__ void rmsnorm_rows(const float* inp, const float* weight, float* out,
                             int rows, int cols, float eps)
{
    __shared__ float ssum[BLOCK_SIZE];

    int row = blockIdx.x;
    int tid = threadIdx.x;
    if (row >= rows) {
        return;  // the whole block leaves together, before any __syncthreads
    }
    const float* x = inp + row * cols;
    float* y = out + row * cols;

    float sum = 0.0f;
    for (int j = tid; j < cols; j += BLOCK_SIZE) {
        sum += x[j] * x[j];
    }
    ssum[tid] = sum;
    __syncthreads();

    for (int s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s) {
            ssum[tid] += ssum[tid + s];
        }
        __syncthreads();
    }

    float scale = rsqrtf(ssum[0] / cols + eps);
    for (int j = tid; j < cols; j += BLOCK_SIZE) {
        y[j] = x[j] * scale * weight[j];
    }
}
