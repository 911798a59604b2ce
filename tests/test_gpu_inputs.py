"""GPU tests of inputs made on the device and outputs compared there (issue 17, items 1 and 2).

- the device generator draws the host generator's exact bits for every element type and distribution, at
  offsets past 2^32 and at a size no CPU test draws;
- the statistics of each distribution on the device's own output;
- two worker processes draw bit-identical buffers;
- the device comparison equals the host comparison on crafted mismatches, NaN, infinities and poison (the
  worker's start-up check, run here as a test, plus cases of its own);
- a worker reports that it generates inputs on the GPU.

Run on the GPU machine: ``pytest -m gpu tests/test_gpu_inputs.py``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu
_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)

from warpforge.compiler.build import compile_cubin  # noqa: E402
from warpforge.gpu import compare as cmp  # noqa: E402
from warpforge.gpu.device_inputs import SELFTEST_CASES  # noqa: E402
from warpforge.gpu.generator import bf16_bits  # noqa: E402
from warpforge.gpu.inputs import (  # noqa: E402
    ArgLayout,
    bfloat16_to_float32,
    generate,
    poison_scalar,
    storage_dtype,
    to_float64,
)

ROOT = Path(__file__).resolve().parents[1]


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


def device_draw(engine: Any, arg: ArgLayout, seed: int) -> np.ndarray:
    assert engine.gen is not None, engine.gen_note
    store = storage_dtype(arg.dtype)
    buf = engine._alloc(arg.nbytes, guarded=False)
    try:
        engine.gen.fill(buf.ptr, arg, seed)
        engine.stream.synchronize()
        out = np.empty(int(arg.count or 0), dtype=store)
        engine.cuda.memcpy_dtoh(out, buf.ptr)
    finally:
        engine._retire([buf])
    return out


def test_the_worker_checked_and_uses_the_device_generator(engine: Any) -> None:
    assert engine.device_compare, engine.compare_note
    assert engine.gen is not None and "GPU" in engine.gen_note, engine.gen_note


@pytest.mark.parametrize(("dtype", "dist"), SELFTEST_CASES)
def test_device_draws_the_host_bits(engine: Any, dtype: str, dist: tuple[str, float, float]) -> None:
    arg = ArgLayout("in_" + dtype, "in", dtype, (1 << 20) + 3, dist=dist)
    dev = device_draw(engine, arg, 5)
    host = generate(arg, 5)
    u = np.dtype(f"u{host.itemsize}")
    bad = np.flatnonzero(dev.view(u) != host.view(u))
    assert bad.size == 0, f"{bad.size} elements differ, first {bad[0]}: {dev[bad[0]]!r} vs {host[bad[0]]!r}"


@pytest.mark.parametrize(("dtype", "dist", "mean", "std"), [
    ("float32", ("normal", 0.0, 1.0), 0.0, 1.0), ("float32", ("uniform", -1.0, 1.0), 0.0, 2 / 12 ** 0.5),
    ("float64", ("normal", 3.0, 0.5), 3.0, 0.5), ("bfloat16", ("normal", 0.0, 2.0), 0.0, 2.0),
    ("float16", ("uniform", 0.0, 1.0), 0.5, 1 / 12 ** 0.5), ("int32", ("int", 0.0, 1000.0), 499.5, 288.67),
])
def test_statistics_of_device_data(engine: Any, dtype: str, dist: tuple[str, float, float], mean: float,
                                   std: float) -> None:
    n = 1 << 24
    x = device_draw(engine, ArgLayout("stats", "in", dtype, n, dist=dist), 2)
    f = bfloat16_to_float32(x).astype(np.float64) if dtype == "bfloat16" else x.astype(np.float64)
    assert abs(f.mean() - mean) < 5 * std / n ** 0.5 + 1e-3 * std
    assert abs(f.std() - std) < 2e-3 * std + (0.01 if dtype == "int32" else 0)
    if dist[0] == "normal":
        z = (f - mean) / std
        assert abs(np.mean(z ** 4) - 3.0) < 0.02 and 0.0440 < np.mean(np.abs(z) > 2) < 0.0470


_CHILD = r"""
import hashlib, json, sys
import numpy as np
import pycuda.driver as cuda
from warpforge.compiler.build import compile_cubin
from warpforge.gpu import compare as cmp
from warpforge.gpu.device_inputs import load
from warpforge.gpu.inputs import ArgLayout
cuda.init()
ctx = cuda.Device(0).make_context()
try:
    res = compile_cubin(cmp.DEVICE_SOURCE, filename="warpforge_compare.cu")
    sms = ctx.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    gen, note = load(cuda, res.cubin, sms)
    arg = ArgLayout("logits", "in", "float32", 1 << 26, dist=("normal", 0.0, 1.0))
    buf = cuda.mem_alloc(arg.nbytes)
    gen.fill(int(buf), arg, 1)
    cuda.Context.synchronize()
    out = np.empty(1 << 26, dtype=np.float32)
    cuda.memcpy_dtoh(out, buf)
    print(json.dumps({"sha": hashlib.sha256(out.tobytes()).hexdigest(), "note": note,
                      "head": hashlib.sha256(out[:1 << 16].tobytes()).hexdigest()}))
