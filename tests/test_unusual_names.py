"""A file name holding a quote, a backslash or a line break keeps its compiler and SASS hints (issue 26 item 9).

The unit names the file in ``#line`` directives; cicc copies that name into PTX unescaped and ptxas rejects
it, so such a name is built under an alias (``compiler.names.line_alias``): messages are mapped back to the
real name, and the SASS line table, which keeps the alias, is matched through ``same_file``. Real nvcc here,
with a private cache so nothing is replayed from an earlier run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import KERNELS_DIR, needs_nvcc
from warpforge.cli import main
from warpforge.compiler.names import line_alias, same_file
from warpforge.exitcodes import ExitCode

NAMES = ['q"uote.cu', "back\\slash.cu", "line\nbreak.cu", 'paren(1)".cu']
BROKEN = ("// @warpforge size N = 1024\n"
          "__global__ void k(float* y, int n)\n"
          "{\n"
          "    int i = threadIdx.x;\n"
          "    if (i < n) y[i] = undefined_name;\n"
          "}\n")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))


def hints(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[dict[str, Any]]]:
    code = main(["hints", str(path), "--json"])
    out, _ = capsys.readouterr()
    report = json.loads(out)[0]
    return code, report["findings"]


def shape(findings: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return [(f["code"], f["range"]["start"]["line"], json.dumps(f["evidence"], sort_keys=True)) for f in findings]


def test_the_alias_is_safe_and_recognised() -> None:
    for name in NAMES:
        alias = line_alias(name)
        assert not any(ch in alias for ch in '"\\\n\r') and same_file(f"/tmp/x/{alias}", name)
    assert line_alias("plain/k.cu") == "plain/k.cu" and not same_file("other.cu", "k.cu")


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_sass_and_compiler_hints_survive_an_unusual_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         name: str) -> None:
    plain = tmp_path / "saxpy.cu"
    plain.write_bytes((KERNELS_DIR / "saxpy.cu").read_bytes())
    odd = tmp_path / name
    odd.write_bytes(plain.read_bytes())
    _, expected = hints(capsys, plain)
    assert any("sass_scalar_loads" in f["evidence"] for f in expected)  # the SASS-backed hint is there to lose
    code, found = hints(capsys, odd)
    assert code == ExitCode.OK and shape(found) == shape(expected)
    assert all(f["file"] == str(odd) for f in found)


@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_a_compile_error_is_on_its_line_under_an_unusual_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              name: str) -> None:
    odd = tmp_path / name
    odd.write_text(BROKEN, encoding="utf-8")
    code, found = hints(capsys, odd)
    assert code == ExitCode.FAILED  # a finding of severity error
    errors = [f for f in found if f["code"] == "WF000"]
    assert errors and errors[0]["range"]["start"]["line"] == 4, found  # 0-based: `y[i] = undefined_name`
    assert "undefined_name" in errors[0]["message"] and "(in " not in errors[0]["message"], errors[0]
