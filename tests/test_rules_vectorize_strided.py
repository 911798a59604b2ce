"""vectorize_strided: vector accesses inside loops whose threads stride over a row together (issue 27).

Row kernels written by others (llm.c's softmax/layernorm kernels 3-4, darknet's mean/variance, a warp per row
after ``warp_per_row``) walk a row with ``for (j = lane; j < C; j += 32)``: ``vectorize`` (one thread per
element) does not apply, and they stayed scalar. Checked here on CPU: which loops qualify and why others do
not, that every thread still partitions the row by the same chunks (the rewrite's shape), and that nvcc makes
one 128-bit access per stream of it with nothing in local memory. The GPU check is
``tests/test_rules_vectorize_strided_gpu.py``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import NVCC, needs_nvcc
from test_rules_structural import child, text_policy, variants
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules._why import recording

HELPERS = """__device__ float warpReduceSum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__device__ float warpReduceMax(float v) {
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}
"""

# a block per row (llm.c's softmax_forward_kernel3 shape): four block-strided loops, two reductions through
# warp shuffles and shared memory, a view of the row that is re-pointed at the output between loops
BLOCK_ROWS = HELPERS + """// @warpforge size B = 4096
// @warpforge size C = 1024
// @warpforge arg out: out float[B*C]
// @warpforge arg inp: in float[B*C]
// @warpforge arg N = B
// @warpforge arg C = C
// @warpforge launch grid=B, block=128, smem=8 * sizeof(float)
// @warpforge tol rtol=1e-4 atol=1e-5
__global__ void softmax_rows(float* out, const float* inp, int N, int C) {
    extern __shared__ float shared[];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    int warpId = threadIdx.x / 32;
    int laneId = threadIdx.x % 32;
    int warpsPerBlock = blockDim.x / 32;
    float* maxvals = shared;
    float* sumvals = &shared[warpsPerBlock];
    const float* x = inp + idx * C;
    float maxval = -INFINITY;
    for (int i = tid; i < C; i += blockDim.x) {
        maxval = fmaxf(maxval, x[i]);
    }
    maxval = warpReduceMax(maxval);
    if (laneId == 0) maxvals[warpId] = maxval;
    __syncthreads();
    if (tid == 0) {
        float val = maxvals[0];
        for (int i = 1; i < warpsPerBlock; i++) val = fmaxf(val, maxvals[i]);
        maxvals[0] = val;
    }
    __syncthreads();
    float offset = maxvals[0];
    for (int i = tid; i < C; i += blockDim.x) {
        out[idx * C + i] = expf(x[i] - offset);
    }
    x = out + idx * C;
    float sumval = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        sumval += x[i];
    }
    sumval = warpReduceSum(sumval);
    if (laneId == 0) sumvals[warpId] = sumval;
    __syncthreads();
    if (tid == 0) {
        float val = sumvals[0];
        for (int i = 1; i < warpsPerBlock; ++i) val += sumvals[i];
        sumvals[0] = val;
    }
    __syncthreads();
    float sum = sumvals[0];
    for (int i = tid; i < C; i += blockDim.x) {
        out[idx * C + i] = x[i] / sum;
    }
}
"""

# a warp per row (the shape warp_per_row writes, and llm.c's layernorm kernel 3 with cooperative groups'
# spelling left aside): the lane strides by 32, the row index is the warp's
WARP_ROWS = """// @warpforge size N = 8192
// @warpforge size C = 768
// @warpforge arg out: out {t}[N*C]
// @warpforge arg inp: in {t}[N*C]
// @warpforge arg w: in {t}[C]
// @warpforge arg N = N
// @warpforge arg C = C
// @warpforge launch grid=cdiv(N, 8), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
__global__ void scale_rows({t}* out, const {t}* inp, const {t}* w, int N, int C) {{
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const {t}* x = inp + row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {{
        float v = (float)x[c];
        s += v * v;
    }}
    s = warpReduceSum(s);
    float r = rsqrtf(s / C + 1e-5f);
    for (int c = lane; c < C; c += 32) {{
        out[row * C + c] = ({t})((float)x[c] * r * (float)w[c]);
    }}
}}
"""


def rows(t: str) -> str:
    return ("#include <cuda_fp16.h>\n" if t == "__half" else "") + HELPERS + WARP_ROWS.format(t=t)


def why(pol: OfflinePolicy) -> tuple[list[str], list[str]]:
    """(the variants, the reasons the rule recorded for the loops it left)."""
    with recording() as notes:
        got = variants(pol, "vectorize_strided")
    return got, [n.reason for n in notes]


def test_every_strided_loop_of_a_block_per_row_kernel_is_vectorized() -> None:
    pol = text_policy(BLOCK_ROWS, "softmax_rows")
    assert variants(pol, "vectorize_strided") == ["x4", "x2"]
    d = child(pol, "vectorize_strided", "x4").definition
    # four loops, each over chunks of 4 taken by the thread the original gave the chunk's number, after the row's
    # first elements up to its streams' first vector boundary (the row offset is the block's: every thread of the
    # block agrees on it)
    assert len(re.findall(r"for \(int wfs_\d_c = tid; wfs_\d_c < wfs_\d_nv; wfs_\d_c \+= blockDim.x\)", d)) == 4
    assert "const int wfs_3_j0 = wfs_3_pe + wfs_3_c * 4;" in d
    # the output is stored as one vector at the row's offset, the view read as one
    assert "*reinterpret_cast<wfs_1_s0_t*>((out + (idx * C)) + wfs_1_j0) = wfs_1_s0;" in d
    assert "*reinterpret_cast<const wfs_2_s0_t*>(x + wfs_2_j0)" in d
    # streams that do not share a vector boundary leave the whole row to the original loop (lead = n)
    assert ("reinterpret_cast<unsigned long long>(x) / sizeof(float) % 4 == wfs_1_mis) ? "
            "(int)((4 - wfs_1_mis) % 4) : wfs_1_n;") in d
    # the row's head and tail run the original loop, strided as written
    assert "for (int i = tid; i < wfs_3_pe; i += blockDim.x) {" in d
    assert "for (int i = wfs_3_pe + wfs_3_nv * 4 + tid; i < wfs_3_n; i += blockDim.x) {" in d
    assert "out[idx * C + i] = x[i] / sum;" in d
    # the partials still reach their shuffles
    assert "maxval = warpReduceMax(maxval);" in d and "sumval = warpReduceSum(sumval);" in d


@pytest.mark.parametrize(("t", "want"), [("float", ["x4", "x2"]), ("__half", ["x8", "x4"]),
                                         ("double", ["x2"])])
def test_a_warp_per_row_by_element_size(t: str, want: list[str]) -> None:
    text = rows(t)
    pol = text_policy(text, "scale_rows")
    assert variants(pol, "vectorize_strided") == want
    d = child(pol, "vectorize_strided", want[0]).definition
    assert "for (int wfs_0_c = lane; wfs_0_c < wfs_0_nv; wfs_0_c += 32)" in d
    assert f"const int wfs_0_nv = (wfs_0_n - wfs_0_pe) / {want[0][1:]};" in d


@pytest.mark.parametrize(("edit", "reason"), [
    # each thread's partial written out as it is: other elements per thread would change it
    (("s = warpReduceSum(s);", "out[row] = s;"), "the partial `s` is used after the loop without being combined"),
    # a neighbour's element of a written buffer
    (("out[row * C + c] = ", "out[row * C + c + 1] = "), "is not `out[offset + c]`"),
    # a barrier in the loop: threads would run different numbers of iterations of it
    (("s += v * v;", "s += v * v; __syncwarp();"), "synchronizes, exchanges data"),
    # a carried value that is not a reduction
    (("s += v * v;", "s = v * s;"), "is carried across iterations but is not updated as"),
])
def test_declines_with_the_reason(edit: tuple[str, str], reason: str) -> None:
    pol = text_policy(rows("float").replace(*edit), "scale_rows")
    got, reasons = why(pol)
    assert any(reason in r for r in reasons), reasons
    # the other loop of the kernel is still vectorized, the declined one kept as written
    assert got == ["x4", "x2"]
    d = child(pol, "vectorize_strided", "x4").definition
    assert "wfs_0_" in d and "wfs_1_" not in d and "for (int c = lane; c < C; c += 32) {" in d


def test_a_row_that_differs_between_the_threads_sharing_it_is_left_alone() -> None:
    # a block per row whose row offset depends on the warp: warps of one block would disagree on alignment
    text = BLOCK_ROWS.replace("const float* x = inp + idx * C;", "const float* x = inp + (idx + warpId) * C;")
    got, reasons = why(text_policy(text, "softmax_rows"))
    assert any("differs between the threads sharing the row" in r for r in reasons), reasons
    assert got == []  # every loop reads the row through `x`


def test_a_loop_its_threads_do_not_partition_is_left_alone() -> None:
    # lanes of a 256-thread block striding by 32 from threadIdx.x: eight threads start at each residue, the
    # loop is not one partition of the row and is not this rule's
    text = rows("float").replace("int c = lane; c < C; c += 32", "int c = threadIdx.x; c < C; c += 32")
    got, reasons = why(text_policy(text, "scale_rows"))
    assert got == [] and any("no loop whose threads stride over a row together" in r for r in reasons), reasons


@needs_nvcc
def test_the_rewrite_makes_vector_instructions() -> None:
    assert NVCC is not None
    pol = text_policy(BLOCK_ROWS, "softmax_rows")
    d = child(pol, "vectorize_strided", "x4").definition
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.ptx"
        src.write_text(HELPERS + d)
        subprocess.run([NVCC, "-arch=sm_90", "-ptx", "-o", str(out), str(src)], check=True, capture_output=True)
        ptx = out.read_text()
    # four loops read a vector each (the second also stores one, as does the fourth)
    assert len(re.findall(r"ld\.global\.v4\.f32", ptx)) == 4, ptx.count("ld.global")
    assert len(re.findall(r"st\.global\.v4\.f32", ptx)) == 2
    assert ".local" not in ptx


@pytest.mark.parametrize(("step", "block", "proposes"), [
    ("128", "128", True),  # the block's width written as a number (a macro after the preprocessor)
    ("128", "256", False),  # two threads per residue: not one partition of the row
    ("nthreads", "128", True),  # a local holding blockDim.x
])
def test_the_step_is_the_blocks_width(step: str, block: str, proposes: bool) -> None:
    text = BLOCK_ROWS.replace("int tid = threadIdx.x;", "int tid = threadIdx.x;\n    int nthreads = blockDim.x;")
    text = text.replace("i += blockDim.x", f"i += {step}").replace("block=128", f"block={block}")
    got, reasons = why(text_policy(text, "softmax_rows"))
    assert (got == ["x4", "x2"]) is proposes, reasons


def test_a_row_pointer_declared_in_the_loop_is_left_scalar() -> None:
    # llm.c's fused_classifier_kernel1 declares its output row inside the lane loop: the vector path checks
    # alignment before the loop, where that pointer does not exist yet (the variant did not build)
    text = rows("float").replace("out[row * C + c] = ", "float* o = out + row * C;\n        o[c] = ")
    got, reasons = why(text_policy(text, "scale_rows"))
    assert any("declared inside the loop" in r for r in reasons), reasons
    d = child(text_policy(text, "scale_rows"), "vectorize_strided", got[0]).definition
    assert "wfs_1_" not in d


def test_structural_rewrites_are_offered_before_tuning_ones() -> None:
    # below the root a beam node gets two children a round: unmotivated, the strided vectors of a warp-per-row
    # child must come before launch and flag tweaks (alphabetically, block_size and const_restrict came first)
    from warpforge.policy.rules import REGISTRY, load

    load()
    pol = text_policy(rows("float"), "scale_rows")
    pol.families = None
    ordered = [r.family for r in pol._ordered(list(REGISTRY.values()), {})]
    structural = [f for f in ordered if REGISTRY[f].structural]
    assert ordered[: len(structural)] == structural and "vectorize_strided" in structural
    kids = pol.propose_sync(pol.root_candidate())
    assert kids[0].family == "vectorize_strided", [c.family for c in kids]


def test_a_block_groups_rank_is_a_block_stride() -> None:
    # cooperative groups' block rank strides like threadIdx.x: a warp-varying row is then not shared
    text = BLOCK_ROWS.replace("int tid = threadIdx.x;", "cooperative_groups::thread_block block = "
                              "cooperative_groups::this_thread_block();\n    int tid = threadIdx.x;")
    text = text.replace("for (int i = tid; i < C; i += blockDim.x) {\n        maxval",
                        "for (int i = block.thread_rank(); i < C; i += block.size()) {\n        maxval")
    assert variants(text_policy(text, "softmax_rows"), "vectorize_strided") == ["x4", "x2"]
    text = text.replace("const float* x = inp + idx * C;", "const float* x = inp + (idx + warpId) * C;")
    got, reasons = why(text_policy(text, "softmax_rows"))
    assert got == [] and any("differs between the threads sharing the row" in r for r in reasons), reasons


def test_a_running_value_read_in_the_loop_is_not_an_accumulator() -> None:
    # a prefix-like running sum written out per element: each element's value depends on the thread's order
    text = rows("float").replace("        s += v * v;", "        s += v * v;\n        out[row * C + c] = s;")
    got, reasons = why(text_policy(text, "scale_rows"))
    assert any("is read in the loop besides its update" in r for r in reasons), reasons
    assert got == ["x4", "x2"]  # the second loop still is vectorized


@pytest.mark.parametrize("edit", [
    # a member accumulated per thread and used as it is
    ("float s = 0.0f;", "float2 m; m.x = 0.0f;\n    float s = 0.0f;", "s += v * v;", "s += v * v; m.x += v;"),
    # a thread's own array filled per element
    ("float s = 0.0f;", "float keep[32];\n    float s = 0.0f;", "s += v * v;", "s += v * v; keep[c / 32] = v;"),
])
def test_writes_into_what_the_loop_keeps_outside_decline(edit: tuple[str, str, str, str]) -> None:
    text = rows("float").replace(edit[0], edit[1]).replace(edit[2], edit[3])
    got, reasons = why(text_policy(text, "scale_rows"))
    assert any("kept outside the loop, per element" in r for r in reasons), reasons
    assert got == ["x4", "x2"]  # the other loop still is


def test_a_shared_row_written_element_by_element_is_fine() -> None:
    # a block per row staging its row in shared memory: element i is written by whoever handles i
    text = BLOCK_ROWS.replace("extern __shared__ float shared[];", "extern __shared__ float shared[];\n"
                              "    __shared__ float srow[1024];").replace(
        "maxval = fmaxf(maxval, x[i]);", "maxval = fmaxf(maxval, x[i]);\n        srow[i] = x[i];")
    got, reasons = why(text_policy(text, "softmax_rows"))
    assert got == ["x4", "x2"] and not reasons, reasons
    d = child(text_policy(text, "softmax_rows"), "vectorize_strided", "x4").definition
    assert "srow[wfs_0_j0 + 0] = wfs_0_s0.e[0];" in d or "srow[i] = wfs_0_s0.e[0];" in d, d
    # read at another element in the loop: another thread's
    bad = text.replace("srow[i] = x[i];", "srow[i] = x[i] + srow[i + 1];")
    assert any("kept outside the loop" in r for r in why(text_policy(bad, "softmax_rows"))[1])
