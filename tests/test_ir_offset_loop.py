"""``offset_stepped_loop``: a block's threads striding over a row by an offset, ``for (i = 0; i < n; i += S)`` with
the element at ``i + id``, lowered to the block-strided loop ``for (int i = id; i < n; i += S)`` (issue 27).

The kernels are written for these tests, each in one of the spellings other people's code uses (darknet's
``#define BLOCK`` and ``const int threads = BLOCK``, teaching code's ``i += blockDim.x``): a ternary guard whose
false branch is the identity of ``+=``, an ``if`` guard around the body, both orders of ``i + id``, the thread's
index as ``threadIdx.x`` or a local. Each must lower to the canonical loop and build with nvcc (on the GPU,
test_ir_offset_loop_gpu.py verifies the lowered text against the original). The near misses must stay as
written, with the reason in words.
"""

from __future__ import annotations

import re

import pytest

from conftest import needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.policy.ir import Lowered, lower
from warpforge.spec.resolve import load_spec

HEAD = """\
// @warpforge size R = 64
// @warpforge size C = 1000
// @warpforge arg x: in float[R*C]
// @warpforge arg w: in float[R*C]
// @warpforge arg out: out float[R]
// @warpforge arg cols = C
"""

TAIL = """\
    part[id] = sum;
    __syncthreads();
    if (id == 0) {
        float t = 0;
        for (int q = 0; q < 256; ++q) t += part[q];
        out[row] = t;
    }
}
"""


def kernel(loop: str, *, block: str = "256", prelude: str = "", top: str = "int id = threadIdx.x;") -> str:
    return (f"{prelude}{HEAD}// @warpforge launch grid=R, block={block}\n"
            "__global__ void k(const float* x, const float* w, float* out, int cols)\n{\n"
            f"    __shared__ float part[256];\n    {top}\n    int row = blockIdx.x;\n    float sum = 0;\n"
            f"{loop}{TAIL}")


CASES = {
    # darknet: a macro step, the element's index in a local, `i + id` last in the sum, a ternary guard
    "define_ternary": kernel(
        "    for (int i = 0; i < cols; i += BLOCK) {\n        int index = row * cols + i + id;\n"
        "        sum += (i + id < cols) ? x[index] : 0;\n    }\n", prelude="#define BLOCK 256\n"),
    # darknet: `int i;` before the loop, a `const` local step, `id + i` first in the sum, `0.0f`
    "const_local_reversed": kernel(
        "    const int threads = 256;\n    int i;\n    for (i = 0; i < cols; i += threads) {\n"
        "        int index = id + i + row * cols;\n        sum += (id + i < cols) ? x[index] * w[index] : 0.0f;\n"
        "    }\n"),
    # teaching code: `i += blockDim.x`, an `if` around the body, the index inline, `threadIdx.x` itself
    "blockdim_if": kernel(
        "    for (int i = 0; i < cols; i += blockDim.x) {\n        if (threadIdx.x + i < cols) {\n"
        "            float v = x[row * cols + i + threadIdx.x];\n            sum += v * v;\n        }\n    }\n"),
    # an `if` whose condition has more than the guard: the rest stays
    "if_conjunction": kernel(
        "    for (int i = 0; i < cols; i += blockDim.x) {\n        int c = i + id;\n"
        "        if (i + id < cols && w[row * cols + c] > 0.0f) sum += x[row * cols + c];\n    }\n"),
}

EXPECT = {
    "define_ternary": ("for (int i = id; i < cols; i += 256)", "int index = row * cols + i;", "sum += x[index];"),
    "const_local_reversed": ("for (int i = id; i < cols; i += threads)", "int index = i + row * cols;",
                             "sum += x[index] * w[index];"),
    "blockdim_if": ("for (int i = threadIdx.x; i < cols; i += blockDim.x)", "float v = x[row * cols + i];"),
    "if_conjunction": ("for (int i = id; i < cols; i += blockDim.x)", "int c = i;",
                       "if (w[row * cols + c] > 0.0f) sum"),
}


def lowered(text: str) -> Lowered:
    got = lower(text, "k", path="fixture.cu", spec=load_spec("fixture.cu", "k", text=text))
    assert isinstance(got, Lowered), got
    return got


def applied(got: Lowered) -> bool:
    return any(a.startswith("offset_stepped_loop:") for a in got.applied)


def why(got: Lowered) -> str:
    return " | ".join(w for p, w, _ in got.skipped if p == "offset_stepped_loop")


def squash(s: str) -> str:
    return " ".join(s.split())