finally:
    ctx.pop()
"""


def test_two_workers_draw_bit_identical_buffers() -> None:
    env_py = [sys.executable, "-c", _CHILD]
    outs = [json.loads(subprocess.run(env_py, capture_output=True, text=True, check=True, timeout=300,
                                      cwd=ROOT).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert outs[0]["sha"] == outs[1]["sha"], outs
    assert "GPU" in outs[0]["note"]
    host = generate(ArgLayout("logits", "in", "float32", 1 << 16, dist=("normal", 0.0, 1.0)), 1)
    assert hashlib.sha256(host.tobytes()).hexdigest() == outs[0]["head"]


def test_device_comparison_equals_the_host_comparison(engine: Any) -> None:
    assert engine._selftest() is None  # the worker's own start-up cases
    rng = np.random.default_rng(7)
    n = 100_003
    for dtype, rtol, atol in (("float32", 1e-5, 1e-6), ("float16", 1e-3, 1e-3), ("float64", 1e-12, 0.0),
                              ("bfloat16", 1e-2, 1e-2), ("int16", 0.0, 0.0), ("uint64", 0.0, 2.0)):
        arg = ArgLayout("o", "out", dtype, n, dist=("normal", 0.0, 5.0) if dtype[0] in "fb" else ("int", 0, 500))
        want = generate(arg, 3)
        got = want.copy()
        u = got.view(f"u{got.itemsize}")
        idx = rng.choice(n, 400, replace=False)
        u[idx[:50]] = poison_scalar(dtype)  # unwritten
        want.view(f"u{want.itemsize}")[idx[50:70]] = poison_scalar(dtype)  # the original never writes these
        if dtype[0] in "fb":
            nan = {"bfloat16": 0x7FC0}.get(dtype, np.nan)
            got[idx[70:90]] = nan  # NaN where the original has a number
            if dtype != "bfloat16":
                got[idx[90:100]] = np.inf
                want[idx[100:110]] = np.nan
                got[idx[100:105]] = np.nan  # NaN matches NaN
            f = to_float64(want[idx[110:200]], dtype) * (1 + 10 * max(rtol, 1e-7))  # off by 10x the rtol
            got[idx[110:200]] = bf16_bits(f.astype(np.float32)) if dtype == "bfloat16" else f.astype(got.dtype)
        else:
            u[idx[110:200]] += np.array(1, dtype=u.dtype)
        host = cmp.compare("o", got, want, dtype, rtol, atol)
        g = engine._alloc(got.nbytes, guarded=False)
        w = engine._alloc(want.nbytes, guarded=False)
        try:
            engine.cuda.memcpy_htod(g.ptr, got)
            engine.cuda.memcpy_htod(w.ptr, want)
            dev = engine._compare_device("o", dtype, n, g.ptr, w.ptr, rtol, atol, 10.0)
        finally:
            engine._retire([g, w])
        assert host.mismatches > 0
        for fld in ("mismatches", "unwritten", "nan_mismatches", "first_index", "original_unwritten",
                    "first_never_written"):
            assert getattr(host, fld) == getattr(dev, fld), (dtype, fld, getattr(host, fld), getattr(dev, fld))
        for fld in ("max_abs", "max_rel"):
            assert getattr(host, fld) == pytest.approx(getattr(dev, fld), rel=1e-12), (dtype, fld)
