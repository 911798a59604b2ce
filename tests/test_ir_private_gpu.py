"""On the GPU: the remaps that ``loop_private_scalars`` and the member-wise accumulators unlock verify (Rodinia
cfd's C89 neighbour loop, written here in tests/test_ir_private.py): every proposed candidate of ``lane_remap`` /
``column_remap`` is checked against the original by the real evaluator at the spec size and the perturbed size.
The speedups are printed (``pytest -s``). Run on the GPU machine: ``pytest -m gpu tests/test_ir_private_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_ir_private import FLUX3, NEIGHBOURS  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.5)


@pytest.mark.parametrize(("text", "family"), [
    (NEIGHBOURS.replace("AT", "i * nnb + j"), "lane_remap"),
    (NEIGHBOURS.replace("AT", "i + j * n"), "column_remap"),
    (FLUX3, "column_remap"),
])
def test_private_scalars_remapped_verify(gpu_backend: Backend, tmp_path: Path, text: str, family: str) -> None:
    children, errors = proposed(tmp_path / "k.cu", text, "k", {family})
    assert children, errors
    assert speedups(gpu_backend, tmp_path / "k.cu", "k", children, SETTINGS) is not None
