"""Restricted Mode, and the server started the way the extension starts it, against a hostile workspace.

- Untrusted (``initializationOptions.warpforge.trusted = false``): opening and saving a CUDA file runs no
  tool at all — nvcc, nvdisasm and ncu on PATH are wrappers that record every call — yet source-pattern
  hints arrive, one notice says what is off, Optimize and Profile are refused with the reason. Granting
  trust (didChangeConfiguration) then runs the compiler: the same wrappers record it, so the check can fail.
- Path shadowing: a workspace holds ``numpy.py``, ``json.py``, ``pygls.py``, ... that write a marker when
  imported; none is imported, whether the server runs in a neutral directory (as the extension starts it)
  or, worst case, in the workspace itself. Started the old way, the same workspace's ``json.py`` runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from lsp_raw import LAUNCH, ROOT, SERVER_COMMAND, RawServer, server_env
from test_lsp import SAXPY, WORK, attach, open_doc, wait_diagnostics

REAL_NVCC = shutil.which("nvcc")
TOOLS = WORK / "restricted-tools"
CALLS = WORK / "restricted-tool-calls.log"


def _tool_env() -> dict[str, str]:
    """PATH starts with recording wrappers of nvcc, nvdisasm and ncu (each then runs the real one if any)."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    CALLS.unlink(missing_ok=True)
    for name in ("nvcc", "nvdisasm", "ncu"):
        real = shutil.which(name)
        run = f'exec "{real}" "$@"' if real else "exit 127"
        w = TOOLS / name
        w.write_text(f'#!/bin/sh\necho "{name} $*" >> "{CALLS}"\n{run}\n')
        w.chmod(0o755)
    env = server_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env["PYTHONPATH"]])
    env["PATH"] = f"{TOOLS}{os.pathsep}{env['PATH']}"
    env["WARPFORGE_CACHE"] = str(WORK / "restricted-cache")  # no cached compile results to hide a call
    shutil.rmtree(WORK / "restricted-cache", ignore_errors=True)
    return env


def _calls() -> str:
    return CALLS.read_text() if CALLS.exists() else ""


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER_COMMAND,
                                              server_env=_tool_env()))
async def untrusted(lsp_client: LanguageClient) -> Any:
    attach(lsp_client, WORK)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=WORK.as_uri(),
        initialization_options={"warpforge": {"trusted": False, "debounce": 0.1,
                                              "backend": "python:lsp_fixture_evaluator:make"}}))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.skipif(REAL_NVCC is None, reason="nvcc not installed: the trusted half cannot show a compile")
async def test_restricted_mode_compiles_nothing_until_trusted(untrusted: LanguageClient) -> None:
    client = untrusted
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "restricted_saxpy.cu", text)
    diags = await wait_diagnostics(client, uri, lambda d: any(x.code == "WF101" for x in d))
    assert not any(str(d.code).startswith("WF00") for d in diags), diags  # no compile: no errors, no "missing"
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    uri2 = open_doc(client, "restricted_second.cu", SAXPY)
    await wait_diagnostics(client, uri2)
    await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
    await client.text_document_code_action_async(lsp.CodeActionParams(
        lsp.TextDocumentIdentifier(uri), lsp.Range(lsp.Position(3, 0), lsp.Position(3, 0)),
        lsp.CodeActionContext(diagnostics=list(diags))))
    for command, args, what in (("warpforge.optimize", [uri, "saxpy", ""], "Optimize"),
                                ("warpforge.profile", [uri, "saxpy"], "Profile")):
        with pytest.raises(Exception, match=f"{what} compiles and runs this workspace's code"):
            await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command, args))
    await asyncio.sleep(2.0)  # the unpatched server compiled 1.7 s after didOpen
    assert _calls() == ""
    notices = [m for m in client.messages if "Restricted Mode" in m.message]
    assert len(notices) == 1 and "Trust the workspace" in notices[0].message

    # Trust granted: the compiler phase runs (through the same recording wrapper).
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"trusted": True}}))
    for _ in range(600):
        if "nvcc" in _calls():
            break
        await asyncio.sleep(0.1)
    assert "nvcc" in _calls()


SHADOWS = ("numpy", "lsprotocol", "pygls", "cattrs", "tree_sitter", "warpforge_evil", "json", "asyncio", "typing")


def test_a_workspace_cannot_shadow_the_servers_modules(tmp_path: Path) -> None:
    """The server started as the extension starts it (``-P``, ``PYTHONSAFEPATH=1``, cwd outside the workspace,
    the workspace only as rootUri) imports nothing from the workspace, even with the workspace as cwd."""
    workspace = tmp_path / "repo"
    workspace.mkdir()
    marker = tmp_path / "pwned"
    for name in SHADOWS:
        (workspace / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    # The extension's cwd is its storage folder; the worst case for -P is the workspace itself as cwd.
    for cwd in (tmp_path, workspace):
        s = RawServer(cwd)
        try:
            s.initialize(workspace, {"warpforge": {"trusted": False}})
            uri = (workspace / "k.cu").as_uri()
            (workspace / "k.cu").write_text(SAXPY)
            s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "cuda-cpp", "version": 1,
                                                               "text": SAXPY}})
            s.request(1, "textDocument/codeLens", {"textDocument": {"uri": uri}})
            resp = s.response(1)
            assert resp is not None and resp.get("result"), resp
        finally:
            s.close()
    assert not marker.exists(), marker.read_text()

    # The check can fail: the old launch (no flags, the workspace as cwd) imports the workspace's json.py.
    env = server_env()
    for name in LAUNCH["env"]:
        env.pop(name)
    subprocess.run([sys.executable, *LAUNCH["serverArgs"]], cwd=workspace, env=env, input=b"", capture_output=True,
                   timeout=60)
    assert marker.exists()
