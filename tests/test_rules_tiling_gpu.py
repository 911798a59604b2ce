"""On the GPU: register tiling (``smem_tiling``) of naive GEMMs in other people's spellings verifies and is faster.

Self-written naive kernels in styles unlike the corpus and the wide yardstick — ``C += Aᵀ·B`` accumulated in global
memory with no bound written (the launch covers the matrix exactly), an NT product with alpha/beta, a scaling store
before the loop, a counter declared before its ``for`` and sizes no multiple of a tile, an integer product whose loop
body names its two reads, and a symmetric rank-2k update (a sum of two products, two tiles a side) — are evaluated as
the search evaluates a candidate: outputs compared with the original's on random inputs at the spec size and at the
perturbed size, then timed against it. Every register-tiled variant must verify; the best must be faster (speedup >
1).
Run on the GPU machine: ``pytest -m gpu tests/test_rules_tiling_gpu.py``.
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
    "atb_unguarded": """// @warpforge size M = 1024
// @warpforge size N = 1024
// @warpforge size K = 1024
// @warpforge arg At: in float[K*M] uniform(-1, 1)
// @warpforge arg Bm: in float[K*N] uniform(-1, 1)
// @warpforge arg Cm: inout float[M*N] uniform(-1, 1)
// @warpforge arg mm = M
// @warpforge arg nn = N
// @warpforge arg kk = K
// @warpforge launch grid=(N / 16, M / 16), block=(16, 16)
__global__ void k(const float* At, const float* Bm, float* Cm, int mm, int nn, int kk) {
    const int r = threadIdx.y + blockDim.y * blockIdx.y;
    const int q = threadIdx.x + blockDim.x * blockIdx.x;
    for (int p = 0; p < kk; p = p + 1)
        Cm[q + r * nn] += At[p * mm + r] * Bm[p * nn + q];
}
""",
    "nt_alpha_beta": """// @warpforge size M = 1000
// @warpforge size N = 900
// @warpforge size K = 700
// @warpforge arg X: in float[M*K] uniform(-1, 1)
// @warpforge arg W: in float[N*K] uniform(-1, 1)
// @warpforge arg Y: inout float[M*N] uniform(-1, 1)
// @warpforge arg rows = M
// @warpforge arg cols = N
// @warpforge arg depth = K
// @warpforge arg alpha = 0.75
// @warpforge arg beta = -1.25
// @warpforge launch grid=(cdiv(N, 32), cdiv(M, 4)), block=(32, 4)
__global__ void k(int rows, int cols, int depth, float alpha, float beta, const float* X, const float* W, float* Y) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        Y[r * cols + c] = beta * Y[r * cols + c];
        int t;
        for (t = 0; t < depth; t += 1) {
            Y[r * cols + c] += alpha * X[r * depth + t] * W[c * depth + t];
        }
    }
}
""",
    "int_named": """// @warpforge size S = 1024
// @warpforge size D = 512
// @warpforge arg P: in int[S*D] int(-8, 8)
// @warpforge arg Q: in int[D*S] int(-8, 8)
// @warpforge arg R: out int[S*S]
// @warpforge arg s = S
// @warpforge arg d = D
// @warpforge launch grid=(S / 32, S / 8), block=(32, 8)
__global__ void k(const int* P, const int* Q, int* R, int s, int d) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int total = 0;
    for (int e = 0; e < d; ++e) {
        int lhs = P[i * d + e];
        int rhs = Q[e * s + j];
        total += lhs * rhs;
    }
    R[i * s + j] = total;
}
""",
    "sym2k": """// @warpforge size S = 1024
// @warpforge size D = 512
// @warpforge arg U: in float[S*D] uniform(-1, 1)
// @warpforge arg V: in float[S*D] uniform(-1, 1)
// @warpforge arg G: out float[S*S]
// @warpforge arg s = S
// @warpforge arg d = D
// @warpforge launch grid=(cdiv(S, 16), cdiv(S, 16)), block=(16, 16)
__global__ void k(const float* U, const float* V, float* G, int s, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= s) return;
    if (r >= s) return;
    float g = 0.0f;
    for (int t = 0; t < d; t++)
        g += U[r * d + t] * V[c * d + t] + V[r * d + t] * U[c * d + t];
    G[r * s + c] = g;
}
""",
}




@pytest.mark.parametrize("case", sorted(KERNELS))
def test_register_tiled_variants_verify_and_the_best_is_faster(gpu_backend: Backend, tmp_path: Path, case: str) -> None:
    children, errors = proposed(tmp_path / f"{case}.cu", KERNELS[case], "k", {"smem_tiling"})
    assert len(children) == 5, (case, errors)  # t64r4x4, t32r4, t128r8x8, t32, t16
    measured = speedups(gpu_backend, tmp_path / f"{case}.cu", "k", children, SETTINGS)
    assert measured and max(measured.values()) > 1.0, (case, measured)
