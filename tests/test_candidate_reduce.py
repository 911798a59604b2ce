"""Candidates are reduced to device code, whoever wrote them, and Accept never writes host code the user did
not have (issue 14: host code with side effects survived extraction and was written into the user's file;
an absolute include's content came back in compiler messages; a type's ``;`` was lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import KERNELS_DIR, needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import FileModel, Kernel, SourceText, parse
from warpforge.cuda.candidate import Candidate, candidate_from_variant
from warpforge.cuda.extract import standalone
from warpforge.cuda.reduce import include_allowed, reduce_device
from warpforge.policy.llm.code import extract_kernel
from warpforge.policy.llm.context import LocalCompiler
from warpforge.search.optimize import HostCodeRefused, apply_candidate

GELU = (KERNELS_DIR / "gelu.cu").read_text(encoding="utf-8")
KERNEL = """__global__ void gelu_forward(const float* inp, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
    }
}
"""
#: the file a user has: the kernel, and host code that launches it
USER_FILE = GELU + """
#include <cstdio>
static float helper(float v) { return v * 2.0f; }
int main() {
    float *a = nullptr, *b = nullptr;
    gelu_forward<<<1, 256>>>(a, b, 0);
    printf("%f\\n", helper(1.0f));
    return 0;
}
"""


def _model() -> tuple[SourceText, FileModel]:
    src = SourceText(USER_FILE)
    return src, parse(src.data)


def _extract(code: str) -> tuple[str, list[str], list[str]]:
    src = SourceText(USER_FILE)
    model = parse(src.data)
    k = model.kernel("gelu_forward")
    assert k is not None
    out = extract_kernel(code, k, src, model)
    return out.source, out.dropped, out.errors


def _compiles(source: str) -> tuple[bool, str]:
    """Compile a candidate's source exactly as the LLM policy's local check (and the evaluator) does."""
    src = SourceText(USER_FILE)
    model = parse(src.data)
    k = model.kernel("gelu_forward")
    assert k is not None
    chk = LocalCompiler(src, model, k, None).check(Candidate("gelu_forward", source))
    return chk.ok, chk.log


# ----------------------------------------------------------------------------- host code with side effects
SYSTEM_INIT = '#include <cstdlib>\nstatic int boom = system("touch /tmp/warpforge-pwned");\n' + KERNEL


def test_a_host_initializer_calling_system_is_dropped_and_reported() -> None:
    source, dropped, errors = _extract(SYSTEM_INIT)
    assert errors == []
    assert "system" not in source and "boom" not in source and "cstdlib" not in source
    assert any("line 2: host variable boom" in d for d in dropped), dropped
    assert any("#include <cstdlib>" in d for d in dropped), dropped
    # the same from a hand-written variant file (`warpforge verify --candidate`)
    cand = candidate_from_variant(USER_FILE, SYSTEM_INIT, "gelu_forward")
    assert "system" not in cand.source
    assert any("host variable boom" in d for d in cand.dropped)
    # and the non-static form, and one inside `#ifndef __CUDA_ARCH__` (the whole block goes)
    for code in ('int boom = system("id");\n' + KERNEL,
                 '#ifndef __CUDA_ARCH__\nint boom = system("id");\n#endif\n' + KERNEL):
        r = reduce_device(code, kernel="gelu_forward")
        assert "system" not in r.source and r.host_dropped, r


CTOR = """struct Runner {
    Runner() { system("touch /tmp/warpforge-pwned"); }
    __device__ float twice(float v) const { return 2.0f * v; }
};
static Runner run_at_startup;
""" + KERNEL


def test_a_struct_whose_constructor_runs_host_code_is_dropped() -> None:
    source, dropped, _ = _extract(CTOR)
    assert "system" not in source and "Runner" not in source
    assert any("struct Runner" in d and "host code" in d for d in dropped), dropped
    assert any("host variable run_at_startup" in d for d in dropped), dropped
    # static data initialised at startup, a host conversion operator, a host destructor declaration
    for member in ("static inline int x = system(\"id\");", "operator int() const { return system(\"id\"); }",
                   "~S();"):
        r = reduce_device("struct S { float v; " + member + " };\n" + KERNEL)
        assert "struct S" not in r.source and r.host_dropped, member
    # a type of device code only is kept, with its `;` (and `= default` members are fine)
    r = reduce_device("struct S { float v; S() = default; __host__ __device__ S(float x) : v(x) {} "
                      "static constexpr int K = 4; __device__ float get() const { return v; } };\n" + KERNEL)
    assert r.dropped == () and "struct S {" in r.source


def test_a_kernel_using_what_was_dropped_is_an_error_for_the_model() -> None:
    code = "float scale(float v) { return 2.0f * v; }\n" + KERNEL.replace("0.5f * x", "scale(0.25f) * x")
    _, dropped, errors = _extract(code)
    assert any("host function scale" in d for d in dropped)
    assert any("`scale` is used but was dropped" in e for e in errors), errors


@pytest.mark.parametrize("code, reason", [
    ("__host__ __device__ float helper(float v) { return v; }\n", "the file's code uses the name `helper`"),
    ("__host__ __device__ float4 operator+(float4 a, float4 b) { return a; }\n", "operator"),
    ("__host__ __device__ void swap(float& a, float& b) {}\n", "unqualified"),
    ("#define printf(...) system(\"id\")\n", "the file uses this name"),
    ("#define __device__\n", "reserved"),
    ("#pragma redefine_extname puts system\n", "pragmas"),
    ("__attribute__((constructor)) __host__ __device__ void early() {}\n", "constructor"),
    ("__managed__ int counter;\n", "host-visible"),
    ("namespace std { __device__ int x; }\n", "library namespace"),
    ('extern "C" { int puts(const char*); }\n', "C linkage"),
    ('asm(".globl x");\n', "not device code"),
    ("template <> struct std::hash<float> { __host__ __device__ int operator()(float) const { return 0; } };\n",
     "library template"),
])
def test_host_reachable_code_is_dropped_with_its_reason(code: str, reason: str) -> None:
    r = reduce_device(code + KERNEL, kernel="gelu_forward", file_text=USER_FILE)
    assert r.host_dropped and reason in str(r.host_dropped[0]), r.dropped
    assert r.source.strip() == KERNEL.strip()


# ----------------------------------------------------------------------------- includes
@pytest.mark.parametrize("path, ok", [
    ("cuda_fp16.h", True), ("cuda_bf16.h", True), ("cooperative_groups.h", True),
    ("cooperative_groups/reduce.h", True), ("cuda/std/cstdint", True), ("cub/cub.cuh", True), ("mma.h", True),
    ("cuda_pipeline.h", True), ("cstdint", True), ("math_constants.h", True),
    ("cstdlib", False), ("stdlib.h", False), ("/etc/passwd", False), ("../secret.h", False),
    ("cub/../../../etc/passwd", False), ("cuda.h", False), ("unistd.h", False), ("x.h", False),
])
def test_the_include_allow_list(path: str, ok: bool) -> None:
    assert include_allowed(path) is ok
    r = reduce_device(f"#include <{path}>\n" + KERNEL)
    assert (f"#include <{path}>" in r.source) is ok


@needs_nvcc
def test_an_absolute_include_is_dropped_and_its_content_never_reaches_compiler_messages(tmp_path: Path) -> None:
    secret = tmp_path / "secret.h"
    secret.write_text("SECRET_TOKEN_4711 = not C at all;\n", encoding="utf-8")
    code = f"#include <{secret}>\n#include \"{secret}\"\n" + KERNEL
    source, dropped, _ = _extract(code)
    assert str(secret) not in source
    assert sum(str(secret) in d for d in dropped) == 2, dropped
    ok, log = _compiles(source)
    assert ok, log
    # The raw text given straight to the build (a candidate from any source): still never included.
    ok, log = _compiles(code)
    assert ok and "SECRET_TOKEN_4711" not in log, log
    # Control: without the reduction the preprocessor reads the file and nvcc quotes it in its errors.
    src, model = _model()
    k = model.kernel("gelu_forward")
    assert k is not None
    unit = standalone(src, model, k, filename="kernel.cu")
    leaked = compile_cubin(f"#include <{secret}>\n" + unit, arch="sm_90", filename="kernel.cu", use_cache=False)
    assert not leaked.ok and "SECRET_TOKEN_4711" in leaked.log


# ----------------------------------------------------------------------------- types keep their `;`
TYPES = """struct P { float x; float y; };
enum class Mode { Plain, Squared };
union Bits { float f; unsigned u; };
__device__ struct Counter { int n; } counter;
typedef struct { float lo, hi; } Range;
using Real = float;
__device__ float apply(P p, Mode m) { return m == Mode::Squared ? p.x * p.x : p.y; }
""" + KERNEL.replace("0.5f * x", "0.5f * apply(P{x, x}, Mode::Plain) * (Real)Range{0.f, 1.f}.hi * Bits{1.f}.f")


@needs_nvcc
def test_struct_and_enum_class_candidates_compile_with_nvcc() -> None:
    source, dropped, errors = _extract(TYPES)
    assert errors == [] and dropped == []
    for decl in ("struct P { float x; float y; };", "enum class Mode { Plain, Squared };",
                 "union Bits { float f; unsigned u; };", "__device__ struct Counter { int n; } counter;"):
        assert decl in source
    ok, log = _compiles(source)
    assert ok, log
    cand = candidate_from_variant(USER_FILE, TYPES, "gelu_forward")
    assert "enum class Mode { Plain, Squared };" in cand.source and cand.dropped == ()
    ok, log = _compiles(cand.source)
    assert ok, log


# ----------------------------------------------------------------------------- a realistic variant
REALISTIC = """```cuda
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdio>
namespace cg = cooperative_groups;

#define VEC 4
#ifndef UNROLL
#define UNROLL 2
#endif
constexpr float kCube = 0.044715f;
__constant__ float c_half[2] = {0.5f, 1.0f};

namespace detail {
template <typename T>
__device__ __forceinline__ T cube(T v) { return v * v * v; }
__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace detail

__device__ __forceinline__ float gelu1(float x) {
    return c_half[0] * x * (c_half[1] + tanhf(GELU_SCALING_FACTOR * (x + kCube * detail::cube(x))));
}

__global__ void gelu_forward(const float* inp, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int j = 0; j < UNROLL / UNROLL * VEC / VEC; ++j) {
        if (i < n) out[i] = gelu1(inp[i]);
    }
    (void)detail::ceil_div(n, VEC);
}

void launch(const float* a, float* b, int n) { gelu_forward<<<detail::ceil_div(n, 256), 256>>>(a, b, n); }
int main() { printf("hi\\n"); return 0; }
```"""


@needs_nvcc
def test_a_realistic_llm_variant_with_helpers_templates_and_constants_keeps_working() -> None:
    source, dropped, errors = _extract(REALISTIC)
    assert errors == []
    for kept in ("#include <cooperative_groups/reduce.h>", "namespace cg = cooperative_groups;", "#define VEC 4",
                 "#ifndef UNROLL", "constexpr float kCube", "__constant__ float c_half[2]",
                 "__device__ __forceinline__ T cube", "__host__ __device__ constexpr int ceil_div",
                 "__device__ __forceinline__ float gelu1"):
        assert kept in source, kept
    assert "main" not in source and "launch" not in source and "<cstdio>" not in source
    # lines of the code inside the fence; <cstdio> is the file's own include already: left out, not reported
    assert sorted(d.split(":")[0] for d in dropped) == ["line 34", "line 35"], dropped
    assert source.rstrip().endswith("}") and source.index("gelu1") < source.index("__global__")
    ok, log = _compiles(source)
    assert ok, log


def test_reduction_is_idempotent_and_leaves_device_code_unchanged() -> None:
    for path in sorted(KERNELS_DIR.glob("*.cu")):
        text = path.read_text(encoding="utf-8")
        model = parse(text)
        src = SourceText(text)
        for k in model.kernels:
            definition = src.slice(k.span)
            assert reduce_device(definition, kernel=k.name).source == definition
    once = reduce_device(SYSTEM_INIT + "\n" + CTOR.replace(KERNEL, ""))
    assert reduce_device(once.source).source == once.source and reduce_device(once.source).dropped == ()


def test_a_kernel_recovered_from_a_syntax_error_is_kept() -> None:
    code = "int broken( {\n" + KERNEL
    r = reduce_device(code, kernel="gelu_forward")
    assert r.kernel("gelu_forward") is not None and "__global__ void gelu_forward" in r.source
    assert "broken" not in r.source and r.host_dropped


# ----------------------------------------------------------------------------- accept
def _user_kernel() -> Kernel:
    k = parse(USER_FILE).kernel("gelu_forward")
    assert k is not None
    return k


def test_accept_refuses_a_variant_that_adds_host_code() -> None:
    k = _user_kernel()
    bad = Candidate("gelu_forward", 'static int boom = system("id");\n' + KERNEL)
    with pytest.raises(HostCodeRefused, match=r"was not written: .*line 1: host variable boom"):
        apply_candidate(USER_FILE, k, bad)
    # A ValueError: the language server's guard turns it into a one-line error for the editor.
    assert issubclass(HostCodeRefused, ValueError)
    # Host code the file already has is not the candidate's: it is not written a second time.
    repeated = Candidate("gelu_forward", "static float helper(float v) { return v * 2.0f; }\n" + KERNEL)
    new = apply_candidate(USER_FILE, k, repeated)
    assert new.count("static float helper") == 1
    # A clean variant with a new device helper is written as it is.
    good = Candidate("gelu_forward", "__device__ float twice(float v) { return 2.0f * v; }\n" + KERNEL)
    new = apply_candidate(USER_FILE, k, good)
    assert "__device__ float twice" in new and new.count("__global__ void gelu_forward") == 1


@pytest.mark.parametrize("change", [
    {"grid": ('1); system("id"); (1',)},
    {"block": ("256\nint boom = 1;",)},
    {"defines": {"BLOCK": "256\nstatic int boom = system(\"id\");"}},
    {"defines": {"BLOCK": "256 /* */"}},
    {"flags": ("-O3\nint boom;",)},
])
def test_accept_refuses_launch_define_and_flag_text_that_is_not_an_expression(change: dict[str, object]) -> None:
    cand = Candidate("gelu_forward", KERNEL, **change)  # type: ignore[arg-type]
    with pytest.raises(HostCodeRefused, match="was not written"):
        apply_candidate(USER_FILE, _user_kernel(), cand)


def test_the_namespace_around_the_kernel_is_flattened_and_others_are_kept() -> None:
    """The candidate takes the kernel's place, already inside its namespace: re-opening it would nest it."""
    code = """namespace ops {
namespace detail { __device__ float sq(float x) { return x * x; } }
__device__ float h(float x) { return detail::sq(x); }
int host_thing() { return 1; }
__global__ void fill(float* x) { x[0] = h(1.f); }
}
"""
    r = reduce_device(code, kernel="fill")
    assert r.assembled("fill") == ("namespace detail { __device__ float sq(float x) { return x * x; } }\n\n"
                                   "__device__ float h(float x) { return detail::sq(x); }\n\n"
                                   "__global__ void fill(float* x) { x[0] = h(1.f); }\n")
    assert [str(d) for d in r.dropped] == ["line 4: host function host_thing (only __device__ functions are kept)"]
