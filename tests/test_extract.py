"""Extracting a kernel into a standalone translation unit: what it pulls in, what it leaves out (host
code), that its ``#line`` directives point at the user's file, and that it compiles with ``nvcc -cubin``."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import KERNEL_FILES, NVCC, load, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.cuda.extract import instantiation, needed_declarations, standalone


def _names(path: str, kernel: str) -> list[tuple[str, ...]]:
    _, model = load(path)
    k = model.kernel(kernel)
    assert k is not None
    return [d.names for d in needed_declarations(model, k)]


def test_needed_declarations_are_the_transitive_closure() -> None:
    assert _names("deps.cu", "stencil") == [("RADIUS",), ("WIDTH",), ("c_weights",), ("real",)]
    assert _names("deps.cu", "transform_all") == [
        ("SQR",), ("d_counter",), ("real",), ("Params",), ("Mode", "MODE_PLAIN", "MODE_SQUARED"), ("affine",),
        ("transform",)]
    # The device clamp01 of namespace math, never the host function of the same name.
    _, model = load("deps.cu")
    clamp_all = model.kernel("clamp_all")
    assert clamp_all is not None
    (helper,) = needed_declarations(model, clamp_all)
    assert helper.names == ("clamp01",) and helper.namespace == ("math",)
    assert _names("deps.cu", "block_reduce") == []
    assert _names("features.cu", "add_pairs") == [("Pair",)]
    assert _names("features.cu", "tiled_copy") == [("TILE",)]


def _line_directives_point_at_the_source(tu: str, src: SourceText, filename: str) -> int:
    """Every ``#line N "file"`` is followed by a line that ends with line N of the original file."""
    lines = tu.split("\n")
    checked = 0
    for i, line in enumerate(lines):
        m = re.fullmatch(r'#line (\d+) "(.*)"', line)
        if m is None:
            continue
        assert m.group(2) == filename
        original = src.line_text(int(m.group(1)) - 1).rstrip()
        assert lines[i + 1].rstrip().endswith(original), (lines[i + 1], original)
        checked += 1
    return checked


def test_standalone_has_what_the_kernel_needs_and_no_host_code() -> None:
    src, model = load("deps.cu")
    for k in model.kernels:
        tu = standalone(src, model, k, filename="deps.cu",
                        instantiate=("float", "256") if k.template_params else None)
        assert "int main" not in tu and "cudaMalloc" not in tu and "cudaMemcpyToSymbol" not in tu
        assert 'printf("host clamp' not in tu
        assert "#include <cuda_runtime.h>" in tu
        assert src.slice(k.span) in tu
        assert _line_directives_point_at_the_source(tu, src, "deps.cu") >= 3
    stencil = model.kernel("stencil")
    assert stencil is not None
    tu = standalone(src, model, stencil)
    # The whole #ifndef block that defines RADIUS, and what the kernel uses, in source order.
    assert "#ifndef RADIUS\n#define RADIUS 3\n#endif" in tu
    assert tu.index("#define RADIUS") < tu.index("#define WIDTH") < tu.index("__constant__ float c_weights")
    assert "affine" not in tu and "SQR" not in tu and "d_counter" not in tu
    assert re.search(r"^#line \d+$", tu, re.M)  # no filename: `#line N` alone
    clamp_all = model.kernel("clamp_all")
    assert clamp_all is not None
    tu = standalone(src, model, clamp_all, filename="deps.cu")
    assert "namespace math { __device__ inline float clamp01(float v)" in tu
    assert "namespace math { __global__ void clamp_all(float* x, int n)" in tu


def test_standalone_with_a_new_body_or_definition() -> None:
    src, model = load("deps.cu")
    stencil = model.kernel("stencil")
    assert stencil is not None
    body = "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = c_weights[0] * in[i];\n}"
    tu = standalone(src, model, stencil, body=body)
    assert body in tu and "for (int j = -RADIUS" not in tu
    assert "__global__ void stencil(const real* in, real* out, int n)\n{" in tu
    definition = "__global__ void stencil(const real* __restrict__ in, real* out, int n) { out[0] = in[0]; }"
    tu = standalone(src, model, stencil, definition=definition)
    assert definition in tu and "c_weights[j + RADIUS]" not in tu


