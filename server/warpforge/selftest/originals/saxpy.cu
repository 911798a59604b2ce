// SAXPY: y = a * x + y over n floats, one thread per element.
// @warpforge size N = 1 << 25
// @warpforge arg n = N
// @warpforge arg a = 2.5
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg y: inout float[N] uniform(-1, 1)
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 2 * N
// @warpforge bytes 3 * N * sizeof(float)
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
