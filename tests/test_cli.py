"""The ``warpforge`` command line, run in-process (plus one real run of the console script): outputs,
``--json``, ``spec --write`` and exit codes with one-line errors."""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, KERNEL_FILES, KERNELS_DIR, ROOT
from warpforge.cli import main
from warpforge.cuda import parse


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    """The error output: exactly one line, prefixed, no traceback."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("warpforge: error: ") and "Traceback" not in err
    return err[len("warpforge: error: ") :].rstrip("\n")


def name_position(path: Path, name: str) -> tuple[int, int]:
    """1-based line and column of a kernel's name, found independently of the parser."""
    for i, line in enumerate(path.read_text(encoding="utf-8").split("\n")):
        m = re.search(rf"__global__\s+(?:__launch_bounds__\([^)]*\)\s*)?void\s+({name})\s*\(", line)
        if m:
            return i + 1, len(line[: m.start(1)].encode("utf-16-le")) // 2 + 1
    raise AssertionError(f"{name} not in {path}")


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


# ------------------------------------------------------------------------------------------ kernels


def test_kernels_lists_every_reference_kernel_with_its_location(capsys: pytest.CaptureFixture[str],
                                                                in_root: None) -> None:
    files = [str(p.relative_to(ROOT)) for p in KERNEL_FILES]
    code, out, err = run(capsys, "kernels", *files)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == len(files) == 9
    for path, line in zip(files, lines, strict=True):
        m = re.match(r"^(\S+):(\d+):(\d+): (\w+)\((.*)\)", line)
        assert m is not None, line
        assert m.group(1) == path
        want = name_position(ROOT / path, m.group(4))
        assert (int(m.group(2)), int(m.group(3))) == want
        assert "spec annotated" in line
    assert "kernels/saxpy.cu:11:28: saxpy(int n, float a, const float* x, float* y)" in out
    assert 'extern "C"' in lines[[f.endswith("saxpy.cu") for f in files].index(True)]


def test_kernels_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "kernels", "--json", str(FIXTURES / "features.cu"), str(KERNELS_DIR / "sgemm.cu"))
    assert code == 0
    rows = json.loads(out)
    assert [r["qualified_name"] for r in rows] == [
        "block_sum", "scale", "add_pairs", "zero", "ops::detail::clustered", "ops::fill", "tiled_copy", "apply",
        "sgemm_naive"]
    clustered = rows[4]
    assert clustered == {
        "file": str(FIXTURES / "features.cu"), "kernel": "clustered", "qualified_name": "ops::detail::clustered",
        "line": 59, "column": 46, "end_line": 63,
        "params": ["float* __restrict__ y", "const float* __restrict__ x", "int n"],
        "template_params": [], "launch_bounds": ["256", "2", "1"], "extern_c": False, "annotated": False,
        "launch_sites": [104],
    }
    assert rows[0]["template_params"] == ["T", "BLOCK"] and rows[8]["annotated"] is True


def test_kernels_with_unicode_columns_and_syntax_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "kernels", str(FIXTURES / "unicode.cu"), str(FIXTURES / "syntax_error.cu"))
    assert code == 0
    assert f"{FIXTURES / 'unicode.cu'}:5:28: first(float* x, int n)" in out  # UTF-16 column, 1-based
    assert f"{FIXTURES / 'unicode.cu'}:14:17: scale(" in out
    for name in ("scale_after_error", "templated_after_error", "extern_after_error", "in_block", "namespaced",
                 "last"):
        assert f" {name}(" in out
    # The syntax error is a warning (one line), the kernels are still listed.
    assert err == (f"{FIXTURES / 'syntax_error.cu'}:8: warning: syntax error: missing `)`; kernels elsewhere in "
                   "the file are still listed\n")


