#include "real.h"

__global__ void axpy(real* y, const real* x, real a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void scale_rows(float* out, const float* m, const float* w, int rows, int cols) {
    int r = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        if (r < rows) out[r * cols + c] = m[r * cols + c] * w[c];
    }
}
