"""The anytime search's scheduling (``app.optimize``, ``search.engine``): the baseline profile beside the
first round, on a GPU held from the evaluator's own pool, within its share of the budget; the first round
built ahead; the phases and the first verified improvement; Nsight Compute's session killed at its limit;
the GPU's ceilings kept per GPU and driver.

The job, the search, the rules policy and the GPU pool (``LocalBackend``'s ``GpuPool``: its devices are
handed out for real, no worker is started) all run for real. Two stand-ins, because this machine has no
GPU: the evaluator (SYNTHETIC: a build is a sleep, a verification and timing is a sleep inside a device
lease from the pool, the speedup a fixed factor per family, as tests/test_search.py's landscapes) and the
profiler (a sleep that honours its deadline, then a report with one measured finding). What the tests
assert is what the job does with them: who holds which device when, in which order, for how long.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from warpforge.app import JobEvent, OptimizeJob, OptimizeSettings, PreparedKernel, Profiled, Progress
from warpforge.app import optimize as optimize_mod
from warpforge.app.optimize import PROFILE_SHARE, profile_seconds
from warpforge.app.phases import Phases
from warpforge.compiler.nsight import ProfilerUnavailable, run_ncu
from warpforge.cuda.candidate import Candidate
from warpforge.gpu.backends import LocalBackend
from warpforge.profile import roofline
from warpforge.profile.analyzers import load as load_analyzers
from warpforge.profile.findings import make
from warpforge.profile.profiler import ProfileReport
from warpforge.profile.roofline import Ceilings, KernelProfile, Perf, classify
from warpforge.search.beam import BeamConfig, BeamSearch
from warpforge.search.engine import Budget
from warpforge.search.tree import Node, SearchContext

load_analyzers()  # the profile codes (WF2xx) are defined by their analyzers
SAXPY = (ROOT / "kernels" / "saxpy.cu").read_text(encoding="utf-8").replace("const float* x", "float* x")
#: synthetic speedup per family (SYNTHETIC, as tests/lsp_fixture_evaluator.py's)
FACTORS = {"const_restrict": 1.08, "launch_bounds": 1.03, "block_size": 1.12, "vectorize": 1.6, "unroll": 1.02}


@dataclass(frozen=True)
class Ev:
    status: str
    reason: str
    speedup: float | None
    time_split: dict[str, float]


class PooledEvaluator:
    """SYNTHETIC evaluator whose GPU work takes a device from a real ``LocalBackend`` pool, as the real
    evaluator's does (``Evaluator._on_device``); builds started by ``prebuild`` are taken by the evaluation."""

    def __init__(self, devices: list[int], build_s: float = 0.05, gpu_s: float = 0.03) -> None:
        self.backend = LocalBackend(devices=devices)
        self.t0 = time.monotonic()
        self.build_s, self.gpu_s = build_s, gpu_s
        #: (start, end, device, candidate hash) of every piece of GPU work
        self.gpu: list[tuple[float, float, int, str]] = []
        #: candidate hash -> when its build started, and whether ``prebuild`` started it
        self.built: dict[str, tuple[float, bool]] = {}
        self._ahead: dict[str, asyncio.Future[None]] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def _build(self, c: Candidate, ahead: bool) -> None:
        self.built.setdefault(c.hash, (self.now(), ahead))
        await asyncio.sleep(self.build_s)

    def prebuild(self, c: Candidate) -> None:
        if c.hash not in self._ahead:
            self._ahead[c.hash] = asyncio.ensure_future(self._build(c, True))

    async def evaluate(self, c: Candidate) -> Ev:
        t = time.perf_counter()
        ahead = self._ahead.pop(c.hash, None)
        await (ahead if ahead is not None else self._build(c, False))
        build = time.perf_counter() - t
        async with self.backend.acquire() as dev:
            start = self.now()
            await asyncio.sleep(self.gpu_s)
            self.gpu.append((start, self.now(), dev.device, c.hash))
        speed = 1.0 if c.family == "original" else FACTORS.get(c.family, 0.97)
        return Ev("ok", "", speed, {"build": build, "gpu": self.gpu_s})

    async def aclose(self) -> None:
        self.backend.close()


