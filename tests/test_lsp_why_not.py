"""The "why not" hint (WF113) in the editor, through a real LSP client (pytest-lsp) and the real server: a
kernel whose serial loop no structural rewrite takes gets a Hint diagnostic at the loop's line naming the
closest rewrite and what blocked it; once the kernel is edited into a shape a rewrite takes, it is gone."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from test_why_not import MATVEC, SOFTMAX

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-lsp-whynot-{os.getpid()}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(WORK / "cache")
    return env


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "warpforge", "serve"],
                                              server_env=_env()))
async def client(lsp_client: LanguageClient) -> Any:
    WORK.mkdir(parents=True, exist_ok=True)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=WORK.as_uri(),
        initialization_options={"warpforge": {"debounce": 0.1}}))
    yield
    await lsp_client.shutdown_session()


async def _diagnostics(client: LanguageClient, uri: str, pred: Any, timeout: float = 60) -> list[lsp.Diagnostic]:
    async def loop() -> list[lsp.Diagnostic]:
        while True:
            diags = client.diagnostics.get(uri)
            if diags is not None and pred(diags):
                return list(diags)
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(loop(), timeout)


async def test_why_not_hint_at_the_loop_and_gone_once_a_rewrite_applies(client: LanguageClient) -> None:
    path = WORK / "matvec_whynot.cu"
    path.write_text(MATVEC)
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=MATVEC)))
    diags = await _diagnostics(client, uri, lambda d: any(x.code == "WF113" for x in d))
    hint = next(d for d in diags if d.code == "WF113")
    loop = MATVEC.splitlines().index("        for (int j = 0; j < n; j++) {")
    assert hint.range.start.line == loop and hint.severity == lsp.DiagnosticSeverity.Hint
    # the squiggle: the closest rewrite and the blocking line (1-based); the words are in data (and the hover)
    assert hint.message == f"no structural rewrite applies; closest lane_remap, blocked at line {loop}"
    assert isinstance(hint.data, dict)
    assert "blocked by: `y[i]` is written before the item's loops" in hint.data["message"]
    assert hint.related_information and hint.related_information[0].location.range.start.line == loop - 1

    # The same document rewritten into a row softmax: warp_per_row takes it, so the hint goes away.
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=SOFTMAX)]))
    diags = await _diagnostics(client, uri, lambda d: any(x.code == "WF111" for x in d)
                               and not any(x.code == "WF113" for x in d))
    assert not any(d.code == "WF113" for d in diags)
