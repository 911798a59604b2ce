"""CPU tests of the GPU evaluation engine (run in CI, no GPU needed).

- spec -> host buffers per seed, integer ranges, poison;
- tolerance comparison with the NaN rules, on the host (the device version is checked against it at
  worker start on the GPU machine);
- timing statistics and the adaptive rule;
- the supervisor's restart logic, against a real child process that crashes, hangs or dies of a fatal
  error (``fixtures/fake_worker.py``);
- static guards on the adversarial candidates (``fixtures/adversarial``), SASS guards, the floor check;
- the store: caching and schema versioning;
- the CLI's one-line message where there is no GPU;
- the whole evaluator end to end with real nvcc builds and a CPU stand-in for pycuda
  (``fake_pycuda``), so the worker's plumbing (buffers, guards, poison, pointers, restarts) is tested too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import KernelNotFound
from warpforge.cuda.candidate import Candidate, candidate_from_variant
from warpforge.gpu import compare as cmp
from warpforge.gpu import guards
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator
from warpforge.gpu.inputs import (
    InputError,
    Layout,
    bfloat16_to_float32,
    generate,
    initial_buffers,
    is_poison,
    make_inputs,
    poison_array,
    poison_scalar,
)
from warpforge.gpu.reports import Evaluation
from warpforge.gpu.sanitizer import parse_output
from warpforge.gpu.supervisor import WorkerSupervisor
from warpforge.gpu.timing import (
    TimingSettings,
    converged,
    estimates_agree,
    interleave,
    median_ci,
    speedup,
    summarize,
)
from warpforge.spec import load_spec
from warpforge.store import SCHEMA_VERSION, EvalKey, Store, StoreError

ADV = ROOT / "server" / "warpforge" / "selftest" / "adversarial"  # shipped with the package (selftest)
VAR = ROOT / "tests" / "fixtures" / "variants"
FAKE_WORKER = ROOT / "tests" / "fixtures" / "fake_worker.py"
FAKE_PYCUDA = ROOT / "tests" / "fake_pycuda"


def layout(file: str, kernel: str, perturbed: bool = False) -> Layout:
    spec = load_spec(ROOT / "kernels" / file, kernel)
    return Layout.from_resolved(spec.resolve(perturbed=perturbed), "odd" if perturbed else "spec")


# --------------------------------------------------------------------------- inputs
def test_spec_to_buffers_per_seed() -> None:
    full = layout("saxpy.cu", "saxpy")
    assert {a.name for a in full.buffers} == {"x", "y"} and full.buffers[0].count == 1 << 25
    # the same spec at a length the host draws quickly (the data of an element does not depend on the length)
    lay = Layout(full.label, tuple(a.__class__(a.name, a.role, a.dtype, 1 << 16 if a.is_buffer else None, a.value,
                                               a.dist) for a in full.args))
    a = make_inputs(lay, 0)
    b = make_inputs(lay, 0)
    c = make_inputs(lay, 1)
    assert set(a) == {"x", "y"}  # in and inout; scalars are not buffers
    assert a["x"].dtype == np.float32 and a["x"].size == 1 << 16
    assert np.array_equal(a["x"], b["x"]) and not np.array_equal(a["x"], c["x"])
    assert not np.array_equal(a["x"], a["y"])  # arguments get independent streams
    assert a["x"].min() >= -1.0 and a["x"].max() < 1.0


def test_integer_ranges_zeros_and_constants() -> None:
    lay = layout("histogram.cu", "histogram_atomic")
    bufs = initial_buffers(lay, 3)
    assert bufs["data"].dtype == np.int32
    assert bufs["data"].min() >= 0 and bufs["data"].max() < 256  # int(0, NBINS)
    assert np.all(bufs["bins"] == 0)  # zeros
    with pytest.raises(InputError, match="does not fit"):
        generate(lay.args[0].__class__("v", "in", "uint8", 10, dist=("int", 0.0, 300.0)), 0)


def test_outputs_are_poisoned_and_poison_is_nan_for_every_float_type() -> None:
    lay = layout("gelu.cu", "gelu_forward")
    bufs = initial_buffers(lay, 0)
    assert np.all(np.isnan(bufs["out"])) and np.all(is_poison(bufs["out"], "float32"))
    for dtype in ("float16", "float64"):
        assert np.all(np.isnan(poison_array(dtype, 5)))
    assert np.all(np.isnan(bfloat16_to_float32(poison_array("bfloat16", 5))))
    assert poison_scalar("int32") == 0x7FF87FF8
    assert np.all(poison_array("uint8", 3) == 0xF8)
    # a NaN computed by a kernel is not poison: "unwritten" means untouched
    assert not is_poison(np.array([np.nan], dtype=np.float32), "float32")[0]


def test_perturbed_sizes_are_odd_and_smaller() -> None:
    spec_lay = layout("saxpy.cu", "saxpy")
    odd_lay = layout("saxpy.cu", "saxpy", perturbed=True)
    n, m = spec_lay.buffers[0].count, odd_lay.buffers[0].count
    assert m is not None and n is not None and m < n and m % 2 == 1


# --------------------------------------------------------------------------- comparison
def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def test_tolerance_comparison() -> None:
    want = f32(1.0, 2.0, 0.0, -4.0)
    exact = cmp.compare("y", want.copy(), want, "float32", 1e-5, 1e-6)
    assert exact.ok and exact.max_abs == 0 and exact.first_index is None
    close = cmp.compare("y", f32(1.000001, 2.0, 1e-7, -4.0), want, "float32", 1e-5, 1e-6)
    assert close.ok and 0 < close.max_abs < 1e-6
    far = cmp.compare("y", f32(1.0, 2.1, 0.0, -4.0), want, "float32", 1e-5, 1e-6)
    assert not far.ok and far.mismatches == 1 and far.first_index == 1
    assert far.got == pytest.approx(2.1) and far.want == 2.0
    assert far.max_rel == pytest.approx(0.05, rel=1e-5)
    assert "1 of 4 elements differ" in far.summary()


def test_nan_rules() -> None:
    nan = float("nan")
    want = f32(nan, 1.0, 2.0, 3.0)
    assert cmp.compare("y", f32(nan, 1.0, 2.0, 3.0), want, "float32", 1e-3, 0).ok  # NaN where the oracle has NaN
    r = cmp.compare("y", f32(nan, nan, 2.0, 3.0), want, "float32", 1e-3, 0)  # NaN where it has a number
    assert not r.ok and r.mismatches == 1 and r.nan_mismatches == 1 and r.first_index == 1
    r = cmp.compare("y", f32(0.0, 1.0, 2.0, 3.0), want, "float32", 1e-3, 0)  # a number where it has NaN
    assert not r.ok and r.first_index == 0
    r = cmp.compare("y", f32(1.0, float("inf"), 2.0, 3.0)[1:], f32(float("inf"), 2.0, 3.0), "float32", 1e-3, 0)
    assert r.ok
    r = cmp.compare("y", f32(float("-inf")), f32(float("inf")), "float32", 1e-3, 1e3)
    assert not r.ok


def test_unwritten_elements_are_reported() -> None:
    want = np.arange(10, dtype=np.float32)
    got = want.copy()
    got[7:] = poison_array("float32", 3)
    r = cmp.compare("out", got, want, "float32", 1e-4, 1e-5)
    assert r.mismatches == 3 and r.unwritten == 3 and r.nan_mismatches == 0 and r.first_index == 7
    assert "3 never written" in r.summary()
    # where the oracle itself left poison, poison matches
    assert cmp.compare("out", got, got.copy(), "float32", 0, 0).ok


def test_integers_exact_unless_told_otherwise() -> None:
    want = np.array([5, 6, 7], dtype=np.int32)
    assert not cmp.compare("b", np.array([5, 6, 8], dtype=np.int32), want, "int32", 0, 0).ok
    assert cmp.compare("b", np.array([5, 6, 8], dtype=np.int32), want, "int32", 0, 1).ok
    big = np.array([2**62], dtype=np.int64)
    assert not cmp.compare("b", big + 1, big, "int64", 0, 0).ok  # equal as float64, different as int64


def test_comparison_across_chunks_and_half_types() -> None:
    rng = np.random.default_rng(0)
    want = rng.standard_normal(10_000).astype(np.float16)
    got = want.copy()
    got[9_001] = np.float16(50)
    r = cmp.compare("h", got, want, "float16", 1e-2, 1e-3, chunk=1000)
    assert r.mismatches == 1 and r.first_index == 9_001
    bits = poison_array("bfloat16", 4)
    bits[:2] = [0x3F80, 0x4000]  # 1.0, 2.0
    r = cmp.compare("b", bits, bits.copy(), "bfloat16", 2e-2, 1e-2)
    assert r.ok


def test_device_compare_source_names_every_width() -> None:
    for dtype in ("uint8", "float16", "float32", "float64"):
        assert cmp.device_kernel_name(dtype) in cmp.DEVICE_SOURCE


# --------------------------------------------------------------------------- timing
def test_timing_statistics() -> None:
    s = summarize([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0, 5.0])
    assert s.median == 1.0 and s.n == 9 and s.maximum == 5.0
    assert s.ci_low <= s.median <= s.ci_high
    lo, hi = median_ci(sorted([float(i) for i in range(100)]))
    assert 38 <= lo <= 41 and 58 <= hi <= 61
    sp = speedup([2.0] * 20, [1.0] * 20)
    assert sp.ratio == 2.0 and sp.low <= 2.0 <= sp.high and sp.pairs == 20
    assert interleave(0, 2) == [0, 1] and interleave(1, 2) == [1, 0]


def test_adaptive_repetitions_stop_when_the_median_is_stable() -> None:
    st = TimingSettings(min_reps=10, max_reps=1000, target=0.01, max_seconds=5.0)
    rng = np.random.default_rng(1)
    steady = list(1.0 + rng.normal(0, 0.002, 30))
    noisy = list(1.0 + rng.normal(0, 0.3, 30))
    assert converged([steady, steady], st, 0.1)
    assert not converged([steady, noisy], st, 0.1)
    assert not converged([steady[:5]], st, 0.1)  # too few
    assert converged([noisy], st, 6.0)  # out of time


def test_sampling_goes_on_while_the_ratio_of_medians_and_the_pair_ratios_disagree() -> None:
    """Each side's median stable to 1 %, yet the medians sit on different modes: the per-pair ratios (ABBA)
    say otherwise, so the rule keeps sampling until they agree or the budget is spent."""
    st = TimingSettings(min_reps=10, max_reps=1000, target=0.01, max_seconds=2.0)
    rng = np.random.default_rng(2)
    tiny = lambda n: rng.normal(0, 1e-4, n)  # noqa: E731
    # pairs: (0.90, 1.00) x100, (1.04, 1.14) x100, (1.04, 1.00) x100 -> medians 1.04 / 1.00, pairs ~0.91
    base = np.concatenate([0.90 + tiny(100), 1.04 + tiny(100), 1.04 + tiny(100)]).tolist()
    cand = np.concatenate([1.00 + tiny(100), 1.14 + tiny(100), 1.00 + tiny(100)]).tolist()
    assert summarize(base).ci_rel <= 0.01 and summarize(cand).ci_rel <= 0.01
    assert not estimates_agree(base, cand, 0.01)
    assert not converged([base, cand], st, 0.1)
    assert converged([base, cand], st, 2.5)  # the budget still ends it
    same = (1.0 + rng.normal(0, 0.002, 300)).tolist()
    assert estimates_agree(same, same[::-1], 0.01) and converged([same, same[::-1]], st, 0.1)


def test_identical_code_on_two_close_modes_measures_one() -> None:
    """A microsecond kernel's times on two event ticks ~3.6 % apart, each side about half on either: the two
    medians land on different modes (the ratio of medians said 0.97x or 1.03x for identical code), the
    interquartile means do not."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.choice([4.352, 4.512], size=301, p=[0.5, 0.5]).tolist()
        b = rng.choice([4.352, 4.512], size=301, p=[0.5, 0.5]).tolist()
        sp = speedup(a, b)
        assert 0.99 < sp.ratio < 1.01 and sp.low <= 1.0 <= sp.high, sp
    clear = speedup([2.0 + 0.01 * (i % 3) for i in range(40)], [1.0 + 0.005 * (i % 3) for i in range(40)])
    assert abs(clear.ratio - 2.0) < 0.01  # a single mode: the median's ratio


