// sqrt(2 / pi), the constant of the tanh approximation of GELU.
#define GELU_SCALING_FACTOR 0.7978845608f

// GELU, tanh approximation: out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))),
// elementwise over n floats, one thread per element.
// @warpforge size N = 1 << 25
// @warpforge arg inp: in float[N] normal(0, 2)
// @warpforge arg out: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 9 * N
// @warpforge bytes 2 * N * sizeof(float)
__global__ void gelu_forward(const float* inp, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
}
