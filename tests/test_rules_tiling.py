"""smem_tiling on kernels of matmul form written in other shapes than the reference SGEMM.

The kernels are written for the tests (not corpus files): a batch on the grid's z with a column-major A and
an fmaf update, a templated layer with a transposed operand and an epilogue, a lower-triangular product that
zeroes the masked half. Each must get tiled variants that build through the evaluator's pre-GPU steps; each
near-miss (an operand written in place, a second loop-carried value, a k-range or bound that differs between
threads, a hoisted value that changes) must get none.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc, text_policy
from warpforge.cuda.candidate import Candidate
from warpforge.policy.offline import OfflinePolicy

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

ALL = ["t64r4x4", "t32r4", "t128r8x8", "t32", "t16"]

#: batches on blockIdx.z, strides folded into size_t offsets, A stored column-major (A[k * M + row])
BATCHED = """\
// @warpforge size NB = 3
// @warpforge size M = 96
// @warpforge size N = 80
// @warpforge size K = 70
// @warpforge arg A: in float[NB*M*K] uniform(-1, 1)
// @warpforge arg B: in float[NB*K*N] uniform(-1, 1)
// @warpforge arg C: out float[NB*M*N]
// @warpforge arg m = M
// @warpforge arg n = N
// @warpforge arg kdim = K
// @warpforge arg nb = NB
// @warpforge launch grid=(cdiv(N, 8), cdiv(M, 8), NB), block=(8, 8)
__global__ void bmm_colmajor_a(const float* A, const float* B, float* C, int m, int n, int kdim, int nb)
{{
    const int b = blockIdx.z;
    const size_t a_off = (size_t)b * m * kdim;
    const size_t b_off = (size_t)b * kdim * n;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (b >= nb) return;
    if (r >= m || c >= n) return;
    float s = 0.0f;
    for (int t = 0; t < kdim; t++) {{
        {step}
    }}
    {epi}
}}
"""

#: a templated layer: out = tanh(scale * x w^T) with w stored N x K (read along k)
LAYER = """\
// @warpforge size M = 70
// @warpforge size N = 90
// @warpforge size K = 50
// @warpforge template T = float
// @warpforge arg x: in float[M*K] uniform(-1, 1)
// @warpforge arg w: in float[N*K] uniform(-1, 1)
// @warpforge arg out: out float[M*N]
// @warpforge arg rows = M
// @warpforge arg cols = N
// @warpforge arg depth = K
// @warpforge arg scale = 0.5
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16)), block=(16, 16)
template <typename T>
__global__ void dense_tanh(const T* x, const T* w, T* out, int rows, int cols, int depth, T scale)
{{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < rows && o < cols) {{
        T acc = T(0);
        for (int d = 0; d < depth; ++d) {{
            {step}
        }}
        out[i * cols + o] = tanh(scale * acc);
    }}
}}
"""

#: a lower-triangular product: entries above the diagonal are zeroed without computing
LOWER = """\
// @warpforge size S = 150
// @warpforge size D = 40
// @warpforge arg u: in float[S*D] uniform(-1, 1)
// @warpforge arg v: in float[S*D] uniform(-1, 1)
// @warpforge arg g: out float[S*S]
// @warpforge arg s = S
// @warpforge arg dim = D
// @warpforge launch grid=(cdiv(S, 16), cdiv(S, 16)), block=(16, 16)
__global__ void gram_lower(const float* u, const float* v, float* g, int s, int dim)
{{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= s || col >= s) return;
    if ({mask}) {{
        g[row * s + col] = 0.0f;
        return;
    }}
    float acc = 0.0f;
    for (int t = 0; t < dim; ++t) acc += u[row * dim + t] * v[col * dim + t];
    g[row * s + col] = acc;
}}
"""

BATCHED_STEP = "s = fmaf(A[a_off + (size_t)t * m + r], B[b_off + (size_t)t * n + c], s);"
BATCHED_EPI = "C[(size_t)b * m * n + (size_t)r * n + c] = s;"


def policy(text: str, kernel: str) -> OfflinePolicy:
    return text_policy(text, kernel)


def tiled(text: str, kernel: str) -> list[Candidate]:
    pol = policy(text, kernel)
    return [c for c in pol.propose_sync(pol.root_candidate()) if c.family == "smem_tiling"]


def params(kids: list[Candidate]) -> list[str]:
    return [c.steps[0].split(":")[1] for c in kids]


def assert_every_variant_builds(tmp_path: Path, text: str, kernel: str) -> None:
    """The original and every one of the rule's variants build with nvcc, through the evaluator's own build
    path (``benchmarks/corpus_applicability.check_case``)."""
    path = tmp_path / f"{kernel}.cu"
    path.write_text(text)
    res = ca.check_case(path, families=["smem_tiling"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["smem_tiling"]
    assert fr.tried == fr.proposed == len(ALL) and not fr.failures, fr.failures


def test_batched_column_major_a() -> None:
    kids = tiled(BATCHED.format(step=BATCHED_STEP, epi=BATCHED_EPI), "bmm_colmajor_a")
    assert params(kids) == ALL
    c = kids[0]
    assert c.launch is not None and c.launch.grid == ("cdiv(N, 64)", "cdiv(M, 64)", "NB")
    d = c.definition
    # the batch's statements run once per block, before any barrier; A is loaded along its rows (contiguous)
    assert d.index("if (b >= nb) return;") < d.index("__syncthreads()")
    assert "wft_As[wft_BM][wft_BK + 1]" in d and "wft_r = wft_e % wft_BM" in d
    assert "fmaf(wft_a[wft_i], wft_b[wft_j], wft_acc[wft_i][wft_j])" in d
    assert "float s = wft_acc[wft_i][wft_j];" in d and BATCHED_EPI in d


def test_templated_layer_with_transposed_weights() -> None:
    kids = tiled(LAYER.format(step="acc += x[i * depth + d] * w[o * depth + d];"), "dense_tanh")
    assert params(kids) == ALL
    d = kids[0].definition
    assert "__shared__ T wft_As" in d and "__shared__ T wft_Bs[wft_BK][wft_BN + 1]" in d  # w along k, padded
    assert "out[i * cols + o] = tanh(scale * acc);" in d and "if (!(i < rows && o < cols)) return;" in d


@pytest.mark.parametrize("mask,skips", [
    ("col > row", True),
    ("row < col", True),
    ("col - row >= 1", True),
    ("col * row > 4000", False),  # not linear in (col, row): correct, but every tile computes
])
def test_masked_region_is_skipped_per_tile_when_linear(mask: str, skips: bool) -> None:
    kids = tiled(LOWER.format(mask=mask), "gram_lower")
    assert params(kids) == ALL
    d = kids[0].definition
    assert ("if (!wft_skip)" in d) == skips
    assert "g[row * s + col] = 0.0f;" in d  # the mask's own stores, for every masked output


@pytest.mark.parametrize("text,kernel", [
    # the output aliases an operand (in place)
    (BATCHED.format(step="s += A[a_off + (size_t)t * m + r] * B[b_off + (size_t)t * n + c];",
                    epi="A[(size_t)b * m * n + (size_t)r * n + c] = s;"), "bmm_colmajor_a"),
    # the loop carries something besides the sum
    (BATCHED.format(step=BATCHED_STEP + " if (s > 100.0f) s = 100.0f;", epi=BATCHED_EPI), "bmm_colmajor_a"),
    (LAYER.format(step="acc += x[i * depth + d] * w[o * depth + d]; acc *= 0.5f;"), "dense_tanh"),
    # a k-range that differs between threads (triangular): tiles would need per-thread bounds
    (LAYER.format(step="if (d <= i) acc += x[i * depth + d] * w[o * depth + d];"), "dense_tanh"),
    (LOWER.format(mask="col > row").replace("t < dim", "t < row"), "gram_lower"),
    # both operands along the same output coordinate: not a product of a row and a column
    (LAYER.format(step="acc += x[i * depth + d] * w[i * depth + d];"), "dense_tanh"),
    # a bound on the column that is not the same for every thread of a block
    (LOWER.format(mask="col > row").replace("if (row >= s || col >= s) return;",
                                            "if (row >= s || col >= s - row) return;"), "gram_lower"),
    # a per-batch offset the epilogue moves: shared by all of a thread's outputs after the rewrite
    (BATCHED.format(step=BATCHED_STEP, epi=BATCHED_EPI + "\n    b_off = 0;").replace(
        "const size_t b_off", "size_t b_off"), "bmm_colmajor_a"),
])
def test_near_misses_are_declined(text: str, kernel: str) -> None:
    assert tiled(text, kernel) == []


@needs_nvcc
@pytest.mark.parametrize("text,kernel", [
    (BATCHED.format(step=BATCHED_STEP, epi=BATCHED_EPI), "bmm_colmajor_a"),
    (LAYER.format(step="acc += x[i * depth + d] * w[o * depth + d];"), "dense_tanh"),
    (LOWER.format(mask="col > row"), "gram_lower"),
])
def test_tiled_variants_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str) -> None:
    assert_every_variant_builds(tmp_path, text, kernel)