# --------------------------------------------------------------------------- supervisor with a real child
@pytest.fixture
def supervisor() -> Iterator[WorkerSupervisor]:
    sup = WorkerSupervisor(0, command=[sys.executable, str(FAKE_WORKER)], start_timeout=30)
    yield sup
    sup.close()


def test_supervisor_restarts_a_crashed_worker(supervisor: WorkerSupervisor) -> None:
    first = supervisor.request({"op": "echo", "payload": 1}, 10)
    assert first["status"] == "ok"
    r = supervisor.request({"op": "crash"}, 10)
    assert r["status"] == "crashed" and "SIGSEGV" in r["reason"]
    again = supervisor.request({"op": "echo"}, 10)
    assert again["status"] == "ok" and again["pid"] != first["pid"]
    assert supervisor.restarts == 1


def test_supervisor_kills_a_hung_worker(supervisor: WorkerSupervisor) -> None:
    first = supervisor.request({"op": "echo"}, 10)
    r = supervisor.request({"op": "hang"}, 1.0)
    assert r["status"] == "timeout" and "did not answer" in r["reason"]
    with pytest.raises(ProcessLookupError):
        os.kill(first["pid"], 0)  # it is gone, not left running
    assert supervisor.request({"op": "echo"}, 10)["status"] == "ok"
    assert supervisor.restarts == 1


