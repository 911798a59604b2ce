"""GPU tests of the profile stage: Nsight Compute on real kernels, the expected bottleneck classes.

Run on the GPU machine: ``pytest -m gpu tests/test_profile_gpu.py``. Skipped where there is no GPU, or no
``ncu``. Three reference kernels and one fixture, each profiled once (module-scoped): saxpy (streams
memory: memory-bound on DRAM, vectorization advised), the naive SGEMM (reloads operands from L1 for every
FMA: memory-bound on L1, a tensor-core opportunity), the naive softmax (16 blocks for 100+ SMs:
launch-bound), and a 4096-element SAXPY (a few microseconds: launch-bound with launch overhead). The
fallback without Nsight Compute is exercised too: one notice, and a class from timing alone.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason
from warpforge.profile import ncu as ncu_mod
from warpforge.profile import profiler
from warpforge.profile.profiler import ProfileReport, profile_kernel
from warpforge.profile.roofline import LAUNCH_BOUND, MEMORY_BOUND, cached_ceilings

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"GPU tests need an NVIDIA GPU and pycuda: {_WHY}", allow_module_level=True)
if ncu_mod.ncu_path() is None:
    pytest.skip("Nsight Compute (ncu) is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "kernels"
TINY = ROOT / "tests" / "fixtures" / "ncu_kernels" / "tiny_saxpy.cu"
_REPORTS: dict[str, tuple[ProfileReport, float]] = {}


def profiled(path: Path, kernel: str) -> tuple[ProfileReport, float]:
    """One profile per kernel for the whole module, with its wall time."""
    key = f"{path}:{kernel}"
    if key not in _REPORTS:
        t0 = time.perf_counter()
        rep = profile_kernel(str(path), kernel)
        _REPORTS[key] = (rep, time.perf_counter() - t0)
    return _REPORTS[key]


def codes(rep: ProfileReport) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in rep.findings:
        out.setdefault(f.code, []).append(f.line)
    return out


def test_saxpy_is_memory_bound_on_dram_with_vectorization_advice() -> None:
    rep, wall = profiled(KERNELS / "saxpy.cu", "saxpy")
    assert rep.notice is None, rep.notice
    assert rep.profile is not None and rep.profile.ncu is not None
    assert rep.cls == MEMORY_BOUND and rep.profile.bottleneck.unit == "DRAM", rep.profile.bottleneck
    assert (rep.profile.bottleneck.bandwidth_fraction or 0) > 0.6
    c = codes(rep)
    assert 15 in c.get("WF210", []), c  # y[i] = a * x[i] + y[i]: 32-bit, coalesced
    assert "WF104" not in c  # the static guess is replaced by the measured one
    assert wall < 20.0, f"profile took {wall:.1f} s"


def test_sgemm_is_l1_bound_and_a_tensor_core_candidate() -> None:
    rep, wall = profiled(KERNELS / "sgemm.cu", "sgemm_naive")
    assert rep.cls == MEMORY_BOUND and rep.profile is not None and rep.profile.bottleneck.unit == "L1"
    c = codes(rep)
    assert 27 in c.get("WF211", []), c
    assert wall < 20.0


def test_softmax_one_thread_per_row_is_launch_bound() -> None:
    rep, wall = profiled(KERNELS / "softmax.cu", "softmax_rows")
    assert rep.cls == LAUNCH_BOUND, rep.profile.bottleneck if rep.profile else rep.notice
    c = codes(rep)
    assert "WF202" in c and {26, 31, 36} <= set(c.get("WF205", [])), c
    assert wall < 20.0


def test_tiny_grid_is_launch_bound_with_launch_overhead() -> None:
    rep, _ = profiled(TINY, "tiny_saxpy")
    assert rep.cls == LAUNCH_BOUND
    assert {"WF202", "WF204"} <= set(codes(rep))


def test_ceilings_are_measured_once_and_cached() -> None:
    rep, _ = profiled(KERNELS / "saxpy.cu", "saxpy")
    assert rep.profile is not None and rep.profile.ceilings is not None
    c = cached_ceilings(rep.profile.gpu)
    assert c is not None and c.bandwidth_gbps > 500 and (c.fp32_gflops or 0) > 1000
    assert rep.seconds.get("ceilings", 99) < 5.0 or len(_REPORTS) == 1


def test_without_ncu_one_notice_and_a_class_from_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncu_mod, "ncu_path", lambda override=None: None)
    rep = profiler.profile_kernel(str(KERNELS / "saxpy.cu"), "saxpy")
    assert rep.notice is not None and "Nsight Compute" in rep.notice
    assert [f.code for f in rep.findings].count("WF299") == 1
    assert rep.profile is not None and rep.profile.ncu is None and rep.profile.median_ms
    assert rep.cls == MEMORY_BOUND, rep.profile.bottleneck


def test_a_second_optimize_job_reuses_the_baseline_profile(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two optimize jobs on saxpy in one workspace store, on the real local evaluator: the first profiles its
    baseline with Nsight Compute and keeps the profile; the second reuses it (no ncu run, its profile step
    takes well under a second) and hands the search the same measured findings."""
    import asyncio

    from warpforge.app import JobEvent, JobStarted, OptimizeJob, OptimizeSettings, PreparedKernel, Profiled, Progress
    from warpforge.app.backend import BackendChoice, make_evaluator
    from warpforge.gpu.backends import device_identity
    from warpforge.store import Store

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = KERNELS / "saxpy.cu"
    choice = BackendChoice("local", gpus=[0], workspace=tmp_path, store=tmp_path / "warpforge.db")

    def run() -> tuple[OptimizeJob, list[tuple[float, JobEvent]]]:
        events: list[tuple[float, JobEvent]] = []
        p = PreparedKernel.from_text(str(path), path.read_text(encoding="utf-8"), "saxpy")
        job = OptimizeJob(p, OptimizeSettings(budget=2, seconds=60), lambda req: make_evaluator(choice, req),
                          on_event=lambda e: events.append((time.monotonic(), e)))
        asyncio.run(job.run())
        return job, events

    def profile_step(events: list[tuple[float, JobEvent]]) -> tuple[float, Profiled]:
        start = next(t for t, e in events if isinstance(e, JobStarted))
        t, ev = next((t, e) for t, e in events if isinstance(e, Profiled))
        assert isinstance(ev, Profiled)
        return t - start, ev

    first, events1 = run()
    took1, prof1 = profile_step(events1)
    assert prof1.report.reused is None and prof1.report.notice is None, prof1.report.notice
    assert prof1.findings and any(f.code.startswith("WF2") for f in prof1.findings)
    with Store(tmp_path / "warpforge.db") as store:
        assert store.count_profiles("saxpy") == 1

    second, events2 = run()
    took2, prof2 = profile_step(events2)
    ident = device_identity(0)
    assert ident is not None and prof2.report.reused is not None and prof2.report.reused.endswith(f"on {ident[0]}")
    assert any(isinstance(e, Progress) and e.message.startswith("baseline profile reused from") for _, e in events2)
    assert prof2.report.seconds["total"] < 0.5, prof2.report.seconds
    assert took2 < took1 / 2, (took1, took2)
    assert [f.to_json() for f in prof2.findings] == [f.to_json() for f in prof1.findings]
    assert list(second.request.findings) == list(first.request.findings)
    assert second.state == "done" and first.state == "done"
