"""The CUDA source model on realistic files: kernels, declarations, launch sites, recovery from syntax
errors, UTF-16 positions, the kernel at a position, and byte-exact rewrites."""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, KERNEL_FILES, apply_lsp, load, lsp_position
from warpforge.cuda import (
    DeclKind,
    FileModel,
    Kernel,
    KernelNotFound,
    Position,
    SourceText,
    Span,
    kernel_at_position,
    parse,
)
from warpforge.cuda import rewrite as rw
from warpforge.cuda.access import param_access
from warpforge.cuda.parser import parse_tree
from warpforge.cuda.tree import node_text, walk


def kernel(model: FileModel, name: str) -> Kernel:
    k = model.kernel(name)
    assert k is not None, f"no kernel {name} in {[k.qualified_name for k in model.kernels]}"
    return k


# ------------------------------------------------------------------------------------ features.cu

FEATURE_KERNELS = [
    # qualified name, first line, last line (1-based), extern "C", launch bounds, template parameters
    ("block_sum", 21, 34, False, None, (("T", "type", "typename", None), ("BLOCK", "value", "int", "256"))),
    ("scale", 36, 40, True, ("256",), ()),
    ("add_pairs", 43, 47, True, ("128", "4"), ()),
    ("zero", 49, 53, True, None, ()),
    ("ops::detail::clustered", 59, 63, False, ("256", "2", "1"), ()),
    ("ops::fill", 67, 72, False, None, (("T", "type", "typename", None),)),
    ("tiled_copy", 76, 86, False, None, ()),
    ("apply", 88, 93, False, None, (("F", "type", "typename", None),)),
]


def test_features_finds_every_kernel_with_its_attributes() -> None:
    _, model = load("features.cu")
    got = [
        (k.qualified_name, k.start_line + 1, k.end_line + 1, k.extern_c,
         k.launch_bounds.args if k.launch_bounds else None,
         tuple((t.name, t.kind, t.type, t.default) for t in k.template_params))
        for k in model.kernels
    ]
    assert got == FEATURE_KERNELS
    # The grammar's gaps (__align__, 3-argument __launch_bounds__, extended lambdas) are not errors.
    assert model.problems == ()
    assert not any(k.recovered for k in model.kernels)


def test_features_parameters() -> None:
    _, model = load("features.cu")
    params = {
        k.qualified_name: [(p.name, p.type, p.pointer_depth, p.is_const, p.is_restrict) for p in k.params]
        for k in model.kernels
    }
    assert params["block_sum"] == [("in", "T", 1, True, True), ("out", "T", 1, False, False),
                                   ("n", "int", 0, False, False)]
    assert params["add_pairs"][0] == ("p", "Pair", 1, True, False)
    assert params["ops::detail::clustered"] == [("y", "float", 1, False, True), ("x", "float", 1, True, True),
                                                ("n", "int", 0, False, False)]
    assert params["ops::fill"] == [("out", "T", 1, False, False), ("v", "T", 0, False, False),
                                   ("n", "int", 0, False, False)]
    assert params["apply"][2] == ("f", "F", 0, False, False)
    clustered = kernel(model, "clustered")
    assert clustered.namespace == ("ops", "detail")
    assert clustered.launch_bounds is not None
    assert (clustered.launch_bounds.max_threads, clustered.launch_bounds.min_blocks) == ("256", "2")


def test_features_spans_are_byte_exact() -> None:
    src, model = load("features.cu")
    text = src.text
    for k in model.kernels:
        whole = src.slice(k.span)
        assert whole.endswith("}")
        assert src.slice(k.body_span).startswith("{") and src.slice(k.body_span).endswith("}")
        assert src.slice(k.name_span) == k.name
        assert src.slice(k.params_span).startswith("(") and src.slice(k.params_span).endswith(")")
        assert src.slice(k.signature_span).endswith(src.slice(k.params_span))
        assert src.slice(k.definition_span).startswith("__global__")
        assert k.span.contains_span(k.definition_span) and k.definition_span.contains_span(k.body_span)
        for p in k.params:
            assert src.slice(p.span) == p.text
            assert src.slice(p.name_span) == p.name
        # Lines agree with the spans.
        assert src.line_of(k.span.start) == k.start_line and src.line_of(k.span.end - 1) == k.end_line
    assert src.slice(kernel(model, "block_sum").span).startswith("template <typename T, int BLOCK = 256>\n")
    assert src.slice(kernel(model, "scale").span).startswith('extern "C" __global__ void __launch_bounds__(256)')
    # A kernel of an `extern "C" { ... }` block: the block is not part of its span.
    assert src.slice(kernel(model, "zero").span).startswith("__global__ void zero(")
    assert text.count("__global__") == len(model.kernels) + 2  # plus the two forward declarations


