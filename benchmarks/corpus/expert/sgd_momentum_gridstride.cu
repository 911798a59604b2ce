#include <stdint.h>

__device__ __forceinline__ void sgd_one(float& w, float g, float& buf, float lr, float momentum,
                                        float dampening, float weight_decay, bool nesterov)
{
    float d_p = g + weight_decay * w;
    float b = momentum * buf + (1.0f - dampening) * d_p;
    buf = b;
    d_p = nesterov ? d_p + momentum * b : b;
    w = w - lr * d_p;
}

// Expert SGD with momentum: a grid-stride loop over float4 groups (128-bit loads/stores
// of w, grad and momentum_buf, each value loaded once), the nesterov branch hoisted out
// of the loop, the n % 4 tail (or every element when a buffer is not 16-byte aligned)
// done by a scalar grid-stride loop. Same arithmetic per element as the naive kernel.
// @warpforge size N = 1 << 25
// @warpforge arg w: inout float[N] normal(0, 0.5)
// @warpforge arg grad: in float[N] normal(0, 0.01)
// @warpforge arg momentum_buf: inout float[N] normal(0, 0.01)
// @warpforge arg lr = 0.01
// @warpforge arg momentum = 0.9
// @warpforge arg dampening = 0.0
// @warpforge arg weight_decay = 1e-4
// @warpforge arg nesterov = 1
// @warpforge arg n = N
// @warpforge launch grid=min(cdiv(N, 1024), 2112), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 8 * N
// @warpforge bytes 5 * N * sizeof(float)
__global__ void sgd_momentum_gridstride(float* w, const float* grad, float* momentum_buf,
                                        float lr, float momentum, float dampening,
                                        float weight_decay, int nesterov, size_t n)
{
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t nthreads = (size_t)gridDim.x * blockDim.x;
    const bool nest = nesterov != 0;
    const bool aligned = ((reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(grad)
                           | reinterpret_cast<uintptr_t>(momentum_buf)) & 15) == 0;
    const size_t n4 = aligned ? n / 4 : 0;

    float4* w4 = reinterpret_cast<float4*>(w);
    const float4* g4 = reinterpret_cast<const float4*>(grad);
    float4* b4 = reinterpret_cast<float4*>(momentum_buf);
    for (size_t i = tid; i < n4; i += nthreads) {
        float4 ww = w4[i];
        const float4 gg = __ldg(g4 + i);
        float4 bb = b4[i];
        sgd_one(ww.x, gg.x, bb.x, lr, momentum, dampening, weight_decay, nest);
        sgd_one(ww.y, gg.y, bb.y, lr, momentum, dampening, weight_decay, nest);
        sgd_one(ww.z, gg.z, bb.z, lr, momentum, dampening, weight_decay, nest);
        sgd_one(ww.w, gg.w, bb.w, lr, momentum, dampening, weight_decay, nest);
        b4[i] = bb;
        w4[i] = ww;
    }
    for (size_t i = 4 * n4 + tid; i < n; i += nthreads) {
        float ww = w[i], bb = momentum_buf[i];
        sgd_one(ww, grad[i], bb, lr, momentum, dampening, weight_decay, nest);
        momentum_buf[i] = bb;
        w[i] = ww;
    }
}
