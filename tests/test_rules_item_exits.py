"""The remaps on passes over items that leave an item early or branch around its loops (``item_exits`` in the IR,
``remap_items``' guards, branches and atomic updates), on kernels written here in the styles frameworks use:
``continue`` after a lookup, a store before the exit, ``return`` where each thread has one item, a two-branch pass
on a mode parameter with per-element atomics, an ``else if`` chain. Each proposal builds through the evaluator's
CPU build path (static guards, launch at both verified sizes, nvcc ``-cubin -arch=sm_90``); each decline says what
blocked it (a condition that differs between the threads of an item's group, a ``return`` that ends several items,
an atomic that does not commute). Numerics and speed: ``test_rules_item_exits_gpu.py``."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.atomic_helpers import atomic_helpers
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import element_remap, lane_remap
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

SPEC = """// @warpforge size N = 3001
// @warpforge size W = 257
// @warpforge arg out: out float[N*W]
// @warpforge arg g: in float[N*W] normal(0, 1)
// @warpforge arg dest: in int[N] int(-1, 3000)
// @warpforge arg cnt: in float[N] uniform(1, 4)
// @warpforge arg flag: out float[N]
// @warpforge arg n = N
// @warpforge arg width = W
// @warpforge arg mode = 1
// @warpforge launch grid=cdiv(N, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-4
"""
SIG = ("__global__ void k(float* out, const float* g, const int* dest, const float* cnt, float* flag, int n, "
       "int width, int mode) {\n")
GS = "  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x * gridDim.x) {\n"
COPY = "    for (int c = 0; c < width; c++) out[r * width + c] = g[to * width + c];\n"


def grid_stride(body: str, spec: str = SPEC) -> str:
    return spec + SIG + GS + body + "  }\n}\n"


PROPOSED: dict[str, tuple[str, str]] = {
    # a lookup that marks an item to skip, then a gathered row copy
    "continue_then_copy": (grid_stride("    int to = dest[r];\n    if (to == -1) continue;\n" + COPY), "element_remap"),
    # a store before the exit stays in its branch (lane 0 makes it); `return` is a `continue` at this launch
    "store_then_return": (grid_stride("    int to = dest[r];\n    if (to < 0) {\n      flag[r] = 0.0f;\n"
                                      "      return;\n    }\n" + COPY), "element_remap"),
    # a scatter-reduce: per-element atomic updates of a gathered row, one loop per mode, on a uniform branch
    "mode_branch_atomics": (grid_stride(
        "    int to = dest[r];\n    if (to < 0) continue;\n    const float* src = g + r * width;\n"
        "    float* dst = out + to * width;\n    if (mode == 1) {\n"
        "      for (int c = 0; c < width; c++) atomicAdd(&dst[c], src[c] * src[c]);\n    } else {\n"
        "      for (int c = 0; c < width; c++) atomicAdd(&dst[c], src[c]);\n    }\n",
        SPEC.replace("arg out: out", "arg out: inout")), "element_remap"),
    # the gradient of such a reduction: an `else if` chain of write loops, a divisor loaded at the item's target
    "else_if_chain": (grid_stride(
        "    int to = dest[r];\n    if (to == -1) {\n      continue;\n    }\n    float* row = out + r * width;\n"
        "    if (mode == 0) {\n      for (int c = 0; c < width; c++) row[c] = g[to * width + c];\n"
        "    } else if (mode == 1) {\n      for (int c = 0; c < width; c++) row[c] = g[to * width + c] / cnt[to];\n"
        "    }\n"), "element_remap"),
    # one thread per item declared at the top: two exits (the bound, then a lookup) and a branch of loops
    "top_item_exits_and_branch": (SPEC + SIG + "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                  "  if (r >= n) return;\n  int to = dest[r];\n  if (to < 0) return;\n"
                                  "  if (mode != 0) {\n" + COPY + "  } else {\n"
                                  "    for (int c = 0; c < width; c++) out[r * width + c] = -g[to * width + c];\n"
                                  "  }\n}\n", "element_remap"),
    # a reading pass after an exit on a gathered index (a neighbour lookup out of range): a sum per item
    "return_then_sum": (grid_stride(
        "    int to = dest[r];\n    if (to < 0 || to >= n) return;\n    float acc = 0.0f;\n"
        "    for (int c = 0; c < width; c++) acc += g[to * width + c] * g[r * width + c];\n    flag[r] = acc;\n"),
        "lane_remap"),
}


#: a float maximum the hardware lacks, as a compare-and-swap loop, and a sum wrapper: overloaded per type, so the
#: inliner keeps the calls; ``atomic_helpers`` reads both as atomic updates that commute
HELPERS = """__device__ __forceinline__ void upd_max(float* where, float v) {
  int* bits = reinterpret_cast<int*>(where);
  int seen = *bits, want;
  do {
    want = seen;
    seen = atomicCAS(bits, want, __float_as_int(fmaxf(v, __int_as_float(want))));
  } while (want != seen);
}
__device__ __forceinline__ void upd_max(double* where, double v) {
  unsigned long long* bits = (unsigned long long*)where;
  unsigned long long seen = *bits, want;
  do {
    want = seen;
    seen = atomicCAS(bits, want, __double_as_longlong(fmax(v, __longlong_as_double(want))));
  } while (want != seen);
}
__device__ __forceinline__ void upd_sum(float* where, float v) { atomicAdd(where, v); }
__device__ __forceinline__ void upd_sum(double* where, double v) { atomicAdd(where, v); }
"""
PROPOSED["helper_updates_branch"] = (HELPERS + grid_stride(
    "    int to = dest[r];\n    if (to < 0) continue;\n    const float* src = g + r * width;\n"
    "    float* dst = out + to * width;\n    if (mode == 1) {\n"
    "      for (int c = 0; c < width; c++) upd_max(&dst[c], src[c]);\n    } else {\n"
    "      for (int c = 0; c < width; c++) upd_sum(&dst[c], src[c]);\n    }\n",
    SPEC.replace("arg out: out", "arg out: inout")), "element_remap")


def test_atomic_helpers_are_read_from_the_file() -> None:
    assert atomic_helpers(HELPERS) == {"upd_max", "upd_sum"}
    # an exchange through compare-and-swap (the new value ignores the old one) does not commute
    assert "upd_max" not in atomic_helpers(HELPERS.replace("__float_as_int(fmaxf(v, __int_as_float(want)))",
                                                           "__float_as_int(v)"))
    # a compare-and-swap that is not retried may lose an update
    assert "upd_max" not in atomic_helpers(HELPERS.replace("} while (want != seen);", "} while (false);"))
    # a helper that also writes memory is no update of its address alone
    assert "upd_sum" not in atomic_helpers(HELPERS.replace("{ atomicAdd(where, v); }",
                                                           "{ atomicAdd(where, v); where[1] = v; }"))


def test_an_unknown_helper_is_declined_for_what_is_unknown() -> None:
    # neither helper is defined in the file: what their calls write is unknown
    text = PROPOSED["helper_updates_branch"][0].replace(HELPERS, "")
    assert "hands an address to a function the IR could not inline" in reason(text)


def policy(text: str, family: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text), families={family})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(PROPOSED))
def test_exits_and_branches_are_remapped_and_build(case: str) -> None:
    text, family = PROPOSED[case]
    pol = policy(text, family)
    children = pol.propose_sync(pol.root_candidate())
    assert children and {c.family for c in children} == {family}, (case, pol.errors)
    for child in children:
        assert "wfl_lane" in child.definition
        assert ("+= 32)" if child.steps[-1].endswith(":warp") else "+= blockDim.x)") in child.definition
        got = ca.EvaluatorBuild(pol).check(child)
        assert got.ok, (case, child.steps, got.stage, got.reason[-2000:], child.definition)


def test_the_store_before_the_exit_is_made_once_in_its_branch() -> None:
    pol = policy(PROPOSED["store_then_return"][0], "element_remap")
    warp = {c.steps[-1]: c for c in pol.propose_sync(pol.root_candidate())}["element_remap:warp"].definition
    squashed = " ".join(warp.split())
    assert "if (to < 0) { if (wfl_lane == 0) flag[r] = 0.0f; } else { for (int c = wfl_lane; c < width; c += 32)" \
        in squashed, warp
    assert "return;" not in warp


def test_each_branch_loop_is_split() -> None:
    pol = policy(PROPOSED["mode_branch_atomics"][0], "element_remap")
    warp = {c.steps[-1]: c for c in pol.propose_sync(pol.root_candidate())}["element_remap:warp"].definition
    assert warp.count("for (int c = wfl_lane; c < width; c += 32) atomicAdd(&dst[c]") == 2, warp


def reason(text: str, family: str = "element_remap") -> str:
    pol = policy(text, family)
    norm = pol.normalized(pol.root_candidate())
    ctx = pol.context(norm if norm is not None else pol.root_candidate())
    got = (element_remap if family == "element_remap" else lane_remap).why_not(ctx)
    assert isinstance(got, NotLegal), got
    assert pol.propose_sync(pol.root_candidate()) == []
    return got.reason


@pytest.mark.parametrize(("text", "words"), [
    # a condition on the thread, not the item: the threads of an item's group would part ways
    (grid_stride("    if ((threadIdx.x & 1) == 1) continue;\n    int to = dest[r];\n" + COPY), "`threadIdx.x`"),
    # a condition read from memory the item's loops write: another lane may have written it already
    (grid_stride("    int to = dest[r];\n    if (out[r * width] > 0.0f) continue;\n" + COPY),
     "is not one value per item"),
    # a branch on a value the loops carry differs between lanes
    (grid_stride("    int to = dest[r];\n    if (flag[r] > 0.0f) {\n" + COPY + "    }\n",
                 SPEC.replace("arg flag: out", "arg flag: inout")).replace(
        "out[r * width + c] = g[to * width + c];\n    }", "out[r * width + c] = g[to * width + c];\n"
        "    }\n    flag[r] = 0.0f;"), "is not one value per item"),
    # `return` where the launch gives a thread several items: it would end the later ones too
    (grid_stride("    int to = dest[r];\n    if (to < 0) return;\n" + COPY,
                 SPEC.replace("grid=cdiv(N, 128)", "grid=min(cdiv(N, 128), 4)")), "ends this thread's walk"),
    # a branch that does more than loop: only loops can be split like loops
    (grid_stride("    int to = dest[r];\n    if (mode == 1) {\n      flag[r] = 1.0f;\n" + COPY + "    } else {\n"
                 + COPY + "    }\n"), "holds other statements than loops"),
    # an exchange does not commute: the group would make the updates in another order
    (grid_stride("    int to = dest[r];\n    if (to < 0) continue;\n"
                 "    for (int c = 0; c < width; c++) atomicExch(&out[to * width + c], g[r * width + c]);\n",
                 SPEC.replace("arg out: out", "arg out: inout")), "not an update that commutes"),
    # an array updated atomically and read plainly
    (grid_stride("    int to = dest[r];\n    if (to < 0) continue;\n"
                 "    for (int c = 0; c < width; c++) atomicAdd(&out[to * width + c], g[r * width + c]);\n"
                 "    flag[r] = out[r * width];\n", SPEC.replace("arg out: out", "arg out: inout")),
     "updated atomically and also touched"),
])
def test_declines_say_why(text: str, words: str) -> None:
    assert words in reason(text)
