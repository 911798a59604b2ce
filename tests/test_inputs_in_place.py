"""Read-only inputs shared in place with a write check (issue 17 item 1), on the CPU (CI).

The worker passes the pristine ``in`` buffers themselves to verification runs and checksums them after each
run (``compare.checksum``, ``wf_checksum`` on the device). Here:

- the host checksum: order-independent definition, any length, a one-bit change anywhere changes it, and the
  device source that computes it builds for sm_90;
- the worker on the CPU stand-in for pycuda (``fake_pycuda``; its saxpy honours ``wf_fake_write_input``,
  which adds 1 to ``x[0]`` after computing ``y``): which pointers the launches get (inputs shared, outputs
  fresh), a candidate that writes its input reported, the set redrawn after it, an original that writes its
  input marked and copied from then on, memory accounting, the host-generator fallback and the fallback to
  copying every input when there is no device checksum;
- the evaluator end to end on the stand-in: the candidate rejected with the message, an original that writes
  its input (an element it never reads, as a scratch buffer) verifying with one note.

The same behaviours on a GPU: ``tests/test_gpu_inputs_in_place.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ROOT, needs_nvcc
from warpforge.gpu import compare as cmp
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator
from warpforge.gpu.timing import TimingSettings

FAKE_PYCUDA = ROOT / "tests" / "fake_pycuda"
WRITES_INPUT = "writes its input `x` (the spec lists it read-only; the original leaves it unchanged)"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(tmp)
    return env


# --------------------------------------------------------------------------- the checksum
def _reference(data: bytes) -> int:
    """The definition, one word at a time in plain Python integers."""
    total = 0
    padded = data + bytes(-len(data) % 8)
    for i in range(len(padded) // 8):
        w = int.from_bytes(padded[8 * i : 8 * i + 8], "little")
        z = w ^ ((i * cmp.CHECKSUM_STEP + cmp.CHECKSUM_OFFSET) % (1 << 64))
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % (1 << 64)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % (1 << 64)
        total = (total + (z ^ (z >> 31))) % (1 << 64)
    return total


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1001])
def test_checksum_follows_its_definition_for_any_length(n: int) -> None:
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    assert cmp.checksum(data) == _reference(data)
    assert cmp.checksum(np.frombuffer(data, dtype=np.uint8)) == _reference(data)


def test_checksum_is_the_same_in_chunks_of_any_size() -> None:
    data = np.random.default_rng(1).integers(0, 256, 8 * 1000 + 3, dtype=np.uint8)
    whole = cmp.checksum(data)
    assert {cmp.checksum(data, chunk=c) for c in (1, 7, 64, 999, 1 << 20)} == {whole}


@pytest.mark.parametrize("n", [8 * 4096, 8 * 4096 + 5, 13])
def test_a_one_bit_change_anywhere_changes_the_checksum(n: int) -> None:
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    base = cmp.checksum(data)
    for at in (0, n // 2, n - 1):
        for bit in (0, 7):
            changed = data.copy()
            changed[at] ^= 1 << bit
            assert cmp.checksum(changed) != base, (at, bit)


def test_moved_words_and_typed_views_are_told_apart() -> None:
    x = np.arange(1, 1025, dtype=np.float32)
    swapped = x.copy()
    swapped[[10, 500]] = swapped[[500, 10]]  # the same words, two of them in other places
    assert cmp.checksum(swapped) != cmp.checksum(x)
    assert cmp.checksum(x) == cmp.checksum(x.view(np.uint8)) == cmp.checksum(x.tobytes())
    assert cmp.checksum(np.zeros(16, np.uint8)) != cmp.checksum(np.zeros(24, np.uint8))  # every word counts


@needs_nvcc
def test_the_device_checksum_builds_for_sm_90() -> None:
    from warpforge.compiler.build import compile_cubin

    res = compile_cubin(cmp.DEVICE_SOURCE, arch="sm_90", filename="warpforge_compare.cu")
    assert res.ok, [m.text for m in res.messages]
    assert b"wf_checksum" in res.cubin


# --------------------------------------------------------------------------- the worker on the stand-in
_SCRIPT = r"""
import json, sys
from warpforge.gpu.inputs import ArgLayout, Layout
from warpforge.gpu.worker import Engine

mode = sys.argv[1]
N = 4099
lay = Layout("spec", (ArgLayout("n", "scalar", "int32", value=N), ArgLayout("a", "scalar", "float32", value=2.5),
                      ArgLayout("x", "in", "float32", N, dist=("uniform", -1.0, 1.0)),
                      ArgLayout("y", "inout", "float32", N, dist=("uniform", -1.0, 1.0))))
eng = Engine(0)
syms = b"wf_compare_1 wf_compare_2 wf_compare_4 wf_compare_8 wf_flush wf_generate"
eng.op_setup({"compare": {"cubin": syms + (b"" if mode == "copy" else b" wf_checksum")}})
if mode == "host":
    eng.gen = None
