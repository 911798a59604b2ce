"""Structural rules on kernels written in styles the rules were not written against, and the near misses
where they must decline. The rules see the canonical form (cuda.normalize) through the offline policy, so
these go through ``OfflinePolicy.propose_sync`` exactly as a search does. GPU verification of the same
variants: tests/test_rules_gpu.py (corpus and fixture kernels)."""

from __future__ import annotations

from pathlib import Path

from warpforge.cuda import parse
from warpforge.cuda.candidate import Candidate
from warpforge.policy.offline import offline_policy
from warpforge.search.engine import Budget
from warpforge.search.optimize import OptimizeRequest

FIXTURES = Path(__file__).parent / "fixtures"

ROW_SPEC = """// @warpforge size B = 4096
// @warpforge size C = 1024
// @warpforge arg x: {xrole} float[B*C]
// @warpforge arg y: out float[B*C]
// @warpforge arg m: out float[B]
// @warpforge arg idx: out int[B]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(B, 256), block=256
"""
SIG = "__global__ void k({xconst}float* x, float* y, float* m, int* idx, int rows, int cols)\n"


def proposals(text: str, path: str = "k.cu") -> list[Candidate]:
    kernel = parse(text).kernels[0].name
    pol = offline_policy(OptimizeRequest(path, text, kernel, "beam", Budget(max_candidates=8, wall_seconds=5)))
    out = pol.propose_sync(pol.root_candidate())
    assert not pol.errors, pol.errors
    return out


def row_kernel(body: str, *, xrole: str = "in") -> str:
    return ROW_SPEC.format(xrole=xrole) + SIG.format(xconst="const " if xrole == "in" else "") + body


def families(text: str) -> set[str]:
    return {c.family for c in proposals(text)}


def test_guarded_bumped_row_kernel_gets_a_warp_per_row_variant() -> None:
    text = row_kernel("""{
    long r = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        x += r * cols;
        y += r * cols;
        float s = 0.0f;
        for (int j = 0; j < cols; ++j) s += x[j];
        for (int j = 0; j < cols; ++j) y[j] = x[j] - s / cols;
        m[r] = s / cols;
        idx[r] = 0;
    }
}
""")
    wpr = [c for c in proposals(text) if c.family == "warp_per_row"]
    assert {c.steps[-1] for c in wpr} >= {"warp_per_row:warp8", "warp_per_row:warp4"}
    src = wpr[0].source
    assert "__shfl_xor_sync" in src
    assert "if (wfw_lane == 0) {\n            m[r] = s / cols;" in src  # one lane stores the per-row scalar


def test_running_argmax_becomes_a_warp_pair_reduction_keeping_the_first_index() -> None:
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float best = x[r * cols];
    int at = 0;
    for (int j = 1; j < cols; j++) {
        float v = x[r * cols + j];
        if (v > best) { best = v; at = j; }
    }
    idx[r] = at;
    m[r] = best;
    for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] - best;
}
""")
    wpr = [c for c in proposals(text) if c.family == "warp_per_row"]
    assert wpr, "an arg-max row loop must get a warp variant"
    src = wpr[0].source
    assert "for (int j = (1) + wfw_lane;" in src
    assert "wfw_oj < wfw_p0_at" in src  # ties keep the smaller index, as the serial strict `>` does
    assert not any(c.steps[-1] == "warp_per_row:block256" for c in wpr)  # pairs combine within a warp only


def test_cross_row_dependence_is_declined() -> None:
    # row r reads what row r - 1 wrote: lanes of other warps would race
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows || r == 0) return;
    for (int j = 0; j < cols; j++) x[r * cols + j] += x[(r - 1) * cols + j];
}
""", xrole="inout")
    assert "warp_per_row" not in families(text)


def test_per_row_scalar_that_is_read_back_is_declined() -> None:
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += x[r * cols + j];
    m[r] = s;
    for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] / m[r];
}
""")
    assert "warp_per_row" not in families(text)


def test_accumulator_scaled_inside_its_own_loop_is_declined() -> None:
    # a decaying running value: each element needs the serial order, it is neither a reduction nor a sum scan
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) { s = 0.9f * s + x[r * cols + j]; y[r * cols + j] = s; }
}
""")
    assert "warp_per_row" not in families(text)


