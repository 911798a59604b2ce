// Gradient clipping by global norm, the scaling half, in double precision: given the
// norm already reduced on the device, grad *= min(1, max_norm / (norm + 1e-6)) in place.
// Written like a port of PyTorch's clip_grad_norm_: long index, the clip coefficient
// recomputed by every thread from the device-side norm.
// @warpforge size N = 1 << 24
// @warpforge arg grad: inout double[N] normal(0, 1)
// @warpforge arg total_norm: in double[1] uniform(2, 8)
// @warpforge arg max_norm = 1.0
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-12 atol=1e-14
// @warpforge flops N
// @warpforge bytes 2 * N * sizeof(double)
__global__ void clip_grad_scale(double* grad, const double* total_norm, double max_norm, long n)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double clip_coef = max_norm / (total_norm[0] + 1e-6);
        if (clip_coef < 1.0) {
            grad[i] = grad[i] * clip_coef;
        }
    }
}
