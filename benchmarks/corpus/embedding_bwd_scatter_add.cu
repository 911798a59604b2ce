// Embedding backward: dtable[tokens[t]][:] += dout[t][:], repeated tokens accumulate.
// The first version most people write: one thread per token, an atomicAdd for each of
// its C floats (a warp's atomics land C floats apart).
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
// @warpforge launch grid=cdiv(T, 64), block=64
// @warpforge tol rtol=1e-5 atol=1e-5
// @warpforge flops T * C
// bytes: about 64 % of the table's rows are hit (each read and written once); counted as
// half of them, read and written.
// @warpforge bytes (T + T * C + V * C) * sizeof(float)
__global__ void embedding_bwd(const int* tokens, const float* dout, float* dtable,
                              int num_tokens, int C)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < num_tokens) {
        int tok = tokens[t];
        for (int c = 0; c < C; c++) {
            atomicAdd(&dtable[(long)tok * C + c], dout[(long)t * C + c]);
        }
    }
}
