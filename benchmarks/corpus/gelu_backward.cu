#include <math.h>

#define GELU_SCALING_FACTOR 0.7978845608f  // sqrt(2 / pi)

// GELU backward (tanh approximation), elementwise: dinp = dout * dGELU/dx at inp.
// The llm.c-like first version: one thread per element, the body inside `if (i < N)`.
// @warpforge size N = 1 << 25
// @warpforge arg dinp: out float[N]
// @warpforge arg inp: in float[N] normal(0, 2)
// @warpforge arg dout: in float[N] normal(0, 1)
// @warpforge arg N = N
// @warpforge launch grid=cdiv(N, 512), block=512
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 18 * N
// @warpforge bytes 3 * N * sizeof(float)
__global__ void gelu_backward(float* dinp, const float* inp, const float* dout, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float coshf_out = coshf(tanh_arg);
        float sech_out = 1.0f / (coshf_out * coshf_out);
        float local_grad = 0.5f * (1.0f + tanh_out)
                         + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local_grad * dout[i];
    }
}
