"""lane_remap, the first remap on the kernel IR: a thread-per-item loop over a contiguous row bound to a
warp's lanes. Every spelling below (written here) must be proposed, keep the signature, move the launch to
a warp per item, and build through the evaluator's CPU build path (static guards, launch at both verified
sizes, translation unit, nvcc) — the same harness the corpus applicability check uses. The declines are
checked for their reason in words (the wide yardstick's funnel and a "why not" hint quote it). Numerics
are verified on the GPU by the search like every candidate."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal, plan_lanes
from warpforge.policy.ir.summary import summarize
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules.lane_remap import why_not
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

import test_ir_rules as ir_rules

# the row-kernel spec of the IR tests, with rows of a length that is not a multiple of 32 (the lanes' tail)
ROWS = ir_rules.ROWS.replace("C = 1024", "C = 1000")
K = ir_rules.ROW_KERNEL

SPELLINGS: dict[str, str] = {
    # an early exit, a scalar accumulator, `++j`
    "early_exit": ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
                  "  float s = 0.0f;\n  for (int j = 0; j < cols; ++j) s += A[i * cols + j] * x[j];\n  y[i] = s;\n}\n",
    # benchmark-suite style: a macro bound, the loop variable declared before the `for`, a global accumulator
    "global_accumulator_macro": "#define NCOLS 1000\n" + ROWS + K +
                                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < rows) {\n    int j;\n"
                                "    y[i] = 0;\n    for (j = 0; j < NCOLS; j++) {\n"
                                "      y[i] += A[i * NCOLS + j] * x[j];\n    }\n  }\n}\n",
    # an accumulator that starts from the output (`y[i] += ...` with no reset): its value is added once
    "accumulate_into_output": ROWS.replace("arg y: out", "arg y: inout") + K +
                              "  int i = threadIdx.x + blockIdx.x * blockDim.x;\n  if (i < rows) {\n"
                              "    for (int j = 0; j < cols; j++) y[i] += 2.0f * A[i * cols + j] * x[j];\n  }\n}\n",
    # a maximum through fmaxf, the index written coordinate-first, a local in the loop
    "row_max": ROWS + K + "  int i = threadIdx.x + blockDim.x * blockIdx.x;\n  if (i < rows) {\n"
               "    float m = -1e30f;\n"
               "    for (int j = 0; j < cols; j++) { float v = A[i * cols + j]; m = fmaxf(m, v); }\n"
               "    y[i] = m + x[0];\n  }\n}\n",
    # two accumulators in a `while` loop (the IR makes it a `for`), work after the loop
    "variance_while": ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
                      "  float s = 0.0f, q = 0.0f;\n  int j = 0;\n"
                      "  while (j < cols) { float v = A[i * cols + j]; s += v; q += v * v; j++; }\n"
                      "  float mean = s / cols;\n  y[i] = q / cols - mean * mean + x[0];\n}\n",
    # a typedef'd double element type
    "typedef_double": "typedef double real;\n" + ROWS.replace("float[", "double[") +
                      "__global__ void k(real* y, const real* A, const real* x, int rows, int cols) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < rows) {\n    real acc = 0;\n"
                      "    for (int j = 0; j < cols; j++) acc += A[(size_t)i * cols + j] * x[j];\n"
                      "    y[i] = acc;\n  }\n}\n",
    # CSR rows: a per-row start read from memory (warp_per_row's text shape does not cover it)
    "csr_rows": """// @warpforge size R = 4096
// @warpforge size NNZ = 65536
// @warpforge arg y: out float[R]
// @warpforge arg rowptr: in int[R+1] offsets(0, NNZ)
// @warpforge arg col: in int[NNZ] int(0, 4095)
// @warpforge arg val: in float[NNZ]
// @warpforge arg x: in float[4096]
// @warpforge arg rows = R
// @warpforge launch grid=cdiv(R, 256), block=256
__global__ void k(float* y, const int* rowptr, const int* col, const float* val, const float* x, int rows) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) {
    float dot = 0.0f;
    for (int j = rowptr[r]; j < rowptr[r + 1]; j++) dot += val[j] * x[col[j]];
    y[r] = dot;
  }
}
""",
    # a second grid dimension (a batch on blockIdx.y) is kept as it is
    "batched_rows": """// @warpforge size B = 4
