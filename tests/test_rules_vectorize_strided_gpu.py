"""On the GPU: vectorize_strided's chunked loops compute what the originals compute, judged by the real
evaluator (the search's own build, poisoned-output correctness runs at the spec size and at the perturbed size,
where rows are not a multiple of the vector and the row offsets are not aligned to it, then timing).

* a block per row (llm.c's softmax kernel 3 shape, written here): four block-strided loops, two reductions;
* a warp per row in fp16 (eight halves per 16-byte access);
* on top of ``warp_per_row``'s own output for a thread-per-row softmax (the composition the search makes).

Every variant must verify; the speedups are printed (``pytest -s``), recorded in benchmarks/RESULTS.md.
Run on the GPU machine: ``pytest -m gpu tests/test_rules_vectorize_strided_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_rules_vectorize_strided import BLOCK_ROWS, rows  # noqa: E402
from warpforge.cuda import SourceText, parse  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402
from warpforge.policy.offline import OfflinePolicy  # noqa: E402
from warpforge.spec.resolve import load_spec  # noqa: E402

SETTINGS = settings(6.0, 90.0, 0.5)
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "kernel"), [(BLOCK_ROWS, "softmax_rows"), (rows("__half"), "scale_rows")])
def test_strided_vectors_verify(gpu_backend: Backend, tmp_path: Path, text: str, kernel: str) -> None:
    children, errors = proposed(tmp_path / f"{kernel}.cu", text, kernel, {"vectorize_strided"})
    assert children, errors
    measured = speedups(gpu_backend, tmp_path / f"{kernel}.cu", kernel, children, SETTINGS)
    assert measured


def test_on_top_of_warp_per_row(gpu_backend: Backend, tmp_path: Path) -> None:
    text = (ROOT / "kernels" / "softmax.cu").read_text(encoding="utf-8")
    path = tmp_path / "softmax.cu"
    rows_children, errors = proposed(path, text, "softmax_rows", {"warp_per_row", "vectorize_strided"},
                                     keep=lambda c: c.family == "warp_per_row")
    assert rows_children, errors
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("softmax_rows", str(path))
    pol = OfflinePolicy(str(path), src, model, k, load_spec(str(path), "softmax_rows", text=text),
                        families={"warp_per_row", "vectorize_strided"})
    # a warp per row with its own vector reads of the row, and without
    parents = [c for c in rows_children if c.steps[0] in ("warp_per_row:warp8_vec", "warp_per_row:warp8")]
    composed = [c for parent in parents for c in pol.propose_sync(parent) if c.family == "vectorize_strided"]
    assert composed, [c.steps for c in rows_children]
    measured = speedups(gpu_backend, path, "softmax_rows", parents + composed, SETTINGS)
    assert measured
