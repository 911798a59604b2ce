"""Review in the editor (issue 19 items 3 and 4), through the real server over stdio (pytest-lsp): per-hunk
accept checked by the server, the result on the lens until the user acts, lens and status consistent after a
Reject, Markdown hovers, and the settings that filter hints and turn lenses off.

Optimize jobs use the DETERMINISTIC EVALUATOR FIXTURE (tests/lsp_fixture_evaluator.py, labelled in its GPU
name): candidates are compiled with the real nvcc, speedups are synthetic.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from test_lsp import SAXPY, WORK, _env, _run_job, attach, needs_nvcc, open_doc, wait_diagnostics
from warpforge.compiler.toolchain import ToolMissing, toolchain
from warpforge.cuda.text import Position, Range
from warpforge.lsp import hunks
from warpforge.lsp.convert import diagnostic, ranked_severity
from warpforge.lsp.hover import markdown
from warpforge.lsp.settings import Settings
from warpforge.profile.analyzers import load
from warpforge.profile.findings import Severity, make

load()  # the analyzers define their codes (WF210, ...)


def _have_nvcc() -> bool:
    try:
        toolchain(None)
    except ToolMissing:
        return False
    return True


# ------------------------------------------------------------------------------------------- hunks alone
KERNEL = """#include <cuda_runtime.h>
__global__ void scale(int n, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.0f * y[i];
    }
}
"""
# a variant of two changes: a helper function above the kernel, and the kernel calling it
VARIANT = KERNEL.replace("__global__ void scale", "__device__ float twice(float v) { return v + v; }\n\n"
                         "__global__ void scale").replace("y[i] = 2.0f * y[i];", "y[i] = twice(y[i]);")


def test_hunks_split_a_variant_and_all_of_them_make_the_variant() -> None:
    hs = hunks.hunks(KERNEL, VARIANT)
    assert len(hs) == 2
    assert "twice(float v)" in hs[0].new_text and "twice(y[i])" in hs[1].new_text
    assert hunks.apply(KERNEL, hs) == VARIANT
    assert hunks.apply(KERNEL, []) == KERNEL
    only_helper = hunks.apply(KERNEL, [hs[0]])
    assert "twice(float v)" in only_helper and "2.0f * y[i]" in only_helper


def test_a_hunk_set_that_breaks_the_kernel_is_refused_with_the_reason() -> None:
    # the helper alone: still a kernel, and it compiles
    hs = hunks.hunks(KERNEL, VARIANT)
    assert hunks.check(hunks.apply(KERNEL, [hs[0]]), "scale", "k.cu", before=KERNEL) is None
    # a change that leaves a brace open: refused on the parse, with or without nvcc
    broken = KERNEL.replace("    if (i < n) {\n", "    if (i < n) {\n    {\n")
    why = hunks.check(broken, "scale", "k.cu", before=KERNEL, compile=False)
    assert why is not None and "would not parse" in why
    # a change that renames the kernel away
    assert "no longer be a kernel" in (hunks.check(KERNEL.replace("scale", "scale2"), "scale", "k.cu",
                                                   before=KERNEL, compile=False) or "")
    # the call without its helper parses, but does not compile
    call_only = hunks.apply(KERNEL, [hs[1]])
    assert hunks.check(call_only, "scale", "k.cu", before=KERNEL, compile=False) is None
    if _have_nvcc():
        why = hunks.check(call_only, "scale", "k.cu", before=KERNEL)
        assert why is not None and "would not compile" in why and "twice" in why


def test_a_variant_that_changes_its_launch_is_taken_whole_or_not_at_all() -> None:
    """Four elements per thread with a quarter of the grid: the launch line alone would leave three quarters of
    the output unwritten, the body alone would idle three quarters of the threads; neither fails to compile."""
    before = "// @warpforge launch grid=cdiv(N, 256), block=256\n" + KERNEL
    after = (before.replace("cdiv(N, 256)", "cdiv(N, 1024)")
             .replace("    if (i < n) {\n        y[i] = 2.0f * y[i];\n    }\n",
                      "    for (int k = 0; k < 4; ++k) {\n        if (4 * i + k < n) y[4 * i + k] *= 2.0f;\n    }\n"))
    hs = hunks.hunks(before, after)
    assert len(hs) == 2
    for alone in ([0], [1]):
        why = hunks.coupled(hs, alone)
        assert why is not None and "changes its launch (`// @warpforge` line 1)" in why
    assert hunks.coupled(hs, [0, 1]) is None
    # without a launch change, any subset may be taken
    assert hunks.coupled(hunks.hunks(KERNEL, VARIANT), [1]) is None


def test_a_kernel_that_does_not_compile_here_as_it_is_is_not_held_against_the_hunks() -> None:
    """A header this machine does not have: the kernel fails to compile before and after, so the changes are
    judged on the parse alone."""
    if not _have_nvcc():
        pytest.skip("nvcc not installed")
    before = '#include "not_here.cuh"\n' + KERNEL
    hs = hunks.hunks(before, '#include "not_here.cuh"\n' + VARIANT)
    assert hunks.check(hunks.apply(before, [hs[1]]), "scale", "k.cu", before=before) is None


def test_a_syntax_error_already_in_the_file_is_not_held_against_the_hunks() -> None:
    before = KERNEL + "void host( {\n"  # the user's own unfinished host code
    after = before.replace("2.0f * y[i]", "y[i] + y[i]")
    assert hunks.check(after, "scale", "k.cu", before=before, compile=False) is None


# ------------------------------------------------------------------------------------------- findings
def _finding(code: str, gain: float | None, severity: Severity | None = None) -> Any:
    r = Range(Position(3, 4), Position(3, 10))
    return make(code, "k.cu", r, "loads are scalar: 4x the instructions of float4", kernel="k",
                evidence={"width_bits": 32, "vectorizable": True, "merged": [{"code": "WF103"}],
                          "params": {"x": {"missing": ["__restrict__"]}}},
                gain=gain, gain_basis="the bandwidth fraction" if gain else None, severity=severity,
                related=((Range(Position(7, 0), Position(7, 3)), "WF103: also strided"),))


def test_severity_of_an_opportunity_follows_its_estimated_gain_and_hazards_keep_theirs() -> None:
    assert ranked_severity(_finding("WF210", 2.0)) == Severity.WARNING
    assert ranked_severity(_finding("WF210", 1.3)) == Severity.INFO
    assert ranked_severity(_finding("WF210", 1.05)) == Severity.HINT
    assert ranked_severity(_finding("WF210", None)) == Severity.INFO  # no estimate: the catalogue's
    assert ranked_severity(_finding("WF001", 1.01)) == Severity.WARNING  # a hazard is not demoted
    d = diagnostic(_finding("WF210", 2.0), "file:///k.cu")
    assert d.severity == lsp.DiagnosticSeverity.Warning and d.message.endswith("\nestimated gain 2.00×")


def test_the_hover_is_markdown_with_an_evidence_table_the_action_gain_and_related_lines() -> None:
    md = markdown(_finding("WF210", 1.3))
    assert md.startswith("**WF210** · ")
    assert "| evidence | |\n|---|---|\n| width bits | 32 |\n| vectorizable | yes |" in md
    assert "merged" not in md and "{" not in md  # nested evidence stays in the data, not the table
    assert "**Action:** Optimize Kernel tries `vectorize`" in md
    assert "**Estimated gain:** 1.30×" in md and "the bandwidth fraction" in md
    assert "- line 8: WF103: also strided" in md
    assert "](https://" in md and "#wf210)" in md
    # names are shown as written, not as Markdown emphasis
    wf101 = make("WF101", "k.cu", Range(Position(0, 0), Position(0, 1)), "`x` lacks `__restrict__`",
                 evidence={"written": ["out_buf"]})
    assert "const \\_\\_restrict\\_\\_" in markdown(wf101) and "| written | out\\_buf |" in markdown(wf101)
    # the diagnostic itself keeps what and why; the table is the hover's
    assert "width bits" not in diagnostic(_finding("WF210", 1.3), "file:///k.cu").message


def test_hint_filter_settings_are_checked_and_applied() -> None:
    s = Settings()
    assert s.shows("WF104", "info") and s.shows("WF104", "hint")
    changed = s.update({"warpforge": {"hintsExclude": ["WF104", "WF2*"], "hintsMinSeverity": "info",
                                      "codeLensEnabled": False}})
    assert set(changed) == {"hints_exclude", "hints_min_severity", "code_lens_enabled"}
    assert not s.shows("WF104", "info") and not s.shows("WF210", "warning") and s.shows("WF101", "info")
    assert not s.shows("WF101", "hint") and s.shows("WF000", "error")
    s.update({"warpforge": {"hintsExclude": "WF104", "hintsMinSeverity": "loud", "codeLensEnabled": "no"}})
    rejected = s.take_rejected()
    assert len(rejected) == 3 and s.hints_exclude == ["WF104", "WF2*"] and s.code_lens_enabled is False
    assert any("warpforge.hints.minSeverity = 'loud' ignored: expected one of error, warning, info, hint" in r
               for r in rejected)


# ------------------------------------------------------------------------------------------- the real server
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


async def _lenses(client: LanguageClient, uri: str) -> list[str]:
    got = await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri)))
    return [lens.command.title for lens in got or [] if lens.command]


async def _show(client: LanguageClient, job: str, cand: str) -> Any:
    return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.showCandidate", arguments=[job, cand]))


def _get(obj: Any, key: str) -> Any:
    return obj[key] if isinstance(obj, dict) else getattr(obj, key)


@needs_nvcc
async def test_accept_one_hunk_applies_only_it_and_a_bad_set_is_refused(client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_hunks.cu", text)
    await wait_diagnostics(client, uri)
    job, done = await _run_job(client, uri, "saxpy")
    assert done.outcome == "improved"
    assert any(t.endswith("× faster — Review") and "next best" not in t for t in await _lenses(client, uri))
    shown = await _show(client, job, done.candidate)
    hs = _get(shown, "hunks")
    assert hs and [_get(h, "index") for h in hs] == list(range(len(hs)))
    whole = hunks.hunks(text, _get(shown, "variant"))
    assert [(h.old_start, h.new_start) for h in whole] == [(_get(h, "old_start"), _get(h, "new_start")) for h in hs]

    # an index the diff does not have: refused, the buffer untouched
    with pytest.raises(Exception, match="there is no change"):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.acceptHunks", arguments=[job, done.candidate, [len(hs) + 3]]))
    assert state.docs[uri][1] == text

    # a hunk that can stand alone lands in the buffer, exactly; where the variant changes its launch, one
    # change alone is refused with the reason, and all of them make the variant
    if hunks.coupled(whole, [0]) is None:
        res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.acceptHunks", arguments=[job, done.candidate, [0]]))
        assert _get(res, "applied")
        assert state.docs[uri][1] == hunks.apply(text, [whole[0]])
    else:
        with pytest.raises(Exception, match="changes its launch"):
            await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
                command="warpforge.acceptHunks", arguments=[job, done.candidate, [0]]))
        assert state.docs[uri][1] == text
        res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.acceptHunks", arguments=[job, done.candidate, list(range(len(hs)))]))
        assert _get(res, "applied")
        assert state.docs[uri][1] == _get(shown, "variant")
    # acted on: no "Review" lens and no result lens any more
    titles = await _lenses(client, uri)
    assert not any("faster" in t or "Show Search" in t for t in titles), titles


@needs_nvcc
async def test_after_reject_the_lens_offers_the_next_best_and_nothing_once_all_are_rejected(
        client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_reject.cu", text)
    await wait_diagnostics(client, uri)
    job, done = await _run_job(client, uri, "saxpy")
    cands = sorted({c.candidate: c.speedup for c in state.candidates if c.job == job}.items(),
                   key=lambda kv: -kv[1])
    assert cands[0][0] == done.candidate and len(cands) >= 2
    # a slower one rejected: the best is still offered, as the result (not as a "next best")
    await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.reject", arguments=[job, cands[1][0]]))
    titles = await _lenses(client, uri)
    assert f"{cands[0][1]:.2f}× faster — Review" in titles and not any("next best" in t for t in titles), titles
    rest = [cands[0], *cands[2:]]
    for i, (cand, _) in enumerate(rest):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.reject", arguments=[job, cand]))
        titles = await _lenses(client, uri)
        if i + 1 < len(rest):  # the next best is offered, and said to be the next best
            assert f"next best {rest[i + 1][1]:.2f}× faster — Review" in titles, titles
        else:  # all rejected: no variant offered, no stale result either
            assert not any("faster" in t or "Show Search" in t for t in titles), titles
    assert state.docs[uri][1] == text


@needs_nvcc
async def test_a_waiting_variant_leaves_the_lens_while_the_kernel_is_edited_and_returns_on_undo(
        client: LanguageClient) -> None:
    """A variant is verified against the text the job saw: once the kernel is edited its lens goes (accept would
    refuse it), and an undo back to that text brings it back."""
    state = client.state  # type: ignore[attr-defined]
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_edited.cu", text)
    await wait_diagnostics(client, uri)
    _, done = await _run_job(client, uri, "saxpy")
    assert done.outcome == "improved"
    review = f"{done.speedup:.2f}× faster — Review"
    assert review in await _lenses(client, uri)

    def change(version: int, new: str) -> None:
        state.docs[uri] = (version, new)
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=new)]))

    change(2, text.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + y[i] + 0.0f;"))
    await asyncio.sleep(0.3)
    titles = await _lenses(client, uri)
    assert not any("faster" in t for t in titles) and "Optimize" in titles, titles
    change(3, "// a comment above the kernel\n" + text)  # the kernel as the job saw it, elsewhere in the file
    await asyncio.sleep(0.3)
    assert review in await _lenses(client, uri)


@needs_nvcc
async def test_a_job_without_a_faster_variant_keeps_its_result_on_the_lens_until_the_kernel_changes(
        client: LanguageClient) -> None:
    state = client.state  # type: ignore[attr-defined]
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"budget": 1}}))  # the original only: nothing can be faster
    try:
        text = SAXPY.replace("const float* x", "float* x")
        uri = open_doc(client, "saxpy_none.cu", text)
        await wait_diagnostics(client, uri)
        _, done = await _run_job(client, uri, "saxpy")
        assert done.outcome != "improved"
        titles = await _lenses(client, uri)
        assert any(t.startswith("no faster variant (") and t.endswith("— Show Search") for t in titles), titles
        assert not any("Optimizing" in t for t in titles)
        edited = text.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + y[i] + 0.0f;")
        state.docs[uri] = (2, edited)
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=edited)]))
        await asyncio.sleep(0.3)
        assert not any("Show Search" in t for t in await _lenses(client, uri))
    finally:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"warpforge": {"budget": 12}}))


async def test_filters_and_the_lens_switch_are_honoured_by_the_server(client: LanguageClient) -> None:
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_filters.cu", text)
    diags = await wait_diagnostics(client, uri, lambda d: any(x.code == "WF101" for x in d))
    line = next(d for d in diags if d.code == "WF101").range.start

    hover = await client.text_document_hover_async(lsp.HoverParams(lsp.TextDocumentIdentifier(uri), line))
    assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
    assert hover.contents.kind == lsp.MarkupKind.Markdown
    assert "**WF101**" in hover.contents.value and "| written | y |" in hover.contents.value
    assert "Ctrl+. applies a quick fix" in hover.contents.value

    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"warpforge": {"hintsExclude": ["WF101"], "codeLensEnabled": False}}))
    try:
        diags = await wait_diagnostics(client, uri, lambda d: not any(x.code == "WF101" for x in d))
        assert await _lenses(client, uri) == []
        hover = await client.text_document_hover_async(lsp.HoverParams(lsp.TextDocumentIdentifier(uri), line))
        assert hover is None or "WF101" not in str(hover.contents)
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"warpforge": {"hintsExclude": [], "hintsMinSeverity": "warning", "codeLensEnabled": True}}))
        diags = await wait_diagnostics(client, uri, lambda d: all(
            x.severity in (lsp.DiagnosticSeverity.Error, lsp.DiagnosticSeverity.Warning) for x in d))
        assert "Optimize" in await _lenses(client, uri)
    finally:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
            settings={"warpforge": {"hintsExclude": [], "hintsMinSeverity": "hint", "codeLensEnabled": True}}))


async def test_a_spec_error_is_one_line_that_names_its_fix(client: LanguageClient) -> None:
    """Optimize on a kernel whose spec is wrong: the error is the spec's own one line, and it tells the editor
    which action fixes it (the editor shows an Add Benchmark Spec button)."""
    text = SAXPY.replace("@warpforge arg x: in float[N]", "@warpforge arg x: in float[M]")
    uri = open_doc(client, "saxpy_badspec.cu", text)
    with pytest.raises(Exception) as info:
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "saxpy", "beam"]))
    err = info.value
    assert getattr(err, "data", None) == {"fix": "addSpec"}, (type(err), err)
    assert "\n" not in str(getattr(err, "message", err)) and "Traceback" not in str(err)
    # a mistake that is not the spec's names no fix
    with pytest.raises(Exception) as info:
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="warpforge.optimize", arguments=[uri, "no_such_kernel", "beam"]))
    assert getattr(info.value, "data", None) is None


def test_tracebacks_of_users_mistakes_reach_the_log_only_with_a_verbose_trace() -> None:
    import logging

    from warpforge.lsp.server import trace_logging
    logger = logging.getLogger("warpforge")
    before = logger.level
    try:
        trace_logging("verbose")
        assert logger.isEnabledFor(logging.DEBUG)
        trace_logging(lsp.TraceValue.Messages)
        assert not logger.isEnabledFor(logging.DEBUG) and logger.isEnabledFor(logging.INFO)
        trace_logging(None)
        assert not logger.isEnabledFor(logging.DEBUG)
    finally:
        logger.setLevel(before)


@needs_nvcc
async def test_accepting_one_jobs_variant_retires_the_older_jobs_variants_of_that_kernel(
        client: LanguageClient) -> None:
    """Two runs on one kernel, the newer accepted: the older run's variants were made for the old text, so the
    lens offers none of them (nor does the editor's status bar, which follows the same rule)."""
    text = SAXPY.replace("const float* x", "float* x")
    uri = open_doc(client, "saxpy_two_runs.cu", text)
    await wait_diagnostics(client, uri)
    first, _ = await _run_job(client, uri, "saxpy")
    second, done = await _run_job(client, uri, "saxpy")
    assert first != second and any("faster — Review" in t for t in await _lenses(client, uri))
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="warpforge.accept", arguments=[second, done.candidate]))
    assert _get(res, "applied")
    titles = await _lenses(client, uri)
    assert not any("Review" in t or "Show Search" in t for t in titles), titles