class SlowProfiler:
    """Stand-in for ``profile_kernel`` (no ncu here): takes ``seconds`` or until its deadline, whichever is
    first, then reports one measured finding (or, cut off by the deadline, a notice and none)."""

    def __init__(self, seconds: float, t0: float) -> None:
        self.seconds = seconds
        self.t0 = t0
        self.calls: list[dict[str, Any]] = []
        self.span: tuple[float, float] | None = None

    def __call__(self, file: str, kernel: str, *, deadline: float, timeout: float, device: int,
                 parsed: Any, **_: Any) -> ProfileReport:
        start = time.monotonic()
        self.calls.append({"deadline": deadline, "timeout": timeout, "device": device, "start": start})
        left = deadline - start
        time.sleep(max(0.0, min(self.seconds, left)))
        self.span = (start - self.t0, time.monotonic() - self.t0)
        src, _model, k, _spec = parsed
        report = ProfileReport(file, kernel)
        if self.seconds > left:
            report.notice = f"Nsight Compute did not finish within {timeout:.0f} s"
            return report
        perf = Perf("ncu", duration_ns=5e4, dram_bytes=1e8)
        report.profile = KernelProfile("NVIDIA H100", perf, classify(perf), None, None, 0.05)
        report.findings = [make("WF210", file, src.range(k.name_span), "measured: loads are not vectorized",
                                kernel=kernel)]
        return report


def _job(evaluator: PooledEvaluator | Any, profiler: SlowProfiler | None, seconds: float = 60.0,
         budget: int = 8) -> tuple[OptimizeJob, list[tuple[float, JobEvent]]]:
    events: list[tuple[float, JobEvent]] = []
    p = PreparedKernel.from_text("saxpy.cu", SAXPY, "saxpy")
    job = OptimizeJob(p, OptimizeSettings(budget=budget, seconds=seconds, arch="sm_90"), lambda req: evaluator,
                      on_event=lambda e: events.append((time.monotonic(), e)), profiler=profiler)
    return job, events


@pytest.fixture(autouse=True)
def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def test_on_one_gpu_the_first_round_is_timed_before_the_profile_takes_the_gpu() -> None:
    """One GPU: the original and the first round are verified and timed first (the first verified improvement
    comes before any profile), then the profile takes the GPU from the evaluator's pool; no GPU work overlaps
    it; its measured finding reaches the policy for the rounds after it; the phases say all of it."""
    ev = PooledEvaluator([0])
    prof = SlowProfiler(0.6, ev.t0)
    job, events = _job(ev, prof)
    outcome = asyncio.run(job.run())
    assert prof.span is not None and len(prof.calls) == 1 and prof.calls[0]["device"] == 0
    p_start, p_end = prof.span
    round1 = {n.candidate.hash for n in outcome.result.nodes if n.parent is outcome.result.root}
    first = {n.candidate.hash for n in outcome.result.nodes if n.parent is None} | round1
    # the original and the whole first round were on the GPU before the profile started
    assert round1 and all(end <= p_start + 0.05 for _s, end, _d, h in ev.gpu if h in first), (ev.gpu, prof.span)
    # honest timing: no GPU work overlaps the profile
    assert all(end <= p_start + 0.05 or start >= p_end for start, end, _d, _h in ev.gpu), (ev.gpu, prof.span)
    # the first verified improvement came before the profile
    assert outcome.result.improved and job.phases.first_improvement is not None
    assert job.phases.started + job.phases.first_improvement <= prof.calls[0]["start"]
    # its finding reached the request and the policy for the rounds proposed after it
    (profiled,) = [e for _, e in events if isinstance(e, Profiled)]
    assert [f.code for f in profiled.findings] == ["WF210"] and list(job.request.findings) == list(profiled.findings)
    offline = getattr(job._policy, "offline", job._policy)
    assert [f.code for f in offline.findings] == ["WF210"]
    assert any(isinstance(e, Progress) and "after the first round" in e.message for _, e in events)
    ph = job.phases
    assert ph.profile_beside is True
    # the profile's own span (plus the hop to its thread, which a loaded 2-core CI machine stretched to 0.17 s)
    assert p_end - p_start - 0.05 <= ph.seconds("profile") <= p_end - p_start + 0.4
    assert ph.spans["profile_gpu"][1] >= ph.spans["profile"][1] - 0.05  # the GPU held until the profiler returned
    # its share is counted from its start
    call = prof.calls[0]
    assert call["deadline"] - call["start"] == pytest.approx(profile_seconds(60.0), abs=0.2)
    js = ph.to_json()
    assert set(js["phases"]) == {"setup", "profile", "profile_gpu", "baseline", "search", "checks"}
    assert js["first_improvement_seconds"] == pytest.approx(ph.first_improvement, abs=1e-3)
    assert js["compile_busy_seconds"] > 0 and js["gpu_busy_seconds"] > 0
    assert "first verified improvement at" in ph.text() and "profile" in ph.text()
    assert "first verified improvement after" in job.message


