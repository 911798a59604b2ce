"""policy.ir.lower end to end on text: the real preprocessor (nvcc -E) with its line-for-line map, and the
IR summary (parallel index space, serial loops, affine accesses, accumulators, element types) of kernels
written in every thread-mapping style."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_nvcc
from warpforge.policy.ir import Declined, Lowered, describe, lower
from warpforge.policy.ir.preprocess import expand


def low(text: str, kernel: str = "k", **kw: object) -> Lowered:
    got = lower(text, kernel, **kw)  # type: ignore[arg-type]
    assert isinstance(got, Lowered), got
    return got


# ------------------------------------------------------------------------------------------ preprocessor

@needs_nvcc
def test_expansion_keeps_the_users_lines_one_for_one(tmp_path: Path) -> None:
    (tmp_path / "defs.cuh").write_text("#define SQ(v) ((v) * (v))\n")
    src = ('#include "defs.cuh"\n#include <cassert>\n#define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + '
           'threadIdx.x; \\\n    i < (n); i += blockDim.x * gridDim.x)\n'
           "__global__ __launch_bounds__(256) void k(float* y, int n) {\n"
           "  LOOP(i,\n       n) {\n    y[i] = SQ(y[i]);\n  }\n  assert(n > 0); y[0] = INFINITY;\n}\n")
    (tmp_path / "k.cu").write_text(src)
    ex = expand(src, path=str(tmp_path / "k.cu"))
    lines = ex.text.split("\n")
    assert len(lines) == len(src.split("\n"))
    assert lines[4] == "__global__ __launch_bounds__(256) void k(float* y, int n) {"  # qualifiers as written
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)" in lines[5]
    assert lines[6].strip() == "{"  # the macro call's second line: what followed the call
    assert "y[i] = ((y[i]) * (y[i]));" in lines[7]  # a macro from the project's header
    assert lines[9] == "  assert(n > 0); y[0] = INFINITY;"  # system macros stay as written
    assert {"LOOP", "SQ"} <= ex.user_macros and "INFINITY" not in ex.user_macros


@needs_nvcc
def test_build_defines_include_folders_and_kept_tunables(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "elem.h").write_text("#define ELEM float\n")
    src = ('#include "elem.h"\n#ifndef TILE\n#define TILE 32\n#endif\n'
           "__global__ void k(ELEM* y) { y[threadIdx.x] = SCALE * TILE; }\n")
    ex = expand(src, path=str(tmp_path / "k.cu"), defines=[("SCALE", "2")], include_dirs=[str(inc)], keep=["TILE"])
    assert ex.text.split("\n")[4] == "__global__ void k(float* y) { y[threadIdx.x] = 2 * TILE; }"


@needs_nvcc
def test_preprocessor_error_declines_at_the_users_line(tmp_path: Path) -> None:
    src = "__global__ void k(float* y) {\n  y[0] = 1;\n}\n#error this build needs a define\n"
    got = lower(src, "k", path=str(tmp_path / "k.cu"))
    assert isinstance(got, Declined) and "this build needs a define" in got.reason and got.line == 4
    assert "warpforge-pp" not in got.reason  # no temporary path in what the user reads


@needs_nvcc
def test_a_missing_header_is_read_as_empty_and_the_files_macros_still_expand(tmp_path: Path) -> None:
    src = ('#include "generated/proto.pb.h"\n#include <cublas_not_here.h>\n#define TWICE(v) (2 * (v))\n'
           "__global__ void k(float* y) { y[0] = TWICE(y[0]); }\n")
    ex = expand(src, path=str(tmp_path / "k.cu"))
    assert ex.stubbed == ("generated/proto.pb.h", "cublas_not_here.h")
    assert ex.text.split("\n")[3] == "__global__ void k(float* y) { y[0] = (2 * (y[0])); }"


@needs_nvcc
def test_typedefs_and_helpers_of_the_projects_headers_are_known(tmp_path: Path) -> None:
    (tmp_path / "common.h").write_text("#ifdef USE_HALF\ntypedef __half elem;\n#else\ntypedef float elem;\n#endif\n"
                                       "__device__ float sq(float v) { return v * v; }\n")
    src = '#include "common.h"\n__global__ void k(elem* y) { y[threadIdx.x] = sq(y[threadIdx.x]); }\n'
    got = low(src, path=str(tmp_path / "k.cu"))
    assert got.text.startswith("__global__ void k(float* y)") and "sq(" not in got.text


def test_an_unknown_kernel_declines() -> None:
    got = lower("__global__ void k(float* y) { y[0] = 1; }\n", "nope", preprocess=False)
    assert isinstance(got, Declined) and "nope" in got.reason


@needs_nvcc
def test_lowering_a_candidate_definition_in_its_file(tmp_path: Path) -> None:
    src = ("#define N_ITEMS(n) ((n) / 4)\n__global__ void k(float* y, int n) {\n  y[0] = 1;\n}\n"
           "int main() { return 0; }\n")
    cand = "__global__ void k(float* y, int n) {\n  int i = threadIdx.x;\n  if (i < N_ITEMS(n)) y[i] = 2;\n}"
    got = low(src, path=str(tmp_path / "k.cu"), definition=cand)
    assert got.original == cand and got.preprocessed
    assert "if (i < ((n) / 4)) y[i] = 2;" in got.text and "main" not in got.text


# ------------------------------------------------------------------------------------------ summary

def summary(body: str, params: str = "float* y, const float* x, int n, int m") -> str:
    return describe(low(f"__global__ void k({params}) {{\n{body}\n}}\n", preprocess=False).summary)


@pytest.mark.parametrize("body,want", [
    # 1-D with a guard, an early exit, a grid-stride for and while
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i];",
     "parallel i = blockDim.x*blockIdx.x + threadIdx.x [guard: (i < n)]"),
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) { y[i] = x[i]; }",
     "parallel i = blockDim.x*blockIdx.x + threadIdx.x [exit: (i >= n)]"),
    ("  int i = threadIdx.x + blockIdx.x * blockDim.x;\n  if (i >= n) return;\n  y[i] = x[i];",
     "parallel i = blockDim.x*blockIdx.x + threadIdx.x [exit: (i >= n)]"),
    ("  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i];",
     "parallel i = blockDim.x*blockIdx.x + threadIdx.x [grid-stride: i < n]"),
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  while (i < n) { y[i] = x[i]; i += blockDim.x * gridDim.x; }",
     "parallel i = blockDim.x*blockIdx.x + threadIdx.x [grid-stride: i < n]"),
    # 2-D and a 2-D grid flattened by hand
    ("  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
     "  if (r < n && c < m) y[r * m + c] = x[r * m + c];",
     "write y[blockDim.x*blockIdx.x + blockDim.y*m*blockIdx.y + threadIdx.x + m*threadIdx.y]"),
    ("  int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i];",
     "parallel i = blockDim.x*blockIdx.x + blockDim.x*gridDim.x*blockIdx.y + threadIdx.x"),
    # 3-D
    ("  int z = blockIdx.z * blockDim.z + threadIdx.z;\n  y[z * n * m + threadIdx.x] = 0;",
     "write y[blockDim.z*m*n*blockIdx.z + threadIdx.x + m*n*threadIdx.z]"),
    # block per row with a thread-stride loop
    ("  int row = blockIdx.x;\n  for (int c = threadIdx.x; c < m; c += blockDim.x) y[row * m + c] = x[row * m + c];",
     "parallel c = threadIdx.x [thread-stride: c < m]"),
])
def test_thread_mappings_are_one_parallel_index_space(body: str, want: str) -> None:
    assert want in summary(body)


def test_loops_accesses_accumulators_and_their_indices() -> None:
    s = summary("  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r >= n) return;\n  float acc = 0.0f;\n"
                "  float mx = -1e30f;\n  for (int j = 0; j < m; j += 2) {\n    acc += x[r * m + j];\n"
                "    mx = fmaxf(mx, x[(r * m + j) << 1]);\n  }\n  y[r] = acc + mx + x[(int)x[r]] + x[r / 2];")
    assert "loop j from 0 < m step 2" in s
    assert "read x[m*blockDim.x*blockIdx.x + j + m*threadIdx.x]" in s.replace("blockDim.x*m", "m*blockDim.x")
    assert "read x[2*m*blockDim.x*blockIdx.x + 2*j + 2*m*threadIdx.x]" in s.replace("2*blockDim.x*m",
                                                                                       "2*m*blockDim.x")
    assert "non-affine: `x[r]`: an index read from memory (a gather)" in s
    assert "non-affine: `r / 2`: `/` of a thread or loop index" in s
    assert "accumulator acc (float) += over j" in s and "accumulator mx (float) fmaxf over j" in s


def test_element_types_by_size_and_lanes() -> None:
    s = summary("  y[threadIdx.x] = y[threadIdx.x];",
                "__half* y, const __half2* a, const __nv_bfloat16* b, const double* c, const float4* d, const T* e")
    assert "element y: __half (2 B, 1 lane(s)) written" in s
    assert "element a: __half2 (4 B, 2 lane(s))" in s and "element b: __nv_bfloat16 (2 B, 1 lane(s))" in s
    assert "element c: double (8 B, 1 lane(s))" in s and "element d: float4 (16 B, 4 lane(s))" in s
    assert "element e: T (0 B, 0 lane(s))" in s  # unknown without the spec's instantiation


def test_summary_notes_what_a_remap_must_respect() -> None:
    s = summary("  __shared__ float t[32];\n  t[threadIdx.x] = x[threadIdx.x];\n  __syncthreads();\n"
                "  atomicAdd(&y[0], t[0]);")
    assert "uses shared memory, barriers, atomics" in s


def test_an_index_decomposed_in_place_is_non_affine_with_its_reason() -> None:
    s = summary("  int id = blockIdx.x * blockDim.x + threadIdx.x;\n  int c = id % m;\n  id /= m;\n"
                "  y[id * m + c] = x[c];")
    assert "non-affine: `id` is written after its declaration" in s


@needs_nvcc
@pytest.mark.parametrize("device", ["/dev/stdin", "/dev/zero", "/proc/self/environ"])
def test_a_device_include_is_refused_before_the_preprocessor_runs(tmp_path: Path, device: str) -> None:
    """The analysis runs nvcc -E on the user's file too: the include check that guards every build guards it
    (an include of /dev/stdin would read the language server's own pipe, /dev/zero never ends)."""
    src = f'#define F 2.0f\n#include "{device}"\n__global__ void k(float* y) {{ y[0] = F; }}\n'
    (tmp_path / "k.cu").write_text(src)
    got = lower(src, "k", path=str(tmp_path / "k.cu"))
    assert isinstance(got, Declined) and got.line == 2 and device in got.reason, got
