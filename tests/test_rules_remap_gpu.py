"""On the GPU: the remaps on the IR summary verify and pay off, judged by the real evaluator (the search's own
build, poisoned-output correctness runs at the spec size and the perturbed size, and timing).

* an embedding-style row copy (one thread per token writing its row of ``C``: the issue's 3.8x where the
  expert reached 36x): ``element_remap`` gives each token a warp or a block;
* a bias gradient summing a (B, T) nest per output channel (one thread per channel: 1.15x vs the expert's
  6.9x): ``column_remap`` splits the walk over rows of threads.

Every proposed variant must verify; the best must be clearly faster than the original.
Run on the GPU machine: ``pytest -m gpu tests/test_rules_remap_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.5)

EMBEDDING = """// @warpforge size B = 8
// @warpforge size T = 1024
// @warpforge size C = 768 fixed
// @warpforge size V = 50257 fixed
// @warpforge arg out: out float[B*T*C]
// @warpforge arg inp: in int[B*T] int(0, 50256)
// @warpforge arg tok_emb: in float[V*C] normal(0, 1)
// @warpforge arg pos_emb: in float[T*C] normal(0, 1)
// @warpforge arg B = B
// @warpforge arg T = T
// @warpforge arg C = C
// @warpforge launch grid=cdiv(B * T, 256), block=256
__global__ void embed(float* out, const int* inp, const float* tok_emb, const float* pos_emb, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T;
    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        float* row_out = out + b * T * C + t * C;
        int ix = inp[b * T + t];
        const float* tok_row = tok_emb + ix * C;
        const float* pos_row = pos_emb + t * C;
        for (int i = 0; i < C; i++) {
            row_out[i] = tok_row[i] + pos_row[i];
        }
    }
}
"""

BIAS_GRAD = """// @warpforge size B = 8
// @warpforge size T = 1024
// @warpforge size OC = 768
// @warpforge arg dbias: out float[OC]
// @warpforge arg dout: in float[B*T*OC] normal(0, 1)
// @warpforge arg B = B
// @warpforge arg T = T
// @warpforge arg OC = OC
// @warpforge launch grid=cdiv(OC, 128), block=128
// @warpforge tol rtol=1e-4 atol=2e-3
__global__ void bias_grad(float* dbias, const float* dout, int B, int T, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < OC) {
        double sum = 0.0;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                sum += dout[b * T * OC + t * OC + o];
            }
        }
        dbias[o] = sum;
    }
}
"""




@pytest.mark.parametrize(("text", "kernel", "family", "at_least"), [
    (EMBEDDING, "embed", "element_remap", 3.0),
    (BIAS_GRAD, "bias_grad", "column_remap", 2.0),
])
def test_remap_verifies_and_is_faster(gpu_backend: Backend, tmp_path: Path, text: str, kernel: str, family: str,
                                      at_least: float) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {family})
    assert children, errors
    measured = speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
    assert measured and max(measured.values()) >= at_least, measured
