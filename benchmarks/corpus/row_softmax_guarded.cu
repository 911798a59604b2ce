// Row-wise softmax over a B x C float matrix, one thread per row.
// Style: the classic first-draft tutorial kernel -- the whole body sits inside
// `if (row < B) { ... }` and makes three serial passes over the row (max, sum, write).
#include <math.h>

// @warpforge size B = 16384
// @warpforge size C = 1024
// @warpforge arg input: in float[B*C] normal(0, 2)
// @warpforge arg output: out float[B*C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(B, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-6
// @warpforge flops 5 * B * C
// @warpforge bytes 2 * B * C * sizeof(float)
__global__ void softmax_kernel(const float* input, float* output, int B, int C)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < B) {
        float maxval = -INFINITY;
        for (int j = 0; j < C; j++) {
            if (input[row * C + j] > maxval) {
                maxval = input[row * C + j];
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            sum += expf(input[row * C + j] - maxval);
        }
        for (int j = 0; j < C; j++) {
            output[row * C + j] = expf(input[row * C + j] - maxval) / sum;
        }
    }
}
