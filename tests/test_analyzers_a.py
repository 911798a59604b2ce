"""Source-pattern analyzers WF101, WF102, WF103, WF105, WF106, WF111: each fires where it must, at the right
line with the right numbers, and stays silent on the near-miss that a careless pattern match would flag.

Fixtures are inline: each is a small kernel with a ``// <-`` marker on the line a finding must point at.
Everything runs without the compiler (``use_compiler=False``), so these tests are fast and need no nvcc.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from warpforge.compiler.toolchain import local_gpu_arch
from warpforge.profile.findings import Finding
from warpforge.profile.hints import analyze_source

ROOT = Path(__file__).resolve().parents[1]
MINE = {"WF101", "WF102", "WF103", "WF105", "WF106", "WF111"}


def hints(src: str, code: str) -> list[Finding]:
    """What one analyzer says on its own (findings of one root cause are folded by ``rootcause``, tested in
    tests/test_hints_reuse.py)."""
    report = analyze_source("fixture.cu", textwrap.dedent(src), use_compiler=False, merge=False)
    failed = [n for n in report.notes if "failed" in n]
    assert not failed, failed
    return [f for f in report.findings if f.code == code]


def marker_line(src: str, marker: str = "// <-") -> int:
    """1-based line of the (first) line holding ``marker``."""
    for i, line in enumerate(textwrap.dedent(src).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"no {marker!r} in fixture")


# ----------------------------------------------------------------------------------------------- WF101
WF101_FIRE = """
__global__ void scale(float* x,   // <-
                      const float* w, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = expf(x[i] - 1.0f) * w[i];   // x is only read, even inside a call
    }
}
"""


def test_wf101_names_read_only_pointers_and_the_written_one() -> None:
    (f,) = hints(WF101_FIRE, "WF101")
    assert f.line == marker_line(WF101_FIRE)
    assert f.evidence["params"] == {
        "x": {"missing": ["const", "__restrict__"], "const": False, "restrict": False},
        "w": {"missing": ["__restrict__"], "const": True, "restrict": False},
    }
    assert f.evidence["written"] == ["y"]
    assert "`x`, `w`" in f.message and "`y`" in f.message
    assert f.action == "const_restrict" and f.gain is None


WF101_SILENT = """
struct P { float a, b; };
__device__ void bump(float* p) { p[0] += 1.0f; }
__global__ void k(const float* __restrict__ ok,   // already const __restrict__
                  P* fields,                        // written through p[i].a
                  float* post,                      // written through *post++
                  float* later,                     // written through a pointer assigned after its declaration
                  float* helper,                    // handed to a helper that writes
                  float* ternary_a, float* ternary_b,  // written through c ? a : b
                  unsigned* counts,                 // atomics
                  float* arrow_base, P* arrow,      // written through p->b
                  int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    fields[i].a = ok[i];
    *post++ = ok[i];
    float* q;
    q = later + i;
    q[0] = 1.0f;
    bump(helper);
    float* t = (i & 1) ? ternary_a : ternary_b;
    t[i] = 2.0f;
    atomicAdd(&counts[i % 8], 1u);
    arrow->b = arrow_base[0];
    arrow_base[1] = 0.0f;
}
"""


def test_wf101_silent_when_every_read_only_pointer_is_const_restrict_and_writes_are_seen() -> None:
    assert hints(WF101_SILENT, "WF101") == []


def test_wf101_asm_makes_non_const_pointers_untrusted() -> None:
    src = """
    __global__ void k(float* p, float* q, int n) {
        float v = p[threadIdx.x];
        asm volatile("st.global.f32 [%0], %1;" :: "l"(q), "f"(v));
    }
    """
    assert hints(src, "WF101") == []


# ----------------------------------------------------------------------------------------------- WF102
WF102_FIRE = """
// @warpforge size B = 4096
// @warpforge size C = 64
// @warpforge arg inp: in float[B*C]
// @warpforge arg out: out float[B*C]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge launch grid=B, block=256
__global__ void scale_rows(const float* inp, float* out, int rows, int cols)
{
    const float* x = inp + blockIdx.x * cols;
    float m = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {   // <-
        m = fmaxf(m, x[j]);
    }
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        out[blockIdx.x * cols + j] = x[j] * m;
    }
}
"""


def test_wf102_row_loop_shorter_than_block() -> None:
    (f,) = hints(WF102_FIRE, "WF102")
    assert f.line == marker_line(WF102_FIRE)
    assert f.evidence["bound_value"] == 64 and f.evidence["block_x"] == 256
    assert f.evidence["idle_fraction"] == 0.75
    assert f.evidence["lines"] == [f.line, f.line + 3]
    assert f.action == "block_size"
    assert "64 of the block's 256" in f.message


def test_wf102_early_return_guard() -> None:
    src = """
    // @warpforge size B = 4096
    // @warpforge arg inp: in float[B*32]
    // @warpforge arg out: out float[B*32]
    // @warpforge launch grid=B, block=128
    __global__ void g(const float* inp, float* out) {
        int t = threadIdx.x;
        if (t >= 32) return;   // <-
        out[blockIdx.x * 32 + t] = inp[blockIdx.x * 32 + t] * 2.0f;
    }
    """
    (f,) = hints(src, "WF102")
    assert f.line == marker_line(src)
    assert f.evidence["bound_value"] == 32 and f.evidence["kind"] == "return"


def test_wf102_silent_on_long_rows_prologues_and_without_spec() -> None:
    long_rows = WF102_FIRE.replace("size C = 64", "size C = 4096")
    assert hints(long_rows, "WF102") == []
    # a few threads load a 9-tap filter into shared memory; the bulk runs on every thread
    prologue = """
    // @warpforge size N = 1 << 20
    // @warpforge size K = 9
    // @warpforge arg inp: in float[N]
    // @warpforge arg filter: in float[K]
    // @warpforge arg out: out float[N]
    // @warpforge arg n = N
    // @warpforge arg k = K
    // @warpforge launch grid=cdiv(N, 256), block=256
    __global__ void conv(const float* inp, const float* filter, float* out, int n, int k) {
        __shared__ float f[64];
        for (int j = threadIdx.x; j < k; j += blockDim.x) f[j] = filter[j];
        __syncthreads();
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            float acc = 0.0f;
            for (int j = 0; j < k; ++j) { int idx = i + j - k / 2; if (idx >= 0 && idx < n) acc += f[j] * inp[idx]; }
            out[i] = acc;
        }
    }
    """
    assert hints(prologue, "WF102") == []
    # a stencil whose first RADIUS threads also load the halo: every thread has its own load and store
    halo = """
    #define RADIUS 3
    // @warpforge size N = 1 << 20
    // @warpforge arg inp: in float[N]
    // @warpforge arg out: out float[N]
    // @warpforge arg n = N
    // @warpforge launch grid=cdiv(N, 256), block=256
    __global__ void stencil(const float* inp, float* out, int n) {
        __shared__ float tile[256 + 2 * RADIUS];
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        tile[threadIdx.x + RADIUS] = inp[min(g, n - 1)];
        if (threadIdx.x < RADIUS) {
            tile[threadIdx.x] = inp[max(g - RADIUS, 0)];
            tile[threadIdx.x + 256 + RADIUS] = inp[min(g + 256, n - 1)];
        }
        __syncthreads();
        if (g < n) out[g] = tile[threadIdx.x] + tile[threadIdx.x + 2 * RADIUS];
    }
    """
    assert hints(halo, "WF102") == []
    no_spec = "\n".join(line for line in WF102_FIRE.splitlines() if "@warpforge" not in line)
    assert hints(no_spec, "WF102") == []


# ----------------------------------------------------------------------------------------------- WF103
TRANSPOSE = (ROOT / "kernels" / "transpose.cu").read_text()
SOFTMAX = (ROOT / "kernels" / "softmax.cu").read_text()


def test_wf103_transpose_write_is_strided_by_rows() -> None:
    (f,) = hints(TRANSPOSE, "WF103")
    assert f.line == marker_line(TRANSPOSE, "out[col * rows + row]")
    assert f.evidence["buffer"] == "out" and f.evidence["stride"] == "rows"
    assert f.evidence["stride_value"] == 4096
    assert f.evidence["sectors_per_request"] == 32 and f.evidence["ideal_sectors"] == 4
    assert f.evidence["excess"] == 8.0
    assert "stores to `out`" in f.message and "`col` advances with threadIdx.x" in f.message
    assert f.action == "coalesce"


def test_wf103_thread_per_row_through_a_local_pointer() -> None:
    found = {f.evidence["buffer"]: f for f in hints(SOFTMAX, "WF103")}
    assert set(found) == {"inp", "out"}
    inp = found["inp"]
    assert inp.line == marker_line(SOFTMAX, "fmaxf(maxval, x[j])")
    assert inp.evidence["via"] == "x" and inp.evidence["stride_value"] == 1024
    assert inp.evidence["row_loop_line"] == inp.line - 1
    assert found["out"].evidence["lines"] == [31, 32, 36]


def test_wf103_constant_stride_without_spec() -> None:
    src = """
    __global__ void k(const float* x, float* y, int n) {
        int t = blockIdx.x * blockDim.x + threadIdx.x;
        if (t < n) y[t] = x[t * 16];   // <-
    }
    """
    (f,) = hints(src, "WF103")
    assert f.line == marker_line(src)
    assert f.evidence["stride_value"] == 16 and f.evidence["sectors_per_request"] == 32


def test_wf103_row_walk_without_spec_names_the_symbolic_stride() -> None:
    src = """
    __global__ void k(const float* x, float* out, int n, int C) {
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= n) return;
        float s = 0.0f;
        for (int j = 0; j < C; j++) s += x[r * C + j];   // <-
        out[r] = s;
    }
    """
    (f,) = hints(src, "WF103")
    assert f.line == marker_line(src)
    assert f.evidence["stride"] == "C" and f.evidence["stride_value"] is None


NEAR_MISS_COALESCED = """
// @warpforge size R = 1024
// @warpforge size C = 1024
// @warpforge arg x: in float[R*C]
// @warpforge arg p: in float[3*R*C]
// @warpforge arg y: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg incx = 1
// @warpforge launch grid=R, block=256
__global__ void k(const float* x, const float* p, float* y, int rows, int cols, int incx) {
    int row = blockIdx.x;
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = x[row * cols + threadIdx.x];                    // a row read by the block: coalesced
    acc += x[tid];                                              // unit stride
    for (int j = 0; j < rows; j++) acc += x[j * cols + threadIdx.x];   // column walk, lanes contiguous
    for (int j = 0; j < rows; j++) acc += x[j * cols];          // not thread-dependent: a broadcast
    acc += p[3 * tid] + p[3 * tid + 1] + p[3 * tid + 2];        // struct of 3 floats read whole
    acc += x[tid * incx];                                       // stride 1 per the spec
    y[row * cols + threadIdx.x] = acc;
}
"""


def test_wf103_silent_on_coalesced_near_misses() -> None:
    assert hints(NEAR_MISS_COALESCED, "WF103") == []


def test_wf103_silent_on_small_per_thread_chunks() -> None:
    src = """
    __global__ void k(const float* x, float* y, int n) {
        int t = blockIdx.x * blockDim.x + threadIdx.x;
        for (int k = 0; k < 4; k++) y[4 * t + k] = x[4 * t + k] * 2.0f;   // 16 bytes per thread: vectorize
    }
    """
    assert hints(src, "WF103") == []


def test_wf103_silent_on_unknown_symbolic_stride() -> None:
    src = """
    __global__ void k(const float* x, float* y, int n, int incx) {
        int t = blockIdx.x * blockDim.x + threadIdx.x;
        if (t < n) y[t] = x[t * incx];   // BLAS-style increment, usually 1: no spec, no claim
    }
    """
    assert hints(src, "WF103") == []


# ----------------------------------------------------------------------------------------------- WF105
WF105_SRC = """
#define TILE 32
__global__ void k(const float* in, float* out, int n) {
    __shared__ float tile[TILE][TILE];
    __shared__ float padded[TILE][TILE + 1];
    __shared__ float flat[TILE * 33];
    __shared__ double wide[32][32];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * n + x];             // row-wise: conflict-free
    padded[threadIdx.y][threadIdx.x] = in[y * n + x];
    wide[threadIdx.y][threadIdx.x] = 0.0;                       // 8-byte elements, contiguous: fine
    flat[threadIdx.x * 33] = 1.0f;                              // stride 33 words: fine
    __syncthreads();
    float a = tile[threadIdx.x][threadIdx.y];   // <- column read of an unpadded tile
    float b = padded[threadIdx.x][threadIdx.y];                 // the padded tile: fine
    flat[threadIdx.x * 32] = a + b;             // <-1d
    out[x] = a;
}
"""


def test_wf105_column_read_of_unpadded_tile_and_stride_32() -> None:
    found = hints(WF105_SRC, "WF105")
    assert [f.line for f in found] == [marker_line(WF105_SRC, "// <- column"), marker_line(WF105_SRC, "// <-1d")]
    tile, flat = found
    assert tile.evidence["conflict_degree"] == 32 and tile.evidence["thread_x_stride_words"] == 32
    assert tile.evidence["wavefronts"] == 32 and tile.evidence["ideal_wavefronts"] == 1
    assert "`tile[TILE][TILE + 1]`" in tile.message
    assert flat.evidence["conflict_degree"] == 32 and "stride of 33" in flat.message
    assert tile.action == "smem_padding"


def test_wf105_two_way_conflict_with_narrow_block() -> None:
    src = """
    // @warpforge size N = 4096
    // @warpforge arg out: out float[N]
    // @warpforge launch grid=cdiv(N, 256), block=(16, 16)
    __global__ void k(float* out) {
        __shared__ float t[16][16];
        t[threadIdx.x][threadIdx.y] = 1.0f;   // <-
        __syncthreads();
        out[blockIdx.x * 256 + threadIdx.y * 16 + threadIdx.x] = t[threadIdx.y][threadIdx.x];
    }
    """
    (f,) = hints(src, "WF105")
    assert f.line == marker_line(src)
    # lanes 0-15: words 0,16,...,240 (banks 0 and 16, 8 each); lanes 16-31 the same plus 1 -> 8-way
    assert f.evidence["conflict_degree"] == 8 and f.evidence["block_x"] == 16


# ----------------------------------------------------------------------------------------------- WF106
WF106_SRC = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(float* out, const float* in, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    if (i >= n) return;                                   // <-return
    s[tid] = in[i];
    __syncthreads();
    if (tid < 128) {
        s[tid] += s[tid + 128];
        __syncthreads();                                  // <-branch
    }
    int flag = 0;
    if (tid == 0) flag = 1;
    if (flag) cg::this_thread_block().sync();             // <-flag
    for (int j = tid; j < n; j += blockDim.x) {
        __syncthreads();                                  // <-loop
    }
    float v = in[i];
    if (v > 0.0f) __syncthreads_count(1);                 // <-data
    out[i] = s[tid];
}
"""


