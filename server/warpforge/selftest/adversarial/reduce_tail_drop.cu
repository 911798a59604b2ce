// A dropped tail hidden by the tolerance: skips the last 128 elements of the sum. Each of the 2^24
// uniform(0, 1) inputs is ~1e-7 of the total, so the missing ~64 stay far inside rtol=1e-4 at the spec
// size, at the odd size and on fresh seeds: every ordinary check passes. Caught by the tail-sensitivity
// run: with the last elements of every input moved far up, the original's sum changes by much more than
// the tolerance and this one's does not follow (incorrect).
__global__ void reduce_sum(const float* inp, float* out, int n)
{
    __shared__ float sdata[BLOCK_SIZE];

    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    sdata[tid] = (i < n - 128) ? inp[i] : 0.0f;
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
