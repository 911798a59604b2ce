"""The baseline profile made once and reused (issue 17 item 3), without a GPU.

Reports are the real ones: the Nsight Compute pages recorded on an H200 (``tests/fixtures/ncu``, see
tests/test_profile_parse.py) rendered by the profiler, and ``profile_kernel`` itself run against the stand-in
``ncu`` (``fake_ncu.py``: the real harness under the fake pycuda, the recorded pages served back). What this
machine cannot answer is said to be there: a GPU (``gpu_unavailable_reason``) and its nvidia-smi identity
(``profile.reuse.device_identity``). The store is a real SQLite file in a temporary folder; the optimize job
runs the real search with the deterministic fixture evaluator (tests/lsp_fixture_evaluator.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import NVCC, ROOT, needs_nvcc
from warpforge.app import JobEvent, OptimizeJob, OptimizeSettings, PreparedKernel, Profiled, ProfileJob, Progress
from warpforge.app import optimize as optimize_mod
from warpforge.app.optimize import PROFILE_MAX_BYTES
from warpforge.app.profile import ProfileSettings, measured_findings
from warpforge.profile import ncu as ncu_mod
from warpforge.profile import profiler, reuse, roofline
from warpforge.profile.findings import Finding
from warpforge.profile.ncu import DEFAULT_SECTIONS
from warpforge.profile.ncu_parse import NcuProfile, load_profile
from warpforge.profile.profiler import ProfileReport, render_profile
from warpforge.profile.roofline import Ceilings, KernelProfile
from warpforge.search.optimize import OptimizeRequest
from warpforge.store import SCHEMA_VERSION, ProfileKey, Store

NCU = ROOT / "tests" / "fixtures" / "ncu"
FIXTURES = sorted(p.name for p in NCU.iterdir() if (p / "details.csv").is_file())
CEILINGS = Ceilings.from_json(json.loads((NCU / "ceilings.json").read_text()))
SAXPY_FILE = ROOT / "kernels" / "saxpy.cu"
SAXPY = SAXPY_FILE.read_text(encoding="utf-8")
#: saxpy at 1 M elements for the jobs that profile: the harness draws the inputs on the host under the fake
#: pycuda, and the stand-in ncu serves the recorded pages whatever the size
SMALL = SAXPY.replace("size N = 1 << 25", "size N = 1 << 20")
H200 = ("NVIDIA H200", "580.159.04")


def rendered(stem: str) -> ProfileReport:
    meta = json.loads((NCU / stem / "meta.json").read_text())
    return render_profile(str(ROOT / meta["file"]), meta["kernel"], load_profile(NCU / stem), CEILINGS,
                          use_compiler=NVCC is not None)


def through_json(data: dict[str, Any]) -> Any:
    """What the store does to a report's JSON: text and back, with NaN and infinity refused."""
    return json.loads(json.dumps(data, sort_keys=True, allow_nan=False))


# ============================================================================================ round trips
@pytest.mark.parametrize("stem", FIXTURES)
def test_parsed_pages_round_trip(stem: str) -> None:
    p = load_profile(NCU / stem)
    back = NcuProfile.from_json(through_json(p.to_json()))
    assert back == p
    assert back.summary() == p.summary() and back.lines_of(back.lines[0].file if back.lines else "x") == \
        p.lines_of(p.lines[0].file if p.lines else "x")


@pytest.mark.parametrize("stem", ["saxpy", "softmax", "sgemm_regtile", "smem_conflicts", "local_array"])
def test_reports_round_trip(stem: str) -> None:
    rep = rendered(stem)
    assert rep.profile is not None and rep.profile.ncu is not None and rep.findings
    back = ProfileReport.from_json(through_json(rep.to_json()))
    assert back == rep
    assert back.profile is not None and back.profile.cls == rep.cls and back.profile.ceilings == CEILINGS
    # the measured findings an optimize job hands the search are the same ones
    assert measured_findings(back, rep.kernel) == measured_findings(rep, rep.kernel)


def test_related_lines_keep_their_ranges() -> None:
    """A root-cause finding folds others into related lines (``profile.rootcause``): their ranges survive."""
    rep = rendered("softmax")
    folded = [f for f in rep.findings if f.related]
    assert folded, "softmax's report folds a finding: the test needs one"
    for f in folded:
        assert Finding.from_json(through_json(f.to_json())) == f
        older = through_json(f.to_json())  # written before related ranges were: the line is kept
        for r in older["related"]:
            del r["range"]
        assert [(rr.start.line, m) for rr, m in Finding.from_json(older).related] == \
            [(rr.start.line, m) for rr, m in f.related]


