"""One error contract for ``--json`` (docs/cli.md, "--json"): on every command that takes it, an error is a JSON
object on stdout (besides the one line on stderr) with the documented exit code, and a batch keeps the good
files' results with an error entry in place of the bad one. Run in-process through ``main``."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import KERNELS_DIR
from warpforge.cli import build_parser, main
from warpforge.exitcodes import ExitCode

SAXPY = str(KERNELS_DIR / "saxpy.cu")
NO_GPU = importlib.util.find_spec("pycuda") is None


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def check_error(error: dict[str, Any], code: int) -> None:
    assert set(error) == {"message", "file", "line", "column", "exit_code", "kind"}, error
    assert error["exit_code"] == code
    assert error["kind"] == {2: "bad_input", 3: "unavailable", 1: "failed"}[code]


def json_commands() -> list[str]:
    """Every (sub)command of the real parser that has a --json option, as 'index stats' / 'spec'."""
    found: list[str] = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())
        if any("--json" in a.option_strings for a in parser._actions):
            found.append(prefix)

    walk(build_parser(), "")
    return sorted(found)


def missing_input(tmp: Path) -> dict[str, list[str]]:
    gone = str(tmp / "missing.cu")
    return {
        "kernels": ["kernels", gone], "spec": ["spec", gone], "hints": ["hints", gone], "profile": ["profile", gone],
        "optimize": ["optimize", gone], "bench": ["bench", gone], "verify": ["verify", gone, "--candidate", gone],
        "index add": ["index", "add", str(tmp / "nodir"), "--source", "s"],
        "index search": ["index", "search", "q", "--index", str(tmp / "no" / "index.db")],
        "index stats": ["index", "stats", "--index", str(tmp / "no" / "index.db")],
    }


def test_every_json_command_answers_an_error_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = missing_input(tmp_path)
    assert set(json_commands()) == {*cases, "selftest"}  # a new --json command needs its case here
    for command, argv in cases.items():
        code, out, err = run(capsys, *argv, "--json")
        assert code == ExitCode.USAGE, (command, err)
        # a batch command's answer is its list, with an entry for the file in error; else one object
        error = out[0]["error"] if command in ("kernels", "hints") else out["error"]
        check_error(error, ExitCode.USAGE)
        assert err.count("\n") == 1 and err.startswith("warpforge: error: ") and error["message"] in err
        if command.split()[0] != "index":
            assert error["file"] == str(tmp_path / "missing.cu"), command


def test_without_json_stdout_stays_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["spec", str(tmp_path / "missing.cu")]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("warpforge: error: ")


def test_a_spec_error_carries_its_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "k.cu"
    bad.write_text("// @warpforge size N = 1 << 20\n// @warpforge arg x: in float[M]\n"
                   "// @warpforge launch grid=cdiv(N, 256), block=256\n"
                   "__global__ void k(const float* x) { }\n", encoding="utf-8")
    code, out, _ = run(capsys, "spec", str(bad), "--json")
    assert code == ExitCode.USAGE
    check_error(out["error"], ExitCode.USAGE)
    assert out["error"]["file"] == str(bad) and out["error"]["line"] == 2, out
    assert "`M`" in out["error"]["message"], out


def test_an_option_error_is_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["optimize", SAXPY, "--budget", "-1", "--json"])
    assert exit_.value.code == ExitCode.USAGE
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    check_error(error, ExitCode.USAGE)
    assert "--budget" in error["message"] and error["file"] is None and "--budget" in err


@pytest.mark.parametrize("command", ["hints", "kernels"])
def test_a_batch_keeps_the_good_files_and_names_the_bad_one(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            command: str) -> None:
    empty = tmp_path / "binary.cu"
    empty.write_bytes(b"\0\1\2")
    extra = ["--no-compile"] if command == "hints" else []
    code, out, err = run(capsys, command, SAXPY, str(tmp_path / "missing.cu"), str(empty), *extra, "--json")
    assert code == ExitCode.USAGE  # bad input was given: the documented code, with what could be done
    files = [entry["file"] for entry in out]
    good = [entry for entry in out if "error" not in entry]
    bad = [entry for entry in out if "error" in entry]
    assert files[0] == SAXPY and good and all(e["file"] == SAXPY for e in good)
    if command == "hints":
        assert good[0]["kernels"] == ["saxpy"] and good[0]["findings"]
    else:
        assert good[0]["kernel"] == "saxpy"
    assert [e["file"] for e in bad] == [str(tmp_path / "missing.cu"), str(empty)]
    for e in bad:
        check_error(e["error"], ExitCode.USAGE)
    assert "no such file" in bad[0]["error"]["message"] and "binary" in bad[1]["error"]["message"]
    assert err.count("warpforge: error: ") == 2


def test_a_batch_without_json_still_stops_at_the_bad_file(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    assert main(["hints", SAXPY, str(tmp_path / "missing.cu"), "--no-compile"]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "missing.cu: no such file" in err


@pytest.mark.skipif(not NO_GPU, reason="pycuda is installed here: this case is about a machine without")
@pytest.mark.parametrize("argv", [["bench", SAXPY], ["optimize", SAXPY], ["selftest"]])
def test_cannot_run_here_is_an_error_object(capsys: pytest.CaptureFixture[str], argv: list[str],
                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # optimize keeps nothing, but runs from a folder of its own
    code, out, _ = run(capsys, *argv, "--json")
    assert code == ExitCode.UNAVAILABLE
    check_error(out["error"], ExitCode.UNAVAILABLE)
    assert "GPU" in out["error"]["message"] or "pycuda" in out["error"]["message"]
