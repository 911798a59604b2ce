"""The counter-based input generator (``gpu/generator.py``) on the host, and its device source (CPU, CI).

The GPU half is checked against this one on the GPU (``test_gpu_inputs.py``) and by every worker at start;
here: the statistics of every distribution, that an element's value depends only on (seed, name, index),
the integer ranges, and that the device source builds with nvcc.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs_nvcc
from warpforge.gpu import generator
from warpforge.gpu.compare import DEVICE_SOURCE
from warpforge.gpu.device_inputs import SELFTEST_CASES
from warpforge.gpu.inputs import ArgLayout, InputError, bfloat16_to_float32, draw, generate, storage_dtype

N = 200_000


def floats(arg: ArgLayout, seed: int = 3) -> np.ndarray:
    x = generate(arg, seed)
    return bfloat16_to_float32(x).astype(np.float64) if arg.dtype == "bfloat16" else x.astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_uniform_fills_its_range_evenly(dtype: str) -> None:
    x = floats(ArgLayout("u", "in", dtype, N, dist=("uniform", -2.0, 6.0)))
    assert x.min() >= -2.0 and x.max() <= 6.0
    assert abs(x.mean() - 2.0) < 0.05 and abs(x.std() - 8 / np.sqrt(12)) < 0.03
    counts, _ = np.histogram(x, bins=16, range=(-2.0, 6.0))
    assert counts.min() > 0.9 * N / 16 and counts.max() < 1.1 * N / 16


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_normal_has_its_mean_spread_and_tails(dtype: str) -> None:
    x = floats(ArgLayout("n", "in", dtype, N, dist=("normal", 1.5, 2.0)))
    assert abs(x.mean() - 1.5) < 0.03 and abs(x.std() - 2.0) < 0.03
    z = (x - 1.5) / 2.0
    # a normal's shape, not merely its first two moments: tail masses and kurtosis
    assert 0.30 < np.mean(np.abs(z) > 1) < 0.336
    assert 0.040 < np.mean(np.abs(z) > 2) < 0.051
    assert abs(np.mean(z ** 4) - 3.0) < 0.1
    assert np.abs(z).max() > 3.5


def test_the_polynomial_log_and_cos_are_accurate() -> None:
    u = np.linspace(2.0 ** -53, 1.0, 100_001)
    assert np.max(np.abs(generator._log(u) - np.log(u))) < 1e-13
    v = np.linspace(0.0, 1.0, 100_001, endpoint=False)
    assert np.max(np.abs(generator._cos2pi(v) - np.cos(2 * np.pi * v))) < 1e-14


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64", "float32"])
def test_int_distribution_covers_exactly_its_range(dtype: str) -> None:
    arg = ArgLayout("i", "in", dtype, N, dist=("int", -0.5 if dtype.startswith(("int", "f")) else 0.0, 100.0))
    x = generate(arg, 1).astype(np.float64)
    lo = 0.0
    assert x.min() == lo and x.max() == 99.0 and np.all(x == np.floor(x))
    counts = np.bincount(x.astype(np.int64))
    assert counts.size == 100 and counts.min() > 0.85 * N / 100


def test_integer_types_take_uniform_and_normal_clipped_to_their_range() -> None:
    x = generate(ArgLayout("c", "in", "int8", N, dist=("normal", 0.0, 100.0)), 0)
    assert x.min() == -128 and x.max() == 127  # clipped, not wrapped
    y = generate(ArgLayout("u", "in", "uint16", N, dist=("uniform", 10.0, 20.0)), 0)
    assert y.min() == 10 and y.max() == 19
    big = generate(ArgLayout("b", "in", "int64", 1000, dist=("int", 0.0, 1e15)), 0)
    assert big.max() > 1e14  # ranges beyond 2^32 use 64 random bits
    with pytest.raises(InputError, match="does not fit"):
        generate(ArgLayout("v", "in", "uint8", 10, dist=("int", 0.0, 300.0)), 0)


def test_an_element_depends_only_on_seed_name_and_index() -> None:
    arg = ArgLayout("x", "in", "float32", 50_000, dist=("normal", 0.0, 1.0))
    whole = generate(arg, 9)
    shorter = generate(ArgLayout("x", "in", "float32", 12_345, dist=("normal", 0.0, 1.0)), 9)
    assert np.array_equal(whole[:12_345], shorter)  # the length does not change the data
    d = draw(arg)
    part = generator.to_storage(generator.values(d, 9, generator.stream_of("x"), 30_001, 77), "float32",
                                storage_dtype("float32"))
    assert np.array_equal(part, whole[30_001:30_078])  # any slice alone, across chunk boundaries
    other = generate(ArgLayout("y", "in", "float32", 50_000, dist=("normal", 0.0, 1.0)), 9)
    assert np.mean(whole == other) < 0.01 and abs(np.corrcoef(whole, other)[0, 1]) < 0.02
    assert not np.array_equal(whole, generate(arg, 10))


def test_philox_matches_its_published_known_answer() -> None:
    # Random123's kat_vectors, philox4x32 10 rounds: counter 0 / key 0, and counter all ones / key all ones
    # (the counter's high words are 0 here, so only the first vector applies to counters of one index).
    w = generator.philox(0, 0, np.array([0], dtype=np.uint64))
    assert [int(v[0]) for v in w] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_constants_and_zeros() -> None:
    assert np.all(generate(ArgLayout("z", "in", "float32", 100, dist=("zeros", 0.0, 0.0)), 1) == 0)
    assert np.all(generate(ArgLayout("c", "in", "int32", 100, dist=("const", 7.9, 0.0)), 1) == 7)
    assert np.all(generate(ArgLayout("c", "in", "float64", 100, dist=("const", 0.25, 0.0)), 1) == 0.25)


def test_every_selftest_case_can_be_drawn_on_the_host() -> None:
    for dtype, dist in SELFTEST_CASES:
        x = generate(ArgLayout("s", "in", dtype, 257, dist=dist), 11)
        assert x.dtype == storage_dtype(dtype) and x.size == 257


@needs_nvcc
def test_the_device_generator_builds_with_nvcc() -> None:
    from warpforge.compiler.build import compile_cubin

    res = compile_cubin(DEVICE_SOURCE, arch="sm_90", filename="warpforge_compare.cu")
    assert res.ok, [m.text for m in res.messages]
    assert b"wf_generate" in res.cubin and b"wf_compare_4" in res.cubin
