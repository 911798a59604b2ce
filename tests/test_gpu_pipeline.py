"""The whole pipeline on a real GPU (run with ``pytest -m gpu`` on the GPU machine; skipped elsewhere).

1. The LLM path: the scripted model (tests/fakes, through the real anthropic SDK) proposes a vectorized
   saxpy and a broken variant; with the REAL evaluator the model's variant must verify and win.
2. The language server with the real local evaluator (no fixture): an optimize job on a kernels/ file
   ends with a verified faster variant measured on the GPU, and accepting it edits the buffer.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-gpu-{os.getpid()}"


def _gpu_or_skip() -> None:
    from warpforge.gpu.supervisor import gpu_unavailable_reason

    why = gpu_unavailable_reason()
    if why is not None:
        pytest.skip(f"needs an NVIDIA GPU and pycuda: {why}")


def test_llm_proposed_variant_verifies_and_wins_on_the_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu_or_skip()
    from fakes.anthropic_server import FakeAnthropic
    from fakes.llm_script import saxpy_model
    from warpforge.gpu.evaluator import evaluator_for_job
    from warpforge.policy.llm import Ledger, LLMConfig, policy_for_request
    from warpforge.search.engine import Budget
    from warpforge.search.optimize import OptimizeRequest, optimize

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("WARPFORGE_RAG_INDEX", str(tmp_path / "no-index.sqlite"))
    text = (ROOT / "kernels" / "saxpy.cu").read_text()
    req = OptimizeRequest(str(ROOT / "kernels" / "saxpy.cu"), text, "saxpy",
                          budget=Budget(max_candidates=14, wall_seconds=240))
    with FakeAnthropic(saxpy_model, api_key="sk-ant-gpu-test") as api:
        cfg = replace(LLMConfig.from_sources({"baseUrl": api.base_url}, api_key="sk-ant-gpu-test"),
                      backoff_base_s=0.001, backoff_cap_s=0.01)
        policy = policy_for_request(req, config=cfg, ledger=Ledger())
        evaluator = evaluator_for_job(req, workspace=tmp_path)

        async def go() -> Any:
            try:
                return await optimize(req, evaluator, policy=policy)
            finally:
                await policy.aclose()
                await evaluator.close()

        out = asyncio.run(go())
    r = out.result
    llm_nodes = [n for n in r.nodes if n.candidate.family.startswith("llm:")]
    assert llm_nodes, "the model's variants reached the evaluator"
    vec = [n for n in llm_nodes if "float4" in n.candidate.source]
    assert vec and vec[0].ok, f"the model's vectorized saxpy verified: {vec[0].evaluation if vec else None}"
    assert (vec[0].speedup or 0) > 1.05  # measured, not synthetic
    assert "NVIDIA" in (getattr(vec[0].evaluation, "gpu", "") or "")
    assert r.improved and r.best_speedup >= (vec[0].speedup or 0) * 0.97


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    return env


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "warpforge", "serve"],
                                              server_env=_env()))
async def client(lsp_client: LanguageClient) -> Any:
    from test_lsp import attach

    attach(lsp_client, WORK)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=WORK.as_uri(),
        initialization_options={"warpforge": {"backend": "local", "budget": 12, "timeBudget": 240}}))
    yield
    await lsp_client.shutdown_session()


async def test_language_server_job_with_the_real_evaluator(client: LanguageClient) -> None:
    _gpu_or_skip()
    state = client.state  # type: ignore[attr-defined]
    text = (ROOT / "kernels" / "softmax.cu").read_text()
    path = WORK / "softmax.cu"
    path.write_text(text)
    uri = path.as_uri()
    state.docs[uri] = (1, text)
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=text)))
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.optimize", arguments=[uri, "softmax_rows", "beam"]))
    job = res["job"] if isinstance(res, dict) else res.job

    async def until_done() -> None:
        while not any(d.job == job for d in state.done):
            await asyncio.sleep(0.2)

    await asyncio.wait_for(until_done(), 300)
    done = next(d for d in state.done if d.job == job)
    assert done.outcome == "improved", done.message
    assert "NVIDIA" in done.message and done.speedup > 2.0  # one warp per row: a large, real speedup
    cand = next(c for c in state.candidates if c.job == job and c.candidate == done.candidate)
    evidence = cand.evidence
    checked = evidence["checked"] if isinstance(evidence, dict) else evidence.checked  # pygls Object
    assert "NVIDIA" in cand.gpu and checked.startswith("3 seeds")
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.accept", arguments=[job, done.candidate]))
    assert (res["applied"] if isinstance(res, dict) else res.applied)
    assert state.docs[uri][1] != text
    print(f"\nlanguage server job on {cand.gpu}: {done.message}")
