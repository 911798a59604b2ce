"""Compiler messages in every format nvcc's tools print, anchored where the user can act (issue 29, item 1).

Each log comes from the real nvcc on this machine (the tests compile small files), never a typed-in sample:
a format nvcc changes must fail here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from warpforge.compiler import messages
from warpforge.compiler.build import compile_cubin
from warpforge.compiler.toolchain import ToolMissing, toolchain
from warpforge.cuda import SourceText, parse
from warpforge.cuda.extract import standalone
from warpforge.profile.hints import analyze_source


def _nvcc() -> str | None:
    try:
        return str(toolchain().nvcc)
    except ToolMissing:
        return None


NVCC = _nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc")


def nvcc_log(tmp_path: Path, name: str, text: str, *extra: str) -> str:
    """What nvcc prints compiling ``text`` as ``name`` (device code only, like every WarpForge build)."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    assert NVCC is not None
    proc = subprocess.run([NVCC, "-cubin", "-arch=sm_90", *extra, name, "-o", "out.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    return proc.stdout + proc.stderr


def project(tmp_path: Path, headers: dict[str, str], kernel: str, toml: bool = True) -> Path:
    """A project: headers in include/, the kernel in src/ops.cu, a warpforge.toml naming include/ (or none)."""
    for name, body in headers.items():
        p = tmp_path / "include" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    (tmp_path / "src").mkdir(exist_ok=True)
    if toml:
        (tmp_path / "warpforge.toml").write_text('[build]\ninclude = ["include"]\n', encoding="utf-8")
    f = tmp_path / "src" / "ops.cu"
    f.write_text(kernel, encoding="utf-8")
    return f


KERNEL = """#include <cuda_runtime.h>
#include "util.cuh"

__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
"""


def unit_messages(f: Path) -> list[messages.CompilerMessage]:
    src = SourceText(f.read_bytes())
    model = parse(src.data)
    tu = standalone(src, model, model.kernels[0], filename=str(f))
    return compile_cubin(tu, arch="sm_90", filename=str(f), use_cache=False).messages


# ------------------------------------------------------------------------------------------- each format


@needs_nvcc
def test_preprocessor_missing_header_is_read_with_line_column_and_header(tmp_path: Path) -> None:
    log = nvcc_log(tmp_path, "a.cu", '#include <cuda_runtime.h>\n#include "real.h"\n__global__ void k() {}\n')
    assert "compilation terminated." in log  # what the old parser showed as the message
    [m] = messages.parse(log, "a.cu")
    assert (m.file, m.line, m.column, m.severity) == ("a.cu", 2, 10, "error")
    assert m.text == "real.h: No such file or directory" and m.missing_header == "real.h"


@needs_nvcc
def test_preprocessor_error_and_warning_directives(tmp_path: Path) -> None:
    ms = messages.parse(nvcc_log(tmp_path, "c.cu", "#warning careful\n#error stop here\n__global__ void k(){}\n"),
                        "c.cu")
    assert [(m.line, m.severity, m.text) for m in ms] == [(1, "warning", "#warning careful [-Wcpp]"),
                                                         (2, "error", "#error stop here")]


@needs_nvcc
def test_front_end_messages_keep_their_code(tmp_path: Path) -> None:
    ms = messages.parse(nvcc_log(tmp_path, "e.cu", "__global__ void k(float* y) {\n int x; y[0] = nope;\n}\n"),
                        "e.cu")
    err = next(m for m in ms if m.severity == "error")
    assert (err.line, err.text) == (2, 'identifier "nope" is undefined')
    warn = next(m for m in ms if m.severity == "warning")
    assert warn.code == "177-D" and warn.line == 2


@needs_nvcc
def test_ptxas_messages_name_their_function(tmp_path: Path) -> None:
    big = "__global__ void k(float* y) {\n __shared__ float s[60000];\n s[threadIdx.x] = 1; y[0] = s[3];\n}\n"
    [m] = messages.parse(nvcc_log(tmp_path, "b.cu", big), "b.cu")
    assert (m.code, m.severity, m.function, m.line) == ("ptxas", "error", "_Z1kPf", 0)
    assert "too much shared data" in m.text
    ext = "__device__ void ext();\n__global__ void k() { ext(); }\n"
    [m] = messages.parse(nvcc_log(tmp_path, "d.cu", ext), "d.cu")
    assert (m.code, m.severity, m.function) == ("ptxas", "error", "_Z3extv")


@needs_nvcc
def test_nvlink_and_driver_messages(tmp_path: Path) -> None:
    (tmp_path / "d.cu").write_text("__device__ void ext();\n__global__ void k() { ext(); }\n", encoding="utf-8")
    assert NVCC is not None
    link = subprocess.run([NVCC, "-arch=sm_90", "-rdc=true", "d.cu", "-o", "d.out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    [m] = [m for m in messages.parse(link.stdout + link.stderr, "d.cu") if m.code == "nvlink"]
    assert m.severity == "error" and m.function == "_Z3extv" and "Undefined reference" in m.text
    [m] = messages.parse(nvcc_log(tmp_path, "f.cu", "__global__ void k() {}\n", "-foo"), "f.cu")
    assert (m.code, m.severity, m.text) == ("nvcc", "error", "Unknown option '-foo'")


def test_closing_lines_are_never_the_headline() -> None:
    assert messages.headline("x\ncompilation terminated.\n") == "x"
    assert messages.headline("compilation terminated.\n") == "nvcc failed without a message"
    assert messages.headline('1 error detected in the compilation of "a.cu".\nboom\n') == "boom"
    assert messages.headline("ptxas info    : 0 bytes gmem\nSegmentation fault\n") == "Segmentation fault"


# ------------------------------------------------------------------------------------------- anchoring


@needs_nvcc
def test_missing_header_is_reported_on_its_include_line(tmp_path: Path) -> None:
    f = project(tmp_path, {}, KERNEL, toml=False)
    [m] = unit_messages(f)
    assert (m.file, m.line, m.missing_header, m.origin) == (str(f), 2, "util.cuh", "")


@needs_nvcc
def test_missing_header_inside_a_header_is_on_the_users_include_line(tmp_path: Path) -> None:
    f = project(tmp_path, {"util.cuh": '#pragma once\n#include "deep.cuh"\n',
                           "deep.cuh": '#pragma once\n#include "nothere.h"\n'}, KERNEL)
    [m] = unit_messages(f)
    assert (m.file, m.line, m.missing_header, m.origin) == (str(f), 2, "nothere.h", "deep.cuh:2")


@needs_nvcc
def test_front_end_error_in_a_header_is_on_the_including_line(tmp_path: Path) -> None:
    f = project(tmp_path, {"util.cuh": "#pragma once\n__device__ float twice(float x) { return x * nope; }\n"},
                KERNEL)
    [m] = unit_messages(f)
    assert (m.file, m.line, m.origin) == (str(f), 2, "util.cuh:2")
    assert m.text == 'identifier "nope" is undefined'


@needs_nvcc
def test_template_error_in_a_header_is_on_the_instantiating_line(tmp_path: Path) -> None:
    f = project(tmp_path, {"util.cuh": "#pragma once\ntemplate <typename T> __device__ T twice(T x) "
                                       "{ return x.foo; }\n"}, KERNEL)
    [m] = unit_messages(f)
    assert (m.file, m.line, m.origin) == (str(f), 6, "util.cuh:2")


@needs_nvcc
def test_hints_show_the_header_message_not_compilation_terminated(tmp_path: Path) -> None:
    f = project(tmp_path, {}, KERNEL, toml=False)
    rep = analyze_source(str(f), f.read_bytes(), arch="sm_90")
    [err] = [x for x in rep.findings if x.code == "WF000"]
    assert err.line == 2 and err.message == "util.cuh: No such file or directory"
    assert err.evidence["missing_header"] == "util.cuh"


@needs_nvcc
def test_a_ptxas_error_is_on_the_kernel_it_names_and_the_others_keep_their_hints(tmp_path: Path) -> None:
    f = tmp_path / "two.cu"
    f.write_text("""__global__ void big(float* y) {
    __shared__ float s[60000];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x + 1) % 60000];
}

__global__ void fine(float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f;
}
""", encoding="utf-8")
    rep = analyze_source(str(f), f.read_bytes(), arch="sm_90")
    [err] = [x for x in rep.findings if x.code == "WF000"]
    assert err.kernel == "big" and err.line == 1 and err.evidence["compiler_code"] == "ptxas"
    assert err.message.startswith("Entry function 'big' uses too much shared data")
    assert any(x.kernel == "fine" and x.source == "sass" for x in rep.findings)  # the other kernel compiled
