"""On the GPU: the remaps' newly accepted forms (``test_rules_remap_wide.py``) verify against the original,
judged by the real evaluator (the search's own build, poisoned-output correctness runs at the spec size and
the perturbed size, and timing):

* a per-plane mean of an NCHW tensor walked by a grid-stride loop over (image, pixel) items (a framework's
  ``KERNEL_LOOP`` over a channel reduction): ``column_remap`` makes each pass uniform over the block, R rows
  of threads split the planes, a barrier ends the pass;
* a per-window mean over a 2-D grid flattened by hand (``(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x
  + threadIdx.x``, launched on a real 2-D grid), the item divided down in place: ``lane_remap`` gives each a
  warp;
* causal attention scores (llm.c's ``attention_query_key_kernel1``): a masked item stores ``-inf`` before
  the loop it skips; ``lane_remap`` gives each (b, h, t, t2) a warp, lane 0 making the mask's store.

Every proposed variant must verify (the speedups are printed, not asserted: the forms are the point here).
Run on the GPU machine: ``pytest -m gpu tests/test_rules_remap_wide_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.5)

PLANE_MEAN = """// @warpforge size NI = 4
// @warpforge size P = 1024
// @warpforge size HW = 196
// @warpforge arg img: in float[NI*P*HW] normal(0, 1)
// @warpforge arg res: out float[NI*HW]
// @warpforge arg images = NI
// @warpforge arg planes = P
// @warpforge arg pixels = HW
// @warpforge launch grid=cdiv(NI * HW, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void plane_mean(const float* img, float* res, int images, int planes, int pixels) {
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < images * pixels; e += blockDim.x * gridDim.x) {
    const int im = e / pixels;
    const int px = e - im * pixels;
    float tot = 0.0f;
    for (int pl = 0; pl < planes; ++pl) tot += img[(im * planes + pl) * pixels + px];
    res[e] = tot / planes;
  }
}
"""

WINDOW_MEAN = """// @warpforge size NW = 8192
// @warpforge size L = 1000
// @warpforge arg src: in float[NW*L] normal(0, 1)
// @warpforge arg dst: out float[NW*2]
// @warpforge arg count = NW
// @warpforge arg len = L
// @warpforge launch grid=(cdiv(NW, 256), 2), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void window_mean(const float* src, float* dst, int count, int len) {
  int w = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= count * 2) return;
  int half = w % 2;
  w /= 2;
  float acc = 0.0f;
  for (int j = half; j < len; j += 1) acc += src[w * len + j];
  dst[w * 2 + half] = acc / len;
}
"""
#: causal attention scores as llm.c's first version writes them (one thread per (b, h, t, t2), a masked item
#: stores -inf and leaves before its dot product): lane 0 makes the mask's store for the warp
ATTENTION_SCORES = """// @warpforge size NB = 4
// @warpforge size NT = 256
// @warpforge size NC = 768
// @warpforge size NHEADS = 12
// @warpforge arg preatt: out float[NB*NHEADS*NT*NT]
// @warpforge arg inp: in float[NB*NT*3*NC] normal(0, 1)
// @warpforge arg B = NB
// @warpforge arg T = NT
// @warpforge arg C = NC
// @warpforge arg NH = NHEADS
// @warpforge launch grid=cdiv(NB*NHEADS*NT*NT, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void attention_scores(float* preatt, const float* inp, int B, int T, int C, int NH) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < B * NH * T * T) {
    int t2 = idx % T;
    int t = (idx / T) % T;
    if (t2 > t) {
      preatt[idx] = -INFINITY;
      return;
    }
    int h = (idx / (T * T)) % NH;
    int b = idx / (NH * T * T);
    int C3 = C * 3;
    int hs = C / NH;
    const float* query_t = inp + b * T * C3 + t * C3 + h * hs;
    const float* key_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C;
    float val = 0.0f;
    for (int i = 0; i < hs; i++) val += query_t[i] * key_t2[i];
    val *= 1.0 / sqrtf(hs);
    preatt[idx] = val;
  }
}
"""


@pytest.mark.parametrize(("text", "kernel", "family"), [
    (PLANE_MEAN, "plane_mean", "column_remap"),
    (WINDOW_MEAN, "window_mean", "lane_remap"),
    (ATTENTION_SCORES, "attention_scores", "lane_remap"),
])
def test_new_forms_verify_against_the_original(gpu_backend: Backend, tmp_path: Path, text: str, kernel: str,
                                               family: str) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {family})
    assert children, errors
    speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
