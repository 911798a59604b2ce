"""On the GPU: key-aggregated atomics (``atomic_aggregate:key``/``active``) verify against the original and pay.

Self-written kernels in the spellings the wide yardstick found in other people's code: a grid-stride histogram
with few, popular bins (each warp's lanes mostly hit the same bin, so grouping them by address removes most of
the atomics), a float scatter behind an early return (reassociated sums, within the spec's tolerance) and a
count/max into one address from inside a loop. Each child is evaluated as the search evaluates a candidate:
outputs compared with the original's on random inputs at the spec size and at the perturbed size, then timed.
Every variant must verify; the contended histogram's must be faster.
Run on the GPU machine: ``pytest -m gpu tests/test_rules_atomics_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rules import skip_without_gpu

pytestmark = pytest.mark.gpu

skip_without_gpu()

from gpu_rules import proposed, settings, speedups  # noqa: E402
from warpforge.gpu.evaluator import Backend  # noqa: E402

SETTINGS = settings(8.0, 120.0, 1.0)

KERNELS: dict[str, str] = {
    # 8 bins of a value range most elements share: a warp's 32 updates go to one or two addresses
    "contended_histogram": """// @warpforge size N = 1 << 24
// @warpforge arg codes: in int[N] int(0, 15)
// @warpforge arg counts: inout unsigned[8] zeros
// @warpforge arg total = N
// @warpforge launch grid=1056, block=256
__global__ void k(const int* codes, unsigned int* counts, int total) {
  for (int e = threadIdx.x + blockIdx.x * blockDim.x; e < total; e += blockDim.x * gridDim.x) {
    const int c = codes[e];
    if (c >= 12) continue;
    atomicAdd(&counts[c / 2 % 8], 1);
  }
}
""",
    "float_scatter": """// @warpforge size N = 1 << 22
// @warpforge size M = 64
// @warpforge template T = float
// @warpforge arg upd: in float[N]
// @warpforge arg where: in int[N] int(0, 63)
// @warpforge arg grad: inout float[M] zeros
// @warpforge arg count = N
// @warpforge launch grid=cdiv(N, 128), block=128
// @warpforge tol rtol=1e-3 atol=1e-1
template <typename T>
__global__ void k(const T* upd, const int* where, T* grad, int count) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= count) {
    return;
  }
  T* row = grad + where[t];
  atomicAdd(row, upd[t] * (T)0.5);
}
""",
    "uniform_loop": """// @warpforge size N = 1 << 22
// @warpforge arg vals: in int[N] int(-1000, 1000)
// @warpforge arg stats: inout int[2] zeros
// @warpforge arg seen: inout uint64[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 512), block=(32, 4)
__global__ void k(const int* vals, int* stats, unsigned long long* seen, int n) {
  int base = (blockIdx.x * 128 + threadIdx.y * 32 + threadIdx.x) * 4;
  for (int j = 0; j < 4; ++j) {
    if (base + j >= n) break;
    int v = vals[base + j];
    if (v > 0) {
      atomicAdd(stats, v);
      atomicMax(stats + 1, v);
    }
    atomicAdd(seen, 1ull);
  }
}
""",
}




@pytest.mark.parametrize("case", sorted(KERNELS))
def test_key_aggregated_atomics_verify_and_the_contended_histogram_is_faster(gpu_backend: Backend, tmp_path: Path,
                                                                            case: str) -> None:
    children, errors = proposed(tmp_path / f"{case}.cu", KERNELS[case], "k", {"atomic_aggregate"},
                                keep=lambda c: c.steps[-1].split(":")[1] in ("key", "active"))
    assert children, (case, errors)
    measured = speedups(gpu_backend, tmp_path / f"{case}.cu", "k", children, SETTINGS)
    if case == "contended_histogram":
        assert measured and max(measured.values()) > 1.0, (case, measured)
