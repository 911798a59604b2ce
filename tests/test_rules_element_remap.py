"""element_remap (a warp or a block per item, its write loops split over the group) and lane_remap's wider forms
(several reading loops per item, grid-stride items), on kernels written here in several styles. Each proposal
must keep the signature, move the launch to a group per item, and build through the evaluator's CPU build path
(static guards, launch at both verified sizes, nvcc) as the corpus applicability check does; each decline says
why in words. Numerics and speed are checked on the GPU (``test_rules_gpu.py``)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.ir.remap_items import plan_items
from warpforge.policy.ir.summary import summarize
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import element_remap, lane_remap
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

EMBED_SPEC = """// @warpforge size B = 8
// @warpforge size T = 256
// @warpforge size C = 768 fixed
// @warpforge size V = 4096 fixed
// @warpforge arg out: out float[B*T*C]
// @warpforge arg inp: in int[B*T] int(0, 4095)
// @warpforge arg tok_emb: in float[V*C]
// @warpforge arg pos_emb: in float[T*C]
// @warpforge arg B = B
// @warpforge arg T = T
// @warpforge arg C = C
// @warpforge launch grid=cdiv(B * T, 256), block=256
"""
EMBED_SIG = ("__global__ void k(float* out, const int* inp, const float* tok_emb, const float* pos_emb, int B, int T, "
             "int C) {\n")

ROWS_SPEC = """// @warpforge size R = 2048
// @warpforge size C = 1000
// @warpforge arg y: out float[R*C]
// @warpforge arg x: in float[R*C]
// @warpforge arg bias: in float[C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
"""
ROWS_SIG = "__global__ void k(real* y, const real* x, const real* bias, int rows, int cols) {\n"

WRITES: dict[str, str] = {
    # an embedding row copy: the row through `/` and `%` of the item and a gathered token, views, early exit
    "embedding_views": EMBED_SPEC + EMBED_SIG +
    "  int idx = blockIdx.x * blockDim.x + threadIdx.x;\n  if (idx >= B * T) return;\n"
    "  int b = idx / T;\n  int t = idx % T;\n  float* row_out = out + b * T * C + t * C;\n"
    "  int ix = inp[b * T + t];\n  const float* tok_row = tok_emb + ix * C;\n"
    "  const float* pos_row = pos_emb + t * C;\n"
    "  for (int i = 0; i < C; i++) {\n    row_out[i] = tok_row[i] + pos_row[i];\n  }\n}\n",
    # benchmark-suite style: a typedef'd element type, a guard around the work, the loop variable before the `for`
    "bias_add_guard_hoisted": "typedef float real;\n" + ROWS_SPEC + ROWS_SIG +
    "  int i = threadIdx.x + blockIdx.x * blockDim.x;\n  int j;\n  if (i < rows) {\n"
    "    for (j = 0; j < cols; j++) {\n      y[i * cols + j] = x[i * cols + j] + bias[j];\n    }\n  }\n}\n",
    # the items walked by a grid-stride loop, an in-place update (read and written at the same element)
    "grid_stride_in_place": "typedef float real;\n" + ROWS_SPEC.replace("arg y: out", "arg y: inout") + ROWS_SIG +
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += blockDim.x * gridDim.x) {\n"
    "    for (int j = 0; j < cols; j++) y[i * cols + j] = 0.5f * y[i * cols + j] + x[i * cols + j];\n  }\n}\n",
    # a row softmax in three passes: a maximum, exp written with a sum, the row divided; read back by its owner
    "softmax_three_pass": "typedef float real;\n" + ROWS_SPEC + ROWS_SIG +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n"
    "  const real* xr = x + i * cols;\n  real* yr = y + i * cols;\n  float m = -1e30f;\n"
    "  for (int j = 0; j < cols; j++) m = fmaxf(m, xr[j]);\n  float s = 0.0f;\n"
    "  for (int j = 0; j < cols; j++) {\n    yr[j] = expf(xr[j] - m);\n    s += yr[j];\n  }\n"
    "  for (int j = 0; j < cols; j++) yr[j] /= s;\n}\n",
    # attention-value style: the row zeroed, then accumulated inside a loop over the keys (the inner loop is split;
    # every lane runs the outer loop and owns the same elements in each of its iterations)
    "weighted_rows_nested": "typedef float real;\n" + ROWS_SPEC + ROWS_SIG +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  real* yr = y + i * cols;\n"
    "  for (int j = 0; j < cols; j++) { yr[j] = 0.0f; }\n"
    "  for (int t = 0; t <= i % 8; t++) {\n    const real* v = x + t * cols;\n    float w = bias[t];\n"
    "    for (int j = 0; j < cols; j++) yr[j] += w * v[j];\n  }\n}\n",
    # the same with the maximum as compare-and-assign, a double sum and a causal bound on the first passes
    "softmax_compare_assign_causal": "typedef float real;\n" + ROWS_SPEC + ROWS_SIG +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  int last = i % cols;\n"
    "  const real* xr = x + i * cols;\n  real* yr = y + i * cols;\n  float m = -1e30f;\n"
    "  for (int j = 0; j <= last; j++) { if (xr[j] > m) { m = xr[j]; } }\n  double s = 0.0;\n"
    "  for (int j = 0; j <= last; j++) { float e = expf(xr[j] - m); s += e; yr[j] = e; }\n"
    "  for (int j = 0; j < cols; j++) { if (j <= last) yr[j] /= (float)s; else yr[j] = 0.0f; }\n}\n",
}

SPELLINGS_READ: dict[str, str] = {
    # mean then variance: two reading passes, the totals stored after the last loop (on lane 0)
    "mean_variance_two_pass": "typedef float real;\n" + ROWS_SPEC.replace("float[R*C]\n// @warpforge arg x",
                                                                         "float[R]\n// @warpforge arg x", 1) +
    ROWS_SIG + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= rows) return;\n  float s = 0.0f;\n"
    "  for (int j = 0; j < cols; j++) s += x[i * cols + j];\n  float mean = s / cols;\n  float v = 0.0f;\n"
    "  for (int j = 0; j < cols; j++) { float d = x[i * cols + j] - mean; v += d * d; }\n"
    "  y[i] = v / cols + bias[0];\n}\n",
    # a row sum over items walked by a grid-stride loop
    "grid_stride_row_sum": "typedef float real;\n" + ROWS_SPEC.replace("float[R*C]\n// @warpforge arg x",
                                                                      "float[R]\n// @warpforge arg x", 1) +
    ROWS_SIG + "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += blockDim.x * gridDim.x) {\n"
    "    float s = 0.0f;\n    for (int j = 0; j < cols; j++) s += x[i * cols + j] * bias[j];\n    y[i] = s;\n  }\n}\n",
}


def policy(text: str, family: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text), families={family})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(WRITES))
def test_write_loops_are_split_over_a_group_and_build(case: str) -> None:
    pol = policy(WRITES[case], "element_remap")
    children = pol.propose_sync(pol.root_candidate())
    assert children and {c.family for c in children} == {"element_remap"}, (case, pol.errors)
    params = {c.steps[-1].split(":", 1)[1] for c in children}
    # a block per item only where nothing is combined across the group
    assert params == ({"warp"} if case.startswith("softmax") else {"warp", "block"}), params
    grid0 = pol.spec.launch.grid[0]
    for child in children:
        text = child.definition
        param = child.steps[-1].split(":", 1)[1]
        group = "32" if param == "warp" else "blockDim.x"
        assert f") / {group}" in text and f"+= {group})" in text, text
        assert child.grid is not None and child.grid[0] == (f"({grid0}) * 32" if param == "warp"
                                                              else f"({grid0}) * (256)" if "B * T" in grid0
                                                              else f"({grid0}) * (128)")
        assert [p.text for p in parse(text).kernels[0].params] == [p.text for p in pol.kernel.params]
        got = ca.EvaluatorBuild(pol).check(child)
        assert got.ok, (case, param, got.stage, got.reason[-2000:], text)


def test_softmax_passes_combine_after_each_loop() -> None:
    pol = policy(WRITES["softmax_three_pass"], "element_remap")
    (child,) = pol.propose_sync(pol.root_candidate())
    text = child.definition
    # the maximum is combined before the exp pass reads it, the sum before the division reads it
    first_combine = text.index("m = fmaxf(m, __shfl_xor_sync")
    assert text.index("expf(") > first_combine
    sum_combine = text.index("s = s + __shfl_xor_sync")
    assert text.index("/= s") > sum_combine > text.index("expf(")
    assert "const float wfl_init1_s = s;" in text and "s = wfl_init1_s + s;" in text
    assert text.count("+= 32)") == 3


def test_a_compare_and_assign_maximum_is_combined_with_fmaxf() -> None:
    pol = policy(WRITES["softmax_compare_assign_causal"], "element_remap")
    (child,) = pol.propose_sync(pol.root_candidate())
    assert "m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, wfl_o));" in child.definition
    assert "const double wfl_init1_s = s;" in child.definition


def test_grid_stride_items_step_by_groups() -> None:
    pol = policy(WRITES["grid_stride_in_place"], "element_remap")
    children = {c.steps[-1]: c for c in pol.propose_sync(pol.root_candidate())}
    warp = children["element_remap:warp"].definition
    assert "i += (blockDim.x * gridDim.x) / 32)" in warp and "const int wfl_lane = threadIdx.x % 32;" in warp
    block = children["element_remap:block"].definition
    assert "i += (blockDim.x * gridDim.x) / blockDim.x)" in block


def test_the_plan_holds_the_item_fixed() -> None:
    """``b = idx / T`` and a gathered ``ix`` are one value per item: the write is one element per iteration."""
    text = WRITES["embedding_views"].split("\n", 12)[-1]
    k = find_kernel(text, "k")
    assert k is not None
    plan = plan_items(k, summarize(k))
    assert not isinstance(plan, NotLegal), plan
    assert plan.index == "idx" and [lp.var for lp in plan.loops] == ["i"] and plan.loops[0].writes == ("out",)
    assert plan.strided == "row_out[i]" and plan.tail is None and plan.form == "top"


def reason(text: str, family: str = "element_remap") -> str:
    pol = policy(text, family)
    norm = pol.normalized(pol.root_candidate())
    ctx = pol.context(norm if norm is not None else pol.root_candidate())
    mod = element_remap if family == "element_remap" else lane_remap
    got = mod.why_not(ctx)
    assert isinstance(got, NotLegal), got
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


def rows(body: str) -> str:
    return "typedef float real;\n" + ROWS_SPEC + ROWS_SIG + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
        "  if (i >= rows) return;\n" + body + "}\n"


@pytest.mark.parametrize(("text", "words"), [
    # a recurrence along the row: iteration j reads what iteration j-1 wrote
    (rows("  for (int j = 1; j < cols; j++) y[i * cols + j] = y[i * cols + j - 1] + x[i * cols + j];\n"),
     "written and read at different elements"),
    # every item writes the same elements
    (rows("  for (int j = 0; j < cols; j++) y[j] = x[i * cols + j];\n"), "does not depend on the item"),
    # a store before the loop into the array the loop writes: lane 0's store and another lane's may meet
    (rows("  y[i] = 0.0f;\n  for (int j = 1; j < cols; j++) y[i * cols + j] = x[i * cols + j];\n"),
     "touched in the loops and outside them"),
    # a store before the loop that is not a statement of its own cannot be left to lane 0
    (rows("  int z = (y[i] = 0.0f) > 1.0f;\n  for (int j = 0; j < cols; j++) y[i * cols + j] = x[i * cols + j] + z;\n"),
     "written before the item's loops"),
    # a write in a nested loop is not one element per iteration of the split loop
    (rows("  for (int j = 0; j < cols; j++)\n    for (int q = 0; q < 4; q++) y[i * cols + j] += "
          "x[(i * cols + j) * 4 + q];\n"), "not one element per iteration"),
    # neighbouring items already write neighbouring elements (a column walk per item)
    (rows("  for (int j = 0; j < cols; j++) y[j * rows + i] = x[j * rows + i];\n"), "already coalesced"),
    # a jump out of the loop
    (rows("  for (int j = 0; j < cols; j++) { if (x[i * cols + j] < 0.0f) break; y[i * cols + j] = 1.0f; }\n"),
     "leaves the loop early"),
    # a value carried across iterations that is not a sum or min/max
    (rows("  float c = 0.0f;\n  for (int j = 0; j < cols; j++) { c = 0.5f * c + x[i * cols + j]; "
          "y[i * cols + j] = c; }\n"), "is carried across iterations"),
    # a reading-only loop is lane_remap's
    (rows("  float s = 0.0f;\n  for (int j = 0; j < cols; j++) s += x[i * cols + j];\n  y[i] = s;\n"),
     "write no memory"),
])
def test_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)


def test_other_uses_of_the_thread_coordinate_decline() -> None:
    got = reason(rows("  for (int j = 0; j < cols; j++) y[i * cols + j] = x[i * cols + j] + threadIdx.x;\n"))
    assert "threadIdx.x" in got and "besides the item index" in got


@needs_nvcc
@pytest.mark.parametrize("case", sorted(SPELLINGS_READ))
def test_lane_remap_takes_several_loops_and_grid_stride_items(case: str) -> None:
    pol = policy(SPELLINGS_READ[case], "lane_remap")
    children = pol.propose_sync(pol.root_candidate())
    assert [c.family for c in children] == ["lane_remap"], (case, pol.errors)
    text = children[0].definition
    assert text.count("__shfl_xor_sync") == text.count("+= 32)") and "if (wfl_lane == 0) {" in text
    got = ca.EvaluatorBuild(pol).check(children[0])
    assert got.ok, (case, got.stage, got.reason[-2000:], text)


def test_lane_remap_leaves_write_loops_to_element_remap() -> None:
    assert "element_remap" in reason(WRITES["bias_add_guard_hoisted"], "lane_remap")
