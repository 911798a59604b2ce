"""smem_tiling on naive GEMMs in the spellings other people write them (issue 27), not the rule's own.

The kernels are written for these tests, in styles unlike the wide yardstick's: no bound written at all (the launch
covers the matrix exactly), an operand stored transposed, ``C += A^T B`` accumulated in global memory on top of
what C holds, a loop counter declared before its ``for`` stepping by ``k += 1``, ``alpha * A * B`` terms with a
``beta`` scaling store before the loop, integer and double elements, and a loop body that names its two reads.
Each must get register-tiled variants that build through the evaluator's pre-GPU steps. The near misses — no
bound written and no parameter that says how far the launch reaches, an exit that tests the column only together
with the row, a term of three reads — must get none, and the decline must say why in words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_nvcc, text_policy
from test_rules_tiling import ALL, assert_every_variant_builds, params, tiled
from warpforge.policy.rules import REGISTRY
from warpforge.policy.whynot import ask

#: no bound written; A stored K x M (read down a column), C += A^T B on top of what C holds, in double
ATB_UNGUARDED = """\
// @warpforge size M = 256
// @warpforge size N = 192
// @warpforge size K = 100
// @warpforge arg At: in double[K*M] uniform(-1, 1)
// @warpforge arg Bm: in double[K*N] uniform(-1, 1)
// @warpforge arg Cm: inout double[M*N] uniform(-1, 1)
// @warpforge arg mm = M
// @warpforge arg nn = N
// @warpforge arg kk = K
// @warpforge launch grid=(N / 16, M / 16), block=(16, 16)
__global__ void atb_accumulate(const double* At, const double* Bm, double* Cm, int mm, int nn, int kk)
{
    const int r = threadIdx.y + blockDim.y * blockIdx.y;
    const int q = threadIdx.x + blockDim.x * blockIdx.x;
    for (int p = 0; p < kk; p = p + 1)
        Cm[q + r * nn] += At[p * mm + r] * Bm[p * nn + q];
}
"""

#: a written guard as one `if` around everything, B stored N x K (NT), alpha/beta, the counter declared before
#: its loop and stepped by `t += 1`
NT_ALPHA_BETA = """\
// @warpforge size M = 200
// @warpforge size N = 150
// @warpforge size K = 90
// @warpforge arg X: in float[M*K] uniform(-1, 1)
// @warpforge arg W: in float[N*K] uniform(-1, 1)
// @warpforge arg Y: inout float[M*N] uniform(-1, 1)
// @warpforge arg rows = M
// @warpforge arg cols = N
// @warpforge arg depth = K
// @warpforge arg alpha = 0.75
// @warpforge arg beta = -1.25
// @warpforge launch grid=(cdiv(N, 32), cdiv(M, 4)), block=(32, 4)
__global__ void nt_scaled(int rows, int cols, int depth, float alpha, float beta, const float* X, const float* W,
                          float* Y)
{
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
"""

#: integers, no bound written, the loop body names its reads
INT_NAMED = """\
// @warpforge size S = 128
// @warpforge size D = 64
// @warpforge arg P: in int[S*D] int(-8, 8)
// @warpforge arg Q: in int[D*S] int(-8, 8)
// @warpforge arg R: out int[S*S]
// @warpforge arg s = S
// @warpforge arg d = D
// @warpforge launch grid=(S / 32, S / 8), block=(32, 8)
__global__ void int_named(const int* P, const int* Q, int* R, int s, int d)
{
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
"""


#: a symmetric rank-2k update written as a sum of two products (two tiles on each side), an early exit
SYM2K = """\
// @warpforge size S = 130
// @warpforge size D = 40
// @warpforge arg U: in float[S*D] uniform(-1, 1)
// @warpforge arg V: in float[S*D] uniform(-1, 1)
// @warpforge arg G: out float[S*S]
// @warpforge arg s = S
// @warpforge arg d = D
// @warpforge launch grid=(cdiv(S, 16), cdiv(S, 16)), block=(16, 16)
__global__ void sym2k(const float* U, const float* V, float* G, int s, int d)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= s) return;
    if (r >= s) return;
    float g = 0.0f;
    for (int t = 0; t < d; t++)
        g += U[r * d + t] * V[c * d + t] + V[r * d + t] * U[c * d + t];
    G[r * s + c] = g;
}
"""

def reasons(text: str, kernel: str) -> list[str]:
    """The rule's decline on the kernel as written and on its canonical form."""
    pol = text_policy(text, kernel)
    root = pol.root_candidate()
    out = []
    for cand in (root, pol.normalized(root)):
        if cand is not None:
            d = ask(REGISTRY["smem_tiling"], pol.context(cand))
            out.append(d.reason if d is not None else "")
    return out


def test_no_bound_written_takes_the_launch_extent_in_the_kernels_terms() -> None:
    kids = tiled(ATB_UNGUARDED, "atb_accumulate")
    assert params(kids) == ALL
    d = kids[0].definition
    # each output and each tile load checks the extent the original launch covered, in the kernel's parameters
    assert "if (!(q < (((nn) / 16) * (16)) && r < (((mm) / 16) * (16)))) return false;" in d
    assert "(r < (((mm) / 16) * (16)))" in d
    # C's own start value starts the tiled sum, before the tiles, so the additions keep the original's order (a
    # sum started at zero and added once rounded differently: 2 of 10^6 outputs out of tolerance on an H200)
    start = d.index("wft_acc[wft_i][wft_j] = Cm[q+r*nn];")
    assert start < d.index("for (int wft_k0 = ")
    assert "double Cm_acc = wft_acc[wft_i][wft_j];" in d and "+= wft_acc[wft_i][wft_j];" not in d
    assert "if (wft_live[wft_i][wft_j]) [&]() {" in d  # only the outputs the prologue let through are stored
    assert kids[0].launch is not None and kids[0].launch.grid == ("cdiv((N / 16) * (16), 64)",
                                                                    "cdiv((M / 16) * (16), 64)")


