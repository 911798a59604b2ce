// Dot product of two length-n float vectors, accumulated into one float.
// Style: the "CUDA by Example"-style grid-stride loop with a fixed grid of 1024 blocks,
// each thread keeps a private partial and does one atomicAdd at the end (no block reduction).
//
// Tolerance: uniform(0, 1) x uniform(0, 1) products sum to about 8.4e6 (ulp 1); 262144 thread
// partials of ~32 are added atomically in nondeterministic order, a random walk of a few hundred
// ulp at worst (~1e-5 relative). But the verifier's tail check moves the last 32 elements of a and b
// up by 1e4: 32 products of ~1e8 then dominate (total ~3.2e9, ulp 256) and a float total that already
// holds them absorbs later partials of ~32 entirely, losing up to ~0.3 % depending on atomic order.
// rtol=1e-2 covers that and still catches a version that skips the tail (off by ~100 %).
// @warpforge size N = 1 << 25
// @warpforge arg a: in float[N] uniform(0, 1)
// @warpforge arg b: in float[N] uniform(0, 1)
// @warpforge arg result: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=1024, block=256
// @warpforge tol rtol=1e-2 atol=1e-2
// @warpforge flops 2 * N
// @warpforge bytes 2 * N * sizeof(float)
__global__ void dot_kernel(const float* a, const float* b, float* result, int n)
{
    float temp = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        temp += a[i] * b[i];
    }
    atomicAdd(result, temp);
}
