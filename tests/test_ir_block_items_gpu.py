"""On the GPU: a block-per-column bias gradient (one block per column, its threads striding down the rows, a
shared-memory tree, thread 0 storing; written in tests/test_ir_block_items.py) lowered by ``block_items`` to the
thread-per-column loop, from which ``column_split`` proposes its variants. At the size of a GPT-2 bias gradient
(32768 rows of 768 columns) every variant must verify against the original through the real evaluator, and one
must be faster: the original's warps read 32 rows of one column (a sector per thread), the split's read 32
neighbouring columns of a row. The speedups are printed (``pytest -s``). Run on the GPU machine:
``pytest -m gpu tests/test_ir_block_items_gpu.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_ir_block_items import COLSUM  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(6.0, 120.0, 0.5)

#: the real size: B * T = 32768 rows (GPT-2 at B = 32, T = 1024), OC = 768 columns, 512 threads per column.
#: The tolerance is the sum's: a column of 32768 values in [-1, 1] sums to about +-100, and the original folds its
#: 512 partials (each about +-8) in a float tree, so it is itself off by ~1e-5 absolute; a column summing near zero
#: then differs from the variant's (double) fold by more than the default atol of 1e-5 (seen on an H200: 1.3e-5)
REAL = (COLSUM.replace("size R = 2048", "size R = 32768").replace("size C = 384", "size C = 768")
        .replace("size NT = 256 fixed", "size NT = 512 fixed")
        .replace("// @warpforge launch", "// @warpforge tol rtol=1e-4 atol=1e-3\n// @warpforge launch"))


def test_column_split_of_the_lowered_block_per_column_sum_verifies_and_is_faster(gpu_backend: Backend,
                                                                                 tmp_path: Path) -> None:
    assert "size R = 32768" in REAL and "size C = 768" in REAL and "size NT = 512 fixed" in REAL
    assert "tol rtol=1e-4 atol=1e-3" in REAL
    children, errors = proposed(tmp_path / "k.cu", REAL, "col_bias_grad", {"column_split"})
    assert children, errors
    got = speedups(gpu_backend, tmp_path / "k.cu", "col_bias_grad", children, SETTINGS)
    assert got and max(got.values()) > 1.0, got