def test_forward_declarations_are_not_kernels() -> None:
    _, model = load("features.cu")
    assert [k.name for k in model.kernels].count("scale") == 1
    assert [k.name for k in model.kernels].count("fill") == 1
    assert kernel(model, "scale").start_line + 1 == 36  # the definition, not the declaration at line 18
    forward = [(d.names, d.kind) for d in model.declarations if d.names in (("scale",), ("fill",))]
    assert forward == [(("scale",), DeclKind.DEVICE_FUNCTION), (("fill",), DeclKind.TYPE)]


def test_declarations_includes_and_macros() -> None:
    src, model = load("features.cu")
    decls = [(d.kind, d.names, src.line_of(d.span.start) + 1) for d in model.declarations]
    assert (DeclKind.MACRO, ("TILE",), 7) in decls
    assert (DeclKind.MACRO, ("CHECK",), 8) in decls
    # `struct __align__(16) Pair` would be an ERROR for the grammar; it is a type here.
    assert (DeclKind.TYPE, ("Pair",), 10) in decls
    assert (DeclKind.HOST_FUNCTION, ("run_all",), 95) in decls
    assert [(i.path, i.system) for i in model.includes] == [
        ("cstdio", True), ("cuda_runtime.h", True), ("cuda_fp16.h", False)]
    assert "Pair" in kernel(model, "add_pairs").uses
    assert "TILE" in kernel(model, "tiled_copy").uses


def test_what_kernels_need_helpers_globals_macros_and_types() -> None:
    src, model = load("deps.cu")
    assert model.problems == ()
    decls = [(d.kind, d.names, d.space, d.namespace, d.conditional is not None, src.line_of(d.span.start) + 1)
             for d in model.declarations]
    assert decls == [
        (DeclKind.MACRO, ("RADIUS",), "", (), True, 7),  # inside `#ifndef RADIUS`
        (DeclKind.MACRO, ("WIDTH",), "", (), False, 10),
        (DeclKind.MACRO, ("SQR",), "", (), False, 11),
        (DeclKind.GLOBAL, ("c_weights",), "__constant__", (), False, 13),
        (DeclKind.GLOBAL, ("d_counter",), "__device__", (), False, 14),
        (DeclKind.TYPE, ("real",), "", (), False, 16),
        (DeclKind.TYPE, ("Params",), "", (), False, 18),
        (DeclKind.TYPE, ("Mode", "MODE_PLAIN", "MODE_SQUARED"), "", (), False, 23),
        (DeclKind.DEVICE_FUNCTION, ("affine",), "", (), False, 25),
        (DeclKind.DEVICE_FUNCTION, ("transform",), "", (), False, 31),
        (DeclKind.HOST_FUNCTION, ("clamp01",), "", (), False, 39),
        (DeclKind.DEVICE_FUNCTION, ("clamp01",), "", ("math",), False, 47),
        (DeclKind.HOST_FUNCTION, ("main",), "", (), False, 95),
    ]
    conditional = model.declarations[0].conditional
    assert conditional is not None
    assert src.slice(conditional) == "#ifndef RADIUS\n#define RADIUS 3\n#endif"
    stencil = kernel(model, "stencil")
    assert {"RADIUS", "c_weights", "real", "min", "max"} <= stencil.uses
    assert {"transform", "d_counter", "Params", "Mode", "atomicAdd"} <= kernel(model, "transform_all").uses
    assert [(s.kernel, s.function, s.line + 1) for s in model.launch_sites] == [
        ("stencil", "main", 104), ("transform_all", "main", 106), ("clamp_all", "main", 107),
        ("block_reduce", "main", 108)]


