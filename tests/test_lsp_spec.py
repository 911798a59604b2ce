"""Benchmark specs in the editor (issue 29 items 5 and 6), through a real LSP client (pytest-lsp) and the real
server: "Add benchmark spec" on a kernel launched only from another file of the workspace fills in that
launch's sizes, scalars and configuration, marks what it guessed with `// guessed:` and says so in a notice
(window/showMessage); a block with several mistakes gets all of them at once, each at its line, with quick
fixes; a directive written as `// warpforge:` is answered with "did you mean"."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-lsp-spec-{os.getpid()}"
PROJECT = ROOT / "tests" / "projects" / "xfile"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(WORK / "cache")
    return env


def _fix_code_action_union(client: LanguageClient) -> None:
    """lsprotocol decodes a CodeAction carrying a command as a Command (see notes): choose by shape."""
    converter = client.protocol._converter

    def structure(obj: Any, _: Any) -> Any:
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, lsp.Command)
        return converter.structure(obj, lsp.CodeAction)

    converter.register_structure_hook(lsp.Command | lsp.CodeAction, structure)  # type: ignore[arg-type]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "warpforge", "serve"],
                                              server_env=_env()))
async def client(lsp_client: LanguageClient) -> Any:
    shutil.rmtree(WORK, ignore_errors=True)
    shutil.copytree(PROJECT, WORK / "xfile")
    _fix_code_action_union(lsp_client)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=(WORK / "xfile").as_uri(),
        workspace_folders=[lsp.WorkspaceFolder((WORK / "xfile").as_uri(), "xfile")],
        initialization_options={"warpforge": {"debounce": 0.1}}))
    yield
    await lsp_client.shutdown_session()
    shutil.rmtree(WORK, ignore_errors=True)


def open_text(client: LanguageClient, path: Path, text: str | None = None) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(
        uri=uri, language_id="cuda-cpp", version=1, text=text if text is not None else path.read_text())))
    return uri


def applied(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def off(p: lsp.Position) -> int:
        return starts[p.line] + p.character

    for e in sorted(edits, key=lambda e: off(e.range.start), reverse=True):
        text = text[: off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text


async def spec_action(client: LanguageClient, uri: str, line: int) -> lsp.CodeAction:
    got = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri), range=lsp.Range(lsp.Position(line, 4), lsp.Position(line, 4)),
        context=lsp.CodeActionContext(diagnostics=[])))
    return next(a for a in got or [] if isinstance(a, lsp.CodeAction) and "benchmark spec" in a.title)


def edits_of(action: lsp.CodeAction) -> list[lsp.TextEdit]:
    assert action.edit is not None and action.edit.document_changes
    change = action.edit.document_changes[0]
    assert isinstance(change, lsp.TextDocumentEdit)
    return [e for e in change.edits if isinstance(e, lsp.TextEdit)]


async def test_add_spec_reads_the_launch_in_another_file_and_marks_guesses(client: LanguageClient) -> None:
    ops = WORK / "xfile" / "src" / "ops.cu"
    text = ops.read_text()
    uri = open_text(client, ops)
    axpy = await spec_action(client, uri, 4)
    assert axpy.title == "WarpForge: Add benchmark spec for `axpy`" and axpy.disabled is None
    new = applied(text, edits_of(axpy))
    assert "// @warpforge size n = 1 << 22\n" in new and "// @warpforge arg a: float = a\n" in new
    assert "// @warpforge launch grid=cdiv(n, 256), block=256\n" in new and "guessed" not in new
    # the notice runs after the edit: where the values came from
    assert axpy.command is not None and axpy.command.command == "warpforge.specNotice"
    await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        axpy.command.command, axpy.command.arguments))
    await asyncio.sleep(0.2)
    assert any("`axpy`: inferred from the launch at main.cu:12" in m.message for m in client.messages)

    # scale_rows is launched nowhere: every line is a guess, said on the line and in the notice
    rows = await spec_action(client, uri, 10)
    new = applied(text, edits_of(rows))
    w = next(ln for ln in new.splitlines() if "@warpforge arg w:" in ln)
    assert "float[cols]" in w and "// guessed:" in w
    assert rows.command is not None and rows.command.arguments is not None
    assert "guessed, check them" in rows.command.arguments[0] and "`size rows`" in rows.command.arguments[0]


async def test_a_main_file_edited_in_the_editor_is_read_unsaved(client: LanguageClient) -> None:
    main = WORK / "xfile" / "main.cu"
    open_text(client, main, main.read_text().replace("1 << 22", "1 << 18"))
    ops = WORK / "xfile" / "src" / "ops.cu"
    uri = open_text(client, ops)
    new = applied(ops.read_text(), edits_of(await spec_action(client, uri, 4)))
    assert "// @warpforge size n = 1 << 18\n" in new


BAD = """#define ROWS 512
// @warpforge size C = 1000
// @warpforge arg out: out flaot[ROWS * C]
// @warpforge arg m: in float[ROWS * C] gaussian(0, 1)
// @warpforge arg w: in float[M]
// @warpforge arg cols = C
// @warpforge lanch grid=ROWS, block=256
// warpforge: tol rtol=1e-3
__global__ void scale_rows(float* out, const float* m, const float* w, int rows, int cols) {
    int r = blockIdx.y;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        if (r < rows) out[r * cols + c] = m[r * cols + c] * w[c];
}
"""


async def wait_for(client: LanguageClient, uri: str, pred: Any, timeout: float = 60.0) -> list[lsp.Diagnostic]:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        got = client.diagnostics.get(uri)
        if got is not None and pred(got):
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"diagnostics of {uri} never matched: {client.diagnostics.get(uri)}")


async def test_every_mistake_of_a_block_at_once_with_quick_fixes(client: LanguageClient) -> None:
    path = WORK / "xfile" / "src" / "bad.cu"
    path.write_text(BAD)
    uri = open_text(client, path)
    diags = await wait_for(client, uri, lambda d: sum(x.code == "WF003" for x in d) >= 6)
    spec = sorted((d for d in diags if d.code == "WF003"), key=lambda d: d.range.start.line)
    assert [d.range.start.line for d in spec] == [2, 3, 4, 6, 7, 8]
    assert "`M` in the length of `w`" in spec[2].message
    assert "did you mean `// @warpforge tol rtol=1e-3`?" in spec[4].message
    got = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri), range=spec[0].range,
        context=lsp.CodeActionContext(diagnostics=spec)))
    fixes = {a.title: a for a in got or [] if isinstance(a, lsp.CodeAction) and a.kind == lsp.CodeActionKind.QuickFix}
    assert {"Write `float`", "Add `size M`", "Write `launch grid=ROWS, block=256`",
            "Write `// @warpforge tol rtol=1e-3`"} <= set(fixes)
    fixed = BAD
    for title in ("Write `float`", "Write `launch grid=ROWS, block=256`",
                  "Write `// @warpforge tol rtol=1e-3`"):
        fixed = applied(fixed, edits_of(fixes[title]))
    assert "flaot" not in fixed and "lanch" not in fixed and "// @warpforge tol rtol=1e-3\n" in fixed
