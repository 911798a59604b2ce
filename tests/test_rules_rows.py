"""warp_per_row on row forms its first analysis missed: rows spread over a flattened 2-D grid, and a running
maximum and minimum tracked in one ``if``/``else if`` chain.

The kernels here are written for the tests (not corpus files): each accepted one must be proposed through the
offline policy (canonical form included) and build through the evaluator's pre-GPU steps; each near-miss is a
kernel where the re-mapping would compute something else, and must get no ``warp_per_row`` child.
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

FLAT = """\
// @warpforge size R = 5000
// @warpforge size C = 700
// @warpforge arg x: in float[R*C] uniform(-1, 1)
// @warpforge arg l1: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=(8, cdiv(R, 8 * 128)), block=128
__global__ void row_l1(const float* __restrict__ x, float* __restrict__ l1, int rows, int cols)
{{
    const long r = {index};
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += fabsf(x[r * cols + c]);
    l1[r] = s;
}}
"""

CHAIN = """\
// @warpforge size R = 3000
// @warpforge size C = 500
// @warpforge arg x: in float[R*C] normal(0, 3)
// @warpforge arg lo_out: out float[R]
// @warpforge arg hi_out: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void range_of_rows(const float* x, float* lo_out, float* hi_out, int rows, int cols)
{{
    int r = threadIdx.x + blockDim.x * blockIdx.x;
    if (r < rows) {{
        const float* row = x + (size_t)r * cols;
        float lo = {lo0};
        float hi = {hi0};
        for (int c = 0; c < cols; c++) {{
            float v = row[c];
            {chain}
        }}
        lo_out[r] = lo;
        hi_out[r] = hi;
    }}
}}
"""


def policy(text: str, kernel: str) -> OfflinePolicy:
    return text_policy(text, kernel)


def family_children(text: str, kernel: str, family: str) -> list[Candidate]:
    pol = policy(text, kernel)
    return [c for c in pol.propose_sync(pol.root_candidate()) if c.family == family]


@pytest.mark.parametrize("index", [
    "blockIdx.y * gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x",
    "(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x",
    "threadIdx.x + blockDim.x * ((long)gridDim.x * blockIdx.y + blockIdx.x)",
])
def test_flattened_2d_grid_gets_a_warp_per_row(index: str) -> None:
    kids = family_children(FLAT.format(index=index), "row_l1", "warp_per_row")
    assert [c.steps[0] for c in kids] == ["warp_per_row:warp8_vec", "warp_per_row:warp8", "warp_per_row:warp4"]
    # rows are re-spread over a 1-D grid: blockIdx.y is 0 there, so the user's flattened index still holds
    w8 = kids[1]
    assert w8.launch is not None and w8.launch.grid == ("cdiv(R, 8)",)
    assert f"({index}) / 32" in w8.definition
    assert kids[0].launch == w8.launch and f"({index}) / 32" in kids[0].definition


@pytest.mark.parametrize("index", [
    "blockIdx.y * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x",  # not a flattening: rows repeat
    "blockIdx.y * gridDim.y * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x",  # the wrong grid extent
    "blockIdx.y * gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.y",
])
def test_other_2d_indices_are_declined(index: str) -> None:
    assert family_children(FLAT.format(index=index), "row_l1", "warp_per_row") == []


ORDERED = ("if (v > hi) hi = v;\n            else if (v < lo) lo = v;")


@pytest.mark.parametrize("lo0,hi0,chain", [
    ("row[0]", "row[0]", ORDERED),
    # the minimum tested first, non-strict compares, braces
    ("row[0]", "row[0]", "if (lo >= v) { lo = v; }\n            else if (hi <= v) { hi = v; }"),
    ("x[(size_t)r * cols]", "x[(size_t)r * cols]", ORDERED),
])
def test_extrema_chain_gets_a_warp_per_row(lo0: str, hi0: str, chain: str) -> None:
    kids = family_children(CHAIN.format(lo0=lo0, hi0=hi0, chain=chain), "range_of_rows", "warp_per_row")
    assert [c.steps[0] for c in kids] == ["warp_per_row:warp8_vec", "warp_per_row:warp8", "warp_per_row:warp4"]
    d = kids[1].definition
    assert "fmaxf(wfw_p0_hi, __shfl_xor_sync" in d and "fminf(wfw_p0_lo, __shfl_xor_sync" in d


@pytest.mark.parametrize("lo0,hi0,chain", [
    # starting apart (lo > hi), a value above hi can also be below lo: the else drops a minimum update
    ("1e30f", "-1e30f", ORDERED),
    ("row[0]", "row[1]", ORDERED),  # not the same start: lo <= hi is not known
    ("row[0]", "row[0]", "if (v > hi) hi = v;\n            else if (v > lo) lo = v;"),  # two maxima
    ("row[0]", "row[0]", "if (v > hi) hi = v;\n            else if (2 * v < lo) lo = 2 * v;"),  # two values
    ("row[0]", "row[0]", "if (v > hi) hi = v;\n            else if (v < lo) lo = v;\n            lo += 0;"),
])
def test_extrema_chain_near_misses_are_declined(lo0: str, hi0: str, chain: str) -> None:
    assert family_children(CHAIN.format(lo0=lo0, hi0=hi0, chain=chain), "range_of_rows", "warp_per_row") == []


@needs_nvcc
@pytest.mark.parametrize("text,kernel", [
    (FLAT.format(index="(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x"), "row_l1"),
    (CHAIN.format(lo0="row[0]", hi0="row[0]", chain=ORDERED), "range_of_rows"),
])
def test_row_forms_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str) -> None:
    path = tmp_path / f"{kernel}.cu"
    path.write_text(text)
    res = ca.check_case(path, families=["warp_per_row"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["warp_per_row"]
    assert fr.tried == fr.proposed >= 2 and not fr.failures, fr.failures
