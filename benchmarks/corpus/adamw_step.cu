// AdamW optimizer step over a flat parameter buffer, updated in place together with the
// first and second moments. Written like a training script's first fused optimizer
// kernel: one thread per parameter, bias corrections recomputed by every thread.
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
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 16 * N
// @warpforge bytes 7 * N * sizeof(float)
__global__ void adamw_step(float* params, const float* grads, float* m, float* v,
                           long num_params, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int step)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= num_params) return;

    float g = grads[i];
    float m_new = beta1 * m[i] + (1.0f - beta1) * g;
    float v_new = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;

    float m_hat = m_new / (1.0f - powf(beta1, (float)step));
    float v_hat = v_new / (1.0f - powf(beta2, (float)step));
    float p = params[i];
    params[i] = p - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
}