def test_wf106_thread_dependent_barriers() -> None:
    found = hints(WF106_SRC, "WF106")
    lines = {f.line: f for f in found}
    want = {marker_line(WF106_SRC, f"// <-{m}"): m for m in ("return", "branch", "flag", "loop", "data")}
    assert set(lines) == set(want)
    assert all(f.severity.value == "warning" and f.action == "sync_hazard" for f in found)
    ret = lines[marker_line(WF106_SRC, "// <-return")]
    assert ret.evidence["exit"] == "return" and ret.evidence["barrier_line"] == ret.line + 2
    assert "threadIdx.x" in ret.evidence["depends_on"]
    assert lines[marker_line(WF106_SRC, "// <-branch")].evidence["condition"] == "(tid < 128)"
    assert "`flag`" in lines[marker_line(WF106_SRC, "// <-flag")].evidence["depends_on"]
    assert "per thread" in lines[marker_line(WF106_SRC, "// <-data")].evidence["depends_on"]


def test_wf106_break_under_data_dependent_condition() -> None:
    src = """
    __global__ void k(const float* in, float* out, int n) {
        for (int t = 0; t < n; t += 256) {
            if (in[t + threadIdx.x] < 0.0f) break;   // <-
            __syncthreads();
        }
    }
    """
    (f,) = hints(src, "WF106")
    assert f.line == marker_line(src) and f.evidence["exit"] == "break"


