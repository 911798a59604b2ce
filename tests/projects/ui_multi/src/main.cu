// The host program: sizes, scalars and launches of the kernels in kernels.cu.
#include <cuda_runtime.h>
#include "real.h"

__global__ void apply_op(real* out, const real* in, int n, real a, Op op);

int main()
{
    const int n = 1 << 22;
    real* in = nullptr;
    real* out = nullptr;
    cudaMalloc(&in, n * sizeof(real));
    cudaMalloc(&out, n * sizeof(real));
    apply_op<<<(n + 255) / 256, 256>>>(out, in, n, 0.5f, OP_SCALE);
    cudaDeviceSynchronize();
    cudaFree(in);
    cudaFree(out);
    return 0;
}
