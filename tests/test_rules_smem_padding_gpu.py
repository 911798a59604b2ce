"""On the GPU: bank-conflict padding (``smem_padding``) verifies and makes a conflicted transpose faster.

Self-written kernels that stage through shared memory with a bank conflict the padding removes: a 32x32 float
transpose tile read by columns (32-way: every lane in one bank), the same with doubles (16-way) and a
work-efficient scan (the index padded, ``i + (i >> 5)``; verified, its time printed: one block of 1024
elements is launch-bound, so no speedup is claimed). Each child is evaluated as the search evaluates a candidate:
outputs compared with the original's on random inputs at the spec size and at the perturbed size, then timed.
Run on the GPU machine: ``pytest -m gpu tests/test_rules_smem_padding_gpu.py -s``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from test_rules_smem_padding import DTILE, SCAN  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(8.0, 120.0, 1.0)

#: a conflicted transpose large enough for the shared-memory passes to show (8192 x 8192 floats)
TRANSPOSE = """\
// @warpforge size N = 8192
// @warpforge arg in: in float[N*N]
// @warpforge arg out: out float[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(cdiv(N, 32), cdiv(N, 32)), block=(32, 32)
__global__ void k(const float* in, float* out, int n)
{
    __shared__ float tile[32][32];
    int x = blockIdx.x * 32 + threadIdx.x;
    int y = blockIdx.y * 32 + threadIdx.y;
    if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[(size_t)y * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    if (x < n && y < n) out[(size_t)y * n + x] = tile[threadIdx.x][threadIdx.y];
}
"""

CASES = {
    "transpose_f32": (TRANSPOSE, "k", True),
    "transpose_f64": (DTILE.replace("size N = 1024", "size N = 4096"), "dtr", True),
    "scan_block": (SCAN, "prescan", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_padding_verifies_and_the_transpose_is_faster(gpu_backend: Backend, tmp_path: Path, case: str) -> None:
    text, kernel, faster = CASES[case]
    children, errors = proposed(tmp_path / f"{case}.cu", text, kernel, {"smem_padding"})
    assert [c.steps for c in children] == [("smem_padding:pad",)], (case, errors)
    measured = speedups(gpu_backend, tmp_path / f"{case}.cu", kernel, children, SETTINGS)
    if faster:
        assert measured and max(measured.values()) > 1.0, (case, measured)
