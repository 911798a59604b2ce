"""On the GPU (issue 18, items 4 and 5): the kernel forms of ``tests/fixtures/forms`` run with the spec
inferred from their host code alone (typedef'd element types, a tag and an unnamed ``int`` passed by the
worker, a kernel templated on a ``__device__`` function, a functor and an integral-constant type, struct
fields allocated in another function, vectors), and a variant that spells the typedefs out, moves
``const`` or names an unnamed parameter verifies as the same kernel."""

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

from warpforge.cuda.candidate import Candidate, candidate_from_variant  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.reports import Evaluation  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402

FORMS = Path(__file__).resolve().parent / "fixtures" / "forms"
SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=60.0, timing=TimingSettings(max_seconds=0.4))
T = TypeVar("T")
_LOOP = asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return _LOOP.run_until_complete(coro)


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


def explain(e: Evaluation) -> str:
    return f"{e.status}: {e.reason} | notes: {e.notes}"


@pytest.mark.parametrize(("fixture", "kernel"), [
    ("templated.cu", "trimul_global"), ("templated.cu", "map_scaled"), ("templated.cu", "staged_copy"),
    ("launcher_struct.cu", "bias_relu"), ("launcher_vector.cu", "window_sum"),
])
def test_the_original_runs_with_its_inferred_spec(backend: Backend, fixture: str, kernel: str) -> None:
    ev = Evaluator(FORMS / fixture, kernel, backend=backend, settings=SETTINGS)
    e = run(ev.baseline())
    assert e.status == "ok", explain(e)


@pytest.mark.parametrize(("kernel", "old", "new"), [
    ("map_scaled", "__global__ void map_scaled(floatX const* x, floatX* y, index_t n)",
     "__global__ void map_scaled(const float* __restrict__ x, float* __restrict__ y, int n)"),
    ("staged_copy", "std::bool_constant<Atomic>, int /*unused*/, index_t n)",
     "std::bool_constant<Atomic> tag, int unused, int n)"),
])
def test_a_respelled_signature_verifies_as_the_same_kernel(backend: Backend, kernel: str, old: str, new: str) -> None:
    text = (FORMS / "templated.cu").read_text(encoding="utf-8")
    assert old in text
    ev = Evaluator(FORMS / "templated.cu", kernel, backend=backend, settings=SETTINGS)
    cand: Candidate = candidate_from_variant(text, text.replace(old, new), kernel)
    e = run(ev.evaluate(cand))
    assert e.status == "ok", explain(e)
