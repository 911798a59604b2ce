"""WF104, WF107-WF110 fire where they must and stay silent on near misses; the hints driver survives bad input.

The fixture kernels are compiled once per module (one nvcc call, one nvdisasm call) into a private cache,
so the SASS-confirmed analyzers (WF104 scalar loads, WF108 FP64) are tested against what the compiler
really emits — a float ``sqrt(x)`` that is *not* double, a ``v * 0.5`` the compiler folds — and not
against our expectation of it. Every firing test has a near miss next to it: the analyzers exist to be
trusted, so staying silent is tested as carefully as speaking.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import warpforge.profile.hints as hints_mod
from warpforge.compiler.toolchain import ToolMissing
from warpforge.profile.findings import CODES, Finding, Severity
from warpforge.profile.hints import HintsReport, analyze_source

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: WF104/WF108 are confirmed from the SASS of compiled fixtures; "
    "install the CUDA toolkit or `pip install nvidia-cuda-nvcc`")

SPEC_1D = """\
// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
"""

FIXTURE = f"""\
#define TILE 32
#define SCALE 0.1

// ----------------------------------------------------------------------------- WF104
// @warpforge size N = 1 << 20
// @warpforge arg n = N
// @warpforge arg a = 2.5
// @warpforge arg x: in float[N]
// @warpforge arg y: inout float[N]
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void v_fire_saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = a * x[i] + y[i];
    }}
}}

{SPEC_1D}__global__ void v_fire_grid_stride(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {{
        y[i] = x[i] * x[i];
    }}
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in float32[N]
// @warpforge arg y: out float32[N]
// @warpforge arg n = N / 4
// @warpforge launch grid=cdiv(N / 4, 256), block=256
__global__ void v_miss_float4(const float4* __restrict__ x, float4* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float4 v = x[i];
        y[i] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
    }}
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in float[2*N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void v_miss_strided(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = x[2 * i];
    }}
}}

{SPEC_1D}__global__ void v_miss_stencil(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1) {{
        y[i] = x[i - 1] + x[i] + x[i + 1];
    }}
}}

// @warpforge size R = 1024
// @warpforge size C = 1024
// @warpforge arg x: in float[R*C]
// @warpforge arg y: out float[R*C]
// @warpforge arg cols = C
// @warpforge launch grid=R, block=256
__global__ void v_miss_rows(const float* __restrict__ x, float* __restrict__ y, int cols)
{{
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {{
        yr[j] = 2.0f * xr[j];
    }}
}}

// ----------------------------------------------------------------------------- WF107
// @warpforge size R = 1024
// @warpforge size C = 1000
// @warpforge arg x: in float[R*C]
// @warpforge arg y: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R*C, 256), block=256
__global__ void d_fire_flat(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) return;
    int r = idx / cols;
    int c = idx % cols;
    y[c * rows + r] = x[idx];
}}

// @warpforge size R = 1024
// @warpforge size C = 1024
// @warpforge arg x: in float[R*C]
// @warpforge arg y: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg w = 7
// @warpforge launch grid=cdiv(R, 256), block=256
__global__ void d_fire_loop(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int w)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) {{
        s += x[r * cols + j % w];
    }}
    y[r] = s;
}}

{SPEC_1D}__global__ void d_miss_const(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        const int W = 3;
        int j = (i / 32) * 32 + i % 256 + i / TILE + i % W + i / 7;
        y[i] = x[min(j, n - 1)] / 3.0f;
    }}
}}

// @warpforge size R = 1024
// @warpforge size C = 1024
// @warpforge arg x: in float[R*C]
// @warpforge arg y: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg w = 7
// @warpforge launch grid=cdiv(R, 256), block=256
__global__ void d_miss_setup(const float* __restrict__ x, float* __restrict__ y, int rows, int cols, int w)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int chunk = cols / w;
    float s = 0.0f;
    for (int j = 0; j < chunk; j++) {{
        int stride = cols / w;
        s += x[r * cols + j * stride] / cols;
    }}
    y[r] = s;
}}