def test_nested_namespaces_with_and_without_recovery() -> None:
    text = ("namespace a::b {\n__global__ void k(float* x) { x[0] = 1; }\n}\n"
            "namespace {\n__global__ void anon(float* x) { x[0] = 1; }\n}\n"
            "namespace outer { inline namespace v1 {\n__global__ void deep(float* x) { x[0] = 1; }\n} }\n")
    want = [(("a", "b"), "a::b::k"), ((), "anon"), (("outer", "v1"), "outer::v1::deep")]
    assert [(k.namespace, k.qualified_name) for k in parse(text).kernels] == want
    broken = parse("void f() { g(;\n" + text)
    assert all(k.recovered for k in broken.kernels)
    assert [(k.namespace, k.qualified_name) for k in broken.kernels] == want


def test_require_finds_plain_and_qualified_names_and_lists_the_rest() -> None:
    text = ("namespace a::b {\n__global__ void k(float* x) { x[0] = 1; }\n}\n"
            "__global__ void other(float* x) { x[0] = 2; }\n")
    model = parse(text)
    assert model.require("k") is model.require("a::b::k") is model.kernels[0]
    with pytest.raises(KernelNotFound) as e:
        model.require("nope", "x.cu")
    assert (e.value.file, e.value.name, e.value.kernels) == ("x.cu", "nope", ("k", "other"))
    assert str(e.value) == "x.cu: no __global__ kernel named `nope` (kernels here: k, other)"
    with pytest.raises(KernelNotFound, match=r"^no __global__ kernel named `k` \(kernels here: none\)$"):
        parse("").require("k")


def test_walk_is_pre_order_in_document_order_with_types_and_cut() -> None:
    data = b"__global__ void k(float* x) { if (a) { b(c); } d(e); }"
    root = parse_tree(data).root_node
    assert [node_text(n, data) for n in walk(root, ("identifier",))] == ["k", "x", "a", "b", "c", "d", "e"]
    assert [node_text(n, data) for n in walk(root, ("identifier",), cut=lambda n: n.type == "if_statement")] \
        == ["k", "x", "d", "e"]
    assert next(walk(root)) is root and node_text(next(walk(root, ("call_expression",))), data) == "b(c)"


def test_shared_memory_stays_inside_the_kernel() -> None:
    src, model = load("features.cu")
    tiled = kernel(model, "tiled_copy")
    body = src.slice(tiled.body_span)
    assert "__shared__ float tile[TILE][TILE + 1];" in body and "extern __shared__ float dyn[];" in body
    # Shared arrays are locals of the kernel, not file-scope globals.
    assert not [d for d in model.declarations if d.kind is DeclKind.GLOBAL]
    assert "partial" not in {n for d in model.declarations for n in d.names}


def test_launch_sites() -> None:
    _, model = load("features.cu")
    got = [(s.kernel, s.template_args, s.grid, s.block, s.smem, s.stream, s.args, s.function, s.line + 1)
           for s in model.launch_sites]
    assert got == [
        ("scale", (), "grid", "block", None, None, ("d_x", "2.0f", "n"), "run_all", 101),
        ("block_sum", ("float", "256"), "(n + 255) / 256", "256", "0", "stream", ("d_x", "d_out", "n"),
         "run_all", 102),
        ("add_pairs", (), "(n + 127) / 128", "128", "0", None, ("d_p", "d_out", "n"), "run_all", 103),
        ("clustered", (), "grid", "block", "0", "stream", ("d_y", "d_x", "n"), "run_all", 104),
        # A qualified template launch: `ops::fill<float><<<...>>>`.
        ("fill", ("float",), "grid", "block", None, None, ("d_out", "1.0f", "n"), "run_all", 105),
        ("tiled_copy", (), "tiles", "threads", "TILE * sizeof(float)", None, ("d_out", "d_x", "n"), "run_all", 108),
        ("apply", (), "grid", "block", None, None, ("d_x", "n", "[=] __device__ (float v) { return v * v; }"),
         "run_all", 109),
        ("zero", (), "grid", "block", "0", "stream", ("d_out", "n"), "run_all", 110),
    ]
    assert [s.line + 1 for s in model.launches_of("zero")] == [110]