def test_compare_assign_that_is_not_a_running_max_is_declined() -> None:
    # assigns something other than what it compared: not a max, must not be treated as one
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float best = 0.0f;
    for (int j = 0; j < cols; j++) { if (x[r * cols + j] > best) best = x[r * cols + j] * 0.5f; }
    m[r] = best;
}
""")
    assert "warp_per_row" not in families(text)


def test_unseen_style_fixture_gets_a_structural_variant() -> None:
    path = FIXTURES / "unseen_rowloss.cu"
    fams = {c.family for c in proposals(path.read_text(), str(path))}
    assert "warp_per_row" in fams


COL_SPEC = """// @warpforge size B = 4096
// @warpforge size C = 768
// @warpforge arg x: in float[B*C]
// @warpforge arg y: out float[B*C]
// @warpforge arg s: out float[C]
// @warpforge arg B = B
// @warpforge arg C = C
// @warpforge launch grid=cdiv(C, 256), block=256
__global__ void k(const float* x, float* y, float* s, int B, int C)
"""


def test_column_reduction_gets_a_split_over_block_rows() -> None:
    text = COL_SPEC + """{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) {
        float lo = x[c];
        for (int b = 1; b < B; ++b) { if (x[b * C + c] < lo) lo = x[b * C + c]; }
        s[c] = lo;
    }
}
"""
    cs = [c for c in proposals(text) if c.family == "column_split"]
    # 768 columns are too few threads for any smaller split to keep enough loads in flight: the largest R
    assert [c.steps[-1] for c in cs] == ["column_split:w32r32x4", "column_split:w8r128x4"]
    src = cs[0].source
    assert "int wfc_j0 = (1) + threadIdx.y;" in src
    # four rows per iteration into four partials (their loads independent), then a remainder loop
    assert "for (; wfc_j0 + 3 * wfc_st0 < B; wfc_j0 += 4 * wfc_st0) {" in src
    assert "const int b = wfc_j0 + 3 * wfc_st0;" in src and "x[b * C + c] < wfc_p0_lo_3" in src
    assert "for (; wfc_j0 < B; wfc_j0 += wfc_st0) {" in src
    assert "wfc_p0_lo = (fminf((fminf(wfc_p0_lo, wfc_p0_lo_1)), (fminf(wfc_p0_lo_2, wfc_p0_lo_3))));" in src
    assert "if (wfc_on && threadIdx.y == 0)" in src and "return;" in src.split("wfc_i")[0]


def test_column_split_derives_rows_in_flight_from_the_sizes() -> None:
    # 8192 columns: 16 rows per column already keep ~16 KiB of loads in flight per SM; 64 rows cap R so that
    # every one of a thread's four partials gets a row
    body = """{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int b = 0; b < B; ++b) t += x[b * C + c];
    s[c] = t;
}
"""
    wide = COL_SPEC.replace("size B = 4096", "size B = 2048").replace("size C = 768", "size C = 8192") + body
    got = [c.steps[-1] for c in proposals(wide) if c.family == "column_split"]
    assert got == ["column_split:w32r16x4", "column_split:w8r16x4", "column_split:w32r32x4",
                   "column_split:w8r128x4"]
    short = COL_SPEC.replace("size B = 4096", "size B = 64") + body
    got = [c.steps[-1] for c in proposals(short) if c.family == "column_split"]
    assert got == ["column_split:w32r16x4", "column_split:w8r16x4"]


def test_column_split_declines_element_writes_and_row_contiguous_loops() -> None:
    writes = COL_SPEC + """{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int b = 0; b < B; ++b) { t += x[b * C + c]; y[b * C + c] = t; }
}
"""
    assert "column_split" not in families(writes)
    rows = COL_SPEC + """{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int b = 0; b < B; ++b) t += x[c * B + b];
    s[c] = t;
}
"""
    fams = families(rows)
    assert "column_split" not in fams and "warp_per_row" in fams


def test_column_split_declines_order_dependent_and_cross_column_loops() -> None:
    """Splitting a column's rows among threads reorders the loop: it needs a reduction that may be
    reordered (sum, min, max), and no value one column reads that another column writes."""
    head = """{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
"""
    near = {
        # a recurrence, not a reduction: t depends on the order the rows come in
        "decay": "    for (int b = 0; b < B; ++b) t = 0.5f * t + x[b * C + c];\n    s[c] = t;\n}\n",
        # reads the output another column writes (a dependence across columns)
        "neighbour": "    for (int b = 0; b < B; ++b) t += x[b * C + c] * s[(c + 1) % C];\n    s[c] = t;\n}\n",
        # reads, through a local view, the buffer it writes (aliasing)
        "view": "    const float* v = y;\n    for (int b = 0; b < B; ++b) t += v[b * C + c];\n    y[c] = t;\n}\n",
        # the running value picks the element: each row depends on the ones before it
        "chase": "    for (int b = 0; b < B; ++b) t += x[b * C + ((c + (int)t) % C)];\n    s[c] = t;\n}\n",
    }
    for name, rest in near.items():
        assert "column_split" not in families(COL_SPEC + head + rest), name
    ok = "    for (int b = 0; b < B; ++b) t += x[b * C + c];\n    s[c] = t;\n}\n"
    assert "column_split" in families(COL_SPEC + head + ok)


def test_nested_loops_split_the_inner_contiguous_loop() -> None:
    # a mean per (batch, channel-group) over planes: the outer loop is run whole by every lane
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int q = 0; q < 4; ++q) {
        const float* plane = x + ((long)r * 4 + q) * (cols / 4);
        for (int i = 0; i < cols / 4; ++i) acc += plane[i];
    }
    m[r] = acc / cols;
}
""")
    wpr = {c.steps[-1]: c.source for c in proposals(text) if c.family == "warp_per_row"}
    src = wpr["warp_per_row:warp8"]
    assert "for (int i = wfw_lane; i < cols / 4; i += 32)" in src
    assert "for (int q = 0; q < 4; ++q) {" in src
    # the vector form keeps the outer loop whole too, and splits the inner one in chunks of 4
    assert "for (int q = 0; q < 4; ++q) {" in wpr["warp_per_row:warp8_vec"]
    assert "wfw_nv0 = wfw_al0 ? (cols / 4) / 4 : 0;" in wpr["warp_per_row:warp8_vec"]