def test_the_readers_document_leaves_the_pages_out() -> None:
    rep = rendered("saxpy")
    doc = rep.to_json(full=False)
    assert doc["profile"]["ncu"]["waves_per_sm"] == 124.12 and "ncu_pages" not in doc["profile"]
    assert KernelProfile.from_json(through_json(doc["profile"])).ncu is None
    assert len(json.dumps(rep.to_json())) > 10 * len(json.dumps(doc))


# ============================================================================================ the store
def _key(**changes: str) -> ProfileKey:
    base = ProfileKey("unit", "saxpy", "spec", "build", H200[0], H200[1], "2025.3.1.0", "1:0.1.0")
    return replace(base, **changes)


def test_store_keeps_a_profile_and_misses_on_any_other_key(tmp_path: Path) -> None:
    rep = rendered("saxpy")
    with Store(tmp_path / "w.db") as store:
        assert store.version == SCHEMA_VERSION and store.get_profile(_key()) is None
        store.put_profile(_key(), rep.to_json(), 4.5)
        got = store.get_profile(_key())
        assert got is not None and got.seconds == 4.5 and ProfileReport.from_json(got.report) == rep
        for field in ("unit_hash", "kernel", "spec_hash", "build", "gpu", "driver", "ncu", "version"):
            assert store.get_profile(_key(**{field: "other"})) is None, field
        store.put_profile(_key(), rep.to_json(), 3.0)  # a fresh profile replaces the stored one
        assert store.count_profiles() == 1 and store.count_profiles("saxpy") == 1
        got = store.get_profile(_key())
        assert got is not None and got.seconds == 3.0