def test_alpha_beta_nt_keeps_the_term_and_the_scaling_store() -> None:
    kids = tiled(NT_ALPHA_BETA, "nt_scaled")
    assert params(kids) == ALL
    d = kids[0].definition
    assert "+= alpha * wft_a[wft_i] * wft_b[wft_j];" in d  # the term as written, reads from the tiles
    # not a plain product of the reads: a partial k-tile's zero padding is skipped, not added (alpha could be inf)
    assert "if (wft_k0 + wft_kk < (depth)) wft_acc" in d
    # the store before the loop runs once per output, before the tiles, and the sum starts from what it stored
    assert d.count("= beta * Y[r * cols + c];") == 1
    assert d.index("= beta * Y[r * cols + c];") < d.index("wft_acc[wft_i][wft_j] = Y[r*cols+c];") \
        < d.index("for (int wft_k0 = ")
    assert "float Y_acc = wft_acc[wft_i][wft_j];" in d


def test_a_declaration_reading_memory_before_the_loop_keeps_the_sum_added_once() -> None:
    # ``old`` would read the scaled value if the statements before the loop ran a second time after the tiles:
    # the sum then starts at zero and is added to the accumulator once (within the verifier's tolerances)
    text = NT_ALPHA_BETA.replace("Y[r * cols + c] = beta * Y[r * cols + c];",
                                 "const float old = Y[r * cols + c];\n        Y[r * cols + c] = beta * old;")
    kids = tiled(text, "nt_scaled")
    assert params(kids) == ALL
    d = kids[0].definition
    assert "wft_live" not in d and "+= wft_acc[wft_i][wft_j];" in d
    assert d.count("= beta * old;") == 1
    assert "__shared__ float wft_Bs[wft_BK][wft_BN + 1]" in d  # W read along k: padded


def test_a_loop_body_naming_its_reads_is_a_product_of_them() -> None:
    kids = tiled(INT_NAMED, "int_named")
    assert params(kids) == ALL
    d = kids[0].definition
    assert "wft_acc[wft_i][wft_j] += wft_a[wft_i] * wft_b[wft_j];" in d and "__shared__ int wft_As" in d
    assert "if (wft_k0 + wft_kk <" not in d  # a product of the reads: the zero padding adds nothing


def test_a_sum_of_two_products_stages_two_tiles_per_side() -> None:
    kids = tiled(SYM2K, "sym2k")
    assert params(kids) == ALL
    d = kids[0].definition
    assert "__shared__ float wft_As1[wft_BM]" in d and "__shared__ float wft_Bs1[wft_BK]" in d
    assert "+= wft_a[wft_i] * wft_b[wft_j] + wft_a1[wft_i] * wft_b1[wft_j];" in d
    assert "if (wft_k0 + wft_kk <" in d  # not a plain product: the padding of a partial k-tile is skipped

@pytest.mark.parametrize("text,kernel,words", [
    # no bound written, and no parameter carries the column count: which columns exist cannot be told
    (INT_NAMED.replace("// @warpforge size S = 128", "// @warpforge size S = 128\n// @warpforge size T = 96")
     .replace("R: out int[S*S]", "R: out int[S*T]").replace("Q: in int[D*S]", "Q: in int[D*T]")
     .replace("grid=(S / 32", "grid=(T / 32").replace("e * s + j", "e * 96 + j").replace("i * s + j", "i * 96 + j"),
     "int_named", "not an expression of the kernel's integer parameters"),
    # the parameter that carries the extent is written in the kernel: the bound it would give is not the launch's
    (INT_NAMED.replace("    R[i * s + j] = total;", "    s = s - 1;\n    R[i * s + j] = total;"), "int_named",
     "not an expression of the kernel's integer parameters"),
    # an exit tests the column only together with the row: a tile could load columns the kernel never reads
    (NT_ALPHA_BETA.replace("if (r < rows && c < cols) {", "if (r < rows && c < cols - r) {"), "nt_scaled",
     "do not bound it alone"),
    # a read that moves with k alone (shared by every output): not a row's or a column's tile
    (INT_NAMED.replace("total += lhs * rhs;", "total += lhs * rhs * P[e];"), "int_named",
     "does not move with k and one output coordinate only"),
])
def test_near_misses_are_declined_in_words(text: str, kernel: str, words: str) -> None:
    assert tiled(text, kernel) == []
    assert any(words in r for r in reasons(text, kernel)), reasons(text, kernel)


@needs_nvcc
@pytest.mark.parametrize("text,kernel", [
    (ATB_UNGUARDED, "atb_accumulate"),
    (NT_ALPHA_BETA, "nt_scaled"),
    (INT_NAMED, "int_named"),
    (SYM2K, "sym2k"),
])
def test_register_tiled_variants_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str) -> None:
    assert_every_variant_builds(tmp_path, text, kernel)
