"""Benchmark specs: inference from host launch sites, roles from the kernel body, the annotation block
and its errors, resolution at the spec and perturbed sizes, annotation round trips and JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import KERNEL_FILES, ROOT, load
from warpforge.cuda import KernelNotFound, SourceText, parse
from warpforge.spec import KernelSpec, Role, SpecError, build_spec, guess_spec, load_spec
from warpforge.spec.annotations import parse_annotation
from warpforge.spec.model import perturb


def spec_of(text: str, kernel: str, file: str = "t.cu") -> KernelSpec:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return build_spec(src, model, k, file)


def error_of(text: str, kernel: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        spec_of(text, kernel)
    return info.value


def fixture_spec(kernel: str) -> KernelSpec:
    src, model = load("host_launch.cu")
    k = model.kernel(kernel)
    assert k is not None
    return build_spec(src, model, k, "host_launch.cu")


def summary(spec: KernelSpec) -> dict[str, object]:
    return {
        "sizes": [(s.name, s.expr, s.fixed, s.line) for s in spec.sizes],
        "args": [(a.name, a.role.value, a.dtype, a.count if a.is_buffer else a.value,
                  str(a.distribution) if a.distribution else None) for a in spec.args],
        "launch": (spec.launch.grid, spec.launch.block, spec.launch.smem),
        "template": spec.template_args,
    }


# ------------------------------------------------------------------------------------ reference kernels

REFERENCE = {
    # kernel: (sizes, grid, block, lengths/values of the arguments, perturbed sizes)
    "conv1d": ({"N": 1 << 25, "K": 9}, (131072, 1, 1), (256, 1, 1),
               {"inp": 1 << 25, "filter": 9, "out": 1 << 25, "n": 1 << 25, "k": 9},
               {"N": 30198989, "K": 7}),
    "gelu_forward": ({"N": 1 << 25}, (131072, 1, 1), (256, 1, 1), {"inp": 1 << 25, "out": 1 << 25, "n": 1 << 25},
                     {"N": 30198989}),
    "histogram_atomic": ({"N": 1 << 22, "NBINS": 256}, (16384, 1, 1), (256, 1, 1),
                         {"data": 1 << 22, "bins": 256, "n": 1 << 22, "nbins": 256}, {"N": 3774873, "NBINS": 231}),
    "reduce_sum": ({"BLOCK_SIZE": 256, "N": 1 << 24}, (65536, 1, 1), (256, 1, 1),
                   {"inp": 1 << 24, "out": 1, "n": 1 << 24}, {"BLOCK_SIZE": 256, "N": 15099495}),
    "rmsnorm_rows": ({"BLOCK_SIZE": 256, "B": 8192, "C": 4096}, (8192, 1, 1), (256, 1, 1),
                     {"inp": 8192 * 4096, "weight": 4096, "out": 8192 * 4096, "rows": 8192, "cols": 4096,
                      "eps": 1e-6}, {"BLOCK_SIZE": 256, "B": 7373, "C": 3687}),
    "saxpy": ({"N": 1 << 25}, (131072, 1, 1), (256, 1, 1), {"n": 1 << 25, "a": 2.5, "x": 1 << 25, "y": 1 << 25},
              {"N": 30198989}),
    "sgemm_naive": ({"M": 1024, "N": 1024, "K": 1024}, (64, 64, 1), (16, 16, 1),
                    {"M": 1024, "N": 1024, "K": 1024, "alpha": 1.5, "A": 1 << 20, "B": 1 << 20, "beta": 0.5,
                     "C": 1 << 20}, {"M": 921, "N": 921, "K": 921}),
    "softmax_rows": ({"B": 4096, "C": 1024}, (16, 1, 1), (256, 1, 1),
                     {"inp": 4096 * 1024, "out": 4096 * 1024, "rows": 4096, "cols": 1024}, {"B": 3687, "C": 921}),
    "transpose_naive": ({"ROWS": 4096, "COLS": 4096}, (128, 512, 1), (32, 8, 1),
                        {"in": 1 << 24, "out": 1 << 24, "rows": 4096, "cols": 4096}, {"ROWS": 3687, "COLS": 3687}),
}


def test_every_reference_kernel_is_covered() -> None:
    names = set()
    for path in KERNEL_FILES:
        _, model = load(path)
        names.update(k.name for k in model.kernels)
    assert names == set(REFERENCE)


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_reference_spec_resolves(path: Path) -> None:
    _, model = load(path)
    (k,) = model.kernels
    spec = load_spec(path, k.name)
    sizes, grid, block, values, perturbed = REFERENCE[k.name]
    r = spec.resolve()
    assert r.sizes == sizes and r.grid == grid and r.block == block and r.smem == 0
    assert {a.name: (a.count if a.is_buffer else a.value) for a in spec.args} and {
        a.name: (a.count if a.count is not None else a.value) for a in r.args} == values
    assert [a.name for a in spec.args] == [p.name for p in k.params]
    assert all(a.source == "annotation" for a in spec.args)
    p = spec.resolve(perturbed=True)
    assert p.perturbed and p.sizes == perturbed
    assert all(a.count is None or a.count > 0 for a in p.args)
    # Every writable buffer has a tolerance; `out` buffers are poisoned (no distribution).
    for a in spec.args:
        if a.role is Role.OUT:
            assert a.distribution is None
        if a.is_buffer and a.role is not Role.OUT:
            assert r.args[[x.name for x in r.args].index(a.name)].distribution is not None or a.distribution is None


def test_reference_spec_details() -> None:
    saxpy = load_spec(Path(KERNEL_FILES[0]).parent / "saxpy.cu", "saxpy")
    assert [(a.name, a.role) for a in saxpy.args] == [("n", Role.SCALAR), ("a", Role.SCALAR), ("x", Role.IN),
                                                      ("y", Role.INOUT)]
    assert saxpy.tolerance == (1e-5, 1e-6, 0.0)
    r = saxpy.resolve()
    assert (r.flops, r.bytes) == (2.0 * (1 << 25), 3.0 * (1 << 25) * 4)
    reduce = load_spec(Path(KERNEL_FILES[0]).parent / "reduce_sum.cu", "reduce_sum")
    assert [(t.name, t.values) for t in reduce.tunables] == [("BLOCK_SIZE", ("256", "128", "512", "1024"))]
    r = reduce.resolve(tunables={"BLOCK_SIZE": "1024"})
    assert r.grid == (16384, 1, 1) and r.block == (1024, 1, 1) and r.defines == {"BLOCK_SIZE": "1024"}
    conv = load_spec(Path(KERNEL_FILES[0]).parent / "conv1d.cu", "conv1d")
    assert [(s.name, s.odd) for s in conv.sizes] == [("N", None), ("K", "7")]
    hist = load_spec(Path(KERNEL_FILES[0]).parent / "histogram.cu", "histogram_atomic")
    data = hist.resolve(perturbed=True).args[0]
    assert data.distribution is not None and (data.distribution.kind, data.distribution.b) == ("int", 231.0)
    assert hist.tolerance_for(hist.args[1]) == (0.0, 0.0, 0.0)  # integers: exact


# ------------------------------------------------------------------------------ inference from host code


def test_inference_from_the_host_launch_site() -> None:
    axpy = fixture_spec("axpy")
    assert summary(axpy) == {
        "sizes": [("n", "1 << 24", False, 54)],
        "args": [("x", "in", "float32", "n", "uniform(-1, 1)"), ("y", "inout", "float32", "n", "uniform(-1, 1)"),
                 ("a", "scalar", "float32", "2.0f", None), ("n", "scalar", "int32", "n", None)],
        "launch": (("(n + 255) / 256",), ("256",), "0"),
        "template": (),
    }
    assert all(a.source == "inferred" and a.line == 68 for a in axpy.args)
    assert axpy.notes == ("inferred from the launch at line 68",)
    r = axpy.resolve()
    assert r.sizes == {"n": 1 << 24} and r.grid == (65536, 1, 1) and r.block == (256, 1, 1)
    assert [a.count for a in r.args] == [1 << 24, 1 << 24, None, None] and r.args[2].value == 2.0


def test_inference_sizes_through_derived_variables_and_macros() -> None:
    square = fixture_spec("square")
    # `int blocks = (n + threads - 1) / threads` is inlined; a block size is never perturbed.
    assert summary(square)["sizes"] == [("n", "1 << 24", False, 54), ("threads", "256", True, 65)]
    assert square.launch.grid == ("(n + threads - 1) / threads",) and square.launch.block == ("threads",)
    assert square.resolve(perturbed=True).block == (256, 1, 1)
    # `in` is not const but only read: an input.
    assert [(a.name, a.role.value) for a in square.args] == [("in", "in"), ("out", "out"), ("n", "scalar")]
    hist = fixture_spec("histogram")
    # NBINS is compiled into the kernel (`% NBINS`): shrinking the host's value would only shrink `bins`.
    assert summary(hist)["sizes"] == [("n", "1 << 24", False, 54), ("NBINS", "64", True, 5),
                                      ("threads", "256", True, 65)]
    assert [(a.name, a.role.value, a.count) for a in hist.args][:2] == [("data", "in", "n"), ("bins", "inout", "NBINS")]
    assert hist.resolve(perturbed=True).sizes == {"n": 15099495, "NBINS": 64, "threads": 256}


def test_inference_with_dim3_and_macros() -> None:
    rows = fixture_spec("row_scale")
    assert summary(rows)["sizes"] == [("n", "1 << 24", False, 54), ("ROWS", "512", False, 6),
                                      ("COLS", "384", False, 7)]
    assert rows.launch.grid == ("(COLS + 31) / 32", "(ROWS + 7) / 8") and rows.launch.block == ("32", "8")
    assert [(a.name, a.role.value, a.count or a.value) for a in rows.args] == [
        ("in", "in", "n"), ("out", "out", "n"), ("scale", "in", "ROWS"), ("rows", "scalar", "ROWS"),
        ("cols", "scalar", "COLS")]
    r = rows.resolve()
    assert r.grid == (12, 64, 1) and r.block == (32, 8, 1)
    p = rows.resolve(perturbed=True)
    assert p.sizes == {"n": 15099495, "ROWS": 461, "COLS": 345} and p.grid == (11, 58, 1)


def test_inference_from_a_template_launch() -> None:
    t = fixture_spec("tscale")
    # `tscale<float, BLOCK>`: T = float gives the dtypes; the value argument becomes a number.
    assert t.template_args == ("float", "128")
    assert [(a.name, a.role.value, a.dtype) for a in t.args] == [
        ("in", "in", "float32"), ("out", "out", "float32"), ("s", "scalar", "float32"), ("n", "scalar", "int32")]
    assert summary(t)["sizes"] == [("n", "1 << 24", False, 54), ("BLOCK", "128", True, 8)]
    assert t.resolve().grid == (131072, 1, 1)


KERNEL = "__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"


@pytest.mark.parametrize(
    ("host", "sizes", "count", "grid", "n_value"),
    [
        # derived variables are inlined; constant ones become sizes
        ("const int N = 1024; int total = N * N; float *x, *y; cudaMalloc(&x, total * sizeof(float)); "
         "cudaMalloc(&y, sizeof(float) * total); k<<<(total + 255) / 256, 256>>>(x, y, total);",
         [("N", "1024")], "N * N", "((N * N) + 255) / 256", 1 << 20),
        ("int n = 1 << 20, m = n / 2; float *x, *y; cudaMalloc(&x, m * sizeof(float)); "
         "cudaMalloc(&y, m * sizeof(float)); k<<<dim3((m + 255) / 256), dim3(256)>>>(x, y, m);",
         [("n", "1 << 20")], "n / 2", "((n / 2) + 255) / 256", 1 << 19),
        # a reassignment refers to the previous value, not to itself
        ("int n = 1 << 20; n = n * 2; float *x, *y; cudaMalloc(&x, n * sizeof(float)); "
         "cudaMalloc(&y, n * sizeof(float)); k<<<n / 256, 256>>>(x, y, n);",
         [("n", "(1 << 20) * 2")], "n", "n / 256", 1 << 21),
        ("int n = 1 << 20; n *= 4; n++; float *x, *y; cudaMalloc(&x, n * sizeof(float)); "
         "cudaMalloc(&y, n * sizeof(float)); k<<<n / 256, 256>>>(x, y, n);",
         [("n", "((1 << 20) * 4) + 1")], "n", "n / 256", (1 << 22) + 1),
        # an alias of a size is the size itself, without parentheses
        ("int n = 1 << 20; float *x, *y; size_t bytes = n * sizeof(float); cudaMalloc(&x, bytes); "
         "cudaMalloc(&y, bytes); int n2 = n; k<<<n2 / 256, 256>>>(x, y, n2);",
         [("n", "1 << 20")], "n", "n / 256", 1 << 20),
        # casts around the pointer and the size
        ("int n = 1 << 20; float *x, *y; cudaMalloc((void **)&x, sizeof(float) * n); "
         "cudaMalloc(reinterpret_cast<void**>(&y), (size_t)n * sizeof(float)); k<<<n / 256, 256>>>(x, y, n);",
         [("n", "1 << 20")], "n", "n / 256", 1 << 20),
        # a byte count without sizeof(T) is divided by the element size
        ("int n = 1 << 20; float *x, *y; cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4); k<<<n / 256, 256>>>(x, y, n);",
         [("n", "1 << 20")], "(n * 4) / sizeof(float)", "n / 256", 1 << 20),
    ],
)
def test_inference_of_derived_variables(
    host: str, sizes: list[tuple[str, str]], count: str, grid: str, n_value: int
) -> None:
    spec = spec_of(KERNEL + "void host() { " + host + " }\n", "k")
    assert [(s.name, s.expr) for s in spec.sizes] == sizes
    assert spec.args[0].count == count and spec.launch.grid == (grid,)
    r = spec.resolve()
    assert r.args[0].count == n_value and r.args[2].value == n_value


def test_inference_from_defines_and_globals() -> None:
    text = (
        "#define N (1 << 16) /* elements */\n"
        "#define THREADS 128  // per block\n"
        "const int REPEAT = 3;\n" + KERNEL +
        "int main() { float *x, *y; cudaMalloc(&x, N * sizeof(float)); cudaMallocManaged(&y, N * sizeof(float));\n"
        "  for (int r = 0; r < REPEAT; ++r) k<<<(N + THREADS - 1) / THREADS, THREADS, 0>>>(x, y, N); }\n"
    )
    spec = spec_of(text, "k")
    assert [(s.name, s.expr, s.fixed) for s in spec.sizes] == [("N", "(1 << 16)", False), ("THREADS", "128", True)]
    r = spec.resolve()
    assert r.grid == (512, 1, 1) and r.block == (128, 1, 1) and r.args[0].count == 1 << 16


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("int n = atoi(\"5\"); float *x, *y; cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));"
         " k<<<n / 256, 256>>>(x, y, n);", "cannot infer the length of `x`"),
        ("float *x, *y; k<<<1, 256>>>(x, y, 5);", "`x` at the launch on line 2 is not allocated (cudaMalloc, "
         "cudaMallocAsync, cudaMallocManaged, a sized vector) in `host` or its callers"),
        ("int n = 1 << 20; k<<<n / 256, 256>>>(n);", "passes 1 arguments but `k` takes 3"),
    ],
)
def test_inference_failures_name_the_reason_and_the_fix(host: str, message: str) -> None:
    e = error_of(KERNEL + "void host() { " + host + " }\n", "k")
    assert str(e).startswith("t.cu:1: ") and message in str(e)
    # The fix quotes a block (x is only read: `in`); written above the kernel, it gives a spec
    assert e.fix is not None and "`// @warpforge arg x: in float[" in e.fix
    assert all(f"`{line}`" in e.fix for line in e.block)
    fixed = "\n".join(e.block) + "\n" + KERNEL + "void host() { " + host + " }\n"
    assert {a.name for a in spec_of(fixed, "k").args} == {"x", "y", "n"}


@pytest.mark.parametrize(
    ("body", "roles"),
    [
        ("y[i] = x[i];", {"x": "in", "y": "out"}),
        ("y[i] += x[i];", {"x": "in", "y": "inout"}),
        ("y[i] = y[i] * 2.0f + x[i];", {"x": "in", "y": "inout"}),
        ("atomicAdd(&y[0], x[i]);", {"x": "in", "y": "inout"}),
        ("atomicMax((int*)y, 1);", {"x": "in", "y": "inout"}),
        ("float* row = y + i * 4; row[0] = x[i];", {"x": "in", "y": "out"}),
        ("float* row = y + i * 4; row[0] -= 1.0f;", {"x": "in", "y": "inout"}),
        ("*(y + i) = *(x + i);", {"x": "in", "y": "out"}),
        ("y[i]++;", {"x": "in", "y": "inout"}),
        ("float v = x[i]; v += y[i];", {"x": "in", "y": "in"}),
    ],
)
def test_roles_from_body_access(body: str, roles: dict[str, str]) -> None:
    text = (f"__global__ void k(float* x, float* y, int n) {{ int i = threadIdx.x; {body} }}\n"
            "void host() { int n = 64; float *x, *y; cudaMalloc(&x, n * sizeof(float)); "
            "cudaMalloc(&y, n * sizeof(float)); k<<<1, 64>>>(x, y, n); }\n")
    spec = spec_of(text, "k")
    assert {a.name: a.role.value for a in spec.args if a.is_buffer} == roles


def test_const_pointer_is_an_input_even_when_cast_away() -> None:
    text = ("__global__ void k(const float* x, float* y) { y[0] = x[0]; }\n"
            "void host() { float *x, *y; cudaMalloc(&x, 4); cudaMalloc(&y, 4); k<<<1, 1>>>(x, y); }\n")
    assert [a.role for a in spec_of(text, "k").args] == [Role.IN, Role.OUT]


# ------------------------------------------------------------------------------------ annotations


def test_annotation_overrides_inference_field_by_field() -> None:
    src, _ = load("host_launch.cu")
    text = src.text.replace(
        "__global__ void axpy(",
        "// @warpforge size n = 1000 odd=999\n// @warpforge arg y: out float[n]\n"
        "// @warpforge launch grid=cdiv(n, 128), block=128\n// @warpforge tol rtol=1e-3\n"
        "__global__ void axpy(", 1)
    spec = spec_of(text, "axpy")
    assert [(s.name, s.expr, s.odd, s.source) for s in spec.sizes] == [("n", "1000", "999", "annotation")]
    assert [(a.name, a.role.value, a.source) for a in spec.args] == [
        ("x", "in", "inferred"), ("y", "out", "annotation"), ("a", "scalar", "inferred"), ("n", "scalar", "inferred")]
    assert spec.launch.source == "annotation" and spec.launch.line == 12
    assert spec.tolerance == (1e-3, 0.0, 0.0)
    r = spec.resolve()
    assert r.sizes == {"n": 1000} and r.grid == (8, 1, 1) and r.args[0].count == 1000
    p = spec.resolve(perturbed=True)
    assert p.sizes == {"n": 999} and p.grid == (8, 1, 1) and p.args[3].value == 999


ANNOTATED = """// A templated kernel.
{lines}
template <typename T, int BS = 128>
__global__ void k(const T* x, T* y, float a, int n) {{ int i = threadIdx.x; if (i < n) y[i] = a * x[i]; }}
"""
GOOD = [
    "// @warpforge size N = 1 << 20",
    "// @warpforge arg x: in float[N]",
    "// @warpforge arg y: out float[N]",
    "// @warpforge arg a = 2",
    "// @warpforge arg n = N",
    "// @warpforge launch grid=cdiv(N, 256), block=256",
    "// @warpforge template T=float",
]


def annotated(*changes: tuple[int, str | None], extra: tuple[str, ...] = ()) -> str:
    lines: list[str | None] = list(GOOD)
    for i, new in changes:
        lines[i] = new
    return ANNOTATED.format(lines="\n".join([x for x in lines if x is not None] + list(extra)))


def test_the_good_annotation() -> None:
    spec = spec_of(annotated(), "k")
    assert spec.template_args == ("float", "128")
    assert [(a.name, a.role.value, a.dtype, a.line) for a in spec.args] == [
        ("x", "in", "float32", 3), ("y", "out", "float32", 4), ("a", "scalar", "float32", 5),
        ("n", "scalar", "int32", 6)]
    assert spec.resolve().grid == (4096, 1, 1)


ERRORS = [
    # (changes, extra lines, line of the error, words of the message, words of the fix)
    ([(0, "// @warpforge sise N = 1")], (), 2, "unknown @warpforge directive `sise`: did you mean `size`?",
     "write `size N = 1`"),
    ([(1, "// @warpforge arg x: input float[N]")], (), 3, "unknown role `input` for `x`", "write in, out or inout"),
    ([(1, "// @warpforge arg x: in floatt[N]")], (), 3, "unknown element type `floatt`", "write a C or numpy type"),
    ([(1, "// @warpforge arg z: in float[N]")], (), 3, "`z` is not a parameter of `k`",
     "its parameters are: x, y, a, n"),
    ([(3, "// @warpforge arg a: in float[N]")], (), 5, "`a` is a scalar parameter (float a)", "write `arg a = VALUE`"),
    ([(1, "// @warpforge arg x = 3")], (), 3, "`x` is a pointer parameter (const T* x)",
     "write `arg x: in|out|inout TYPE[COUNT]`"),
    ([(2, "// @warpforge arg y: out float[N] uniform(0, 1)")], (), 4, "`y` is an output",
     "drop the distribution, or make it `inout`"),
    ([(1, "// @warpforge arg x: in float[N] uniform(1, 1)")], (), 3, "`uniform(1, 1)` is an empty range",
     "the second number must be larger"),
    ([(1, "// @warpforge arg x: in float[N] int(N, 2)")], (), 3, "`int(N, 2)` of `x` is an empty range",
     "the second number must be larger"),
    ([(1, "// @warpforge arg x: in float[N] gauss(0, 1)")], (), 3, "unknown value distribution `gauss(0, 1)`",
     "write uniform(LO, HI), normal(MEAN, STD)"),
    ([(1, "// @warpforge arg x: in float[N] normal(0, -1)")], (), 3, "negative standard deviation",
     "write normal(0, 1)"),
    ([(1, "// @warpforge arg x: in float[N] const(1, 2)")], (), 3, "`const` takes 1 number, got 2",
     "write e.g. const(0)"),
    ([(1, "// @warpforge arg x: in float[]")], (), 3, "`x` has no length", "write `arg x: in float[N]`"),
    ([(1, "// @warpforge arg x: in float[N] align=3")], (), 3, "alignment 3 is not a power of two", "align=16"),
    ([(1, "// @warpforge arg x: in float[N - (1 << 21)]")], (), 3, "length of `x` is negative",
     "make the length expression positive"),
    ([(1, "// @warpforge arg x: in float[N - (1 << 20)]")], (), 3, "`x` has length 0", "give it a positive length"),
    ([(1, "// @warpforge arg x: in float[M]")], (), 3, "length of `x`: unknown name `M`",
     "`// @warpforge size M = ...` or use one of: N"),
    ([(5, "// @warpforge launch grid=cdiv(M, 256), block=256")], (), 7, "grid: unknown name `M`",
     "`// @warpforge size M = ...`"),
    ([(5, "// @warpforge launch grid=cdiv(N, 256)")], (), 7, "launch has no block",
     "write `launch grid=..., block=...`"),
    ([(5, "// @warpforge launch grid=cdiv(N, 256), threads=256")], (), 7, "cannot read `threads=256` in launch",
     "write `launch grid=(N + 255) / 256, block=256"),
    ([(5, "// @warpforge launch grid=(1, 2, 3, 4), block=256")], (), 7, "grid has 4 dimensions",
     "use at most 3: (x, y, z)"),
    ([(5, "// @warpforge launch grid=1, block=(64, 32)")], (), 7, "block (64, 32, 1) has 2048 threads",
     "at most 1024 threads per block"),
    ([(5, "// @warpforge launch grid=N / (1 << 21), block=256")], (), 7, "grid (0, 1, 1) has a dimension below 1",
     "round up, e.g. `cdiv(N, 256)`"),
    ([(5, "// @warpforge launch grid=(N + 1, block=256")], (), 7, "unbalanced parentheses in `launch grid=(N + 1",
     "close every `(`"),
    ([], ("// @warpforge tol rtol=abc",), 9, "rtol: expected a number, got `abc`", "write e.g. `rtol=1e-4`"),
    ([], ("// @warpforge tol eps=1",), 9, "cannot read `eps=1` in tol", "write `tol rtol=1e-4 atol=1e-5`"),
    ([], ("// @warpforge tol rtol=-1e-3",), 9, "rtol must not be negative", "write rtol=1e-3"),
    ([], ("// @warpforge tol",), 9, "tol gives no tolerance", "write `tol rtol=1e-4 atol=1e-5`"),
    ([], ("// @warpforge arg x: in float[N]",), 9, "argument `x` is described twice",
     "keep one `@warpforge arg` line per argument"),
    ([(6, "// @warpforge template float, 128, 3")], (), 8, "`k` takes 2 template arguments (T, BS)",
     "write `template T=..., BS=...`"),
    ([(6, "// @warpforge template U=float")], (), 8, "unknown template parameter(s) U", "`k` has: T, BS"),
    ([(6, "// @warpforge template BS=64")], (), 8, "template parameter `T` has no value", "add `T=...`"),
    # the fix proposes guesses (`spec.guess`): a type float, a value its default (`int BS = 128`)
    ([(6, None)], (), 8, "`k` is a template and no launch instantiates it",
     "add above the kernel: `// @warpforge template T=float, BS=128`"),
    ([(0, "// @warpforge size N = 1 <<")], (), 2, "size `N`: the expression ends where a value was expected",
     "write a C-like arithmetic expression"),
    ([(0, "// @warpforge size N = fixed")], (), 2, "size `N` has no value", "write `size N = 4096`"),
    ([(0, "// @warpforge size N")], (), 2, "cannot read `size N`", "write `size N = 1 << 20`"),
    ([(0, "// @warpforge size N = 1 << 20 odd=M")], (), 2, "odd size of `N`: unknown name `M`",
     "`// @warpforge size M = ...`"),
    ([], ("// @warpforge seeds a, b",), 9, "seeds must be integers, got `a, b`", "write `seeds 0, 1, 2`"),
    ([], ("// @warpforge tune BS =",), 9, "cannot read `tune BS =`", "write `tune NAME = V1, V2, ...`"),
    ([], ("// @warpforge tune N = 1, 2",), 9, "`N` is both a size and a tunable", "keep one of them"),
    ([], ("// @warpforge flops 2 *",), 9, "flops: the expression ends", "write a C-like arithmetic expression"),
    ([], ("// @warpforge flops 2 * Q",), 9, "flops: unknown name `Q` in `2 * Q`", "`// @warpforge size Q = ...`"),
    ([], ("// @warpforge bytes N * sizeof(T)",), 9, "bytes: `sizeof` does not know the type `T`",
     "write a C-like arithmetic expression"),
    ([(2, None)], (), 8, "cannot infer the length of `y`: no launch of `k` in this file",
     "add above the kernel: `// @warpforge arg y: out float[N]`"),
    ([(4, None)], (), 8, "cannot infer the value of `n`: no launch of `k` in this file",
     "add above the kernel: `// @warpforge arg n = N`"),
    ([(5, None)], (), 8, "cannot infer the launch configuration of `k`: no launch of `k` in this file",
     "add above the kernel: `// @warpforge launch grid=cdiv(N, 256), block=256`"),
    # What no GPU can launch, at the line that says it (issue 14: these used to fail in the worker).
    ([], ("// @warpforge size N = 4096",), 9, "size `N` is defined twice (first at line 2)",
     "keep one `@warpforge size` line per name"),
    ([(0, "// @warpforge size N = 1 << 62")], (), 7, "grid.x = 18014398509481984 is above CUDA's limit of 2147483647",
     "loop inside the kernel (grid-stride)"),
    ([(0, "// @warpforge size N = 1 << 63")], (), 2, "size `N` = 9223372036854775808 does not fit in 64 bits",
     "e.g. `1 << 24`"),
    ([(5, "// @warpforge launch grid=(1, 70000), block=256")], (), 7, "grid.y = 70000 is above CUDA's limit of 65535",
     "grid-stride"),
    ([(5, "// @warpforge launch grid=1, block=(1, 1, 128)")], (), 7, "block.z = 128 is above CUDA's limit of 64",
     "use at most 64 threads along z"),
    ([(5, "// @warpforge launch grid=1, block=256, smem=1 << 40")], (), 7,
     "dynamic shared memory of 1099511627776 bytes is above the 232448 bytes (227.0 KiB) a block can have on sm_90 "
     "(no GPU known)", "use less shared memory per block"),
    ([(5, "// @warpforge launch grid=1, block=256, smem=-4")], (), 7, "dynamic shared memory is negative (-4)",
     "give `smem=` a byte count of 0 or more"),
    ([(4, "// @warpforge arg n = 1 << 31")], (), 6, "`n` = 2147483648 does not fit its C type (int32: -2147483648 to "
     "2147483647)", "declare the parameter with a wider type"),
    ([(4, "// @warpforge arg n = -(1 << 31) - 1")], (), 6, "`n` = -2147483649 does not fit its C type",
     "give a smaller value"),
    ([(3, "// @warpforge arg a = 1e39")], (), 5, "`a` = 1e+39 is beyond the largest float32", "a value the type"),
]


@pytest.mark.parametrize(("changes", "extra", "line", "message", "fix"), ERRORS,
                         ids=[e[3][:40] for e in ERRORS])
def test_annotation_errors_name_the_line_and_the_fix(
    changes: list[tuple[int, str | None]], extra: tuple[str, ...], line: int, message: str, fix: str
) -> None:
    e = error_of(annotated(*changes, extra=extra), "k")
    text = str(e)
    assert "\n" not in text
    assert (e.file, e.line) == ("t.cu", line)
    assert text.startswith(f"t.cu:{line}: ")
    assert message in e.message, text
    assert e.fix is not None and fix in e.fix, text
    assert text.endswith(f"; {e.fix}")


def test_other_comment_lines_in_the_block_are_ignored() -> None:
    text = annotated(extra=("// A note: @warpforge lines above; this one has no directive mark",
                            "//   indented prose", "//"))
    assert spec_of(text, "k").resolve().sizes == {"N": 1 << 20}
    src = SourceText(text)
    k = parse(text).kernel("k")
    assert k is not None
    assert parse_annotation(src, k, "t.cu").present


# --------------------------------------------------------------------------------- sizes and perturbation


@pytest.mark.parametrize(
    ("v", "want"),
    [(1, 1), (2, 2), (3, 1), (10, 9), (11, 9), (100, 89), (1024, 921), (1 << 20, 943719), (1 << 24, 15099495)],
)
def test_perturb_is_smaller_and_odd(v: int, want: int) -> None:
    assert perturb(v) == want
    assert want <= v and (want % 2 == 1 or v <= 2)


def test_fixed_and_odd_sizes() -> None:
    text = annotated((0, "// @warpforge size N = 4096 fixed"), extra=(
        "// @warpforge size M = 1000 odd=M / 2 + 1", "// @warpforge size P = 3 * 7",
        "// @warpforge size F = 1.5"))
    spec = spec_of(text, "k")
    assert [(s.name, s.fixed, s.odd) for s in spec.sizes] == [("N", True, None), ("M", False, "M / 2 + 1"),
                                                              ("P", False, None), ("F", False, None)]
    assert spec.symbolic
    assert spec.resolve().sizes == {"N": 4096, "M": 1000, "P": 21, "F": 1.5}
    assert spec.resolve(perturbed=True).sizes == {"N": 4096, "M": 501, "P": 19, "F": 1.5}
    only_fixed = spec_of(annotated((0, "// @warpforge size N = 4096 fixed")), "k")
    assert not only_fixed.symbolic


def test_resolve_tunables_seeds_and_work() -> None:
    text = annotated((5, "// @warpforge launch grid=cdiv(N, BS), block=BS, smem=BS * sizeof(float)"),
                     extra=("// @warpforge tune BS = 128, 256, 512", "// @warpforge seeds 7, 8",
                            "// @warpforge flops 2 * N", "// @warpforge bytes 3 * N * sizeof(float)"))
    spec = spec_of(text, "k")
    r = spec.resolve()
    assert (r.grid, r.block, r.smem, r.defines) == ((8192, 1, 1), (128, 1, 1), 512, {"BS": "128"})
    assert (r.flops, r.bytes, r.threads) == (2.0 * (1 << 20), 12.0 * (1 << 20), 128)
    r = spec.resolve(tunables={"BS": "512"})
    assert (r.grid, r.block, r.smem, r.defines) == ((2048, 1, 1), (512, 1, 1), 2048, {"BS": "512"})
    assert spec.seeds == (7, 8)


def test_launch_tuples_and_single_parenthesized_expressions() -> None:
    cases = {
        "grid=(N + 255) / 256, block=256": (("(N + 255) / 256",), ("256",)),
        "grid=(N / 32, 4), block=(32, 8)": (("N / 32", "4"), ("32", "8")),
        "grid=(N + 1) * (2), block=(16)": (("(N + 1) * (2)",), ("(16)",)),
        "grid=(min(N, 4), max(2, 3)), block=dim3(8, 8, 2)": (("min(N, 4)", "max(2, 3)"), ("8", "8", "2")),
        "grid=dim3(cdiv(N, 256)), block=256": (("cdiv(N, 256)",), ("256",)),
    }
    for launch, (grid, block) in cases.items():
        spec = spec_of(annotated((5, f"// @warpforge launch {launch}")), "k")
        assert (spec.launch.grid, spec.launch.block) == (grid, block), launch
        spec.resolve()


# ------------------------------------------------------------------------------- round trips and JSON


def _round_trip(text: str, kernel: str) -> None:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    spec = build_spec(src, model, k, "t.cu")
    block = spec.to_annotation()
    assert all(line.startswith("// @warpforge ") for line in block.splitlines())
    # Replace the kernel's block (if any) by the printed one and parse again.
    lines = text.split("\n")
    keep = [ln for i, ln in enumerate(lines) if "@warpforge" not in ln]
    start = next(i for i, ln in enumerate(keep) if re.search(rf"\b{kernel}\(", ln) and "__global__" in ln)
    while start > 0 and keep[start - 1].startswith("template"):
        start -= 1
    rewritten = "\n".join(keep[:start]) + ("\n" if start else "") + block + "\n".join(keep[start:])
    again = spec_of(rewritten, kernel)
    assert again.spec_hash() == spec.spec_hash(), (block, again.to_annotation())
    assert again.to_annotation() == block
    assert all(a.source == "annotation" for a in again.args)


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_annotation_round_trip_of_reference_kernels(path: Path) -> None:
    src, model = load(path)
    _round_trip(src.text, model.kernels[0].name)


@pytest.mark.parametrize("kernel", ["axpy", "square", "histogram", "row_scale", "tscale"])
def test_annotation_round_trip_of_inferred_specs(kernel: str) -> None:
    src, _ = load("host_launch.cu")
    _round_trip(src.text, kernel)


def test_annotation_round_trip_of_everything() -> None:
    text = annotated((0, "// @warpforge size N = 1 << 20 odd=N / 3"),
                     (1, "// @warpforge arg x: in half[N] normal(0, 0.5) align=64"),
                     (2, "// @warpforge arg y: out half[N]"),
                     (5, "// @warpforge launch grid=(cdiv(N, 256), 2), block=(128, 2), smem=1024"),
                     (6, "// @warpforge template T=__half, BS=64"),
                     extra=("// @warpforge size C = 8 fixed", "// @warpforge tol rtol=0.001 atol=1e-06",
                            "// @warpforge tune U = 1, 2, 4", "// @warpforge seeds 3, 4, 5, 6",
                            "// @warpforge flops N * C", "// @warpforge bytes 2 * N"))
    _round_trip(text, "k")
    spec = spec_of(text, "k")
    assert spec.template_args == ("__half", "64")
    block = spec.to_annotation()
    assert "// @warpforge arg x: in half[N] normal(0, 0.5) align=64\n" in block
    assert "// @warpforge arg y: out half[N]\n" in block  # `T* y` with T=__half: half elements
    assert "// @warpforge size C = 8 fixed\n" in block and "// @warpforge size N = 1 << 20 odd=N / 3\n" in block


def test_spec_hash_ignores_where_the_spec_came_from() -> None:
    a = fixture_spec("axpy")
    moved = "\n\n\n" + load("host_launch.cu")[0].text
    b = spec_of(moved, "axpy", file="elsewhere.cu")
    assert a.spec_hash() == b.spec_hash() and a.args[0].line != b.args[0].line
    changed = spec_of(load("host_launch.cu")[0].text.replace("int n = 1 << 24;", "int n = 1 << 23;"), "axpy")
    assert changed.spec_hash() != a.spec_hash()


def test_to_json_is_plain_data() -> None:
    spec = load_spec(Path(KERNEL_FILES[0]).parent / "reduce_sum.cu", "reduce_sum")
    d = json.loads(json.dumps(spec.to_json()))
    assert d["kernel"] == "reduce_sum"
    assert d["sizes"] == [{"name": "N", "expr": "1 << 24", "fixed": False, "odd": None, "source": "annotation",
                           "line": 13}]
    assert d["args"][1] == {"name": "out", "role": "inout", "dtype": "float32", "count": "1", "value": None,
                            "distribution": "zeros", "align": 16, "source": "annotation", "line": 16, "tol": None}
    assert d["launch"]["grid"] == ["cdiv(N, BLOCK_SIZE)"] and d["tolerance"] == [1e-4, 1e-5, 0.0]
    assert d["tunables"][0]["values"] == ["256", "128", "512", "1024"]
    assert d["seeds"] == [0, 1, 2] and d["flops"] == "N" and d["bytes"] == "N * sizeof(float)"


# ------------------------------------------------------------------------------- guesses and loading


def test_guess_spec_when_inference_fails_still_parses() -> None:
    src, model = load("host_launch.cu")
    k = model.kernel("no_launch")
    assert k is not None
    with pytest.raises(SpecError, match="no launch of `no_launch`"):
        build_spec(src, model, k, "host_launch.cu")
    guess = guess_spec(src, model, k, "host_launch.cu")
    assert guess.notes == ("guessed: check every line",)
    # the error's proposal: the kernel's own `n` as the size (the 2^22-element problem budget), `x += 1` reads x
    # first (inout)
    assert guess.to_annotation() == (
        "// @warpforge size n = 1 << 22\n"
        "// @warpforge arg x: inout float[n] uniform(-1, 1)\n"
        "// @warpforge arg n = n\n"
        "// @warpforge launch grid=cdiv(n, 256), block=256\n")
    assert {a.source for a in guess.args} == {"guessed"} and guess.launch.source == "guessed"
    text = src.text.replace("__global__ void no_launch(", guess.to_annotation() + "__global__ void no_launch(")
    assert spec_of(text, "no_launch").spec_hash() == guess.spec_hash()


def test_guess_spec_keeps_what_is_known() -> None:
    text = annotated((2, None), (4, None), (5, None))
    guess = guess_spec(SourceText(text), parse(text), parse(text).kernels[0], "t.cu")
    assert [(a.name, a.source) for a in guess.args] == [("x", "annotation"), ("y", "guessed"), ("a", "annotation"),
                                                        ("n", "guessed")]
    assert guess.template_args == ("float", "128")
    rewritten = "\n".join(ln for ln in text.split("\n") if "@warpforge" not in ln)
    rewritten = rewritten.replace("template <", guess.to_annotation() + "template <", 1)
    assert spec_of(rewritten, "k").spec_hash() == guess.spec_hash()


def test_load_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the file"):
        load_spec(tmp_path / "missing.cu", "k")
    with pytest.raises(KernelNotFound, match=r"saxpy.cu: no __global__ kernel named `nope` \(kernels here: saxpy\)"):
        load_spec(Path(KERNEL_FILES[0]).parent / "saxpy.cu", "nope")


# ------------------------------------------------------------------------------------ launch limits
def test_limits_come_from_the_target_gpu() -> None:
    from warpforge.spec.limits import DEFAULT_LIMITS, limits_for_arch

    assert DEFAULT_LIMITS.smem_per_block == 227 * 1024 and DEFAULT_LIMITS.source == "sm_90 (no GPU known)"
    assert [limits_for_arch(a).smem_per_block // 1024 for a in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90a",
                                                                "sm_100", "sm_120", "sm_61")] == [
        64, 163, 99, 99, 227, 227, 99, 48]
    assert limits_for_arch("sm_88").smem_per_block == 163 * 1024  # between entries: the one below (sm_87)
    src = SourceText(annotated((5, "// @warpforge launch grid=cdiv(N, 256), block=256, smem=100 * 1024")))
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    assert build_spec(src, model, k, "t.cu").resolve().smem == 102400  # fits sm_90
    with pytest.raises(SpecError, match=r"t.cu:7: dynamic shared memory of 102400 bytes is above the 101376 bytes "
                                        r"\(99.0 KiB\) a block can have on NVIDIA A10 \(sm_86\)"):
        build_spec(src, model, k, "t.cu", limits_for_arch("sm_86", gpu="NVIDIA A10"))


def test_buffers_beyond_the_gpu_memory_are_refused_only_when_the_gpu_is_known() -> None:
    from warpforge.spec.limits import limits_for_arch

    src = SourceText(annotated((0, "// @warpforge size N = 1 << 31"), (4, "// @warpforge arg n = 1")))  # 16 GiB
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    build_spec(src, model, k, "t.cu")
    build_spec(src, model, k, "t.cu", limits_for_arch("sm_90", gpu="NVIDIA H100", memory_bytes=80 << 30))
    with pytest.raises(SpecError, match=r"t.cu:3: the buffers need 16.0 GiB, more than the 8.0 GiB of NVIDIA "
                                        r"small \(sm_90\)"):
        build_spec(src, model, k, "t.cu", limits_for_arch("sm_90", gpu="NVIDIA small", memory_bytes=8 << 30))


def test_limits_are_checked_at_the_perturbed_size_too() -> None:
    # The odd size is larger here (odd=): the launch fits at the spec size and not at the perturbed one.
    e = error_of(annotated((0, "// @warpforge size N = 1 << 20 odd=1 << 40"),
                           (5, "// @warpforge launch grid=cdiv(N, 256), block=256")), "k")
    assert e.line == 7 and "grid.x = 4294967296 at the perturbed size is above CUDA's limit" in e.message


def test_numbers_are_written_as_people_write_them_and_a_complete_spec_is_left_alone() -> None:
    from warpforge.spec.annotations import annotation_edits
    from warpforge.spec.model import number_text

    assert [number_text(x) for x in (1e-5, 1e-4, 2e-3, 0.05, 2.0, 0.0, 1.5e-7, 1e6)] == [
        "1e-5", "1e-4", "2e-3", "0.05", "2", "0", "1.5e-7", "1e6"]
    # A user's complete block, its lines in their own order and spacing: no edit (it used to come back with
    # `tol rtol=1e-05` and the document marked dirty).
    text = (ROOT / "kernels" / "reduce_sum.cu").read_text()
    src, model = SourceText(text), parse(text)
    k = model.kernels[0]
    spec = build_spec(src, model, k, "reduce_sum.cu")
    assert annotation_edits(src, k, spec.to_annotation()) == []
    respaced = text.replace("// @warpforge tol rtol=1e-4 atol=", "// @warpforge tol rtol = 1e-4  atol = ", 1)
    assert respaced != text
    assert annotation_edits(SourceText(respaced), parse(respaced).kernels[0], spec.to_annotation()) == []
    # A block that says something else is written.
    changed = spec.to_annotation().replace("uniform(0, 1)", "uniform(0, 2)")
    assert changed != spec.to_annotation() and annotation_edits(src, k, changed)
