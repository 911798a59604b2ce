"""GPU tests of the evaluation engine: every adversarial or faulty candidate is rejected with the right
reason, and the engine keeps evaluating the next one.

Run on the GPU machine: ``pytest -m gpu tests/test_gpu_engine.py``. Skipped (with the reason) where there
is no pycuda or no GPU. The candidates are in ``warpforge/selftest/adversarial`` (one cheat or fault each, the
first comment says which; shipped for ``warpforge selftest``, whose table ``CASES`` this module runs too) and
``tests/fixtures/variants`` (a known faster reduce_sum and a wrong one).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)

from warpforge.compiler.nsight import ncu_path  # noqa: E402
from warpforge.cuda.candidate import Candidate, candidate_from_variant  # noqa: E402
from warpforge.gpu.confirm import Side, confirm  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.reports import Evaluation  # noqa: E402
from warpforge.gpu.sanitizer import sanitizer_path  # noqa: E402
from warpforge.gpu.timing import Speedup, TimingSettings, cv  # noqa: E402
from warpforge.selftest import CASES as SELFTEST_CASES  # noqa: E402
from warpforge.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ADV = ROOT / "server" / "warpforge" / "selftest" / "adversarial"
VAR = ROOT / "tests" / "fixtures" / "variants"
GELU = (ROOT / "kernels" / "gelu.cu", "gelu_forward")
SAXPY = (ROOT / "kernels" / "saxpy.cu", "saxpy")
REDUCE = (ROOT / "kernels" / "reduce_sum.cu", "reduce_sum")
FLOOR = (ADV / "floor_rowsum.cu", "row_sum")
RMSNORM = (ROOT / "kernels" / "rmsnorm.cu", "rmsnorm_rows")
HISTOGRAM = (ROOT / "kernels" / "histogram.cu", "histogram_atomic")

SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.6))
BOMB_SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=5.0, timing=TimingSettings(max_seconds=0.6))

T = TypeVar("T")
_LOOP = asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """One event loop for the module: evaluators and their workers live across tests."""
    return _LOOP.run_until_complete(coro)


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


_EVALUATORS: dict[tuple[str, str, EngineSettings], Evaluator] = {}


def evaluator(backend: Backend, original: tuple[Path, str], settings: EngineSettings = SETTINGS) -> Evaluator:
    key = (str(original[0]), original[1], settings)
    if key not in _EVALUATORS:
        _EVALUATORS[key] = Evaluator(original[0], original[1], backend=backend, settings=settings)
    return _EVALUATORS[key]


def variant(ev: Evaluator, path: Path) -> Candidate:
    return candidate_from_variant(ev.text, path.read_text(encoding="utf-8"), ev.kernel.name)


def explain(e: Evaluation) -> str:
    return f"{e.status}: {e.reason} | notes: {e.notes}"


_CONTROL = [0]


def control(backend: Backend, original: tuple[Path, str]) -> Evaluation:
    """A known-good candidate (the original with a harmless extra define) evaluated right after a bad one."""
    ev = evaluator(backend, original)
    _CONTROL[0] += 1
    e = run(ev.evaluate(ev.original.derive(defines={"WF_CONTROL": str(_CONTROL[0])}, family="control")))
    assert e.status == "ok", explain(e)
    return e


# --------------------------------------------------------------------------- adversarial and faulty candidates
CASES: list[tuple[str, tuple[Path, str], str, str, bool]] = [
    (c.file, (ROOT / "kernels" / c.original[0].name, c.original[1]) if c.original[0].parent.name == "originals"
     else c.original, c.status, c.reason, c.sensitivity) for c in SELFTEST_CASES
]


@pytest.mark.parametrize(("name", "original", "status", "reason", "sensitivity"), CASES, ids=[c[0] for c in CASES])
def test_adversarial_candidate_is_rejected_and_the_engine_goes_on(
    backend: Backend, name: str, original: tuple[Path, str], status: str, reason: str, sensitivity: bool
) -> None:
    ev = evaluator(backend, original, SETTINGS if sensitivity else replace(SETTINGS, sensitivity=False))
    e = run(ev.evaluate(variant(ev, ADV / name)))
    assert e.status == status, explain(e)
    assert reason.lower() in e.reason.lower(), explain(e)
    assert not e.ok
    control(backend, GELU)


def test_compile_bomb_hits_the_compile_timeout(backend: Backend) -> None:
    ev = evaluator(backend, GELU, BOMB_SETTINGS)
    e = run(ev.evaluate(variant(ev, ADV / "gelu_compile_bomb.cu")))
    assert e.status == "compile_error", explain(e)
    assert "exceeded 5 s" in e.reason
    assert e.seconds < 60
    control(backend, GELU)


def test_too_much_shared_memory_is_refused_before_launch(backend: Backend) -> None:
    ev = evaluator(backend, GELU)
    cand = variant(ev, ADV / "gelu_dynamic_smem.cu")
    sane = run(ev.evaluate(cand.derive(smem="256 * sizeof(float)")))
    assert sane.status == "ok", explain(sane)
    e = run(ev.evaluate(cand.derive(smem="300000")))
    assert e.status == "rejected", explain(e)
    assert "shared memory" in e.reason and "300000" in e.reason
    control(backend, GELU)


def test_sticky_error_restarts_the_worker_and_the_next_candidate_runs(backend: Backend) -> None:
    ev = evaluator(backend, GELU)
    before = backend.restarts
    e = run(ev.evaluate(variant(ev, ADV / "gelu_illegal_address.cu").derive(defines={"WF_AGAIN": "1"})))
    assert e.status == "crashed" and "sticky" in e.reason, explain(e)
    after = control(backend, GELU)
    assert backend.restarts == before + 1
    assert after.ok


def test_sanitizer_catches_an_out_of_bounds_read_that_outputs_cannot_show(backend: Backend) -> None:
    if sanitizer_path() is None:
        pytest.skip("compute-sanitizer is not installed")
    ev = evaluator(backend, GELU)
    cand = variant(ev, ADV / "gelu_oob_read.cu")
    plain = run(ev.evaluate(cand))
    assert plain.status == "ok", explain(plain)  # differential testing cannot see it...
    e = run(ev.sanitize(cand))
    assert e.status == "rejected", explain(e)  # ...memcheck can
    assert "memcheck" in e.reason
    clean = run(ev.sanitize(ev.original))
    assert clean.status == "ok", explain(clean)
    assert clean.sanitizer is not None and all(t.ran for t in clean.sanitizer.tools)


# --------------------------------------------------------------------------- known speedups
def test_faster_reduce_sum_is_verified_and_a_tail_bug_is_caught(backend: Backend) -> None:
    ev = evaluator(backend, REDUCE)
    fast = run(ev.evaluate(variant(ev, VAR / "reduce_sum_fast.cu")))
    assert fast.status == "ok", explain(fast)
    assert fast.speedup is not None and fast.speedup > 1.5, fast.timing
    assert fast.timing is not None and fast.timing.speedup is not None and fast.timing.speedup.low > 1.3
    assert {"spec", "odd"} <= {r.variant for r in fast.correctness.runs}
    assert len(fast.correctness.seeds) >= 3
    wrong = run(ev.evaluate(variant(ev, VAR / "reduce_sum_tailbug.cu")))
    assert wrong.status == "incorrect", explain(wrong)
    assert wrong.reason.startswith("odd size"), wrong.reason  # right at the spec size, wrong at the odd one


def test_block_size_variants_in_flight_at_once(backend: Backend) -> None:
    ev = evaluator(backend, RMSNORM)
    cands = [ev.original.derive(defines={"BLOCK_SIZE": str(b)}) for b in (128, 256, 512, 1024)]

    async def all_of() -> list[Evaluation]:
        return list(await asyncio.gather(*(ev.evaluate(c) for c in cands)))

    results = run(all_of())
    assert [r.status for r in results] == ["ok"] * 4, [explain(r) for r in results]
    assert all(r.speedup is not None for r in results)


def test_identical_work_is_not_done_twice(backend: Backend, tmp_path: Path) -> None:
    store = Store(tmp_path / "wf.db")
    ev = Evaluator(SAXPY[0], SAXPY[1], backend=backend, settings=SETTINGS, store=store)
    cand = ev.original.derive(block=("512",), grid=("cdiv(N, 512)",))
    first = run(ev.evaluate(cand))
    assert first.status == "ok" and not first.cached, explain(first)
    ev2 = Evaluator(SAXPY[0], SAXPY[1], backend=backend, settings=SETTINGS, store=store)
    second = run(ev2.evaluate(cand))
    assert second.cached and second.status == "ok" and second.speedup == first.speedup
    assert store.count_evaluations() == 1


# --------------------------------------------------------------------------- timing
def test_timing_is_repeatable(backend: Backend) -> None:
    medians = []
    for _ in range(4):
        ev = Evaluator(SAXPY[0], SAXPY[1], backend=backend, settings=SETTINGS)
        e = run(ev.baseline())
        assert e.status == "ok" and e.timing is not None and e.timing.candidate is not None, explain(e)
        medians.append(e.timing.candidate.median)
    assert cv(medians) < 0.02, medians


def test_identical_code_is_not_reported_as_a_speedup(backend: Backend) -> None:
    """Regression: with one buffer set per side, placement made identical histogram code look 2x faster."""
    ev = evaluator(backend, HISTOGRAM)
    for flags in (("-Xptxas", "-O3"), ("-DWF_SAME=1",)):
        e = run(ev.evaluate(ev.original.derive(flags=flags)))
        assert e.status == "ok" and e.speedup is not None, explain(e)
        assert 0.9 < e.speedup < 1.1, (flags, e.timing)


def test_graph_mode_times_both_sides_the_same_way(backend: Backend) -> None:
    settings = EngineSettings(kernel_timeout=4.0, timing=TimingSettings(max_seconds=0.6, graph=True))
    ev = evaluator(backend, GELU, settings)
    e = run(ev.evaluate(ev.original.derive(block=("128",), grid=("cdiv(N, 128)",))))
    assert e.status == "ok", explain(e)
    assert e.timing is not None and "graph" in e.timing.mode
    assert e.speedup is not None and 0.5 < e.speedup < 2.0


#: gelu at 2^18 elements: a few microseconds per launch, where event timing measures launch overhead
SMALL_GELU_TEXT = (ROOT / "kernels" / "gelu.cu").read_text(encoding="utf-8").replace("size N = 1 << 25",
                                                                                    "size N = 1 << 18")


def test_a_microsecond_kernel_is_timed_cold_per_launch_and_back_to_back_in_graph_replays(backend: Backend) -> None:
    """Cold: events around each launch, L2 flushed before each (issue 28); the hot figure: graph replays."""
    assert "1 << 18" in SMALL_GELU_TEXT
    settings = replace(SETTINGS, timing=replace(SETTINGS.timing, hot=True))
    ev = Evaluator(GELU[0], GELU[1], text=SMALL_GELU_TEXT, backend=backend, settings=settings)
    e = run(ev.evaluate(ev.original.derive(flags=("-DWF_SAME=1",))))
    assert e.status == "ok", explain(e)
    assert e.timing is not None and e.timing.speedup is not None
    assert e.timing.mode.startswith("events around each launch, L2 flushed"), e.timing.mode
    assert 0.97 < e.timing.speedup.ratio < 1.03, e.timing.speedup
    assert not e.timing.significant, e.timing.speedup  # identical code is no win
    hot = e.timing.hot
    assert hot is not None and hot.graph and hot.launches > 1 and hot.speedup is not None, hot
    assert 0.97 < hot.speedup.ratio < 1.03, hot.speedup
    big = run(evaluator(backend, GELU).baseline())  # ~100 µs per launch: events, as before
    assert big.timing is not None and big.timing.mode.startswith("events"), big.timing.mode


def test_the_floor_cheat_is_also_caught_by_the_sensitivity_check(backend: Backend) -> None:
    """It ignores its input (constant test data); perturbed inputs expose that before the floor check."""
    ev = evaluator(backend, FLOOR)
    e = run(ev.evaluate(variant(ev, ADV / "floor_cheat.cu")))
    assert e.status == "incorrect" and "tail sensitivity" in e.reason, explain(e)


def test_a_dropped_tail_passes_every_ordinary_check_and_the_sensitivity_check_catches_it(backend: Backend) -> None:
    blind = evaluator(backend, REDUCE, replace(SETTINGS, sensitivity=False))
    e = run(blind.evaluate(variant(blind, ADV / "reduce_tail_drop.cu")))
    assert e.status == "ok", explain(e)  # rtol 1e-4 hides 128 missing elements of 2^24...
    ev = evaluator(backend, REDUCE)
    caught = run(ev.evaluate(variant(ev, ADV / "reduce_tail_drop.cu")))
    assert caught.status == "incorrect" and "tail sensitivity" in caught.reason, explain(caught)  # ...not this
    good = run(ev.evaluate(variant(ev, VAR / "reduce_sum_fast.cu")))
    assert good.status == "ok", explain(good)
    tail_runs = [r for r in good.correctness.runs if r.purpose == "sensitivity"]
    assert {r.variant for r in tail_runs} == {"spec", "odd"}
    assert all(r.tail_changes.get("out") == 1 for r in tail_runs), [r.tail_changes for r in tail_runs]


def test_ncu_confirms_a_real_win_and_flags_a_fake_one(backend: Backend) -> None:
    if ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    ev = evaluator(backend, REDUCE)
    fast = run(ev.sanitize(variant(ev, VAR / "reduce_sum_fast.cu")))
    assert fast.status == "ok", explain(fast)
    assert fast.timing is not None and fast.timing.confirmation is not None
    conf = fast.timing.confirmation
    assert conf.ran, conf.note
    assert conf.agrees and conf.ncu_ratio is not None and conf.ncu_ratio > 1.3, conf.text()
    assert fast.timing.significant
    hot = fast.timing.hot  # the winner's back-to-back figure, measured with its checks
    assert hot is not None and hot.speedup is not None and hot.speedup.ratio > 1.3, hot
    # A fake: identical kernels claimed 1.3x faster. ncu measures both and finds no such difference.
    built = run(ev._baseline_built())
    grid, block, smem = built.launches["spec"]
    side = Side(built.cubin, built.symbol, (grid, block, smem))
    fake = confirm(side, side, ev.layouts["spec"], Speedup(1.30, 1.25, 1.35, 100), seed=ev._seeds()[0])
    assert fake.ran, fake.note
    assert fake.agrees is False and fake.ncu_ratio is not None and 0.9 < fake.ncu_ratio < 1.1, fake.text()
    assert "not significant" in fake.text()


def test_energy_objective_reports_joules_per_launch(backend: Backend) -> None:
    settings = EngineSettings(kernel_timeout=4.0, objective="energy", timing=TimingSettings(max_seconds=0.4))
    ev = evaluator(backend, GELU, settings)
    e = run(ev.evaluate(ev.original.derive(block=("512",), grid=("cdiv(N, 512)",))))
    assert e.status == "ok", explain(e)
    assert e.energy is not None
    if "unavailable" in e.energy.note:
        pytest.skip(e.energy.note)
    assert e.energy.joules_per_launch > 0 and e.energy.seconds >= 1.0
    assert e.energy.ratio is not None and 0.3 < e.energy.ratio < 3.0


# --------------------------------------------------------------------------- command line
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "warpforge", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)


def test_cli_verify_confirms_a_faster_variant_and_rejects_a_wrong_one() -> None:
    ok = _cli("verify", "kernels/reduce_sum.cu", "--kernel", "reduce_sum", "--candidate",
              "tests/fixtures/variants/reduce_sum_fast.cu", "--json", "--seconds", "0.6")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    data = json.loads(ok.stdout)
    assert data["status"] == "ok" and data["speedup"] > 1.5
    assert data["sanitizer"] is None or data["sanitizer"]["ok"]
    bad = _cli("verify", "kernels/reduce_sum.cu", "--kernel", "reduce_sum", "--candidate",
               "tests/fixtures/variants/reduce_sum_tailbug.cu", "--json", "--seconds", "0.6")
    assert bad.returncode == 1, bad.stderr + bad.stdout
    assert json.loads(bad.stdout)["status"] == "incorrect"


def test_cli_bench_reports_time_and_bandwidth() -> None:
    r = _cli("bench", "kernels/saxpy.cu", "--json", "--seconds", "0.6")
    assert r.returncode == 0, r.stderr + r.stdout
    data = json.loads(r.stdout)
    assert data["median_ms"] > 0 and data["reps"] >= 10
    assert data["achieved_gbps"] > 100 and data["peak_gbps"] > 500
    assert 0.2 < data["fraction_of_peak"] < 1.3
