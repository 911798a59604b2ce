"""The canonical form (cuda.normalize): each pass rewrites what it should, keeps what it must, and the
canonical text still compiles to the same kernel signature. The rules' use of it is tested through the
offline policy in test_rules_structural.py and the corpus applicability test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from warpforge.cuda.normalize import file_facts, normalize_definition


def canon(text: str, kernel: str = "k") -> str:
    at = text.index("__global__")
    return normalize_definition(text[at:], kernel, file_facts(text))


def squash(s: str) -> str:
    return " ".join(s.split())


def test_guarded_body_becomes_an_early_exit_with_the_negated_condition() -> None:
    out = canon("__global__ void k(float* y, int n, int m) {\n"
                "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                "    if (i < n && m > 0) {\n        float v = 2.0f;\n        y[i] = v;\n    }\n}\n")
    assert "if (i >= n || m <= 0) {" in out and "return;" in out
    assert "    float v = 2.0f;\n    y[i] = v;\n}" in out


def test_guard_is_kept_when_its_declarations_would_clash_with_the_enclosing_scope() -> None:
    src = ("__global__ void k(float* y, int n) {\n    float v = 1.0f;\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) { float v = 2.0f; y[i] = v; }\n}\n")
    assert "return" not in canon(src)


def test_guard_with_an_else_branch_is_not_touched() -> None:
    src = ("__global__ void k(float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) { y[i] = 1.0f; } else { }\n}\n")
    assert canon(src) == src[src.index("__global__"):]


def test_pointer_bump_becomes_a_pointer_local_and_later_uses_read_it() -> None:
    out = canon("__global__ void k(const float* x, float* y, int C) {\n"
                "    int row = blockIdx.x;\n    float a = x[0];\n    x += row * C;\n"
                "    y[row] = a + x[1];\n}\n")
    assert "const float* x_at = x + (row * C);" in out
    assert "float a = x[0];" in out  # a use before the bump keeps the parameter
    assert "y[row] = a + x_at[1];" in out


def test_a_pointer_bumped_twice_is_left_alone() -> None:
    src = "__global__ void k(float* x, int C) {\n    x += C;\n    x += C;\n    x[0] = 1.0f;\n}\n"
    assert canon(src) == src


def test_macros_and_typedefs_are_expanded_in_the_body_only() -> None:
    text = ("typedef float real_t;\ntypedef real_t acc_t;\n#define AT(r, c) ((r) * C + (c))\n"
            "__global__ void k(const real_t* x, real_t* y, int C) {\n"
            "    acc_t s = x[AT(blockIdx.x, 1)];\n    y[AT(blockIdx.x, 0)] = s;\n}\n")
    out = canon(text)
    assert out.startswith("__global__ void k(const real_t* x, real_t* y, int C)")  # signature as written
    assert "float s = x[((blockIdx.x) * C + (1))];" in out
    assert "y[((blockIdx.x) * C + (0))] = s;" in out


def test_macro_expansion_adds_no_parentheses_as_the_preprocessor_adds_none() -> None:
    text = "#define SQ(v) v * v\n__global__ void k(float* y) {\n    y[0] = 1.0f / SQ(2.0f);\n}\n"
    assert "y[0] = 1.0f / 2.0f * 2.0f;" in canon(text)


def test_statement_macros_are_not_expanded() -> None:
    text = ("#define SET(p, v) do { p[0] = v; } while (0)\n"
            "__global__ void k(float* y) {\n    SET(y, 1.0f);\n}\n")
    assert "SET(y, 1.0f)" in canon(text)


def test_copies_of_thread_coordinates_are_inlined_with_their_type() -> None:
    out = canon("__global__ void k(float* y, int n) {\n    int tid = threadIdx.x;\n    int bid = blockIdx.x;\n"
                "    int i = bid * blockDim.x + tid;\n    if (i < n) y[i] = tid;\n}\n")
    assert "int i = ((int)blockIdx.x) * blockDim.x + ((int)threadIdx.x);" in squash(out)
    assert "int tid" not in out


def test_a_written_coordinate_copy_is_kept() -> None:
    src = ("__global__ void k(float* y, int n) {\n    int t = threadIdx.x;\n"
           "    for (; t < n; t += blockDim.x) y[t] = 0.0f;\n}\n")
    assert "int t = threadIdx.x;" in canon(src)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the canonical text is compiled")
def test_canonical_text_compiles(tmp_path: Path) -> None:
    text = ("typedef float real_t;\n#define AT(r, c) ((r) * C + (c))\n"
            "__global__ void k(const real_t* x, real_t* y, float* m, int B, int C) {\n"
            "    int tid = threadIdx.x;\n    long row = (long)blockIdx.x * blockDim.x + tid;\n"
            "    if (row < B) {\n        x += row * C;\n        real_t s = 0;\n"
            "        for (int j = 0; j < C; ++j) s += x[j];\n        m[row] = s;\n"
            "        for (int j = 0; j < C; ++j) y[AT(row, j)] = x[j] - s;\n    }\n}\n")
    out = canon(text)
    assert "return;" in out and "x_at" in out and "AT(" not in out
    f = tmp_path / "k.cu"
    f.write_text(text[: text.index("__global__")] + out)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(f)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_pointer_walking_in_a_counted_loop_becomes_indexing() -> None:
    out = canon("__global__ void k(const float* s, float* d, int n) {\n"
                "    const float* a = s + blockIdx.x * n;\n    float* b = d + blockIdx.x * n;\n"
                "    for (int j = 0; j < n; j++) {\n        *b++ = 2.0f * *a++;\n    }\n}\n")
    assert "b[j] = 2.0f * a[j];" in out


def test_pointer_walking_under_a_branch_or_used_after_the_loop_is_kept() -> None:
    branch = ("__global__ void k(const float* s, float* d, int n) {\n"
              "    for (int j = 0; j < n; j++) {\n        if (j > 2) *d++ = *s++;\n    }\n}\n")
    assert "*d++" in canon(branch)
    after = ("__global__ void k(const float* s, float* d, int n) {\n"
             "    for (int j = 0; j < n; j++) {\n        *d++ = *s++;\n    }\n    *d = 0.0f;\n}\n")
    assert "*d++" in canon(after)
