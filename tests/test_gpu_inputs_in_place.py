"""GPU tests of read-only inputs shared in place with a write check (issue 17 item 1).

- the device checksum (``wf_checksum``) equals the host's (``compare.checksum``) and changes after a one-bit
  change at the first, a middle and the last byte, at lengths that are and are not multiples of 8, small and
  large (many blocks); the worker's start-up check of it passed;
- a candidate that writes one element of its read-only input, and whose outputs match the original's on
  every call, is rejected with the message, and the next candidate verifies (the written inputs were drawn
  again);
- an original that writes a buffer its spec calls ``in`` (a scratch buffer) still verifies, with one note, and
  its candidates are compared on correct inputs (a right one passes, a wrong one does not);
- the worker passes a read-only input to consecutive runs of one seed in place and fresh outputs each time.

The adversarial candidate is also in the shipped suite (``selftest/adversarial/gelu_writes_input.cu``), which
``tests/test_gpu_engine.py`` runs. Run on the GPU machine: ``pytest -m gpu tests/test_gpu_inputs_in_place.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu
_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)

from warpforge.compiler.build import compile_cubin  # noqa: E402
from warpforge.cuda.candidate import candidate_from_variant  # noqa: E402
from warpforge.gpu import compare as cmp  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.inputs import ArgLayout, Layout  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402
from warpforge.selftest import ADVERSARIAL, ORIGINALS  # noqa: E402

T = TypeVar("T")
_LOOP = asyncio.new_event_loop()
SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.6))


def run(coro: Coroutine[Any, Any, T]) -> T:
    return _LOOP.run_until_complete(coro)


@pytest.fixture(scope="module")
def cubin() -> bytes:
    res = compile_cubin(cmp.DEVICE_SOURCE, filename="warpforge_compare.cu")
    assert res.ok, [m.text for m in res.messages]
    return res.cubin


@pytest.fixture(scope="module")
def engine(cubin: bytes) -> Iterator[Any]:
    from warpforge.gpu.worker import Engine

    eng = Engine(0)
    eng._setup_compare({"cubin": cubin})
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


# --------------------------------------------------------------------------- the checksum
def _device_sums(engine: Any, arrays: list[np.ndarray]) -> list[int]:
    bufs = [engine._alloc(a.nbytes, guarded=True) for a in arrays]
    try:
        for b, a in zip(bufs, arrays, strict=True):
            if a.nbytes:
                engine.cuda.memcpy_htod(b.ptr, a)
        sums: list[int] = engine._checksums(bufs, 30.0)
        return sums
    finally:
        engine._retire(bufs)


def test_the_worker_checked_its_device_checksum(engine: Any) -> None:
    assert engine.sum_fn is not None, engine.sum_note
    assert "in place" in engine.sum_note


@pytest.mark.parametrize("n", [1, 7, 8, 13, 4096, 4099, (1 << 20) + 3, (1 << 27) + 5])
def test_device_checksum_equals_the_hosts_and_sees_one_bit(engine: Any, n: int) -> None:
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    variants = [data, data.copy()]
    for at in (0, n // 2, n - 1):
        changed = data.copy()
        changed[at] ^= 0x01
        variants.append(changed)
    dev = _device_sums(engine, variants)
    assert dev[0] == dev[1] == cmp.checksum(data)  # identical buffers, identical sums, the host's
    assert all(d != dev[0] for d in dev[2:]), dev  # first, middle, last byte
    if n < (1 << 27):
        assert dev[2:] == [cmp.checksum(v) for v in variants[2:]]


# --------------------------------------------------------------------------- the worker
def test_consecutive_runs_share_the_input_and_get_fresh_outputs(engine: Any, cubin: bytes) -> None:
    src = ('extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)\n'
           "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n")
    res = compile_cubin(src, filename="saxpy_in_place.cu")
    assert res.ok, [m.text for m in res.messages]
    n = (1 << 20) + 7
    lay = Layout("spec", (ArgLayout("n", "scalar", "int32", value=n), ArgLayout("a", "scalar", "float32", value=2.0),
                          ArgLayout("x", "in", "float32", n, dist=("uniform", -1.0, 1.0)),
                          ArgLayout("y", "inout", "float32", n, dist=("uniform", -1.0, 1.0))))
    ref = {"key": "saxpy-in-place", "cubin": res.cubin, "symbol": "saxpy",
           "launch": {"spec": [[(n + 255) // 256], [256], 0]}}
    seen: list[tuple[int, int]] = []
    real = engine._launch

    def spy(mod: Any, la: Any, layout: Layout, ptrs: dict[str, int]) -> None:
        seen.append((ptrs["x"], ptrs["y"]))
        real(mod, la, layout, ptrs)

    engine._launch = spy
    try:
        r, fatal = engine.dispatch({"op": "check", "problem": {"id": "in-place", "layouts": {"spec": lay},
                                                               "tolerances": {"y": [1e-6, 1e-6]}},
                                    "oracle": ref, "subject": None, "runs": [["spec", 1]],
                                    "determinism": ["spec", 1], "kernel_timeout": 4.0})
    finally:
        engine._launch = real
    assert r["status"] == "ok" and not fatal, r
    assert r["runs"][0]["guard"] == [] and r["original_writes"] == []
    assert len(seen) == 3 and len({x for x, _ in seen}) == 1  # oracle, subject, determinism: one `x`
    assert len({y for _, y in seen}) == 3  # and three fresh `y`
    prob = engine.problems["in-place"]
    assert seen[0][0] == prob.pristine[("spec", 1, False)]["x"].ptr


# --------------------------------------------------------------------------- the evaluator
def test_a_candidate_writing_one_element_of_its_input_is_rejected(backend: Backend) -> None:
    ev = Evaluator(ORIGINALS / "gelu.cu", "gelu_forward", backend=backend, settings=SETTINGS)
    base = run(ev.baseline())
    assert base.status == "ok", base.reason
    bad = candidate_from_variant(ev.text, (ADVERSARIAL / "gelu_writes_input.cu").read_text(), "gelu_forward")
    e = run(ev.evaluate(bad))
    assert e.status == "rejected", (e.status, e.reason)
    assert "writes its input `inp` (the spec lists it read-only; the original leaves it unchanged)" in e.reason
    good = run(ev.evaluate(ev.original.derive(block=("512",), grid=("cdiv(N, 512)",))))
    assert good.status == "ok", good.reason  # on inputs drawn again, not the ones the cheat changed


SCRATCH = """\
// @warpforge size N = 1 << 22
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg tmp: in float[N] uniform(-1, 1)
// @warpforge arg out: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-6 atol=1e-6
__global__ void twice_plus_one(const float* x, float* tmp, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        tmp[i] = 2.0f * x[i];
        out[i] = tmp[i] + 1.0f;
    }
}
"""


def test_an_original_writing_its_in_buffer_verifies_with_a_note(backend: Backend, tmp_path: Path) -> None:
    path = tmp_path / "scratch.cu"
    path.write_text(SCRATCH)
    ev = Evaluator(path, "twice_plus_one", backend=backend, settings=SETTINGS)
    note = ("the original kernel writes `tmp`, which the spec lists as an input: it is copied for every run; "
            "mark it `inout` in the spec")
    base = run(ev.baseline())
    assert base.status == "ok", base.reason
    assert base.notes.count(note) == 1, base.notes
    right = run(ev.evaluate(ev.original.derive(block=("128",), grid=("cdiv(N, 128)",))))
    assert right.status == "ok", right.reason
    assert note not in right.notes  # told once
    # a candidate that reads `tmp` without writing it first is compared on the drawn `tmp`, which the original
    # never saw: its outputs differ (were the inputs left as the original wrote them, it would pass)
    stale = ev.original.derive(source=ev.original.source.replace("tmp[i] = 2.0f * x[i];", ""))
    wrong = run(ev.evaluate(stale))
    assert wrong.status == "incorrect", (wrong.status, wrong.reason)
    assert "`x`" not in wrong.reason and "writes its input" not in wrong.reason
