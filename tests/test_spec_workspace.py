"""Specs of kernels launched from another file, guessed lines marked, and every problem of a block at once
(issue 29 items 5 and 6), through the CLI and the analysis the editor shows.

The project (tests/projects/xfile) is copied to a temporary folder: `ops.cu` defines `axpy` (with a typedef
from `include/`) and `scale_rows`; only `main.cu` launches `axpy`, with `n = 1 << 22`, `a = 0.5f` and
`<<<cdiv(n, 256), 256>>>`. Nothing is mocked: the real parser, inference and CLI run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from warpforge.cli import main
from warpforge.cuda.parser import parse
from warpforge.cuda.text import SourceText
from warpforge.profile.hints import analyze_source
from warpforge.spec.problems import annotation_problems, near_misses
from warpforge.spec.resolve import load_spec

PROJECT = Path(__file__).resolve().parent / "projects" / "xfile"


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "xfile"
    shutil.copytree(PROJECT, root)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_spec_of_a_kernel_launched_from_another_file(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "spec", str(proj / "src" / "ops.cu"), "-k", "axpy", "--json")
    assert code == 0
    spec = json.loads(out)
    assert {s["name"]: s["expr"] for s in spec["sizes"]} == {"n": "1 << 22", "a": "0.5f"}
    assert spec["resolved"]["sizes"]["n"] == 1 << 22
    args = {a["name"]: a for a in spec["args"]}
    assert (args["y"]["role"], args["y"]["dtype"], args["y"]["count"]) == ("inout", "float32", "n")
    assert args["a"]["value"] == "a" and spec["resolved"]["sizes"]["a"] == 0.5
    assert spec["launch"]["grid"] == ["cdiv(n, 256)"] and spec["launch"]["block"] == ["256"]
    assert spec["notes"] == ["inferred from the launch at main.cu:12"]
    # the other file's lines are not this file's: no line is claimed for them
    assert all(s["line"] is None for s in spec["sizes"]) and spec["launch"]["line"] is None


def test_write_marks_nothing_guessed_when_the_other_file_says_everything(
        proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = proj / "src" / "ops.cu"
    code, _, err = run(capsys, "spec", str(ops), "-k", "axpy", "--write")
    assert code == 0
    assert "`axpy`: inferred from the launch at main.cu:12" in err
    text = ops.read_text()
    assert "// @warpforge size n = 1 << 22\n" in text
    assert "// @warpforge launch grid=cdiv(n, 256), block=256\n" in text
    assert "guessed" not in text
    # `real a`: `real` comes from a header only main.cu's include finds, so the block says the type itself
    assert "// @warpforge arg a: float = a\n" in text
    # and the editor's analysis of the file alone finds nothing wrong with it
    report = analyze_source(str(ops), text, use_compiler=False)
    assert [f.message for f in report.findings if f.code == "WF003"] == []
    # the written block is now the spec, read from the kernel's own file alone
    spec = load_spec(ops, "axpy")
    assert spec.size_values()["n"] == 1 << 22 and {a.source for a in spec.args} == {"annotation"}


def test_write_marks_each_guess_on_its_line_and_says_so(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ops = proj / "src" / "ops.cu"
    code, out, err = run(capsys, "spec", str(ops), "-k", "scale_rows", "--write", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["guessed"] is True and got["launch_file"] is None
    assert set(got["guesses"]) == {"size rows", "size cols", "arg rows", "arg cols", "arg out", "arg m", "arg w",
                                   "launch"}
    assert "guessed, check them: " in err and "`arg w`" in err
    lines = {ln.split("//")[1].strip(): ln for ln in ops.read_text().splitlines() if "@warpforge" in ln}
    # a row-length vector gets the row length (its subscript is bounded by `c < cols`), not the first int
    w = next(ln for k, ln in lines.items() if k.startswith("@warpforge arg w:"))
    assert "float[cols]" in w and "// guessed: length from the kernel's guards" in w
    assert "float[rows * cols]" in next(ln for k, ln in lines.items() if k.startswith("@warpforge arg m:"))
    size = next(ln for k, ln in lines.items() if k.startswith("@warpforge size rows"))
    assert "// guessed: no launch of `scale_rows` in this file or its project" in size
    # the remarks are no part of the directives: the block validates as written
    spec = load_spec(ops, "scale_rows")
    assert spec.arg("w") is not None and spec.arg("w").count == "cols"  # type: ignore[union-attr]


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


def test_every_problem_of_a_block_at_once_each_at_its_line() -> None:
    src = SourceText(BAD)
    model = parse(src.data)
    k = model.require("scale_rows", "bad.cu")
    spec, problems = annotation_problems(src, model, k, "bad.cu")
    assert spec is None
    by_line = {p.line: p for p in problems}
    assert sorted(by_line) == [3, 4, 5, 7, 9]
    assert "unknown element type `flaot` for `out`" in by_line[3].message
    assert by_line[3].fix is not None and by_line[3].fix.text == "// @warpforge arg out: out float[ROWS * C]"
    assert "unknown value distribution `gaussian(0, 1)`" in by_line[4].message
    # an undefined size used in a count is named, with a fix that adds it
    assert by_line[5].message.startswith("`M` in the length of `w` is not a size")
    assert by_line[5].fix is not None and by_line[5].fix.kind == "insert"
    assert by_line[5].fix.text.startswith("// @warpforge size M = ")
    assert "did you mean `launch`" in by_line[7].message
    assert by_line[7].fix is not None and by_line[7].fix.text == "// @warpforge launch grid=ROWS, block=256"
    assert "`rows`" in by_line[9].message  # no line gives the scalar `rows`


def test_near_misses_are_answered_with_did_you_mean() -> None:
    text = ("// warpforge: size N = 4096\n// @warpfroge arg n = N\n/* @warpforge launch grid=N, block=1 */\n"
            "//@WarpForge tol rtol=1e-3\n// warpforge: compile with -use_fast_math\n"
            "// warpforge: launch with grid 4 and block 32\n// plain prose about warpforge\n"
            "__global__ void k(float* y, int n) { y[0] = n; }\n")
    src = SourceText(text)
    k = parse(src.data).require("k", "k.cu")
    got = {p.line: p.fix.text for p in near_misses(src, k) if p.fix is not None}
    assert got == {1: "// @warpforge size N = 4096", 2: "// @warpforge arg n = N",
                   3: "// @warpforge launch grid=N, block=1", 4: "// @warpforge tol rtol=1e-3"}


def test_one_dimensional_launch_of_a_kernel_reading_blockidx_y_is_warned_at_the_launch() -> None:
    text = """__global__ void k2(float* y, int rows, int cols) {
    int r = blockIdx.y, c = threadIdx.x;
    if (r < rows && c < cols) y[r * cols + c] = 1.0f;
}
int main() {
    int rows = 64, cols = 128;
    float* d; cudaMalloc(&d, rows * cols * sizeof(float));
    k2<<<rows, 128>>>(d, rows, cols);
}
"""
    report = analyze_source("k2.cu", text, use_compiler=False)
    [w] = [f for f in report.findings if f.code == "WF003"]
    assert w.range.start.line == 7  # the launch line (0-based)
    assert "reads blockIdx.y but its launch has a 1-D grid (grid=rows)" in w.message


def test_a_fixed_block_leaves_no_problem() -> None:
    fixed = (BAD.replace("flaot", "float").replace("gaussian", "normal").replace("float[M]", "float[C]")
             .replace("lanch grid=ROWS", "launch grid=(1, ROWS)").replace("// warpforge: tol", "// @warpforge tol")
             .replace("// @warpforge arg cols = C", "// @warpforge arg cols = C\n// @warpforge arg rows = ROWS"))
    report = analyze_source("bad.cu", fixed, use_compiler=False)
    assert [f.message for f in report.findings if f.code == "WF003"] == []


def test_sizes_from_a_header_macro(tmp_path: Path) -> None:
    """A project that keeps its sizes in a header (the wide yardstick's most common reason for no spec)."""
    (tmp_path / "config.h").write_text("#pragma once\n#define N (1 << 16)  // elements\n#define BLOCK 128\n")
    cu = tmp_path / "k.cu"
    cu.write_text('#include "config.h"\n__global__ void k(float* y, int n) {\n'
                  "    int i = blockIdx.x * BLOCK + threadIdx.x;\n    if (i < n) y[i] = 2.0f;\n}\n"
                  "int main() {\n    float* d; cudaMalloc(&d, N * sizeof(float));\n"
                  "    k<<<N / BLOCK, BLOCK>>>(d, N);\n}\n")
    spec = load_spec(cu, "k")
    sizes = {s.name: s for s in spec.sizes}
    assert sizes["N"].expr == "(1 << 16)" and not sizes["N"].fixed
    assert sizes["BLOCK"].expr == "128" and sizes["BLOCK"].fixed  # the kernel is compiled with it
    assert spec.arg("y").count == "N"  # type: ignore[union-attr]
    assert spec.resolve().grid[0] == 512


def test_a_grid_sized_with_ceil_and_casts_from_header_sizes(tmp_path: Path) -> None:
    """The PolyBench way: sizes in a header, `dim3 grid((size_t)ceil(((float)NY) / ((float)block.x)), ...)`."""
    (tmp_path / "k.cuh").write_text("#define NX 1000\n#define NY 600\n#define DIM_X 32\n#define DIM_Y 8\n")
    cu = tmp_path / "k.cu"
    cu.write_text('#include "k.cuh"\n__global__ void k(float* a, int nx, int ny) {\n'
                  "    int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;\n"
                  "    if (i < nx && j < ny) a[i * ny + j] *= 2.0f;\n}\n"
                  "int main() {\n    float* d; cudaMalloc((void**)&d, NX * NY * sizeof(float));\n"
                  "    dim3 block(DIM_X, DIM_Y);\n"
                  "    dim3 grid((size_t)ceil(((float)NY) / ((float)block.x)),\n"
                  "              (size_t)ceil(((float)NX) / ((float)block.y)));\n"
                  "    k<<<grid, block>>>(d, NX, NY);\n}\n")
    r = load_spec(cu, "k").resolve()
    assert r.grid == (19, 125, 1) and r.block == (32, 8, 1)
    assert r.sizes["NX"] == 1000 and [a.count for a in r.args if a.name == "a"] == [600_000]


def test_an_enum_declared_in_a_header_is_passed_as_its_integer_type(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Seen in the UI test's screenshot: an `enum Op` declared in `include/real.h` (reached through the build's
    -I folder) was written `arg op: float = 1.0 // guessed`, the float the issue forbids; its enumerator at the
    launch (`OP_SHIFT`) was not known either."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "real.h").write_text(
        "#pragma once\ntypedef float real;\nenum Op { OP_SCALE = 0, OP_SHIFT = 1 };\n")
    (tmp_path / "warpforge.toml").write_text('[build]\ninclude = ["include"]\n')
    (tmp_path / "k.cu").write_text(
        '#include "real.h"\n'
        "__global__ void apply(real* out, const real* in, int n, Op op) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) out[i] = op == OP_SCALE ? 2.0f * in[i] : in[i] + 1.0f;\n}\n"
        "int main() {\n  int n = 1 << 20;\n  float *out, *in;\n  cudaMalloc(&out, n * sizeof(float));\n"
        "  cudaMalloc(&in, n * sizeof(float));\n  apply<<<(n + 255) / 256, 256>>>(out, in, n, OP_SHIFT);\n}\n")
    code, out, err = run(capsys, "spec", str(tmp_path / "k.cu"), "--json")
    assert code == 0, err
    args = {a["name"]: a for a in json.loads(out)["args"]}
    assert args["op"]["dtype"] == "int32", args["op"]
    assert str(args["op"].get("value")) == "1", args["op"]
