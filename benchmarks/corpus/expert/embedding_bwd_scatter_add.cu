#include <stdint.h>

// Expert embedding backward: one block per token; its threads read the token's dout row
// coalesced and add it into the table row with atomics that are coalesced too, 4 floats
// per vector atomicAdd (sm_90 float4 atomics) when C is a multiple of 4 and both buffers
// are 16-byte aligned, scalar atomics otherwise.
// Tolerance: ~1 token per table row on average, a handful at most, so reordering the
// atomics changes a sum of a few terms by an ulp or two.
// @warpforge size T = 32768
// @warpforge size V = 32000
// @warpforge size C = 1024
// @warpforge arg tokens: in int[T] int(0, V)
// @warpforge arg dout: in float[T*C] normal(0, 1)
// @warpforge arg dtable: inout float[V*C] zeros
// @warpforge arg num_tokens = T
// @warpforge arg C = C
// @warpforge launch grid=T, block=min(256, max(32, cdiv(C, 4)))
// @warpforge tol rtol=1e-5 atol=1e-5
// @warpforge flops T * C
// bytes: about 64 % of the table's rows are hit (each read and written once); counted as
// half of them, read and written.
// @warpforge bytes (T + T * C + V * C) * sizeof(float)
__global__ void embedding_bwd(const int* tokens, const float* dout, float* dtable,
                              int num_tokens, int C)
{
    const int t = blockIdx.x;
    if (t >= num_tokens) return;
    const int tok = __ldg(tokens + t);
    const float* __restrict__ g = dout + (size_t)t * C;
    float* row = dtable + (size_t)tok * C;
    const bool vec_ok = (C & 3) == 0
        && ((reinterpret_cast<uintptr_t>(dout) | reinterpret_cast<uintptr_t>(dtable)) & 15) == 0;
    if (vec_ok) {
        const int C4 = C >> 2;
        for (int c = threadIdx.x; c < C4; c += blockDim.x)
            atomicAdd(reinterpret_cast<float4*>(row) + c, __ldg(reinterpret_cast<const float4*>(g) + c));
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(row + c, __ldg(g + c));
    }
}