def test_with_two_gpus_the_profile_holds_one_and_the_search_times_on_the_other() -> None:
    ev = PooledEvaluator([0, 1])
    prof = SlowProfiler(0.6, ev.t0)
    job, _ = _job(ev, prof)
    asyncio.run(job.run())
    assert prof.span is not None
    _start, p_end = prof.span
    held = prof.calls[0]["device"]
    other = 1 - held
    # nothing on the profile's device while it profiles; the other device works meanwhile
    assert all(start >= p_end for start, _e, dev, _h in ev.gpu if dev == held)
    assert any(start < p_end for start, _e, dev, _h in ev.gpu if dev == other), ev.gpu
    assert job.phases.first_improvement is not None and job.phases.first_improvement < p_end


def test_the_profile_gets_a_share_of_the_budget_and_the_search_goes_on_without_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4 s job gives the profile 1 s (``PROFILE_SHARE``; the least share worth a profile lowered from 8 s to
    keep the test short); a profile that needs longer is cut off there, the search keeps the static findings,
    and says so."""
    monkeypatch.setattr(optimize_mod, "PROFILE_MIN_SECONDS", 0.5)
    ev = PooledEvaluator([0])
    prof = SlowProfiler(30.0, ev.t0)
    job, events = _job(ev, prof, seconds=4.0)
    static = list(job.request.findings)
    asyncio.run(job.run())
    call = prof.calls[0]
    share = call["deadline"] - call["start"]  # counted from its start, after the first round on one GPU
    assert PROFILE_SHARE * 4.0 - 0.1 <= share <= PROFILE_SHARE * 4.0 and call["timeout"] <= PROFILE_SHARE * 4.0
    assert job.phases.seconds("profile") == pytest.approx(1.0, abs=0.25)
    assert list(job.request.findings) == static  # nothing measured: the static findings stay
    (profiled,) = [e for _, e in events if isinstance(e, Profiled)]
    assert profiled.findings == () and "did not finish" in (profiled.report.notice or "")
    assert any(isinstance(e, Progress) and "goes on with the static findings" in e.message for _, e in events)
    assert job.state == "done" and job.outcome is not None and job.outcome.result.evaluations > 1


def test_profile_seconds_is_a_quarter_of_the_budget_capped() -> None:
    assert profile_seconds(20) == 5.0 and profile_seconds(90) == 22.5
    assert profile_seconds(None) == 300.0 and profile_seconds(5000) == 300.0


def test_a_share_too_short_for_a_profile_is_left_to_the_search() -> None:
    """``--time 20``: a quarter is 5 s, less than Nsight Compute needs; no profile is started and the GPU is the
    search's from the start."""
    ev = PooledEvaluator([0])
    prof = SlowProfiler(0.3, ev.t0)
    job, events = _job(ev, prof, seconds=20.0)
    static = list(job.request.findings)
    asyncio.run(job.run())
    assert prof.calls == [] and "profile" not in job.phases.spans and job.phases.profile_beside is None
    (profiled,) = [e for _, e in events if isinstance(e, Profiled)]
    assert profiled.findings == () and "share of a 20 s budget is 5 s" in (profiled.report.notice or "")
    assert list(job.request.findings) == static and job.outcome is not None and job.outcome.result.improved


