// Bilinear 2x upsampling of NCHW float planes with half-pixel centres (F.interpolate with
// mode="bilinear", align_corners=False): a 1D grid-stride loop with `long` indices over the
// output, the source coordinate, corner indices and weights recomputed for every output pixel.
// @warpforge size NC = 512
// @warpforge size H = 128
// @warpforge size W = 128
// @warpforge arg in: in float[NC*H*W] uniform(-1, 1)
// @warpforge arg out: out float[NC*(2*H)*(2*W)]
// @warpforge arg planes = NC
// @warpforge arg in_h = H
// @warpforge arg in_w = W
// @warpforge launch grid=cdiv(NC * 4 * H * W, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 9 * NC * 4 * H * W
// @warpforge bytes 5 * NC * H * W * sizeof(float)
__global__ void upsample_bilinear2x(const float* in, float* out, int planes, int in_h, int in_w)
{
    int out_h = in_h * 2;
    int out_w = in_w * 2;
    long total = (long)planes * out_h * out_w;

    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)blockDim.x * gridDim.x) {
        int ox = i % out_w;
        int oy = (i / out_w) % out_h;
        long p = i / ((long)out_w * out_h);

        float sy = (oy + 0.5f) * 0.5f - 0.5f;
        float sx = (ox + 0.5f) * 0.5f - 0.5f;
        if (sy < 0.0f) sy = 0.0f;
        if (sx < 0.0f) sx = 0.0f;
        int y0 = (int)sy;
        int x0 = (int)sx;
        int y1 = y0 + 1 < in_h ? y0 + 1 : in_h - 1;
        int x1 = x0 + 1 < in_w ? x0 + 1 : in_w - 1;
        float ly = sy - y0;
        float lx = sx - x0;

        const float* src = in + p * in_h * in_w;
        float top = (1.0f - lx) * src[y0 * in_w + x0] + lx * src[y0 * in_w + x1];
        float bot = (1.0f - lx) * src[y1 * in_w + x0] + lx * src[y1 * in_w + x1];
        out[i] = (1.0f - ly) * top + ly * bot;
    }
}
