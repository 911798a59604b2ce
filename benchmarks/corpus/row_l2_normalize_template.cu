// Row-wise L2 normalization, y = x / max(||x||_2, eps), over an R x C matrix
// (e.g. normalizing embeddings before a cosine-similarity search).
// Style: a generic `template <typename T>` kernel, one thread per row, accumulating in T.
#include <math.h>

// @warpforge size R = 16384
// @warpforge size C = 1536
// @warpforge template T = float
// @warpforge arg in: in float[R*C] normal(0, 1)
// @warpforge arg out: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg eps = 1e-12
// @warpforge launch grid=cdiv(R, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-6
// @warpforge flops 3 * R * C
// @warpforge bytes 2 * R * C * sizeof(float)
template <typename T>
__global__ void l2_normalize_rows(const T* in, T* out, int rows, int cols, T eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        T sq = T(0);
        for (int c = 0; c < cols; ++c) {
            T v = in[r * cols + c];
            sq += v * v;
        }
        T norm = sqrt(sq);
        if (norm < eps) norm = eps;
        for (int c = 0; c < cols; ++c) {
            out[r * cols + c] = in[r * cols + c] / norm;
        }
    }
}
