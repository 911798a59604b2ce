"""The machine-wide cache of generated inputs that the GPU workers share (``gpu.input_cache``)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from warpforge.gpu import input_cache
from warpforge.gpu.inputs import ArgLayout, generate

BIG = ArgLayout("x", "in", "float32", 2 << 20)  # 8 MiB: above MIN_BYTES


@pytest.fixture(autouse=True)
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("WARPFORGE_INPUT_CACHE_MB", raising=False)
    return tmp_path / "cache"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.npy"))


def test_a_large_array_is_generated_once_and_then_read(private: Path) -> None:
    root = input_cache.cache_root()
    assert root == private / "inputs"
    first = input_cache.inputs_for(BIG, 3)
    want = generate(BIG, 3)
    assert np.array_equal(first, want) and first.dtype == want.dtype
    assert len(_files(root)) == 1
    again = input_cache.inputs_for(BIG, 3)
    assert isinstance(again, np.memmap) and np.array_equal(again, want)  # read, not generated
    other = input_cache.inputs_for(BIG, 4)  # another seed is another array
    assert not np.array_equal(other, want) and len(_files(root)) == 2
    assert not list(root.glob("*/*.tmp.npy"))


def test_small_arrays_and_a_zero_limit_bypass_the_cache(private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = ArgLayout("y", "in", "float32", 1000)
    assert np.array_equal(input_cache.inputs_for(small, 1), generate(small, 1))
    assert not _files(input_cache.cache_root())
    monkeypatch.setenv("WARPFORGE_INPUT_CACHE_MB", "0")
    assert np.array_equal(input_cache.inputs_for(BIG, 1), generate(BIG, 1))
    assert not _files(input_cache.cache_root())


def test_a_waiting_worker_takes_the_array_another_one_made(private: Path) -> None:
    # Hold the key's lock as a worker generating it would, publish a (marked) file, then release: the
    # waiting call must return that file instead of generating a second copy.
    root = input_cache.cache_root()
    key = input_cache._key(BIG, 9)
    path = root / key[:2] / f"{key}.npy"
    path.parent.mkdir(parents=True)
    marked = generate(BIG, 9)
    marked[0] = 12345.0  # what the "other worker" wrote; a fresh generation would not have it
    got: list[np.ndarray] = []
    with input_cache._locked(path.with_suffix(".lock")):
        t = threading.Thread(target=lambda: got.append(input_cache.inputs_for(BIG, 9)))
        t.start()
        time.sleep(0.3)
        assert not got  # blocked on the lock
        np.save(path, marked)
    t.join(10)
    assert got and got[0][0] == 12345.0


def test_a_file_that_does_not_match_its_key_is_made_again(private: Path) -> None:
    root = input_cache.cache_root()
    input_cache.inputs_for(BIG, 5)
    (f,) = _files(root)
    np.save(f, np.zeros(7, dtype=np.float32))  # wrong length
    assert np.array_equal(input_cache.inputs_for(BIG, 5), generate(BIG, 5))
    f.write_bytes(b"not an npy file")
    assert np.array_equal(input_cache.inputs_for(BIG, 5), generate(BIG, 5))


def test_the_least_recently_used_arrays_leave_first(private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_INPUT_CACHE_MB", "20")  # room for two 8 MiB arrays, not three
    root = input_cache.cache_root()
    input_cache.inputs_for(BIG, 1)
    time.sleep(0.02)
    input_cache.inputs_for(BIG, 2)
    time.sleep(0.02)
    input_cache.inputs_for(BIG, 1)  # used again: now the newest
    time.sleep(0.02)
    input_cache.inputs_for(BIG, 3)
    keys = {p.stem for p in _files(root)}
    assert keys == {input_cache._key(BIG, 1), input_cache._key(BIG, 3)}
    assert sum(os.path.getsize(p) for p in _files(root)) <= 20 << 20
    assert {p.stem for p in root.glob("*/*.lock")} == keys  # the evicted array's lock went with it
    # a writer that died left a temporary file: removed once it is old
    stale = root / "ab" / "dead.123.tmp.npy"
    stale.parent.mkdir(exist_ok=True)
    stale.write_bytes(b"partial")
    os.utime(stale, (time.time() - 2 * input_cache.STALE_TMP_SECONDS,) * 2)
    input_cache.inputs_for(BIG, 4)
    assert not stale.exists()


def test_an_unwritable_cache_still_gives_the_inputs(private: Path) -> None:
    private.mkdir(parents=True)
    (private / "inputs").write_text("a file where the cache directory should be")
    assert np.array_equal(input_cache.inputs_for(BIG, 2), generate(BIG, 2))