def test_a_version_2_store_gains_the_profiles_table_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE evaluations (candidate_hash TEXT NOT NULL, spec_hash TEXT NOT NULL, gpu TEXT NOT NULL,
            driver TEXT NOT NULL, kernel TEXT NOT NULL, status TEXT NOT NULL, speedup REAL, result TEXT NOT NULL,
            created REAL NOT NULL, PRIMARY KEY (candidate_hash, spec_hash, gpu, driver));
        INSERT INTO evaluations VALUES ('c', 's', 'NVIDIA H200', '580', 'saxpy', 'ok', 1.5, '{"speedup": 1.5}', 1.0);
        PRAGMA user_version = 2;
    """)
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.version == SCHEMA_VERSION >= 3 and store.count_evaluations() == 1
        assert store.count_profiles() == 0
        store.put_profile(_key(), {"file": "k.cu", "kernel": "saxpy"}, 1.0)
        assert store.count_profiles() == 1


def test_incomplete_profiles_are_not_kept(tmp_path: Path) -> None:
    rep = rendered("saxpy")
    static = ProfileReport(rep.file, rep.kernel, None, [f for f in rep.findings if not f.code.startswith("WF2")],
                           notice="profiling needs an NVIDIA GPU (no driver): static findings only")
    assert rep.profile is not None
    timing = replace(rep, profile=replace(rep.profile, ncu=None),
                     notice="Nsight Compute may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)")
    with Store(tmp_path / "w.db") as store:
        assert not reuse.remember(store, _key(), static) and not reuse.remember(store, _key(), timing)
        assert store.count_profiles() == 0
        assert reuse.remember(store, _key(), rep) and store.count_profiles() == 1


# ============================================================================================ the key
@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine as the profiler sees the GPU machine: a GPU with an identity, the stand-in ncu (it answers
    ``--version`` from the recorded environment), the H200's ceilings in a private cache."""
    exe = tmp_path / "ncu"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {NCU / 'fake_ncu.py'} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "fake_pycuda"), str(ROOT / "server"),
                                                       os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WARPFORGE_FAKE_NCU_PAGES", str(NCU / "saxpy"))
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    kept = roofline.ceilings_path(*H200)  # kept under the GPU's name and driver
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps(CEILINGS.to_json()))
    monkeypatch.setattr(profiler, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(ncu_mod, "ncu_path", lambda override=None: str(exe))
    monkeypatch.setattr(reuse, "device_identity", lambda device: H200)
    ncu_mod._sections_cache.clear()
    ncu_mod._version_cache.clear()
    return exe


def _saxpy(text: str = SAXPY, file: str = str(SAXPY_FILE)) -> PreparedKernel:
    return PreparedKernel.from_text(file, text, "saxpy")


def key_of(p: PreparedKernel, max_bytes: int | None = PROFILE_MAX_BYTES, device: int = 0) -> ProfileKey | None:
    return reuse.profile_key(p.file, p.text, p.parts(), arch="sm_90", nvcc=None, device=device,
                             sections=DEFAULT_SECTIONS, max_bytes=max_bytes)


@needs_nvcc
def test_the_key_follows_what_decides_the_profile(gpu_machine: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    base = key_of(_saxpy())
    assert base is not None and base.gpu == H200[0] and base.driver == H200[1] and base.ncu == "2025.3.1.0"
    assert key_of(_saxpy()) == base
    # saxpy's 256 MB fit the optimize job's cap: warpforge profile (no cap) and optimize share the profile
    assert key_of(_saxpy(), max_bytes=None) == base
    # a cap that bites profiles another size
    assert key_of(_saxpy(), max_bytes=64 << 20).spec_hash != base.spec_hash  # type: ignore[union-attr]
    # another kernel text, another spec size, another file
    changed = key_of(_saxpy(SAXPY.replace("a * x[i] + y[i]", "y[i] + a * x[i]")))
    assert changed is not None and changed.unit_hash != base.unit_hash and changed.spec_hash == base.spec_hash
    smaller = key_of(_saxpy(SAXPY.replace("size N = 1 << 25", "size N = 1 << 24")))
    assert smaller is not None and smaller.spec_hash != base.spec_hash
    copy = tmp_path / "saxpy.cu"
    copy.write_text(SAXPY)
    assert key_of(_saxpy(file=str(copy))).unit_hash != base.unit_hash  # type: ignore[union-attr]
    # another GPU, another driver
    monkeypatch.setattr(reuse, "device_identity", lambda device: ("NVIDIA H100 80GB HBM3", H200[1]))
    assert key_of(_saxpy()).gpu != base.gpu  # type: ignore[union-attr]
    monkeypatch.setattr(reuse, "device_identity", lambda device: (H200[0], "590.10"))
    assert key_of(_saxpy()).driver != base.driver  # type: ignore[union-attr]
    # a device nvidia-smi cannot name: no key, so the profile is made fresh and not kept
    monkeypatch.setattr(reuse, "device_identity", lambda device: None)
    assert key_of(_saxpy()) is None
    monkeypatch.setattr(reuse, "device_identity", lambda device: H200)
    # another profile stage (an analyzer edited in a development checkout)
    monkeypatch.setattr(reuse, "_code_version", lambda: "edited")
    assert key_of(_saxpy()).version != base.version  # type: ignore[union-attr]
    # another Nsight Compute
    other = tmp_path / "ncu-2024"
    other.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Version 2024.1.1.0 "
                     "(build 1) (public-release)'\n")
    other.chmod(other.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(ncu_mod, "ncu_path", lambda override=None: str(other))
    assert key_of(_saxpy()).ncu == "2024.1.1.0"  # type: ignore[union-attr]


# ============================================================================================ the jobs
class StoringEvaluator:
    """The fixture evaluator with a workspace store, as the local and Ray evaluators have (``Evaluator.store``)."""

    def __init__(self, req: OptimizeRequest, store: Store) -> None:
        from lsp_fixture_evaluator import make

        self.inner = make(req)
        self.store = store

    async def evaluate(self, candidate: Any) -> Any:
        return await self.inner.evaluate(candidate)


def _optimize(p: PreparedKernel, store: Store, **settings: Any) -> tuple[OptimizeJob, list[JobEvent]]:
    events: list[JobEvent] = []
    job = OptimizeJob(p, OptimizeSettings(budget=3, seconds=120, arch="sm_90", **settings),
                      lambda req: StoringEvaluator(req, store), on_event=events.append)
    asyncio.run(job.run())
    return job, events


@needs_nvcc
def test_optimize_reuses_what_warpforge_profile_kept(gpu_machine: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``warpforge profile``'s job measures and keeps the profile; the optimize job that follows on the same
    kernel does not profile, and its Profiled event carries the same measured findings, so the search is
    guided as a fresh profile would guide it. ``fresh_profile`` measures again and replaces the row."""
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(ROOT)
    with Store(tmp_path / "workspace.db") as store:
        profiled: list[JobEvent] = []
        first = ProfileJob(_saxpy(SMALL), ProfileSettings(arch="sm_90"), on_event=profiled.append, store=store)
        measured = asyncio.run(first.run())
        assert measured is not None and measured.notice is None and measured.reused is None
        assert store.count_profiles("saxpy") == 1
        fresh = next(e for e in profiled if isinstance(e, Profiled)).findings

        calls: list[str] = []
        real = optimize_mod.profile_kernel

        def counted(*a: Any, **k: Any) -> ProfileReport:
            calls.append(a[1])
            return real(*a, **k)

        monkeypatch.setattr(optimize_mod, "profile_kernel", counted)
        # the same file named from the workspace folder, as the CLI names it: the same profile
        job, events = _optimize(_saxpy(SMALL, file="kernels/saxpy.cu"), store)
        assert calls == [] and job.state == "done"
        (event,) = [e for e in events if isinstance(e, Profiled)]
        assert event.report.reused is not None and event.report.reused.endswith(f"on {H200[0]}")
        assert event.report.seconds["total"] < 1.0 and event.report.seconds["measured"] > 0
        assert [replace(f, file=str(SAXPY_FILE)) for f in event.findings] == list(fresh)
        assert {f.file for f in event.findings} == {"kernels/saxpy.cu"}
        assert list(job.request.findings) == list(event.findings) and job.profile is event.report
        notes = [e.message for e in events if isinstance(e, Progress)]
        assert any(m.startswith("baseline profile reused from ") for m in notes)
        assert not any(m.startswith("profiling the original kernel") for m in notes)
        assert job.ceilings.get(H200[0]) == CEILINGS

        job, events = _optimize(_saxpy(SMALL), store, fresh_profile=True)
        assert calls == ["saxpy"]
        (event,) = [e for e in events if isinstance(e, Profiled)]
        assert event.report.reused is None and list(event.findings) == list(fresh)
        assert store.count_profiles("saxpy") == 1


@needs_nvcc
def test_an_optimize_job_keeps_its_profile_for_the_next(gpu_machine: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with Store(tmp_path / "workspace.db") as store:
        first, _ = _optimize(_saxpy(SMALL), store)
        assert first.profile is not None and first.profile.reused is None and store.count_profiles() == 1
        second, _ = _optimize(_saxpy(SMALL), store)
        assert second.profile is not None and second.profile.reused is not None
        assert second.profile.findings == first.profile.findings
        # another spec size is another profile: measured, and kept beside the first
        third, _ = _optimize(_saxpy(SMALL.replace("size N = 1 << 20", "size N = 1 << 19")), store)
        assert third.profile is not None and third.profile.reused is None and store.count_profiles() == 2


@needs_nvcc
def test_an_unusable_profile_is_measured_and_not_kept(gpu_machine: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters not permitted: the timing fallback's report says so, and the next job tries again."""
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("WARPFORGE_FAKE_NCU_MODE", "permission")
    monkeypatch.setattr(profiler, "_time_kernel", lambda *a: (0.118, H200[0]))
    with Store(tmp_path / "workspace.db") as store:
        job, _ = _optimize(_saxpy(SMALL), store)
        assert job.profile is not None and job.profile.notice is not None and "ERR_NVGPUCTRPERM" in job.profile.notice
        assert store.count_profiles() == 0


# ============================================================================================ the CLI
def test_cli_profile_refuses_a_store_that_cannot_be_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from warpforge.cli import main

    bad = tmp_path / "notes.db"
    bad.write_text("not a database, and long enough to be read as one: " * 40)
    code = main(["profile", str(SAXPY_FILE), "--store", str(bad)])
    assert code == 2 and "--store" in capsys.readouterr().err
    assert bad.read_text().startswith("not a database")  # left as it was


@needs_nvcc
def test_cli_profile_keeps_what_it_measured(gpu_machine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.cli import main
    from warpforge.gpu import supervisor

    monkeypatch.setattr(supervisor, "gpu_unavailable_reason", lambda: None)
    kernel = tmp_path / "saxpy.cu"
    kernel.write_text(SMALL)
    monkeypatch.chdir(tmp_path)
    code = main(["profile", str(kernel), "--json", "--store", str(tmp_path / "ws.db")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["reused"] is None and "ncu_pages" not in data["profile"]
    with Store(tmp_path / "ws.db") as store:
        assert store.count_profiles("saxpy") == 1
        key = key_of(PreparedKernel.from_text(str(kernel), SMALL, "saxpy"))
        assert key is not None and (kept := reuse.reused(store, key, str(kernel))) is not None
        assert kept.findings == ProfileReport.from_json(data).findings


def test_cli_optimize_takes_fresh_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepted as an option (without a GPU the command then stops at "cannot run here", exit 3, not 2)."""
    from warpforge.cli import main
    from warpforge.gpu import supervisor

    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(supervisor, "gpu_unavailable_reason", lambda: "no NVIDIA GPU or driver was found")
    code = main(["optimize", str(SAXPY_FILE), "--fresh-profile", "--store", str(tmp_path / "ws.db")])
    assert code == 3, capsys.readouterr().err
