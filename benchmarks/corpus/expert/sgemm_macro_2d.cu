// Hand-tuned SGEMM, C = A * B, row-major: 128x128 block tiles, BK=8 slices of A (stored
// transposed) and B double-buffered in shared memory, an 8x8 register tile per thread read as
// float4 from shared memory, 128-bit global loads and stores when K and N allow (scalar,
// zero-filled loads and guarded stores for ragged edges). Each c[i][j] still sums k in order.
// @warpforge size M = 2048
// @warpforge size N = 2048
// @warpforge size K = 2048
// @warpforge arg a: in float[M*K] uniform(-1, 1)
// @warpforge arg b: in float[K*N] uniform(-1, 1)
// @warpforge arg c: out float[M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(N, 128), cdiv(M, 128)), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
// @warpforge flops 2 * M * N * K
// @warpforge bytes (M * K + K * N + M * N) * sizeof(float)
__global__ void __launch_bounds__(256) sgemm_macro(const float *a, const float *b, float *c, int M, int N, int K)
{
    // Block tile of C (BM x BN), the K-slice staged per step (BK) and the per-thread register
    // tile (TM x TN): 256 threads as a 16 x 16 grid of 8x8 micro-tiles.
    constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int bm = blockIdx.y * BM;
    const int bn = blockIdx.x * BN;

    // 128-bit paths need every row start 16-byte aligned.
    const bool vec = ((K & 3) == 0) && ((N & 3) == 0) &&
                     ((((size_t)a) | ((size_t)b) | ((size_t)c)) & 15) == 0;

    // vector-path load coordinates: one float4 of A and one of B per thread per slice
    const int a_row = tid >> 1, a_k = (tid & 1) * 4;
    const int b_k = tid >> 5, b_col = (tid & 31) * 4;

    float ra[4], rb[4];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    auto load_tile = [&](int k0) {
        if (vec) {
            int gr = bm + a_row, gk = k0 + a_k;
            if (gr < M && gk < K) {
                float4 v = *reinterpret_cast<const float4*>(a + (size_t)gr * K + gk);
                ra[0] = v.x; ra[1] = v.y; ra[2] = v.z; ra[3] = v.w;
            } else {
                ra[0] = ra[1] = ra[2] = ra[3] = 0.0f;
            }
            int gkb = k0 + b_k, gc = bn + b_col;
            if (gkb < K && gc < N) {
                float4 v = *reinterpret_cast<const float4*>(b + (size_t)gkb * N + gc);
                rb[0] = v.x; rb[1] = v.y; rb[2] = v.z; rb[3] = v.w;
            } else {
                rb[0] = rb[1] = rb[2] = rb[3] = 0.0f;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int e = tid + i * 256;
                int r = e >> 3, kk = e & 7;
                int gr = bm + r, gk = k0 + kk;
                ra[i] = (gr < M && gk < K) ? a[(size_t)gr * K + gk] : 0.0f;
                int kb = e >> 7, cc = e & 127;
                int gkb = k0 + kb, gc = bn + cc;
                rb[i] = (gkb < K && gc < N) ? b[(size_t)gkb * N + gc] : 0.0f;
            }
        }
    };
    auto store_tile = [&](int buf) {
        if (vec) {
#pragma unroll
            for (int i = 0; i < 4; ++i) As[buf][a_k + i][a_row] = ra[i];
            *reinterpret_cast<float4*>(&Bs[buf][b_k][b_col]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int e = tid + i * 256;
                As[buf][e & 7][e >> 3] = ra[i];
                Bs[buf][e >> 7][e & 127] = rb[i];
            }
        }
    };

    const int ntiles = (K + BK - 1) / BK;
    load_tile(0);
    store_tile(0);
    __syncthreads();

    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < ntiles) load_tile((t + 1) * BK);   // global loads in flight during the math

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float4 a0 = *reinterpret_cast<const float4*>(&As[cur][kk][ty * 4]);
            float4 a1 = *reinterpret_cast<const float4*>(&As[cur][kk][ty * 4 + 64]);
            float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx * 4]);
            float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx * 4 + 64]);
            float ar[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float br[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }

        if (t + 1 < ntiles) store_tile(cur ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gr = bm + ty * 4 + (i & 3) + (i >> 2) * 64;
        if (gr >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gc = bn + tx * 4 + h * 64;
            float* dst = c + (size_t)gr * N + gc;
            if (vec) {
                if (gc < N)
                    *reinterpret_cast<float4*>(dst) =
                        make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (gc + j < N) dst[j] = acc[i][h * 4 + j];
            }
        }
    }
}
