#include <math.h>
#include <stdint.h>

#define GELU_SCALING_FACTOR 0.7978845608f  // sqrt(2 / pi)

__device__ __forceinline__ float gelu_grad(float x, float g)
{
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
    float tanh_out = tanhf(tanh_arg);
    float coshf_out = coshf(tanh_arg);
    float sech_out = 1.0f / (coshf_out * coshf_out);
    float local_grad = 0.5f * (1.0f + tanh_out)
                     + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    return local_grad * g;
}

// Expert GELU backward (tanh approximation): each thread handles 4 consecutive elements
// with 128-bit float4 loads/stores when all three pointers are 16-byte aligned and the
// 4 elements are in range; the last partial group (N not a multiple of 4) or unaligned
// buffers take the scalar path. Same arithmetic per element as the naive kernel.
// @warpforge size N = 1 << 25
// @warpforge arg dinp: out float[N]
// @warpforge arg inp: in float[N] normal(0, 2)
// @warpforge arg dout: in float[N] normal(0, 1)
// @warpforge arg N = N
// @warpforge launch grid=cdiv(cdiv(N, 4), 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops 18 * N
// @warpforge bytes 3 * N * sizeof(float)
__global__ void gelu_backward(float* dinp, const float* inp, const float* dout, int N)
{
    const int base = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (base >= N) return;
    const bool aligned = ((reinterpret_cast<uintptr_t>(dinp) | reinterpret_cast<uintptr_t>(inp)
                           | reinterpret_cast<uintptr_t>(dout)) & 15) == 0;
    if (aligned && base + 3 < N) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(inp + base));
        const float4 g = __ldg(reinterpret_cast<const float4*>(dout + base));
        float4 r;
        r.x = gelu_grad(x.x, g.x);
        r.y = gelu_grad(x.y, g.y);
        r.z = gelu_grad(x.z, g.z);
        r.w = gelu_grad(x.w, g.w);
        *reinterpret_cast<float4*>(dinp + base) = r;
    } else {
        for (int i = base; i < N && i < base + 4; ++i) dinp[i] = gelu_grad(inp[i], dout[i]);
    }
}
