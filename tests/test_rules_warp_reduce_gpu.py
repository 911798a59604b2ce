"""On the GPU: warp_reduce's rewrite of the trees people write computes what the original computes, judged by
the real evaluator (the search's own build, poisoned-output correctness runs at the spec size and the
perturbed size, timing).

The kernels are the CPU test's (``test_rules_warp_reduce.py``): an interleaved tree (doubling stride, modulo
test, an integer sum: exact), an interleaved tree with a strided index (a float max: exact), a float sum
over an interleaved tree (reassociated: within the spec's tolerance), the barrier first with a select-min
through temporaries, and two arrays folded by one tree inside a block-per-row loop. Every proposed variant
must verify. Run on the GPU machine: ``pytest -m gpu tests/test_rules_warp_reduce_gpu.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)

from test_rules_warp_reduce import (  # noqa: E402
    BARRIER_FIRST_MIN,
    INTERLEAVED_IDX,
    INTERLEAVED_MOD,
    ROWS_TWO,
)
from warpforge.cuda import SourceText, parse  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402
from warpforge.policy.offline import OfflinePolicy  # noqa: E402
from warpforge.spec.resolve import load_spec  # noqa: E402

SETTINGS = EngineSettings(kernel_timeout=6.0, compile_timeout=90.0, timing=TimingSettings(max_seconds=0.3))
T = TypeVar("T")
_LOOP = asyncio.new_event_loop()

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


def run(coro: Coroutine[Any, Any, T]) -> T:
    return _LOOP.run_until_complete(coro)


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


@pytest.mark.parametrize(("text", "kernel"), [
    (INTERLEAVED_MOD, "fold_mod"),
    (INTERLEAVED_FLOAT, "fold_mod_f"),
    (INTERLEAVED_IDX, "fold_idx"),
    (BARRIER_FIRST_MIN, "fold_min"),
    (ROWS_TWO, "row_moments"),
])
def test_rewritten_tree_verifies(backend: Backend, tmp_path: Path, text: str, kernel: str) -> None:
    path = tmp_path / f"{kernel}.cu"
    path.write_text(text, encoding="utf-8")
    src = SourceText(text)
    model = parse(src.data)
    k = model.require(kernel, str(path))
    pol = OfflinePolicy(str(path), src, model, k, load_spec(str(path), kernel, text=text), families={"warp_reduce"})
    children = [c for c in pol.propose_sync(pol.root_candidate()) if c.family == "warp_reduce"]
    assert {c.steps[-1] for c in children} == {"warp_reduce:tail", "warp_reduce:warps"}, pol.errors
    ev = Evaluator(path, kernel, backend=backend, settings=SETTINGS)
    base = run(ev.baseline())
    assert base.status == "ok", (base.status, base.reason)
    speedups: dict[str, float] = {}
    for child in children:
        e = run(ev.evaluate(child))
        assert e.status == "ok", (child.steps, e.status, e.reason, child.definition)
        if e.timing is not None and e.timing.speedup is not None:
            speedups["+".join(child.steps)] = e.timing.speedup.ratio
    print(f"\n{kernel}: " + ", ".join(f"{s} {v:.2f}x" for s, v in speedups.items()))