class Unpooled:
    """SYNTHETIC evaluator with no local pool (a plug-in's, or a Ray cluster's as the job sees it)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.starts: list[float] = []

    async def evaluate(self, c: Candidate) -> Ev:
        self.starts.append(time.monotonic() - self.t0)
        await asyncio.sleep(0.01)
        return Ev("ok", "", 1.0 if c.family == "original" else FACTORS.get(c.family, 0.97), {})


def test_without_a_pool_to_share_the_profile_runs_before_the_search() -> None:
    ev = Unpooled()
    prof = SlowProfiler(0.3, ev.t0)
    job, _ = _job(ev, prof)
    asyncio.run(job.run())
    assert prof.span is not None and ev.starts and min(ev.starts) >= prof.span[1]
    assert job.phases.profile_beside is False and "profile_gpu" not in job.phases.spans
    assert "before the search" in job.phases.text()


# ----------------------------------------------------------------------------------------- the engine
class Ahead:
    """SYNTHETIC: the root's evaluation is slow; records every prebuild and when it came."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.prebuilt: list[tuple[str, float]] = []
        self.root_done: float | None = None

    def prebuild(self, c: Candidate) -> None:
        self.prebuilt.append((c.hash, time.monotonic() - self.t0))

    async def evaluate(self, c: Candidate) -> Ev:
        if c.family == "original":
            await asyncio.sleep(0.3)
            self.root_done = time.monotonic() - self.t0
            return Ev("ok", "", 1.0, {})
        return Ev("ok", "", 1.0 + (len(c.hash) % 7) / 10, {})


class ManyFamilies:
    name = "synthetic"

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        if node.parent is not None:
            return []
        return [Candidate("k", f"k{fam}{i}", family=f"f{fam}") for fam in range(6) for i in range(3)]


def test_the_first_round_is_proposed_and_built_while_the_root_is_evaluated() -> None:
    ev = Ahead()
    search = BeamSearch(ManyFamilies(), ev, budget=Budget(max_candidates=50, wall_seconds=30),
                        config=BeamConfig(root_fanout=8, rounds=1))
    result = asyncio.run(search.run(Candidate("k", "k", family="original")))
    assert ev.root_done is not None and ev.prebuilt
    assert all(at < ev.root_done for _, at in ev.prebuilt)
    round1 = [n.candidate.hash for n in result.root.children]
    assert [h for h, _ in ev.prebuilt] == round1 and len(round1) == 8
    assert len({n.candidate.family for n in result.root.children}) == 6  # the beam's round-robin, built ahead


