#include <math.h>

// Hand-tuned causal attention logits: each 256-thread block owns a 64x64 tile of one head's
// score matrix; tiles entirely above the diagonal only store -inf, the others stage 64x32
// slices of Q and K (transposed, padded against bank conflicts) in shared memory and each
// thread accumulates a 4x4 register tile, head_dim in the same order as the naive loop.
// @warpforge size H = 8
// @warpforge size S = 2048
// @warpforge size D = 64
// @warpforge arg q: in float[H*S*D] normal(0, 1)
// @warpforge arg k: in float[H*S*D] normal(0, 1)
// @warpforge arg scores: out float[H*S*S]
// @warpforge arg seq_len = S
// @warpforge arg head_dim = D
// @warpforge arg scale = 0.125
// @warpforge launch grid=(cdiv(S, 64), cdiv(S, 64), H), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops H * S * (S + 1) * D
// @warpforge bytes (2 * H * S * D + H * S * S) * sizeof(float)
__global__ void __launch_bounds__(256) causal_scores(const float* q, const float* k, float* scores, int seq_len, int head_dim, float scale)
{
    // Output tile (TI query rows x TJ key rows) per block, head_dim consumed in DK-wide slices.
    constexpr int TI = 64, TJ = 64, DK = 32;
    __shared__ float Qs[DK][TI + 1];
    __shared__ float Ks[DK][TJ + 1];

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int j0 = blockIdx.x * TJ;
    const int i0 = blockIdx.y * TI;
    const int h = blockIdx.z;

    float* out = scores + (size_t)h * seq_len * seq_len;

    if (j0 > i0 + TI - 1) {
        // every (i, j) of this tile has j > i: masked. 64 consecutive floats per row.
        for (int e = tid; e < TI * TJ; e += 256) {
            const int i = i0 + (e >> 6), j = j0 + (e & 63);
            if (i < seq_len && j < seq_len) out[(size_t)i * seq_len + j] = -INFINITY;
        }
        return;
    }

    const float* qh = q + (size_t)h * seq_len * head_dim;
    const float* kh = k + (size_t)h * seq_len * head_dim;

    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;

    for (int d0 = 0; d0 < head_dim; d0 += DK) {
#pragma unroll
        for (int t = 0; t < (TI * DK) / 256; ++t) {
            const int e = tid + t * 256;
            const int r = e >> 5, d = e & 31;
            const int gd = d0 + d;
            const int gi = i0 + r, gj = j0 + r;
            Qs[d][r] = (gi < seq_len && gd < head_dim) ? qh[(size_t)gi * head_dim + gd] : 0.0f;
            Ks[d][r] = (gj < seq_len && gd < head_dim) ? kh[(size_t)gj * head_dim + gd] : 0.0f;
        }
        __syncthreads();

#pragma unroll 8
        for (int d = 0; d < DK; ++d) {
            float qv[4], kv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) qv[r] = Qs[d][ty + 16 * r];
#pragma unroll
            for (int c = 0; c < 4; ++c) kv[c] = Ks[d][tx + 16 * c];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(qv[r], kv[c], acc[r][c]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int i = i0 + ty + 16 * r;
        if (i >= seq_len) continue;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int j = j0 + tx + 16 * c;
            if (j < seq_len) out[(size_t)i * seq_len + j] = (j > i) ? -INFINITY : acc[r][c] * scale;
        }
    }
}
