"""The two IR remaps on forms other people's kernels use (issue 27's wide yardstick: the closest family of
257 loop kernels that got nothing), written here in our own words: a 2-D grid flattened by hand, a
grid-stride loop over the items (a framework's ``KERNEL_LOOP``), a ``const`` item, a comparison tree-sitter
misreads as an assignment, half-precision accumulators, and a launch inside a host template. Each accepted
form must be proposed and build through the evaluator's CPU build path (nvcc); the illegal ones decline with
their reason. GPU: ``test_rules_remap_wide_gpu.py``."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal, is_item
from warpforge.policy.ir.remap_columns import plan_columns
from warpforge.policy.ir.summary import summarize
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import column_remap, lane_remap
from warpforge.spec.infer import dependent_arguments, infer
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

#: per-plane statistics of an NCHW tensor: one item per (image, pixel), a walk over the planes (a column)
PLANES = """// @warpforge size NI = 4
// @warpforge size P = 64
// @warpforge size HW = 1000
// @warpforge arg img: in float[NI*P*HW]
// @warpforge arg res: out float[NI*HW]
// @warpforge arg images = NI
// @warpforge arg planes = P
// @warpforge arg pixels = HW
// @warpforge launch grid=cdiv(NI * HW, 256), block=256
"""
PLANES_SIG = "__global__ void k(const float* img, float* res, int images, int planes, int pixels) {\n"

#: a per-window mean: one item per (window, channel) over a 2-D grid flattened by hand, the window a row
WINDOWS = """// @warpforge size NW = 4096
// @warpforge size L = 96
// @warpforge arg src: in float[NW*L]
// @warpforge arg dst: out float[NW]
// @warpforge arg count = NW
// @warpforge arg len = L
// @warpforge launch grid=(cdiv(NW, 512), 2), block=256
"""
WINDOWS_SIG = "__global__ void k(const float* src, float* dst, int count, int len) {\n"

#: causal attention scores: one item per (batch, head, query, key), a dot product over the head's channels
ATTN = """// @warpforge size NB = 2
// @warpforge size NT = 64
// @warpforge size NC = 384
// @warpforge size NHEADS = 6
// @warpforge arg out: out float[NB*NHEADS*NT*NT]
// @warpforge arg inp: in float[NB*NT*3*NC]
// @warpforge arg B = NB
// @warpforge arg T = NT
// @warpforge arg C = NC
// @warpforge arg NH = NHEADS
// @warpforge launch grid=cdiv(NB*NHEADS*NT*NT, 256), block=256
"""
ATTN_SIG = "__global__ void k(float* out, const float* inp, int B, int T, int C, int NH) {\n"

COLUMN: dict[str, str] = {
    # a grid-stride loop over the items whose step is the grid's x threads, a running sum over the planes
    "grid_stride_sum": PLANES + PLANES_SIG +
    "  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < images * pixels;\n"
    "       e += blockDim.x * gridDim.x) {\n"
    "    const int im = e / pixels;\n    const int px = e - im * pixels;\n    float tot = 0.0f;\n"
    "    for (int pl = 0; pl < planes; ++pl) tot += img[(im * planes + pl) * pixels + px];\n"
    "    res[e] = tot / planes;\n  }\n}\n",
    # the same with `gridDim.x * blockDim.x` and a maximum through the compare-and-assign idiom
    "grid_stride_max": PLANES + PLANES_SIG +
    "  for (int e = threadIdx.x + blockIdx.x * blockDim.x; e < images * pixels; e += gridDim.x * blockDim.x) {\n"
    "    int im = e / pixels, px = e % pixels;\n    float best = -3.0e38f;\n"
    "    for (int pl = 0; pl < planes; pl++) {\n      float v = img[(im * planes + pl) * pixels + px];\n"
    "      if (v > best) best = v;\n    }\n    res[e] = best;\n  }\n}\n",
    # a const item with an early exit: the rewrite moves a thread past the bound to column 0
    "const_item": PLANES + PLANES_SIG +
    "  const int e = blockIdx.x * blockDim.x + threadIdx.x;\n  if (e >= images * pixels) return;\n"
    "  const int im = e / pixels;\n  const int px = e % pixels;\n  float tot = 0.0f;\n"
    "  for (int pl = 0; pl < planes; ++pl) tot += img[(im * planes + pl) * pixels + px];\n"
    "  res[e] = tot;\n}\n",
}

LANE: dict[str, str] = {
    # the flattened 2-D grid, the item divided down in place (`w /= 2` after taking its parity)
    "flattened_2d_grid": WINDOWS.replace("arg dst: out float[NW]", "arg dst: out float[NW*2]") + WINDOWS_SIG +
    "  int w = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;\n  if (w >= count * 2) return;\n"
    "  int half = w % 2;\n  w /= 2;\n  float acc = 0.0f;\n"
    "  for (int j = half; j < len; j += 1) acc += src[w * len + j];\n  dst[w * 2 + half] = acc / len;\n}\n",
    # a masked item (llm.c's causal attention scores): the item's element is stored before the loop it skips;
    # lane 0 makes that store for the warp
    "masked_item": ATTN + ATTN_SIG +
    "  int idx = blockIdx.x * blockDim.x + threadIdx.x;\n  if (idx < B * NH * T * T) {\n"
    "    int t2 = idx % T;\n    int t = (idx / T) % T;\n"
    "    if (t2 > t) {\n      out[idx] = -INFINITY;\n      return;\n    }\n"
    "    int h = (idx / (T * T)) % NH;\n    int b = idx / (NH * T * T);\n    int C3 = C * 3;\n    int hs = C / NH;\n"
    "    const float* q = inp + b * T * C3 + t * C3 + h * hs;\n"
    "    const float* kk = inp + b * T * C3 + t2 * C3 + h * hs + C;\n"
    "    float val = 0.0f;\n    for (int i = 0; i < hs; i++) val += q[i] * kk[i];\n"
    "    out[idx] = val * (1.0f / sqrtf(hs));\n  }\n}\n",
    # a bounds test written as one comparison chain (tree-sitter reads `a < len && b >= 0` as a template)
    "comparison_chain": WINDOWS + WINDOWS_SIG +
    "  int w = blockIdx.x * blockDim.x + threadIdx.x;\n  if (w >= count) return;\n  float acc = 0.0f;\n"
    "  for (int j = 0; j < len; ++j) {\n    int a = j - 1;\n    int b = j + 1;\n"
    "    int inside = (a >= 0 && a < len &&\n                  b >= 0 && b < len);\n"
    "    acc += inside ? src[w * len + j] : 0.0f;\n  }\n  dst[w] = acc;\n}\n",
    # the item declared with another variable in one statement (older code's `int i = ..., j;`)
    "shared_declaration": WINDOWS + WINDOWS_SIG +
    "  int w = blockIdx.x * blockDim.x + threadIdx.x, j;\n  if (w >= count) return;\n  float acc = 0.0f;\n"
    "  for (j = 0; j < len; j++) acc += src[w * len + j];\n  dst[w] = acc;\n}\n",
    # half-precision accumulators (sm_80+: __shfl_xor_sync moves them, `+` is defined on the device)
    "half_sum": "#include <cuda_fp16.h>\n" + WINDOWS.replace("float[", "half[") +
    "__global__ void k(const __half* src, __half* dst, int count, int len) {\n"
    "  int w = blockIdx.x * blockDim.x + threadIdx.x;\n  if (w >= count) return;\n  __half acc = 0;\n"
    "  for (int j = 0; j < len; j++) acc += src[w * len + j];\n  dst[w] = acc;\n}\n",
    "bf16_sum": "#include <cuda_bf16.h>\n" + WINDOWS.replace("float[", "bf16[") +
    "__global__ void k(const __nv_bfloat16* src, __nv_bfloat16* dst, int count, int len) {\n"
    "  int w = blockIdx.x * blockDim.x + threadIdx.x;\n  if (w >= count) return;\n  __nv_bfloat16 acc = 0;\n"
    "  for (int j = 0; j < len; j++) acc += src[w * len + j];\n  dst[w] = acc;\n}\n",
}


def policy(text: str, family: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text), families={family})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(COLUMN))
def test_column_forms_are_split_and_build(case: str) -> None:
    pol = policy(COLUMN[case], "column_remap")
    children = pol.propose_sync(pol.root_candidate())
    assert children and {c.family for c in children} == {"column_remap"}, (case, pol.errors)
    child = children[0]
    text = child.definition
    assert "+= blockDim.y)" in text and "threadIdx.y == 0" in text and "const int e =" not in text
    if case.startswith("grid_stride"):
        # the pass runs while some thread of the block has an item; a barrier ends it; one store per item
        assert "wfc_i - (int)threadIdx.x < (images * pixels)" in text and "int e = wfc_off ? (int)0 : wfc_i;" in text
        assert text.count("__syncthreads();") == 2 and "if (!wfc_off && threadIdx.y == 0) {" in text
    got = ca.EvaluatorBuild(pol).check(child)
    assert got.ok, (case, got.stage, got.reason[-2000:], text)


@needs_nvcc
@pytest.mark.parametrize("case", sorted(LANE))
def test_lane_forms_are_bound_to_lanes_and_build(case: str) -> None:
    pol = policy(LANE[case], "lane_remap")
    children = pol.propose_sync(pol.root_candidate())
    assert [c.family for c in children] == ["lane_remap"], (case, pol.errors)
    child = children[0]
    assert ") / 32;" in child.definition and "__shfl_xor_sync" in child.definition
    assert child.grid is not None and child.grid[0] == f"({pol.spec.launch.grid[0]}) * 32"
    assert tuple(child.grid[1:]) == tuple(pol.spec.launch.grid[1:])
    got = ca.EvaluatorBuild(pol).check(child)
    assert got.ok, (case, got.stage, got.reason[-2000:], child.definition)


def test_flattened_grids_are_one_item_per_thread() -> None:
    assert is_item({"blockIdx.x": "blockDim.x", "threadIdx.x": "1"})
    assert is_item({"blockIdx.x": "blockDim.x", "blockIdx.y": "gridDim.x*blockDim.x", "threadIdx.x": "1"})
    assert is_item({"blockIdx.x": "blockDim.x", "blockIdx.y": "blockDim.x*gridDim.x",
                    "blockIdx.z": "gridDim.y*blockDim.x*gridDim.x", "threadIdx.x": "1"})
    # a y row of blocks that is not a whole grid row apart, or a column index of a 2-D block: not the item
    assert not is_item({"blockIdx.x": "blockDim.x", "blockIdx.y": "blockDim.x", "threadIdx.x": "1"})
    assert not is_item({"blockIdx.x": "blockDim.x", "threadIdx.x": "1", "threadIdx.y": "blockDim.x"})


def reason(text: str, family: str) -> str:
    pol = policy(text, family)
    norm = pol.normalized(pol.root_candidate())
    mod = column_remap if family == "column_remap" else lane_remap
    got = mod.why_not(pol.context(norm if norm is not None else pol.root_candidate()))
    assert isinstance(got, NotLegal), got
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


def stride(body: str) -> str:
    return PLANES + PLANES_SIG + ("  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < images * pixels; "
                                  "e += blockDim.x * gridDim.x) {\n" + body + "  }\n}\n")


def test_masked_item_store_is_made_by_lane_0() -> None:
    pol = policy(LANE["masked_item"], "lane_remap")
    child = pol.propose_sync(pol.root_candidate())[0]
    assert "if (wfl_lane == 0) out[idx] = -INFINITY;" in child.definition
    # the mask's return is the same for the whole warp (it reads the item alone): no lane is left to shuffle alone
    assert child.definition.index("return;") < child.definition.index("__shfl_xor_sync")


def _masked(store: str, extra: str = "") -> str:
    return LANE["masked_item"].replace("out[idx] = -INFINITY;", store).replace("float val = 0.0f;", extra +
                                                                                  "float val = 0.0f;")


@pytest.mark.parametrize(("text", "words"), [
    # lane 0 alone adding would be right, but the rule keeps to stores it can show are made once as before
    (_masked("out[idx] += -1.0f;"), "only a plain store"),
    # another lane could read the element before lane 0 wrote it
    (_masked("out[idx] = -INFINITY;", "float prev = out[idx + 1];\n    out[idx + 1] = prev * 2.0f;\n    "),
     "is read too"),
    # a store whose value is the item's but whose statement is not a store of its own
    (_masked("out[idx] = -INFINITY, out[idx + 1] = 0.0f;"), "only a plain store"),
])
def test_masked_item_declines(text: str, words: str) -> None:
    assert words in reason(text, "lane_remap")


@pytest.mark.parametrize(("text", "family", "words"), [
    # a pass that stops early would skip the barrier the other threads wait at (the IR makes the `continue` a
    # guard, ``item_exits``: the barrier would be inside it)
    (stride("    if (img[e] < 0) continue;\n    float t = 0;\n"
            "    for (int pl = 0; pl < planes; ++pl) t += img[pl * pixels + e % pixels];\n    res[e] = t;\n"),
     "column_remap", "the item's loop is inside a branch `if (!(img[e] < 0))`"),
    # the counter changed in the body is not a grid-stride loop over the items any more
    (stride("    float t = 0;\n    for (int pl = 0; pl < planes; ++pl) t += img[pl * pixels + e % pixels];\n"
            "    res[e] = t;\n    e += 0;\n"), "column_remap", "written in its body"),
    # an element-wise grid-stride loop walks no column: that is said before its use of gridDim.x
    (PLANES + PLANES_SIG + "  int e = blockIdx.x * blockDim.x + threadIdx.x;\n  if (e >= pixels) return;\n"
     "  float t = 0;\n  for (int pl = 0; pl < planes; ++pl) t += img[e * planes + pl] * gridDim.x;\n  res[e] = t;\n}\n",
     "column_remap", "no loop walks a column"),
    # a variable declared beside the item from it would keep the old item's value past the bound
    (PLANES + PLANES_SIG + "  int e = blockIdx.x * blockDim.x + threadIdx.x, px = e % pixels;\n"
     "  if (e >= images * pixels) return;\n  float t = 0;\n"
     "  for (int pl = 0; pl < planes; ++pl) t += img[(e / pixels * planes + pl) * pixels + px];\n  res[e] = t;\n}\n",
     "column_remap", "not declared once"),
    # a struct accumulator: a shuffle moves scalars
    ("struct Sum {\n  float v;\n  __device__ Sum& operator+=(float x) { v += x; return *this; }\n};\n" + WINDOWS +
     WINDOWS_SIG + "  int w = blockIdx.x * blockDim.x + threadIdx.x;\n  if (w >= count) return;\n  Sum acc = {0.f};\n"
     "  for (int j = 0; j < len; j++) acc += src[w * len + j];\n  dst[w] = acc.v;\n}\n", "lane_remap",
     "(a struct would need a shuffle per member)"),
])
def test_declines_say_why(text: str, family: str, words: str) -> None:
    assert words in reason(text, family)


def test_a_struct_accumulator_is_named_as_one() -> None:
    from warpforge.policy.ir.remap import shuffle_decline

    got = shuffle_decline("acc", "Moments", {}, 3)
    assert got is not None and "struct" in got.reason
    got = shuffle_decline("acc", "Dtype", {"Dtype": "Moments"}, 3)
    assert got is not None and "`Moments` in the spec's instantiation" in got.reason
    assert shuffle_decline("acc", "Dtype", {"Dtype": "float"}, 3) is None
    assert shuffle_decline("acc", "__half2", {}, 3) is None


def test_the_grid_stride_column_plan_reads_the_ir() -> None:
    k = find_kernel(COLUMN["grid_stride_sum"].split("\n", 9)[-1], "k")
    assert k is not None
    plan = plan_columns(k, summarize(k))
    assert not isinstance(plan, NotLegal), plan
    assert plan.stride is not None and plan.stride.bound == "images * pixels" and plan.exit is None
    assert [w.var for w in plan.walks] == ["pl"] and [r.name for r in plan.reductions] == ["tot"]


HOST_TEMPLATE = """template <typename Real>
__global__ void scale(int n, const Real* x, Real* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}

template <typename Real>
void run(int n, const Real* x, Real* y) {
  scale<Real><<<(n + 255) / 256, 256>>>(n, x, y);
}
"""


def test_a_launch_passing_its_own_template_parameter_is_no_instantiation() -> None:
    assert dependent_arguments(("Real",), HOST_TEMPLATE.split("scale<Real><<<")[0].encode())
    assert not dependent_arguments(("float",), HOST_TEMPLATE.split("scale<Real><<<")[0].encode())
    assert not dependent_arguments(("Real",), b"void run() {")
    src = SourceText(HOST_TEMPLATE)
    model = parse(src.data)
    k = model.kernel("scale")
    assert k is not None
    assert infer(src, model, k, "fixture.cu").template_args == ()
    concrete = SourceText(HOST_TEMPLATE.replace("scale<Real><<<", "scale<float><<<"))
    model = parse(concrete.data)
    k = model.kernel("scale")
    assert k is not None
    assert infer(concrete, model, k, "fixture.cu").template_args == ("float",)