def test_supervisor_replaces_a_worker_after_a_fatal_reply(supervisor: WorkerSupervisor) -> None:
    first = supervisor.request({"op": "echo"}, 10)
    r = supervisor.request({"op": "fatal"}, 10)
    assert r["status"] == "crashed" and r.get("restart")
    assert supervisor.request({"op": "echo"}, 10)["pid"] != first["pid"]


def test_supervisor_reports_a_worker_that_cannot_start() -> None:
    env = dict(os.environ, FAKE_WORKER_FAIL_START="1")
    sup = WorkerSupervisor(0, command=[sys.executable, str(FAKE_WORKER)], env=env, start_timeout=30)
    try:
        r = sup.request({"op": "echo"}, 10)
        assert r["status"] == "unavailable" and "no CUDA driver" in r["reason"]
    finally:
        sup.close()


# --------------------------------------------------------------------------- guards
def _gelu() -> tuple[object, str]:
    from warpforge.cuda import SourceText, parse

    src = SourceText((ROOT / "kernels" / "gelu.cu").read_bytes())
    k = parse(src.data).kernel("gelu_forward")
    assert k is not None
    return k, src.slice(k.span)


@pytest.mark.parametrize(("name", "code"), [
    ("gelu_clock.cu", "clock"), ("gelu_globaltimer.cu", "globaltimer"),
    ("gelu_device_launch.cu", "device_launch"), ("gelu_signature.cu", "signature"),
])
def test_guards_reject_adversarial_sources(name: str, code: str) -> None:
    kernel, original = _gelu()
    text = (ADV / name).read_text()
    found = guards.check_candidate(kernel, original, text)
    assert code in {f.code for f in found}, found


