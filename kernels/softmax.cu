#include <math.h>

// Row-wise softmax over a B x C matrix, one thread per row: the thread finds the row's
// max, writes exp(x - max) while summing it, then divides the row by the sum.
// @warpforge size B = 4096
// @warpforge size C = 1024
// @warpforge arg inp: in float[B*C] normal(0, 2)
// @warpforge arg out: out float[B*C]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(B, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 5 * B * C
// @warpforge bytes 2 * B * C * sizeof(float)
__global__ void softmax_rows(const float* inp, float* out, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) {
        return;
    }
    const float* x = inp + row * cols;
    float* y = out + row * cols;

    float maxval = -INFINITY;
    for (int j = 0; j < cols; j++) {
        maxval = fmaxf(maxval, x[j]);
    }

    float sum = 0.0f;
    for (int j = 0; j < cols; j++) {
        y[j] = expf(x[j] - maxval);
        sum += y[j];
    }

    for (int j = 0; j < cols; j++) {
        y[j] /= sum;
    }
}
