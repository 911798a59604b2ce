// 1D convolution (cross-correlation, as in deep learning) of n floats with a k-tap filter,
// centred, zero padding at the borders: out[i] = sum_j filter[j] * inp[i + j - k/2].
// One thread per output; every tap is read from global memory.
// @warpforge size N = 1 << 25
// @warpforge size K = 9 odd=7
// @warpforge arg inp: in float[N] uniform(-1, 1)
// @warpforge arg filter: in float[K] uniform(-1, 1)
// @warpforge arg out: out float[N]
// @warpforge arg n = N
// @warpforge arg k = K
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 2 * N * K
// @warpforge bytes (2 * N + K) * sizeof(float)
__global__ void conv1d(const float* inp, const float* filter, float* out, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int half = k / 2;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        int idx = i + j - half;
        if (idx >= 0 && idx < n) {
            acc += filter[j] * inp[idx];
        }
    }
    out[i] = acc;
}
