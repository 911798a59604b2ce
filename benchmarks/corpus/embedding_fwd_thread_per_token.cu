// Token embedding lookup: out[t][:] = table[tokens[t]][:] (V x C table, C floats a row).
// Imitates the one-thread-per-token first version: each thread bumps a source and a
// destination pointer along its C-wide row, so a warp's accesses are C floats apart.
// @warpforge size T = 32768
// @warpforge size V = 50257
// @warpforge size C = 768
// @warpforge arg tokens: in int[T] int(0, V)
// @warpforge arg table: in float[V*C] normal(0, 0.02)
// @warpforge arg out: out float[T*C]
// @warpforge arg num_tokens = T
// @warpforge arg C = C
// @warpforge launch grid=cdiv(T, 128), block=128
// @warpforge tol rtol=0 atol=0
// @warpforge flops 0
// bytes: T tokens at 1.5 tokens per row touch about 73 % distinct table rows; counted as 70 %.
// @warpforge bytes (T + T * C + 7 * T * C / 10) * sizeof(float)
__global__ void embedding_fwd(const int* tokens, const float* table, float* out,
                              int num_tokens, int C)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_tokens) return;
    const float* src = table + (size_t)tokens[t] * C;
    float* dst = out + (size_t)t * C;
    for (int c = 0; c < C; c++) {
        *dst++ = *src++;
    }
}
