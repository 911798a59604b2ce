"""single_pass: a running max and the exp-sum shifted by it fused into one loop, and warp_per_row after it.

Corpus kernels in different styles (a guarded body with a compare-and-assign max, pointer bumping with a max
starting at the first element, fp64 with int64 indices, a per-row loss, fp16 through macros) must get the
fused child, the fused child must get a warp per row (the order the search reaches: ``single_pass`` then
``warp_per_row``), and both must get through the evaluator's pre-GPU steps. The near-misses are kernels
written for this test where fusing would compute something else, or where the analysis cannot show it does
not: each must get no ``single_pass`` child.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc, text_policy
from warpforge.cuda import parse
from warpforge.cuda.candidate import Candidate
from warpforge.policy.offline import OfflinePolicy

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

CORPUS = ROOT / "benchmarks" / "corpus"
STYLES = ["row_softmax_guarded", "log_softmax_bump", "logsumexp_fp64", "cross_entropy_loss", "softmax_fp16_macro"]

#: a row-wise log-sum-exp written for the tests: a typedef'd accumulator, a ``m < v`` compare, a per-row
#: ``size_t`` offset, the sum written as ``s = s + ...``, the result per row
ROW = """\
typedef float acc_t;
// @warpforge size R = 3000
// @warpforge size C = 600
// @warpforge arg x: in float[R*C] normal(0, 3)
// @warpforge arg out: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void row_lse(const float* x, float* out, int rows, int cols)
{{
    int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (r < rows) {{
        size_t base = (size_t)r * cols;
        acc_t {m_decl};
        for (int c = {start1}; c < {end1}; c++) {{
            {max_stmt}
        }}
        {between}
        for (int k = 0; k < cols; ++k) {{
            {sum_stmt}
        }}
        out[r] = m + logf(s);
    }}
}}
"""

GOOD = {
    "m_decl": "m = -INFINITY", "start1": "0", "end1": "cols",
    "max_stmt": "if (m < x[base + c]) m = x[base + c];",
    "between": "acc_t s = 0.0f;",
    "sum_stmt": "s = s + expf(x[base + k] - m);",
}


def fixture(**over: str) -> str:
    return ROW.format(**{**GOOD, **over})


def policy_of(text: str, kernel: str, path: str = "fixture.cu") -> OfflinePolicy:
    return text_policy(text, kernel, path)


def children(pol: OfflinePolicy, cand: Candidate, family: str) -> list[Candidate]:
    return [c for c in pol.propose_sync(cand) if c.family == family]


def corpus_policy(stem: str) -> OfflinePolicy:
    path = CORPUS / f"{stem}.cu"
    text = path.read_text()
    (k,) = parse(text).kernels
    return policy_of(text, k.name, str(path))


@pytest.mark.parametrize("stem", STYLES)
def test_corpus_styles_fuse_then_get_a_warp_per_row(stem: str) -> None:
    pol = corpus_policy(stem)
    (fused,) = children(pol, pol.root_candidate(), "single_pass")
    text = fused.definition
    assert text.count("for (") == pol.root_candidate().definition.count("for (") - 1  # one pass less
    assert "wfs_v >" in text
    warps = children(pol, fused, "warp_per_row")
    assert {c.steps for c in warps} >= {("single_pass:online", "warp_per_row:warp8")}
    # the pair is merged across lanes with the rescaling, never as a plain max and a plain sum
    assert all("__shfl_xor_sync" in c.definition and "wfw_om" in c.definition for c in warps)
    # a block per row (rows of 1024 or more) merges the warps' pairs through shared memory, with the rescaling
    blocks = [c for c in warps if c.steps[-1].startswith("warp_per_row:block")]
    assert all("wfw_red0_" in c.definition and c.definition.count("wfw_om >") == 2 for c in blocks)


def test_the_fused_loop_keeps_later_statements_and_the_first_element_start() -> None:
    pol = corpus_policy("log_softmax_bump")
    (fused,) = children(pol, pol.root_candidate(), "single_pass")
    text = fused.definition
    assert "float m = x[0];" in text  # m starts at the first element as written ...
    assert "for (int i = 0; i < D; ++i) {\n        float wfs_v = x[i];" in text  # ... and the pass covers it
    assert "float lse = m + logf(s);" in text and "y[i] = x[i] - lse;" in text


def test_own_kernel_fuses() -> None:
    pol = policy_of(fixture(), "row_lse")
    (fused,) = children(pol, pol.root_candidate(), "single_pass")
    assert "s = s * expf(m - wfs_v);" in fused.definition
    # a masked (-INFINITY) element adds exactly 0 in the two passes; met while m is still -INFINITY it would
    # add exp(-inf - -inf) = NaN, and random inputs never hold one, so the fused loop must skip it itself
    assert "if (wfs_v != -INFINITY) s += expf(wfs_v - m);" in fused.definition
    # ... and warp_per_row still reads the guarded pair as the online pair, keeping the guard per lane
    warps = children(pol, fused, "warp_per_row")
    assert warps and all("wfs_v != -INFINITY" in c.definition for c in warps)
    assert children(pol, fused, "warp_per_row")


@pytest.mark.parametrize("over", [
    # the exponent shifts by another maximum
    {"m_decl": "m = -INFINITY; acc_t m2 = 0.0f", "sum_stmt": "s += expf(x[base + k] - m2);"},
    # the exponent is another expression
    {"sum_stmt": "s += expf(2.0f * x[base + k] - m);"},
    # the maximum is read between the loops for something else
    {"between": "acc_t s = 0.0f; float half = 0.5f * m; if (half > 1e30f) s = 1.0f;"},
    {"between": "acc_t s = 0.0f; out[r] = m;"},
    # a loop body writes memory
    {"sum_stmt": "s += expf(x[base + k] - m); out[r] = s;"},
    # the first loop also carries a sum
    {"max_stmt": "if (m < x[base + c]) m = x[base + c]; m2 += x[base + c];",
     "m_decl": "m = -INFINITY; float m2 = 0.0f"},
    # integer accumulators
    {"m_decl": "m = -INFINITY; int mi = -2147483647", "max_stmt": "if (mi < (int)x[base + c]) mi = (int)x[base + c];",
     "sum_stmt": "s += expf(x[base + k] - mi);"},
    # the ranges differ: a shorter max loop, a max loop skipping an element m does not start from
    {"end1": "cols - 1"},
    {"start1": "1"},
    # the sum does not start from zero
    {"between": "acc_t s = 1.0f;"},
])
def test_near_misses_are_declined(over: dict[str, str]) -> None:
    pol = policy_of(fixture(**over), "row_lse")
    assert not children(pol, pol.root_candidate(), "single_pass")


def test_integer_max_and_sum_types_are_declined() -> None:
    text = fixture(m_decl="m = 0", between="int s = 0;").replace("typedef float acc_t;", "typedef int acc_t;")
    pol = policy_of(text, "row_lse")
    assert not children(pol, pol.root_candidate(), "single_pass")


@needs_nvcc
@pytest.mark.parametrize("stem", ["row_softmax_guarded", "log_softmax_bump", "logsumexp_fp64",
                                  "softmax_fp16_macro"])
def test_corpus_rewrites_build_through_the_evaluator(stem: str) -> None:
    res = ca.check_case(CORPUS / f"{stem}.cu", families=["single_pass"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["single_pass"]
    assert fr.tried == fr.proposed == 1 and not fr.failures, fr.failures
    # and the composition the search reaches next
    req = ca.case_request(CORPUS / f"{stem}.cu")
    pol = ca.offline_policy(req)
    builder = ca.EvaluatorBuild(pol)
    (fused,) = children(pol, pol.root_candidate(), "single_pass")
    warps = children(pol, fused, "warp_per_row")
    assert warps
    for c in warps:
        got = builder.check(c)
        assert got.ok, (c.steps, got)


@needs_nvcc
def test_own_kernel_builds_through_the_evaluator(tmp_path: Path) -> None:
    path = tmp_path / "row_lse.cu"
    path.write_text(fixture())
    res = ca.check_case(path, families=["single_pass"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["single_pass"]
    assert fr.tried == fr.proposed == 1 and not fr.failures, fr.failures


#: online softmax written by hand, one thread per row: warp_per_row carries the (max, sum) pair per lane
ONLINE = """\
// @warpforge size R = 2000
// @warpforge size C = 900
// @warpforge arg x: in float[R*C] normal(0, 2)
// @warpforge arg y: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 256), block=256
__global__ void online_rows(const float* x, float* y, int rows, int cols)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -INFINITY;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) {{
        float v = {v};
        if (v > m) {{
            {rescale}
            m = v;
        }}
        {accumulate}
    }}
    for (int c = 0; c < cols; ++c)
        y[(long)r * cols + c] = __expf(x[(long)r * cols + c] - m) / s;
}}
"""
ONLINE_OK = {"v": "x[(long)r * cols + c]", "rescale": "s = s * __expf(m - v);", "accumulate": "s += __expf(v - m);"}


def test_hand_written_online_pair_gets_a_warp_per_row() -> None:
    pol = policy_of(ONLINE.format(**ONLINE_OK), "online_rows")
    warps = children(pol, pol.root_candidate(), "warp_per_row")
    # rows of 900: warps only; x is read by the fused pass and the write, so warp8 may also stage the row, or
    # move it in vectors (the online pair's order within a lane is free)
    assert {c.steps[-1] for c in warps} == {"warp_per_row:warp8_vec", "warp_per_row:warp8_smem",
                                            "warp_per_row:warp8", "warp_per_row:warp4"}
    assert all("wfw_om" in c.definition for c in warps)


@pytest.mark.parametrize("over", [
    {"rescale": "s = s * __expf(v - m);"},          # the rescaling grows the sum
    {"rescale": "s = s * expf(m - v);"},            # another exponential than the accumulation's
    {"accumulate": "s += __expf(v - m) * s;"},      # not a sum of exponentials
    {"v": "x[(long)r * cols + c] - s"},             # the value reads the sum
])
def test_online_pair_near_misses_get_no_warp_per_row(over: dict[str, str]) -> None:
    pol = policy_of(ONLINE.format(**{**ONLINE_OK, **over}), "online_rows")
    assert not children(pol, pol.root_candidate(), "warp_per_row")


@needs_nvcc
def test_hand_written_online_pair_builds_through_the_evaluator(tmp_path: Path) -> None:
    path = tmp_path / "online_rows.cu"
    path.write_text(ONLINE.format(**ONLINE_OK))
    res = ca.check_case(path, families=["warp_per_row"], all_candidates=True)
    fr = res.families["warp_per_row"]
    assert fr.tried == fr.proposed == 4 and not fr.failures, fr.failures
