"""The defaults an optimize job starts from are the same in the CLI, the server, the search and the extension.

``warpforge.defaults`` is the one place they are written on the Python side; the extension declares its
settings' defaults in ``package.json`` (VS Code shows them) and repeats them as fallbacks in
``extension/src/settings.ts``. These tests read both files as they ship, so a default changed in one place
and not the others fails here instead of making the editor and the terminal run different jobs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from warpforge import defaults, store
from warpforge.app import OptimizeSettings
from warpforge.cli import build_parser
from warpforge.compiler import build
from warpforge.gpu import input_cache
from warpforge.lsp.settings import Settings
from warpforge.profile import hints
from warpforge.profile.roofline import ceilings_path
from warpforge.rag.backends import default_index_path
from warpforge.search.engine import Budget
from warpforge.search.optimize import OptimizeRequest

#: settings only the extension reads (the interpreter, which warpforge it starts, the LSP trace level)
CLIENT_ONLY = {"pythonPath", "importStrategy", "trace.server"}


def _properties() -> dict[str, dict[str, Any]]:
    package = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    props: dict[str, dict[str, Any]] = package["contributes"]["configuration"]["properties"]
    assert all(k.startswith("warpforge.") for k in props)
    return {k.removeprefix("warpforge."): v for k, v in props.items()}


def test_the_extension_declares_the_servers_defaults() -> None:
    props = _properties()
    assert props["strategy"]["default"] == defaults.STRATEGY
    assert tuple(props["strategy"]["enum"]) == defaults.STRATEGIES
    assert props["budget"]["default"] == defaults.BUDGET
    assert props["timeBudget"]["default"] == defaults.TIME_BUDGET
    assert props["evaluationBackend"]["default"] == defaults.EVALUATION_BACKEND


def test_the_editors_defaults_sent_to_the_server_change_nothing() -> None:
    """What the extension sends before the user changes anything is what the server already has."""
    sent = {k: v["default"] for k, v in _properties().items() if k not in CLIENT_ONLY}
    settings = Settings()
    assert settings.update(sent) == []
    assert settings.take_rejected() == []
    # ... and not because it ignored them: every setting the extension declares (bar its own) is one the
    # server reads, so another value of it changes that setting.
    for key, value in sent.items():
        enum = [v for v in _properties()[key].get("enum", []) if v != value]
        other = (enum[0] if enum else not value if isinstance(value, bool) else [*value, "WF999"]
                 if isinstance(value, list) else value + "x" if isinstance(value, str) else value + 1)
        assert len(Settings().update({key: other})) == 1, f"the server does not read warpforge.{key}"


def test_the_extensions_fallbacks_are_its_declared_defaults() -> None:
    """``settings.ts`` reads each setting with a fallback; it must be the default ``package.json`` declares."""
    ts = (ROOT / "extension" / "src" / "settings.ts").read_text(encoding="utf-8")
    fallbacks = {m[1]: json.loads(m[2].replace("'", '"'))
                 for m in re.finditer(r"c\.get<\w+>\('(\w+)', ('[^']*'|[\d.]+|true|false)\)", ts)}
    props = _properties()
    assert {"strategy", "budget", "timeBudget", "evaluationBackend", "keepLaunch"} <= fallbacks.keys()
    assert {k: props[k]["default"] for k in fallbacks} == fallbacks


def test_cli_server_and_search_start_from_the_same_job() -> None:
    args = build_parser().parse_args(["optimize", "k.cu"])
    assert (args.strategy, args.budget, args.time) == (defaults.STRATEGY, defaults.BUDGET, defaults.TIME_BUDGET)
    s = Settings()
    assert (s.strategy, s.budget, s.time_budget, s.backend) == (
        defaults.STRATEGY, defaults.BUDGET, defaults.TIME_BUDGET, defaults.EVALUATION_BACKEND)
    assert (Budget().max_candidates, Budget().wall_seconds) == (defaults.BUDGET, defaults.TIME_BUDGET)
    req = OptimizeRequest("k.cu", "", "k")
    assert req.strategy == defaults.STRATEGY and req.budget == Budget()
    job = OptimizeSettings()  # what CLI and editor jobs start from when given nothing
    assert (job.strategy, job.budget, job.seconds) == (defaults.STRATEGY, defaults.BUDGET, defaults.TIME_BUDGET)


@pytest.mark.parametrize("env, expected", [
    ({"WARPFORGE_CACHE": "{tmp}/mine"}, "{tmp}/mine"),
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/warpforge"),
    ({"HOME": "{tmp}/home"}, "{tmp}/home/.cache/warpforge"),
    ({"WARPFORGE_CACHE": "{tmp}/mine", "XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/mine"),
])
def test_every_per_user_cache_lives_in_the_one_folder(
        env: dict[str, str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store outside a workspace, the build cache, the input files, the hints, the roofline ceilings and
    the retrieval index all follow the same variables to the same folder (they used to decide it apart)."""
    for var in ("WARPFORGE_CACHE", "XDG_CACHE_HOME", "WARPFORGE_RAG_INDEX"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value.format(tmp=tmp_path))
    base = Path(expected.format(tmp=tmp_path))
    assert defaults.user_cache_dir() == base
    assert store.user_dir() == base
    assert store.workspace_db(None).parent == base
    assert build.cache_dir() == base / "build"
    assert input_cache.cache_root() == base / "inputs"
    assert ceilings_path("NVIDIA H100").parent == base / "roofline"
    assert hints._disk_path("abcdef").parents[1] == base / "hints"
    assert default_index_path() == base / "rag" / "index.sqlite"


def test_the_index_override_moves_only_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WARPFORGE_RAG_INDEX", str(tmp_path / "elsewhere.sqlite"))
    assert default_index_path() == tmp_path / "elsewhere.sqlite"
    assert build.cache_dir() == tmp_path / "cache" / "build"
