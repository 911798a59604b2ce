#include <cuda_runtime.h>
#include "include/real.h"

__global__ void axpy(real* y, const real* x, real a, int n);

int main() {
    int n = 1 << 22;
    float a = 0.5f;
    real *d_x, *d_y;
    cudaMalloc(&d_x, n * sizeof(real));
    cudaMalloc(&d_y, n * sizeof(real));
    axpy<<<cdiv(n, 256), 256>>>(d_y, d_x, a, n);
    cudaDeviceSynchronize();
    return 0;
}
