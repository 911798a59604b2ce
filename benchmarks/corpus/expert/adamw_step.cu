#include <stdint.h>

__device__ __forceinline__ float adamw_one(float& p, float g, float& mm, float& vv,
                                           float lr, float beta1, float beta2, float eps,
                                           float weight_decay, float bc1, float bc2)
{
    float m_new = beta1 * mm + (1.0f - beta1) * g;
    float v_new = beta2 * vv + (1.0f - beta2) * g * g;
    mm = m_new;
    vv = v_new;
    float m_hat = m_new / bc1;
    float v_hat = v_new / bc2;
    p = p - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
    return p;
}

// Expert AdamW step: 4 parameters per thread through 128-bit float4 loads/stores of
// params, grads, m and v (scalar path for the tail and for unaligned buffers), the two
// bias corrections computed once per thread instead of once per element, same update
// arithmetic per element as the naive kernel.
// @warpforge size N = 1 << 25
// @warpforge arg params: inout float[N] normal(0, 0.5)
// @warpforge arg grads: in float[N] normal(0, 0.01)
// @warpforge arg m: inout float[N] normal(0, 0.005)
// @warpforge arg v: inout float[N] uniform(0, 1e-4)
// @warpforge arg num_params = N
// @warpforge arg lr = 3e-4
// @warpforge arg beta1 = 0.9
// @warpforge arg beta2 = 0.999
// @warpforge arg eps = 1e-8
// @warpforge arg weight_decay = 0.1
// @warpforge arg step = 10
// @warpforge launch grid=cdiv(cdiv(N, 4), 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 16 * N
// @warpforge bytes 7 * N * sizeof(float)
__global__ void adamw_step(float* params, const float* grads, float* m, float* v,
                           long num_params, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int step)
{
    const long base = 4 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (base >= num_params) return;
    const float bc1 = 1.0f - powf(beta1, (float)step);
    const float bc2 = 1.0f - powf(beta2, (float)step);
    const bool aligned = ((reinterpret_cast<uintptr_t>(params) | reinterpret_cast<uintptr_t>(grads)
                           | reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
    if (aligned && base + 3 < num_params) {
        float4 p = *reinterpret_cast<const float4*>(params + base);
        const float4 g = __ldg(reinterpret_cast<const float4*>(grads + base));
        float4 mm = *reinterpret_cast<const float4*>(m + base);
        float4 vv = *reinterpret_cast<const float4*>(v + base);
        adamw_one(p.x, g.x, mm.x, vv.x, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(p.y, g.y, mm.y, vv.y, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(p.z, g.z, mm.z, vv.z, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(p.w, g.w, mm.w, vv.w, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        *reinterpret_cast<float4*>(params + base) = p;
        *reinterpret_cast<float4*>(m + base) = mm;
        *reinterpret_cast<float4*>(v + base) = vv;
    } else {
        for (long i = base; i < num_params && i < base + 4; ++i) {
            float p = params[i], mm = m[i], vv = v[i];
            adamw_one(p, grads[i], mm, vv, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
            params[i] = p;
            m[i] = mm;
            v[i] = vv;
        }
    }
}
