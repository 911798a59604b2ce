// Row-wise log-sum-exp of an R x C double matrix (one double per row), e.g. a
// log-likelihood normalizer computed in double precision for a statistics code.
// Style: fp64 throughout, int64_t indices, one thread per row, max-shifted two-pass.
#include <stdint.h>
#include <math.h>

// @warpforge size R = 8192
// @warpforge size C = 2048
// @warpforge arg X: in double[R*C] normal(0, 5)
// @warpforge arg lse: out double[R]
// @warpforge arg R = R
// @warpforge arg C = C
// @warpforge launch grid=cdiv(R, 128), block=128
// @warpforge tol rtol=1e-11 atol=1e-12
// @warpforge flops 3 * R * C
// @warpforge bytes (R * C + R) * sizeof(double)
__global__ void logsumexp_rows_f64(const double* X, double* lse, int64_t R, int64_t C)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R) return;
    const double* row = X + i * C;
    double mx = -INFINITY;
    for (int64_t j = 0; j < C; ++j)
        mx = fmax(mx, row[j]);
    double acc = 0.0;
    for (int64_t j = 0; j < C; ++j)
        acc += exp(row[j] - mx);
    lse[i] = mx + log(acc);
}
