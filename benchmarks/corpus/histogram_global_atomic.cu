// Histogram of n floats over [lo, hi) into nbins equal-width int bins (values outside
// the range are dropped). The textbook first version: one thread per value, one global
// atomicAdd on the bin, so threads of normal-distributed data pile onto the middle bins.
// @warpforge size N = 1 << 24
// @warpforge size NBINS = 1024
// @warpforge arg data: in float[N] normal(0, 1)
// @warpforge arg bins: inout int[NBINS] zeros
// @warpforge arg n = N
// @warpforge arg nbins = NBINS
// @warpforge arg lo = -4.0
// @warpforge arg hi = 4.0
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=0 atol=0
// @warpforge flops 3 * N
// @warpforge bytes (N + 2 * NBINS) * sizeof(float)
__global__ void histogram_global(const float* data, int* bins, int n, int nbins,
                                 float lo, float hi)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = data[i];
        if (x >= lo && x < hi) {
            int b = (int)((x - lo) / (hi - lo) * nbins);
            if (b >= nbins) b = nbins - 1;
            atomicAdd(&bins[b], 1);
        }
    }
}