def test_wf106_silent_on_uniform_control_flow() -> None:
    src = """
    __global__ void k(float* out, const float* in, int rows, int cols) {
        __shared__ float s[256];
        int row = blockIdx.x;
        int tid = threadIdx.x;
        if (row >= rows) return;                // the whole block leaves together
        auto block = cg::this_thread_block();
        float u = in[0];                        // same value in every thread
        for (int t = 0; t < cols; t += 256) {   // uniform trip count
            s[tid] = t + tid < cols ? in[row * cols + t + tid] : 0.0f;
            __syncthreads();
            for (int st = 128; st > 0; st >>= 1) {
                if (tid < st) s[tid] += s[tid + st];
                __syncthreads();
            }
        }
        if (blockIdx.y > 0 && cols > 16) block.sync();
        if (u > 0.0f) __syncthreads();
        if (tid < 32) __syncwarp();             // a warp barrier: out of scope
        if (tid == 0) out[row] = s[0];
    }
    """
    assert hints(src, "WF106") == []


def test_wf106_silent_on_block_wide_vote_loop() -> None:
    src = """
    __global__ void k(float* v) {
        __shared__ float s[256];
        int done = 0;
        while (!done) {
            s[threadIdx.x] = v[threadIdx.x];
            __syncthreads();
            done = __syncthreads_and(s[threadIdx.x] < 1e-3f);   // the same result in every thread
            if (done) break;
            v[threadIdx.x] *= 0.5f;
            __syncthreads();
        }
    }
    """
    assert hints(src, "WF106") == []