@pytest.mark.parametrize(
    ("bounds", "args"),
    [
        ("__launch_bounds__(256)", ("256",)),
        ("__launch_bounds__(BS * 2)", ("BS * 2",)),
        ("__launch_bounds__(256, 2)", ("256", "2")),
        ("__launch_bounds__(256, 2, 1)", ("256", "2", "1")),
        ("__launch_bounds__(MAX(128, 64), 2, 1)", ("MAX(128, 64)", "2", "1")),
        ("__launch_bounds__( 1024 , 1 , 4 )", ("1024", "1", "4")),
    ],
)
def test_launch_bounds_forms(bounds: str, args: tuple[str, ...]) -> None:
    text = f"__global__ void {bounds} k(float* x)\n{{\n    x[threadIdx.x] = 1.0f;\n}}\n"
    model = parse(text)
    (k,) = model.kernels
    assert k.name == "k" and [p.name for p in k.params] == ["x"]
    assert k.launch_bounds is not None and k.launch_bounds.args == args
    assert SourceText(text).slice(k.launch_bounds.span) == bounds
    assert model.problems == ()


def test_extended_lambda_does_not_break_the_host_function() -> None:
    text = (
        "template <typename F> __global__ void apply(float* x, F f) { x[threadIdx.x] = f(x[threadIdx.x]); }\n"
        "void host(float* d_x) {\n"
        "    auto sq = [=] __host__ __device__ (float v) { return v * v; };\n"
        "    apply<<<1, 32>>>(d_x, [=] __device__ (float v) -> float { return v + 1.0f; });\n"
        "    apply<<<1, 32>>>(d_x, sq);\n"
        "}\n"
    )
    model = parse(text)
    assert model.problems == ()
    assert [k.name for k in model.kernels] == ["apply"]
    assert [(s.line, s.args[1]) for s in model.launch_sites] == [
        (3, "[=] __device__ (float v) -> float { return v + 1.0f; }"), (4, "sq")]


def test_launch_config_forms() -> None:
    text = (
        "__global__ void k(float* x, int n) { x[0] = n; }\n"
        "void host(float* d, int n, cudaStream_t s) {\n"
        "    dim3 g(n / 32, 4), b(32, 8);\n"
        "    k<<<g, b>>>(d, n);\n"
        "    k<<< dim3(n, 1, 1), dim3(256), 1024 /* bytes */, s >>>(d, /* count */ n);\n"
        "    k<<<(n + 255) / 256, 256, 0, s>>>(d, n);\n"
        "}\n"
    )
    sites = parse(text).launch_sites
    assert [(s.grid, s.block, s.smem, s.stream, s.args) for s in sites] == [
        ("g", "b", None, None, ("d", "n")),
        ("dim3(n, 1, 1)", "dim3(256)", "1024", "s", ("d", "n")),
        ("(n + 255) / 256", "256", "0", "s", ("d", "n")),
    ]


# ------------------------------------------------------------------------------- syntax errors


def _fixed_syntax_error_text() -> str:
    """syntax_error.cu with its host function repaired (4 bytes added, no line added or removed)."""
    text = (FIXTURES / "syntax_error.cu").read_text(encoding="utf-8")
    fixed = text.replace('printf("setting up %d\\n", n;', 'printf("setting up %d\\n", n);', 1)
    fixed = fixed.replace("i < n; i++ {", "i < n; i++) {", 1)
    fixed = fixed.replace("        d_x[i] = 0;\n}", "        d_x[i] = 0; }\n}", 1)
    assert len(fixed) == len(text) + 4 and fixed.count("\n") == text.count("\n")
    return fixed


SYNTAX_ERROR_KERNELS = [
    # qualified name, first line, last line, extern "C", template parameter names, launch bounds
    ("scale_after_error", 14, 20, False, [], None),
    ("templated_after_error", 22, 29, False, ["T", "N"], ("N",)),
    ("extern_after_error", 31, 35, True, [], None),
    ("ops::in_block", 39, 43, True, [], None),
    ("ops::namespaced", 49, 53, False, [], None),
    ("last", 56, 59, False, [], None),
]