def test_guards_ignore_comments_and_what_the_original_does_too() -> None:
    kernel, original = _gelu()
    commented = "// we no longer call clock64() or launch <<<...>>> here\n" + original
    assert guards.check_candidate(kernel, original, commented) == []
    restrict = original.replace("const float* inp", "const float* __restrict__ inp")
    assert guards.check_candidate(kernel, original, restrict) == []  # const/__restrict__ may change
    timed_original = original.replace("{", "{ long long t = clock64(); (void)t;", 1)
    assert [f.code for f in guards.check_candidate(kernel, timed_original, timed_original)] == []


def test_guards_on_every_adversarial_fixture_that_needs_no_gpu() -> None:
    kernel, original = _gelu()
    for f in sorted(ADV.glob("gelu_*.cu")):
        text = f.read_text()
        found = guards.check_candidate(kernel, original, text)
        static = {"gelu_clock.cu", "gelu_globaltimer.cu", "gelu_device_launch.cu", "gelu_signature.cu"}
        assert bool(found) == (f.name in static), (f.name, found)


@needs_nvcc
def test_sass_guard_sees_clock_reads_hidden_from_the_source() -> None:
    from warpforge.compiler.build import compile_cubin

    hidden = ("#define NOW() clock" "64()\n"  # split so the source guard cannot see it
              "__global__ void k(long long* out) { out[threadIdx.x] = NOW(); }\n")
    res = compile_cubin(hidden, arch="sm_90", use_cache=False)
    assert res.ok, res.log
    found, note = guards.sass_findings(res.cubin)
    if note:
        pytest.skip(note)
    assert "clock" in {f.code for f in found}


@needs_nvcc
def test_sass_guard_sees_timer_reads_and_device_launches_hidden_from_the_source() -> None:
    from warpforge.compiler.build import compile_cubin

    timer = ("__global__ void k(unsigned long long* out) { unsigned long long t;\n"
             "  asm volatile(\"mov.u64 %0, %%global\" \"timer;\" : \"=l\"(t)); out[threadIdx.x] = t; }\n")
    launch = ("#define GO(f, x) f<<<1, 32>>>(x)\n"
              "__global__ void child(float* x) { x[threadIdx.x] = 1.0f; }\n"
              "__global__ void k(float* x) { if (threadIdx.x == 0) GO(child, x); }\n")
    plain = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
    codes = {}
    for name, src, flags in (("timer", timer, []), ("launch", launch, ["-rdc=true"]), ("plain", plain, [])):
        res = compile_cubin(src, arch="sm_90", flags=flags, use_cache=False)
        assert res.ok, res.log
        found, note = guards.sass_findings(res.cubin)
        if note:
            pytest.skip(note)
        codes[name] = {f.code for f in found}
    assert codes == {"timer": {"globaltimer"}, "launch": {"device_launch"}, "plain": set()}, codes


def test_physical_floor() -> None:
    nbytes = 3 * 4 * (1 << 25)  # saxpy
    peak = 3000.0
    assert guards.floor_ms(nbytes, peak) == pytest.approx(0.134, rel=0.01)
    assert guards.floor_finding(0.14, nbytes, peak) is None
    bad = guards.floor_finding(0.05, nbytes, peak)
    assert bad is not None and "physical floor" in bad.message
    assert guards.floor_finding(0.05, nbytes, peak, l2_bytes=1 << 30) is None  # fits in L2: not applied


def test_sanitizer_output_parsing() -> None:
    memcheck = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n"
                "=========     at gelu_forward+0x1d0\n========= ERROR SUMMARY: 1 error\n")
    ok, errors, first, _ = parse_output("memcheck", memcheck, 86)
    assert not ok and errors == 1 and first.startswith("Invalid __global__ read")
    clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert parse_output("racecheck", clean, 0)[:2] == (True, 0)


# --------------------------------------------------------------------------- candidates
def test_candidate_hash_covers_behaviour_only() -> None:
    a = Candidate("k", "src", defines={"B": "1", "A": "2"}, family="x", rationale="why")
    b = Candidate("k", "src", defines={"A": "2", "B": "1"}, family="y", rationale="other")
    assert a.hash == b.hash and a == a.derive(parent=None, rationale="why")
    assert a.hash != a.derive(flags=("-O3",)).hash != a.derive(block=("128",)).hash
    assert a.derive(block=("128",)).parent == a.id


