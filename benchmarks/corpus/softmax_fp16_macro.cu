// Row-wise softmax over a B x C matrix of __half (attention-probability style), fp32 math.
// Style: macro-heavy C-like code -- IDX() for 2D indexing, H2F/F2H conversion macros --
// one thread per row, converting every element to float and accumulating in float.
#include <cuda_fp16.h>

#define IDX(r, c) ((r) * (C) + (c))
#define H2F(x) __half2float(x)
#define F2H(x) __float2half(x)

// @warpforge size B = 32768
// @warpforge size C = 1024
// @warpforge arg src: in half[B*C] normal(0, 2)
// @warpforge arg dst: out half[B*C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(B, 256), block=256
// @warpforge tol rtol=1e-2 atol=1e-6
// @warpforge flops 5 * B * C
// @warpforge bytes 2 * B * C * sizeof(half)
__global__ void softmax_half_rows(const __half* src, __half* dst, int B, int C)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B) return;

    float mx = H2F(src[IDX(r, 0)]);
    for (int c = 1; c < C; c++)
        mx = fmaxf(mx, H2F(src[IDX(r, c)]));

    float denom = 0.0f;
    for (int c = 0; c < C; c++)
        denom += __expf(H2F(src[IDX(r, c)]) - mx);

    for (int c = 0; c < C; c++)
        dst[IDX(r, c)] = F2H(__expf(H2F(src[IDX(r, c)]) - mx) / denom);
}