def test_kernels_names_a_kernel_that_does_not_parse_and_lists_the_others(capsys: pytest.CaptureFixture[str],
                                                                          tmp_path: Path) -> None:
    f = tmp_path / "two.cu"
    f.write_text("__global__ void ok(float* x) { x[0] = 1; }\n"
                 "// __global__ void in_a_comment(float* x) {\n"
                 "__global__ void proto(float* x);\n"
                 "__global__ void __launch_bounds__(256) bad(float* x) { x[0] = ; ) }\n")
    code, out, err = run(capsys, "kernels", str(f))
    assert code == 0 and out == f"{f}:1:17: ok(float* x)\n"
    assert err.splitlines()[-1] == f"{f}:4: warning: the kernel `bad` does not parse and is not listed"
    code, _, err = run(capsys, "spec", str(f), "--kernel", "bad")
    assert code == 2 and one_line_error(err).startswith(f"{f}:4: the kernel `bad` at line 4 does not parse "
                                                        "(syntax error near `= ; )` at line 4)")


def test_kernels_of_a_file_without_kernels(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "host.cu"
    empty.write_text("int main() { return 0; }\n")
    code, out, err = run(capsys, "kernels", str(empty))
    assert (code, out, err) == (0, "no __global__ kernels found\n", "")


# --------------------------------------------------------------------------------------------- spec


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_spec_json_is_complete_for_every_reference_kernel(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    code, out, err = run(capsys, "spec", str(path), "--json")
    assert code == 0 and err == ""
    spec = json.loads(out)
    (kernel,) = parse(path.read_bytes()).kernels
    assert spec["kernel"] == kernel.name and spec["file"] == str(path)
    assert re.fullmatch(r"[0-9a-f]{16}", spec["spec_hash"])
    assert spec["sizes"] and all(s["expr"] and s["source"] == "annotation" and s["line"] for s in spec["sizes"])
    assert [a["name"] for a in spec["args"]] == [p.name for p in kernel.params]
    for a, p in zip(spec["args"], kernel.params, strict=True):
        if p.is_pointer:
            assert a["role"] in ("in", "out", "inout") and a["count"] and a["dtype"]
            assert (a["distribution"] is None) == (a["role"] == "out")
        else:
            assert a["role"] == "scalar" and a["value"]
    assert spec["launch"]["grid"] and spec["launch"]["block"]
    sizes = {s["name"] for s in spec["sizes"]} | {t["name"] for t in spec["tunables"]}
    for resolved in (spec["resolved"], spec["perturbed"]):
        assert set(resolved["sizes"]) == sizes
        assert set(resolved["args"]) == {p.name for p in kernel.params}
        assert all(isinstance(v, int | float) and v > 0 for v in resolved["args"].values())
        assert len(resolved["grid"]) == 3 and len(resolved["block"]) == 3
        assert all(v >= 1 for v in resolved["grid"] + resolved["block"])
        assert resolved["block"][0] * resolved["block"][1] * resolved["block"][2] <= 1024
    assert spec["perturbed"]["sizes"] != spec["resolved"]["sizes"]


def test_spec_values(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "spec", str(KERNELS_DIR / "sgemm.cu"), "--json")
    spec = json.loads(out)
    assert spec["resolved"]["grid"] == [64, 64, 1] and spec["resolved"]["block"] == [16, 16, 1]
    assert spec["resolved"]["args"] == {"M": 1024, "N": 1024, "K": 1024, "alpha": 1.5, "A": 1 << 20, "B": 1 << 20,
                                        "beta": 0.5, "C": 1 << 20}
    assert spec["perturbed"]["sizes"] == {"M": 921, "N": 921, "K": 921}
    _, out, _ = run(capsys, "spec", str(KERNELS_DIR / "reduce_sum.cu"), "--json")
    spec = json.loads(out)
    assert spec["resolved"]["defines"] == {"BLOCK_SIZE": "256"} and spec["resolved"]["grid"] == [65536, 1, 1]


def test_spec_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "spec", str(FIXTURES / "host_launch.cu"), "--kernel", "histogram")
    assert code == 0 and err == ""
    assert out.startswith(f"histogram in {FIXTURES / 'host_launch.cu'}  (inferred from the launch at line 70)")
    # the perturbed column is the value the odd-size run uses, and "how" says why
    assert re.search(r"NBINS\s+│\s+64\s+│\s+64\s+│\s+64\s+│\s+fixed", out)
    assert re.search(r"n\s+│\s+1 << 24\s+│\s+16777216\s+│\s+15099495\s+│\s+perturbed", out)
    assert "launch: grid (65536,) block (256,)  (inferred)" in out
    code, out, _ = run(capsys, "spec", str(KERNELS_DIR / "reduce_sum.cu"))
    assert "tunable BLOCK_SIZE: 256, 128, 512, 1024 (default 256)" in out and "seeds: 0, 1, 2" in out


def test_spec_of_an_inferred_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "spec", str(FIXTURES / "host_launch.cu"), "-k", "row_scale", "--json")
    assert code == 0
    spec = json.loads(out)
    assert [(a["name"], a["role"], a["source"]) for a in spec["args"]] == [
        ("in", "in", "inferred"), ("out", "out", "inferred"), ("scale", "in", "inferred"),
        ("rows", "scalar", "inferred"), ("cols", "scalar", "inferred")]
    assert spec["resolved"]["grid"] == [12, 64, 1] and spec["notes"] == ["inferred from the launch at line 74"]


