"""vectorize on element types, templates and loop forms the 32-bit-only version declined (issue 16, item 3).

What is checked on CPU: the analysis (which buffers are elementwise, which are read-only gathers, which
widths fit 16 bytes), and what nvcc makes of the rewrite: the local aligned vector struct must become one
``ld/st.global.v*`` per buffer and stay in registers (no local memory), for fp16, fp64 and a template.
The GPU check that the variants compute what the originals compute is ``tests/test_rules_gpu.py``
(``residual_add_scale_fp16``, ``sgd_momentum_gridstride``, ``clip_grad_scale_double``,
``swiglu_fwd_template``).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import NVCC, needs_nvcc
from test_rules_structural import child, text_policy, variants
from warpforge.cuda.extract import instantiation
from warpforge.policy.offline import OfflinePolicy

HALF = """\
#include <cuda_fp16.h>
// @warpforge size N = 1 << 20
// @warpforge arg x: in half[N]
// @warpforge arg y: inout half[N]
// @warpforge arg scale: in float[4]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 128), block=128
__global__ void k(const __half* x, __half* y, const float* scale, unsigned n)
{
    const float s = scale[0];
    for (unsigned e = threadIdx.x + blockIdx.x * blockDim.x; e < n; e += gridDim.x * blockDim.x) {
        float v = __half2float(x[e]) * s;
        if (v > 0.f) y[e] = __float2half(v + __half2float(y[e]));
    }
}
"""

TEMPLATE = """\
// @warpforge size N = 1 << 20
// @warpforge template T = {t}
// @warpforge arg a: in {t}[N]
// @warpforge arg b: out {t}[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
template <typename T>
__global__ void k(const T* a, T* b, long n)
{{
    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q < n) b[q] = a[q] * (T)2;
}}
"""

DOUBLE = """\
// @warpforge size N = 1 << 20
// @warpforge arg p: inout double[N]
// @warpforge arg g: in double[N]
// @warpforge arg n = N
// @warpforge launch grid=min(cdiv(N, 256), 1024), block=256
__global__ void k(double* p, const double* g, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] -= 0.1 * g[i];
}
"""


def _ptx(pol: OfflinePolicy, definition: str, template_args: tuple[str, ...] = ()) -> str:
    """The PTX nvcc makes of a candidate definition (with the fixture's includes)."""
    assert NVCC is not None
    head = "#include <cuda_fp16.h>\n" if "__half" in definition else ""
    tail = "\n" + instantiation(pol.kernel, template_args) + "\n" if template_args else ""
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "k.cu", Path(d) / "k.ptx"
        src.write_text(head + definition + tail)
        subprocess.run([NVCC, "-arch=sm_90", "-ptx", "-o", str(out), str(src)], check=True, capture_output=True)
        return out.read_text()


def test_half_grid_stride_with_a_broadcast_read() -> None:
    pol = text_policy(HALF, "k")
    # y is written only at [e] (conditionally: loaded first), x read at [e], scale only read: a broadcast
    assert variants(pol, "vectorize") == ["x8", "x4"]
    d = child(pol, "vectorize", "x8").definition
    assert "struct alignas(sizeof(__half) * 8) wfv_v_y { __half e[8]; };" in d
    assert "wfv_v_y wfv_y = reinterpret_cast<wfv_v_y*>(y)[wfv_vi];" in d
    assert "scale[0]" in d and "wfv_v_scale" not in d  # the broadcast buffer stays as written


@needs_nvcc
def test_vector_structs_become_vector_instructions() -> None:
    """One 128-bit access per buffer and no local memory: the struct is moved in registers."""
    pol = text_policy(HALF, "k")
    ptx = _ptx(pol, child(pol, "vectorize", "x8").definition)
    assert len(re.findall(r"ld\.global\.(?:nc\.)?v4\.u32", ptx)) == 2
    assert len(re.findall(r"st\.global\.v4\.u32", ptx)) == 1
    assert ".local" not in ptx
    pd = text_policy(DOUBLE, "k")
    assert variants(pd, "vectorize") == ["x2"]  # 16 bytes: two doubles
    ptx = _ptx(pd, child(pd, "vectorize", "x2").definition)
    assert re.search(r"ld\.global\.(?:nc\.)?v2\.f64", ptx) and re.search(r"st\.global\.v2\.f64", ptx)
    assert ".local" not in ptx


@pytest.mark.parametrize("t,want", [("float", ["x4", "x2"]), ("half", ["x8", "x4"]), ("double", ["x2"])])
def test_template_widths_follow_the_instantiation(t: str, want: list[str]) -> None:
    pol = text_policy(TEMPLATE.format(t=t), "k")
    assert variants(pol, "vectorize") == want
    d = child(pol, "vectorize", want[0]).definition
    # the vector type is written in the template's own parameter: exact for any other instantiation too
    assert f"struct alignas(sizeof(T) * {want[0][1:]}) wfv_v_b {{ T e[{want[0][1:]}]; }};" in d


@needs_nvcc
def test_template_rewrite_builds_for_other_instantiations() -> None:
    pol = text_policy(TEMPLATE.format(t="float"), "k")
    d = child(pol, "vectorize", "x4").definition
    for args in (("float",), ("double",), ("int",)):
        ptx = _ptx(pol, d, args)
        assert "st.global.v" in ptx and ".local" not in ptx


@pytest.mark.parametrize("body", [
    # in place with a shifted read: element i+1 belongs to another thread
    "    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (q < n - 1) b[q] = b[q + 1] + a[q];",
    # a dependence across elements through the written buffer (a running value)
    "    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (q < n) b[q] = a[q] + (q > 0 ? b[q - 1] : 0.f);",
    # a written buffer passed on as a pointer: what the callee touches is unknown
    "    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (q < n) b[q] = a[q] + *(b + 1);",
    # a bound that is not uniform across threads (it reads the block index)
    "    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (q < n - blockIdx.x) b[q] = a[q];",
])
def test_declines_on_near_misses(body: str) -> None:
    assert variants(text_policy(_near(body), "k"), "vectorize") == []


def test_the_same_shift_of_a_read_only_buffer_is_fine() -> None:
    body = "    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (q < n - 1) b[q] = a[q + 1] + a[q];"
    assert variants(text_policy(_near(body), "k"), "vectorize") == ["x4", "x2"]


def _near(body: str) -> str:
    return ("// @warpforge size N = 1 << 20\n// @warpforge arg a: in float[N]\n// @warpforge arg b: inout float[N]\n"
            "// @warpforge arg n = N\n// @warpforge launch grid=cdiv(N, 256), block=256\n"
            f"__global__ void k(const float* a, float* b, long n)\n{{\n{body}\n}}\n")


@pytest.mark.parametrize("body,want", [
    # a read-only view at a per-element offset (a plane of the input): reads only, so a gather
    ("    for (long q = blockIdx.x * (long)blockDim.x + threadIdx.x; q < n; q += (long)blockDim.x * gridDim.x) {\n"
     "        const float* row = a + (q / 64) * 64;\n        b[q] = row[63 - q % 64];\n    }", ["x4", "x2"]),
    # a view written through: another thread's elements
    ("    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (q < n) { float* o = b + 1; o[q] = a[q]; }", []),
    # a read-only-looking view of the written buffer: b read at another index
    ("    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (q < n) { const float* r = b + 1; b[q] = a[q] + r[q]; }", []),
    # a view re-pointed after its declaration
    ("    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (q < n) { const float* r = a; r += 4; b[q] = r[q]; }", []),
])
def test_views_of_buffers(body: str, want: list[str]) -> None:
    assert variants(text_policy(_near(body), "k"), "vectorize") == want


@pytest.mark.parametrize("loop,want", [
    # a window of literal size: elementwise work
    ("for (int t = 0; t < 3; ++t) s += a[q * 3 + t];", ["x4", "x2"]),
    # a walk of a run-time length (a row reduction per output): warp_per_row's, not vectorize's
    ("for (long t = 0; t < n; ++t) s += a[q * n + t];", []),
    ("int t = 0; while (t < 3) { s += a[q + t]; ++t; }", []),
])
def test_serial_walks_are_left_to_the_row_rules(loop: str, want: list[str]) -> None:
    body = ("    long q = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (q < n) {{ float s = 0.f; {loop} b[q] = s; }}")
    assert variants(text_policy(_near(body), "k"), "vectorize") == want


#: an element bound to a reference and written through it (`unsigned& hit = marks[v];`), as graph kernels mark
#: edges; `const unsigned& key` is a read
REFERENCE = """\
// @warpforge size N = 1 << 20
// @warpforge arg keys: in uint32[N] int(0, 8)
// @warpforge arg marks: inout uint32[N] int(0, 8)
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const unsigned* keys, unsigned* marks, unsigned n)
{
    unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) {
        const unsigned& key = keys[v];
        unsigned& hit = marks[v];
        if (key == hit) hit = 0xffffffffu;
    }
}
"""


@needs_nvcc
def test_an_element_written_through_a_reference_is_written() -> None:
    """``T& r = p[i];`` writes ``p`` through ``r``: the vector copy is mutable and stored back (taken as a read,
    the copy was const and nvcc refused the binding, "qualifiers dropped in binding reference", on a cuda-samples
    kernel; a copy that compiled would have lost the writes). ``const T&`` stays a read."""
    pol = text_policy(REFERENCE, "k")
    assert variants(pol, "vectorize") == ["x4", "x2"]
    d = child(pol, "vectorize", "x4").definition
    assert "wfv_v_marks wfv_marks = reinterpret_cast<wfv_v_marks*>(marks)[wfv_vi];" in d
    assert "reinterpret_cast<wfv_v_marks*>(marks)[wfv_vi] = wfv_marks;" in d
    assert "const wfv_v_keys wfv_keys = reinterpret_cast<const wfv_v_keys*>(keys)[wfv_vi];" in d
    ptx = _ptx(pol, d)
    assert re.search(r"st\.global\.v4\.u32", ptx) and ".local" not in ptx
    # a reference to another thread's element: it may write there
    other = REFERENCE.replace("unsigned& hit = marks[v];", "unsigned& hit = marks[v ^ 1];")
    assert variants(text_policy(other, "k"), "vectorize") == []
