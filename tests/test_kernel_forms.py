"""Kernel forms real programs use (issue 18, item 5): element types behind ``typedef``/``using`` and
qualifiers anywhere (one signature, however spelled), unnamed parameters (a generated name in the spec,
the user's text untouched), kernels templated on ``__device__`` functions, functors and integral constants
(the extracted unit carries what the template arguments name), and ``extern __shared__`` arrays."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import NVCC, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate, candidate_from_variant
from warpforge.cuda.extract import needed_declarations, standalone
from warpforge.cuda.types import canonical_type, type_aliases
from warpforge.gpu import guards
from warpforge.gpu.surgery import translation_unit
from warpforge.policy.llm.code import extract_kernel
from warpforge.spec import SpecError, build_spec

FORMS = Path(__file__).parent / "fixtures" / "forms"
TEMPLATED = (FORMS / "templated.cu").read_text(encoding="utf-8")

ALIASED = """typedef float floatX;
using index_t = int;
typedef float* fptr;
typedef struct { int a; } Pair;
__global__ void scale(floatX* out, const floatX* __restrict__ in, index_t n)
{
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * in[i];
}
"""


def _kernel(text: str, name: str):  # type: ignore[no-untyped-def]
    model = parse(text)
    k = model.kernel(name)
    assert k is not None
    return SourceText(text), model, k


# ------------------------------------------------------------------------------- canonical types


def test_aliases_resolve_to_the_canonical_type() -> None:
    src, model, _ = _kernel(ALIASED, "scale")
    aliases = type_aliases(src, model)
    assert canonical_type("floatX", aliases) == ("float", 0)
    assert canonical_type("const floatX", aliases) == ("float", 0)
    assert canonical_type("fptr", aliases) == ("float", 1)
    assert canonical_type("index_t", aliases) == ("int", 0)
    assert canonical_type("unsigned", aliases) == ("unsigned int", 0)
    assert canonical_type("std::uint32_t", aliases) == ("uint32_t", 0)
    assert "Pair" not in aliases  # a struct typedef names a type of its own


@pytest.mark.parametrize("params", [
    "float* out, const float* in, int n",                      # the typedefs spelled out
    "float* __restrict__ out, float const* __restrict__ in, index_t n",  # const moved, restrict added
    "fptr out, const floatX* in, int n",                       # a pointer typedef
])
def test_the_signature_guard_compares_canonical_types(params: str) -> None:
    src, model, k = _kernel(ALIASED, "scale")
    variant = (f"__global__ void scale({params})\n{{\n    int i = threadIdx.x;\n"
               "    if (i < n) out[i] = in[i] * 2.0f;\n}\n")
    assert guards.check_candidate(k, src.slice(k.span), variant, type_aliases(src, model)) == []


@pytest.mark.parametrize(("params", "why"), [
    ("double* out, const double* in, int n", "became `double* out`"),
    ("float* out, const float* in, long n", "became `long n`"),
    ("float** out, const float* in, int n", "became `float** out`"),
    ("float* out, const float* in", "the signature changed"),
])
def test_the_signature_guard_still_rejects_a_changed_type(params: str, why: str) -> None:
    src, model, k = _kernel(ALIASED, "scale")
    variant = f"__global__ void scale({params}) {{ }}\n"
    found = guards.check_candidate(k, src.slice(k.span), variant, type_aliases(src, model))
    assert [f.code for f in found] == ["signature"] and why in found[0].message


def test_an_alias_means_what_the_file_says() -> None:
    """`floatX*` is `float*` only where `floatX` is `float`: with `typedef double floatX;` it is not."""
    text = ALIASED.replace("typedef float floatX;", "typedef double floatX;")
    src, model, k = _kernel(text, "scale")
    variant = "__global__ void scale(float* out, const float* in, int n) { }\n"
    found = guards.check_candidate(k, src.slice(k.span), variant, type_aliases(src, model))
    assert [f.code for f in found] == ["signature"]
    # A candidate's own alias counts too: it may name the type its own way
    own = "typedef double real;\n__global__ void scale(real* out, const real* in, int n) { }\n"
    assert guards.check_candidate(k, src.slice(k.span), own, type_aliases(src, model)) == []


def test_the_llm_parameter_check_reads_types_through_aliases() -> None:
    src, model, k = _kernel(ALIASED, "scale")
    same = ("__global__ void scale(float* out, float const* in, int n) "
            "{ int i = threadIdx.x; if (i < n) out[i] = in[i]; }")
    assert not [e for e in extract_kernel(same, k, src, model).errors if "parameter list" in e]
    other = same.replace("float* out", "double* out")
    assert [e for e in extract_kernel(other, k, src, model).errors if "parameter list" in e]


def test_a_typedef_element_type_is_inferred() -> None:
    text = ALIASED + ("int main() { index_t n = 1 << 16; floatX *a, *b; cudaMalloc(&a, n * sizeof(floatX));\n"
                      "  cudaMalloc(&b, sizeof(float) * n); scale<<<(n + 255) / 256, 256>>>(a, b, n); }\n")
    src, model, k = _kernel(text, "scale")
    spec = build_spec(src, model, k, "t.cu")
    assert [(a.name, a.role.value, a.dtype, a.count or a.value) for a in spec.args] == [
        ("out", "out", "float32", "n"), ("in", "in", "float32", "n"), ("n", "scalar", "int32", "n")]


# ------------------------------------------------------------------------------- unnamed parameters


def test_unnamed_parameters_get_a_generated_name_and_keep_their_text() -> None:
    src, model, k = _kernel(TEMPLATED, "staged_copy")
    assert [(p.name, p.unnamed) for p in k.params] == [
        ("out", False), ("in", False), ("arg2", True), ("arg3", True), ("n", False)]
    assert [p.text for p in k.params][2:4] == ["std::bool_constant<Atomic>", "int"]
    assert "std::bool_constant<Atomic>, int /*unused*/, index_t n" in src.slice(k.params_span)
    spec = build_spec(src, model, k, "templated.cu")
    assert [(a.name, a.dtype, a.value) for a in spec.args if not a.is_buffer] == [
        ("arg2", "uint8", "0"), ("arg3", "int32", "0"), ("n", "int32", "n")]
    assert spec.template_args == ("false",)
    assert spec.launch.smem == "256 * sizeof(float)"  # sizeof(floatX), read through the typedef


def test_a_generated_name_never_takes_a_real_one() -> None:
    _, _, k = _kernel("__global__ void k(float* arg1, int, int arg2) { }\n", "k")
    assert [p.name for p in k.params] == ["arg1", "_arg1", "arg2"]


def test_an_unnamed_parameter_without_a_launch_gets_a_block_that_validates() -> None:
    text = "__global__ void fill(float* out, int /*unused*/, int n) { int i = threadIdx.x; if (i < n) out[i] = 1.f; }\n"
    src, model, k = _kernel(text, "fill")
    with pytest.raises(SpecError) as info:
        build_spec(src, model, k, "t.cu")
    e = info.value
    assert "arg  =" not in str(e)
    assert "// @warpforge arg arg1 = 0" in e.block and "// @warpforge arg out: out float[n]" in e.block
    fixed = "\n".join(e.block) + "\n" + text
    spec = build_spec(SourceText(fixed), parse(fixed), parse(fixed).kernels[0], "t.cu")
    assert [a.name for a in spec.args] == ["out", "arg1", "n"]
    assert fixed.endswith(text)  # the kernel's text, unnamed parameter included, as the user wrote it


def test_a_variant_may_name_an_unnamed_parameter() -> None:
    src, model, k = _kernel(TEMPLATED, "staged_copy")
    variant = src.slice(k.span).replace("int /*unused*/", "int unused")
    assert guards.check_candidate(k, src.slice(k.span), variant, type_aliases(src, model)) == []
    assert not [e for e in extract_kernel(variant, k, src, model).errors if "parameter list" in e]


# ------------------------------------------------------------------------------- template arguments


def test_template_arguments_bring_their_declarations() -> None:
    src, model, _ = _kernel(TEMPLATED, "trimul_global")
    expected = {"trimul_global": ("matmul_tri_naive",), "map_scaled": ("Square", "Scale")}
    for name, needed in expected.items():
        k = model.kernel(name)
        assert k is not None
        spec = build_spec(src, model, k, "templated.cu")
        with_args = {n for d in needed_declarations(model, k, spec.template_args) for n in d.names}
        without = {n for d in needed_declarations(model, k) for n in d.names}
        assert set(needed) <= with_args and not set(needed) & without, name
        unit = standalone(src, model, k, filename="templated.cu", instantiate=spec.template_args)
        assert all(n in unit for n in needed) and "int main" not in unit


def _nvcc(text: str, tmp: Path, name: str) -> subprocess.CompletedProcess[str]:
    cu = tmp / f"{name}.cu"
    cu.write_text(text, encoding="utf-8")
    return subprocess.run([NVCC or "nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-o", str(tmp / f"{name}.cubin"),
                           str(cu)], capture_output=True, text=True, timeout=300)


@needs_nvcc
def test_every_form_builds_as_a_unit_with_its_inferred_spec(tmp_path: Path) -> None:
    """No annotation anywhere: each kernel's spec comes from `main`, and its unit compiles (the device
    function, the functor and the constant's template come along; `extern __shared__` too)."""
    src, model, _ = _kernel(TEMPLATED, "trimul_global")
    for k in model.kernels:
        spec = build_spec(src, model, k, "templated.cu")
        unit = standalone(src, model, k, filename="templated.cu", instantiate=spec.template_args)
        r = _nvcc(unit, tmp_path, k.name)
        assert r.returncode == 0, f"{k.name}:\n{r.stderr}"
    staged = model.kernel("staged_copy")
    assert staged is not None
    assert "extern __shared__ __align__(16) float stage[];" in standalone(src, model, staged, instantiate=("false",))