def test_candidate_from_a_variant_file_brings_its_new_helpers() -> None:
    original = (ROOT / "kernels" / "reduce_sum.cu").read_text()
    c = candidate_from_variant(original, (VAR / "reduce_sum_fast.cu").read_text(), "reduce_sum")
    assert "#define ELEMS_PER_THREAD 8" in c.source and "BLOCK_SIZE 256" not in c.source
    bomb = candidate_from_variant((ROOT / "kernels" / "gelu.cu").read_text(),
                                  (ADV / "gelu_compile_bomb.cu").read_text(), "gelu_forward")
    assert "struct Bomb<0>" in bomb.source  # the specialization travels with its template
    with pytest.raises(KernelNotFound, match="no __global__ kernel named `nope`"):
        candidate_from_variant(original, original, "nope")


# --------------------------------------------------------------------------- store
def test_store_caches_by_key_and_versions_its_schema(tmp_path: Path) -> None:
    db = tmp_path / "store" / "warpforge.db"
    store = Store.for_workspace(tmp_path, db)
    assert store.path == db and store.version == SCHEMA_VERSION
    key = EvalKey("cand", "spec", "NVIDIA H100", "580.1")
    assert store.get_evaluation(key) is None
    store.put_evaluation(key, "k", "ok", 1.5, {"status": "ok", "speedup": 1.5})
    assert store.get_evaluation(key) == {"status": "ok", "speedup": 1.5}
    assert store.get_evaluation(EvalKey("cand", "spec", "NVIDIA H200", "580.1")) is None  # other GPU
    store.put_evaluation(key, "k", "ok", 1.6, {"status": "ok", "speedup": 1.6})
    assert store.count_evaluations() == 1
    store.close()
    with Store(db) as again:  # reopening keeps the data and does not migrate twice
        assert again.get_evaluation(key) == {"status": "ok", "speedup": 1.6}


