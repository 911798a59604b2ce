// Hand-tuned per-row inclusive scan: one 256-thread block per row, the row walked in 2048-float
// chunks. A chunk is loaded coalesced into (bank-conflict padded) shared memory, each thread
// scans 8 consecutive values serially, warp totals are scanned with __shfl_up_sync, the block's
// 8 warp totals through shared memory, and a running carry links the chunks; stores coalesced.
// @warpforge size ROWS = 16384
// @warpforge size COLS = 2048
// @warpforge arg in: in float[ROWS*COLS] uniform(0, 1)
// @warpforge arg out: out float[ROWS*COLS]
// @warpforge arg rows = ROWS
// @warpforge arg cols = COLS
// @warpforge launch grid=ROWS, block=256
// @warpforge tol rtol=1e-4 atol=1e-5
// @warpforge flops ROWS * COLS
// @warpforge bytes 2 * ROWS * COLS * sizeof(float)
__global__ void __launch_bounds__(256) row_inclusive_scan(const float* in, float* out, int rows, int cols)
{
    constexpr int THREADS = 256, ITEMS = 8, CHUNK = THREADS * ITEMS, WARPS = THREADS / 32;
    __shared__ float buf[CHUNK + CHUNK / 32];   // element i lives at i + i / 32
    __shared__ float warp_total[WARPS];

    const int row = blockIdx.x;
    if (row >= rows) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float* src = in + (long)row * cols;
    float* dst = out + (long)row * cols;

    float carry = 0.0f;
    for (int base = 0; base < cols; base += CHUNK) {
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int i = it * THREADS + tid;
            buf[i + (i >> 5)] = (base + i < cols) ? src[base + i] : 0.0f;
        }
        __syncthreads();

        // serial scan of this thread's 8 consecutive elements
        float v[ITEMS];
        float run = 0.0f;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int i = tid * ITEMS + it;
            run += buf[i + (i >> 5)];
            v[it] = run;
        }
        // inclusive scan of the thread totals within the warp
        float x = run;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) x += y;
        }
        float excl = __shfl_up_sync(0xffffffffu, x, 1);   // sum of the lower lanes' totals
        if (lane == 0) excl = 0.0f;
        if (lane == 31) warp_total[warp] = x;
        __syncthreads();

        float warp_off = 0.0f, chunk_total = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float t = warp_total[w];
            if (w < warp) warp_off += t;
            chunk_total += t;
        }
        const float offset = carry + (warp_off + excl);
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int i = tid * ITEMS + it;
            buf[i + (i >> 5)] = offset + v[it];
        }
        __syncthreads();

#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int i = it * THREADS + tid;
            if (base + i < cols) dst[base + i] = buf[i + (i >> 5)];
        }
        carry += chunk_total;
        __syncthreads();   // buf and warp_total are rewritten by the next chunk
    }
}
