"""The jobs both front ends run (``warpforge.app``): one parse per job, the events in order, the baseline
profile, cancellation, failure and cleanup.

The search runs for real with the deterministic fixture evaluator (real nvcc builds, synthetic speedups:
this machine has no GPU); the profile runs the real profiler, which on this machine degrades to the
static findings and says so. On the GPU machine tests/test_gpu_engine.py covers measured evaluations.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.app import (
    CandidateFound,
    Evidence,
    JobError,
    JobEvent,
    JobFailed,
    JobFinished,
    JobStarted,
    OptimizeJob,
    OptimizeSettings,
    PreparedKernel,
    Profiled,
    ProfileJob,
    ProfileSettings,
    Progress,
)
from warpforge.app.backend import BackendChoice, make_evaluator
from warpforge.cuda.parser import parse_counts, watched_parses
from warpforge.gpu.supervisor import gpu_unavailable_reason
from warpforge.profile.hints import analyze_source
from warpforge.search.optimize import OptimizeRequest

SAXPY = (ROOT / "kernels" / "saxpy.cu").read_text(encoding="utf-8")
NO_GPU = gpu_unavailable_reason() is not None


class Recorded:
    """The fixture evaluator, recording what the job did with it."""

    def __init__(self, req: OptimizeRequest) -> None:
        from lsp_fixture_evaluator import make

        self.inner = make(req)
        self.request = req
        self.evaluated = 0
        self.closed = False

    async def evaluate(self, candidate: Any) -> Any:
        self.evaluated += 1
        return await self.inner.evaluate(candidate)

    async def aclose(self) -> None:
        self.closed = True


def prepared(text: str = SAXPY, file: str = "saxpy.cu") -> PreparedKernel:
    return PreparedKernel.from_text(file, text, "saxpy")


def test_prepared_kernel_errors_name_the_file_and_the_kernels() -> None:
    with pytest.raises(JobError, match=r"k\.cu: no __global__ kernel named `nope` \(kernels here: saxpy\)"):
        PreparedKernel.from_text("k.cu", SAXPY, "nope")
    with pytest.raises(JobError, match=r"k\.cu"):  # a spec that cannot be built is the same one error type
        PreparedKernel.from_text("k.cu", "__global__ void saxpy(float* p) { p[0] = 1; }\n", "saxpy")


def test_rebased_follows_a_moved_kernel_and_refuses_a_changed_one() -> None:
    p = prepared()
    moved = p.rebased("// a comment above\n" + SAXPY)
    assert moved.kernel_text == p.kernel_text and moved.kernel.span.start > p.kernel.span.start
    changed = SAXPY.replace("a * x[i] + y[i]", "a * x[i] - y[i]")
    assert changed != SAXPY
    with pytest.raises(JobError, match="changed since the job started"):
        p.rebased(changed)
    with pytest.raises(JobError, match="no longer in the file"):
        p.rebased("__global__ void other() {}\n")


def test_the_evaluator_reuses_the_jobs_parse_and_spec(tmp_path: Path) -> None:
    p = prepared()
    choice = BackendChoice("local", workspace=tmp_path)
    job = OptimizeJob(p, OptimizeSettings(), lambda req: make_evaluator(choice, req))
    evaluator = job.start_evaluator()
    try:
        assert evaluator.spec is p.spec and evaluator.model is p.model  # type: ignore[attr-defined]
        assert evaluator.original.source == p.kernel_text  # type: ignore[attr-defined]
    finally:
        asyncio.run(evaluator.close())  # type: ignore[attr-defined]


@needs_nvcc
def test_optimize_job_events_in_order_and_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    text = SAXPY.replace("const float* x", "float* x")  # room for const_restrict, whatever else applies
    p = prepared(text)
    static = [f for f in analyze_source("saxpy.cu", text, kernels=["saxpy"]).findings]
    events: list[JobEvent] = []
    made: list[Recorded] = []

    def evaluator(req: OptimizeRequest) -> Recorded:
        assert req.prepared == p.parts()  # the request carries the job's one parse
        made.append(Recorded(req))
        return made[-1]

    job = OptimizeJob(p, OptimizeSettings(budget=6, seconds=120), evaluator, findings=static,
                      on_event=events.append)
    outcome = asyncio.run(job.run())
    assert isinstance(events[0], JobStarted) and events[0].kind == "optimize"
    assert isinstance(events[-1], JobFinished) and events[-1].state == "done" and job.state == "done"
    assert outcome.result.improved and events[-1].improved
    assert "faster (verified on deterministic fixture (no GPU))" in events[-1].message
    profiled = [e for e in events if isinstance(e, Profiled)]
    assert len(profiled) == 1 and events.index(profiled[0]) < next(
        i for i, e in enumerate(events) if isinstance(e, Progress) and e.evaluations)
    if NO_GPU:  # nothing measured: the static findings keep guiding the search, and the notice says why
        assert profiled[0].findings == () and "needs an NVIDIA GPU" in (profiled[0].report.notice or "")
        assert list(job.request.findings) == static
    found = [e for e in events if isinstance(e, CandidateFound)]
    assert found and all(e.speedup > 1.0 and "+++ b/saxpy.cu" in e.diff for e in found)
    assert found[-1].evidence.seeds == 3 and found[-1].evidence.spread == 0.01
    assert job.node(found[-1].node.candidate.hash) is found[-1].node
    # every verified variant faster than the original is offered, once, not only each new best
    assert job.outcome is not None
    faster = {n.candidate.hash for n in job.outcome.result.nodes
              if n.parent is not None and n.verified and (n.speedup or 0) > 1.01}
    assert [e.node.candidate.hash for e in found] == list(dict.fromkeys(e.node.candidate.hash for e in found))
    assert {e.node.candidate.hash for e in found} == faster
    assert len(made) == 1 and made[0].closed and made[0].evaluated >= 2


@needs_nvcc
def test_a_job_parses_its_file_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's ``PreparedKernel`` is the one parse of its file: the baseline profile, the policy's canonical
    form, the evaluator and the diffs of the candidates it announces all reuse it. Counted by the parser
    itself (``cuda.parser.parse_counts``), on a text no earlier test parsed, so no cache hides a parse."""
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    text = f"// job {uuid.uuid4()}\n" + SAXPY.replace("const float* x", "float* x")
    key = hash(text.encode("utf-8"))
    watched_parses.add(key)
    try:
        assert parse_counts[key] == 0
        p = prepared(text)
        assert parse_counts[key] == 1
        events: list[JobEvent] = []
        job = OptimizeJob(p, OptimizeSettings(budget=6, seconds=120), Recorded, on_event=events.append)
        asyncio.run(job.run())
        assert any(isinstance(e, Profiled) for e in events) and any(isinstance(e, CandidateFound) for e in events)
        assert parse_counts[key] == 1
    finally:
        watched_parses.discard(key)


