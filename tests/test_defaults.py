"""The defaults an optimize job starts from are the same in the CLI, the server, the search and the extension.

``warpforge.defaults`` is the one place they are written on the Python side; the extension declares its
settings' defaults in ``package.json`` (VS Code shows them) and repeats them as fallbacks in
``extension/src/settings.ts``. These tests read both files as they ship, so a default changed in one place
and not the others fails here instead of making the editor and the terminal run different jobs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conftest import ROOT
from warpforge import defaults
from warpforge.app import OptimizeSettings
from warpforge.cli import build_parser
from warpforge.lsp.settings import Settings
from warpforge.search.engine import Budget
from warpforge.search.optimize import OptimizeRequest

#: settings only the extension reads (the interpreter it starts the server with, the LSP trace level)
CLIENT_ONLY = {"pythonPath", "trace.server"}


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
        other = value + "x" if isinstance(value, str) else value + 1
        assert len(Settings().update({key: other})) == 1, f"the server does not read warpforge.{key}"


def test_the_extensions_fallbacks_are_its_declared_defaults() -> None:
    """``settings.ts`` reads each setting with a fallback; it must be the default ``package.json`` declares."""
    ts = (ROOT / "extension" / "src" / "settings.ts").read_text(encoding="utf-8")
    fallbacks = {m[1]: json.loads(m[2].replace("'", '"'))
                 for m in re.finditer(r"c\.get<\w+>\('(\w+)', ('[^']*'|[\d.]+)\)", ts)}
    props = _properties()
    assert {"strategy", "budget", "timeBudget", "evaluationBackend"} <= fallbacks.keys()
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