launched = []
real = eng._launch
def spy(mod, la, layout, ptrs):
    launched.append([mod.key, ptrs["x"], ptrs["y"]])
    real(mod, la, layout, ptrs)
eng._launch = spy

def ref(key, tags=b""):
    return {"key": key, "cubin": b"saxpy " + tags, "symbol": "saxpy", "launch": {"spec": [[17], [256], 0]}}

def problem(pid):
    return {"id": pid, "layouts": {"spec": lay}, "tolerances": {"y": [1e-5, 1e-6]}}

def accounted(pid):
    prob = eng.problems[pid]
    held = [b for d in prob.pristine.values() for b in d.values()]
    held += [b for o in prob.oracles.values() for b in o.bufs.values()]
    return prob.nbytes == sum(b.total for b in held) and all(b in eng.live and b.owned for b in held)

def check(pid, oracle, subject, runs, det=None):
    start = len(launched)
    live = set(eng.live)
    r, fatal = eng.dispatch({"op": "check", "problem": problem(pid), "oracle": oracle, "subject": subject,
                             "runs": runs, "determinism": det, "kernel_timeout": 5.0})
    assert r["status"] == "ok" and not fatal, r
    return {"runs": [{"guard": x["guard"], "oracle_guard": x["oracle_guard"],
                      "ok": all(b.ok for b in x["buffers"])} for x in r["runs"]],
            "original_writes": r["original_writes"], "launches": launched[start:], "accounted": accounted(pid),
            "loose": len([b for b in eng.live if not b.owned]) + len(eng.dropped),
            "owned_released": len([b for b in live if b.owned and b not in eng.live]),
            "pristine_x": {f"{k[1]}{'t' if k[2] else ''}": d["x"].ptr for k, d in eng.problems[pid].pristine.items()}}

