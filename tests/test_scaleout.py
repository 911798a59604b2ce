"""Scale-out on one machine (CPU tests, run in CI): the local pool over several GPUs, GPU selection.

- which GPUs a pool uses: ``CUDA_VISIBLE_DEVICES`` read the way CUDA reads it, ``--gpus all|N|0,1``, one
  GPU model per search;
- the whole evaluator over two devices of the CPU stand-in for pycuda (``fake_pycuda``), the second twice
  as slow: candidates spread over both, and every speedup is still a ratio measured on one device (the
  original is timed again on the candidate's device), so identical code measures 1.0x on either;
- a device lost mid-candidate: the candidate is evaluated again on another device, once, with nothing of
  the lost attempt kept;
- the command line's ``--gpus``/``--ray-address`` checks and the language server's backend choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_nvcc
from test_gpu_cpu import FAKE_PYCUDA, SMALL_SAXPY, _tagged
from warpforge.cuda.candidate import Candidate
from warpforge.gpu import backends
from warpforge.gpu.backends import (
    DeviceLost,
    GpuSelectionError,
    LocalBackend,
    VisibleGpu,
    parse_gpus,
    select_gpus,
    visible_devices,
)
from warpforge.gpu.evaluator import EngineSettings, Evaluator, evaluator_for_job
from warpforge.gpu.reports import Evaluation
from warpforge.gpu.supervisor import DeviceHandle
from warpforge.gpu.timing import TimingSettings
from warpforge.store import Store

ROWS = [("0", "GPU-aaaa", "NVIDIA H200", "580.1"), ("1", "GPU-bbbb", "NVIDIA H200", "580.1"),
        ("2", "GPU-cccc", "NVIDIA A100", "580.1")]
SETTINGS = EngineSettings(kernel_timeout=2.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.3))


# --------------------------------------------------------------------------- which GPUs
@pytest.fixture
def smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_smi_rows", lambda: list(ROWS))


@pytest.mark.usefixtures("smi")
def test_visible_devices_read_cuda_visible_devices_as_cuda_does() -> None:
    assert [(g.index, g.smi_id, g.name) for g in visible_devices({})] == [
        (0, "0", "NVIDIA H200"), (1, "1", "NVIDIA H200"), (2, "2", "NVIDIA A100")]
    # CUDA renumbers the visible GPUs from 0 in the order given
    assert [(g.index, g.smi_id) for g in visible_devices({"CUDA_VISIBLE_DEVICES": "2,0"})] == [(0, "2"), (1, "0")]
    # ... and stops at the first entry it cannot use
    assert [g.smi_id for g in visible_devices({"CUDA_VISIBLE_DEVICES": "1,7,0"})] == ["1"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert [g.smi_id for g in visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})] == ["1"]


def test_visible_devices_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_smi_rows", lambda: None)
    # nothing to check against: device 0 (its worker says why it cannot start, if it cannot)
    assert visible_devices({}) == [VisibleGpu(0, "0")]
    assert [g.index for g in visible_devices({"CUDA_VISIBLE_DEVICES": "3,5"})] == [0, 1]


def test_parse_gpus() -> None:
    assert parse_gpus(None) == parse_gpus("all") == parse_gpus(" ALL ") == "all"
    assert parse_gpus("2") == 2
    assert parse_gpus("0,1") == [0, 1]
    assert parse_gpus("1,") == [1]  # one index alone
    assert parse_gpus("1,1,0") == [1, 0]
    for bad in ("0", "-1", "x", "0,x", "-1,", ","):
        with pytest.raises(GpuSelectionError):
            parse_gpus(bad)


def test_select_gpus_keeps_one_model() -> None:
    vis = [VisibleGpu(i, r[0], r[2], r[3]) for i, r in enumerate(ROWS)]
    devices, note = select_gpus("all", vis)
    assert devices == [0, 1] and "GPU 2 (NVIDIA A100)" in note
    assert select_gpus("2", vis) == ([0, 1], "")
    assert select_gpus([1, 0], vis) == ([1, 0], "")
    assert select_gpus(1, vis) == ([0], "")
    with pytest.raises(GpuSelectionError, match="only 3 GPUs visible"):
        select_gpus("4", vis)
    with pytest.raises(GpuSelectionError, match="mixes GPU models"):
        select_gpus("1,2", vis)
    with pytest.raises(GpuSelectionError, match="no GPU 5"):
        select_gpus("0,5", vis)
    with pytest.raises(GpuSelectionError, match="no GPU is visible"):
        select_gpus("all", [])


@pytest.mark.usefixtures("smi")
def test_local_backend_takes_every_visible_gpu_of_one_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    b = LocalBackend("all")
    try:
        assert b.devices == [0, 1] and b.device_count == 2 and "A100" in b.notes[0]
        assert b.compile_workers >= 1
        # compiles run in the idle scheduling class, so GPU workers never wait for a core behind nvcc
        assert asyncio.run(b.cpu(os.sched_getscheduler, 0)) == os.SCHED_IDLE
        assert asyncio.run(b.cpu(os.getpriority, os.PRIO_PROCESS, 0)) >= 10
        assert os.sched_getscheduler(0) != os.SCHED_IDLE  # this process (the GPU supervisors') is untouched
    finally:
        b.close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    b = LocalBackend(None)
    try:
        assert b.devices == [0] and not b.notes  # the A100, as CUDA's device 0
    finally:
        b.close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(GpuSelectionError):
        LocalBackend("all")


# --------------------------------------------------------------------------- the pool on two fake devices
def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def two_devices() -> Iterator[LocalBackend]:
    # device 1 runs everything twice as slowly as device 0
    b = LocalBackend((0, 1), worker_env=_env(WF_FAKE_DEVICE_SLOWDOWN="1=2.0"), compile_workers=2, start_timeout=60)
    yield b
    b.close()


def _same_code(ev: Evaluator, i: int) -> Candidate:
    """The original's machine code under a new hash (an unused define)."""
    return ev.original.derive(defines={"WF_UNUSED": str(i)}, family="same-code")


