// Expert bias gradient (column sum of a B x C matrix). Each block owns 32 columns and
// 32 row lanes (blockDim 32 x 32): a warp reads one 128-byte row segment per step, so
// every load is coalesced, and 32x as many threads stream the matrix as in the naive
// version. Each thread keeps 4 independent partial sums (loads in flight), the 32 row
// partials of a column are combined through padded shared memory and a warp shuffle.
// Deterministic, no atomics, every dbias[c] written exactly once.
// @warpforge size B = 8192
// @warpforge size C = 4096
// @warpforge arg dout: in float[B*C] normal(0, 1)
// @warpforge arg dbias: out float[C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(C, 32), block=(32, 32)
// @warpforge tol rtol=1e-4 atol=2e-3
// @warpforge flops B * C
// @warpforge bytes (B * C + C) * sizeof(float)
__global__ void bias_grad_colsum(const float* dout, float* dbias, int B, int C)
{
    __shared__ float part[32][33];
    const int tx = threadIdx.x;          // column within the tile
    const int ty = threadIdx.y;          // row lane
    const int col = blockIdx.x * 32 + tx;
    const float* __restrict__ p = dout;

    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    if (col < C) {
        const size_t step = (size_t)32 * C;
        size_t off = (size_t)ty * C + col;
        int b = ty;
        for (; b + 96 < B; b += 128, off += 4 * step) {
            s0 += __ldg(p + off);
            s1 += __ldg(p + off + step);
            s2 += __ldg(p + off + 2 * step);
            s3 += __ldg(p + off + 3 * step);
        }
        for (; b < B; b += 32, off += step) {
            s0 += __ldg(p + off);
        }
    }
    part[ty][tx] = (s0 + s1) + (s2 + s3);
    __syncthreads();

    // warp ty reduces column ty of the tile: lane l holds the partial of row lane l
    float v = part[tx][ty];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int out_col = blockIdx.x * 32 + ty;
    if (tx == 0 && out_col < C) dbias[out_col] = v;
}