out = {"note": eng.sum_note}
out["first"] = check("p", ref("orig"), ref("cand"), [["spec", 1], ["spec", 2], ["spec", 1, "tail"]], ["spec", 1])
out["bad"] = check("p", ref("orig"), ref("bad", b"wf_fake_write_input"), [["spec", 1]])
out["after"] = check("p", ref("orig"), ref("cand2"), [["spec", 1]])
out["writer"] = check("q", ref("worig", b"wf_fake_write_input"), ref("cand3"), [["spec", 1]])
out["writer_again"] = check("q", ref("worig", b"wf_fake_write_input"), ref("cand3"), [["spec", 2]])
out["itself"] = check("r", ref("worig", b"wf_fake_write_input"), None, [["spec", 1]])
print(json.dumps(out))
"""


def _engine(mode: str, tmp: Path) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", _SCRIPT, mode], env=_env(tmp), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _all_ok(step: dict[str, Any]) -> bool:
    return all(r["ok"] and not r["guard"] and not r["oracle_guard"] for r in step["runs"])


@pytest.mark.parametrize("mode", ["device", "host"])
def test_read_only_inputs_are_shared_and_checked(mode: str, tmp_path: Path) -> None:
    r = _engine(mode, tmp_path)
    assert "in place" in r["note"], r["note"]
    first = r["first"]
    assert _all_ok(first) and first["original_writes"] == []
    # launches: oracle s1, candidate s1, its determinism run, oracle s2, candidate s2, oracle and candidate on
    # the tail-perturbed s1 (the plain oracle of s1 is cached)
    keys = [k for k, _, _ in first["launches"]]
    assert keys == ["orig", "cand", "cand", "orig", "cand", "orig", "cand"]
    xs = [x for _, x, _ in first["launches"]]
    ys = [y for _, _, y in first["launches"]]
    assert xs[0] == xs[1] == xs[2] == first["pristine_x"]["1"]  # the input itself, for every run of seed 1
    assert xs[3] == xs[4] == first["pristine_x"]["2"] and xs[5] == xs[6] == first["pristine_x"]["1t"]
    assert len({xs[0], xs[3], xs[5]}) == 3
    assert len(set(ys)) == len(ys)  # written buffers: fresh for every run
    assert first["accounted"] and first["loose"] == 0 and first["owned_released"] == 0

    bad = r["bad"]
    assert [run["guard"] for run in bad["runs"]] == [[WRITES_INPUT]]
    assert bad["runs"][0]["ok"]  # otherwise correct: only the write check sees it
    assert bad["launches"][0][1] == first["pristine_x"]["1"]  # it was given the shared input ...
    assert bad["pristine_x"].get("1") is None  # ... which was dropped
    assert bad["owned_released"] == 2  # its `x` and `y` went back to the pool with the request
    assert bad["accounted"] and bad["loose"] == 0

    after = r["after"]  # seed 1 drawn again: the next candidate matches the original's cached outputs
    assert _all_ok(after) and after["launches"][0][1] not in (first["pristine_x"]["1"], None)
    assert after["launches"][0][1] == after["pristine_x"]["1"]
    assert after["accounted"]


@pytest.mark.parametrize("mode", ["device", "host"])
def test_an_original_that_writes_its_input_is_marked_and_its_input_copied(mode: str, tmp_path: Path) -> None:
    r = _engine(mode, tmp_path)
    w = r["writer"]
    assert _all_ok(w), w  # no finding against either kernel; the candidate saw correct inputs
    assert w["original_writes"] == ["x"]
    (o_key, o_x, _), (c_key, c_x, _) = w["launches"]
    assert (o_key, c_key) == ("worig", "cand3")
    assert o_x != w["pristine_x"]["1"]  # the set the original wrote was dropped and drawn again ...
    assert c_x != w["pristine_x"]["1"]  # ... and the candidate got a copy of the new one
    again = r["writer_again"]
    assert _all_ok(again) and again["original_writes"] == ["x"]
    assert all(x != again["pristine_x"]["2"] for _, x, _ in again["launches"])  # copied from now on
    assert w["accounted"] and again["accounted"] and again["loose"] == 0
    itself = r["itself"]  # the baseline: the original checked against itself writes its input twice
    assert _all_ok(itself) and itself["original_writes"] == ["x"]


def test_without_a_device_checksum_every_input_is_copied(tmp_path: Path) -> None:
    r = _engine("copy", tmp_path)
    assert "copied for every run" in r["note"]
    first = r["first"]
    assert _all_ok(first)
    xs = [x for _, x, _ in first["launches"]]
    assert len(set(xs)) == len(xs) and not set(xs) & set(first["pristine_x"].values())
    assert first["accounted"] and first["loose"] == 0 and first["owned_released"] == 0
    assert r["writer"]["original_writes"] == []  # nothing is checked: nothing is shared


# --------------------------------------------------------------------------- the evaluator on the stand-in
SAXPY = """\
{prelude}// @warpforge size N = 1 << 14
// @warpforge arg n = N
// @warpforge arg a = 2.5
// @warpforge arg x: in float[{xlen}] uniform(-1, 1)
// @warpforge arg y: inout float[N] uniform(-1, 1)
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge bytes 3 * N * sizeof(float)
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;{tag}
    if (i < n) {{
        y[i] = a * x[i] + y[i];
    }}
}}
"""
_TAG = "wf_fake_write_input"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = Backend(worker_env=_env(tmp_path_factory.mktemp("cache")), compile_workers=2, start_timeout=60)
    yield b
    b.close()


def _evaluate(ev: Evaluator, cand: Any = None) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(ev.baseline() if cand is None else ev.evaluate(cand))
    finally:
        loop.close()


SETTINGS = EngineSettings(kernel_timeout=2.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.2))


@needs_nvcc
def test_the_evaluator_rejects_a_candidate_that_writes_its_input(backend: Backend, tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SAXPY.format(prelude="", tag="", xlen="N"))
    ev = Evaluator(path, "saxpy", backend=backend, settings=SETTINGS)
    loop = asyncio.new_event_loop()
    try:
        base = loop.run_until_complete(ev.baseline())
        assert base.status == "ok", base.reason
        assert not [n for n in base.notes if "lists as an input" in n]
        src = ev.original.source.replace("{", "{\n    if (n < 0) { " + _TAG + " = 1; }", 1)
        bad = loop.run_until_complete(ev.evaluate(ev.original.derive(source=f"__device__ int {_TAG};\n{src}")))
        assert bad.status == "rejected" and WRITES_INPUT in bad.reason, (bad.status, bad.reason)
        good = loop.run_until_complete(ev.evaluate(ev.original.derive(block=("512",), grid=("cdiv(N, 512)",))))
        assert good.status == "ok", good.reason  # verified on inputs drawn again, not the written ones
    finally:
        loop.run_until_complete(ev.close())
        loop.close()


@needs_nvcc
def test_an_original_that_writes_its_input_verifies_with_one_note(backend: Backend, tmp_path: Path) -> None:
    path = tmp_path / "saxpy_scratch.cu"
    # its `x` has one element more than it reads, which it writes (`wf_fake_write_scratch`): a scratch buffer
    # the spec calls an input
    scratch = "wf_fake_write_scratch"
    path.write_text(SAXPY.format(prelude=f"__device__ int {scratch};\n", tag=f"\n    if (n < 0) {{ {scratch} = 1; }}",
                                 xlen="N + 1"))
    ev = Evaluator(path, "saxpy", backend=backend, settings=SETTINGS)
    loop = asyncio.new_event_loop()
    note = ("the original kernel writes `x`, which the spec lists as an input: it is copied for every run; "
            "mark it `inout` in the spec")
    try:
        base = loop.run_until_complete(ev.baseline())
        assert base.status == "ok", base.reason
        assert base.notes.count(note) == 1, base.notes
        # a candidate of the file writes `x` too (the stand-in's tag is file-wide): it gets copies, no finding
        cand = loop.run_until_complete(ev.evaluate(ev.original.derive(block=("128",), grid=("cdiv(N, 128)",))))
        assert cand.status == "ok", cand.reason
        assert note not in cand.notes  # told once
    finally:
        loop.run_until_complete(ev.close())
        loop.close()
