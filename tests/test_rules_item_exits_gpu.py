"""On the GPU: the remaps' candidates for passes over items that leave an item early or branch around its loops
(``test_rules_item_exits.py`` on the CPU), judged by the real evaluator (the search's own build, poisoned-output
correctness runs at the spec size and the perturbed size, odd sizes, and timing):

* a scatter-reduce on a mode parameter (a lookup that skips an item with ``continue``, then one loop of atomic
  updates per mode into a gathered row): ``element_remap`` gives each item a warp, each branch's loop split;
* the same with a float maximum through a compare-and-swap helper;
* its gradient, an ``else if`` chain of gathered row copies: ``element_remap``;
* a store before a ``return`` (each thread has one item at the spec's launch): lane 0 makes the store;
* a per-item dot product behind a ``return`` on a neighbour index out of range: ``lane_remap``.

Every proposed variant must verify (the speedups are printed, not asserted). Run on the GPU machine:
``pytest -m gpu tests/test_rules_item_exits_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.5)

SPEC = """// @warpforge size N = 20011
// @warpforge size M = 997 fixed
// @warpforge size W = 259
// @warpforge arg out: {out} float[{rows}*W]
// @warpforge arg g: in float[M*W] normal(0, 1)
// @warpforge arg dest: in int[N] int(-1, 996)
// @warpforge arg cnt: in float[M] uniform(1, 4)
// @warpforge arg flag: out float[N]
// @warpforge arg n = N
// @warpforge arg width = W
// @warpforge arg mode = {mode}
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-3 atol=1e-3
"""
SIG = ("__global__ void {name}(float* out, const float* g, const int* dest, const float* cnt, float* flag, int n, "
       "int width, int mode) {{\n"
       "  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x * gridDim.x) {{\n"
       "    int to = dest[r];\n")

SCATTER = SPEC.format(out="inout", rows="M", mode=1) + SIG.format(name="scatter_reduce") + """\
    if (to == -1) continue;
    const float* src = g + (r % 997) * width;
    float* dst = out + to * width;
    if (mode == 1) {
      for (int c = 0; c < width; c++) atomicAdd(&dst[c], src[c] * src[c]);
    } else {
      for (int c = 0; c < width; c++) atomicAdd(&dst[c], src[c]);
    }
  }
}
"""

#: a float maximum through a compare-and-swap helper (``atomic_helpers`` reads it as an atomic update that commutes)
SCATTER_MAX = """\
__device__ __forceinline__ void upd_max(float* where, float v) {
  int* bits = reinterpret_cast<int*>(where);
  int seen = *bits, want;
  do {
    want = seen;
    seen = atomicCAS(bits, want, __float_as_int(fmaxf(v, __int_as_float(want))));
  } while (want != seen);
}
""" + SPEC.format(out="inout", rows="M", mode=2) + SIG.format(name="scatter_max") + """\
    if (to == -1) continue;
    const float* src = g + (r % 997) * width;
    float* dst = out + to * width;
    if (mode == 2) {
      for (int c = 0; c < width; c++) upd_max(&dst[c], src[c]);
    } else {
      for (int c = 0; c < width; c++) atomicAdd(&dst[c], src[c]);
    }
  }
}
"""

GRADIENT = SPEC.format(out="out", rows="N", mode=1) + SIG.format(name="reduce_grad") + """    if (to == -1) {
      continue;
    }
    float* row = out + r * width;
    if (mode == 0) {
      for (int c = 0; c < width; c++) row[c] = g[to * width + c];
    } else if (mode == 1) {
      for (int c = 0; c < width; c++) row[c] = g[to * width + c] / cnt[to];
    }
  }
}
"""

MASKED_COPY = SPEC.format(out="out", rows="N", mode=0) + SIG.format(name="masked_copy") + """    if (to < 0) {
      flag[r] = 0.0f;
      return;
    }
    for (int c = 0; c < width; c++) out[r * width + c] = 2.0f * g[to * width + c];
  }
}
"""

NEIGHBOUR_DOT = SPEC.format(out="in", rows="N", mode=0) + SIG.format(name="neighbour_dot") + """\
    if (to < 0 || to >= n) return;
    float acc = 0.0f;
    for (int c = 0; c < width; c++) acc += g[to * width + c] * out[r * width + c];
    flag[r] = acc;
  }
}
"""


@pytest.mark.parametrize(("text", "kernel", "family"), [
    (SCATTER, "scatter_reduce", "element_remap"),
    (SCATTER_MAX, "scatter_max", "element_remap"),
    (GRADIENT, "reduce_grad", "element_remap"),
    (MASKED_COPY, "masked_copy", "element_remap"),
    (NEIGHBOUR_DOT, "neighbour_dot", "lane_remap"),
])
def test_exits_and_branches_verify_against_the_original(gpu_backend: Backend, tmp_path: Path, text: str,
                                                         kernel: str, family: str) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {family})
    assert children, errors
    speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