@needs_nvcc
def test_a_candidate_with_its_own_extern_shared_array_builds(tmp_path: Path) -> None:
    src, model, k = _kernel(TEMPLATED, "map_scaled")
    variant = TEMPLATED.replace(
        "    if (i < n) y[i] = Op()(x[i]) * K::value;\n",
        "    floatX* s = reinterpret_cast<floatX*>(raw_tile);\n"
        "    s[threadIdx.x] = i < n ? x[i] : 0.0f;\n    __syncthreads();\n"
        "    if (i < n) y[i] = Op()(s[threadIdx.x]) * K::value;\n").replace(
        "template <class Op, class K>", "extern __shared__ __align__(16) unsigned char raw_tile[];\n"
                                         "template <class Op, class K>")
    cand = candidate_from_variant(TEMPLATED, variant, "map_scaled")
    assert "raw_tile[]" in cand.source and not cand.dropped
    spec = build_spec(src, model, k, "templated.cu")
    unit = translation_unit(src, model, k, spec, "templated.cu", Candidate.original(TEMPLATED, "map_scaled").source,
                            cand)
    assert "struct Square" in unit and "raw_tile" in unit
    r = _nvcc(unit, tmp_path, "variant")
    assert r.returncode == 0, r.stderr


FUNCTOR = """struct Square { __device__ float operator()(float v) const { return v * v; } };
struct Affine { float a, b; __device__ float operator()(float v) const { return a * v + b; } };
template <class Op>
__global__ void map(Op op, float* y, const float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = op(x[i]);
}
int main() { int n = 4096; float *x, *y; cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
  map<<<(n + 255) / 256, 256>>>(Square{}, y, x, n); }
"""


def test_a_functor_passed_by_value_is_deduced_and_passed_as_one_byte() -> None:
    src, model, k = _kernel(FUNCTOR, "map")
    spec = build_spec(src, model, k, "t.cu")
    assert spec.template_args == ("Square",)
    assert [(a.name, a.dtype, a.value) for a in spec.args if not a.is_buffer] == [("op", "uint8", "0"),
                                                                                ("n", "int32", "n")]
    unit = standalone(src, model, k, instantiate=spec.template_args)
    assert "struct Square" in unit and "struct Affine" not in unit
    assert "template __global__ void map<Square>(Square, float*, const float*, int);" in unit


def test_a_functor_with_data_is_not_passed_as_a_tag() -> None:
    """`Affine{1.f, 2.f}` carries values the kernel reads: no spec can pass it, and inference says so."""
    text = FUNCTOR.replace("(Square{}", "(Affine{1.f, 2.f}")
    src, model, k = _kernel(text, "map")
    with pytest.raises(SpecError, match=r"cannot infer the value of `op` from `Affine\{1.f, 2.f\}`"):
        build_spec(src, model, k, "t.cu")
