"""On the GPU: ``atomic_aggregate`` on half, bfloat16 and llm.c's ``floatX`` (``__nv_bfloat16`` under its define)
bias gradients (tests/test_rules_atomics_types.py) verifies against the original: every child is evaluated as the
search evaluates a candidate (random inputs, the spec size and the perturbed size, the spec's float16/bfloat16
tolerance: the shuffles reassociate the half-precision sums). Run on the GPU machine:
``pytest -m gpu tests/test_rules_atomics_types_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_rules_atomics_types import CASES  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402


@pytest.mark.parametrize("case", sorted(CASES))
def test_half_and_bfloat16_aggregates_verify(gpu_backend: Backend, tmp_path: Path, case: str) -> None:
    children, errors = proposed(tmp_path / "k.cu", CASES[case], "k", {"atomic_aggregate"})
    assert children, errors
    speedups(gpu_backend, tmp_path / "k.cu", "k", children, settings(8.0, 120.0, 0.5))