def test_wf106_silent_on_reference_reductions() -> None:
    for name in ("reduce_sum.cu", "rmsnorm.cu"):
        assert hints((ROOT / "kernels" / name).read_text(), "WF106") == []


# ----------------------------------------------------------------------------------------------- WF111
def test_wf111_softmax_one_thread_per_row() -> None:
    (f,) = hints(SOFTMAX, "WF111")
    assert f.line == marker_line(SOFTMAX, "for (int j = 0; j < cols; j++)")
    ev = f.evidence
    assert ev["row_length"] == "cols" and ev["row_length_value"] == 1024
    assert ev["rows"] == "rows" and ev["rows_value"] == 4096
    assert ev["threads_launched"] == 4096 and ev["blocks"] == 16
    assert ev["loops"] == [25, 30, 35] and ev["buffers"] == ["inp", "out"]
    assert f.action == "warp_per_row" and f.gain is None
    assert len(f.related) == 2
    # no architecture named (and none seen here): the GPU is "your GPU", never an assumed H100
    if local_gpu_arch() is None:
        assert "fewer warps than your GPU has schedulers (about 528)" in f.message and "H100" not in f.message
    named = analyze_source("fixture.cu", textwrap.dedent(SOFTMAX), use_compiler=False, merge=False, arch="sm_80")
    (g,) = [x for x in named.findings if x.code == "WF111"]
    assert "fewer warps than an sm_80 GPU has schedulers (432)" in g.message  # A100: 108 SMs x 4


