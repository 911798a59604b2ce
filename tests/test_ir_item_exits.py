"""``item_exits`` (policy.ir.pass_item_exits): an early exit from a grid-stride pass over the items becomes a guard
around the rest of the item's work, on kernels written here in the styles frameworks use (``continue`` after a
lookup, a store before the exit, ``return`` where each thread has one item). Each rewrite is exact, keeps the
statement before the exit in its branch, and compiles with nvcc; where a ``return`` is not a ``continue`` (the
launch gives a thread several items, or statements follow the loop) the pass says why in words."""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.policy.ir import Lowered, lower
from warpforge.spec.resolve import load_spec

GS = "for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x * gridDim.x)"
SIG = "__global__ void k(float* out, const float* g, const int* dest, float* flag, int n, int width) {\n"


def spec(grid: str = "cdiv(N, 128)") -> str:
    return ("// @warpforge size N = 3001\n// @warpforge size W = 257\n// @warpforge arg out: out float[N*W]\n"
            "// @warpforge arg g: in float[N*W]\n// @warpforge arg dest: in int[N] int(-1, 3000)\n"
            "// @warpforge arg flag: out float[N]\n// @warpforge arg n = N\n// @warpforge arg width = W\n"
            f"// @warpforge launch grid={grid}, block=128\n")


def low(text: str) -> Lowered:
    got = lower(text, "k", preprocess=False, spec=load_spec("fixture.cu", "k", text=text))
    assert isinstance(got, Lowered), got
    return got


def squash(s: str) -> str:
    return " ".join(s.split())


def why(got: Lowered) -> str:
    return " | ".join(w for p, w, _ in got.skipped if p == "item_exits")


def builds(text: str) -> None:
    res = compile_cubin(text, arch="sm_90", filename="item_exits.cu")
    assert res.ok and res.entry_symbol("k") is not None, res.log[-2000:]


COPY = "    for (int c = 0; c < width; c++) out[r * width + c] = g[to * width + c];\n"

REWRITES = {
    # a lookup that marks an item to skip (a scatter's "no target"), then the item's work
    "continue_after_lookup": (spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to == -1) continue;\n"
                              + COPY + "  }\n}\n", "if (!(to == -1)) { for (int c = 0;"),
    # a store before the exit stays in its branch; the rest of the work is the `else`
    "store_then_continue": (spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n"
                            "    if (to < 0) {\n      flag[r] = 0.0f;\n      continue;\n    }\n    flag[r] = 1.0f;\n"
                            + COPY + "  }\n}\n",
                            "if (to < 0) { flag[r] = 0.0f; } else { flag[r] = 1.0f; for (int c = 0;"),
    # `return` where the launch gives each thread one item at both sizes of the spec: a `continue`
    "return_one_item_each": (spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to < 0 || to >= n) return;\n"
                             + COPY + "  }\n}\n", "if (!(to < 0 || to >= n)) { for (int c = 0;"),
    # two exits: the second, inside the guard the first became, is guarded in turn
    "two_exits": (spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to < 0) continue;\n"
                  "    float s = g[r];\n    if (s == 0.0f) {\n      flag[r] = s;\n      continue;\n    }\n"
                  + COPY + "  }\n}\n", "if (s == 0.0f) { flag[r] = s; } else { for (int c = 0;"),
}


@needs_nvcc
@pytest.mark.parametrize("case", sorted(REWRITES))
def test_an_exit_from_the_pass_becomes_a_guard(case: str) -> None:
    text, expect = REWRITES[case]
    got = low(text)
    assert any(a.startswith("item_exits:") for a in got.applied), (got.applied, got.skipped)
    assert expect in squash(got.text), got.text
    assert "continue;" not in got.text and "return;" not in got.text, got.text
    builds(got.text)


def test_return_with_several_items_per_thread_stays_and_says_why() -> None:
    text = spec("min(cdiv(N, 128), 4)") + SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to < 0) return;\n" \
        + COPY + "  }\n}\n"
    got = low(text)
    assert "return;" in got.text
    assert "512 threads in x for 3001 items" in why(got) and "skip the later ones" in why(got)


def test_return_with_statements_after_the_loop_stays() -> None:
    text = spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to < 0) return;\n" + COPY \
        + "  }\n  if (threadIdx.x == 0) flag[blockIdx.x] = 1.0f;\n}\n"
    got = low(text)
    assert "return;" in got.text and "skips the statements after the loop" in why(got)


def test_return_without_a_known_launch_stays() -> None:
    text = SIG + f"  {GS} {{\n    int to = dest[r];\n    if (to < 0) return;\n" + COPY + "  }\n}\n"
    got = lower(text, "k", preprocess=False)
    assert isinstance(got, Lowered) and "return;" in got.text
    assert "not known as numbers" in why(got)


def test_a_continue_of_an_inner_loop_is_left_alone() -> None:
    text = spec() + SIG + f"  {GS} {{\n    int to = dest[r];\n" \
        "    for (int c = 0; c < width; c++) {\n      if (g[c] < 0.0f) continue;\n      out[r * width + c] = g[c];\n" \
        "    }\n  }\n}\n"
    got = low(text)
    assert not any(a.startswith("item_exits:") for a in got.applied) and "continue;" in got.text
