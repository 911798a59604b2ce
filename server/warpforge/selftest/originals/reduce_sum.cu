// Threads per block; must be a power of two (the tree reduction halves it).
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

// Sum of n floats: each block reduces BLOCK_SIZE elements in shared memory (tree
// reduction), then thread 0 adds the block's partial sum to *out with one atomicAdd.
// Tolerance: the sum of 2^24 uniform(0, 1) values is about 2^23, where a float's ulp is
// 0.5 to 1. The 65536 block partials (~128 each) reach *out in a nondeterministic order;
// each atomicAdd rounds by at most half an ulp, a random walk of about 60 (7e-6
// relative; 2e-6 to 4e-6 seen on an H200) per run, so two runs differ by ~1e-5
// relative: rtol=1e-4 leaves ~10 sigma. Positive inputs mean no cancellation.
// @warpforge size N = 1 << 24
// @warpforge tune BLOCK_SIZE = 256, 128, 512, 1024
// @warpforge arg inp: in float[N] uniform(0, 1)
// @warpforge arg out: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, BLOCK_SIZE), block=BLOCK_SIZE
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops N
// @warpforge bytes N * sizeof(float)
__global__ void reduce_sum(const float* inp, float* out, int n)
{
    __shared__ float sdata[BLOCK_SIZE];

    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    sdata[tid] = (i < n) ? inp[i] : 0.0f;
    __syncthreads();

    for (int s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }

    if (tid == 0) {
        atomicAdd(out, sdata[0]);
    }
}