// @warpforge size R = 1024
// @warpforge size C = 512
// @warpforge arg y: out float[B*R]
// @warpforge arg A: in float[B*R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=(cdiv(R, 64), B), block=64
__global__ void k(float* y, const float* A, int rows, int cols) {
  int b = blockIdx.y;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  float s = 0.0f;
  for (int j = 0; j < cols; j++) s += A[(b * rows + i) * cols + j];
  y[b * rows + i] = s / cols;
}
""",
    # a row view through a cast (`A + (size_t)i * cols`) read with the loop counter: the summary follows the view
    "row_view": ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < rows) {\n"
                "    const float* a = A + (size_t)i * cols;\n    float s = 0.0f;\n"
                "    for (int j = 0; j < cols; j++) s += a[j] * x[j];\n    y[i] = s;\n  }\n}\n",
    # per-channel statistics: the contiguous loop nested in a loop over the batch (partials carried across it),
    # a global accumulator scaled after the loops
    "channel_mean_nested": """// @warpforge size NB = 8
// @warpforge size F = 256
// @warpforge size S = 1024
// @warpforge arg mean: out float[F]
// @warpforge arg x: in float[NB*F*S]
// @warpforge arg batch = NB
// @warpforge arg filters = F
// @warpforge arg spatial = S
// @warpforge launch grid=cdiv(F, 128), block=128
__global__ void k(float* mean, const float* x, int batch, int filters, int spatial) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= filters) return;
  float scale = 1.f / (batch * spatial);
  mean[i] = 0;
  for (int j = 0; j < batch; ++j) {
    for (int k = 0; k < spatial; ++k) {
      int index = j * filters * spatial + i * spatial + k;
      mean[i] += x[index];
    }
  }
  mean[i] *= scale;
}
""",
}


def policy(text: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text),
                         families={"lane_remap"})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(SPELLINGS))
def test_remap_is_proposed_and_builds(case: str) -> None:
    pol = policy(SPELLINGS[case])
    children = pol.propose_sync(pol.root_candidate())
    assert [c.family for c in children] == ["lane_remap"], (case, pol.errors)
    child = children[0]
    text = child.definition
    # a warp per item: the index divided by the lanes, the loop strided by them, shuffles, lane 0 stores
    assert ") / 32;" in text and "+= 32)" in text and "__shfl_xor_sync" in text and "if (wfl_lane == 0)" in text
    assert child.grid is not None and child.grid[0] == f"({pol.spec.launch.grid[0]}) * 32"
    assert tuple(child.grid[1:]) == tuple(pol.spec.launch.grid[1:])
    # the user's parameters as written
    assert [p.text for p in parse(text).kernels[0].params] == [p.text for p in pol.kernel.params]
    got = ca.EvaluatorBuild(pol).check(child)
    assert got.ok, (case, got.stage, got.reason[-2000:], text)


def test_sum_starts_from_zero_per_lane_and_adds_the_initial_value_once() -> None:
    pol = policy(SPELLINGS["accumulate_into_output"])
    (child,) = pol.propose_sync(pol.root_candidate())
    body = child.definition
    init = body.index("const float wfl_init_")
    assert body.index("for (int j = wfl_lane;") > init
    assert "= wfl_init_" in body[body.index("__shfl_xor_sync"):]


def test_a_maximum_keeps_its_initial_value_and_combines_with_its_function() -> None:
    pol = policy(SPELLINGS["row_max"])
    (child,) = pol.propose_sync(pol.root_candidate())
    assert "m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, wfl_o));" in child.definition
    assert "wfl_init_m" not in child.definition


def reason(text: str) -> str:
    pol = policy(text)
    ctx = pol.context(pol.root_candidate())
    norm = pol.normalized(pol.root_candidate())
    got = why_not(pol.context(norm) if norm is not None else ctx)
    assert isinstance(got, NotLegal)
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


MATMUL = """// @warpforge size N = 512
// @warpforge arg c: out float[N*N]
// @warpforge arg a: in float[N*N]
// @warpforge arg b: in float[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(cdiv(N, 32), cdiv(N, 8)), block=(32, 8)
__global__ void k(float* c, const float* a, const float* b, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float s = 0.0f;
    for (int k = 0; k < n; k++) s += a[row * n + k] * b[k * n + col];
    c[row * n + col] = s;
  }
}
"""

COLUMN = ROWS + K + ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < cols) {\n    float s = 0.0f;\n"
                     "    for (int r = 0; r < rows; r++) s += A[r * cols + i];\n    y[i] = s;\n  }\n}\n")


@pytest.mark.parametrize(("text", "words"), [
    # neighbouring threads already read neighbouring elements (or the same one): nothing to gain
    (MATMUL, "already coalesced or shared"),
    (COLUMN, "no access in the loop is contiguous"),
    (ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
     "  for (int j = 0; j < cols; j++) y[j] = A[i * cols + j];\n}\n", "does not depend on the item"),
    (ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
     "  for (int j = 0; j < cols; j++) { s += A[i * cols + j]; if (s > 10.0f) break; }\n  y[i] = s;\n}\n",
     "leaves the loop early"),
    (ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
     "  for (int j = 0; j < cols; j++) s = s * 0.5f + A[i * cols + j];\n  y[i] = s;\n}\n",
     "is not updated as"),
    # per-iteration atomic updates are element_remap's (they commute: a lane may make any of them)
    (ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
     "  for (int j = 0; j < cols; j++) atomicAdd(&y[i], A[i * cols + j] * x[j]);\n}\n", "element_remap's"),
    (ROWS + K + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
     "  for (int j = 0; j < cols; j++) s += A[i * cols + j];\n  y[i] = s + gridDim.x;\n}\n", "gridDim.x"),
    # a return in the walk over the items that the IR could not make a guard (the launch gives a thread several
    # items): it ends this thread's later items, and a group per item walks others
    (ROWS.replace("grid=cdiv(R, 128)", "grid=min(cdiv(R, 128), 8)") + K +
     "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += blockDim.x * gridDim.x) {\n"
     "    if (A[i * cols] < 0.0f) return;\n    float s = 0.0f;\n"
     "    for (int j = 0; j < cols; j++) s += A[i * cols + j];\n    y[i] = s;\n  }\n}\n", "walk over the items"),
    # a second loop that writes the row is element_remap's
    (ROWS.replace("arg y: out float[R]", "arg y: out float[R*C]") + K +
     "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
     "  for (int j = 0; j < cols; j++) s += A[i * cols + j] * x[j];\n"
     "  for (int j = 0; j < cols; j++) y[i * cols + j] = s * x[j];\n}\n", "element_remap"),
])
def test_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)


def test_plan_reads_the_ir_summary() -> None:
    """The plan's facts come from the summary: the item index, the loop counter and the strided access."""
    k = find_kernel(SPELLINGS["early_exit"].split("\n", 8)[-1], "k")
    assert k is not None
    plan = plan_lanes(k, summarize(k))
    assert not isinstance(plan, NotLegal)
    assert (plan.index, plan.loop_var) == ("i", "j")
    # the operand that makes it worth it: contiguous in j, `cols` apart between neighbouring threads
    assert plan.strided.startswith("A[") and "cols*threadIdx.x" in plan.strided and " j " in plan.strided
    assert [(r.name, r.combine, r.type) for r in plan.reductions] == [("s", "sum", "float")]


