"""State out of the repository (issue 18, item 7): ``warpforge optimize`` keeps its store in the user's cache
keyed by the current folder, ``--store`` moves it (a ``.warpforge`` folder given there gets a ``.gitignore``
of ``*``), and evaluations replayed from the cache are labelled as such in the text, the JSON and the
headline. The store's own rules are in tests/test_store.py."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_nvcc
from test_exit_codes import _FixtureJob, kernel_file
from warpforge.cli import main
from warpforge.exitcodes import ExitCode
from warpforge.gpu.reports import CorrectnessReport, Evaluation
from warpforge.lsp.settings import Settings
from warpforge.store import workspace_db


def _git_status(folder: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=folder,
                          capture_output=True, text=True, check=True).stdout


def test_a_replayed_evaluation_says_so_in_its_headline_and_json() -> None:
    ev = Evaluation("c1", "h1", "saxpy", "ok", gpu="NVIDIA H100", correctness=CorrectnessReport())
    fresh = ev.headline()
    assert "replayed" not in fresh
    ev.cached = True
    assert ev.headline() == fresh.removesuffix(")") + "; replayed from the evaluation cache, measured by an " \
                                                      "earlier run)"
    data = ev.to_json()
    assert data["cached"] is True and "replayed from the evaluation cache" in data["headline"]
    # what the store keeps is the fresh result: read back, it is labelled by the reader, not by the file
    again = Evaluation.from_json(json.loads(json.dumps({**data, "cached": False})))
    assert not again.cached and "replayed" not in again.headline()


def test_the_editor_setting_moves_the_store() -> None:
    s = Settings()
    assert s.store_path == ""
    assert s.update({"warpforge": {"storePath": "/data/wf.db"}}) == ["store_path"]
    assert s.store_path == "/data/wf.db" and s.take_rejected() == []
    assert s.update({"storePath": 5}) == [] and len(s.take_rejected()) == 1


@dataclass(frozen=True)
class _Replayed:
    """A fixture evaluation the way the evaluator returns one it found in the store (``cached``)."""

    inner: Any
    cached: bool = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


JOBS: list[_FixtureJob] = []


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A git repository as the current folder, the user's cache elsewhere, the fixture evaluator (no GPU) with
    every second evaluation replayed from the cache."""
    from warpforge.commands import optimize as cmd

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setattr(cmd, "_why_not_here", lambda args: None)

    class Job(_FixtureJob):
        async def evaluate(self, candidate: Any) -> Any:
            replay = (self.evaluated + 1) % 2 == 0  # decided at the call: evaluations run concurrently
            e = await super().evaluate(candidate)
            return _Replayed(e) if replay else e

    def make(args: Any, req: Any, ws: Path) -> Job:
        JOBS.append(Job(req))
        return JOBS[-1]

    JOBS.clear()
    monkeypatch.setattr(cmd, "_evaluator", make)
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(repo)
    return repo


@needs_nvcc
def test_optimize_keeps_its_store_out_of_the_workspace_and_labels_replayed_results(
        capsys: pytest.CaptureFixture[str], workspace: Path, tmp_path: Path) -> None:
    path = kernel_file(workspace, "k.cu")
    before = _git_status(workspace)
    assert main(["optimize", str(path), "--budget", "4", "--time", "60", "--json"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert data["store"] == str(workspace_db(workspace)) and Path(data["store"]).is_file()
    assert Path(data["store"]).is_relative_to(tmp_path / "user-cache" / "workspaces")
    # every second evaluation came back from the cache, and each is counted
    assert JOBS[0].evaluated >= 2 and data["cached_evaluations"] == JOBS[0].evaluated // 2
    # each evaluation in order, with its verdict and how fully it was checked (the root is the first)
    evs = data["evaluations"]
    assert len(evs) == len([n for n in data["search"]["nodes"] if n["status"] != "pending"])
    assert evs[0]["family"] == "original" and all(e["status"] == "ok" and e["verified"] for e in evs[:1])
    assert all(isinstance(e["seconds"], float) and isinstance(e["time_split"], dict) for e in evs)
    # where the time went: each phase from the job's start, and the first verified improvement (app.phases)
    phases = data["phases"]["phases"]
    assert {"setup", "profile", "baseline", "search", "checks"} <= set(phases)
    assert phases["baseline"]["end"] <= phases["search"]["end"] <= phases["checks"]["end"] <= data["seconds"] + 0.1
    assert data["phases"]["profile_beside_search"] is False  # this evaluator has no local GPU pool to share
    assert data["improved"] and data["first_improvement_seconds"] == data["phases"]["first_improvement_seconds"]
    assert phases["baseline"]["end"] <= data["first_improvement_seconds"] <= phases["search"]["end"]
    assert _git_status(workspace) == before and not (workspace / ".warpforge").exists()
    # the text says how many were replayed and from where
    assert main(["optimize", str(path), "--budget", "4", "--time", "60"]) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "replayed from the evaluation cache (" + str(workspace_db(workspace)) + "), measured by an earlier run" \
        in out
    assert "time: setup " in out and "profile " in out and " s before the search" in out


@needs_nvcc
def test_optimize_store_option_takes_a_warpforge_folder_and_ignores_it_in_git(
        capsys: pytest.CaptureFixture[str], workspace: Path) -> None:
    path = kernel_file(workspace, "k.cu")
    subprocess.run(["git", "add", "k.cu"], cwd=workspace, check=True)
    assert main(["optimize", str(path), "--budget", "3", "--time", "60", "--json",
                 "--store", str(workspace / ".warpforge") + "/"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert data["store"] == str(workspace / ".warpforge" / "warpforge.db")
    assert (workspace / ".warpforge" / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    assert _git_status(workspace) == "A  k.cu\n"  # nothing of .warpforge shows


def test_a_store_that_cannot_be_used_is_bad_input_before_anything_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = kernel_file(tmp_path, "k.cu")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    assert main(["optimize", str(path), "--store", str(junk)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warpforge: error: --store: ") and str(junk) in err
    assert junk.read_bytes().startswith(b"not a database")  # left as it was