def test_syntax_error_before_kernels_keeps_them_intact() -> None:
    src, model = load("syntax_error.cu")
    got = [(k.qualified_name, k.start_line + 1, k.end_line + 1, k.extern_c, [t.name for t in k.template_params],
            k.launch_bounds.args if k.launch_bounds else None) for k in model.kernels]
    assert got == SYNTAX_ERROR_KERNELS
    assert all(k.recovered for k in model.kernels)
    # One problem, where the error is (the unclosed call on line 8), not somewhere downstream.
    assert [(p.line + 1, p.message) for p in model.problems] == [(8, "syntax error: missing `)`")]
    assert src.slice(model.problems[0].span) == "" and src.line_text(model.problems[0].line).endswith("n;")
    # Comments and strings with `}` inside a recovered kernel do not cut it short.
    assert src.slice(kernel(model, "scale_after_error").body_span).rstrip().endswith("}\n}")
    assert kernel(model, "scale_after_error").comment_span is not None
    assert src.slice(kernel(model, "templated_after_error").span).startswith("template <typename T,\n          int N>")
    assert src.slice(kernel(model, "extern_after_error").span).startswith('extern "C"\n__global__')
    # The declaration after the error is not turned into a kernel.
    assert model.kernel("declared_only") is None


def test_recovered_kernels_equal_those_of_the_repaired_file() -> None:
    src, model = load("syntax_error.cu")
    fixed_text = _fixed_syntax_error_text()
    fixed_src = SourceText(fixed_text)
    fixed = parse(fixed_text)
    assert fixed.problems == () and not any(k.recovered for k in fixed.kernels)
    assert [k.qualified_name for k in fixed.kernels] == [k.qualified_name for k in model.kernels]
    for a, b in zip(model.kernels, fixed.kernels, strict=True):
        assert (a.start_line, a.end_line, a.extern_c, a.namespace) == (b.start_line, b.end_line, b.extern_c,
                                                                         b.namespace)
        assert a.span == b.span.shifted(-4) and a.body_span == b.body_span.shifted(-4)
        assert a.name_span == b.name_span.shifted(-4) and a.signature_span == b.signature_span.shifted(-4)
        assert src.slice(a.span) == fixed_src.slice(b.span)
        assert [p.text for p in a.params] == [p.text for p in b.params]
        assert [p.span for p in a.params] == [p.span.shifted(-4) for p in b.params]
        assert a.comment_span == (b.comment_span.shifted(-4) if b.comment_span else None)
        assert a.uses == b.uses
    # The launch after the broken function is still found.
    assert [(s.kernel, s.grid, s.line + 1) for s in model.launch_sites] == [
        ("scale_after_error", "(n + BLOCK - 1) / BLOCK", 63)]


BROKEN_SNIPPETS = [
    'void broken(int n) {\n    printf("%d", n;\n}\n',      # unclosed call
    "void broken(int n) {\n    if (n > 0 {\n        n++;\n}\n",  # unclosed paren and brace
    "void broken(int n) {\n    }\n}\n",                    # one brace too many
    "struct Half { int a;\n",                              # unclosed struct
    "void broken( {\n",                                    # garbage declarator
    "#if 0\nvoid f() {\n#endif\n",                         # unbalanced inside a conditional
    'const char* s = "__global__ void fake() {";\n// __global__ void fake2() {}\nint x = ;\n',
]


@pytest.mark.parametrize("snippet", BROKEN_SNIPPETS)
@pytest.mark.parametrize("before_line", [16, 35, 55, 74])
def test_any_error_before_a_kernel_keeps_the_kernels_after_it(snippet: str, before_line: int) -> None:
    clean_src, clean = load("features.cu")
    lines = clean_src.text.split("\n")
    text = "\n".join(lines[:before_line]) + "\n" + snippet + "\n".join(lines[before_line:])
    src = SourceText(text)
    model = parse(text)
    added = snippet.count("\n")
    got = {k.qualified_name: k for k in model.kernels}
    assert "fake" not in got and "fake2" not in got
    if snippet != "void broken(int n) {\n    }\n}\n":  # an extra `}` may legitimately close a namespace
        assert model.problems
    for want in clean.kernels:
        if want.start_line < before_line:
            continue
        if want.qualified_name not in got and snippet.startswith("void broken(int n) {\n    }"):
            continue  # the stray `}` closed `namespace ops` early, as it would for the compiler
        k = got[want.qualified_name]
        assert src.slice(k.span) == clean_src.slice(want.span)
        assert k.start_line == want.start_line + added
        assert k.extern_c == want.extern_c
        assert [t.name for t in k.template_params] == [t.name for t in want.template_params]
        assert (k.launch_bounds.args if k.launch_bounds else None) == (
            want.launch_bounds.args if want.launch_bounds else None)
        assert [p.text for p in k.params] == [p.text for p in want.params]


