"""Aliases chosen under ``#if`` (llm.c: ``floatX`` is ``float``, ``half`` or ``__nv_bfloat16`` by a define).

Read branch-blind, the last ``typedef`` of a chain won, so a kernel file that writes ``#define ENABLE_BF16`` above
``#include "common.h"`` had its ``floatX`` buffers specced as 4-byte floats. ``cuda.conditionals`` decides the
branches from the defines known without running the preprocessor; these tests pin what it decides and that a
condition it cannot know keeps the old reading.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import NVCC, needs_nvcc
from warpforge.cuda import SourceText, conditionals, parse
from warpforge.cuda.extract import standalone
from warpforge.cuda.types import file_aliases, header_defines
from warpforge.spec import load_spec

# the two orders llm.c writes the chain in: the default last (llmc/) and first (dev/cuda/)
DEFAULT_LAST = """#pragma once
#if defined(ENABLE_FP32)
typedef float floatX;
#elif defined(ENABLE_FP16)
typedef half floatX;
#else
typedef __nv_bfloat16 floatX;
#endif
"""
DEFAULT_FP32 = """#ifndef COMMON_H
#define COMMON_H
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#elif defined(ENABLE_FP16)
typedef half floatX;
#else
typedef float floatX;
#endif
#define BLOCK 256
#endif
"""
KERNEL = """{defines}#include "common.h"
__global__ void copy(floatX* out, const floatX* inp, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp[i];
}}
"""


def aliases(tmp: Path, header: str, defines: str = "", build: dict[str, str] | None = None) -> str:
    (tmp / "common.h").write_text(header)
    f = tmp / "k.cu"
    text = KERNEL.format(defines=defines)
    f.write_text(text)
    got = file_aliases(text, parse(text), f, defines=build)
    return got["floatX"][0]


def test_the_branch_that_holds_names_the_type(tmp_path: Path) -> None:
    assert aliases(tmp_path, DEFAULT_LAST) == "__nv_bfloat16"  # no define: the #else
    assert aliases(tmp_path, DEFAULT_LAST, build={"ENABLE_FP32": ""}) == "float"  # the build's -DENABLE_FP32
    assert aliases(tmp_path, DEFAULT_LAST, build={"ENABLE_FP16": "1"}) == "half"


def test_a_define_above_the_include_is_seen_by_the_header(tmp_path: Path) -> None:
    # dev/cuda's spelling: the kernel file defines ENABLE_BF16, the header's default is float
    assert aliases(tmp_path, DEFAULT_FP32, "#define ENABLE_BF16\n") == "__nv_bfloat16"
    assert aliases(tmp_path, DEFAULT_FP32) == "float"
    # a define *below* the include comes too late for the header
    (tmp_path / "common.h").write_text(DEFAULT_FP32)
    text = '#include "common.h"\n#define ENABLE_BF16\n' + KERNEL.format(defines="").split("\n", 1)[1]
    f = tmp_path / "late.cu"
    f.write_text(text)
    assert file_aliases(text, parse(text), f, defines={})["floatX"][0] == "float"


def test_the_spec_gives_the_buffers_the_element_size_the_compiler_sees(tmp_path: Path) -> None:
    (tmp_path / "common.h").write_text(DEFAULT_FP32)
    f = tmp_path / "k.cu"
    f.write_text("#define ENABLE_BF16\n" + KERNEL.format(defines="") + """void run(floatX* o, const floatX* i, int n) {
    copy<<<(n + 255) / 256, 256>>>(o, i, n);
}
int main() {
    int n = 1 << 20;
    floatX *o, *i;
    cudaMalloc(&o, n * sizeof(floatX));
    cudaMalloc(&i, n * sizeof(floatX));
    run(o, i, n);
}
""")
    spec = load_spec(f, "copy")
    assert {a.name: a.dtype for a in spec.args if a.name in ("out", "inp")} == {"out": "bfloat16", "inp": "bfloat16"}


def test_an_include_in_a_branch_that_does_not_hold_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "fp16.h").write_text("typedef half floatX;\n#define TILE 8\n")
    (tmp_path / "fp32.h").write_text("typedef float floatX;\n#define TILE 32\n")
    text = '#ifdef USE_HALF\n#include "fp16.h"\n#else\n#include "fp32.h"\n#endif\n' + \
        KERNEL.format(defines="").split("\n", 1)[1]
    f = tmp_path / "k.cu"
    f.write_text(text)
    model = parse(text)
    assert file_aliases(text, model, f, defines={})["floatX"][0] == "float"
    assert file_aliases(text, model, f, defines={"USE_HALF": ""})["floatX"][0] == "half"
    assert header_defines(f, model)["TILE"] == "32"


def test_a_condition_that_cannot_be_known_keeps_every_branch(tmp_path: Path) -> None:
    # __CUDA_BF16_TYPES_EXIST__ comes from a toolkit header this reader never opens: the old branch-blind
    # reading (the last typedef of the chain) stays
    header = "#if __CUDA_BF16_TYPES_EXIST__\ntypedef __nv_bfloat16 floatX;\n#else\ntypedef float floatX;\n#endif\n"
    assert aliases(tmp_path, header) == "float"
    assert aliases(tmp_path, header, build={"__CUDA_BF16_TYPES_EXIST__": "1"}) == "__nv_bfloat16"


def test_expressions_and_nvccs_own_macros() -> None:
    ev = conditionals.evaluate
    assert ev("defined(ENABLE_BF16) && (__CUDACC_VER_MAJOR__ < 12)", {"ENABLE_BF16": ""}) is False  # toolkit 13
    assert ev("__CUDA_ARCH__ >= 800", {}) is True  # the device pass for sm_90
    assert ev("!defined X || Y >= 3", {"X": "", "Y": "(1 + 2)"}) is True
    assert ev("VERSION > 2", {}) is False  # an undefined project name is 0, as the preprocessor says
    assert ev("_MSC_VER", {}) is None  # a reserved name no header here defines: unknown
    assert ev("FOO(1)", {}) is None  # a function-like macro is not expanded here
    assert ev("defined X", {"X": None}) is False  # #undef
    # continued lines and comments in a directive
    marks = conditionals.marks(b"#if defined(A) && \\\n    defined(B) /* both */\nint x;\n#endif\n", {"A": "", "B": ""})
    assert marks[0] == (0, True)


@needs_nvcc
def test_the_extracted_unit_keeps_the_define_its_header_tests(tmp_path: Path) -> None:
    # the unit a candidate is built in must compile floatX as the file does (and as the spec reads it): the
    # kernel only builds where floatX is 2 bytes
    assert NVCC is not None
    (tmp_path / "common.h").write_text("#include <cuda_bf16.h>\n" + DEFAULT_FP32)
    text = ("#include <cuda_runtime.h>\n#define ENABLE_BF16\n" + KERNEL.format(defines="")).replace(
        "if (i < n) out[i] = inp[i];", "static_assert(sizeof(floatX) == 2, \"bf16\"); if (i < n) out[i] = inp[i];")
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("copy", "k.cu")
    unit = standalone(src, model, k, filename=str(tmp_path / "k.cu"))
    assert unit.index("#define ENABLE_BF16") < unit.index('#include "common.h"')
    (tmp_path / "unit.cu").write_text(unit)
    r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-I", str(tmp_path), "-o", str(tmp_path / "u.cubin"),
                        str(tmp_path / "unit.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_macro_naming_the_type_in_a_header_branch(tmp_path: Path) -> None:
    # PolyBench's headers: `# ifndef DATA_TYPE / #  define DATA_TYPE float / # endif` (a macro, not a typedef)
    (tmp_path / "gemm.cuh").write_text("#ifndef GEMM_CUH\n# define GEMM_CUH\n# ifndef DATA_TYPE\n"
                                       "#  define DATA_TYPE float\n# endif\n#endif\n")
    text = '#include "gemm.cuh"\n__global__ void k(DATA_TYPE* a, DATA_TYPE alpha) { a[threadIdx.x] *= alpha; }\n'
    f = tmp_path / "gemm.cu"
    f.write_text(text)
    assert file_aliases(text, parse(text), f, defines={})["DATA_TYPE"] == ("float", 0)
