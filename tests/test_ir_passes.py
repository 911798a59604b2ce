"""The IR's lowering passes (policy.ir), one by one, without the preprocessor: each rewrites the spelling it
owns into the one the rules read, and leaves the code alone (with a reason where its shape was there) when
its precondition does not hold. Whether the rewritten kernels still build is checked with nvcc in
test_ir_rules.py; the summary in test_ir_lower.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import NVCC
from warpforge.policy.ir import Lowered, lower


def low(text: str, kernel: str = "k", **kw: object) -> Lowered:
    got = lower(text, kernel, preprocess=False, **kw)  # type: ignore[arg-type]
    assert isinstance(got, Lowered), got
    return got


def squash(s: str) -> str:
    return " ".join(s.split())


def test_loop_variable_declared_before_the_for_moves_into_it() -> None:
    got = low("__global__ void k(float* y, int n) {\n  int i, j;\n  i = threadIdx.x;\n"
              "  for (j = 0; j < n; j++) y[i] += 1.0f;\n  for (j = 1; j < n; j += 2) y[i] -= 1.0f;\n}\n")
    t = squash(got.text)
    assert "int i;" in t and "for (int j = 0; j < n; j++)" in t and "for (int j = 1; j < n; j += 2)" in t
    assert any(a.startswith("hoisted_loop_variable") for a in got.applied)


@pytest.mark.parametrize("body", [
    # read after the loop: its final value matters
    "  int j;\n  for (j = 0; j < n; j++) y[j] = 0.0f;\n  y[0] = j;\n",
    # a loop that does not assign it first
    "  int j = 0;\n  for (; j < n; j++) y[j] = 0.0f;\n",
])
def test_loop_variable_whose_value_flows_out_stays(body: str) -> None:
    text = f"__global__ void k(float* y, int n) {{\n{body}}}\n"
    assert not any(a.startswith("hoisted_loop_variable") for a in low(text).applied)


def test_while_grid_stride_loop_becomes_a_for() -> None:
    got = low("__global__ void k(float* y, const float* x, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  while (i < n) {\n    y[i] = x[i];\n    i += blockDim.x * gridDim.x;\n  }\n}\n")
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)" in got.text


def test_while_with_continue_is_declined_with_its_reason() -> None:
    got = low("__global__ void k(float* y, int n) {\n  int i = threadIdx.x;\n"
              "  while (i < n) {\n    if (y[i] > 0) { i += 32; continue; }\n    y[i] = 0;\n    i += 32;\n  }\n}\n")
    assert "while" in got.text
    assert any(p == "while_to_for" and "continue" in why for p, why, _ in got.skipped)


def test_bumped_index_becomes_affine_in_the_counter() -> None:
    got = low("__global__ void k(float* out, const float* in, int C, int plane) {\n"
              "  int p = blockIdx.x * blockDim.x + threadIdx.x;\n  int c = p;\n  float s = 0.0f;\n"
              "  for (int k = 0; k < C; k++) {\n    s += in[c];\n    c += plane;\n  }\n  out[p] = s;\n}\n")
    assert "s += in[(p + (k) * (plane))];" in got.text and "+= plane" not in got.text


def test_walked_pointer_becomes_an_index() -> None:
    got = low("__global__ void k(float* out, const float* in, int C, int plane) {\n"
              "  int p = blockIdx.x * blockDim.x + threadIdx.x;\n  const float* q = in + p;\n  float s = 0.0f;\n"
              "  for (int k = 0; k < C; k++) {\n    s += *q;\n    q += plane;\n  }\n  out[p] = s;\n}\n")
    assert "s += q[(k) * (plane)];" in got.text


@pytest.mark.parametrize("loop,why", [
    ("for (int k = 0; k < C; k++) { s += in[c]; c += plane; }\n  out[c] = s;", "used after"),
    ("for (int k = 0; k < C; k++) { s += in[c]; if (s > 0) c += 1; c += plane; }\n  out[p] = s;", "written"),
])
def test_bumped_index_declines(loop: str, why: str) -> None:
    got = low("__global__ void k(float* out, const float* in, int C, int plane) {\n"
              f"  int p = blockIdx.x * blockDim.x + threadIdx.x;\n  int c = p * 2;\n  float s = 0.0f;\n  {loop}\n}}\n")
    assert "+= plane" in got.text
    assert any(p == "induction_variable" and why in w for p, w, _ in got.skipped), got.skipped


def test_expression_device_function_is_inlined_with_its_types() -> None:
    got = low("__device__ float mul(float a, int b) { return a * b; }\n"
              "__global__ void k(float* y, const float* x, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = mul(x[i], n);\n}\n")
    assert "((float)(((float)(x[i])) * ((int)(n))))" in got.text


def test_statement_device_function_with_a_loop_is_inlined_flat() -> None:
    got = low("__device__ float dot(const float* a, const float* b, int n) {\n"
              "  float s = 0.0f;\n  for (int j = 0; j < n; j++) s += a[j] * b[j];\n  return s;\n}\n"
              "__global__ void k(float* y, const float* A, const float* x, int rows, int cols) {\n"
              "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (r < rows) {\n    float v = dot(A + r * cols, x, cols);\n    y[r] = v;\n  }\n}\n")
    t = squash(got.text)
    assert "const float* dot_a = A + r * cols;" in t
    assert "for (int j = 0; j < cols; j++) s += dot_a[j] * x[j];" in t and "v = ((float)(s));" in t
    assert "{ const float* dot_a" not in t  # flat: no name could clash


def test_reference_parameter_stands_for_its_argument() -> None:
    got = low("__device__ void acc(float& s, float v) { s += v * v; }\n"
              "__global__ void k(float* y, const float* x, int n) {\n  float s = 0.0f;\n"
              "  for (int j = 0; j < n; j++) acc(s, x[j]);\n  y[0] = s;\n}\n")
    assert "(s) += acc_v * acc_v;" in got.text


def test_functor_call_is_inlined() -> None:
    got = low("struct Relu { __device__ float operator()(float v) const { return v > 0.0f ? v : 0.0f; } };\n"
              "__global__ void k(float* y, const float* x, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) { y[i] = Relu()(x[i]); }\n}\n")
    assert "Relu" not in got.text.split("__global__")[1] and "> 0.0f ?" in got.text


@pytest.mark.parametrize("helper,call,why", [
    ("__device__ float f(float v) { if (v > 0) return v; return -v; }", "y[i] = 2.0f * f(x[i]);", "return"),
    ("__device__ float f(float v) { return v > 0 ? v : f(-v); }", "y[i] = f(x[i]);", "recursive"),
    ("__device__ float g = 2.0f;\n__device__ float f(float v) { return v * g; }",
     "float g = 1.0f; y[i] = f(x[i]) + g;", "means something else"),
    ("template <typename T> __device__ T f(T v) { return v * v; }", "y[i] = f(x[i]);", "template"),
])
def test_calls_that_cannot_be_inlined_exactly_stay(helper: str, call: str, why: str) -> None:
    got = low(f"{helper}\n__global__ void k(float* y, const float* x, int n) {{\n"
              f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{ {call} }}\n}}\n")
    assert "f(" in got.text.split("__global__")[1]
    assert any(p == "inline_calls" and why in w for p, w, _ in got.skipped), got.skipped


def test_an_argument_with_side_effects_used_twice_is_evaluated_once() -> None:
    got = low("__device__ float sq(float v) { return v * v; }\n"
              "__global__ void k(float* y, float* x, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = sq(atomicAdd(&x[i], 1.0f));\n}\n")
    t = squash(got.text)
    assert t.count("atomicAdd") == 1 and "float sq_v = atomicAdd(&x[i], 1.0f); y[i] = ((float)(sq_v * sq_v));" in t


def test_global_accumulator_becomes_a_register() -> None:
    got = low("__global__ void k(float* y, const float* A, const float* x, int n, int m) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    y[i] = 0.0f;\n"
              "    for (int j = 0; j < m; j++) y[i] += A[i * m + j] * x[j];\n  }\n}\n")
    t = squash(got.text)
    assert "float y_acc = 0.0f;" in t and "y_acc += A[i * m + j] * x[j];" in t and t.count("y[i] = y_acc;") == 1
    assert "y[i] = 0.0f" not in t


@pytest.mark.parametrize("body,why", [
    # the same element for every thread: threads would race on it in the original too, but not the same way
    ("y[0] = 0.0f;\n  for (int j = 0; j < m; j++) y[0] += x[j];", "does not depend on the thread"),
    # written at another index as well
    ("y[i] = 0.0f;\n  for (int j = 0; j < m; j++) y[i] += x[j];\n  y[i + 1] = 1.0f;", "another index"),
    # the index changes in the loop
    ("for (int j = 0; j < m; j++) { y[i] += x[j]; i += 1; }", "changes inside the loop"),
    # an exit inside the loop would skip the store after it
    ("for (int j = 0; j < m; j++) { y[i] += x[j]; if (x[j] < 0) return; }", "`return` inside the loop"),
])
def test_global_accumulator_declines(body: str, why: str) -> None:
    got = low("__global__ void k(float* y, const float* x, int m) {\n"
              f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  {body}\n}}\n")
    assert "_acc" not in got.text
    assert any(p == "register_accumulator" and why in w for p, w, _ in got.skipped), got.skipped


def test_global_accumulator_loop_under_an_if_without_braces_is_left() -> None:
    got = low("__global__ void k(float* y, const float* x, int m) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (m > 0) for (int j = 0; j < m; j++) y[i] += x[j];\n}\n")
    assert "_acc" not in got.text


def test_multi_term_view_offset_is_one_term() -> None:
    got = low("__global__ void k(float* out, const float* inp, int T, int C) {\n"
              "  int b = blockIdx.y, t = threadIdx.x;\n  const float* x = inp + b * T * C + t * C;\n"
              "  out[b * T + t] = x[0];\n}\n")
    assert "const float* x = inp + (b * T * C + t * C);" in got.text


def test_typedefs_in_the_signature_and_template_arguments_in_the_body() -> None:
    text = ("typedef float real;\n"
            "template <typename T, int B>\n__global__ void k(real* y, const T* x) {\n"
            "  T v = x[threadIdx.x];\n  for (int j = 0; j < B; j++) v += x[j];\n  y[threadIdx.x] = v;\n}\n")
    from warpforge.spec.resolve import load_spec
    spec_text = text.replace("template <", "// @warpforge size N = 1024\n// @warpforge arg y: out float[N]\n"
                                           "// @warpforge arg x: in float[N]\n// @warpforge template float, 8\n"
                                           "// @warpforge launch grid=1, block=256\ntemplate <", 1)
    got = low(spec_text, spec=load_spec("f.cu", "k", text=spec_text))
    t = squash(got.text)
    assert t.startswith("template <typename T, int B> __global__ void k(float* y, const T* x)")
    assert "float v = x[threadIdx.x];" in t and "j < 8" in t


def test_flattened_2d_index_on_a_1d_grid_is_the_1d_index() -> None:
    text = ("__global__ void k(float* y, int n) {\n"
            "  int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 1;\n}\n")
    assert "int i = blockIdx.x * blockDim.x + threadIdx.x;" in low(text, grid=("cdiv(N, 256)",)).text
    # on a 2-D grid it is not
    assert "blockIdx.y" in low(text, grid=("64", "64")).text
    # a 64-bit index keeps the width of its arithmetic
    wide = text.replace("int i = (blockIdx.y", "size_t i = ((size_t)blockIdx.y")
    assert "size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;" in low(wide, grid=("N",)).text
    narrow = text.replace("int i =", "size_t i =")
    assert "size_t i = blockIdx.x * blockDim.x + threadIdx.x;" in low(narrow, grid=("N",)).text


def test_copy_of_an_index_is_propagated() -> None:
    got = low("__global__ void k(float* y, const float* A, int rows, int cols) {\n"
              "  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int at = c;\n  y[at] = A[at];\n}\n")
    assert "y[c] = A[c];" in got.text and "int at" not in got.text


def test_grid_stride_loop_through_locals_is_spelled_in_its_header() -> None:
    """NVIDIA's blog spelling: start and step in locals, which then go."""
    got = low("__global__ void k(int n, const float* x, float* y) {\n"
              "  int index = blockIdx.x * blockDim.x + threadIdx.x;\n  int stride = blockDim.x * gridDim.x;\n"
              "  for (int i = index; i < n; i += stride)\n    y[i] = x[i] + y[i];\n}\n")
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)" in got.text
    assert "index" not in got.text and "stride" not in got.text
    assert any(a.startswith("grid_stride_loop") for a in got.applied)