def test_kernels_in_comments_and_strings_are_not_recovered() -> None:
    text = (
        "void broken() { printf(\"x\";\n"
        "/* __global__ void in_comment(float* x) { } */\n"
        "const char* s = \"__global__ void in_string(float* x) { }\";\n"
        "__global__ void real(float* x) { x[0] = '}'; }\n"
    )
    model = parse(text)
    assert [k.name for k in model.kernels] == ["real"]


# ---------------------------------------------------------------------------------- every kernels/ file


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_reference_kernels_parse_cleanly(path: object) -> None:
    src, model = load(path)  # type: ignore[arg-type]
    assert model.problems == ()
    assert len(model.kernels) == 1
    (k,) = model.kernels
    assert k.comment_span is not None and "@warpforge" in src.slice(k.comment_span)
    assert src.slice(k.span).rstrip().endswith("}")
    assert re.search(rf"__global__ void {k.name}\(", src.slice(k.span))


# ------------------------------------------------------------------------------ unicode positions


def test_utf16_positions_round_trip_on_every_character() -> None:
    src, _ = load("unicode.cu")
    text = src.text
    assert "𝔽" in text and "🚀" in text  # astral-plane characters: 2 UTF-16 code units, 4 UTF-8 bytes
    offset = 0
    for ch in text + "\0":
        pos = src.position(offset)
        assert pos == lsp_position(text, offset)
        assert src.offset(pos) == offset
        offset += len(ch.encode("utf-8"))


def test_unicode_columns_of_kernels() -> None:
    src, model = load("unicode.cu")
    first = kernel(model, "first")
    # `/* 𝔽𝔽 */ ` is 11 UTF-16 code units (each 𝔽 is two) but 15 bytes.
    assert src.position(first.span.start) == Position(4, 11)
    assert first.span.start - src.line_starts[4] == 15
    assert src.position(first.name_span.start) == Position(4, 27)
    scale = kernel(model, "scale")
    assert src.position(scale.name_span.start) == Position(13, 16)
    assert scale.comment_span is not None
    assert src.range(scale.comment_span).start == Position(6, 0)
    assert src.range(scale.comment_span).end == Position(12, 49)
    # Past the end of a line clamps to the end of that line.
    assert src.offset(Position(0, 10_000)) == src.line_starts[1] - 1
    assert src.offset(Position(10_000, 0)) == len(src.data)


def test_kernel_at_offset_and_position() -> None:
    src, model = load("unicode.cu")
    first, scale = kernel(model, "first"), kernel(model, "scale")
    assert model.kernel_at(first.name_span.start) is first
    assert model.kernel_at(scale.body_span.start + 5) is scale
    assert model.kernel_at(scale.span.end) is scale  # right after the closing brace
    assert model.kernel_at(scale.comment_span.start) is scale  # type: ignore[union-attr]
    assert model.kernel_at(0) is None  # the file's header comment is not the block of a kernel
    # Positions are (line, UTF-16 column).
    assert kernel_at_position(src, model, Position(4, 11)) is first
    assert kernel_at_position(src, model, Position(4, 10)) is None  # the space before `__global__`
    assert kernel_at_position(src, model, Position(4, 27)) is first
    assert kernel_at_position(src, model, Position(5, 0)) is None  # the blank line between them
    assert kernel_at_position(src, model, Position(6, 3)) is scale  # in its comment block
    assert kernel_at_position(src, model, Position(15, 60)) is scale  # after `// ∀ i < n`
    assert kernel_at_position(src, model, Position(17, 1)) is scale
    assert kernel_at_position(src, model, Position(0, 5)) is None


