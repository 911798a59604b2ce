"""Start-up pays only for what it uses: the CLI and the language server do not import the Anthropic SDK,
the Pinecone SDK, Ray, pycuda or numpy on paths that never call them (together they took over a second of
every `warpforge` call and of the editor's start). Checked in a fresh interpreter by ``sys.modules``, not by
timing (benchmarks/RESULTS.md has the times)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import KERNELS_DIR, ROOT

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