// ----------------------------------------------------------------------------- WF108
{SPEC_1D}__global__ void f_fire_literal(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i];
        y[i] = v * 0.1 + 1.0;
    }}
}}

{SPEC_1D}__global__ void f_fire_function(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i];
        float e = exp(v * 2.0);
        float m = v * SCALE;
        y[i] = e + m;
    }}
}}

{SPEC_1D}__global__ void f_miss_float(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i];
        float a = v * 0.1f + 1.0f;
        float b = sqrt(v) + sqrtf(v) + tanh(v) + expf(v) + fabs(v);
        float h = v * 0.5;
        y[i] = a + b + h;
    }}
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in double[N]
// @warpforge arg y: out double[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void f_miss_double(const double* __restrict__ x, double* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = x[i] * 0.1 + sqrt(x[i]);
    }}
}}

{SPEC_1D}__global__ void f_miss_deliberate(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        double acc = x[i];
        acc = acc * 0.1 + 1.0;
        y[i] = (float)acc;
    }}
}}

// ----------------------------------------------------------------------------- WF109
// @warpforge size N = 3 << 30
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void w_fire_tid(const float* __restrict__ x, float* __restrict__ y, long long n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}}

// @warpforge size M = 65536
// @warpforge size K = 65536
// @warpforge arg A: in float[M*K]
// @warpforge arg out: out float[M]
// @warpforge arg rows = M
// @warpforge arg cols = K
// @warpforge launch grid=cdiv(M, 256), block=256
__global__ void w_fire_rows(const float* __restrict__ A, float* __restrict__ out, int rows, int cols)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += A[r * cols + c];
    out[r] = s;
}}

// @warpforge size M = 1024
// @warpforge size K = 1024
// @warpforge arg A: in float[M*K]
// @warpforge arg out: out float[M]
// @warpforge arg rows = M
// @warpforge arg cols = K
// @warpforge launch grid=cdiv(M, 256), block=256
__global__ void w_miss_small(const float* __restrict__ A, float* __restrict__ out, int rows, int cols)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += A[r * cols + c];
    out[r] = s;
}}

// @warpforge size M = 65536
// @warpforge size K = 65536
// @warpforge arg A: in float[M*K]
// @warpforge arg out: out float[M]
// @warpforge arg rows = M
// @warpforge arg cols = K
// @warpforge launch grid=cdiv(M, 256), block=256
__global__ void w_miss_size_t(const float* __restrict__ A, float* __restrict__ out, int rows, int cols)
{{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* a = A + (size_t)r * cols;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += a[c] + A[(size_t)r * cols + c];
    out[r] = s;
}}

// ----------------------------------------------------------------------------- WF110
// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg out: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void a_fire_single(const float* __restrict__ x, float* __restrict__ out, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        atomicAdd(out, x[i]);
    }}
}}

