"""On the GPU: smem_transpose's tile verifies on every transpose style, judged by the real evaluator.

The kernels are ``transpose_kernels.TRANSPOSES`` (a 2-D grid behind an exit, a strided read with a typedef'd
element, a template read through ``__ldg``, cuda-samples' per-thread tile loop, Rodinia kmeans' thread per item with
a field loop in both directions, a flat index split by ``/`` and ``%``). Each is evaluated as the search evaluates a
candidate: outputs compared with the original's on random inputs at the spec size and at the perturbed odd size
(partial tiles), then timed against it. Every variant must verify; the speedups are printed (a speed figure is
a recorded benchmark, not a test's pass condition: ``benchmarks/RESULTS.md``). Run on the GPU machine:
``pytest -m gpu -s tests/test_rules_transpose_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from transpose_kernels import TRANSPOSES  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(8.0, 120.0, 1.0)


@pytest.mark.parametrize("case", sorted(TRANSPOSES))
def test_tiled_transposes_verify(gpu_backend: Backend, tmp_path: Path, case: str) -> None:
    children, errors = proposed(tmp_path / f"{case}.cu", TRANSPOSES[case], "k", {"smem_transpose"})
    assert len(children) == 2, (case, errors)
    speedups(gpu_backend, tmp_path / f"{case}.cu", "k", children, SETTINGS)
