// Row-wise argmax of an M x N float matrix (e.g. greedy decoding over logits): one int per row.
// Style: one thread per row, a "best value / best index" pair updated with a strict `>`
// so the first maximum wins and a -FLT_MAX sentinel, plain `i * N + j` indexing.
#include <float.h>

// @warpforge size M = 16384
// @warpforge size N = 2048
// @warpforge arg scores: in float[M*N] normal(0, 1)
// @warpforge arg indices: out int[M]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge launch grid=cdiv(M, 256), block=256
// @warpforge tol rtol=0 atol=0
// @warpforge flops M * N
// @warpforge bytes (M * N + M) * sizeof(float)
__global__ void argmax_rows(const float* scores, int* indices, int M, int N)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i >= M) return;
    float best = -FLT_MAX;
    int best_j = 0;
    for (int j = 0; j < N; j++) {
        float v = scores[i * N + j];
        if (v > best) {
            best = v;
            best_j = j;
        }
    }
    indices[i] = best_j;
}
