"""A kernel file cannot starve the language server: the real server over stdio (pytest-lsp), the real nvcc.

Before the sandbox, ``#include "/dev/stdin"`` made the preprocessor read the server's own LSP pipe: half of
the requests sent after opening such a file were never answered, for the 120 s compile limit. Here one file
includes it plainly (refused at the line before anything compiles) and one through a computed include the
check cannot follow (nvcc runs, with stdin closed); every request must still be answered within a second.
Also: options of the project's build that are not passed on are warnings on the config file's lines.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-lsp-sandbox-{os.getpid()}"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: compiler hints are off")
SAXPY = (ROOT / "kernels" / "saxpy.cu").read_text()


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


def open_doc(client: LanguageClient, path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=path.as_uri(), language_id="cuda-cpp", version=1, text=text)))
    return path.as_uri()


async def wait_diagnostics(client: LanguageClient, uri: str, pred: Any, timeout: float = 60) -> Any:
    async def loop() -> Any:
        while True:
            diags = client.diagnostics.get(uri)
            if diags is not None and pred(diags):
                return diags
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(loop(), timeout)


@needs_nvcc
async def test_a_file_including_dev_stdin_leaves_every_request_answered_within_a_second(
        client: LanguageClient) -> None:
    plain = open_doc(client, WORK / "stdin_plain.cu", '#include "/dev/stdin"\n' + SAXPY)
    computed = open_doc(client, WORK / "stdin_computed.cu", "#define S(x) #x\n#include S(/dev/stdin)\n" + SAXPY)
    kernel_line = next(i for i, t in enumerate(SAXPY.splitlines()) if "__global__" in t)
    slowest = 0.0
    for i in range(20):
        for uri, offset in ((plain, 1), (computed, 2)):
            t0 = time.perf_counter()
            await asyncio.wait_for(client.text_document_hover_async(lsp.HoverParams(
                lsp.TextDocumentIdentifier(uri), lsp.Position(kernel_line + offset, 20))), 1.0)
            await asyncio.wait_for(client.text_document_code_lens_async(lsp.CodeLensParams(
                lsp.TextDocumentIdentifier(uri))), 1.0)
            slowest = max(slowest, time.perf_counter() - t0)
        if i % 5 == 4:  # edits recompile, and the server must keep answering meanwhile
            for uri, path in ((plain, WORK / "stdin_plain.cu"), (computed, WORK / "stdin_computed.cu")):
                client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                    text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=i + 2),
                    content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=path.read_text() + "\n" * i)]))
    assert slowest < 1.0
    # The plain include is an error at its line; nothing was compiled for it.
    diags = await wait_diagnostics(client, plain, lambda d: any(x.code == "WF000" for x in d))
    err = next(d for d in diags if d.code == "WF000")
    assert err.range.start.line == 0 and "/dev/stdin" in err.message and "remove the include" in err.message
    # The computed include reached nvcc, which read end-of-file: the file compiles, no timeout, no error.
    diags = await wait_diagnostics(client, computed, lambda d: len(d) > 0)
    assert not any(d.code == "WF000" for d in diags), [d.message for d in diags]


async def test_project_options_not_passed_on_are_warnings_at_their_line_in_the_config(
        client: LanguageClient) -> None:
    proj = WORK / "proj_refused"
    proj.mkdir(parents=True, exist_ok=True)
    toml = proj / "warpforge.toml"
    toml.write_text('[build]\nstd = "c++17"\nflags = ["-ccbin", "/opt/evil/g++",\n'
                    '         "-Xcompiler", "-wrapper,/bin/sh", "-O3"]\n')
    open_doc(client, proj / "saxpy.cu", SAXPY)
    diags = await wait_diagnostics(client, toml.as_uri(), lambda d: len(d) >= 2, timeout=30)
    by_line = {d.range.start.line: d for d in diags}
    assert set(by_line) == {2, 3}, [(d.range.start.line, d.message) for d in diags]
    assert "`-ccbin /opt/evil/g++` is not passed on to nvcc" in by_line[2].message
    assert "`-Xcompiler -wrapper,/bin/sh` is not passed on to nvcc" in by_line[3].message
    assert all(d.severity == lsp.DiagnosticSeverity.Warning and d.source == "warpforge" for d in diags)