def test_a_candidate_definition_is_compiled_as_device_code_only() -> None:
    """Whoever wrote a candidate, its host code and off-list includes never reach nvcc (issue 14)."""
    src, model = load("deps.cu")
    stencil = model.kernel("stencil")
    assert stencil is not None
    kernel = "__global__ void stencil(const real* in, real* out, int n) { out[0] = in[0] * p.x; }"
    definition = ('#include </etc/passwd>\n#include <cuda_fp16.h>\nstatic int boom = system("id");\n'
                  "struct Pt { float x; };\n__device__ Pt p;\n" + kernel)
    tu = standalone(src, model, stencil, definition=definition)
    assert "system" not in tu and "/etc/passwd" not in tu
    # kept: the toolkit include, the type with its `;`, the device variable, the kernel
    assert "#include <cuda_fp16.h>" in tu and "struct Pt { float x; };" in tu and "__device__ Pt p;" in tu
    assert kernel in tu


def test_instantiation() -> None:
    _, model = load("deps.cu")
    k = model.kernel("block_reduce")
    assert k is not None
    assert instantiation(k, ("float", "256")) == (
        "template __global__ void block_reduce<float, 256>(const float*, float*, int);")
    with pytest.raises(ValueError, match="2 template parameters"):
        instantiation(k, ("float",))
    _, model = load("features.cu")
    fill = model.kernel("fill")
    assert fill is not None
    assert instantiation(fill, ("double",)) == "template __global__ void ops::fill<double>(double*, double, int);"


def test_extern_c_block_kernel_keeps_c_linkage() -> None:
    src, model = load("features.cu")
    zero = model.kernel("zero")
    assert zero is not None and zero.extern_c
    tu = standalone(src, model, zero)
    assert 'extern "C" __global__ void zero(float* out, int n)' in tu
    scale = model.kernel("scale")
    assert scale is not None
    assert tu.count('extern "C"') == 1
    assert standalone(src, model, scale).count('extern "C"') == 1  # single form: already in the span


COND_SOURCE = """#include <cuda_runtime.h>
#ifndef USE_FAST
#define SCALE 2.0f
__device__ float helper(float v) { return v * SCALE; }
void host_only() { }
__global__ void other(float* x) { x[0] = helper(1.0f); }
__global__ void cond_kernel(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = helper(x[i]);
}
#endif
int main() { return 0; }
"""


def test_kernel_inside_a_conditional_is_emitted_once() -> None:
    src = SourceText(COND_SOURCE)
    model = parse(COND_SOURCE)
    k = model.kernel("cond_kernel")
    assert k is not None
    tu = standalone(src, model, k, filename="cond.cu")
    assert tu.count("void cond_kernel") == 1
    assert "void other" not in tu and "host_only" not in tu and "int main" not in tu
    assert "#ifndef USE_FAST\n#define SCALE 2.0f\n__device__ float helper" in tu
    assert _line_directives_point_at_the_source(tu, src, "cond.cu") == 3


# ------------------------------------------------------------------------------------- nvcc


def _compile(job: tuple[str, str, Path]) -> tuple[str, int, str, bytes]:
    name, text, out_dir = job
    cu = out_dir / f"{name}.cu"
    cubin = out_dir / f"{name}.cubin"
    cu.write_text(text, encoding="utf-8")
    r = subprocess.run([NVCC or "nvcc", "-cubin", "-arch=sm_90", "-o", str(cubin), str(cu)],
                       capture_output=True, text=True, timeout=300)
    return name, r.returncode, r.stderr, cubin.read_bytes() if r.returncode == 0 else b""


