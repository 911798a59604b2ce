"""On the GPU: the text ``offset_stepped_loop`` lowers each kernel of tests/test_ir_offset_loop.py to is verified
against the original by the real evaluator, at the spec size (1000 columns: a partial last stride) and the
perturbed one, as the search verifies a candidate. Run on the GPU machine:
``pytest -m gpu tests/test_ir_offset_loop_gpu.py``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import settings, speedups  # noqa: E402
from test_ir_offset_loop import CASES, lowered  # noqa: E402
from warpforge.cuda import SourceText, parse  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402
from warpforge.policy.offline import OfflinePolicy  # noqa: E402
from warpforge.spec.resolve import load_spec  # noqa: E402


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_offset_loop_verifies(gpu_backend: Backend, tmp_path: Path, case: str) -> None:
    text = CASES[case]
    path = tmp_path / "k.cu"
    path.write_text(text, encoding="utf-8")
    src = SourceText(text)
    model = parse(src.data)
    pol = OfflinePolicy(str(path), src, model, model.require("k", str(path)), load_spec(str(path), "k", text=text))
    low = lowered(text)
    child = replace(pol.root_candidate(), source=low.text, steps=("offset_stepped_loop",), family="lowered")
    speedups(gpu_backend, path, "k", [child], settings(6.0, 90.0, 0.5))