@needs_nvcc
def test_optimize_job_without_baseline_profile_and_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    events: list[JobEvent] = []
    made: list[Recorded] = []
    job = OptimizeJob(prepared(), OptimizeSettings(budget=6, profile_baseline=False),
                      lambda req: made.append(Recorded(req)) or made[-1], on_event=events.append)
    job.cancel.set()  # cancelled before the first round: the search stops with what it has
    asyncio.run(job.run())
    assert not any(isinstance(e, Profiled) for e in events)
    assert isinstance(events[-1], JobFinished) and events[-1].state == "cancelled" and made[0].closed


def test_optimize_job_failure_is_the_last_event_and_raised() -> None:
    events: list[JobEvent] = []

    def broken(req: OptimizeRequest) -> Any:
        raise RuntimeError("no such cluster")

    job = OptimizeJob(prepared(), OptimizeSettings(profile_baseline=False), broken, on_event=events.append)
    with pytest.raises(RuntimeError, match="no such cluster"):
        asyncio.run(job.run())
    assert isinstance(events[-1], JobFailed) and events[-1].message == "RuntimeError: no such cluster"
    assert job.state == "failed"


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: this test covers the degraded path")
def test_profile_job_without_a_gpu_gives_static_findings_and_the_notice() -> None:
    events: list[JobEvent] = []
    job = ProfileJob(prepared(), ProfileSettings(), on_event=events.append)
    report = asyncio.run(job.run())
    assert report is not None and report.profile is None and "needs an NVIDIA GPU" in (report.notice or "")
    (profiled,) = [e for e in events if isinstance(e, Profiled)]
    codes = {f.code for f in profiled.findings}
    assert "WF299" in codes and not any(c.startswith("WF0") for c in codes)
    assert isinstance(events[-1], JobFinished) and events[-1].state == "done" and job.message == report.notice


def test_profile_job_cancelled_discards_the_result() -> None:
    events: list[JobEvent] = []

    async def run() -> Any:
        job = ProfileJob(prepared(), ProfileSettings(), on_event=events.append)
        job.cancel.set()
        return await job.run(), job

    report, job = asyncio.run(run())
    assert report is None and job.state == "cancelled"
    assert isinstance(events[-1], JobFinished) and events[-1].message == "cancelled"


def test_evidence_reads_a_plugin_evaluation_and_a_missing_one() -> None:
    from lsp_fixture_evaluator import FixtureEvaluation

    ev = Evidence.of(FixtureEvaluation("ok", "", 1.5, 0.02, evidence={"seeds": [1, 2], "sizes": ["spec", "odd"]}))
    assert (ev.gpu, ev.spread, ev.seeds, ev.sizes) == ("deterministic fixture (no GPU)", 0.02, 2, ("spec", "odd"))
    assert Evidence.of(None) == Evidence()
