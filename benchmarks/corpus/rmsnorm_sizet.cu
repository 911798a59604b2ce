// RMSNorm over the rows of a rows x dim matrix: y = x / sqrt(mean(x^2) + eps) * w.
// Style: "64-bit safe" code that uses size_t for every size and index, one thread per row,
// the way people write it after being bitten by int overflow on big tensors.
#include <stddef.h>
#include <math.h>

// @warpforge size R = 8192
// @warpforge size D = 4096
// @warpforge arg x: in float[R*D] normal(0, 1)
// @warpforge arg w: in float[D] uniform(0.5, 1.5)
// @warpforge arg y: out float[R*D]
// @warpforge arg rows = R
// @warpforge arg dim = D
// @warpforge arg eps = 1e-6
// @warpforge launch grid=cdiv(R, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * R * D
// @warpforge bytes (2 * R * D + D) * sizeof(float)
__global__ void rmsnorm_kernel(const float* x, const float* w, float* y,
                               size_t rows, size_t dim, float eps)
{
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;

    size_t base = r * dim;
    float ss = 0.0f;
    for (size_t i = 0; i < dim; i++) {
        float v = x[base + i];
        ss += v * v;
    }
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (size_t i = 0; i < dim; i++) {
        y[base + i] = x[base + i] * scale * w[i];
    }
}
