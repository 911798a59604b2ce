// im2col for a 2D convolution (one image, CHANNELS x HEIGHT x WIDTH, square kernel):
// data_col[(c * K * K + kh * K + kw) * (h_col * w_col) + h * w_col + w]. Caffe-style:
// a CUDA_KERNEL_LOOP grid-stride macro, one thread per (channel, output pixel) column
// looping over the K x K window and writing zeros in the padding.
#define CUDA_KERNEL_LOOP(i, n) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

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
// @warpforge launch grid=cdiv(CH * HC * WC, 512), block=512
// @warpforge tol rtol=0 atol=0
// @warpforge flops 0
// @warpforge bytes (CH * HEIGHT * WIDTH + CH * K * K * HC * WC) * sizeof(float)
__global__ void im2col_gpu_kernel(const int n, const float* data_im, const int height,
                                  const int width, const int ksize, const int pad,
                                  const int stride, const int height_col, const int width_col,
                                  float* data_col)
{
    CUDA_KERNEL_LOOP(index, n) {
        int w_out = index % width_col;
        int h_index = index / width_col;
        int h_out = h_index % height_col;
        int channel_in = h_index / height_col;
        int channel_out = channel_in * ksize * ksize;
        int h_in = h_out * stride - pad;
        int w_in = w_out * stride - pad;
        float* data_col_ptr = data_col;
        data_col_ptr += (channel_out * height_col + h_out) * width_col + w_out;
        const float* data_im_ptr = data_im;
        data_im_ptr += (channel_in * height + h_in) * width + w_in;
        for (int i = 0; i < ksize; ++i) {
            for (int j = 0; j < ksize; ++j) {
                int h = h_in + i;
                int w = w_in + j;
                *data_col_ptr = (h >= 0 && w >= 0 && h < height && w < width) ?
                    data_im_ptr[i * width + j] : 0.0f;
                data_col_ptr += height_col * width_col;
            }
        }
    }
}