@needs_nvcc
def test_the_first_gpu_work_starts_every_device(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    # The original's evaluation holds one device; the other must be started (worker, facts) before it,
    # not when a later candidate first gets it.
    fresh = LocalBackend((0, 1), worker_env=_env(), compile_workers=1, start_timeout=60)
    try:
        assert not any(h.supervisor.alive for h in fresh.pool.handles)
        path = tmp_path / "saxpy.cu"
        path.write_text(SMALL_SAXPY)
        ev = Evaluator(path, "saxpy", backend=fresh, settings=SETTINGS)
        base = loop.run_until_complete(ev.baseline())
        assert base.status == "ok", base.reason
        assert sum(fresh.served.values()) == 1
        assert all(h.supervisor.alive for h in fresh.pool.handles)
        assert set(fresh._facts) == {"local:0", "local:1"}
        assert all(peak > 0 for _, peak in fresh._facts.values())
    finally:
        fresh.close()


@needs_nvcc
def test_candidates_spread_over_gpus_and_each_speedup_is_a_ratio_on_one_gpu(
        two_devices: LocalBackend, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    ev = Evaluator(path, "saxpy", backend=two_devices, settings=SETTINGS, store=Store(tmp_path / "wf.db"))
    used: list[int] = []
    acquire = two_devices.acquire

    @contextlib.asynccontextmanager
    async def spy() -> AsyncIterator[DeviceHandle]:
        async with acquire() as dev:
            used.append(dev.device)
            await asyncio.sleep(0.05)  # hold it a moment, as a real GPU would be held
            yield dev

    two_devices.acquire = spy  # type: ignore[method-assign]
    try:
        same = [_same_code(ev, i) for i in range(8)]
        fast = [_tagged(ev, "wf_fake_fast").derive(defines={"WF_UNUSED": str(i)}) for i in range(4)]

        async def all_at_once() -> list[Evaluation]:
            return list(await asyncio.gather(*(ev.evaluate(c) for c in same + fast)))

        results = loop.run_until_complete(all_at_once())
    finally:
        del two_devices.acquire
    assert all(r.status == "ok" for r in results), [(r.status, r.reason) for r in results]
    assert set(used) == {0, 1}, used  # both GPUs served candidates
    assert set(two_devices.summary()["served"]) == {"local:0", "local:1"}
    # The original's time differs by device (2x), so a baseline timed on another device than the candidate
    # would make identical code look 2x faster or slower. Every ratio is measured on one device:
    base_ms = [r.timing.baseline.median for r in results if r.timing and r.timing.baseline]
    assert max(base_ms) / min(base_ms) > 1.8, base_ms
    for r in results[: len(same)]:
        assert r.speedup is not None and 0.97 < r.speedup < 1.03, (r.speedup, r.timing)
    fast_speedups = [r.speedup or 0 for r in results[len(same):]]
    assert min(fast_speedups) > 1.1 and max(fast_speedups) / min(fast_speedups) < 1.1, fast_speedups
    assert statistics.median(base_ms) > 0 and two_devices.restarts == 0
    # Where each candidate's time went: the worker's own account of its requests lies inside the time the
    # device was held, and the spy's 50 ms inside ``acquire`` is waiting for a device.
    for r in results:
        split = r.time_split
        assert split["build"] > 0 and split["queue"] >= 0.045, split
        assert 0 < split["worker_cpu"] <= split["worker"] * 1.05 + 0.01, split
        assert split["worker"] <= split["gpu"] < split["worker"] + 0.5, split
        assert 0 < split["timing"] < split["worker"] and 0 <= split["warmup"] < split["worker"], split
        assert Evaluation.from_json(r.to_json()).time_split == pytest.approx(split, abs=1e-3)


class _Flaky:
    """A device that is lost at its first request of the given op (as a Ray actor killed mid-candidate)."""

    def __init__(self, inner: Any, fail_op: str) -> None:
        self.inner = inner
        self.fail_op = fail_op
        self.failed = False

    @property
    def device(self) -> int:
        return int(self.inner.device)

    @property
    def key(self) -> str:
        return f"flaky:{self.inner.key}"

    @property
    def worker_pid(self) -> int | None:
        pid: int | None = self.inner.worker_pid
        return pid

    async def request(self, msg: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        if msg.get("op") == self.fail_op and not self.failed:
            self.failed = True
            raise DeviceLost("flaky device lost (test)")
        reply: dict[str, Any] = await self.inner.request(msg, timeout)
        return reply

    async def sanitize(self, *a: Any, **kw: Any) -> Any:
        return await self.inner.sanitize(*a, **kw)


@needs_nvcc
def test_a_device_lost_mid_candidate_retries_it_elsewhere_once(
        two_devices: LocalBackend, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    store = Store(tmp_path / "wf.db")
    ev = Evaluator(path, "saxpy", backend=two_devices, settings=SETTINGS, store=store)
    loop.run_until_complete(ev.baseline())
    before = store.count_evaluations()
    flaky: list[_Flaky] = []
    acquire = two_devices.acquire

    @contextlib.asynccontextmanager
    async def first_is_flaky() -> AsyncIterator[Any]:
        async with acquire() as dev:
            if not flaky:  # the first device handed out dies during timing, after verifying
                flaky.append(_Flaky(dev, "time"))
                yield flaky[0]
            else:
                yield dev

    two_devices.acquire = first_is_flaky  # type: ignore[method-assign]
    try:
        r = loop.run_until_complete(ev.evaluate(_same_code(ev, 100)))
    finally:
        del two_devices.acquire
    assert flaky and flaky[0].failed
    assert r.status == "ok", r.reason
    assert any("evaluated again on another GPU" in n for n in r.notes), r.notes
    # nothing of the lost attempt is kept: one verification, one re-check, one timing
    assert sum(1 for run in r.correctness.runs if run.purpose == "recheck") == 1
    assert len([run for run in r.correctness.runs if run.purpose == "verify"]) == 4  # 3 seeds + odd size
    assert store.count_evaluations() == before + 1


@needs_nvcc
def test_a_device_lost_every_time_is_a_crash_not_a_hang(
        two_devices: LocalBackend, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    ev = Evaluator(path, "saxpy", backend=two_devices, settings=SETTINGS)
    acquire = two_devices.acquire

    @contextlib.asynccontextmanager
    async def always_lost() -> AsyncIterator[Any]:
        async with acquire() as dev:
            yield _Flaky(dev, "check")

    two_devices.acquire = always_lost  # type: ignore[method-assign]
    try:
        r = loop.run_until_complete(ev.evaluate(_same_code(ev, 200)))
    finally:
        del two_devices.acquire
    assert r.status == "crashed" and "lost under this candidate 3 times" in r.reason
    assert not r.cacheable


def test_evaluator_for_job_owns_its_pool(tmp_path: Path) -> None:
    from warpforge.search.optimize import OptimizeRequest

    path = tmp_path / "saxpy.cu"
    path.write_text(SMALL_SAXPY)
    req = OptimizeRequest(str(path), SMALL_SAXPY, "saxpy")
    ev = evaluator_for_job(req, workspace=tmp_path, gpus=[0])
    assert isinstance(ev.backend, LocalBackend) and ev.backend.devices == [0] and ev._own_backend
    asyncio.run(ev.close())
    ev = evaluator_for_job(req, workspace=tmp_path, device=0)
    assert isinstance(ev.backend, LocalBackend) and ev.backend.devices == [0]
    asyncio.run(ev.close())


# --------------------------------------------------------------------------- front ends
def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warpforge", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "0,x"], "expected all, a number of GPUs"),
    (["--gpus", "2", "--device", "1"], "give --device or --gpus"),
    (["--gpus", "0,1", "--ray-address", "auto"], "with --ray-address, --gpus"),
])
def test_optimize_rejects_bad_gpu_flags(args: list[str], message: str) -> None:
    p = _cli("optimize", "kernels/saxpy.cu", *args)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_lsp_picks_the_backend_from_the_settings() -> None:
    from warpforge.gpu.evaluator import evaluator_for_job as local
    from warpforge.gpu.ray_backend import evaluator_for_job as ray
    from warpforge.lsp.jobs import JobError, _evaluator_factory, backend_name
    from warpforge.lsp.settings import Settings

    assert _evaluator_factory("local") is local and _evaluator_factory("ray") is ray
    s = Settings()
    assert backend_name(s) == "local"
    s.update({"rayAddress": "ray://head:10001"})
    assert backend_name(s) == "ray"  # an address is enough
    s.update({"evaluationBackend": "python:tests.lsp_fixture_evaluator:make"})
    assert backend_name(s) == "python:tests.lsp_fixture_evaluator:make"
    with pytest.raises(JobError):
        _evaluator_factory("slurm")