// @warpforge size N = 1 << 22
// @warpforge size NB = 256
// @warpforge arg data: in int[N] int(0, NB)
// @warpforge arg bins: inout unsigned[NB] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void a_fire_histogram(const int* __restrict__ data, unsigned int* __restrict__ bins, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        atomicAdd(&bins[data[i]], 1u);
    }}
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg out: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void a_miss_block(const float* __restrict__ x, float* __restrict__ out, int n)
{{
    __shared__ float s[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {{
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }}
    if (tid == 0) {{
        atomicAdd(out, s[0]);
    }}
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg out: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void a_miss_early_return(const float* __restrict__ x, float* __restrict__ out, int n)
{{
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x % 32;
    if (lane != 0) return;
    atomicAdd(&out[0], v);
}}

// @warpforge size N = 1 << 22
// @warpforge size NB = 256
// @warpforge arg data: in int[N] int(0, NB)
// @warpforge arg bins: inout unsigned[NB] zeros
// @warpforge arg n = N
// @warpforge launch grid=256, block=256
__global__ void a_miss_private(const int* __restrict__ data, unsigned int* __restrict__ bins, int n)
{{
    __shared__ unsigned int local[256];
    local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {{
        atomicAdd(&local[data[i]], 1u);
    }}
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}}

// @warpforge size N = 1 << 22
// @warpforge arg idx: in int[N] int(0, N)
// @warpforge arg v: in float[N]
// @warpforge arg out: inout float[N] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void a_miss_scatter(const int* __restrict__ idx, const float* __restrict__ v, float* __restrict__ out,
                               int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        atomicAdd(&out[idx[i]], v[i]);
    }}
}}
"""


def _line(text: str, needle: str, after: str = "") -> int:
    """1-based line of the first ``needle`` after the line containing ``after``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if after in ln) if after else 0
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache of this module's own, so results come from a real compile, not an earlier run."""
    path = tmp_path_factory.mktemp("wf-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARPFORGE_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def report(private_cache: Path) -> HintsReport:
    if NVCC is None:
        pytest.skip("nvcc is not on PATH: the fixture kernels cannot be compiled")
    t0 = time.perf_counter()
    rep = analyze_source("fixture_b.cu", FIXTURE, arch="sm_90")
    print(f"\nfixture: {len(rep.kernels)} kernels compiled and analyzed in {time.perf_counter() - t0:.2f} s")
    assert not [f for f in rep.findings if f.code == "WF000"], "the fixture must compile"
    assert not [f for f in rep.findings if f.code == "WF002"], "nvcc and nvdisasm must be found"
    return rep


@pytest.fixture(scope="module")
def source_only() -> HintsReport:
    return analyze_source("fixture_b.cu", FIXTURE, use_compiler=False)


def found(rep: HintsReport, kernel: str, code: str) -> list[Finding]:
    return [f for f in rep.findings if f.kernel == kernel and f.code == code]


def test_codes_are_catalogued_with_their_actions(report: HintsReport) -> None:
    want = {"WF104": ("vectorize", Severity.INFO), "WF107": ("index_math", Severity.INFO),
            "WF108": ("fp32_math", Severity.INFO), "WF109": ("index_width", Severity.WARNING),
            "WF110": ("atomics_privatize", Severity.INFO)}
    for code, (action, severity) in want.items():
        assert CODES[code].action == action
        assert CODES[code].severity is severity
    doc = (Path(__file__).resolve().parents[1] / "docs" / "findings.md").read_text()
    for code in want:
        assert f"## {code}" in doc, f"{code} is not documented in docs/findings.md"


# ----------------------------------------------------------------------------------------- WF104
@needs_nvcc
def test_wf104_fires_on_scalar_elementwise_accesses(report: HintsReport) -> None:
    (f,) = found(report, "v_fire_saxpy", "WF104")
    assert f.line == _line(FIXTURE, "y[i] = a * x[i] + y[i]")
    assert f.evidence["buffers"] == ["x", "y"]
    assert f.evidence["element_bytes"] == 4 and f.evidence["vector_factor"] == 4
    assert f.evidence["sass_scalar_loads"] >= 2 and f.evidence["sass_scalar_stores"] >= 1
    assert "4×" in f.message and "`x`" in f.message and f.action == "vectorize"
    (g,) = found(report, "v_fire_grid_stride", "WF104")
    assert g.evidence["index"] == "i"


@needs_nvcc
@pytest.mark.parametrize("kernel", ["v_miss_float4", "v_miss_strided", "v_miss_stencil", "v_miss_rows"])
def test_wf104_silent_on_vector_strided_stencil_and_row_loops(report: HintsReport, kernel: str) -> None:
    assert kernel in report.kernels
    assert found(report, kernel, "WF104") == []


def test_wf104_needs_sass(source_only: HintsReport) -> None:
    """Without SASS we cannot tell LDG.E from LDG.E.128: say nothing rather than guess."""
    assert [f for f in source_only.findings if f.code == "WF104"] == []


# ----------------------------------------------------------------------------------------- WF107
def test_wf107_fires_on_runtime_division_per_element(source_only: HintsReport) -> None:
    (f,) = found(source_only, "d_fire_flat", "WF107")
    assert f.line == _line(FIXTURE, "int r = idx / cols;")
    assert f.evidence["expressions"] == ["idx / cols", "idx % cols"]
    assert f.evidence["divisor"] == "cols" and f.evidence["divisor_value"] == 1000
    assert f.related and f.related[0][0].start.line + 1 == _line(FIXTURE, "int c = idx % cols;")
    (g,) = found(source_only, "d_fire_loop", "WF107")
    assert g.line == _line(FIXTURE, "j % w", after="d_fire_loop")
    assert g.evidence["where"].startswith("loop at line")


@needs_nvcc
def test_wf107_sass_evidence(report: HintsReport) -> None:
    (f,) = found(report, "d_fire_flat", "WF107")
    assert f.evidence["sass_division_sequence"] is True  # I2F + MUFU.RCP: the division really is there
    assert f.evidence["sass_instructions_at_lines"] >= 10


@pytest.mark.parametrize("kernel", ["d_miss_const", "d_miss_setup"])
def test_wf107_silent_on_constant_divisors_and_setup(source_only: HintsReport, kernel: str) -> None:
    assert kernel in source_only.kernels
    assert found(source_only, kernel, "WF107") == []


# ----------------------------------------------------------------------------------------- WF108
@needs_nvcc
def test_wf108_fires_on_sass_confirmed_fp64(report: HintsReport) -> None:
    (f,) = found(report, "f_fire_literal", "WF108")
    assert f.line == _line(FIXTURE, "y[i] = v * 0.1 + 1.0;")
    assert "`0.1`" in f.message and "`1.0`" in f.message and "0.1f" in f.message
    assert f.evidence["fp64_instructions"] >= 2
    assert any(op.startswith("F2F.F64") for op in f.evidence["opcodes"])
    assert any(op.startswith(("DMUL", "DFMA", "DADD")) for op in f.evidence["opcodes"])
    by_line = {x.line: x for x in found(report, "f_fire_function", "WF108")}
    exp_line = _line(FIXTURE, "float e = exp(v * 2.0);")
    assert "`exp`" in by_line[exp_line].message and "expf" in by_line[exp_line].message
    assert "`SCALE`" in by_line[_line(FIXTURE, "float m = v * SCALE;")].message


@needs_nvcc
@pytest.mark.parametrize("kernel", ["f_miss_float", "f_miss_double", "f_miss_deliberate"])
def test_wf108_silent_on_float_math_double_kernels_and_deliberate_doubles(report: HintsReport, kernel: str) -> None:
    assert kernel in report.kernels
    assert found(report, kernel, "WF108") == []


def test_wf108_needs_sass(source_only: HintsReport) -> None:
    """`sqrt(v)` on a float is the float overload: only SASS can say a line really runs FP64."""
    assert [f for f in source_only.findings if f.code == "WF108"] == []


# ----------------------------------------------------------------------------------------- WF109
def test_wf109_fires_when_the_spec_overflows_a_32_bit_index(source_only: HintsReport) -> None:
    (f,) = found(source_only, "w_fire_tid", "WF109")
    assert f.severity is Severity.WARNING
    assert f.line == _line(FIXTURE, "int i = blockIdx.x * blockDim.x + threadIdx.x;", after="w_fire_tid")
    assert f.evidence["variable"] == "i" and f.evidence["type"] == "int"
    assert f.evidence["max_value"] == (3 << 30) - 1 and f.evidence["buffer_elements"] == 3 << 30
    (g,) = found(source_only, "w_fire_rows", "WF109")
    assert g.line == _line(FIXTURE, "A[r * cols + c]", after="w_fire_rows")
    assert g.evidence["expression"] == "r * cols + c"
    assert g.evidence["max_value"] == 65536 * 65536 - 1 and g.action == "index_width"


@pytest.mark.parametrize("kernel", ["w_miss_small", "w_miss_size_t"])
def test_wf109_silent_on_small_buffers_and_64_bit_indices(source_only: HintsReport, kernel: str) -> None:
    assert kernel in source_only.kernels
    assert found(source_only, kernel, "WF109") == []


# ----------------------------------------------------------------------------------------- WF110
def test_wf110_fires_on_single_address_and_histogram_atomics(source_only: HintsReport) -> None:
    (f,) = found(source_only, "a_fire_single", "WF110")
    assert f.line == _line(FIXTURE, "atomicAdd(out, x[i]);")
    assert f.evidence["atomics_per_launch"] == 1 << 20 and f.evidence["addresses"] == 1
    assert "single address `out`" in f.message and f.action == "atomics_privatize"
    (g,) = found(source_only, "a_fire_histogram", "WF110")
    assert g.evidence["targets"] == 256 and g.evidence["updates_per_target"] == (1 << 22) // 256
    assert g.evidence["shared_bytes_for_private_copy"] == 1024


@pytest.mark.parametrize("kernel", ["a_miss_block", "a_miss_early_return", "a_miss_private", "a_miss_scatter"])
def test_wf110_silent_on_block_aggregated_private_and_scattered_atomics(source_only: HintsReport,
                                                                        kernel: str) -> None:
    assert kernel in source_only.kernels
    assert found(source_only, kernel, "WF110") == []


@needs_nvcc
def test_wf110_sass_evidence(report: HintsReport) -> None:
    (f,) = found(report, "a_fire_single", "WF110")
    assert f.evidence["sass_global_atomics"] >= 1


# ----------------------------------------------------------------------------------------- bad input
BROKEN = f"""\
#include <cstdio>

// The user is in the middle of typing this host function.
void setup(float* d, int n)
{{
    printf("n = %d\\n", n;
}}

// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg out: inout float[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void broken_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        atomicAdd(out, x[i] * undefined_scale);
    }}
}}

// @warpforge size R = 1024
// @warpforge size C = 1000
// @warpforge arg x: in float[R*C]
// @warpforge arg y: out float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R*C, 256), block=256
__global__ void flat_transpose(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) return;
    int r = idx / cols;
    int c = idx % cols;
    y[c * rows + r] = x[idx];
}}

{SPEC_1D}__global__ void scale2(const float* __restrict__ x, float* __restrict__ y, int n)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}}
"""


@needs_nvcc
def test_compile_error_becomes_wf000_and_source_hints_survive(private_cache: Path) -> None:
    rep = analyze_source("broken.cu", BROKEN, arch="sm_90")
    errors = [f for f in rep.findings if f.code == "WF000"]
    assert errors and all(f.kernel == "broken_sum" for f in errors)
    assert {f.line for f in errors} == {_line(BROKEN, "undefined_scale")}
    assert any("undefined_scale" in f.message for f in errors)
    # The broken kernel still gets its source-pattern finding ...
    assert found(rep, "broken_sum", "WF110")
    # ... the other kernels keep theirs, SASS-confirmed ones included (they compiled without the broken one).
    assert found(rep, "flat_transpose", "WF107")
    assert found(rep, "scale2", "WF104")
    # The unparsable host function is a note, not a failure.
    assert any("syntax error" in n for n in rep.notes)


def test_missing_nvcc_is_one_wf002_finding() -> None:
    rep = analyze_source("broken.cu", BROKEN, nvcc="/nonexistent/nvcc")
    wf002 = [f for f in rep.findings if f.code == "WF002"]
    assert len(wf002) == 1
    assert "nvcc" in wf002[0].message and "/nonexistent/nvcc" in wf002[0].message
    assert wf002[0].severity is Severity.INFO
    assert not [f for f in rep.findings if f.code in ("WF000", "WF001", "WF104", "WF108")]
    assert found(rep, "broken_sum", "WF110") and found(rep, "flat_transpose", "WF107")


@needs_nvcc
def test_missing_nvdisasm_is_one_wf002_finding(monkeypatch: pytest.MonkeyPatch, private_cache: Path) -> None:
    def no_nvdisasm(cubin: bytes, nvdisasm: str | None = None, timeout: float = 60.0) -> dict[str, object]:
        raise ToolMissing("nvdisasm", "`pip install nvidia-cuda-nvdisasm`")

    monkeypatch.setattr(hints_mod, "disassemble", no_nvdisasm)
    source = BROKEN.replace("undefined_scale", "2.0f").replace("2.0f * x[i]", "3.0f * x[i]")
    rep = analyze_source("no_sass.cu", source, arch="sm_90")
    wf002 = [f for f in rep.findings if f.code == "WF002"]
    assert len(wf002) == 1 and "nvdisasm" in wf002[0].message and "SASS hints are off" in wf002[0].message
    assert not [f for f in rep.findings if f.code in ("WF000", "WF104", "WF108")]
    assert found(rep, "flat_transpose", "WF107")


def _large_source(target_bytes: int) -> str:
    """Generated code as generators write it: a big lookup table, then long unrolled kernels (distinct names).

    Three quarters of the bytes are the table (tree-sitter must get through it; no kernel uses it, so nvcc
    never sees it), the rest are kernels: the first 200 are compiled, the rest get source-pattern hints only.
    """
    values = ", ".join(f"{(j * 7919 % 10007) / 10007:.6f}f" for j in range(2000))
    table_rows = []
    size = 0
    while size < target_bytes * 3 // 4:
        row = f"    {values},\n"
        table_rows.append(row)
        size += len(row)
    parts = ["// generated: a lookup table and unrolled kernels, to check that hints stay bounded in time\n",
             "__device__ const float generated_table[] = {\n", *table_rows, "};\n\n"]
    unrolled = "".join(f"    acc = acc * {j}.25f + v * x[i + {j}];\n" for j in range(24))
    shapes = [
        "__global__ void big_ew_{i}(const float* __restrict__ x, float* __restrict__ y, int n)\n{{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    float v = x[i];\n"
        "    float acc = {i}.5f;\n" + unrolled + "    y[i] = acc;\n}}\n\n",
        "__global__ void big_red_{i}(const float* __restrict__ x, float* __restrict__ out, int n)\n{{\n"
        "    __shared__ float s[256];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    float v = i < n ? x[i] : 0.0f;\n    float acc = 0.0f;\n" + unrolled +
        "    s[threadIdx.x] = acc;\n    __syncthreads();\n"
        "    for (int k = 128; k > 0; k >>= 1) {{\n        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];\n"
        "        __syncthreads();\n    }}\n    if (threadIdx.x == 0) atomicAdd(out, s[0] * {i}.0f);\n}}\n\n",
        "__global__ void big_row_{i}(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)\n{{\n"
        "    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx >= rows * cols) return;\n"
        "    int r = idx / cols;\n    int c = idx % cols;\n    int i = idx;\n"
        "    float v = x[idx];\n    float acc = 0.0f;\n" + unrolled + "    y[c * rows + r] = acc + {i};\n}}\n\n",
    ]
    i = 0
    while size < target_bytes:
        part = shapes[i % len(shapes)].format(i=i)
        parts.append(part)
        size += len(part)
        i += 1
    return "".join(parts)


@needs_nvcc
def test_large_generated_file_completes(private_cache: Path) -> None:
    source = _large_source(2_000_000)
    t0 = time.perf_counter()
    rep = analyze_source("large.cu", source, arch="sm_90")
    dt = time.perf_counter() - t0
    print(f"\nlarge file: {len(source) / 1e6:.1f} MB, {len(rep.kernels)} kernels, {len(rep.findings)} findings, "
          f"{dt:.1f} s (compiled {rep.compiled} nvcc batch(es))")
    assert len(rep.kernels) > 200
    assert any("compiler and SASS hints cover the first" in n for n in rep.notes)
    assert not [f for f in rep.findings if f.code == "WF000"]
    # Source-pattern hints reach the kernels beyond the compiled ones; SASS hints the compiled ones.
    assert any(f.code == "WF107" and f.kernel is not None and int(f.kernel.rsplit("_", 1)[1]) >= 200
               for f in rep.findings)
    assert rep.compiled >= 1 and not [f for f in rep.findings if f.code == "WF002"]
    assert os.environ.get("WARPFORGE_CACHE") == str(private_cache)
