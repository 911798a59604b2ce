"""Device buffers on the CPU stand-in for pycuda (``fake_pycuda``), loaded in this process (CPU, CI).

- ``inputs.poison_memset``: one memset leaves exactly the host's poison (``poison_array``), queued or at once;
- ``device_inputs.fill_buffers`` (the one-launch harnesses) leaves what ``inputs.initial_buffers`` describes;
- ``device_inputs.load``: the self-test's scratch buffers come from the caller's allocator when it passes one
  (the worker's pool) and every one is given back; a module without the generator falls back with a reason.

The stand-in is loaded from its file under a private name, so no real ``pycuda`` is shadowed and each test
gets fresh device memory.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import numpy as np
import pytest

from conftest import ROOT
from warpforge.gpu import device_inputs
from warpforge.gpu.inputs import ArgLayout, Layout, initial_buffers, poison_array, poison_memset, storage_dtype

FAKE_DRIVER = ROOT / "tests" / "fake_pycuda" / "pycuda" / "driver.py"


@pytest.fixture
def fake() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wf_fake_driver_under_test", FAKE_DRIVER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _read(fake: ModuleType, ptr: int, nbytes: int) -> np.ndarray:
    out = np.empty(nbytes, dtype=np.uint8)
    fake.memcpy_dtoh(out, ptr)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "uint64"])
@pytest.mark.parametrize("queued", [False, True])
def test_poison_memset_leaves_the_hosts_poison(fake: ModuleType, dtype: str, queued: bool) -> None:
    count = 37
    nbytes = count * storage_dtype(dtype).itemsize
    alloc = fake.mem_alloc(nbytes + 8)
    ptr = int(alloc)
    fake.memset_d8(ptr, 0x11, nbytes + 8)
    poison_memset(fake, ptr, nbytes, dtype, fake.Stream() if queued else None)
    got = _read(fake, ptr, nbytes + 8)
    assert got[:nbytes].tobytes() == poison_array(dtype, count).tobytes()
    assert np.all(got[nbytes:] == 0x11)  # not a byte past the buffer


def test_poison_memset_of_nothing_touches_nothing(fake: ModuleType) -> None:
    alloc = fake.mem_alloc(16)
    fake.memset_d8(int(alloc), 0x22, 16)
    poison_memset(fake, int(alloc), 0, "float32")
    assert np.all(_read(fake, int(alloc), 16) == 0x22)


def test_generator_self_test_uses_the_callers_allocator_and_gives_every_buffer_back(fake: ModuleType) -> None:
    made: list[int] = []
    given_back: list[int] = []

    def alloc(nbytes: int) -> int:
        ptr = int(fake.mem_alloc(nbytes))
        made.append(ptr)
        return ptr

    def release(ptr: int) -> None:
        given_back.append(ptr)

    gen, note = device_inputs.load(fake, b"wf_generate", 4, fake.Stream(), alloc, release)
    assert gen is not None and "GPU" in note, note
    assert len(made) == len(device_inputs.SELFTEST_CASES)  # one scratch buffer per case, all from `alloc`
    assert sorted(given_back) == sorted(made)
    assert gen.stream is not None  # the worker's stream: generation is queued behind its other work


def test_generator_self_test_frees_its_own_buffers_without_an_allocator(fake: ModuleType) -> None:
    before = set(fake._S.allocs)
    gen, _ = device_inputs.load(fake, b"wf_generate", 4)
    assert gen is not None
    assert set(fake._S.allocs) == before


def test_a_module_without_the_generator_falls_back_to_the_host_with_the_reason(fake: ModuleType) -> None:
    gen, note = device_inputs.load(fake, b"wf_compare_4", 4)
    assert gen is None and "unavailable" in note and "wf_generate" in note
    gen, note = device_inputs.load(fake, None, 4)
    assert gen is None and "host" in note


@pytest.mark.parametrize("on_device", [False, True])
def test_fill_buffers_leaves_what_initial_buffers_describes(fake: ModuleType, on_device: bool) -> None:
    """The one-launch harnesses' buffers (``fill_buffers``) hold the host's picture of them: inputs drawn for
    the seed, outputs poisoned through ``poison_memset``, whether the inputs are drawn on the device or not."""
    lay = Layout("spec", (ArgLayout("x", "in", "float32", 1001, dist=("normal", 0.0, 1.0)),
                          ArgLayout("h", "out", "float16", 333), ArgLayout("b", "out", "uint8", 77),
                          ArgLayout("acc", "inout", "int32", 5, dist=("zeros", 0.0, 0.0)),
                          ArgLayout("k", "scalar", "int32", value=3)))
    gen = device_inputs.load(fake, b"wf_generate", 4)[0] if on_device else None
    assert on_device == (gen is not None)
    allocs = {a.name: fake.mem_alloc(a.nbytes) for a in lay.buffers}
    device_inputs.fill_buffers(fake, lay, 9, allocs, gen)
    for name, want in initial_buffers(lay, 9).items():
        got = _read(fake, int(allocs[name]), want.nbytes)
        assert got.tobytes() == want.tobytes(), name