# ------------------------------------------------------------------------------------- rewrites

REWRITE_SOURCE = """// 𝔽 ∑ — unicode before the kernel shifts bytes, not UTF-16 columns 🚀
/* Ω */ __global__ void k(float* a, const float* b, float* __restrict__ c, float *d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + c[i] + d[i];
}

template <int BS>
__global__ void __launch_bounds__(BS, 2, 1) t(float* x) { x[threadIdx.x] = BS; }
"""


def _apply(src: SourceText, *edits: rw.TextEdit | None) -> tuple[str, FileModel]:
    real = [e for e in edits if e is not None]
    out = rw.apply_edits(src, real)
    # An editor applying the same edits by their LSP ranges gets the same text.
    assert apply_lsp(src.text, [(e.range.start, e.range.end, e.new_text) for e in real]) == out
    for e in real:
        assert e.range.start == lsp_position(src.text, e.span.start)
        assert e.range.end == lsp_position(src.text, e.span.end)
    return out, parse(out)


def _param(model: FileModel, kname: str, pname: str) -> tuple[bool, bool, str]:
    p = kernel(model, kname).param(pname)
    assert p is not None
    return p.is_const, p.is_restrict, p.text


def test_add_and_remove_const_and_restrict() -> None:
    src = SourceText(REWRITE_SOURCE)
    k = kernel(parse(REWRITE_SOURCE), "k")
    _, m = _apply(src, rw.add_const(src, k, "a"))
    assert _param(m, "k", "a") == (True, False, "const float* a")
    _, m = _apply(src, rw.add_restrict(src, k, "a"))
    assert _param(m, "k", "a") == (False, True, "float* __restrict__ a")
    _, m = _apply(src, rw.add_restrict(src, k, "d"))
    assert _param(m, "k", "d") == (False, True, "float * __restrict__ d")
    _, m = _apply(src, rw.remove_const(src, k, "b"))
    assert _param(m, "k", "b") == (False, False, "float* b")
    _, m = _apply(src, rw.remove_restrict(src, k, "c"))
    assert _param(m, "k", "c") == (False, False, "float* c")
    # Several edits at once, on different parameters and on the same one.
    out, m = _apply(src, rw.add_const(src, k, "a"), rw.add_restrict(src, k, "a"), rw.add_restrict(src, k, "b"),
                    rw.add_const(src, k, "c"))
    assert [p.text for p in kernel(m, "k").params] == [
        "const float* __restrict__ a", "const float* __restrict__ b", "const float* __restrict__ c", "float *d",
        "int n"]
    assert out.startswith(REWRITE_SOURCE.split("\n", 1)[0])
    # Nothing to do -> None; unknown parameter -> KeyError naming it.
    assert rw.add_const(src, k, "b") is None and rw.remove_const(src, k, "a") is None
    assert rw.add_restrict(src, k, "c") is None and rw.remove_restrict(src, k, "a") is None
    with pytest.raises(KeyError, match="no parameter `zz`"):
        rw.add_const(src, k, "zz")


def test_restrict_goes_on_the_parameter_itself() -> None:
    text = "__global__ void k(float** g, float* __restrict__* h, float** __restrict__ r) { g[0][0] = 1; }\n"
    src = SourceText(text)
    k = kernel(parse(text), "k")
    assert [(p.name, p.pointer_depth, p.is_restrict) for p in k.params] == [
        ("g", 2, False), ("h", 2, False), ("r", 2, True)]
    _, m = _apply(src, rw.add_restrict(src, k, "g"))
    assert _param(m, "k", "g") == (False, True, "float** __restrict__ g")
    _, m = _apply(src, rw.remove_restrict(src, k, "r"))
    assert _param(m, "k", "r") == (False, False, "float** r")


