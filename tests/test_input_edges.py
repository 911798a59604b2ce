"""Rough edges of bad input (issue 26 item 8): an empty file, a UTF-16 file, a file with hundreds of kernels.
Each is one clear line with the documented exit code, the same for every command that reads the file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import KERNELS_DIR
from warpforge.cli import main
from warpforge.commands.inputs import wide_encoding
from warpforge.exitcodes import ExitCode

SAXPY = (KERNELS_DIR / "saxpy.cu").read_text(encoding="utf-8")


def one_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == ExitCode.USAGE and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("warpforge: error: "), err
    return err[len("warpforge: error: "):].rstrip("\n")


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_file_is_bad_input_for_hints_as_for_spec(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          text: str) -> None:
    empty = tmp_path / "empty.cu"
    empty.write_text(text, encoding="utf-8")
    lines = {one_error(capsys, command, str(empty)) for command in ("hints", "spec", "optimize")}
    assert lines == {f"{empty}: empty file: no __global__ kernels to read; open the file that holds the kernel"}


def test_a_file_without_kernels_is_bad_input_for_hints_too(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    host = tmp_path / "host.cu"
    host.write_text("int main() { return 0; }\n", encoding="utf-8")
    assert one_error(capsys, "hints", str(host), "--no-compile") == f"{host}: no __global__ kernels found"


@pytest.mark.parametrize(("encoding", "name"), [
    ("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32"),
])
def test_a_utf16_file_is_named_as_such_not_binary(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  encoding: str, name: str) -> None:
    wide = tmp_path / "saxpy.cu"
    wide.write_bytes(SAXPY.encode(encoding))
    for command in ("hints", "spec", "kernels"):
        line = one_error(capsys, command, str(wide))
        assert line.startswith(f"{wide}: {name} text, not UTF-8; save the file as UTF-8"), line
        assert "binary" not in line


def test_binaries_and_utf8_are_not_taken_for_utf16() -> None:
    assert wide_encoding(Path(sys.executable).resolve().read_bytes()[:65536]) is None
    assert wide_encoding(SAXPY.encode("utf-8")) is None
    assert wide_encoding(b"\0" * 100) is None  # NUL everywhere: binary, not text
    assert wide_encoding("__global__ void k() {}".encode("utf-16-le")) == "UTF-16"  # no mark: by its NULs


def many_kernels(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "generated.cu"
    path.write_text("".join(f"__global__ void kern_{i}(float* y) {{ y[threadIdx.x] = {i}.0f; }}\n"
                            for i in range(n)), encoding="utf-8")
    return path


def test_hundreds_of_kernels_are_counted_not_all_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = many_kernels(tmp_path, 500)
    line = one_error(capsys, "spec", str(path))
    assert line == (f"{path}: 500 kernels (kern_0, kern_1, kern_2, kern_3, kern_4, kern_5, kern_6, kern_7 and 492 "
                    f"more; `warpforge kernels {path}` lists them all); choose one with --kernel NAME")
    line = one_error(capsys, "spec", str(path), "--kernel", "kern_4999")
    assert "kern_8," not in line and "and 492 more" in line and len(line) < 400
    assert line.endswith("; did you mean `kern_499`?"), line


def test_a_few_kernels_are_all_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = many_kernels(tmp_path, 8)
    line = one_error(capsys, "spec", str(path))
    assert "kern_7)" in line and "more" not in line
