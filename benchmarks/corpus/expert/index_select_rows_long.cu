#include <stdint.h>

// Expert index_select along dim 0 with int64 indices: one block per selected row, one
// thread per 4 floats (float4, coalesced) when row_len is a multiple of 4 and both
// buffers are 16-byte aligned, one thread per float otherwise. The index is read once
// per block; 32-bit loop counters inside the row.
// @warpforge size V = 65536
// @warpforge size M = 65536
// @warpforge size D = 512
// @warpforge arg src: in float[V*D] uniform(-1, 1)
// @warpforge arg index: in int64[M] int(0, V)
// @warpforge arg dst: out float[M*D]
// @warpforge arg num_indices = M
// @warpforge arg row_len = D
// @warpforge launch grid=M, block=min(256, max(32, cdiv(D, 4)))
// @warpforge tol rtol=0 atol=0
// @warpforge flops 0
// bytes: M draws from V rows touch about 63 % distinct source rows; counted as 60 %.
// @warpforge bytes M * sizeof(int64_t) + (M * D + 6 * M * D / 10) * sizeof(float)
__global__ void index_select_rows(const float* src, const int64_t* index, float* dst,
                                  int64_t num_indices, int64_t row_len)
{
    const int64_t row = blockIdx.x;
    if (row >= num_indices) return;
    const int64_t s = __ldg(index + row);
    const float* __restrict__ in = src + s * row_len;
    float* __restrict__ out = dst + row * row_len;
    const int len = (int)row_len;
    const bool vec_ok = (len & 3) == 0
        && ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
    if (vec_ok) {
        const int len4 = len >> 2;
        const float4* i4 = reinterpret_cast<const float4*>(in);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (int k = threadIdx.x; k < len4; k += blockDim.x) o4[k] = __ldg(i4 + k);
    } else {
        for (int k = threadIdx.x; k < len; k += blockDim.x) out[k] = __ldg(in + k);
    }
}
