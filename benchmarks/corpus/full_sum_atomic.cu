// Full reduction: the sum of all n floats into a single float.
// Style: "each thread takes a chunk" -- thread t serially sums elements
// [t*chunk, (t+1)*chunk) and then does one atomicAdd into the global total.
//
// Tolerance: 2^25 uniform(0, 1) values sum to about 1.7e7, where a float's ulp is 2; the
// naive version adds 2^19 chunk partials of ~32 in nondeterministic order, each atomicAdd
// rounding by up to one ulp, so run-to-run and version-to-version differences reach ~1e-5
// relative; rtol=1e-3 is deliberately loose. Positive inputs mean no cancellation.
// @warpforge size N = 1 << 25
// @warpforge arg x: in float[N] uniform(0, 1)
// @warpforge arg total: inout float[1] zeros
// @warpforge arg n = N
// @warpforge arg chunk = 64
// @warpforge launch grid=cdiv(N, 256 * 64), block=256
// @warpforge tol rtol=1e-3 atol=1e-2
// @warpforge flops N
// @warpforge bytes N * sizeof(float)
__global__ void sum_chunks_atomic(const float* x, float* total, int n, int chunk)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int start = t * chunk;
    if (start < n) {
        int end = start + chunk;
        if (end > n) end = n;
        float s = 0.0f;
        for (int i = start; i < end; i++)
            s += x[i];
        atomicAdd(total, s);
    }
}