# ----------------------------------------------------------------------------------------- ncu, ceilings
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_timed_out_ncu_takes_its_whole_session_with_it(tmp_path: Path) -> None:
    """The harness ncu starts must be gone when ``run_ncu`` gives up: the job gives the GPU back then."""
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    t = time.monotonic()
    with pytest.raises(ProfilerUnavailable) as e:
        run_ncu(["/bin/sh", "-c", script], timeout=0.5, env=dict(os.environ))
    assert e.value.kind == "timeout" and time.monotonic() - t < 10
    child = int(pidfile.read_text())
    for _ in range(50):  # reaped by init once killed; /proc/PID goes or turns into a zombie
        stat = Path(f"/proc/{child}/stat")
        if not stat.exists() or stat.read_text().split(") ")[1].startswith("Z"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the harness stand-in {child} outlived ncu's timeout")


def test_ceilings_are_kept_per_gpu_and_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    old = Ceilings("NVIDIA H100 80GB HBM3", 3000.0, driver="550.54")
    new = Ceilings("NVIDIA H100 80GB HBM3", 3100.0, driver="580.65")
    for c in (old, new):
        path = roofline.ceilings_path(c.gpu, c.driver)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(__import__("json").dumps(c.to_json()))
        time.sleep(0.02)
    assert roofline.cached_ceilings(old.gpu, "550.54") == old
    assert roofline.cached_ceilings(old.gpu, "580.65") == new
    assert roofline.cached_ceilings(old.gpu, "999.1") is None  # another driver measures again
    assert roofline.cached_ceilings(old.gpu) == new  # by name alone: the newest kept
    assert roofline.cached_ceilings("NVIDIA H200") is None
    assert f"__m{roofline.MEASURE_VERSION}.json" in roofline.ceilings_path(old.gpu, old.driver).name
    # a ceilings reader that needs nothing measured does not measure (no GPU here: it would fail anyway)
    assert roofline.ceilings_for("NVIDIA H200", measure=False) is None


def test_phases_json_and_text_for_a_job_without_a_profile() -> None:
    ph = Phases(started=100.0)
    ph.span("setup", 0.0, 0.5)
    ph.span("baseline", 0.5, 2.0)
    ph.span("search", 2.0, 15.0)
    ph.span("checks", 15.0, 19.0)
    ph.improved(6.25)
    ph.improved(9.0)  # only the first counts
    js = ph.to_json()
    assert js["first_improvement_seconds"] == 6.25 and js["profile_beside_search"] is None
    assert js["phases"]["search"] == {"start": 2.0, "end": 15.0, "seconds": 13.0}
    assert ph.text() == ("time: setup 0.5 s · baseline 1.5 s · search 13.0 s · winner's checks 4.0 s · "
                         "first verified improvement at 6.2 s")


def test_prebuild_is_taken_by_the_real_evaluators_evaluation() -> None:
    """The real evaluator's ``prebuild``: the build future is kept and the evaluation takes it, once."""
    from warpforge.gpu.evaluator import Evaluator

    ev = Evaluator("saxpy.cu", "saxpy", text=SAXPY, backend=LocalBackend(devices=[0]))
    calls: list[str] = []

    async def fake_build(c: Candidate) -> Any:  # the compile pool is not what is under test here
        calls.append(c.hash)
        return c.hash

    ev._build = fake_build  # type: ignore[method-assign]

    async def go() -> tuple[Any, Any]:
        variant = Candidate("saxpy", SAXPY[SAXPY.index("__global__"):].replace("a * x[i]", "x[i] * a"),
                            family="test")
        ev.prebuild(variant)
        ev.prebuild(variant)  # twice: one build
        ev.prebuild(ev.original)  # the original is built by the baseline, never ahead
        got = await ev._built(variant)
        again = await ev._built(variant)  # taken once: a second evaluation builds anew
        return got, again

    try:
        got, again = asyncio.run(go())
    finally:
        ev.backend.close()
    assert got == again and len(calls) == 2 and len(set(calls)) == 1


class RecordingDevice:
    """A device handle that records the requests a backend sends it (no worker behind it: SYNTHETIC answers)."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.key = f"local:{device}"
        self.worker_pid = 1000 + device
        self.ops: list[str] = []

    async def request(self, msg: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        self.ops.append(str(msg["op"]))
        if msg["op"] == "info":
            return {"status": "ok", "info": {"name": "SYNTHETIC", "pid": self.worker_pid}}
        return {"status": "ok", "peak_gbps": 3000.0 + self.device}


def test_the_warm_up_times_nothing_on_the_device_the_profile_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """``warm_up`` measures each device's copy bandwidth (a timed copy) before candidates arrive: not on the
    device the profile holds. Its worker is started (``info``); its bandwidth waits for the first candidate."""
    backend = LocalBackend(devices=[0, 1])
    devices = [RecordingDevice(0), RecordingDevice(1)]

    async def all_devices() -> list[RecordingDevice]:
        return devices

    monkeypatch.setattr(backend, "all_devices", all_devices)
    backend.reserved.add("local:0")
    try:
        asyncio.run(backend.warm_up())
        assert devices[0].ops == ["info"] and devices[1].ops == ["info", "peak"]
        backend.reserved.discard("local:0")
        info, peak = asyncio.run(backend.facts(devices[0]))  # what a candidate holding it asks first
        assert devices[0].ops == ["info", "peak"] and peak == 3000.0 and info["name"] == "SYNTHETIC"
        assert asyncio.run(backend.facts(devices[0]))[1] == 3000.0 and devices[0].ops == ["info", "peak"]
    finally:
        backend.close()


class NothingWinsEvaluator(PooledEvaluator):
    """SYNTHETIC: the original timed against itself reads 1.002x (as a real one can), every variant is slower."""

    async def evaluate(self, c: Candidate) -> Ev:
        got = await super().evaluate(c)
        return Ev(got.status, got.reason, 1.002 if c.family == "original" else 0.9, got.time_split)


def test_a_job_that_finds_nothing_faster_has_no_first_improvement() -> None:
    """Found on the wide sample (H200): a search that stopped with "no variant beat the baseline" reported a
    first improvement at the end of the baseline, the original's own 1.002x read from the history."""
    job, _ = _job(NothingWinsEvaluator([0]), None, budget=6)
    outcome = asyncio.run(job.run())
    assert not outcome.result.improved
    assert job.phases.first_improvement is None and job.phases.to_json()["first_improvement_seconds"] is None
    assert "first verified improvement" not in job.phases.text()