def test_block_not_a_multiple_of_32_has_no_variant() -> None:
    text = SPELLINGS["early_exit"].replace("block=128", "block=48").replace("cdiv(R, 128)", "cdiv(R, 48)")
    pol = policy(text)
    assert pol.propose_sync(pol.root_candidate()) == []
    got = why_not(pol.context(pol.normalized(pol.root_candidate()) or pol.root_candidate()))
    assert got is not None and "multiple of 32" in got.reason


def test_an_opaque_call_handed_an_output_declines() -> None:
    text = ("__device__ void put(float* p, float v);\n" + ROWS + K +
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  put(y, 0.0f);\n"
            "  float s = 0.0f;\n  for (int j = 0; j < cols; j++) s += A[i * cols + j];\n  y[i] = s;\n}\n")
    assert "may write memory" in reason(text)


GRID_STRIDE = ROWS + K + ("  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows;\n"
                          "       i += blockDim.x * gridDim.x) {\n"
                          "    float s = 0.0f;\n    for (int j = 0; j < cols; j++) s += A[i * cols + j];\n"
                          "    y[i] = s;\n  }\n}\n")

WINDOW = ROWS + K + ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
                     "  int start = i - 3;\n  float s = 0.0f;\n"
                     "  for (int j = 0; j < 7; j++) s += x[start + j];\n  y[i] = s;\n}\n")


