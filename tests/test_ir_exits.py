"""The exit and loop-header passes (policy.ir.pass_exits, pass_loops' ``counter_before_loop`` and the dead
initial value of ``hoisted_loop_variable``), without the preprocessor: each rewrites its spelling exactly and
says why not where its shape is there but its precondition does not hold. Every rewrite is also built with
nvcc (a guard or a moved declaration must still compile); whether the rules then fire is in test_ir_rules.py."""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.policy.ir import Lowered, lower

GRID_STRIDE = "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)"


def low(text: str, kernel: str = "k") -> Lowered:
    got = lower(text, kernel, preprocess=False)
    assert isinstance(got, Lowered), got
    return got


def squash(s: str) -> str:
    return " ".join(s.split())


def applied(got: Lowered, name: str) -> bool:
    return any(a.startswith(name + ":") for a in got.applied)


def why(got: Lowered, name: str) -> str:
    return " | ".join(w for p, w, _ in got.skipped if p == name)


def builds(text: str) -> None:
    res = compile_cubin(text, arch="sm_90", filename="exits.cu")
    assert res.ok and res.entry_symbol("k") is not None, res.log[-2000:]


# ---------------------------------------------------------------------------------------------- sticky returns

STICKY = {
    # the batch of a 2-D grid: the same in every iteration of the thread (mmcv's point-cloud kernels)
    "block_uniform": ("__global__ void k(float* y, const float* x, int n, int nb) {\n  int b = blockIdx.y;\n"
                      f"  {GRID_STRIDE} {{\n    if (b >= nb) return;\n    y[b * n + i] = 2.0f * x[b * n + i];\n"
                      "  }\n}\n", "if (!(b >= nb)) {"),
    # the counter itself, stepped up: once past m, past m in every later iteration
    "monotone_counter": ("__global__ void k(float* y, const float* x, int n, int m) {\n"
                         f"  {GRID_STRIDE} {{\n    if (i >= m) {{ return; }}\n    y[i] = x[i];\n  }}\n}}\n",
                         "if (!(i >= m)) {"),
    # mirrored comparison, `||` of sticky parts, pure declarations before the return (run in every iteration)
    "pure_prefix": ("__global__ void k(float* y, const float* x, int n, int m, int c) {\n"
                    "  int ch = blockIdx.y;\n"
                    f"  {GRID_STRIDE} {{\n    int row = i / m;\n    int col = min(i % m, m - 1);\n"
                    "    if (m <= i || ch >= c) return;\n    y[row * m + col + ch] = x[i];\n  }\n}\n",
                    "if (!(m <= i || ch >= c)) {"),
}


@needs_nvcc
@pytest.mark.parametrize("case", sorted(STICKY))
def test_sticky_return_in_the_item_loop_guards_the_rest_of_the_body(case: str) -> None:
    text, guard = STICKY[case]
    got = low(text)
    assert applied(got, "sticky_loop_return"), got.skipped
    assert guard in squash(got.text) and "return" not in got.text
    builds(got.text)


@pytest.mark.parametrize("body,reason", [
    # the condition reads memory: a later item may not return
    ("    if (x[i] < 0.0f) return;\n    y[i] = x[i];\n", "may hold in one iteration and not in a later one"),
    # a value computed from the item in the body: not invariant, and not the counter
    ("    int r = i % 7;\n    if (r >= 3) return;\n    y[i] = x[i];\n", "may hold in one iteration"),
    # a write before the return: the iterations the return skipped would run it
    ("    y[i] = 0.0f;\n    if (blockIdx.y >= 2) return;\n    y[i] = x[i];\n", "not a pure declaration"),
    # a declaration reading memory before the return: running it in skipped iterations could fault
    ("    float v = x[i];\n    if (blockIdx.y >= 2) return;\n    y[i] = v;\n", "not a pure declaration"),
])
def test_return_that_may_stop_holding_stays(body: str, reason: str) -> None:
    got = low(f"__global__ void k(float* y, const float* x, int n) {{\n  {GRID_STRIDE} {{\n{body}  }}\n}}\n")
    assert "return" in got.text and not applied(got, "sticky_loop_return")
    assert reason in why(got, "sticky_loop_return"), got.skipped


@pytest.mark.parametrize("loop", [
    # stepped down: `i >= m` once true need not stay true
    "for (int i = n - 1; i >= 0; i--) {\n    if (i >= m) return;\n    y[i] = 1.0f;\n  }",
    # stepped by a parameter (its sign is unknown)
    "for (int i = threadIdx.x; i < n; i += m) {\n    if (i >= m) return;\n    y[i] = 1.0f;\n  }",
])
def test_counter_compared_but_not_stepped_up_stays(loop: str) -> None:
    got = low(f"__global__ void k(float* y, int n, int m) {{\n  {loop}\n}}\n")
    assert "return" in got.text and "may hold in one iteration" in why(got, "sticky_loop_return")


