"""On the GPU: warp_reduce's rewrite of a serial fold by one thread (``rules/warp_reduce/fold.py``) computes what
the original computes, judged by the real evaluator (the search's own build, poisoned-output correctness runs at
the spec size and the perturbed size, timing).

The kernels are the CPU test's (``test_rules_warp_reduce_fold.py``): a per-channel mean folded into a global
element then scaled (float sum, reassociated: within the spec's tolerance), a bias gradient added to its old
value, two integer sums folded from element 1 (exact), a float max (exact), a fold per item through an index the loop
steps itself (`sid += 2`); and the per-channel mean at a size
where the serial fold is most of the kernel's time (256 channels of 52 x 52, darknet's batch-norm shape), whose
speedup the run prints. Run on the GPU machine: ``pytest -m gpu -s tests/test_rules_warp_reduce_fold_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_rules_warp_reduce_fold import (  # noqa: E402
    BIAS_GRAD,
    BLOCK_MAX,
    CHANNEL_MEAN,
    OFFSET_VIEW,
    PAIRS_FROM_ONE,
    STEPPED_INDEX,
)
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.3)

#: few elements per thread, many channels: the 512-long serial fold dominates
SMALL_MAPS = (CHANNEL_MEAN.replace("size C = 64", "size C = 256").replace("size B = 4", "size B = 1")
              .replace("size S = 3000", "size S = 2704"))


@pytest.mark.parametrize(("text", "kernel"), [
    (CHANNEL_MEAN, "channel_mean"),
    (SMALL_MAPS, "channel_mean"),
    (BIAS_GRAD, "bias_grad"),
    (PAIRS_FROM_ONE, "pair_sums"),
    (BLOCK_MAX, "block_max"),
    (STEPPED_INDEX, "point_grads"),
    (OFFSET_VIEW, "point_grads_view"),
])
def test_rewritten_fold_verifies(gpu_backend: Backend, tmp_path: Path, text: str, kernel: str) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {"warp_reduce"})
    assert {c.steps[-1] for c in children} == {"warp_reduce:warps"}, errors
    speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