def test_wf111_silent_on_block_per_row_short_rows_and_column_walks() -> None:
    assert hints((ROOT / "kernels" / "rmsnorm.cu").read_text(), "WF111") == []
    short_rows = SOFTMAX.replace("size C = 1024", "size C = 8")
    assert hints(short_rows, "WF111") == []
    columns = """
    __global__ void colsum(const float* x, float* out, int rows, int cols) {
        int c = blockIdx.x * blockDim.x + threadIdx.x;
        if (c >= cols) return;
        float s = 0.0f;
        for (int r = 0; r < rows; r++) s += x[r * cols + c];   // lanes read adjacent columns: coalesced
        out[c] = s;
    }
    """
    assert hints(columns, "WF111") == []


def test_wf111_gather_without_reduction_and_gemm_left_to_wf103() -> None:
    gather = """
    __global__ void embed(const int* ids, const float* tab, float* out, int n, int d) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n)
            for (int k = 0; k < d; k++)   // <-
                out[i * d + k] = tab[ids[i] * d + k];
    }
    """
    (f,) = hints(gather, "WF111")
    assert f.line == marker_line(gather) and f.evidence["reduction"] is False
    assert "write 32 different rows" in f.message and "shuffle" not in f.message
    gemm = """
    __global__ void gemm(const float* A, const float* B, float* C, int N, int K) {
        int row = blockIdx.x * blockDim.x + threadIdx.x;
        int col = blockIdx.y * blockDim.y + threadIdx.y;
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
    """
    assert hints(gemm, "WF111") == []
    (f,) = hints(gemm, "WF103")
    assert f.evidence["buffer"] == "A" and f.evidence["stride"] == "K"


def test_kernels_too_large_to_analyze_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.profile import lanes

    monkeypatch.setattr(lanes, "MAX_NODES", 50)
    for code in ("WF103", "WF111", "WF101"):
        assert hints(SOFTMAX, code) == []


# ----------------------------------------------------------------------------------------------- kernels/
EXPECTED = {
    "conv1d.cu": {"WF101"},
    "gelu.cu": {"WF101"},
    "histogram.cu": {"WF101"},
    "reduce_sum.cu": {"WF101"},
    "rmsnorm.cu": {"WF101"},
    "saxpy.cu": {"WF101"},
    "sgemm.cu": {"WF101"},
    "softmax.cu": {"WF101", "WF111"},  # its strided loads (WF103) are folded into the row walk
    "transpose.cu": {"WF101", "WF103"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reference_kernels_get_exactly_the_expected_source_findings(name: str) -> None:
    text = (ROOT / "kernels" / name).read_text()
    report = analyze_source(f"kernels/{name}", text, use_compiler=False)
    assert {f.code for f in report.findings if f.code in MINE} == EXPECTED[name]