# ------------------------------------------------------------------------------------------ --write


def _without_directives(text: str) -> list[str]:
    return [ln for ln in text.split("\n") if not ln.lstrip().startswith("// @warpforge")]


@pytest.mark.parametrize("kernel", ["axpy", "square", "histogram", "row_scale", "tscale"])
def test_spec_write_inserts_an_annotation_with_the_same_spec(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             kernel: str) -> None:
    copy = tmp_path / "host_launch.cu"
    shutil.copy(FIXTURES / "host_launch.cu", copy)
    before = copy.read_text(encoding="utf-8")
    _, out, _ = run(capsys, "spec", str(copy), "-k", kernel, "--json")
    want = json.loads(out)
    code, out, err = run(capsys, "spec", str(copy), "-k", kernel, "--write")
    assert code == 0 and err == ""
    k = parse(before).kernel(kernel)
    assert k is not None
    assert out == f"{copy}:{k.start_line + 1}: wrote the spec of `{kernel}`\n"
    after = copy.read_text(encoding="utf-8")
    assert _without_directives(after) == before.split("\n")  # only annotation lines were added
    _, out, _ = run(capsys, "spec", str(copy), "-k", kernel, "--json")
    got = json.loads(out)
    assert got["spec_hash"] == want["spec_hash"]
    assert got["resolved"] == want["resolved"] and got.get("perturbed") == want.get("perturbed")
    assert {a["source"] for a in got["args"]} == {"annotation"}
    # Writing again replaces the block instead of stacking a second one.
    run(capsys, "spec", str(copy), "-k", kernel, "--write")
    assert copy.read_text(encoding="utf-8") == after


