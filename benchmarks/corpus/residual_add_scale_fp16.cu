#include <cuda_fp16.h>

// Scaled residual add in half precision: out = a + alpha * b (e.g. a residual stream
// plus a scaled branch). The straightforward fp16 version: one thread per element,
// convert each half to float, add, convert back.
// @warpforge size N = 1 << 26
// @warpforge arg a: in half[N] normal(0, 1)
// @warpforge arg b: in half[N] normal(0, 1)
// @warpforge arg out: out half[N]
// @warpforge arg alpha = 0.5
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-2 atol=1e-3
// @warpforge flops 2 * N
// @warpforge bytes 3 * N * sizeof(half)
__global__ void residual_add_scale_fp16(const __half* a, const __half* b, __half* out,
                                        float alpha, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float av = __half2float(a[idx]);
        float bv = __half2float(b[idx]);
        out[idx] = __float2half(av + alpha * bv);
    }
}
