#include <math.h>

// Causal attention logits for one batch of H heads: scores[h][i][j] = scale * dot(q[h][i], k[h][j])
// for j <= i, -inf above the diagonal (so a softmax ignores them). Written like a reference
// kernel from a from-scratch transformer repo: one thread per (i, j), heads on blockIdx.z,
// size_t offsets, the head_dim loop straight from global memory.
// @warpforge size H = 8
// @warpforge size S = 2048
// @warpforge size D = 64
// @warpforge arg q: in float[H*S*D] normal(0, 1)
// @warpforge arg k: in float[H*S*D] normal(0, 1)
// @warpforge arg scores: out float[H*S*S]
// @warpforge arg seq_len = S
// @warpforge arg head_dim = D
// @warpforge arg scale = 0.125
// @warpforge launch grid=(cdiv(S, 16), cdiv(S, 16), H), block=(16, 16)
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops H * S * (S + 1) * D
// @warpforge bytes (2 * H * S * D + H * S * S) * sizeof(float)
__global__ void causal_scores(const float* q, const float* k, float* scores, int seq_len, int head_dim, float scale)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;   // key position
    int i = blockIdx.y * blockDim.y + threadIdx.y;   // query position
    int h = blockIdx.z;

    if (i >= seq_len || j >= seq_len) return;

    size_t head_off = (size_t)h * seq_len * head_dim;
    size_t out_idx = ((size_t)h * seq_len + i) * seq_len + j;

    if (j > i) {
        scores[out_idx] = -INFINITY;
        return;
    }

    const float* qi = q + head_off + (size_t)i * head_dim;
    const float* kj = k + head_off + (size_t)j * head_dim;
    float dot = 0.0f;
    for (int d = 0; d < head_dim; d++) {
        dot += qi[d] * kj[d];
    }
    scores[out_idx] = dot * scale;
}
