// SGD with momentum, weight decay and optional Nesterov, in place on weights and the
// momentum buffer. Imitates the grid-stride loop style (size_t index, a capped grid):
// one element per loop trip, the stride is gridDim.x * blockDim.x.
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
// @warpforge launch grid=min(cdiv(N, 256), 4096), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 8 * N
// @warpforge bytes 5 * N * sizeof(float)
__global__ void sgd_momentum_gridstride(float* w, const float* grad, float* momentum_buf,
                                        float lr, float momentum, float dampening,
                                        float weight_decay, int nesterov, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d_p = grad[i] + weight_decay * w[i];
        float buf = momentum * momentum_buf[i] + (1.0f - dampening) * d_p;
        momentum_buf[i] = buf;
        if (nesterov) {
            d_p = d_p + momentum * buf;
        } else {
            d_p = buf;
        }
        w[i] = w[i] - lr * d_p;
    }
}
