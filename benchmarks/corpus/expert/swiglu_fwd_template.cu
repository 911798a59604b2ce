#include <stdint.h>

template <typename T>
__device__ __forceinline__ T swiglu_one(T g, T u)
{
    float gate = (float)g;
    float up = (float)u;
    float silu = gate / (1.0f + expf(-gate));
    return (T)(silu * up);
}

// Expert SwiGLU forward: a 2D grid (x: chunks of the hidden dimension, y: rows), so no
// per-element division; each thread handles 16 bytes of output (4 floats for T = float)
// moved as raw 128-bit vectors when a row of T is a multiple of 16 bytes and both
// buffers are 16-byte aligned, element by element otherwise. Same math per element.
// @warpforge size ROWS = 8192
// @warpforge size HIDDEN = 2752
// @warpforge template T = float
// @warpforge arg inp: in float[ROWS*2*HIDDEN] normal(0, 2)
// @warpforge arg out: out float[ROWS*HIDDEN]
// @warpforge arg rows = ROWS
// @warpforge arg hidden = HIDDEN
// @warpforge launch grid=(cdiv(HIDDEN, 4 * 128), ROWS), block=128
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge flops 5 * ROWS * HIDDEN
// @warpforge bytes 3 * ROWS * HIDDEN * sizeof(float)
template <typename T>
__global__ void swiglu_fwd(const T* inp, T* out, int rows, int hidden)
{
    constexpr int VEC = 16 / sizeof(T);   // elements in 16 bytes
    constexpr int PER = VEC > 4 ? VEC : 4; // elements per thread (launch assumes 4 for float)
    const int r = blockIdx.y;
    if (r >= rows) return;
    const int j0 = PER * (blockIdx.x * blockDim.x + threadIdx.x);
    if (j0 >= hidden) return;
    const T* gate = inp + (size_t)r * 2 * hidden;
    const T* up = gate + hidden;
    T* o = out + (size_t)r * hidden;
    const bool vec_ok = ((size_t)hidden * sizeof(T)) % 16 == 0
        && ((reinterpret_cast<uintptr_t>(inp) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    if (vec_ok && j0 + PER <= hidden) {
        #pragma unroll
        for (int v = 0; v < PER; v += VEC) {
            union { uint4 u; T e[VEC]; } g, w, res;
            g.u = __ldg(reinterpret_cast<const uint4*>(gate + j0 + v));
            w.u = __ldg(reinterpret_cast<const uint4*>(up + j0 + v));
            #pragma unroll
            for (int k = 0; k < VEC; ++k) res.e[k] = swiglu_one<T>(g.e[k], w.e[k]);
            *reinterpret_cast<uint4*>(o + j0 + v) = res.u;
        }
    } else {
        for (int j = j0; j < hidden && j < j0 + PER; ++j) o[j] = swiglu_one<T>(gate[j], up[j]);
    }
}