def test_grid_stride_loop_with_a_wide_counter_and_the_product_turned() -> None:
    got = low("__global__ void k(float* y, size_t n) {\n  const unsigned tid = threadIdx.x + blockDim.x * blockIdx.x;\n"
              "  const unsigned threadN = gridDim.x * blockDim.x;\n"
              "  for (size_t pos = tid; pos < n; pos += threadN) y[pos] = 1.0f;\n}\n")
    assert "for (size_t pos = (size_t)blockIdx.x * blockDim.x + threadIdx.x; pos < n; pos += blockDim.x * gridDim.x)" \
        in got.text


@pytest.mark.parametrize("body", [
    # four elements per step: not the grid's thread count
    "  int index = blockIdx.x * blockDim.x + threadIdx.x;\n  int stride = 4 * blockDim.x * gridDim.x;\n"
    "  for (int i = index; i < n; i += stride) y[i] = 0.0f;\n",
    # the counter also moves in the body
    "  int index = blockIdx.x * blockDim.x + threadIdx.x;\n  int stride = blockDim.x * gridDim.x;\n"
    "  for (int i = index; i < n; i += stride) { y[i] = 0.0f; if (y[0] > 1.0f) i += 1; }\n",
    # the start is the thread within its block only
    "  int stride = blockDim.x * gridDim.x;\n  for (int i = threadIdx.x; i < n; i += stride) y[i] = 0.0f;\n",
])
def test_loops_that_are_not_grid_stride_keep_their_header(body: str) -> None:
    got = low(f"__global__ void k(float* y, int n) {{\n{body}}}\n")
    assert not any(a.startswith("grid_stride_loop") for a in got.applied)
    assert "i += stride" in got.text and "int stride" in got.text


