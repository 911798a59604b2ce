"""column_remap (R threads per column splitting its row walk, partials through shared memory) on column sums
written here in several styles: each must be proposed, keep the signature, launch a (X, R) block over the same
columns, and build through the evaluator's CPU build path; declines say why. GPU: ``test_rules_remap_gpu.py``."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.ir.remap_columns import plan_columns
from warpforge.policy.ir.summary import summarize
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules.column_remap import why_not
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

BIAS_SPEC = """// @warpforge size B = 8
// @warpforge size T = 512
// @warpforge size OC = 768
// @warpforge arg dbias: out float[OC]
// @warpforge arg dout: in float[B*T*OC]
// @warpforge arg B = B
// @warpforge arg T = T
// @warpforge arg OC = OC
// @warpforge launch grid=cdiv(OC, 128), block=128
"""
COLS_SPEC = """// @warpforge size NB = 64
// @warpforge size N = 1000
// @warpforge arg y: inout float[N]
// @warpforge arg x: in float[NB*N]
// @warpforge arg batch = NB
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
"""
COLS_SIG = "__global__ void k(real* y, const real* x, int batch, int n) {\n"

CASES: dict[str, str] = {
    # a bias gradient over a (B, T) nest with a double accumulator, the work inside a guard
    "bias_nested_double_guard": BIAS_SPEC +
    "__global__ void k(float* dbias, const float* dout, int B, int T, int OC) {\n"
    "  int o = blockIdx.x * blockDim.x + threadIdx.x;\n  if (o < OC) {\n    double sum = 0.0;\n"
    "    for (int b = 0; b < B; b++)\n      for (int t = 0; t < T; t++) sum += dout[b * T * OC + t * OC + o];\n"
    "    dbias[o] = sum;\n  }\n}\n",
    # a 2-D grid flattened by hand (1-D at launch), the counter declared before the loop, an accumulating store
    "flattened_index_hoisted_accumulate": "typedef float real;\n" + COLS_SPEC + COLS_SIG +
    "  int index = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;\n  if (index >= n) return;\n"
    "  int b;\n  float sum = 0;\n  for (b = 0; b < batch; ++b) {\n    int i = b * n + index;\n    sum += x[i];\n  }\n"
    "  y[index] += sum;\n}\n",
    # a global accumulator the IR keeps in a register (`y[i] = 0; y[i] += ...`)
    "global_accumulator": "typedef float real;\n" + COLS_SPEC.replace("arg y: inout", "arg y: out") + COLS_SIG +
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  y[i] = 0;\n"
    "  for (int k = 0; k < batch; ++k) y[i] += x[k * n + i];\n}\n",
    # a standard deviation: a global accumulator, then a tail that rewrites the output and may leave early
    "std_tail_return": "typedef float real;\n" + COLS_SPEC.replace("arg y: inout", "arg y: out") + COLS_SIG +
    "  int j = blockIdx.x * blockDim.x + threadIdx.x;\n  if (j >= n) return;\n  y[j] = 0.0f;\n"
    "  for (int i = 0; i < batch; i++) y[j] += (x[i * n + j] - 0.5f) * (x[i * n + j] - 0.5f);\n"
    "  y[j] = sqrtf(y[j] / batch);\n  if (y[j] > 0.005f) return;\n  y[j] = 1.0f;\n}\n",
    # a column maximum through a view of the column
    "column_max_view": "typedef float real;\n" + COLS_SPEC.replace("arg y: inout", "arg y: out") + COLS_SIG +
    "  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  if (c >= n) return;\n  const real* col = x + c;\n"
    "  float m = -1e30f;\n  for (int r = 0; r < batch; r++) m = fmaxf(m, col[r * n]);\n  y[c] = m;\n}\n",
}


def policy(text: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text),
                         families={"column_remap"})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_column_walks_are_split_and_build(case: str) -> None:
    pol = policy(CASES[case])
    children = pol.propose_sync(pol.root_candidate())
    assert children and {c.family for c in children} == {"column_remap"}, (case, pol.errors)
    params = [c.steps[-1].split(":", 1)[1] for c in children]
    assert "x32r8" in params and "x8r32" in params
    assert any(p.endswith("_outer") for p in params) == (case == "bias_nested_double_guard")
    for child in children[:2]:
        text = child.definition
        assert "+= blockDim.y)" in text and "__syncthreads();" in text and "threadIdx.y == 0" in text
        x, r = child.block or ("", "")
        assert f"[{r}][{x}];" in text
        assert child.grid is not None and child.grid[0].endswith(f"/ {x})")
        assert [p.text for p in parse(text).kernels[0].params] == [p.text for p in pol.kernel.params]
        got = ca.EvaluatorBuild(pol).check(child)
        assert got.ok, (case, child.steps, got.stage, got.reason[-2000:], text)


def test_an_early_exit_becomes_a_flag_and_the_store_runs_once() -> None:
    pol = policy(CASES["flattened_index_hoisted_accumulate"])
    child = pol.propose_sync(pol.root_candidate())[0]
    text = child.definition
    # every thread reaches the barrier: no return but the block-uniform one, column 0 past the bound
    assert text.count("return") == 1 and "if ((n) <= 0) return;" in text
    assert "const bool wfc_off = (index >= n);" in text and "if (wfc_off) index = 0;" in text
    assert "if (!wfc_off && threadIdx.y == 0) {" in text
    assert text.index("y[index] += sum;") > text.index("if (!wfc_off && threadIdx.y == 0) {")
    # a sum's partial starts from 0 in every row of threads but the first
    assert "if (threadIdx.y != 0) sum = 0;" in text


def test_the_walk_is_found_on_the_ir() -> None:
    text = CASES["bias_nested_double_guard"].split("\n", 9)[-1]
    k = find_kernel(text, "k")
    assert k is not None
    plan = plan_columns(k, summarize(k))
    # the guard is not normalized here: an early exit is required (the policy lowers guards to one)
    assert isinstance(plan, NotLegal) and "early exit" in plan.reason
    exit_form = text.replace("  if (o < OC) {\n", "  if (o >= OC) return;\n").replace("  }\n}\n", "}\n")
    k = find_kernel(exit_form, "k")
    assert k is not None
    plan = plan_columns(k, summarize(k))
    assert not isinstance(plan, NotLegal), plan
    assert [w.var for w in plan.walks] == ["b", "t"] and plan.bound == "OC"
    assert [(r.name, r.combine, r.type) for r in plan.reductions] == [("sum", "sum", "double")]


def reason(text: str) -> str:
    pol = policy(text)
    norm = pol.normalized(pol.root_candidate())
    got = why_not(pol.context(norm if norm is not None else pol.root_candidate()))
    assert isinstance(got, NotLegal), got
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


def cols(body: str) -> str:
    return "typedef float real;\n" + COLS_SPEC.replace("arg y: inout float[N]", "arg y: out float[NB*N]") + \
        COLS_SIG + "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n" + body + "}\n"


@pytest.mark.parametrize(("text", "words"), [
    # a row walk: the counter is contiguous, neighbouring items are rows apart (lane_remap's)
    (cols("  float s = 0;\n  for (int b = 0; b < batch; b++) s += x[i * batch + b];\n  y[i] = s;\n"),
     "no loop walks a column"),
    # the loop writes memory
    (cols("  for (int b = 0; b < batch; b++) y[b * n + i] = 2.0f * x[b * n + i];\n"), "the loop writes"),
    # a jump out of the walk
    (cols("  float s = 0;\n  for (int b = 0; b < batch; b++) { if (x[b * n + i] < 0) break; s += x[b * n + i]; }\n"
          "  y[i] = s;\n"), "leaves the loop early"),
    # another coordinate: the 2-D block would change it
    (cols("  float s = 0;\n  for (int b = 0; b < batch; b++) s += x[b * n + i] * threadIdx.y;\n  y[i] = s;\n"),
     "threadIdx.y"),
    # a recurrence is no sum or min/max
    (cols("  float s = 0;\n  for (int b = 0; b < batch; b++) s = 0.5f * s + x[b * n + i];\n  y[i] = s;\n"),
     "is carried across iterations"),
])
def test_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)