def test_a_refused_request_is_logged_in_one_line_and_a_bug_keeps_its_traceback() -> None:
    import logging

    from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams

    from warpforge.lsp.server import RefusalsInOneLine

    def record(exc: Exception) -> logging.LogRecord:
        try:
            raise exc
        except Exception:
            import sys
            return logging.LogRecord("pygls.protocol.json_rpc", logging.ERROR, __file__, 1,
                                     'Exception occurred for message "%s"', ("7",), sys.exc_info())

    refused = record(JsonRpcInvalidParams("not applied: the kernel would not parse"))
    assert RefusalsInOneLine().filter(refused)
    assert refused.levelno == logging.INFO and refused.exc_info is None
    assert refused.getMessage() == "request refused: not applied: the kernel would not parse"
    bug = record(JsonRpcInternalError("WarpForge: KeyError: 'x'"))
    assert RefusalsInOneLine().filter(bug)
    assert bug.levelno == logging.ERROR and bug.exc_info is not None


def test_diagnostics_read_like_clangds_and_the_hover_explains() -> None:
    """Issue 29, item 7: every hint on the repository's kernels (the real analyzers, nvcc when it is here) has a
    headline of at most 12 words with no Markdown backticks; the hover carries the full explanation, its code
    as code spans."""
    from pathlib import Path

    from warpforge.compiler.toolchain import ToolMissing, toolchain
    from warpforge.profile.findings import HEADLINE_WORDS
    from warpforge.profile.hints import analyze_file

    try:
        toolchain()
        compile_ = True
    except ToolMissing:
        compile_ = False
    kernels = sorted((Path(__file__).resolve().parent.parent / "kernels").glob("*.cu"))
    findings = [f for k in kernels for f in analyze_file(str(k), use_compiler=compile_).findings]
    assert len(findings) >= 10
    for f in findings:
        d = diagnostic(f, "file:///k.cu")
        head = d.message.split("\n")[0]
        assert "`" not in d.message and len([w for w in head.split() if any(c.isalnum() for c in w)]) \
            <= HEADLINE_WORDS, (f.code, d.message)
        assert d.data["message"] == f.message
        md = markdown(f)
        if f.message != head:
            assert md.split("\n\n")[1].replace("\\", "") == f.message.replace("\\", ""), (f.code, md)
    wf101 = next(f for f in findings if f.code == "WF101")
    assert "'__restrict__'" in wf101.headline() and "`__restrict__`" in markdown(wf101)