def test_return_before_statements_after_the_loop_stays() -> None:
    got = low("__global__ void k(float* y, int n, int nb) {\n"
              f"  {GRID_STRIDE} {{\n    if (blockIdx.y >= nb) return;\n    y[i] = 1.0f;\n  }}\n  y[0] = 2.0f;\n}}\n")
    assert "return" in got.text and "statements follow the loop" in why(got, "sticky_loop_return")


# ------------------------------------------------------------------------------------------- single-pass loops

@needs_nvcc
def test_loop_ending_by_return_runs_once_as_an_if() -> None:
    got = low("__global__ void k(float* y, const float* x, int n) {\n"
              f"  {GRID_STRIDE} {{\n    float s = 0.0f;\n"
              "    for (int j = 0; j < 4; j++) { if (x[j] < 0.0f) continue; s += x[j]; }\n"
              "    y[i] = s;\n    return;\n  }\n}\n")
    t = squash(got.text)
    assert applied(got, "single_pass_loop") and "for (int i" not in t
    # the guard as ``cuda.normalize`` spells it (the canonical form reads a bound as an early exit)
    assert "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) { return; } float s" in t
    builds(got.text)


@pytest.mark.parametrize("body,reason", [
    ("    if (x[i] < 0.0f) continue;\n    y[i] = x[i];\n    return;\n", "continue"),
    ("    if (x[i] < 0.0f) break;\n    y[i] = x[i];\n    return;\n", "break"),
])
def test_loop_ending_by_return_with_a_jump_of_its_own_stays(body: str, reason: str) -> None:
    got = low(f"__global__ void k(float* y, const float* x, int n) {{\n  {GRID_STRIDE} {{\n{body}  }}\n}}\n")
    assert "for (" in got.text and reason in why(got, "single_pass_loop"), got.skipped


def test_loop_ending_by_return_whose_counter_name_is_taken_stays() -> None:
    got = low("__global__ void k(float* y, int n, int i) {\n"
              "  for (int i = threadIdx.x; i < n; i += blockDim.x) {\n    y[i] = 1.0f;\n    return;\n  }\n}\n")
    assert "for (" in got.text and "declared at the kernel's top level" in why(got, "single_pass_loop")


# ------------------------------------------------------------------------------------------- loop headers

@needs_nvcc
def test_counter_declared_just_before_an_empty_initializer_moves_into_it() -> None:
    got = low("__global__ void k(float* y, const float* x, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  for (; i < n; i += blockDim.x * gridDim.x) {\n    y[i] = x[i];\n  }\n}\n")
    assert applied(got, "counter_before_loop")
    assert GRID_STRIDE in squash(got.text)
    builds(got.text)


def test_counter_read_after_its_loop_stays() -> None:
    got = low("__global__ void k(float* y, int n) {\n  int j = threadIdx.x;\n"
              "  for (; j < n; j += 32) y[j] = 0.0f;\n  y[0] = j;\n}\n")
    assert "for (; j < n" in got.text and "read after the loop" in why(got, "counter_before_loop")


@needs_nvcc
def test_loop_variable_with_a_dead_initial_value_moves_into_its_loop() -> None:
    got = low("__global__ void k(float* y, int n) {\n  int gid = threadIdx.x + blockDim.x * blockIdx.x, j = 0;\n"
              "  float s = 0.0f;\n  for (j = 0; j < n; ++j) s += j;\n  y[gid] = s;\n}\n")
    t = squash(got.text)
    assert "int gid = threadIdx.x + blockDim.x * blockIdx.x;" in t and "for (int j = 0; j < n; ++j)" in t
    builds(got.text)


def test_loop_variable_whose_initial_value_has_an_effect_stays() -> None:
    got = low("__global__ void k(float* y, int* c, int n) {\n  int j = atomicAdd(c, 1);\n"
              "  for (j = 0; j < n; ++j) y[j] = 0.0f;\n}\n")
    assert "atomicAdd" in got.text and not applied(got, "hoisted_loop_variable")


def test_return_in_a_loop_with_a_barrier_stays() -> None:
    got = low("__global__ void k(float* y, const float* x, int n, int nb) {\n  __shared__ float s[256];\n"
              f"  {GRID_STRIDE} {{\n    if (blockIdx.y >= nb) return;\n    s[threadIdx.x] = x[i];\n"
              "    __syncthreads();\n    y[i] = s[255 - threadIdx.x];\n    __syncthreads();\n  }\n}\n")
    assert "return" in got.text and "waits for the block's or warp's live threads" in why(got, "sticky_loop_return")