def test_store_migrates_old_and_refuses_newer_databases(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    sqlite3.connect(old).close()  # version 0: an empty file from before the schema
    with Store(old) as s:
        assert s.version == SCHEMA_VERSION
    newer = tmp_path / "newer.db"
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(StoreError, match="newer WarpForge"):
        Store(newer)


# --------------------------------------------------------------------------- CLI without a GPU
@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
@pytest.mark.parametrize("argv", [["bench", "kernels/saxpy.cu"],
                                  ["verify", "kernels/saxpy.cu", "--candidate", "kernels/saxpy.cu"]])
def test_cli_says_in_one_line_that_a_gpu_is_needed(argv: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "warpforge", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 3  # "cannot run here"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "GPU" in lines[0] and "pip install -e '.[gpu]'" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


# --------------------------------------------------------------------------- end to end on a CPU stand-in
SMALL_SAXPY = """\
// @warpforge size N = 1 << 16
// @warpforge arg n = N
// @warpforge arg a = 2.5
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg y: inout float[N] uniform(-1, 1)
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-5 atol=1e-6
// @warpforge bytes 3 * N * sizeof(float)
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"""


def _tagged(ev: Evaluator, tag: str) -> Candidate:
    """The original with a fake-driver tag compiled in (the fake driver misbehaves as the tag says)."""
    src = ev.original.source.replace("{", "{\n    if (n < 0) { " + tag + " = 1; }", 1)
    return ev.original.derive(source=f"__device__ int {tag};\n{src}", family="fake-tag")


@pytest.fixture(scope="module")
def fake_backend() -> Iterator[Backend]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    b = Backend(worker_env=env, compile_workers=2, start_timeout=60)
    yield b
    b.close()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@needs_nvcc
def test_engine_end_to_end_on_the_cpu_stand_in(fake_backend: Backend, loop: asyncio.AbstractEventLoop,
                                               tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    settings = EngineSettings(kernel_timeout=2.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.3))
    store = Store(tmp_path / "wf.db")
    ev = Evaluator(path, "saxpy", backend=fake_backend, settings=settings, store=store)

    def run(c: Candidate) -> Evaluation:
        return loop.run_until_complete(ev.evaluate(c))

    base = loop.run_until_complete(ev.baseline())
    assert base.status == "ok", base.reason
    assert base.timing is not None and base.timing.candidate is not None and base.timing.candidate.median > 0

    good = ev.original.derive(block=("512",), grid=("cdiv(N, 512)",))
    r = run(good)
    assert r.status == "ok", r.reason
    assert r.correctness.evidence() == "3 seeds + odd size" and r.correctness.determinism is not None
    assert any(run_.purpose == "recheck" for run_ in r.correctness.runs)
    assert r.speedup is not None and math.isfinite(r.speedup)
    assert "Fake GPU" in r.headline()

    cases = {
        "wf_fake_nan": ("incorrect", "NaN where the original has a number"),
        "wf_fake_skip_repeat": ("suspicious", "timed launches"),
        "wf_fake_oob": ("rejected", "out-of-bounds write past the end of `y`"),
        "wf_fake_crash": ("crashed", "sticky"),
        "wf_fake_hang": ("timeout", "did not finish"),
    }
    restarts = fake_backend.restarts
    for tag, (status, reason) in cases.items():
        e = run(_tagged(ev, tag))
        assert e.status == status and reason in e.reason, (tag, e.status, e.reason)
        after = run(ev.original.derive(defines={"AFTER": tag}))  # the engine goes on
        assert after.status == "ok", (tag, after.reason)
    assert fake_backend.restarts == restarts + 2  # the sticky error and the hang

    short = run(ev.original.derive(grid=("1",)))  # too small a grid: the tail is never computed
    assert short.status == "incorrect" and "elements differ" in short.reason

    # guards and builds need no GPU work at all
    clock = ev.original.derive(source=ev.original.source.replace("{", "{ long long t0 = clock64(); (void)t0;", 1))
    assert run(clock).status == "rejected"
    broken = ev.original.derive(source=ev.original.source.replace("a * x[i]", "a * undefined_name[i]"))
    e = run(broken)
    assert e.status == "compile_error" and "undefined_name" in e.reason

    # identical work is served from the store, also to a new evaluator
    ev2 = Evaluator(path, "saxpy", backend=fake_backend, settings=settings, store=store)
    again = loop.run_until_complete(ev2.evaluate(good))
    assert again.cached and again.status == "ok" and again.speedup == r.speedup
    assert "replayed from the evaluation cache" in again.headline() and "replayed" not in r.headline()

    # many in flight: the same candidate twice is evaluated once
    async def twice() -> tuple[Evaluation, Evaluation]:
        c = ev.original.derive(block=("128",), grid=("cdiv(N, 128)",))
        a, b = await asyncio.gather(ev.evaluate(c), ev.evaluate(c))
        return a, b

    a, b = loop.run_until_complete(twice())
    assert a is b and a.status == "ok"


@needs_nvcc
def test_timing_stops_early_for_a_candidate_that_cannot_win(fake_backend: Backend, loop: asyncio.AbstractEventLoop,
                                                             tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    # a target tighter than the stand-in's 0.1 % jitter: the stopping rule alone would sample to max_reps
    timing = TimingSettings(max_seconds=5.0, target=1e-5, min_reps=10, max_reps=400)
    for abandon in (True, False):
        ev = Evaluator(path, "saxpy", backend=fake_backend,
                       settings=EngineSettings(kernel_timeout=2.0, timing=timing, abandon_slower=abandon))
        assert loop.run_until_complete(ev.baseline()).status == "ok"
        fast = loop.run_until_complete(ev.evaluate(_tagged(ev, "wf_fake_fast")))
        assert fast.status == "ok" and fast.speedup is not None and fast.speedup > 1.1, fast.reason
        assert ev.best_ratio == pytest.approx(fast.speedup)
        slow = loop.run_until_complete(ev.evaluate(_tagged(ev, "wf_fake_slow")))
        assert slow.status == "ok" and slow.timing is not None and slow.timing.speedup is not None
        assert slow.timing.speedup.ratio < 0.9
        if abandon:
            assert slow.timing.abandoned and slow.timing.candidate is not None
            assert slow.timing.candidate.n < 100 and slow.timing.speedup.high < fast.speedup
            assert any("timing stopped after" in n and "clearly slower" in n for n in slow.notes), slow.notes
        else:
            assert not slow.timing.abandoned and slow.timing.candidate is not None
            # the stopping rule alone: sampled to max_reps, or to max_seconds where each cold sample (reset,
            # flush, launch on the stand-in) takes longer than 5 s / 400 on a loaded machine
            n, spent = slow.timing.candidate.n, slow.time_split["timing"]
            assert n >= 400 or (n >= 100 and spent >= 0.9 * timing.max_seconds), (n, spent)


@needs_nvcc
def test_a_long_kernels_slower_candidates_are_checked_once_and_never_offered(loop: asyncio.AbstractEventLoop,
                                                                            tmp_path: Path) -> None:
    """Where the original is a long kernel (the fake device made 20000x slower: ~25 ms a launch), a candidate is
    checked on one run, timed, and only verified in full when the timing shows it may win: a clearly slower
    one keeps its one matched run and its timing (the search's evidence) but is neither verified, stored, nor
    counted as the best; a faster one gets every run."""
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WF_FAKE_DEVICE_SLOWDOWN"] = "0=20000"
    backend = Backend(worker_env=env, compile_workers=2, start_timeout=60)
    try:
        settings = EngineSettings(kernel_timeout=60.0, timing=TimingSettings(max_seconds=2.0))
        store = Store(tmp_path / "wf.db")
        ev = Evaluator(path, "saxpy", backend=backend, settings=settings, store=store)
        base = loop.run_until_complete(ev.evaluate(ev.original))  # as a search does: the root, timed against itself
        assert base.verified and base.timing is not None and base.timing.candidate is not None
        assert base.timing.baseline is not None and ev.original_ms == base.timing.baseline.median >= 2.0  # long

        slow = loop.run_until_complete(ev.evaluate(_tagged(ev, "wf_fake_slow")))
        assert slow.status == "ok" and slow.ok and not slow.verified, slow.reason
        assert slow.timing is not None and slow.timing.abandoned and slow.speedup is not None and slow.speedup < 0.5
        assert slow.timing.candidate is not None and slow.timing.candidate.n <= 3  # given up on after 2 repetitions
        assert [(r.variant, r.purpose) for r in slow.correctness.runs] == [("spec", "verify")]
        assert not slow.correctness.complete and "determinism" in slow.correctness.skipped
        assert "re-check with fresh inputs" in slow.correctness.skipped and len(slow.correctness.skipped) >= 6
        assert "spec size, seed 1" in slow.correctness.skipped and not slow.correctness.timed_outputs
        assert any("verification stopped after its first run" in n for n in slow.notes), slow.notes
        assert "x slower (checked on" in slow.headline() and "verified" not in slow.headline(), slow.headline()
        assert ev.best_ratio == max(1.0, base.speedup or 0)  # a partly checked result never sets "the best"

        fast = loop.run_until_complete(ev.evaluate(_tagged(ev, "wf_fake_fast")))
        assert fast.verified and fast.correctness.evidence() == "3 seeds + odd size", fast.reason
        assert fast.correctness.determinism is not None and any(r.purpose == "recheck" for r in fast.correctness.runs)
        assert any(r.purpose == "sensitivity" for r in fast.correctness.runs)
        assert fast.speedup is not None and ev.best_ratio == pytest.approx(fast.speedup)

        # the store keeps the verified one only: a later job verifies the slow one again
        ev2 = Evaluator(path, "saxpy", backend=backend, settings=settings, store=store)
        assert loop.run_until_complete(ev2.baseline()).cached
        again_fast = loop.run_until_complete(ev2.evaluate(_tagged(ev2, "wf_fake_fast")))
        again_slow = loop.run_until_complete(ev2.evaluate(_tagged(ev2, "wf_fake_slow")))
        assert again_fast.cached and not again_slow.cached
        assert ev2.best_ratio == pytest.approx(fast.speedup)  # a replayed verified result sets the best too
        assert not again_slow.verified and again_slow.timing is not None and again_slow.timing.abandoned

        # asked for a winner's checks (the sanitizer), a partly checked candidate is verified in full first
        whole_slow = loop.run_until_complete(ev.evaluate(_tagged(ev, "wf_fake_slow"), sanitize=True))
        assert whole_slow.correctness.complete and whole_slow.correctness.evidence() == "3 seeds + odd size"
        assert whole_slow.correctness.determinism is not None, whole_slow.reason
        # with early abandonment off (verify, bench) every candidate is verified in full
        full = Evaluator(path, "saxpy", backend=backend,
                         settings=EngineSettings(kernel_timeout=60.0, timing=TimingSettings(max_seconds=2.0),
                                                 abandon_slower=False))
        whole = loop.run_until_complete(full.evaluate(_tagged(full, "wf_fake_slow")))
        assert whole.verified and whole.correctness.evidence() == "3 seeds + odd size", whole.reason
        # ... and so is every candidate of an energy search: slower in time is not worse in energy
        energy = Evaluator(path, "saxpy", backend=backend,
                           settings=EngineSettings(kernel_timeout=60.0, timing=TimingSettings(max_seconds=2.0),
                                                   objective="energy", energy_seconds=0.05))
        loop.run_until_complete(energy.evaluate(energy.original))
        frugal = loop.run_until_complete(energy.evaluate(_tagged(energy, "wf_fake_slow")))
        assert frugal.correctness.complete and frugal.correctness.evidence() == "3 seeds + odd size", frugal.reason
    finally:
        backend.close()


@needs_nvcc
def test_compile_bomb_is_killed_at_the_compile_timeout(fake_backend: Backend, loop: asyncio.AbstractEventLoop) -> None:
    ev = Evaluator(ROOT / "kernels" / "gelu.cu", "gelu_forward", backend=fake_backend,
                   settings=EngineSettings(compile_timeout=3.0))
    bomb = candidate_from_variant(ev.text, (ADV / "gelu_compile_bomb.cu").read_text(), "gelu_forward")
    e = loop.run_until_complete(ev.evaluate(bomb))
    assert e.status == "compile_error" and "exceeded 3 s" in e.reason


_POOL_SCRIPT = r"""
import json
from warpforge.gpu.worker import Engine, POOL_DEPTH, _size_class

eng = Engine(0)
seen = []  # pointers of each run: three buffers of a problem, retired after the run, as op_check does
for run in range(8):
    bufs = [eng._alloc(n, guarded=True) for n in (4000, 4000, 12345)]
    seen.append([b.ptr for b in bufs])
    eng._retire(bufs)
    eng._free_retired()
big = eng._alloc(5 << 20, guarded=False)
print(json.dumps({"seen": seen, "allocations": eng.allocations, "reuses": eng.reuses, "depth": POOL_DEPTH,
                  "classes": [_size_class(n) for n in (1, 256, 257, 4000 + 2 * 16384, 2 << 20, (2 << 20) + 1)],
                  "big": big.total, "pooled": eng.pool_bytes}))
"""


def test_worker_reuses_retired_buffers_but_never_the_previous_runs_pointers() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _POOL_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["classes"] == [256, 256, 512, 65536, 2 << 20, 4 << 20]
    assert r["big"] == 6 << 20
    seen = r["seen"]
    for i, ptrs in enumerate(seen):  # a run never gets the pointers of the POOL_DEPTH runs before it
        for earlier in seen[max(0, i - r["depth"]):i]:
            assert not set(ptrs) & set(earlier), (i, ptrs, earlier)
    assert set(seen[r["depth"] + 1]) & {p for run in seen[: r["depth"] + 1] for p in run}  # but older ones
    # allocations stop once POOL_DEPTH + 1 runs' buffers are held; every later run reuses the oldest ones
    assert r["allocations"] == 3 * (r["depth"] + 1) + 1
    assert r["reuses"] == 8 * 3 - 3 * (r["depth"] + 1)
    assert r["pooled"] > 0


@needs_nvcc
def test_build_cache_never_serves_a_partial_cubin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel compiles of one translation unit store one key at once; readers must see whole entries."""
    import threading

    from warpforge.compiler import build

    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    src = "__global__ void k(float* x) { x[threadIdx.x] *= 3.0f; }\n"
    first = build.compile_cubin(src, arch="sm_90", use_cache=True)
    assert first.ok and not first.cached
    key = next(p.name for p in (tmp_path / "build").glob("*/*"))
    good = first.cubin
    stop = threading.Event()

    def writer() -> None:  # other processes finishing the same compile again and again
        while not stop.is_set():
            build._store_disk(key, first)

    bad: list[int] = []
    hits = 0
    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(400):
            got = build._load_disk(key)
            if got is not None:
                hits += 1
                if got.cubin != good:
                    bad.append(len(got.cubin))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, f"{len(bad)} partial cubins read (sizes {bad[:5]}, whole is {len(good)})"
    assert hits > 0
    # bytes that do not match the entry's checksum are a miss, and the next compile repairs the entry
    (tmp_path / "build" / key[:2] / key / "kernel.cubin").write_bytes(good[: len(good) // 2])
    assert build._load_disk(key) is None
    build._memory.clear()
    again = build.compile_cubin(src, arch="sm_90", use_cache=True)
    assert again.ok and not again.cached  # (its bytes differ: the cubin names nvcc's temporary directory)
    repaired = build._load_disk(key)
    assert repaired is not None and repaired.cubin == again.cubin


# --------------------------------------------------------------------------- elements the original never writes
def test_a_candidate_writing_where_the_original_never_writes_is_told_so() -> None:
    """The oracle's poison fill is how an element the original leaves unwritten is known: a value there is a
    mismatch, and the message says so instead of a bare "got 0, want nan"."""
    want = np.arange(10, dtype=np.float32)
    want[6:] = poison_array("float32", 4)
    got = np.arange(10, dtype=np.float32)
    got[6:] = 0.0
    r = cmp.compare("out", got, want, "float32", 1e-4, 1e-5)
    assert not r.ok and r.mismatches == 4 and r.original_unwritten == 4 and r.unwritten == 0
    assert r.first_index == 6 and r.first_never_written
    s = r.summary()
    assert "4 written where the original never writes" in s
    assert "first at [6]: got 0, want nan (the original never writes [6]: it still holds the poison fill (NaN)" in s
    assert "give the buffer the length the original writes, or declare it `inout`" in s
    # an ordinary mismatch before them is first, and is not said to be unwritten by the original
    got[2] = 7.0
    r = cmp.compare("out", got, want, "float32", 1e-4, 1e-5)
    assert r.first_index == 2 and not r.first_never_written and r.original_unwritten == 4
    assert "the original never writes [2]" not in r.summary()
    # a NaN the original computed itself is not poison: not "never written"
    want2 = np.array([1.0, float("nan")], dtype=np.float32)
    r = cmp.compare("out", np.array([1.0, 0.0], dtype=np.float32), want2, "float32", 1e-4, 1e-5)
    assert r.original_unwritten == 0 and not r.first_never_written and "never writes" not in r.summary()
    # integers: the sentinel, named in hex
    wi = np.array([1, 2, 3], dtype=np.int32)
    wi[2:] = poison_array("int32", 1)
    r = cmp.compare("idx", np.array([1, 2, 3], dtype=np.int32), wi, "int32", 0, 0)
    assert r.original_unwritten == 1 and r.first_never_written and "poison fill (0x" in r.summary()
    # the JSON round trip keeps both fields (cached evaluations are read back from it)
    again = cmp.BufferReport.from_json(json.loads(json.dumps(r.to_json())))
    assert again == r


def test_the_device_result_carries_the_count_of_elements_the_original_never_writes() -> None:
    res = np.zeros(cmp.RESULT_WORDS, dtype=np.uint64)
    res[0], res[3], res[6] = 3, 5, 2
    r = cmp.from_device_result("y", "float32", 10, 1e-4, 1e-5, res, 0.0, float("nan"), True)
    assert r.mismatches == 3 and r.original_unwritten == 2 and r.first_never_written and r.first_index == 5
    assert "ounw" in cmp.DEVICE_SOURCE and "atomicAdd(&res[6], ounw)" in cmp.DEVICE_SOURCE