def test_spec_write_replaces_an_existing_block_and_keeps_prose(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    copy = tmp_path / "softmax.cu"
    shutil.copy(KERNELS_DIR / "softmax.cu", copy)
    before = copy.read_text(encoding="utf-8")
    _, out, _ = run(capsys, "spec", str(copy), "--json")
    want = json.loads(out)["spec_hash"]
    code, _, _ = run(capsys, "spec", str(copy), "--write")
    assert code == 0
    after = copy.read_text(encoding="utf-8")
    assert _without_directives(after) == _without_directives(before)
    assert "// Row-wise softmax over a B x C matrix" in after
    _, out, _ = run(capsys, "spec", str(copy), "--json")
    assert json.loads(out)["spec_hash"] == want


def test_spec_write_guesses_when_inference_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    copy = tmp_path / "host_launch.cu"
    shutil.copy(FIXTURES / "host_launch.cu", copy)
    code, _, err = run(capsys, "spec", str(copy), "-k", "no_launch")
    assert code == 2 and "cannot infer the length of `x`" in one_line_error(err)
    code, out, err = run(capsys, "spec", str(copy), "-k", "no_launch", "--write", "--json")
    # the guesses are said (a note on stderr) and marked on their lines, never inserted silently
    assert code == 0 and err.startswith("note: ") and "guessed, check them: `size n`, `arg n`, `arg x`" in err
    written = json.loads(out)
    assert written["written"] is True and written["guessed"] is True
    assert set(written["guesses"]) == {"size n", "arg n", "arg x", "launch"}
    text = copy.read_text(encoding="utf-8")
    nowhere = "// guessed: no launch of `no_launch` in this file or its project"
    assert (f"// @warpforge size n = 1 << 22  {nowhere}; a problem of 2^22 elements\n"
            "// @warpforge arg x: inout float[n] uniform(-1, 1)  // guessed: length from the kernel's guards "
            "(its subscripts stay below `n`)\n"
            f"// @warpforge arg n = n  {nowhere}\n"
            f"// @warpforge launch grid=cdiv(n, 256), block=256  {nowhere}; one thread per element of `n` assumed\n"
            "__global__ void no_launch(") in text
    code, out, err = run(capsys, "spec", str(copy), "-k", "no_launch", "--json")
    # the written remarks keep saying the values are guesses until the user deletes them
    assert code == 0 and "the spec has guessed values, check them: `size n`" in err
    assert json.loads(out)["resolved"]["args"] == {"x": 1 << 22, "n": 1 << 22}


def test_spec_write_of_an_unwritable_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    copy = tmp_path / "saxpy.cu"
    shutil.copy(KERNELS_DIR / "saxpy.cu", copy)
    copy.chmod(0o444)
    if os.access(copy, os.W_OK):  # running as root: permissions do not stop writes
        pytest.skip("file permissions are not enforced for this user")
    code, _, err = run(capsys, "spec", str(copy), "--write")
    assert code == 1 and one_line_error(err).startswith(f"{copy}: cannot write")


# ------------------------------------------------------------------------------------ exit codes


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "spec", str(tmp_path / "nope.cu"))
    assert code == 2 and out == ""
    assert one_line_error(err) == f"{tmp_path / 'nope.cu'}: no such file"
    code, _, err = run(capsys, "kernels", str(KERNELS_DIR / "saxpy.cu"), str(tmp_path / "nope.cu"))
    assert code == 2 and one_line_error(err) == f"{tmp_path / 'nope.cu'}: no such file"
    code, _, err = run(capsys, "kernels", str(tmp_path))
    assert code == 2 and "is a directory" in one_line_error(err)


def test_no_such_kernel_lists_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "host_launch.cu"
    code, out, err = run(capsys, "spec", str(path), "--kernel", "nope")
    assert code == 2 and out == ""
    assert one_line_error(err) == (f"{path}: no __global__ kernel named `nope` (kernels here: axpy, square, "
                                   "histogram, row_scale, tscale, no_launch)")


