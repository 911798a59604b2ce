#include <stdint.h>

// Expert clip-by-norm scaling in double: the clip coefficient is read and computed once
// per thread, blocks return at once when no clipping is needed (coef >= 1 leaves grad
// untouched), and each thread scales 2 doubles with one 128-bit double2 load/store
// (scalar for the odd tail or an unaligned buffer). Same multiply as the naive kernel.
// @warpforge size N = 1 << 24
// @warpforge arg grad: inout double[N] normal(0, 1)
// @warpforge arg total_norm: in double[1] uniform(2, 8)
// @warpforge arg max_norm = 1.0
// @warpforge arg n = N
// @warpforge launch grid=cdiv(cdiv(N, 2), 256), block=256
// @warpforge tol rtol=1e-12 atol=1e-14
// @warpforge flops N
// @warpforge bytes 2 * N * sizeof(double)
__global__ void clip_grad_scale(double* grad, const double* total_norm, double max_norm, long n)
{
    const double clip_coef = max_norm / (__ldg(total_norm) + 1e-6);
    if (!(clip_coef < 1.0)) return;
    const long base = 2 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (base >= n) return;
    if ((reinterpret_cast<uintptr_t>(grad) & 15) == 0 && base + 1 < n) {
        double2 g = *reinterpret_cast<double2*>(grad + base);
        g.x = g.x * clip_coef;
        g.y = g.y * clip_coef;
        *reinterpret_cast<double2*>(grad + base) = g;
    } else {
        for (long i = base; i < n && i < base + 2; ++i) grad[i] = grad[i] * clip_coef;
    }
}