def test_launch_bounds_rewrites() -> None:
    src = SourceText(REWRITE_SOURCE)
    model = parse(REWRITE_SOURCE)
    k, t = kernel(model, "k"), kernel(model, "t")
    out, m = _apply(src, rw.set_launch_bounds(src, k, 256))
    assert "__global__ void __launch_bounds__(256) k(" in out
    assert kernel(m, "k").launch_bounds.args == ("256",)  # type: ignore[union-attr]
    _, m = _apply(src, rw.set_launch_bounds(src, k, "BS", 4))
    assert kernel(m, "k").launch_bounds.args == ("BS", "4")  # type: ignore[union-attr]
    # Replacing the 3-argument form (a grammar gap) and removing it.
    out, m = _apply(src, rw.set_launch_bounds(src, t, 128, 1))
    assert "__global__ void __launch_bounds__(128, 1) t(" in out
    assert kernel(m, "t").launch_bounds.args == ("128", "1")  # type: ignore[union-attr]
    out, m = _apply(src, rw.remove_launch_bounds(src, t))
    assert "__global__ void t(float* x)" in out and kernel(m, "t").launch_bounds is None
    assert rw.remove_launch_bounds(src, k) is None


def test_replace_body_signature_and_definition() -> None:
    src = SourceText(REWRITE_SOURCE)
    model = parse(REWRITE_SOURCE)
    k, t = kernel(model, "k"), kernel(model, "t")
    new_body = "{\n    // ∑ new body\n    a[threadIdx.x] = 0.0f;\n}"
    out, m = _apply(src, rw.replace_body(src, k, "\n" + new_body + "\n"))
    assert SourceText(out).slice(kernel(m, "k").body_span) == new_body
    assert kernel(m, "t").body_span.start - t.body_span.start == len(new_body.encode()) - (
        k.body_span.end - k.body_span.start)
    with pytest.raises(ValueError, match="must start with"):
        rw.replace_body(src, k, "a[0] = 0;")
    out, m = _apply(src, rw.replace_signature(src, k, "__global__ void k(float* a, const float* b, float* c, "
                                                      "float* d, unsigned n)"))
    assert [p.text for p in kernel(m, "k").params][-1] == "unsigned n"
    assert SourceText(out).slice(kernel(m, "k").body_span) == src.slice(k.body_span)
    out, m = _apply(src, rw.replace_definition(src, t, "template <int BS, int U>\n__global__ void t(float* x) {}"))
    assert [tp.name for tp in kernel(m, "t").template_params] == ["BS", "U"]
    assert kernel(m, "t").launch_bounds is None
    with pytest.raises(ValueError, match="overlapping"):
        rw.apply_edits(src, [rw.replace_body(src, k, "{}"), rw.replace_definition(src, k, "int x;")])


def test_insert_before_kernel_goes_above_the_template_line() -> None:
    src = SourceText(REWRITE_SOURCE)
    t = kernel(parse(REWRITE_SOURCE), "t")
    out, m = _apply(src, rw.insert_before_kernel(src, t, "// @warpforge size N = 1"))
    assert "\n// @warpforge size N = 1\ntemplate <int BS>\n" in out
    assert SourceText(out).slice(kernel(m, "t").comment_span) == "// @warpforge size N = 1"  # type: ignore[arg-type]


# --------------------------------------------------------------------------------- body access


def test_param_access_follows_local_aliases_and_atomics() -> None:
    text = """
__global__ void k(const float* in, float* out, float* acc, unsigned* bins, float* tmp, float* unused, int n)
{
    const float* row = in + blockIdx.x * n;
    float* dst = out + blockIdx.x * n;
    float* alias = dst;
    alias[threadIdx.x] = row[threadIdx.x];
    acc[threadIdx.x] += row[0];
    atomicAdd(&bins[threadIdx.x % 16], 1u);
    tmp[threadIdx.x]++;
}
"""
    model = parse(text)
    acc = param_access(text, model.kernels[0])
    got = {name: (a.read, a.write, a.atomic) for name, a in acc.items()}
    assert got == {
        "in": (True, False, False),
        "out": (False, True, False),
        "acc": (True, True, False),
        "bins": (True, True, True),
        "tmp": (True, True, False),
        "unused": (False, False, False),
    }


def test_unused_span_helpers() -> None:
    s = Span(3, 7)
    assert 3 in s and 6 in s and 7 not in s and "3" not in s
    assert s.contains_span(Span(4, 7)) and not s.contains_span(Span(2, 5))
    assert s.shifted(2) == Span(5, 9)
