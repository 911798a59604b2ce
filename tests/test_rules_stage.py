"""smem_stage, the staging remap on the kernel IR: a serial loop's footprint that a block's threads share,
staged in shared memory by k-tiles. Every spelling below (written here) must be proposed, keep the user's
signature and launch, and build through the evaluator's CPU build path (static guards, launch at both
verified sizes, translation unit, nvcc) — the harness the corpus applicability check uses. The declines are
checked for their reason in words. Numerics and speed are checked on the GPU (``test_rules_stage_gpu.py``)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.ir.stage import StagePlan, plan_stage
from warpforge.policy.ir.summary import summarize
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules.smem_stage import why_not
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

SQUARE = """// @warpforge size N = 512
// @warpforge arg c: out float[N*N]
// @warpforge arg a: in float[N*N]
// @warpforge arg b: in float[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(N / 16, N / 16), block=(16, 16)
"""
SIG = "__global__ void k(float* c, const float* a, const float* b, int n) {\n"

#: sizes that are not a multiple of any tile: the masked loads are what keeps the last tiles in bounds
RECT = """// @warpforge size M = 500
// @warpforge size NN = 300
// @warpforge size KK = 200
// @warpforge arg C: inout float[M*NN]
// @warpforge arg A: in float[M*KK]
// @warpforge arg B: in float[KK*NN]
// @warpforge arg m = M
// @warpforge arg nn = NN
// @warpforge arg kk = KK
// @warpforge arg alpha = 1.5
// @warpforge arg beta = 0.5
// @warpforge launch grid=(cdiv(NN, 32), cdiv(M, 8)), block=(32, 8)
"""
RSIG = ("__global__ void k(int m, int nn, int kk, float alpha, float beta, const float* A, const float* B, "
        "float* C) {\n")

MATVEC = """// @warpforge size R = 1000
// @warpforge size CC = 700
// @warpforge arg y: out float[R]
// @warpforge arg A: in float[R*CC]
// @warpforge arg x: in float[CC]
// @warpforge arg rows = R
// @warpforge arg cols = CC
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void k(float* y, const float* A, const float* x, int rows, int cols) {
"""

SPELLINGS: dict[str, str] = {
    # teaching style: no bound written (the launch covers the matrix exactly), a global accumulator reset first
    "no_bounds_global_acc": SQUARE + SIG +
    "  int row = blockIdx.y * blockDim.y + threadIdx.y;\n  int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  c[row * n + col] = 0;\n  for (int k = 0; k < n; k++) c[row * n + col] += a[row * n + k] * b[k * n + col];\n}\n",
    # a guard written, a register accumulator
    "guarded_register": SQUARE + SIG +
    "  int row = blockIdx.y * blockDim.y + threadIdx.y;\n  int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (row < n && col < n) {\n    float s = 0.0f;\n"
    "    for (int k = 0; k < n; ++k) s += a[row * n + k] * b[k * n + col];\n    c[row * n + col] = s;\n  }\n}\n",
    # the row from x, the column from y (the other orientation), `s = s + ...`
    "row_from_x": SQUARE + SIG +
    "  int row = threadIdx.x + blockIdx.x * blockDim.x;\n  int col = threadIdx.y + blockIdx.y * blockDim.y;\n"
    "  float s = 0.0f;\n  for (int k = 0; k < n; k++) s = s + a[row * n + k] * b[k * n + col];\n"
    "  c[row * n + col] = s;\n}\n",
    # benchmark-suite style: the loop variable declared before the `for`, an early exit, alpha/beta scaling of a
    # global accumulator, sizes that are no multiple of a tile (masked)
    "suite_alpha_beta_masked": RECT + RSIG +
    "  int j = blockIdx.x * blockDim.x + threadIdx.x;\n  int i = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  int k;\n  if (i >= m || j >= nn) return;\n  C[i * nn + j] *= beta;\n"
    "  for (k = 0; k < kk; k++) {\n    C[i * nn + j] += alpha * A[i * kk + k] * B[k * nn + j];\n  }\n}\n",
    # A·Aᵀ (syrk): one matrix read along both thread axes, fp64
    "syrk_double": SQUARE.replace("float[", "double[") +
    "__global__ void k(double* c, const double* a, const double* b, int n) {\n"
    "  int j = blockIdx.x * blockDim.x + threadIdx.x;\n  int i = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  if (i < n && j < n) {\n    double s = 0;\n"
    "    for (int k = 0; k < n; k++) s += a[i * n + k] * a[j * n + k] + b[0];\n    c[i * n + j] = s;\n  }\n}\n",
    # a row per thread on a 1-D block (a matrix-vector product): nobody shares A's row, but its loads are strided
    # across a warp; the tile is loaded along the row (coalesced). x[j], shared by all threads, stays global
    "row_per_thread_matvec": MATVEC +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < rows) {\n    float s = 0;\n"
    "    for (int j = 0; j < cols; j++) s += A[i * cols + j] * x[j];\n    y[i] = s;\n  }\n}\n",
    # two sums in one loop (gesummv): each gets its staged partial, both rows staged
    "two_accumulators": MATVEC.replace("// @warpforge arg x:",
                                       "// @warpforge arg B: in float[R*CC]\n// @warpforge arg x:")
    .replace("const float* x,", "const float* B, const float* x,") +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < rows) {\n    float t = 0, u = 0;\n"
    "    for (int j = 0; j < cols; j++) {\n      t += A[i * cols + j] * x[j];\n      u = u + B[i * cols + j] * x[j];\n"
    "    }\n    y[i] = 2.0f * t + 3.0f * u;\n  }\n}\n",
}


def policy(text: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text),
                         families={"smem_stage"})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(SPELLINGS))
def test_staging_is_proposed_and_builds(case: str) -> None:
    pol = policy(SPELLINGS[case])
    children = pol.propose_sync(pol.root_candidate())
    assert [c.steps for c in children] == [("smem_stage:k32",), ("smem_stage:k16",)], (case, pol.errors)
    builder = ca.EvaluatorBuild(pol)
    for child in children:
        text = child.definition
        # tiles in shared memory, padded rows, barriers around the compute, the loop replaced by the staged sum
        assert "__shared__" in text and "+ 1];" in text and text.count("__syncthreads();") == 2
        assert "+= wfs_sum" in text or "= s + wfs_sum;" in text
        assert child.grid is None and child.block is None  # the launch is the user's
        assert [p.text for p in parse(text).kernels[0].params] == [p.text for p in pol.kernel.params]
        got = builder.check(child)
        assert got.ok, (case, got.stage, got.reason[-2000:], text)


@needs_nvcc
def test_a_read_only_cache_load_of_a_staged_read_becomes_a_plain_shared_read() -> None:
    """Staging composed after ``readonly_cache``: ``__ldg(&a[..])`` in the loop's term must not become
    ``__ldg(&wfs_t0[..][..])``, a global load of a shared address (the CUDA context was lost on an H200)."""
    text = SQUARE + SIG + ("  int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
                           "  int col = blockIdx.x * blockDim.x + threadIdx.x;\n  float t = 0;\n"
                           "  for (int k = 0; k < n; k++) {\n"
                           "    t += __ldg(&a[row * n + k]) * __ldg(&b[k * n + col]);\n  }\n"
                           "  c[row * n + col] = t;\n}\n")
    pol = policy(text)
    children = pol.propose_sync(pol.root_candidate())
    assert children, pol.errors
    for child in children:
        assert "__ldg(&wfs_t" not in child.definition and "wfs_sum += wfs_t0[threadIdx.y][wfs_c] * " \
            "wfs_t1[threadIdx.x][wfs_c];" in child.definition, child.definition
        got = ca.EvaluatorBuild(pol).check(child)
        assert got.ok, got.reason[-2000:]


def test_a_block_of_1024_rows_gets_the_narrow_tile_only() -> None:
    """A row per thread on 1024-thread blocks: 1024 x 33 floats exceed static shared memory, 1024 x 9 do not."""
    text = SPELLINGS["row_per_thread_matvec"].replace("cdiv(R, 128), block=128", "cdiv(R, 1024), block=1024")
    pol = policy(text)
    children = pol.propose_sync(pol.root_candidate())
    assert [c.steps for c in children] == [("smem_stage:k8",)], pol.errors
    assert "wfs_t0[1024][8 + 1]" in children[0].definition


def plan_of(text: str) -> StagePlan | NotLegal:
    k = find_kernel(text, "k")
    assert k is not None
    return plan_stage(k, summarize(k))


def test_plan_reads_each_operand_along_its_own_axis() -> None:
    """GEMM: A's footprint moves with y (rows of the block), B's with x; A loads along k, B along x."""
    plan = plan_of(SPELLINGS["guarded_register"])
    assert isinstance(plan, StagePlan)
    assert [(r.param, r.axis, r.k_fast) for r in plan.reads] == [("a", "y", True), ("b", "x", False)]
    assert (plan.loop_var, plan.start, plan.end, plan.guarded) == ("k", "0", "n", True)
    swapped = plan_of(SPELLINGS["row_from_x"])
    assert isinstance(swapped, StagePlan)
    assert [(r.param, r.axis) for r in swapped.reads] == [("a", "x"), ("b", "y")] and not swapped.guarded


def test_syrk_stages_both_reads_of_one_matrix_and_leaves_the_broadcast() -> None:
    plan = plan_of(SPELLINGS["syrk_double"])
    assert isinstance(plan, StagePlan)
    assert [(r.param, r.axis) for r in plan.reads] == [("a", "y"), ("a", "x")]  # b[0] stays as it is


def test_guarded_loads_are_masked_by_the_spec_length_and_unguarded_ones_only_by_k() -> None:
    pol = policy(SPELLINGS["suite_alpha_beta_masked"])
    text = pol.propose_sync(pol.root_candidate())[0].definition
    # the buffer lengths in the kernel's own parameters, and the k bound
    assert "< ((m)*(kk))" in text and "< ((kk)*(nn))" in text and "k < kk &&" in text
    # the IR keeps the global accumulator in a register: the staged sum is added to it once
    assert "C_acc += wfs_sum;" in text and "C[i * nn + j] *= beta;" in text
    # the staging runs before the early exit: every thread of the block reaches the barriers
    assert text.index("__syncthreads") < text.index("return;")
    pol = policy(SPELLINGS["no_bounds_global_acc"])
    text = pol.propose_sync(pol.root_candidate())[0].definition
    assert "(k < n) ?" in text and "((n)*(n))" not in text


def reason(text: str) -> str:
    pol = policy(text)
    ctx = pol.context(pol.root_candidate())
    norm = pol.normalized(pol.root_candidate())
    got = why_not(pol.context(norm) if norm is not None else ctx)
    assert isinstance(got, NotLegal)
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


_HEAD = "  int row = blockIdx.y * blockDim.y + threadIdx.y;\n  int col = blockIdx.x * blockDim.x + threadIdx.x;\n"


@pytest.mark.parametrize(("text", "words"), [
    # a triangular loop: threads of a block would stage different ranges
    (SQUARE + SIG + _HEAD + "  float s = 0;\n  for (int k = 0; k < row; k++) s += a[row * n + k] * b[k * n + col];\n"
     "  c[row * n + col] = s;\n}\n", "differs between threads of a block"),
    # the loop reads what the kernel writes (in place)
    ("// @warpforge size N = 512\n// @warpforge arg c: inout float[N*N]\n// @warpforge arg a: in float[N*N]\n"
     "// @warpforge arg b: in float[N*N]\n// @warpforge arg n = N\n"
     "// @warpforge launch grid=(N / 16, N / 16), block=(16, 16)\n" + SIG + _HEAD +
     "  float s = 0;\n  for (int k = 0; k < n; k++) s += c[row * n + k] * b[k * n + col];\n"
     "  c[row * n + col] = s;\n}\n", "the kernel writes `c`"),
    # a conditional update: the loop carries more than a sum
    (SQUARE + SIG + _HEAD + "  float s = 0;\n  for (int k = 0; k < n; k++) { if (a[k] > 0) s += b[k * n + col]; }\n"
     "  c[row * n + col] = s;\n}\n", "not updates `acc += term`"),
    # a gather: the read is indexed by memory
    (SQUARE + SIG + _HEAD + "  float s = 0;\n  for (int k = 0; k < n; k++) s += b[(int)a[row * n + k] * n + col];\n"
     "  c[row * n + col] = s;\n}\n", "not affine"),
    # every thread reads its own row and column (no sharing between threads)
    (SQUARE + SIG + _HEAD + "  float s = 0;\n  for (int k = 0; k < n; k++) s += a[(row * n + col) * 64 + k];\n"
     "  c[row * n + col] = s;\n}\n", "no read of the loop moves with"),
    # a column walk on a 1-D block: nobody shares A's column and its loads coalesce already
    (MATVEC + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < cols) {\n    float s = 0;\n"
     "    for (int r = 0; r < rows; r++) s += A[r * cols + i];\n    y[i] = s;\n  }\n}\n", "no read of the loop"),
    # shared memory already there
    (SQUARE + SIG + _HEAD + "  __shared__ float t[16];\n  t[threadIdx.x] = a[col];\n  __syncthreads();\n"
     "  float s = 0;\n  for (int k = 0; k < n; k++) s += t[k % 16] * b[k * n + col];\n  c[row * n + col] = s;\n}\n",
     "already uses shared memory"),
    # a guard, and a buffer length the kernel cannot compute (a size no parameter carries, varied by the checks)
    (SQUARE.replace("float[N*N]\n// @warpforge arg b", "float[N*N + PAD]\n// @warpforge arg b")
     .replace("// @warpforge size N = 512\n", "// @warpforge size N = 512\n// @warpforge size PAD = 7\n") + SIG
     + _HEAD + "  if (row < n && col < n) {\n    float s = 0;\n"
     "    for (int k = 0; k < n; k++) s += a[row * n + k] * b[k * n + col];\n    c[row * n + col] = s;\n  }\n}\n",
     "length of `a`"),
    # the counter is read after the loop
    (SQUARE + SIG + _HEAD + "  float s = 0;\n  int k;\n"
     "  for (k = 0; k < n; k++) s += a[row * n + k] * b[k * n + col];\n"
     "  c[row * n + col] = s + k;\n}\n", "read after the loop"),
])
def test_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)


TRANSPOSE_SPEC = """// @warpforge size R = 1000
// @warpforge size CC = 700
// @warpforge arg in: in float[R*CC]
// @warpforge arg out: out float[R*CC]
// @warpforge arg rows = R
// @warpforge arg cols = CC
// @warpforge launch grid=(cdiv(CC, 32), cdiv(R, 32)), block=(32, 32)
__global__ void k(const float* in, float* out, int rows, int cols) {
"""

TRANSPOSES: dict[str, str] = {
    # teaching style: no guard (the launch covers the matrix exactly), the indices in locals
    "plain_locals": "#define N 1024\n// @warpforge arg input: in int[N*N]\n// @warpforge arg output: out int[N*N]\n"
    "// @warpforge launch grid=(N / 16, N / 16), block=(16, 16)\n__global__ void k(int* input, int* output) {\n"
    "  int x = threadIdx.x + blockIdx.x * blockDim.x;\n  int y = threadIdx.y + blockIdx.y * blockDim.y;\n"
    "  int index = y * N + x;\n  int transposed = x * N + y;\n  output[transposed] = input[index];\n}\n",
    # sizes no multiple of the tile, a guard around the store, a scaled value
    "guarded_scaled": TRANSPOSE_SPEC +
    "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  if (x < cols && y < rows) {\n    out[x * rows + y] = 2.0f * in[y * cols + x];\n  }\n}\n",
    # an early exit
    "early_exit": TRANSPOSE_SPEC +
    "  const int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  const int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  if (row >= rows || col >= cols) return;\n  out[col * rows + row] = in[row * cols + col];\n}\n",
}


@needs_nvcc
def test_a_transpose_whose_read_is_strided_loads_the_mirror_element_coalesced() -> None:
    """``out[y*rows + x] = in[x*cols + y]``: the store coalesces, the read does not. Each thread loads the element
    its mirror thread reads (``threadIdx.x`` and ``threadIdx.y`` exchanged: coalesced) into the mirror's slot, then
    the kernel's own statement reads its slot."""
    text = TRANSPOSE_SPEC.replace("cdiv(CC, 32), cdiv(R, 32)", "cdiv(R, 32), cdiv(CC, 32)") + (
        "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "  if (x < rows && y < cols) out[y * rows + x] = in[x * cols + y] + 1.0f;\n}\n")
    pol = policy(text)
    children = pol.propose_sync(pol.root_candidate())
    assert [c.steps for c in children] == [("smem_stage:tile",)], pol.errors
    body = children[0].definition
    assert "if (wfs_ok[threadIdx.x][threadIdx.y]) wfs_x[threadIdx.x][threadIdx.y] = in[" in body
    assert "out[y * rows + x] = wfs_x[threadIdx.y][threadIdx.x] + 1.0f;" in body
    assert body.count("__syncthreads();") == 2 and body.index("__syncthreads") < body.index("if (x < rows")
    got = ca.EvaluatorBuild(pol).check(children[0])
    assert got.ok, (got.stage, got.reason[-2000:], body)


@needs_nvcc
@pytest.mark.parametrize("case", sorted(TRANSPOSES))
def test_transpose_is_staged_through_a_padded_tile_and_builds(case: str) -> None:
    pol = policy(TRANSPOSES[case])
    children = pol.propose_sync(pol.root_candidate())
    assert [c.steps for c in children] == [("smem_stage:tile",)], (case, pol.errors)
    text = children[0].definition
    side = "16" if case == "plain_locals" else "32"
    assert f"[{side}][{side} + 1];" in text and text.count("__syncthreads();") == 1
    # the store of the mirror thread: its index with threadIdx.x and threadIdx.y exchanged, read across the tile
    assert "= wfs_x[threadIdx.x][threadIdx.y];" in text
    if case != "plain_locals":
        assert "wfs_ok[threadIdx.x][threadIdx.y]" in text  # a mirror outside the matrix stores nothing
    got = ca.EvaluatorBuild(pol).check(children[0])
    assert got.ok, (case, got.stage, got.reason[-2000:], text)


@pytest.mark.parametrize(("text", "words"), [
    (TRANSPOSES["guarded_scaled"].replace("block=(32, 32)", "block=(32, 8)").replace("cdiv(R, 32)", "cdiv(R, 8)"),
     "square block"),
    # a copy whose store already coalesces
    (TRANSPOSE_SPEC + "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  if (x < cols && y < rows) out[y * cols + x] = in[y * cols + x];\n}\n", "not a transpose"),
    # in place
    (TRANSPOSE_SPEC.replace("arg out: out", "arg out: inout") + "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  if (x < cols && y < rows) out[x * rows + y] = out[y * cols + x] + in[0];\n}\n", "in place"),
])
def test_transpose_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)
