// Expert im2col: one thread per element of data_col on a 3D grid (x: output column
// chunk, y: output row, z: channel * K * K + kernel offset), so there is no integer
// division per element, every thread issues one load and one store, and both are
// coalesced along the output row (the K * K overlapping reads of an image row hit cache).
// @warpforge size CH = 64
// @warpforge size HEIGHT = 256
// @warpforge size WIDTH = 256
// @warpforge size K = 3 fixed
// @warpforge size PAD = 1 fixed
// @warpforge size STRIDE = 1 fixed
// @warpforge size HC = (HEIGHT + 2 * PAD - K) / STRIDE + 1 fixed
// @warpforge size WC = (WIDTH + 2 * PAD - K) / STRIDE + 1 fixed
// @warpforge arg n = CH * HC * WC
// @warpforge arg data_im: in float[CH*HEIGHT*WIDTH] uniform(-1, 1)
// @warpforge arg height = HEIGHT
// @warpforge arg width = WIDTH
// @warpforge arg ksize = K
// @warpforge arg pad = PAD
// @warpforge arg stride = STRIDE
// @warpforge arg height_col = HC
// @warpforge arg width_col = WC
// @warpforge arg data_col: out float[CH*K*K*HC*WC]
// @warpforge launch grid=(cdiv(WC, 128), HC, CH * K * K), block=128
// @warpforge tol rtol=0 atol=0
// @warpforge flops 0
// @warpforge bytes (CH * HEIGHT * WIDTH + CH * K * K * HC * WC) * sizeof(float)
__global__ void im2col_gpu_kernel(const int n, const float* data_im, const int height,
                                  const int width, const int ksize, const int pad,
                                  const int stride, const int height_col, const int width_col,
                                  float* data_col)
{
    const int w_out = blockIdx.x * blockDim.x + threadIdx.x;
    const int h_out = blockIdx.y;
    const int kk = ksize * ksize;
    const int row = blockIdx.z;                 // channel_in * K * K + kh * K + kw
    const int channel_in = row / kk;            // per block, not per element
    const int kh = (row - channel_in * kk) / ksize;
    const int kw = row - channel_in * kk - kh * ksize;
    if (w_out >= width_col || h_out >= height_col || channel_in * height_col * width_col >= n) return;
    const int h = h_out * stride - pad + kh;
    const int w = w_out * stride - pad + kw;
    float v = 0.0f;
    if (h >= 0 && w >= 0 && h < height && w < width)
        v = __ldg(data_im + ((size_t)channel_in * height + h) * width + w);
    data_col[((size_t)row * height_col + h_out) * width_col + w_out] = v;
}
