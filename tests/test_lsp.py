"""The language server through a real LSP client over stdio (pytest-lsp).

Optimize jobs here use the DETERMINISTIC EVALUATOR FIXTURE (tests/lsp_fixture_evaluator.py, labelled in
its GPU name): candidates are compiled with the real nvcc, speedups are synthetic. Everything else —
diagnostics, code actions, progress, cancellation, notifications, accept with its version check — is
the real server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("WARPFORGE_LSP_TEST_DIR", "/tmp")) / f"warpforge-lsp-{os.getpid()}"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: compiler hints are off")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)  # these tests never call a hosted model
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(WORK / "cache")
    env.setdefault("WARPFORGE_FIXTURE_DELAY", "0.05")
    return env


def _fix_code_action_union(client: LanguageClient) -> None:
    """lsprotocol 2025.0.0 decodes a CodeAction carrying a command as a Command (see notes): choose by shape."""
    converter = client.protocol._converter

    def structure(obj: Any, _: Any) -> Any:
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, lsp.Command)
        return converter.structure(obj, lsp.CodeAction)

    converter.register_structure_hook(lsp.Command | lsp.CodeAction, structure)  # type: ignore[arg-type]


class State:
    def __init__(self) -> None:
        self.candidates: list[Any] = []
        self.done: list[Any] = []
        self.docs: dict[str, tuple[int, str]] = {}
        self.lens_refreshes = 0
        self.edits: list[lsp.ApplyWorkspaceEditParams] = []


def attach(lsp_client: LanguageClient, work: Path) -> State:
    """A test client that records candidates, job ends and lens refreshes and applies edits it is sent
    (keeping the server in sync with didChange). Shared with the GPU pipeline tests."""
    work.mkdir(parents=True, exist_ok=True)
    _fix_code_action_union(lsp_client)
    state = State()
    lsp_client.state = state  # type: ignore[attr-defined]

    @lsp_client.feature("warpforge/candidate")
    def on_candidate(params: Any) -> None:
        state.candidates.append(params)

    @lsp_client.feature("warpforge/jobDone")
    def on_done(params: Any) -> None:
        state.done.append(params)

    @lsp_client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
    def refresh_lenses(params: None) -> None:
        state.lens_refreshes += 1

    @lsp_client.feature(lsp.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        state.edits.append(params)
        for change in params.edit.document_changes or []:
            assert isinstance(change, lsp.TextDocumentEdit)
            uri = change.text_document.uri
            if uri not in state.docs:
                # a file the editor does not have open: an unversioned edit of its text on disk, as VS Code does
                assert change.text_document.version is None
                path = Path(uri.removeprefix("file://"))
                path.write_text(apply_text_edits(path.read_text(), [
                    e for e in change.edits if isinstance(e, lsp.TextEdit)]))
                continue
            version, text = state.docs[uri]
            if change.text_document.version is not None and change.text_document.version != version:
                return lsp.ApplyWorkspaceEditResult(applied=False, failure_reason="version mismatch")
            new = apply_text_edits(text, [e for e in change.edits if isinstance(e, lsp.TextEdit)])
            state.docs[uri] = (version + 1, new)
            lsp_client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version + 1),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=new)]))
        return lsp.ApplyWorkspaceEditResult(applied=True)

    return state


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "warpforge", "serve"],
                                              server_env=_env()))
async def client(lsp_client: LanguageClient) -> Any:
    attach(lsp_client, WORK)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=WORK.as_uri(),
        initialization_options={"warpforge": {"backend": "python:lsp_fixture_evaluator:make", "budget": 12,
                                              "debounce": 0.1}}))
    yield
    await lsp_client.shutdown_session()


def apply_text_edits(text: str, edits: list[lsp.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)

    def offset(p: lsp.Position) -> int:
        if p.line >= len(lines):
            return len(text)
        line = lines[p.line]
        units = 0
        for i, ch in enumerate(line):
            if units >= p.character:
                return sum(len(x) for x in lines[: p.line]) + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return sum(len(x) for x in lines[: p.line]) + len(line)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
        lines = text.splitlines(keepends=True)
    return text


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    path = WORK / name
    path.write_text(text)
    uri = path.as_uri()
    client.state.docs[uri] = (1, text)  # type: ignore[attr-defined]
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=text)))
    return uri


async def wait_diagnostics(client: LanguageClient, uri: str, pred: Any = None, timeout: float = 30) -> Any:
    async def loop() -> Any:
        while True:
            diags = client.diagnostics.get(uri)
            if diags is not None and (pred is None or pred(diags)):
                return diags
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(loop(), timeout)


SAXPY = (ROOT / "kernels" / "saxpy.cu").read_text()
SOFTMAX = (ROOT / "kernels" / "softmax.cu").read_text()


@needs_nvcc
async def test_diagnostics_on_open_and_after_edits(client: LanguageClient) -> None:
    uri = open_doc(client, "softmax_diag.cu", SOFTMAX)
    diags = await wait_diagnostics(client, uri, lambda d: len(d) > 0)
    codes = {d.code for d in diags}
    assert all(str(c).startswith("WF") for c in codes)
    d0 = diags[0]
    assert d0.source == "warpforge" and d0.code_description is not None and d0.code_description.href.endswith(
        str(d0.code).lower())
    assert isinstance(d0.data, dict) and "action" in d0.data

    # Break the kernel: a compile error appears at its line, the other hints survive.
    broken = SOFTMAX.replace("maxval = fmaxf(maxval, x[j]);", "maxval = fmaxf(maxval, x[j]) +;")
    line = next(i for i, t in enumerate(broken.splitlines()) if "fmaxf(maxval, x[j]) +;" in t)
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=broken)]))
    diags = await wait_diagnostics(client, uri, lambda d: any(x.code == "WF000" for x in d))
    err = next(d for d in diags if d.code == "WF000")
    assert err.severity == lsp.DiagnosticSeverity.Error and err.range.start.line == line


async def test_code_actions_and_quick_fix(client: LanguageClient) -> None:
    text = "#include <cuda_runtime.h>\n\n" + SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_actions.cu", text)
    diags = await wait_diagnostics(client, uri)
    kline = next(i for i, t in enumerate(text.splitlines()) if "saxpy(" in t and "__global__" in t)
    result = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri), range=lsp.Range(lsp.Position(kline + 2, 4),
                                                                        lsp.Position(kline + 2, 4)),
        context=lsp.CodeActionContext(diagnostics=list(diags))))
    assert result is not None
    titles = [a.title for a in result]
    assert "WarpForge: Optimize kernel `saxpy`" in titles  # the search the strategy setting chooses
    assert "WarpForge: Optimize kernel `saxpy` (explore more)" in titles
    assert not any("beam" in t or "MCTS" in t for t in titles)  # what happens, not the algorithm's name
    spec_action = next(a for a in result if isinstance(a, lsp.CodeAction) and "benchmark spec" in a.title)
    # saxpy's spec is complete: the action says so instead of rewriting it into the same spec
    assert spec_action.title == "WarpForge: Edit benchmark spec for `saxpy`" and spec_action.edit is None
    assert spec_action.disabled is not None and "is complete" in spec_action.disabled.reason
    wf101 = [d for d in diags if d.code == "WF101"]
    if wf101:
        fix = next(a for a in result if isinstance(a, lsp.CodeAction) and a.kind == lsp.CodeActionKind.QuickFix)
        assert fix.edit is not None and fix.edit.document_changes
        edit = fix.edit.document_changes[0]
        assert isinstance(edit, lsp.TextDocumentEdit)
        new = apply_text_edits(text, [e for e in edit.edits if isinstance(e, lsp.TextEdit)])
        assert "const float* __restrict__ x" in new

    # A position outside any kernel (the #include line): no kernel actions, no error.
    outside = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri), range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
        context=lsp.CodeActionContext(diagnostics=[])))
    assert not any("Optimize" in a.title for a in outside or [])

    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
    assert lenses is not None
    assert [lens.command.title for lens in lenses if lens.command] == ["Optimize", "Profile", "Edit benchmark spec"]
    assert any("Profile `saxpy`" in t for t in titles)


async def _run_job(client: LanguageClient, uri: str, kernel: str, strategy: str = "beam") -> Any:
    state = client.state  # type: ignore[attr-defined]
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.optimize", arguments=[uri, kernel, strategy]))
    job = res["job"] if isinstance(res, dict) else res.job
    await asyncio.wait_for(_until(lambda: any(d.job == job for d in state.done)), 120)
    return job, next(d for d in state.done if d.job == job)


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.05)


@needs_nvcc
async def test_optimize_job_progress_candidates_tree_and_accept(client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_job.cu", text)
    await wait_diagnostics(client, uri)
    job, done = await _run_job(client, uri, "saxpy")
    assert done.outcome == "improved" and done.speedup > 1.0
    assert "deterministic fixture (no GPU)" in done.message
    cands = [c for c in state.candidates if c.job == job]
    assert cands and all(c.speedup > 1.0 for c in cands)
    assert cands[-1].gpu == "deterministic fixture (no GPU)"
    assert "+++ b/" in cands[-1].diff
    # progress: begin, reports, end under one token
    reports = next(v for v in client.progress_reports.values() if any(
        isinstance(r, lsp.WorkDoneProgressBegin) and "saxpy" in r.title for r in v))
    assert isinstance(reports[0], lsp.WorkDoneProgressBegin) and reports[0].cancellable
    assert any(isinstance(r, lsp.WorkDoneProgressReport) for r in reports)
    assert isinstance(reports[-1], lsp.WorkDoneProgressEnd)

    assert state.lens_refreshes >= 1  # the "faster variant ready" lens appears without a reload
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
    assert any(lens.command and lens.command.title.endswith("× faster — Review") for lens in lenses or [])

    tree = await client.protocol.send_request_async("warpforge/searchTree", {"job": job})
    nodes = tree["nodes"] if isinstance(tree, dict) else tree.nodes
    assert len(nodes) >= 2
    # a result whose checks stopped early (the fixture's launch_bounds) is in the tree, marked, and not acceptable
    partly = [n for n in nodes if (n["status"] if isinstance(n, dict) else n.status) == "ok"
              and not (n["verified"] if isinstance(n, dict) else n.verified)]
    assert partly, nodes
    pid = str(partly[0]["id"] if isinstance(partly[0], dict) else partly[0].id)
    with pytest.raises(Exception, match="stopped after the first run"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.accept", arguments=[job, pid]))

    # View: the variant as a whole file, for the diff editor.
    shown = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.showCandidate", arguments=[job, done.candidate]))
    variant = shown["variant"] if isinstance(shown, dict) else shown.variant
    assert variant != text

    # Accept: the buffer becomes exactly the variant, through workspace/applyEdit.
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.accept", arguments=[job, done.candidate]))
    applied = res["applied"] if isinstance(res, dict) else res.applied
    assert applied
    assert state.docs[uri][1] == variant

    # The kernel has now changed: accepting again is refused with a clear message.
    with pytest.raises(Exception, match="changed since the job started"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.accept", arguments=[job, done.candidate]))


@needs_nvcc
async def test_cancel_returns_best_so_far(client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_cancel.cu", text)
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.optimize", arguments=[uri, "saxpy", "mcts"]))
    job = res["job"] if isinstance(res, dict) else res.job
    # a second job on the same kernel is refused while the first runs
    with pytest.raises(Exception, match="already being optimized"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "saxpy", "beam"]))
    await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="warpforge.cancel",
                                                                          arguments=[job]))
    await asyncio.wait_for(_until(lambda: any(d.job == job for d in state.done)), 60)
    done = next(d for d in state.done if d.job == job)
    assert done.state == "cancelled"


@needs_nvcc
async def test_two_starts_of_one_kernel_at_once_start_one_job(client: LanguageClient) -> None:
    """The workspace scan of a start runs off the event loop, so two starts sent together both reach it: the
    second must still be refused, not start a second job on the same kernel."""
    state = client.state  # type: ignore[attr-defined]
    uri = open_doc(client, "saxpy_twice.cu", SAXPY.replace("const float* x", "float* x"))

    async def start() -> Any:
        return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "saxpy", "beam"]))

    results = await asyncio.gather(start(), start(), return_exceptions=True)
    started = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(started) == 1 and len(refused) == 1, results
    assert "already being optimized" in str(refused[0])
    job = started[0]["job"] if isinstance(started[0], dict) else started[0].job
    await asyncio.wait_for(_until(lambda: any(d.job == job for d in state.done)), 120)


async def test_malformed_requests_get_errors_and_server_stays_up(client: LanguageClient) -> None:
    uri = open_doc(client, "saxpy_bad.cu", SAXPY)
    with pytest.raises(Exception, match="no __global__ kernel named `nope`"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "nope", "beam"]))
    with pytest.raises(Exception, match="not open"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[(WORK / "closed.cu").as_uri(), "saxpy", "beam"]))
    with pytest.raises(Exception, match="unknown strategy"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "saxpy", "annealing"]))
    with pytest.raises(Exception, match="no job"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.accept", arguments=["job-999", "abc"]))
    with pytest.raises(Exception):  # noqa: B017 - wrong argument count: any JSON-RPC error will do
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.accept", arguments=[]))
    with pytest.raises(Exception, match="searchTree needs"):
        await client.protocol.send_request_async("warpforge/searchTree", {"nothing": 1})
    # still alive and answering
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
    assert lenses


async def test_profile_job_without_a_gpu_keeps_static_findings_and_says_why(client: LanguageClient) -> None:
    """No GPU here (CI): the profile job still ends, with the static findings and one notice naming what is
    missing; on the GPU machine tests/test_profile_gpu.py covers the measured path."""
    from warpforge.gpu.supervisor import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: this test covers the degraded path")
    state = client.state  # type: ignore[attr-defined]
    uri = open_doc(client, "saxpy_profile.cu", SAXPY)
    await wait_diagnostics(client, uri)
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.profile", arguments=[uri, "saxpy"]))
    job = res["job"] if isinstance(res, dict) else res.job
    await asyncio.wait_for(_until(lambda: any(d.job == job for d in state.done)), 120)
    done = next(d for d in state.done if d.job == job)
    assert done.kind == "profile" and done.state == "done"
    assert done.notice and "needs an NVIDIA GPU" in done.notice
    diags = await wait_diagnostics(client, uri, lambda d: any(x.code == "WF299" for x in d))
    assert sum(1 for d in diags if d.code == "WF299") == 1  # said once
    assert any(d.code == "WF101" for d in diags)  # the static findings are still there
    with pytest.raises(Exception, match="no __global__ kernel named `nope`"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.profile", arguments=[uri, "nope"]))



async def test_gpu_status_is_said_before_a_job_and_an_optimize_it_cannot_evaluate_is_refused(
        client: LanguageClient) -> None:
    """The editor asks what GPU work can run (status bar, and before Optimize/Profile start). The fixture
    evaluator can optimize anywhere; the local backend on a machine without a GPU (CI) cannot, and the
    server refuses such a job with the reason and what to do instead, starting nothing."""
    from warpforge.gpu.supervisor import gpu_unavailable_reason

    st = await client.protocol.send_request_async("warpforge/gpuStatus", None)
    assert st.can_optimize is True and st.backend == "python:lsp_fixture_evaluator:make"
    assert st.summary == "plug-in evaluator lsp_fixture_evaluator:make"
    assert st.tools.nvcc and st.tools.ncu and st.tools.compute_sanitizer and st.tools.pycuda  # each said
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: the refusal is for machines without one")
    state = client.state  # type: ignore[attr-defined]
    uri = open_doc(client, "saxpy_nogpu.cu", SAXPY)
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"evaluationBackend": "local"}}))
    try:
        st = await client.protocol.send_request_async("warpforge/gpuStatus", None)
        assert st.can_optimize is False and st.can_profile is False
        assert st.summary.startswith("no GPU: ") and st.reason in st.summary
        assert "Remote-SSH" in st.advice and "rayAddress" in st.advice
        jobs_before = len(state.done)
        with pytest.raises(Exception, match=r"saxpy cannot be optimized here: .*Hints keep working"):
            await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
                command="warpforge.optimize", arguments=[uri, "saxpy", "beam"]))
        await asyncio.sleep(0.5)
        assert len(state.done) == jobs_before  # nothing started, so nothing finished
    finally:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"warpforge": {"evaluationBackend": "python:lsp_fixture_evaluator:make"}}))
    st = await client.protocol.send_request_async("warpforge/gpuStatus", None)
    assert st.can_optimize is True


def big_source(size: int) -> str:
    """A CUDA file of about ``size`` bytes: the reference kernels again and again, each copy in its own
    namespace (the text is valid; only its size is unusual)."""
    body = "\n".join(line for p in sorted((ROOT / "kernels").glob("*.cu")) for line in p.read_text().splitlines()
                     if not line.startswith("#include"))
    parts = ["#include <cuda_runtime.h>\n"]
    total, i = 0, 0
    while total < size:
        parts.append(f"namespace copy{i} {{\n{body}\n}}  // namespace copy{i}\n")
        total += len(parts[-1])
        i += 1
    return "".join(parts)


async def test_a_large_document_does_not_hold_up_requests_on_another(client: LanguageClient) -> None:
    """A 5 MB document (over the default limit, raised here so that it is analyzed) is parsed in the thread
    pool: a code lens on a small document is answered while the big one's lens and diagnostics are still
    being computed (an ordering, not a timing)."""
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"maxDocumentSize": 20_000_000, "nvccPath": "/nonexistent/nvcc"}}))
    big = open_doc(client, "big_5mb.cu", big_source(5_000_000))
    small = open_doc(client, "small_next_to_big.cu", SAXPY)
    events: list[str] = []

    async def lens(uri: str, name: str) -> None:
        await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
        events.append(name)

    big_lens = asyncio.ensure_future(lens(big, "big lens"))
    await asyncio.sleep(0)  # the big request goes out first
    await lens(small, "small lens")
    assert events == ["small lens"] and client.diagnostics.get(big) is None and not big_lens.done(), events
    big_lens.cancel()
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(big)))


async def test_oversized_and_binary_documents_get_a_notice_instead_of_analysis(client: LanguageClient) -> None:
    cases = {"big_default_limit.cu": (big_source(1_200_000), "over the 1 MB limit"),
             "binary.cu": ("\x7fELF\x02\x01\x01\x00\x00\x00" + "\x00\x03\x00>\x00" * 2000, "not source text")}
    for name, (text, why) in cases.items():
        uri = open_doc(client, name, text)
        diags = await wait_diagnostics(client, uri)
        assert len(diags) == 1 and why in diags[0].message and diags[0].severity == lsp.DiagnosticSeverity.Information
        assert diags[0].code == "WF004"  # its own code: WF002 is the missing toolchain (docs/findings.md)
        lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
        assert not lenses
        actions = await client.text_document_code_action_async(lsp.CodeActionParams(
            lsp.TextDocumentIdentifier(uri), lsp.Range(lsp.Position(5, 0), lsp.Position(5, 0)),
            lsp.CodeActionContext(diagnostics=[])))
        assert not actions
        with pytest.raises(Exception, match=why):
            await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
                command="warpforge.addSpec", arguments=[uri, "saxpy"]))


def test_skip_reason_counts_utf8_bytes_and_tells_text_from_binary() -> None:
    from warpforge.lsp.limits import skip_reason

    assert skip_reason("é" * 400_000, 1_000_000) is None  # 800 kB of UTF-8
    assert "over the 1 MB limit" in (skip_reason("é" * 600_000, 1_000_000) or "")  # 1.2 MB, 600 k characters
    assert skip_reason("__global__ void k() {}\n\t// tab, \x1b[0m escape, \f form feed\r\n", 1_000_000) is None
    assert "not source text" in (skip_reason("int x;\x00\x01", 1_000_000) or "")
    assert "not source text" in (skip_reason("".join(chr(i % 9) for i in range(4000)), 1_000_000) or "")


async def test_a_broken_spec_disables_only_the_spec_action(client: LanguageClient) -> None:
    """Found by the soak: a spec being typed (`uniform(2, 1)`) made the whole code-action request fail."""
    text = SAXPY.replace("uniform(-1, 1)", "uniform(2, 1)", 1)
    uri = open_doc(client, "saxpy_broken_spec.cu", text)
    kline = next(i for i, t in enumerate(text.splitlines()) if "__global__" in t)
    result = await client.text_document_code_action_async(lsp.CodeActionParams(
        lsp.TextDocumentIdentifier(uri), lsp.Range(lsp.Position(kline + 2, 4), lsp.Position(kline + 2, 4)),
        lsp.CodeActionContext(diagnostics=[])))
    assert result is not None
    assert any("Optimize kernel `saxpy`" in a.title for a in result)
    spec = next(a for a in result if isinstance(a, lsp.CodeAction) and "benchmark spec" in a.title)
    assert spec.edit is None and spec.disabled is not None and "empty range" in spec.disabled.reason


LAUNCH_PROJECT = ROOT / "tests" / "fixtures" / "launch_project"


@needs_nvcc
async def test_accept_updates_every_launch_site_of_the_workspace_in_one_edit(client: LanguageClient) -> None:
    """A variant verified with another launch (warp per row) is accepted as ONE WorkspaceEdit: the kernel's
    file (annotation), the open header launcher (versioned) and the .cpp launchers on disk (unversioned);
    the launcher whose block size is chosen at run time is not written and is named in the reply."""
    state = client.state  # type: ignore[attr-defined]
    proj = WORK / "launch_project"
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(LAUNCH_PROJECT, proj)
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"budget": 40}}))
    uri = open_doc(client, "launch_project/src/rows.cu", (proj / "src" / "rows.cu").read_text())
    header_uri = open_doc(client, "launch_project/src/rows.cuh", (proj / "src" / "rows.cuh").read_text())
    await wait_diagnostics(client, uri)
    job, done = await _run_job(client, uri, "row_sum")
    assert done.outcome == "improved"
    best = next(c for c in state.candidates if c.job == job and c.candidate == done.candidate)
    assert "warp_per_row" in (best.families or []) and best.needs_launch_change is True
    assert any(line.startswith("launch_project/src/launch.cpp:26: ") and "needs a launch change" in line
               for line in best.launch_changes)
    assert "+++ b/launch_project/src/launch.cpp (needs a launch change: not applied)" in best.diff
    assert "+++ b/launch_project/src/rows.cuh\n" in best.diff and "+++ b/launch_project/src/rows.cu\n" in best.diff

    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.accept", arguments=[job, done.candidate]))
    res = res if isinstance(res, dict) else vars(res)
    assert res["applied"]
    edit = state.edits[-1].edit
    files = {c.text_document.uri: c for c in edit.document_changes}
    cpp_uri = (proj / "src" / "launch.cpp").as_uri()
    assert set(files) == {uri, header_uri, cpp_uri}
    assert files[uri].text_document.version is not None and files[header_uri].text_document.version is not None
    assert files[cpp_uri].text_document.version is None  # not open: read from disk
    assert "// @warpforge launch grid=cdiv(rows, 256), block=256" not in state.docs[uri][1]
    header = state.docs[header_uri][1]
    assert "row_sum<<<(rows_here + 255) / 256, 256, 0, stream>>>" not in header  # the header's own names
    assert "row_sum<<<" in header and ", stream>>>(in, out, rows_here, cols_here);" in header
    cpp = (proj / "src" / "launch.cpp").read_text()
    assert "cfg.gridDim = dim3(" in cpp and "cfg.gridDim = dim3((n_rows + 255) / 256);" not in cpp
    assert "row_sum<<<(n_rows + threads - 1) / threads, threads>>>" in cpp  # left for the user
    assert res["needs_launch_change"] and res["needs_launch_change"][0].startswith("launch_project/src/launch.cpp:26")
    assert len(res["launch_changes"]) == 4


@needs_nvcc
async def test_keep_launch_setting_offers_only_variants_that_keep_the_launch(client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    proj = WORK / "launch_project_keep"
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(LAUNCH_PROJECT, proj)
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"budget": 40, "keepLaunch": True}}))
    uri = open_doc(client, "launch_project_keep/src/rows.cu", (proj / "src" / "rows.cu").read_text())
    await wait_diagnostics(client, uri)
    job, done = await _run_job(client, uri, "row_sum")
    cands = [c for c in state.candidates if c.job == job]
    assert done.outcome == "improved" and cands
    # optional fields are sent only when set: none of them carries a launch change
    assert all(getattr(c, "launch_changes", None) is None and getattr(c, "needs_launch_change", None) is None
               for c in cands)
    assert all(f not in ("warp_per_row", "block_size", "grid_stride") for c in cands for f in c.families or [])