def test_several_kernels_need_a_choice(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "host_launch.cu"
    code, _, err = run(capsys, "spec", str(path))
    assert code == 2
    assert one_line_error(err) == (f"{path}: 6 kernels (axpy, square, histogram, row_scale, tscale, no_launch); "
                                   "choose one with --kernel NAME")
    code, _, err = run(capsys, "spec", str(path), "--write")
    assert code == 2 and "choose one with --kernel NAME" in one_line_error(err)


def test_bad_annotation_names_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "gelu.cu"
    text = (KERNELS_DIR / "gelu.cu").read_text(encoding="utf-8")
    bad.write_text(text.replace("// @warpforge launch grid=cdiv(N, 256), block=256",
                                "// @warpforge launch grid=cdiv(M, 256), block=256"), encoding="utf-8")
    code, out, err = run(capsys, "spec", str(bad))
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert line.startswith(f"{bad}:10: grid: unknown name `M`")
    assert line.endswith("; define it above the kernel with `// @warpforge size M = ...` or use one of: N")
    # --write refuses to paper over a broken block (and leaves the file alone).
    before = bad.read_text(encoding="utf-8")
    code, _, err = run(capsys, "spec", str(bad), "--write")
    assert code == 2 and one_line_error(err).startswith(f"{bad}:10: ")
    assert bad.read_text(encoding="utf-8") == before
    # A multi-line expression error is still reported on one line.
    bad.write_text(text.replace("// @warpforge size N = 1 << 25", "// @warpforge size N = 1 <<"), encoding="utf-8")
    code, _, err = run(capsys, "spec", str(bad), "--json")
    assert code == 2 and one_line_error(err).startswith(f"{bad}:6: size `N`: the expression ends")


def test_file_without_kernels(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    host = tmp_path / "host.cu"
    host.write_text("int main() { return 0; }\n")
    code, _, err = run(capsys, "spec", str(host))
    assert code == 2 and one_line_error(err) == f"{host}: no __global__ kernels found"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["spec"])
    assert info.value.code == 2
    # argparse's errors are one line like every other (its usage block is one --help away)
    assert one_line_error(capsys.readouterr().err) == ("spec: the following arguments are required: FILE (see "
                                                       "`warpforge spec --help`)")
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "required: COMMAND" in one_line_error(capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        main(["optimize", "k.cu", "--strategy", "annealing"])
    assert info.value.code == 2
    assert one_line_error(capsys.readouterr().err).startswith("optimize: argument --strategy: invalid choice")


# ------------------------------------------------------------------------------------ entry points


def test_python_m_warpforge(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["warpforge", "kernels", str(KERNELS_DIR / "gelu.cu")])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("warpforge", run_name="__main__")
    assert info.value.code == 0
    assert "gelu_forward(const float* inp, float* out, int n)" in capsys.readouterr().out


def test_console_script_runs_for_real() -> None:
    script = Path(sys.executable).parent / "warpforge"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}: install the package (pip install -e .)")
    r = subprocess.run([str(script), "spec", "kernels/transpose.cu", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    assert spec["kernel"] == "transpose_naive" and spec["resolved"]["grid"] == [128, 512, 1]
    assert r.stderr == ""


def test_hints_show_an_annotation_error_at_its_line_and_not_for_an_inferred_spec(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A wrong `@warpforge` line is a WF003 warning at that line (it was swallowed, and the compile then went on
    without the tunable's define); a kernel with no annotation and no launch site gets no WF003."""
    body = "__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"
    bad = tmp_path / "bad.cu"
    bad.write_text("// @warpforge size N = 1024\n// @warpforge arg n = N\n// @warpforge tune BLOCK = 256 `x`, 128\n"
                   + body)
    code, out, _ = run(capsys, "hints", str(bad), "--no-compile", "--json")
    assert code == 0
    found = [f for f in json.loads(out)[0]["findings"] if f["code"] == "WF003"]
    assert found[0]["range"]["start"]["line"] == 2 and "tunable `BLOCK`" in found[0]["message"], found
    # and, in the same pass, what the block leaves out (no launch to infer it from), each with the line to add
    rest = {f["message"].split(":")[0]: f["evidence"]["spec_fix"]["text"] for f in found[1:]}
    assert rest == {"no length for `x`": "// @warpforge arg x: in float[N]",
                    "no length for `y`": "// @warpforge arg y: out float[N]",
                    "no launch configuration for `k`": "// @warpforge launch grid=cdiv(N, 256), block=256  "
                                                       "// guessed: one thread per element"}
    assert all(f["range"]["start"]["line"] == 3 for f in found[1:])
    plain = tmp_path / "plain.cu"
    plain.write_text(body)
    code, out, _ = run(capsys, "hints", str(plain), "--no-compile", "--json")
    assert code == 0 and not [f for f in json.loads(out)[0]["findings"] if f["code"] == "WF003"]