def test_outer_loop_reading_what_another_iteration_wrote_is_declined() -> None:
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    for (int q = 1; q < 4; ++q) {
        for (int i = 0; i < cols / 4; ++i) y[r * cols + q * (cols / 4) + i] = y[r * cols + q * (cols / 4) + i] + 1.0f;
    }
}
""")
    assert "warp_per_row" not in families(text)


ATOMIC_SPEC = """// @warpforge size N = 1 << 22
// @warpforge arg x: in float[N]
// @warpforge arg total: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-3 atol=1e-2
__global__ void k(const float* x, float* total, int n)
"""


def test_guarded_per_thread_atomic_is_aggregated_with_the_identity_outside_the_guard() -> None:
    text = ATOMIC_SPEC + """{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] * x[i];
        atomicAdd(total, v);
    }
}
"""
    agg = {c.steps[-1]: c.source for c in proposals(text) if c.family == "atomic_aggregate"}
    # the key-aggregated form (``active``: one address) combines where the atomic runs, guard or not
    assert set(agg) == {"atomic_aggregate:warp", "atomic_aggregate:block", "atomic_aggregate:active"}
    assert "float wfa_v = (float)0;" in agg["atomic_aggregate:warp"]
    assert "wfa_v = v;" in agg["atomic_aggregate:warp"]


def atomic_steps(text: str) -> set[str]:
    return {c.steps[-1] for c in proposals(text) if c.family == "atomic_aggregate"}


def test_early_exits_and_per_thread_targets_get_only_the_active_mask_forms() -> None:
    early = ATOMIC_SPEC + """{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(total, x[i]);
}
"""
    # lanes that left would miss the whole-warp shuffle; the active mask leaves them out
    assert atomic_steps(early) == {"atomic_aggregate:active"}
    scatter = ATOMIC_SPEC + """{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&total[i % 1], x[i]);
}
"""
    # the address depends on the thread: lanes are grouped by address
    assert atomic_steps(scatter) == {"atomic_aggregate:key"}


def test_running_sum_read_in_its_loop_becomes_a_warp_scan() -> None:
    text = row_kernel("""{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        long base = (long)r * cols;
        float run = 0.0f;
        for (int j = 0; j < cols; j++) {
            run += x[base + j];
            y[base + j] = run;
        }
        m[r] = run;
    }
}
""")
    wpr = {c.steps[-1]: c.source for c in proposals(text) if c.family == "warp_per_row"}
    assert set(wpr) == {"warp_per_row:warp8", "warp_per_row:warp4"}  # a scan combines within a warp only
    src = wpr["warp_per_row:warp8"]
    assert "__shfl_up_sync" in src and "y[base + j] = wfw_s0;" in src and "run = wfw_c0;" in src