@needs_nvcc
def test_every_extracted_kernel_compiles_with_nvcc(tmp_path: Path) -> None:
    jobs: list[tuple[str, str, Path]] = []
    for path in KERNEL_FILES:
        src, model = load(path)
        for k in model.kernels:
            tu = standalone(src, model, k, filename=str(path))
            assert "int main" not in tu
            jobs.append((f"kernels_{path.stem}_{k.name}", tu, tmp_path))
    instantiate = {"block_reduce": ("float", "256"), "block_sum": ("float", "128"), "fill": ("double",)}
    for fixture, names in (("deps.cu", None), ("features.cu", ("block_sum", "zero", "clustered", "fill",
                                                               "add_pairs", "tiled_copy"))):
        src, model = load(fixture)
        for k in model.kernels:
            if names is None or k.name in names:
                tu = standalone(src, model, k, filename=fixture, instantiate=instantiate.get(k.name))
                jobs.append((f"{Path(fixture).stem}_{k.name}", tu, tmp_path))
    src = SourceText(COND_SOURCE)
    model = parse(COND_SOURCE)
    cond = model.kernel("cond_kernel")
    assert cond is not None
    jobs.append(("cond_kernel", standalone(src, model, cond), tmp_path))
    assert len(jobs) >= 9 + 4 + 6 + 1
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(_compile, jobs))
    failed = [f"{name}:\n{err}" for name, rc, err, _ in results if rc != 0]
    assert not failed, "\n".join(failed)
    cubins = {name: data for name, _, _, data in results}
    # C linkage survives extraction (block and single form); C++ kernels keep their mangled names.
    assert b".text.zero\x00" in cubins["features_zero"]
    assert b".text.saxpy\x00" in cubins["kernels_saxpy_saxpy"]
    assert b".text._ZN3ops6detail9clusteredEPfPKfi\x00" in cubins["features_clustered"]
    assert b".text._Z12block_reduceIfLi256EEvPKT_PS0_i\x00" in cubins["deps_block_reduce"]


HELPER_FILE = """#define SCALE 0.5f
// @warpforge size N = 1024
// @warpforge arg out: out float[N]
// @warpforge arg x: in float[N]
// @warpforge arg N = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void scale(float* out, const float* x, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = SCALE * x[i];
}
"""

HELPER_VARIANT = """#define SCALE 0.5f
__device__ __forceinline__ float scaled(float v) { return SCALE * v; }
__global__ void scale(float* out, const float* x, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = scaled(x[i]);
}
"""


@needs_nvcc
def test_a_new_helper_brings_the_file_macros_it_uses(tmp_path: Path) -> None:
    """A candidate's new helper may be the only user of one of the file's macros: the macro, already in the
    file (so not the candidate's to add), must still reach the translation unit, or nvcc finds it undefined."""
    from warpforge.cuda.candidate import Candidate, candidate_from_variant
    from warpforge.gpu.surgery import translation_unit
    from warpforge.spec.resolve import load_spec

    src = SourceText(HELPER_FILE)
    model = parse(HELPER_FILE)
    kernel = model.kernel("scale")
    assert kernel is not None
    cand = candidate_from_variant(HELPER_FILE, HELPER_VARIANT, "scale")
    assert "#define SCALE" not in cand.source  # the file has it: the candidate does not add it again
    spec = load_spec(Path("helper.cu"), "scale", text=HELPER_FILE)
    original = Candidate.original(HELPER_FILE, "scale").source
    tu = translation_unit(src, model, kernel, spec, "helper.cu", original, cand)
    assert tu.count("#define SCALE 0.5f") == 1 and "scaled(x[i])" in tu
    _, rc, err, _ = _compile(("helper_macro", tu, tmp_path))
    assert rc == 0, err



PLATFORM_FILE = """#include <cstdio>
#define USE_HALF 1
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <unistd.h>
#endif
#if USE_HALF && \\
    defined(__CUDACC__)
#include <cuda_fp16.h>
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

__global__ void halve(__half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hmul(x[i], __float2half(0.5f));
}
"""


