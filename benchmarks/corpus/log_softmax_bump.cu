// Row-wise log-softmax over an N x D float matrix, one thread per row.
// Style: pointer bumping -- the thread advances its input/output pointers to the start of
// its row (`x += row * D;`) and then indexes with the column alone, as in many C ports.
#include <math.h>

// @warpforge size N = 16384
// @warpforge size D = 2048
// @warpforge arg x: in float[N*D] normal(0, 3)
// @warpforge arg y: out float[N*D]
// @warpforge arg N = N
// @warpforge arg D = D
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 4 * N * D
// @warpforge bytes 2 * N * D * sizeof(float)
__global__ void log_softmax_forward(const float* x, float* y, int N, int D)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;

    x += (long)row * D;
    y += (long)row * D;

    float m = x[0];
    for (int i = 1; i < D; ++i)
        m = fmaxf(m, x[i]);

    float s = 0.f;
    for (int i = 0; i < D; ++i)
        s += expf(x[i] - m);

    float lse = m + logf(s);
    for (int i = 0; i < D; ++i)
        y[i] = x[i] - lse;
}
