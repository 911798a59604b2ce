// Histogram of n ints in [0, nbins) into nbins unsigned counters, one global atomicAdd
// per element (values outside [0, nbins) are ignored).
// @warpforge size N = 1 << 22
// @warpforge size NBINS = 256
// @warpforge arg data: in int[N] int(0, NBINS)
// @warpforge arg bins: inout unsigned[NBINS] zeros
// @warpforge arg n = N
// @warpforge arg nbins = NBINS
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge bytes (N + 2 * NBINS) * sizeof(int)
__global__ void histogram_atomic(const int* data, unsigned int* bins, int n, int nbins)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = data[i];
        if (v >= 0 && v < nbins) {
            atomicAdd(&bins[v], 1u);
        }
    }
}