@pytest.mark.parametrize("case", sorted(CASES))
def test_offset_stepped_loop_becomes_the_block_strided_loop(case: str) -> None:
    got = lowered(CASES[case])
    assert applied(got), got.skipped
    text = squash(got.text)
    for piece in EXPECT[case]:
        assert piece in text, text
    loop = text[text.index("for (int i"):text.index("part[id] = sum")]
    assert "< cols)" not in loop.split(")", 1)[1] and "? " not in loop, loop  # the guard is gone


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_text_builds(case: str) -> None:
    got = lowered(CASES[case])
    res = compile_cubin(got.text, arch="sm_90", filename="offset.cu")
    assert res.ok and res.entry_symbol("k") is not None, res.log[-2000:]


# ---------------------------------------------------------------------------------------------- declines

DECLINES = {
    # the step is not the block's width at the spec's sizes (block 128, step 256)
    "step_not_block": (kernel("    for (int i = 0; i < cols; i += 256) {\n"
                              "        sum += (i + id < cols) ? x[row * cols + i + id] : 0;\n    }\n", block="128"),
                       "is 256 and the block's width 128"),
    # the false branch adds something: the threads past the end would add it too
    "false_branch": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n"
                            "        sum += (i + id < cols) ? x[row * cols + i + id] : 1.0f;\n    }\n"),
                     "is not the identity of `+=`"),
    # the counter alone indexes memory: not the thread's element
    "bare_counter": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n"
                            "        sum += (i + id < cols) ? x[row * cols + i + id] * w[i] : 0;\n    }\n"),
                     "without the thread's index added"),
    # the counter is written in the body
    "counter_written": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n"
                               "        if (i + id < cols) { sum += x[row * cols + i + id]; i += 0; }\n    }\n"),
                        "`i` is written in the loop's body"),
    # the bound changes inside the loop
    "bound_written": (kernel("    int n = cols;\n    for (int i = 0; i < n; i += blockDim.x) {\n"
                             "        if (i + id < n) { sum += x[row * cols + i + id]; n -= 0; }\n    }\n"),
                      "may change inside the loop"),
    # an unguarded statement with an effect: it would run fewer times
    "unguarded_effect": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n        sum += 1.0f;\n"
                                "        if (i + id < cols) sum += x[row * cols + i + id];\n    }\n"),
                         "would run in the iterations past the row's end"),
    # the counter read after the loop (declared before it): its value there is the block's offset
    "used_after": (kernel("    int i;\n    for (i = 0; i < cols; i += blockDim.x) {\n"
                          "        sum += (i + id < cols) ? x[row * cols + i + id] : 0;\n    }\n"
                          "    sum += (float)i;\n"),
                   "declared before the loop"),
    # the guard is against another bound
    "other_bound": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n"
                           "        sum += (i + id < cols - 1) ? x[row * cols + i + id] : 0;\n    }\n"),
                    "is not `i + id < cols`"),
    # a declaration before the guard reads memory at the offset
    "impure_declaration": (kernel("    for (int i = 0; i < cols; i += blockDim.x) {\n"
                                  "        float v = x[row * cols + i + id];\n"
                                  "        sum += (i + id < cols) ? v : 0;\n    }\n"),
                           "reads memory"),
    # the step is a macro nothing defines
    "unknown_step": (kernel("    for (int i = 0; i < cols; i += NTHREADS) {\n"
                            "        sum += (i + id < cols) ? x[row * cols + i + id] : 0;\n    }\n"),
                     "`NTHREADS` is not a constant, tunable or scalar the spec gives"),
}


@pytest.mark.parametrize("case", sorted(DECLINES))
def test_near_misses_stay_with_the_reason(case: str) -> None:
    text, reason = DECLINES[case]
    got = lowered(text) if case != "unknown_step" else _lowered_as_written(text)
    assert not applied(got), got.text
    assert reason in why(got), got.skipped


def _lowered_as_written(text: str) -> Lowered:
    """Without the preprocessor (``NTHREADS`` would not compile): the passes on the text as written."""
    got = lower(text, "k", path="fixture.cu", spec=load_spec("fixture.cu", "k", text=text), preprocess=False)
    assert isinstance(got, Lowered), got
    return got


def test_a_tile_loop_with_barriers_is_left_to_unstage_tiles() -> None:
    """``for (base = 0; base < K; base += blockDim.x)`` staging ``A[row * K + base + threadIdx.x]`` is a tile loop,
    not a row the threads share: its barriers make it decline, and nothing of it changes here."""
    loop = ("    for (int b = 0; b < cols; b += blockDim.x) {\n        part[id] = x[row * cols + b + id];\n"
            "        __syncthreads();\n        sum += part[(id + 1) % 256];\n        __syncthreads();\n    }\n")
    got = lowered(kernel(loop))
    assert not applied(got)
    assert re.search(r"for \(int b = 0;", got.text)
