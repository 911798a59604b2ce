"""On the GPU: textbook shared-memory tiled GEMMs, un-staged by the IR (``unstage_tiles``), get register tiling.

Self-written one-output-per-thread staged kernels (a 1-D flattened tile indexed by ``blockDim.x`` in float, 2-D
tiles sized by a ``#define`` with a loop counting tiles in int, a ``template <int BS>`` kernel the spec instantiates,
the cuda-samples two-pointer loop with the block's origin in locals)
are handed to ``smem_tiling`` through their canonical form, the plain k-loop. Each variant the rule builds from it is
a whole kernel, evaluated as the search evaluates a candidate: outputs compared with the original's (the staged
kernel) on random inputs, then timed against it. Every variant must verify; the best must be faster (speedup > 1).
Run on the GPU machine: ``pytest -m gpu tests/test_unstage_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(8.0, 120.0, 1.0)

KERNELS: dict[str, str] = {
    "flat_blockdim": """// @warpforge size N = 1024 fixed
// @warpforge size K = 1024 fixed
// @warpforge arg X: in float[N*K] uniform(-1, 1)
// @warpforge arg Y: in float[K*N] uniform(-1, 1)
// @warpforge arg Z: out float[N*N]
// @warpforge arg n = N
// @warpforge arg kdim = K
// @warpforge launch grid=(N / 32, N / 32), block=(32, 32)
__global__ void k(const float* X, const float* Y, float* Z, int n, int kdim) {
    __shared__ float xs[32 * 32];
    __shared__ float ys[32 * 32];
    const int gy = blockDim.y * blockIdx.y + threadIdx.y;
    const int gx = blockDim.x * blockIdx.x + threadIdx.x;
    float sum = 0.0f;
    for (int base = 0; base < kdim; base += blockDim.x) {
        xs[threadIdx.y * blockDim.x + threadIdx.x] = X[gy * kdim + base + threadIdx.x];
        ys[threadIdx.y * blockDim.x + threadIdx.x] = Y[(base + threadIdx.y) * n + gx];
        __syncthreads();
        for (int q = 0; q < blockDim.x; q++)
            sum += xs[threadIdx.y * blockDim.x + q] * ys[q * blockDim.x + threadIdx.x];
        __syncthreads();
    }
    Z[gy * n + gx] = sum;
}
""",
    "macro_2d_int": """#define TILE 16
// @warpforge size R = 1024 fixed
// @warpforge size C = 1024 fixed
// @warpforge size D = 1024 fixed
// @warpforge arg P: in int[R*D] int(-8, 8)
// @warpforge arg Q: in int[D*C] int(-8, 8)
// @warpforge arg out: out int[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg depth = D
// @warpforge launch grid=(C / 16, R / 16), block=(16, 16)
__global__ void k(const int* P, const int* Q, int* out, int rows, int cols, int depth) {
    __shared__ int Ps[TILE][TILE];
    __shared__ int Qs[TILE][TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int r = blockIdx.y * blockDim.y + ty;
    const int c = blockIdx.x * blockDim.x + tx;
    int acc = 0;
    for (int t = 0; t < depth / TILE; ++t) {
        Ps[ty][tx] = P[r * depth + t * TILE + tx];
        Qs[ty][tx] = Q[(t * TILE + ty) * cols + c];
        __syncthreads();
        for (int e = 0; e < TILE; ++e) {
            acc += Ps[ty][e] * Qs[e][tx];
        }
        __syncthreads();
    }
    out[r * cols + c] = acc;
}
""",
    "template_bs": """// @warpforge size M = 1024 fixed
// @warpforge size N = 1024 fixed
// @warpforge size K = 1024 fixed
// @warpforge arg A: in float[M*K] uniform(-1, 1)
// @warpforge arg B: in float[K*N] uniform(-1, 1)
// @warpforge arg C: out float[M*N]
// @warpforge arg m = M
// @warpforge arg n = N
// @warpforge arg kk = K
// @warpforge launch grid=(N / 32, M / 32), block=(32, 32)
// @warpforge template 32
template <int BS>
__global__ void k(const float* A, const float* B, float* C, int m, int n, int kk) {
    __shared__ float as[BS][BS];
    __shared__ float bs[BS][BS];
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    float v = 0.0f;
    for (int p = 0; p < kk; p += BS) {
        as[threadIdx.y][threadIdx.x] = A[row * kk + (p + threadIdx.x)];
        bs[threadIdx.y][threadIdx.x] = B[(p + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (int i = 0; i < BS; ++i)
            v += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = v;
}
""",
    "two_pointer": """// @warpforge size S = 256 fixed
// @warpforge arg Cm: out float[(4 * S) * (4 * S)]
// @warpforge arg Am: in float[(4 * S) * (4 * S)] uniform(-1, 1)
// @warpforge arg Bm: in float[(4 * S) * (4 * S)] uniform(-1, 1)
// @warpforge arg w = 4 * S
// @warpforge launch grid=((4 * S) / 32, (4 * S) / 32), block=(32, 32)
__global__ void k(float* Cm, const float* Am, const float* Bm, int w) {
    __shared__ float sa[32][32];
    __shared__ float sb[32][32];
    int first = w * 32 * blockIdx.y;
    int last = first + w - 1;
    float s = 0;
    for (int pa = first, pb = 32 * blockIdx.x; pa <= last; pa += 32, pb += 32 * w) {
        sa[threadIdx.y][threadIdx.x] = Am[pa + w * threadIdx.y + threadIdx.x];
        sb[threadIdx.y][threadIdx.x] = Bm[pb + w * threadIdx.y + threadIdx.x];
        __syncthreads();
        for (int u = 0; u < 32; ++u)
            s += sa[threadIdx.y][u] * sb[u][threadIdx.x];
        __syncthreads();
    }
    Cm[w * 32 * blockIdx.y + 32 * blockIdx.x + w * threadIdx.y + threadIdx.x] = s;
}
""",
}


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_unstaged_register_tiled_variants_verify_and_the_best_is_faster(gpu_backend: Backend, tmp_path: Path,
                                                                        case: str) -> None:
    children, errors = proposed(tmp_path / f"{case}.cu", KERNELS[case], "k", {"smem_tiling"})
    assert len(children) == 5, (case, errors)  # t64r4x4, t32r4, t128r8x8, t32, t16
    measured = speedups(gpu_backend, tmp_path / f"{case}.cu", "k", children, SETTINGS)
    assert measured and max(measured.values()) > 1.0, (case, measured)