@needs_nvcc
def test_wider_forms_are_planned_on_the_items() -> None:
    """A grid-stride loop over the items, and two loops per item (the second through a global accumulator the
    IR keeps in a register): each loop split over the lanes, combined right after it (``plan_items``)."""
    pol = policy(GRID_STRIDE)
    (child,) = pol.propose_sync(pol.root_candidate())
    assert "i += (blockDim.x * gridDim.x) / 32)" in child.definition and "if (wfl_lane == 0) {" in child.definition
    two = ROWS + K + ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
                      "  for (int j = 0; j < cols; j++) s += A[i * cols + j] * x[j];\n  y[i] = s;\n"
                      "  for (int j = 0; j < cols; j++) y[i] += x[j];\n}\n")
    pol = policy(two)
    (child,) = pol.propose_sync(pol.root_candidate())
    text = child.definition
    assert text.count("__shfl_xor_sync") == 2 and text.count("+= 32)") == 2
    assert text.index("s = wfl_init0_s + s;") < text.index("for (int j = wfl_lane; j < cols; j += 32) y_acc")
    got = ca.EvaluatorBuild(pol).check(child)
    assert got.ok, (got.stage, got.reason[-2000:])


def test_mapping_declines_name_the_mapping() -> None:
    # an index derived from the item (a window's start) follows it: the decline is about profit, not mapping
    assert "already coalesced" in reason(WINDOW)


def test_views_are_accesses_of_their_parameter() -> None:
    """``a = A + off`` then ``a[j]`` is an access of ``A`` at ``off + j`` (chained views too), so legality sees it."""
    text = ("__global__ void k(float* y, const float* A, int cols) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  const float* row = A + (size_t)i * cols;\n  const float* half = row + 16;\n  float* out = y + i;\n"
            "  float s = 0.0f;\n  for (int j = 0; j < 16; j++) s += half[j];\n  out[0] = s;\n}\n")
    k = find_kernel(text, "k")
    assert k is not None
    got = {(a.param, a.kind): a.index for a in summarize(k).accesses}
    assert got[("A", "read")] == {"blockIdx.x": "blockDim.x*cols", "threadIdx.x": "cols", "j": "1", "1": "16"}
    assert got[("y", "write")] == {"blockIdx.x": "blockDim.x", "threadIdx.x": "1"}


def test_a_view_of_a_written_array_read_in_the_loop_declines() -> None:
    text = ROWS.replace("arg y: out float[R]", "arg y: inout float[R*C]") + K + (
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
        "  const float* yr = y + i * cols;\n  float s = 0.0f;\n"
        "  for (int j = 0; j < cols; j++) s += yr[j] * A[i * cols + j];\n  y[i * cols] = s;\n}\n")
    assert "which the kernel writes" in reason(text)


def test_a_template_kernel_is_planned_with_the_spec_instantiation() -> None:
    text = ROWS.replace("// @warpforge launch", "// @warpforge template float\n// @warpforge launch") + (
        "template <typename T>\n__global__ void k(T* y, const T* A, const T* x, int rows, int cols) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  T s = 0;\n"
        "  for (int j = 0; j < cols; j++) s += A[i * cols + j] * x[j];\n  y[i] = s;\n}\n")
    pol = policy(text)
    children = pol.propose_sync(pol.root_candidate())
    assert [c.family for c in children] == ["lane_remap"], pol.errors
    assert "const T wfl_init_s = s;" in children[0].definition
    got = ca.EvaluatorBuild(pol).check(children[0])
    assert got.ok, (got.stage, got.reason[-2000:])