@needs_nvcc
def test_includes_keep_the_conditions_they_are_under(tmp_path: Path) -> None:
    """``#ifdef _WIN32 / #include <windows.h>`` emitted bare broke the build of two cuda-samples kernels on the
    wide yardstick: an include inside a top-level conditional keeps its branch directives (``#else`` too), a
    condition on the file's own macro gets that macro first (a continued condition kept whole), and a header
    the machine lacks (``nccl.h``) under a macro nobody defines stays off; the unit builds."""
    model = parse(PLATFORM_FILE)
    kernel = model.kernel("halve")
    assert kernel is not None
    assert [i.conditional is not None for i in model.includes] == [False, True, True, True, True]
    tu = standalone(PLATFORM_FILE, model, kernel)
    lines = [ln for ln in tu.splitlines() if ln and not ln.startswith("#line")]
    i_win = lines.index("#include <windows.h>")
    assert lines[i_win - 1] == "#ifdef _WIN32" and lines[i_win + 1] == "#else" and lines[i_win + 2] == \
        "#include <unistd.h>"
    assert "#define WIN32_LEAN_AND_MEAN" not in tu  # only branch directives and includes of the block
    assert lines.index("#define USE_HALF 1") < lines.index("#if USE_HALF && \\")
    assert lines[lines.index("#if USE_HALF && \\") + 1].strip() == "defined(__CUDACC__)"
    assert tu.count("#include <nccl.h>") == 1 and lines[lines.index("#include <nccl.h>") - 1] == "#ifdef HAVE_NCCL"
    _, rc, err, cubin = _compile(("platform_includes", tu, tmp_path))
    assert rc == 0, err
    assert b"halve" in cubin


#: llm.c's element type chosen in the file itself: a define below the system includes, then the #if it picks
ALIAS_BY_DEFINE = """#include <cuda_bf16.h>
#include <cstdio>
#define ENABLE_BF16
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif

__global__ void widen(float* out, const floatX* in, int n) {
    static_assert(sizeof(floatX) == 2, "floatX is the bfloat16 the file compiles");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)in[i];
}
"""


@needs_nvcc
def test_a_kept_conditional_gets_the_macros_its_condition_names(tmp_path: Path) -> None:
    """The unit keeps the ``#if`` block the kernel's ``floatX`` comes from; the macro its condition tests was
    dropped (it sits above no include of the file's own), so the unit compiled ``floatX`` as ``float`` while the
    file and the spec say bfloat16: the original wrote past its buffers on an H200. The static_assert fails
    to compile without the macro."""
    model = parse(ALIAS_BY_DEFINE)
    kernel = model.kernel("widen")
    assert kernel is not None
    tu = standalone(ALIAS_BY_DEFINE, model, kernel)
    lines = [ln for ln in tu.splitlines() if ln and not ln.startswith("#line")]
    assert lines.index("#define ENABLE_BF16") < lines.index("#if defined(ENABLE_BF16)")
    _, rc, err, cubin = _compile(("alias_by_define", tu, tmp_path))
    assert rc == 0, err
    assert b"widen" in cubin


