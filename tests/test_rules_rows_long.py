"""warp_per_row sized from the spec: larger blocks when rows are few and long, lane partials kept across an
outer loop, and a row that several passes read staged once in shared memory.

The kernels here are written for the tests (not corpus files): each accepted one must be proposed through the
offline policy and build through the evaluator's pre-GPU steps; each near-miss breaks one precondition (the
GPU has rows enough, a per-iteration value is read, the array is written, the passes differ in range, no pass
reads every element, the row does not fit) and must not get the variant that relies on it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc, text_policy
from warpforge.cuda.candidate import Candidate

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

#: a per-feature sum of squares over a batch of feature planes: few rows (``feats``), each ``batch`` planes
#: of ``plane`` elements walked by a nested loop
PLANES = """\
// @warpforge size B = 16
// @warpforge size F = {feats}
// @warpforge size P = 4096
// @warpforge arg act: in float[B*F*P] normal(0, 1)
// @warpforge arg energy: out float[F]
// @warpforge arg batch = B
// @warpforge arg feats = F
// @warpforge arg plane = P
// @warpforge launch grid=cdiv(F, 64), block=64
__global__ void feature_energy(const float* act, float* energy, int batch, int feats, int plane)
{{
    int f = threadIdx.x + blockIdx.x * blockDim.x;
    if (f >= feats) return;
    {plane_decl}
    float e = 0.0f;
    float peak = 0.0f;
    for (int b = 0; b < batch; b++) {{
        const float* p = act + ((size_t)b * feats + f) * len;
        for (int k = 0; k < len; k++) {{
            float a = p[k];
            e += a * a;
        }}
        {after}
    }}
    energy[f] = e + peak;
}}
"""
PLANES_OK = {"feats": "128", "plane_decl": "const int len = plane;", "after": ""}

#: row standardization written as two passes over the row (mean, then the shifted copy), one thread per row
STANDARDIZE = """\
// @warpforge size R = 4096
// @warpforge size C = {cols}
// @warpforge arg src: {src_role} float[R*C] normal(1, 2)
// @warpforge arg dst: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void center_rows({cq}float* src, float* dst, int rows, int cols)
{{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {{
        {ptr}
        float mu = 0.0f;
        for (int j = {start}; j < cols; ++j) {{
            {first}
        }}
        mu = mu / cols;
        for (int j = 0; j < {limit2}; ++j) {{
            {second}
        }}
    }}
}}
"""
STD_OK = {"cols": "1536", "src_role": "in", "cq": "const ", "ptr": "const float* x = src + (size_t)r * cols;",
          "start": "0", "first": "mu += x[j];", "limit2": "cols", "second": "dst[(size_t)r * cols + j] = x[j] - mu;"}


def family_children(text: str, kernel: str, family: str = "warp_per_row") -> list[Candidate]:
    pol = text_policy(text, kernel)
    return [c for c in pol.propose_sync(pol.root_candidate()) if c.family == family]


def params(text: str, kernel: str) -> list[str]:
    return [c.steps[-1].split(":", 1)[1] for c in family_children(text, kernel)]


def by_param(text: str, kernel: str) -> dict[str, Candidate]:
    return {c.steps[-1].split(":", 1)[1]: c for c in family_children(text, kernel)}


# ------------------------------------------------------------------ few long rows, nested loops


def test_few_long_rows_get_large_blocks_first() -> None:
    kids = family_children(PLANES.format(**PLANES_OK), "feature_energy")
    # 128 rows x 256 threads fill an eighth of an H100's resident threads: larger blocks per row come first
    # (each mapping with vectors first, then as it is)
    assert [c.steps[-1].split(":")[1] for c in kids] == [
        "block1024_vec", "block512_vec", "block256_vec", "warp8_vec", "block1024", "block512", "block256", "warp8",
        "warp4"]
    big = kids[4]
    assert big.block == ("1024",) and big.grid == ("F",) and kids[0].block == ("1024",)
    d = big.definition
    # the lane's partial lives across the batch loop: one butterfly and one block combine, after the loop
    assert d.count("__shfl_xor_sync") == 1 and d.count("__syncthreads();") == 2
    assert d.index("float wfw_p0_e = 0;") < d.index("for (int b = 0;") < d.index("__shfl_xor_sync")
    assert "for (int k = threadIdx.x; k < len; k += blockDim.x)" in d


def test_many_rows_keep_a_256_thread_block() -> None:
    # 8192 rows x 256 threads already exceed the resident threads: no larger block per row
    assert params(PLANES.format(**{**PLANES_OK, "feats": "8192"}), "feature_energy") == [
        "warp8_vec", "block256_vec", "warp8", "warp4", "block256"]


def test_a_row_length_read_from_memory_gets_no_block() -> None:
    # the plane length is data, not a spec size: whether rows are long is unknown, so warps only
    text = PLANES.format(**{**PLANES_OK, "plane_decl": "const int len = (int)act[0] + plane;"})
    assert params(text, "feature_energy") == ["warp8_vec", "warp8", "warp4"]


def test_a_sum_read_in_the_outer_loop_is_combined_every_iteration() -> None:
    # peak reads the running sum after each plane: the lanes' partials must be combined per iteration
    text = PLANES.format(**{**PLANES_OK, "after": "peak = fmaxf(peak, e);"})
    d = by_param(text, "feature_energy")["block1024"].definition
    assert "over every iteration" not in d
    assert d.index("for (int b = 0;") < d.index("float wfw_p0_e = 0;") < d.index("peak = fmaxf(peak, e);")


# ------------------------------------------------------------------ a row staged in shared memory


def test_a_row_read_by_two_passes_is_staged_once() -> None:
    kids = {c.steps[-1].split(":")[1]: c for c in family_children(STANDARDIZE.format(**STD_OK), "center_rows")}
    # 1536 floats: 6 KB per row, 48 KB for the 8 rows of a warp8 block, at the limit of shared memory
    assert {"warp8_smem", "block256_smem"} <= set(kids)
    blk = kids["block256_smem"]
    assert blk.smem == "1 * (cdiv((C) * 4, 16) * 16)"
    d = blk.definition
    # the fill (vectors where x is aligned, then the rest one by one); both passes read the staged row
    assert len(re.findall(r"\bx\[", d)) == 3
    assert "*reinterpret_cast<const uint4*>(&x[(int)(4 * wfw_k)]);" in d and "wfw_c0[wfw_k] = x[wfw_k];" in d
    assert "wfw_p0_mu += wfw_c0[j];" in d and "dst[(size_t)r * cols + j] = wfw_c0[j] - mu;" in d
    assert d.index("__syncthreads();") < d.index("wfw_p0_mu += wfw_c0[j];")
    w8 = kids["warp8_smem"].definition
    assert "(threadIdx.x >> 5) *" in w8 and "__syncwarp();" in w8
    assert kids["warp8_smem"].smem == "8 * (cdiv((C) * 4, 16) * 16)"


def test_a_pass_from_one_is_staged_when_another_reads_every_element() -> None:
    # the mean skips element 0 (started from it), the write pass reads all: the fill covers [0, cols)
    text = STANDARDIZE.format(**{**STD_OK, "start": "1", "first": "mu += x[j] - x[0];"})
    assert "block256_smem" in params(text, "center_rows")


@pytest.mark.parametrize("over", [
    # the row is written in place by the second pass: staging would read stale values
    {"src_role": "inout", "cq": "", "ptr": "float* x = src + (size_t)r * cols;", "second": "x[j] = x[j] - mu;"},
    {"limit2": "cols - 1"},                                   # the passes cover different ranges
    {"start": "1", "second": "if (mu > 0.0f) dst[(size_t)r * cols + j] = x[j] - mu;"},  # nobody reads x[0]
    {"cols": "16384"},                                        # 64 KB a row: more than shared memory holds
    {"second": "dst[(size_t)r * cols + j] = mu;"},            # one pass reads the row: nothing to save
    {"second": "dst[(size_t)r * cols + j] = x[j + 1] - mu;"},  # another offset: not the same row
])
def test_row_cache_near_misses_are_declined(over: dict[str, str]) -> None:
    got = params(STANDARDIZE.format(**{**STD_OK, **over}), "center_rows")
    assert "warp8" in got  # the row mapping itself still applies ...
    assert not any(p.endswith("_smem") for p in got), got  # ... without the staged row


# ------------------------------------------------------------------ lanes moving 16-byte vectors


def test_lanes_move_aligned_rows_in_vectors() -> None:
    d = by_param(STANDARDIZE.format(**STD_OK), "center_rows")["block256_vec"].definition
    # pass 1: x read in float4 chunks, pass 2: x read and dst written in float4 chunks, both behind an
    # alignment test, each followed by the elements past the last whole vector
    assert "const bool wfw_al0 = (reinterpret_cast<size_t>(&x[0]) & 15) == 0;" in d
    assert "uint4 wfw_v0_0 = *reinterpret_cast<const uint4*>(&x[(int)(4 * wfw_ch0)]);" in d
    assert "wfw_p0_mu += wfw_e0_0[wfw_u];" in d
    assert "(reinterpret_cast<size_t>(&dst[(size_t)r * cols + 0]) & 15) == 0" in d
    assert "*reinterpret_cast<uint4*>(&dst[(size_t)r * cols + (int)(4 * wfw_ch1)]) = wfw_v1_0;" in d
    assert "for (int j = wfw_nv1 * 4 + threadIdx.x; j < cols; j += blockDim.x)" in d


def test_half_rows_move_eight_elements_a_lane() -> None:
    text = STANDARDIZE.format(**STD_OK).replace("float* src", "__half* src").replace("float* dst", "__half* dst") \
        .replace("float[R*C]", "half[R*C]").replace("const float* x", "const __half* x") \
        .replace("mu += x[j];", "mu += __half2float(x[j]);") \
        .replace("= x[j] - mu;", "= __float2half(__half2float(x[j]) - mu);")
    text = "#include <cuda_fp16.h>\n" + text
    d = by_param(text, "center_rows")["warp8_vec"].definition
    assert "wfw_nv0 = wfw_al0 ? (cols) / 8 : 0;" in d
    assert "__half* wfw_e0_0 = reinterpret_cast<__half*>(&wfw_v0_0);" in d


@pytest.mark.parametrize("over,vectorized", [
    # a conditional store: the vector store would write elements the original leaves alone
    ({"second": "if (x[j] > mu) dst[(size_t)r * cols + j] = x[j] - mu;"}, {0}),
    # a pass from 1: its chunks would not start at an aligned element
    ({"start": "1", "first": "mu += x[j] - x[0];"}, {1}),
    # the only reads of x in pass 1 are conditional: nothing shows the original reads every element there
    ({"first": "if (j % 3 != 0) mu += x[j];"}, {1}),
])
def test_vector_loops_near_misses(over: dict[str, str], vectorized: set[int]) -> None:
    d = by_param(STANDARDIZE.format(**{**STD_OK, **over}), "center_rows")["block256_vec"].definition
    assert {n for n in (0, 1) if f"wfw_al{n}" in d} == vectorized


def test_a_row_written_then_read_back_keeps_its_lanes() -> None:
    # dst is written by one pass and rescaled by the next: vectors would hand an element to another lane than
    # the one that wrote it (the other pass, misaligned or not split in chunks, maps elements one by one)
    text = STANDARDIZE.format(**{**STD_OK, "second": "dst[(size_t)r * cols + j] = x[j] - mu;\n        }\n"
                                 "        for (int j = 0; j < cols; ++j) {\n"
                                 "            dst[(size_t)r * cols + j] *= 0.5f;"})
    d = by_param(text, "center_rows")["block256_vec"].definition
    assert "wfw_al0" in d  # the mean over x (read-only) still moves vectors
    assert "wfw_al1" not in d and "wfw_al2" not in d


def test_an_arg_reduction_gets_no_vectors() -> None:
    # ties keep the first index: the order of a lane's elements matters, so no chunking
    text = STANDARDIZE.format(**{**STD_OK, "ptr": "const float* x = src + (size_t)r * cols; int at = 0;",
                                 "first": "if (x[j] > mu) { mu = x[j]; at = j; }",
                                 "second": "dst[(size_t)r * cols + j] = (float)at;"})
    got = params(text, "center_rows")
    assert "warp8" in got and not any(p.endswith("_vec") for p in got), got


@needs_nvcc
@pytest.mark.parametrize("text,kernel,least", [
    (PLANES.format(**PLANES_OK), "feature_energy", 9),
    (STANDARDIZE.format(**STD_OK), "center_rows", 7),
])
def test_sized_variants_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str, least: int) -> None:
    path = tmp_path / f"{kernel}.cu"
    path.write_text(text)
    res = ca.check_case(path, families=["warp_per_row"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["warp_per_row"]
    assert fr.tried == fr.proposed >= least and not fr.failures, fr.failures
