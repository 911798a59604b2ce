"""benchmarks/llm_suite.py runs end to end against the local Messages API with a SYNTHETIC evaluator, and
labels its report so: not a live-API result, the evaluator named. (Real numbers need a real key and the GPU.)"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from conftest import ROOT
from fakes.anthropic_server import FakeAnthropic
from fakes.llm_script import saxpy_model


def _suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llm_suite", ROOT / "benchmarks" / "llm_suite.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_suite_reports_speedups_tokens_and_cost(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    suite = _suite()
    monkeypatch.setenv("WARPFORGE_RAG_INDEX", str(tmp_path / "none.sqlite"))
    with FakeAnthropic(saxpy_model, api_key="sk-ant-suite") as api:
        url = api.base_url
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-suite")
        out = tmp_path / "report.json"
        rc = suite.main(["--only", "saxpy", "--budget", "8", "--time", "120", "--rounds", "2",
                         "--evaluator", "python:fakes.llm_script:make_saxpy_evaluator", "--base-url", url,
                         "--out", str(out)])
        assert rc == 0
    report = json.loads(out.read_text())
    assert report["live_api"] is False and report["endpoint"] == url
    row = report["kernels"][0]
    assert row["kernel"] == "saxpy" and row["gpu"].startswith("SYNTHETIC")
    assert row["best_family"] == "llm:vectorize" and row["best_by_llm"] and row["best_speedup"] == 1.6
    assert row["llm_variants"] >= 1 and row["spend"]["calls"] > 0 and row["spend"]["usd"] > 0
    assert report["spend"]["calls"] == len(api.requests)
    assert "float4" in row["diff"]
    table = capsys.readouterr().out
    assert "endpoint http://127.0.0.1" in table and "saxpy" in table and "geomean 1.6x" in table


def test_suite_refuses_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    suite = _suite()
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(SystemExit, match="needs a real key"):
        asyncio.run(suite.run_suite(suite.argparse.Namespace(cap_kernel=1.0, cap_total=1.0, model=None,
                                                             base_url=None)))
