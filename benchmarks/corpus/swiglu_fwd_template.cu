// SwiGLU forward of an MLP: the input row holds [gate | up], each `hidden` wide, and
// out = silu(gate) * up. Imitates a templated elementwise kernel (T = float, half, ...)
// over a flat index, one thread per output, with the row/column split done by / and %.
// @warpforge size ROWS = 8192
// @warpforge size HIDDEN = 2752
// @warpforge template T = float
// @warpforge arg inp: in float[ROWS*2*HIDDEN] normal(0, 2)
// @warpforge arg out: out float[ROWS*HIDDEN]
// @warpforge arg rows = ROWS
// @warpforge arg hidden = HIDDEN
// @warpforge launch grid=cdiv(ROWS * HIDDEN, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 5 * ROWS * HIDDEN
// @warpforge bytes 3 * ROWS * HIDDEN * sizeof(float)
template <typename T>
__global__ void swiglu_fwd(const T* inp, T* out, int rows, int hidden)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * hidden) {
        int r = idx / hidden;
        int j = idx % hidden;
        float gate = (float)inp[r * 2 * hidden + j];
        float up = (float)inp[r * 2 * hidden + hidden + j];
        float silu = gate / (1.0f + expf(-gate));
        out[idx] = (T)(silu * up);
    }
}
