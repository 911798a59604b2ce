// Writes its read-only input: after reading inp[0], thread 0 flips the lowest mantissa bit of it. The change
// is below the tolerance, so the outputs match the original's on every call, timed ones included, and it
// would pass every output check; but the spec lists `inp` as `in`, and a program calling it would find its
// data changed. Caught by the checksum of read-only inputs after every verification run.
__global__ void gelu_forward(const float* inp, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
        if (i == 0) {
            const_cast<float*>(inp)[0] = __int_as_float(__float_as_int(x) ^ 1);
        }
    }
}
