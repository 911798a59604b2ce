"""Start-up pays only for what it uses: the CLI and the language server do not import the Anthropic SDK,
the Pinecone SDK, Ray, pycuda or numpy on paths that never call them (together they took over a second of
every `warpforge` call and of the editor's start). Checked in a fresh interpreter by ``sys.modules``, not by
timing (benchmarks/RESULTS.md has the times)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import KERNELS_DIR, NVCC, ROOT
from lsp_raw import RawServer, server_env

HEAVY = ("anthropic", "pinecone", "ray", "pycuda", "numpy")

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""

CLI = """
from warpforge.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print()
"""


def loaded(body: str, *argv: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body, heavy=HEAVY), *argv], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    result: list[str] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def test_the_language_server_imports_no_optional_sdk() -> None:
    assert loaded("import warpforge.lsp.server\nwarpforge.lsp.server.create_server()") == []


JOB_MODULES = ("warpforge.lsp.jobs", "warpforge.app.optimize", "warpforge.search.engine", "warpforge.gpu.backends")


def test_the_server_loads_the_job_machinery_only_when_a_job_needs_it() -> None:
    """Issue 29 item 6: the first hints must not wait for search, the GPU pool and the LLM policy (~0.3 s of
    imports). A made server, and the lenses of a file (no job yet), leave them out; the first use of the job
    manager brings them in."""
    probe = (
        "import json, sys\n"
        "from warpforge.lsp.server import create_server\n"
        "from warpforge.lsp.lenses import assemble, kernel_rows\n"
        "s = create_server()\n"
        "rows = kernel_rows(open({saxpy!r}).read())\n"
        "lenses = [l.command.title for l in assemble(s, 'file:///k.cu', rows)]\n"
        "before = sorted(m for m in {mods!r} if m in sys.modules)\n"
        "s.jobs.ready('file:///k.cu')\n"
        "after = sorted(m for m in {mods!r} if m in sys.modules)\n"
        "print(json.dumps([lenses, before, after]))\n"
    ).format(saxpy=str(KERNELS_DIR / "saxpy.cu"), mods=JOB_MODULES)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    lenses, before, after = json.loads(r.stdout.strip().splitlines()[-1])
    assert lenses == ["Optimize", "Profile", "Edit benchmark spec"]
    assert before == []
    assert after == sorted(JOB_MODULES)


@pytest.mark.parametrize("argv", [
    ["--version"],
    ["kernels", str(KERNELS_DIR / "saxpy.cu")],
    ["spec", str(KERNELS_DIR / "saxpy.cu")],
    ["hints", "--no-compile", str(KERNELS_DIR / "saxpy.cu")],
    ["serve", "--help"],
    ["index", "stats", "--index", "/nonexistent/index.db"],
])
def test_cli_commands_that_never_call_them_do_not_import_them(argv: list[str]) -> None:
    assert loaded(CLI, *argv) == []


def test_help_loads_every_command_but_no_optional_sdk() -> None:
    """``--help`` lists every command, so it imports their modules (numpy comes with the GPU side's): never an
    SDK."""
    assert set(loaded(CLI, "--help")) <= {"numpy"}


def test_the_sdk_is_still_imported_when_a_client_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lazy import is where the client needs it (a key given: the SDK is loaded and used)."""
    body = ("from warpforge.policy.llm import LLMConfig, LLMClient\n"
            "c = LLMClient(LLMConfig(api_key='sk-test'))\n"
            "assert type(c._sdk).__module__.startswith('anthropic')")
    assert "anthropic" in loaded(body)


def test_a_mistyped_command_still_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Loading only the named command's module must not shrink argparse's list of choices."""
    from warpforge.cli import main

    with pytest.raises(SystemExit):
        main(["hint", "k.cu"])
    err = capsys.readouterr().err
    assert "invalid choice: 'hint'" in err
    for command in ("kernels", "spec", "hints", "profile", "optimize", "bench", "verify", "serve", "index",
                    "selftest"):
        assert f"'{command}'" in err


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the server's mapped files from /proc")
def test_the_running_server_has_not_loaded_them_after_analysing_a_file(tmp_path: Path) -> None:
    """The real server process, after publishing a file's hints (the compiler's too when nvcc is here) and its
    lenses: numpy's and pydantic-core's compiled modules (pydantic comes only with the Anthropic SDK) are not
    mapped into it."""
    s = RawServer(tmp_path, server_env())
    try:
        s.initialize(tmp_path)
        uri = (tmp_path / "saxpy.cu").as_uri()
        s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "cuda", "version": 1,
                                                           "text": (KERNELS_DIR / "saxpy.cu").read_text()}})
        publishes = 0
        deadline = time.monotonic() + 120
        while publishes < (2 if NVCC else 1) and time.monotonic() < deadline:
            try:
                msg = s.messages.get(timeout=1)
            except queue.Empty:
                continue
            publishes += msg.get("method") == "textDocument/publishDiagnostics"
        assert publishes, "no diagnostics published"
        s.request(3, "textDocument/codeLens", {"textDocument": {"uri": uri}})
        assert s.response(3, timeout=60) is not None
        maps = Path(f"/proc/{s.proc.pid}/maps").read_text()
        assert "_multiarray_umath" not in maps and "pydantic_core" not in maps
    finally:
        s.close()
