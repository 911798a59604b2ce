"""Device helpers declared with a qualifier macro (issue 29, "Why" item 7): ``#define DEV __forceinline__
__device__`` then ``template <typename T> DEV T shfl_down(...)``. nvcc compiles them; the extracted unit must
carry them (and the macro), so ``hints`` reports no false "identifier is undefined" / "not a template"."""

from __future__ import annotations

from pathlib import Path

import pytest

from warpforge.compiler.toolchain import ToolMissing, toolchain
from warpforge.cuda import SourceText, parse
from warpforge.cuda.extract import standalone
from warpforge.cuda.model import DeclKind
from warpforge.profile.hints import analyze_source

SOURCE = """#include <cuda_runtime.h>
#define DEV __forceinline__ __device__
#define HD __host__ __device__ // both sides
#define WARP 32

template <typename T> DEV T shfl_down(T v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }

template <typename T>
DEV T warp_sum(T v) {
    for (int o = WARP / 2; o > 0; o /= 2) v += shfl_down(v, o);
    return v;
}

DEV float sq(float x) { return x * x; }
HD inline float half(float x) { return 0.5f * x; }
DEV float later(float x);

__global__ void reduce(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? later(sq(x[i])) : 0.f;
    v = warp_sum(half(v));
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

DEV float later(float x) { return x + 1.0f; }

float host_only(float x) { return x; }
"""


def test_macro_qualified_helpers_are_device_functions_with_their_macro() -> None:
    model = parse(SOURCE)
    assert not model.problems
    kinds = {n: d for d in model.declarations for n in d.names}
    for name in ("shfl_down", "warp_sum", "sq", "half"):
        assert kinds[name].kind is DeclKind.DEVICE_FUNCTION, name
    assert "DEV" in kinds["sq"].uses and "HD" in kinds["half"].uses
    assert kinds["host_only"].kind is DeclKind.HOST_FUNCTION
    src = SourceText(SOURCE)
    # the declaration's text starts at its macro: the unit must not lose the qualifier
    assert src.slice(kinds["sq"].span).startswith("DEV float sq")


def test_the_unit_carries_the_helpers_and_the_macros() -> None:
    src = SourceText(SOURCE)
    model = parse(src.data)
    tu = standalone(src, model, model.require("reduce"), filename="red.cu")
    for text in ("#define DEV __forceinline__ __device__", "#define HD", "DEV T shfl_down", "DEV T warp_sum",
                 "DEV float sq", "HD inline float half", "DEV float later(float x);"):
        assert text in tu, text
    assert "host_only" not in tu


def _nvcc() -> bool:
    try:
        toolchain()
    except ToolMissing:
        return False
    return True


@pytest.mark.skipif(not _nvcc(), reason="needs nvcc")
def test_hints_report_no_false_compile_errors(tmp_path: Path) -> None:
    f = tmp_path / "red.cu"
    f.write_text(SOURCE, encoding="utf-8")
    rep = analyze_source(str(f), f.read_bytes(), arch="sm_90")
    assert not [x for x in rep.findings if x.code in ("WF000", "WF001")], [x.message for x in rep.findings]
    assert rep.kernels == ["reduce"]


@pytest.mark.skipif(not _nvcc(), reason="needs nvcc")
def test_a_macro_from_a_project_header_is_known_too(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "common.cuh").write_text(
        "#pragma once\n#define DEV __forceinline__ __device__\n", encoding="utf-8")
    (tmp_path / "warpforge.toml").write_text('[build]\ninclude = ["include"]\n', encoding="utf-8")
    f = tmp_path / "k.cu"
    f.write_text('#include "common.cuh"\n\ntemplate <typename T> DEV T twice(T v) { return v + v; }\n\n'
                 "__global__ void k(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\n", encoding="utf-8")
    from warpforge.profile.hints import parse_file

    model = parse_file(str(f), f.read_bytes())
    [twice] = [d for d in model.declarations if "twice" in d.names]
    assert twice.kind is DeclKind.DEVICE_FUNCTION and not model.problems
    rep = analyze_source(str(f), f.read_bytes(), arch="sm_90")
    assert not [x for x in rep.findings if x.code in ("WF000", "WF001")], [x.message for x in rep.findings]
    assert not rep.notes, rep.notes