def test_dead_locals_keep_what_is_read_or_has_an_effect() -> None:
    got = low("__global__ void k(float* y, int* c, int n) {\n  int unused = n * 2;\n  int old = atomicAdd(c, 1);\n"
              "  int i = threadIdx.x;\n  y[i] = 0.0f;\n}\n")
    assert "unused" not in got.text
    assert "int old = atomicAdd(c, 1);" in got.text and "int i = threadIdx.x;" in got.text


GRID_HELPER = """\
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ void scale_add(const float* x, float* y, float a, int size, const cg::grid_group& grid) {
  for (int i = grid.thread_rank(); i < size; i += grid.size()) y[i] += a * x[i];
}
__device__ float first(const float2* v, int x) { return v[0].x * x; }
__global__ void k(const float* x, float* y, const float2* p, float* out, int N) {
  cg::grid_group grid = cg::this_grid();
  scale_add(x, y, 2.0f, N, grid);
  cg::sync(grid);
  if (grid.thread_rank() == 0) out[0] = first(p, N);
}
"""


def test_a_parameter_named_like_a_member_renames_only_the_parameter(tmp_path: Path) -> None:
    """Inlining renames a parameter ``size`` to its argument ``N`` but not the member ``grid.size()`` (renamed,
    nvcc said `class "grid_group" has no member "N"` for a cuda-samples conjugate-gradient kernel)."""
    got = low(GRID_HELPER)
    t = squash(got.text)
    assert "i < N; i += (grid).size()" in t and ".N()" not in t, t
    assert "((const float2*)(p))[0].x * ((int)(N))" in t  # an expression helper: the member `.x` stays too
    if NVCC is None:
        return
    unit = tmp_path / "k.cu"
    unit.write_text("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n" + got.text)
    r = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(unit)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
