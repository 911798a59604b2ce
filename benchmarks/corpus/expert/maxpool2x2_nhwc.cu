// Hand-tuned 2x2/stride-2 max pooling in NHWC with argmax output: when C is a multiple of 4 (and
// the buffers are 16-byte aligned) each thread handles 4 channels of one output pixel with
// float4 loads and float4/int4 stores; otherwise one channel per thread. The window is scanned
// in the same order with the same strict '>' as the naive kernel, so ties pick the same index.
// @warpforge size N = 32
// @warpforge size H = 112
// @warpforge size W = 112
// @warpforge size C = 64
// @warpforge arg in: in float[N*H*W*C] normal(0, 1)
// @warpforge arg out: out float[N*(H/2)*(W/2)*C]
// @warpforge arg argmax: out int[N*(H/2)*(W/2)*C]
// @warpforge arg N = N
// @warpforge arg H = H
// @warpforge arg W = W
// @warpforge arg C = C
// @warpforge launch grid=cdiv(N * (H/2) * (W/2) * C, 1024), block=256
// @warpforge tol rtol=0 atol=0
// @warpforge flops 3 * N * (H/2) * (W/2) * C
// @warpforge bytes (N * H * W * C + 2 * N * (H/2) * (W/2) * C) * sizeof(float)
__global__ void __launch_bounds__(256) maxpool2x2_nhwc(const float* in, float* out, int* argmax, int N, int H, int W, int C)
{
    const int OH = H / 2, OW = W / 2;
    const long pixels = (long)N * OH * OW;
    const long stride = (long)blockDim.x * gridDim.x;
    const long start = (long)blockIdx.x * blockDim.x + threadIdx.x;

    const bool vec = (C & 3) == 0 && ((((size_t)in) | ((size_t)out) | ((size_t)argmax)) & 15) == 0;
    if (vec) {
        const int C4 = C >> 2;
        const long total4 = pixels * C4;
        for (long i = start; i < total4; i += stride) {
            const int c4 = (int)(i % C4);
            const long pix = i / C4;
            const int ow = (int)(pix % OW);
            const long t = pix / OW;
            const int oh = (int)(t % OH);
            const long n = t / OH;
            const int h0 = 2 * oh, w0 = 2 * ow;

            const float4* p = reinterpret_cast<const float4*>(in + ((n * H + h0) * W + w0) * C) + c4;
            const long rowstep = (long)W * C4;
            const float4 v[4] = {p[0], p[C4], p[rowstep], p[rowstep + C4]};
            const int idx[4] = {h0 * W + w0, h0 * W + w0 + 1, (h0 + 1) * W + w0, (h0 + 1) * W + w0 + 1};

            float4 best = v[0];
            int4 bi = make_int4(idx[0], idx[0], idx[0], idx[0]);
#pragma unroll
            for (int q = 1; q < 4; ++q) {
                if (v[q].x > best.x) { best.x = v[q].x; bi.x = idx[q]; }
                if (v[q].y > best.y) { best.y = v[q].y; bi.y = idx[q]; }
                if (v[q].z > best.z) { best.z = v[q].z; bi.z = idx[q]; }
                if (v[q].w > best.w) { best.w = v[q].w; bi.w = idx[q]; }
            }
            reinterpret_cast<float4*>(out)[i] = best;
            reinterpret_cast<int4*>(argmax)[i] = bi;
        }
    } else {
        const long total = pixels * C;
        for (long i = start; i < total; i += stride) {
            const int c = (int)(i % C);
            const long pix = i / C;
            const int ow = (int)(pix % OW);
            const long t = pix / OW;
            const int oh = (int)(t % OH);
            const long n = t / OH;
            const int h0 = 2 * oh, w0 = 2 * ow;

            const float* p = in + ((n * H + h0) * W + w0) * C + c;
            const long rowstep = (long)W * C;
            const float v[4] = {p[0], p[C], p[rowstep], p[rowstep + C]};
            const int idx[4] = {h0 * W + w0, h0 * W + w0 + 1, (h0 + 1) * W + w0, (h0 + 1) * W + w0 + 1};
            float best = v[0];
            int bi = idx[0];
#pragma unroll
            for (int q = 1; q < 4; ++q)
                if (v[q] > best) { best = v[q]; bi = idx[q]; }
            out[i] = best;
            argmax[i] = bi;
        }
    }
}
