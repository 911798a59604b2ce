// Hand-tuned bilinear 2x upsampling (half-pixel centres, align_corners=False): one thread per
// INPUT pixel of a 32x8 tile produces the 2x2 outputs it maps to, from its clamped 3x3
// neighbourhood loaded once; a 3D grid (x, y, plane) removes all integer division, and each
// output row pair is written with float2 stores. Coordinates and weights are computed with the
// naive kernel's formulas.
// @warpforge size NC = 512
// @warpforge size H = 128
// @warpforge size W = 128
// @warpforge arg in: in float[NC*H*W] uniform(-1, 1)
// @warpforge arg out: out float[NC*(2*H)*(2*W)]
// @warpforge arg planes = NC
// @warpforge arg in_h = H
// @warpforge arg in_w = W
// @warpforge launch grid=(cdiv(W, 32), cdiv(H, 8), NC), block=(32, 8)
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 9 * NC * 4 * H * W
// @warpforge bytes 5 * NC * H * W * sizeof(float)
__global__ void __launch_bounds__(256) upsample_bilinear2x(const float* in, float* out, int planes, int in_h, int in_w)
{
    const int ix = blockIdx.x * blockDim.x + threadIdx.x;
    const int iy = blockIdx.y * blockDim.y + threadIdx.y;
    const int p = blockIdx.z;
    if (ix >= in_w || iy >= in_h || p >= planes) return;

    const int out_w = in_w * 2;
    const int out_h = in_h * 2;
    const float* src = in + (size_t)p * in_h * in_w;
    float* dst = out + (size_t)p * out_h * out_w;

    // source coordinate, corners and weight of output o along an axis of length n (naive formulas)
    int a0[2], a1[2], b0[2], b1[2];
    float la[2], lb[2];
#pragma unroll
    for (int d = 0; d < 2; ++d) {
        const int oy = 2 * iy + d, ox = 2 * ix + d;
        float sy = (oy + 0.5f) * 0.5f - 0.5f;
        float sx = (ox + 0.5f) * 0.5f - 0.5f;
        if (sy < 0.0f) sy = 0.0f;
        if (sx < 0.0f) sx = 0.0f;
        a0[d] = (int)sy;
        b0[d] = (int)sx;
        a1[d] = a0[d] + 1 < in_h ? a0[d] + 1 : in_h - 1;
        b1[d] = b0[d] + 1 < in_w ? b0[d] + 1 : in_w - 1;
        la[d] = sy - a0[d];
        lb[d] = sx - b0[d];
    }

    // the clamped 3x3 neighbourhood, each value loaded once
    const int ym = iy > 0 ? iy - 1 : 0, yp = iy + 1 < in_h ? iy + 1 : in_h - 1;
    const int xm = ix > 0 ? ix - 1 : 0, xp = ix + 1 < in_w ? ix + 1 : in_w - 1;
    const int ys[3] = {ym, iy, yp}, xs[3] = {xm, ix, xp};
    float nb[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int s = 0; s < 3; ++s) nb[r][s] = src[ys[r] * in_w + xs[s]];

    // corner rows/cols are always among {iy-1, iy, iy+1} (clamped): pick them by value
    auto at = [&](int y, int x) {
        const int r = (y == ym) ? 0 : (y == iy ? 1 : 2);
        const int s = (x == xm) ? 0 : (x == ix ? 1 : 2);
        return nb[r][s];
    };

    const bool vec = (((size_t)out) & 7) == 0;
#pragma unroll
    for (int dy = 0; dy < 2; ++dy) {
        float res[2];
#pragma unroll
        for (int dx = 0; dx < 2; ++dx) {
            const float lx = lb[dx], ly = la[dy];
            const float top = (1.0f - lx) * at(a0[dy], b0[dx]) + lx * at(a0[dy], b1[dx]);
            const float bot = (1.0f - lx) * at(a1[dy], b0[dx]) + lx * at(a1[dy], b1[dx]);
            res[dx] = (1.0f - ly) * top + ly * bot;
        }
        float* o = dst + (size_t)(2 * iy + dy) * out_w + 2 * ix;
        if (vec) {
            *reinterpret_cast<float2*>(o) = make_float2(res[0], res[1]);
        } else {
            o[0] = res[0];
            o[1] = res[1];
        }
    }
}