@needs_nvcc
def test_a_computed_include_keeps_the_macro_that_spells_it(tmp_path: Path) -> None:
    # `#include S(path)` with `#define S(x) #x` above it: the unit needs S, which the kernel itself never names
    # (emitted bare, nvcc said `#include expects "FILENAME"` for the unit while the file compiled)
    (tmp_path / "inc.h").write_text("#define SCALE 2.0f\n")
    text = ('#define S(x) #x\n#include S(inc.h)\n'
            '__global__ void k(float* y) { y[threadIdx.x] = SCALE; }\n')
    model = parse(text)
    kernel = model.kernel("k")
    assert kernel is not None
    unit = standalone(SourceText(text), model, kernel)
    assert unit.index("#define S(x) #x") < unit.index("#include S(inc.h)")
    out = tmp_path / "unit.cu"
    out.write_text(unit)
    r = subprocess.run([str(NVCC), "-c", "-o", str(tmp_path / "u.o"), "-I", str(tmp_path), str(out)],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr


#: a whole header in an include guard (one top-level conditional block): a templated tree reduction, the host
#: wrapper that launches it with an ``extern "C"`` helper declared above it, and explicit instantiations of the
#: wrapper and of the kernel at the end, as sample code ships its reduction headers
GUARDED_HEADER = """\
#ifndef SUM_KERNEL_H
#define SUM_KERNEL_H
#include <cstdio>

template <class T> __device__ T zero() { return T(0); }

// @warpforge size n = 1 << 20
// @warpforge arg in: in float[n] uniform(-1, 1)
// @warpforge arg out: out float[n]
// @warpforge arg count = n
// @warpforge launch grid=cdiv(n, 256), block=256
// @warpforge template float
template <class T> __global__ void block_sum(const T* in, T* out, unsigned int count) {
    __shared__ T s[256];
    unsigned int t = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[t] = (i < count) ? in[i] : zero<T>();
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if (t < h) s[t] += s[t + h];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" bool power_of_two(unsigned int x);

template <class T> void run_sum(int n, int threads, T* in, T* out) {
    if (!power_of_two(threads)) printf("threads must be a power of two\\n");
    block_sum<T><<<(n + threads - 1) / threads, threads>>>(in, out, n);
}

template void run_sum<float>(int n, int threads, float* in, float* out);
template void run_sum<double>(int n, int threads, double* in, double* out);
template __global__ void block_sum<int>(const int*, int*, unsigned int);
#endif
"""


def test_a_guarded_header_drops_the_instantiations_and_linkage_of_what_it_cuts() -> None:
    """The block is copied whole, its kernel and host code cut: the explicit instantiations of the cut host
    template (and of the kernel, emitted only after the block) and the ``extern "C"`` of the cut host
    declaration go with them (left in, nvcc said "run_sum is not a template" on the wide yardstick)."""
    model = parse(GUARDED_HEADER)
    assert len(model.instantiations) == 3 and len(model.linkage_prefixes) == 1
    kernel = model.kernel("block_sum")
    assert kernel is not None
    tu = standalone(SourceText(GUARDED_HEADER), model, kernel, instantiate=("float",))
    assert "run_sum" not in tu and "power_of_two" not in tu and 'extern "C"' not in tu
    assert "block_sum<int>" not in tu and tu.count("template __global__ void block_sum<float>") == 1
    assert "#ifndef SUM_KERNEL_H" in tu and "#endif" in tu


@needs_nvcc
def test_a_guarded_header_builds_its_kernel_and_its_candidates(tmp_path: Path) -> None:
    """The original and every warp-reduce candidate of a kernel in a guarded header build through the
    evaluator's build path (the unit of each is the same block, with the candidate in the kernel's place)."""
    from benchmarks import corpus_applicability as ca

    path = tmp_path / "sum_kernel.cuh"
    path.write_text(GUARDED_HEADER)
    res = ca.check_case(path, families=["warp_reduce"], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families["warp_reduce"]
    assert fr.proposed >= 1 and fr.tried == fr.proposed and not fr.failures, fr.failures


#: a templated kernel and its explicit specialization for half (mmcv's sync-BN spelling)
SPECIALIZED = """#include <cuda_fp16.h>
#define THREADS 256
template <typename T>
__global__ void channel_sum(const T* x, float* out, int n) {
    __shared__ float b[THREADS];
    b[threadIdx.x] = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[threadIdx.x] += static_cast<float>(x[i]);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = b[0];
}

template <>
__global__ void channel_sum(const half* x, float* out, int n) {
    __shared__ float b[THREADS];
    b[threadIdx.x] = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[threadIdx.x] += __half2float(x[i]);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = b[0];
}
"""


@needs_nvcc
def test_an_explicit_specialization_gets_its_primary_template(tmp_path: Path) -> None:
    """The unit of ``template <> __global__ void k(const half* ...)`` alone did not build ("channel_sum is not a
    class or function template name in the current scope"), so neither did any candidate of mmcv's half-precision
    sync-BN kernels: the primary template's declaration now precedes it, its body left out."""
    model = parse(SPECIALIZED)
    spec = [k for k in model.kernels if k.name == "channel_sum"][1]
    assert not spec.template_params
    tu = standalone(SPECIALIZED, model, spec)
    lines = [ln for ln in tu.splitlines() if ln and not ln.startswith("#line")]
    declared = next(n for n, ln in enumerate(lines) if ln.endswith(";") and "channel_sum(" in ln)
    assert lines[declared - 1] == "template <typename T>" and lines.index("template <>") > declared
    assert tu.count("static_cast<float>(x[i])") == 0  # the primary's body is not in the unit
    _, rc, err, cubin = _compile(("specialized", tu, tmp_path))
    assert rc == 0, err
    assert b"channel_sum" in cubin
    # the primary template itself is extracted as before (no declaration of itself)
    primary = next(k for k in model.kernels if k.name == "channel_sum")
    assert standalone(SPECIALIZED, model, primary).count("channel_sum(") == 1
