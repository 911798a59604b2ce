"""On the GPU: warp_reduce's rewrite of the trees people write computes what the original computes, judged by
the real evaluator (the search's own build, poisoned-output correctness runs at the spec size and the
perturbed size, timing).

The kernels are the CPU test's (``test_rules_warp_reduce.py``): an interleaved tree (doubling stride, modulo
test, an integer sum: exact), an interleaved tree with a strided index (a float max: exact), a float sum
over an interleaved tree (reassociated: within the spec's tolerance), the barrier first with a select-min
through temporaries, and two arrays folded by one tree inside a block-per-row loop. Every proposed variant
must verify. Run on the GPU machine: ``pytest -m gpu tests/test_rules_warp_reduce_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_rules_warp_reduce import (  # noqa: E402
    BARRIER_FIRST_MIN,
    INTERLEAVED_IDX,
    INTERLEAVED_MOD,
    ROWS_TWO,
)
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.3)

#: a float sum over an interleaved tree (``s += s``, ``!(i % (2 * s))`` on the flat index): the halving order
#: differs from the interleaved one, so the spec's tolerance applies
INTERLEAVED_FLOAT = """\
// @warpforge size N = 1 << 20
// @warpforge arg src: in float[N]
// @warpforge arg dst: out float[N / 128]
// @warpforge launch grid=N / 128, block=128, smem=128 * sizeof(float)
// @warpforge tol rtol=1e-4 atol=1e-3
__global__ void fold_mod_f(const float* src, float* dst)
{
    extern __shared__ float part[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = src[i] * 0.5f;
    __syncthreads();
    for (int s = 1; s < blockDim.x; s += s) {
        if (!(i % (2 * s))) {
            part[threadIdx.x] += part[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = part[0];
}
"""




@pytest.mark.parametrize(("text", "kernel"), [
    (INTERLEAVED_MOD, "fold_mod"),
    (INTERLEAVED_FLOAT, "fold_mod_f"),
    (INTERLEAVED_IDX, "fold_idx"),
    (BARRIER_FIRST_MIN, "fold_min"),
    (ROWS_TWO, "row_moments"),
])
def test_rewritten_tree_verifies(gpu_backend: Backend, tmp_path: Path, text: str, kernel: str) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {"warp_reduce"})
    assert {c.steps[-1] for c in children} == {"warp_reduce:tail", "warp_reduce:warps"}, errors
    speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
