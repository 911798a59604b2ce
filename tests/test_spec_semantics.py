"""Spec semantics (issue 18, item 6): base sizes perturbed once and derived sizes computed from them, ``fixed``
honoured for derived sizes too and printed as it is, the annotation's element type checked against the
parameter's (typedefs and ``using`` aliases resolved), per-argument tolerances, and ``warpforge verify``
taking the variant file's own launch, tunable values and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warpforge.cli import main
from warpforge.commands.verify import with_variant_directives
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import candidate_from_variant
from warpforge.exitcodes import CliError
from warpforge.spec import KernelSpec, SpecError, build_spec, load_spec
from warpforge.spec.model import perturb
from warpforge.spec.variant import read_variant_directives


def spec_of(text: str, kernel: str = "k", file: str = "t.cu") -> KernelSpec:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return build_spec(src, model, k, file)


def error_of(text: str, kernel: str = "k") -> SpecError:
    with pytest.raises(SpecError) as info:
        spec_of(text, kernel)
    return info.value


BODY = """__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def annotated(sizes: str, *, x: str = "float", y: str = "float", count: str = "N", body: str = BODY,
              extra: str = "") -> str:
    lines = [*(f"// @warpforge size {s}" for s in sizes.split(";")),
             f"// @warpforge arg x: in {x}[{count}]", f"// @warpforge arg y: out {y}[{count}]",
             f"// @warpforge arg n = {count}", f"// @warpforge launch grid=cdiv({count}, 256), block=256"]
    return "\n".join(lines) + "\n" + extra + body


# ------------------------------------------------------------------------------------ perturbation
def test_a_derived_size_is_the_product_of_the_perturbed_base_sizes() -> None:
    spec = spec_of(annotated("B = 8;T = 1024;N = B*T"))
    odd = spec.resolve(perturbed=True).sizes
    assert (odd["B"], odd["T"]) == (perturb(8), perturb(1024)) == (7, 921)
    assert odd["N"] == 7 * 921  # not perturb(7 * 921) = 5803
    assert spec.resolve(perturbed=True).args[0].count == 7 * 921
    assert spec.perturbation() == {"B": "perturbed", "T": "perturbed", "N": "derived from B, T"}


def test_the_sanitizer_size_is_small_odd_and_keeps_what_the_user_fixed() -> None:
    from warpforge.spec.model import SMALL_BYTES

    spec = spec_of(annotated("B = 8192;C = 50257;N = B*C", count="N"))
    small = spec.small_sizes()
    assert small is not None and set(small) == {"B", "C"}
    r = spec.resolve(base=small)
    assert r.sizes["N"] == small["B"] * small["C"]  # derived sizes follow
    assert sum(int(a.count or 0) * 4 for a in r.args if a.count is not None) <= SMALL_BYTES
    assert small["B"] % 2 == 1 and small["C"] % 2 == 1 and min(small.values()) >= 33  # tails stay
    assert r.grid[0] == -(-r.sizes["N"] // 256)  # the launch is the spec's at that size
    fixed = spec_of(annotated("B = 8192 fixed;C = 50257;N = B*C", count="N")).small_sizes()
    assert fixed is not None and "B" not in fixed  # a fixed size is never shrunk
    assert spec_of(annotated("N = 4096")).small_sizes() is None  # small already: the perturbed size is used


def test_aligned_perturbed_sizes_keep_the_spec_sizes_divisibility() -> None:
    # a kernel without a tail guard is right at multiples of its block: the perturbed base sizes rounded down
    spec = spec_of(annotated("N = 1 << 20"))
    assert spec.resolve(perturbed=True).sizes["N"] == 943719
    assert spec.aligned_bases(256) == {"N": 943616} and spec.aligned_bases(4) == {"N": 943716}
    # derived sizes follow; a small size that rounding would empty keeps its spec value; a fixed one is left out
    two = spec_of(annotated("B = 8;T = 1000;C = 768 fixed;N = B*T", count="N"))
    assert two.aligned_bases(32) == {"B": 8, "T": 896}  # 8 -> 7 -> 0: kept; 899 -> multiples of 8
    assert two.resolve(perturbed=True, base=two.aligned_bases(32)).sizes["N"] == 8 * 896
    # an odd spec size has no divisibility to keep: its perturbation stays as it was
    assert spec_of(annotated("N = 1001")).aligned_bases(256) == {"N": perturb(1001)}
    # the sanitizer's small sizes are aligned the same way
    big = spec_of(annotated("B = 8192;C = 50256;N = B*C", count="N"))
    small = big.small_sizes()
    assert small is not None
    assert all(v % 256 == 0 for v in big.aligned_bases(256, start=small).values())


def test_a_launch_written_for_whole_blocks_keeps_the_perturbed_size_whole() -> None:
    # grid = N / 256, not rounded up: the author's N is whole blocks, so the perturbed N is kept a multiple of
    # the smallest power of two that makes the division exact (943719 would leave 167 elements without a thread)
    floor = spec_of(annotated("N = 1 << 20").replace("grid=cdiv(N, 256)", "grid=N / 256"))
    odd = floor.resolve(perturbed=True)
    assert odd.sizes["N"] == 943616 and odd.grid[0] * 256 == odd.sizes["N"]
    got = floor.launch_alignment()
    assert got is not None and got[1] == {"N": 943616}  # 943719 rounded down to a multiple of 128 is one of 256
    words = f"perturbed, kept a multiple of {got[0]} (the launch divides it into whole blocks)"
    assert floor.perturbation()["N"] == words
    # a 2-D tile launch over an expression of the size: S = 32 -> 24 (4 * 24 / 32 = 3 whole tiles), not 29 or 28
    tiles = spec_of(annotated("S = 32;N = (4 * S) * (4 * S)").replace(
        "grid=cdiv(N, 256), block=256", "grid=((4 * S) / 32, (4 * S) / 32), block=(32, 32)"))
    assert tiles.resolve(perturbed=True).sizes["S"] == 24
    # the sanitizer's smaller size keeps the launch's whole blocks too
    big = spec_of(annotated("B = 8192;C = 50256;N = B*C", count="N").replace("grid=cdiv(N, 256)", "grid=N / 256"))
    small = big.small_sizes()
    assert small is not None and (small["B"] * small["C"]) % 256 == 0
    # rounded up (cdiv, or + 255 before the division): nothing promised; odd= wins; a division that is not
    # exact at the spec size promises nothing either
    assert spec_of(annotated("N = 1 << 20")).resolve(perturbed=True).sizes["N"] == 943719
    up = annotated("N = 1 << 20").replace("grid=cdiv(N, 256)", "grid=(N + 255) / 256")
    assert spec_of(up).resolve(perturbed=True).sizes["N"] == 943719
    chosen = annotated("N = 1 << 20 odd=1000").replace("grid=cdiv(N, 256)", "grid=N / 256")
    assert spec_of(chosen).resolve(perturbed=True).sizes["N"] == 1000
    ragged = annotated("N = 1000").replace("grid=cdiv(N, 256)", "grid=N / 256")
    assert spec_of(ragged).launch_alignment() is None


def test_a_fixed_derived_size_keeps_its_value_and_holds_what_it_is_computed_from() -> None:
    spec = spec_of(annotated("B = 8;T = 1024;N = B*T fixed;M = 100"))
    odd = spec.resolve(perturbed=True).sizes
    # N = B*T can only keep 8192 if B and T keep theirs: the three are held, M is still perturbed.
    assert (odd["B"], odd["T"], odd["N"], odd["M"]) == (8, 1024, 8192, perturb(100))
    assert spec.perturbation() == {"B": "kept: `N` is fixed", "T": "kept: `N` is fixed", "N": "fixed",
                                   "M": "perturbed"}
    assert spec.symbolic  # M still changes


def test_a_spec_whose_sizes_are_all_held_is_not_symbolic() -> None:
    spec = spec_of(annotated("B = 8;T = 1024;N = B*T fixed"))
    assert not spec.symbolic
    assert spec.resolve(perturbed=True).sizes == spec.resolve().sizes
    # A size derived only from fixed ones does not change either, so it does not make the spec symbolic.
    held = spec_of(annotated("C = 768 fixed;N = C * 4"))
    assert held.resolve(perturbed=True).sizes == {"C": 768, "N": 3072} and not held.symbolic


def test_a_fixed_base_size_stays_while_its_neighbour_is_perturbed_and_their_product_follows() -> None:
    spec = spec_of(annotated("B = 64;C = 768 fixed;N = B*C"))
    assert spec.resolve(perturbed=True).sizes == {"B": perturb(64), "C": 768, "N": perturb(64) * 768}
    assert spec.perturbation()["C"] == "fixed" and spec.perturbation()["N"] == "derived from B, C"


def test_odd_on_a_derived_size_is_the_users_choice() -> None:
    spec = spec_of(annotated("B = 8;T = 1024;N = B*T odd=N - 3"))
    assert spec.resolve(perturbed=True).sizes["N"] == 7 * 921 - 3
    assert spec.perturbation()["N"] == "odd=N - 3"


def test_warpforge_spec_prints_the_sizes_the_perturbed_run_uses(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "k.cu"
    f.write_text(annotated("B = 8;T = 1024;N = B*T fixed;M = 100"), encoding="utf-8")
    assert main(["spec", str(f)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith(("B ", "T ", "N ", "M "))}
    assert "8192" in rows["N"] and "fixed" in rows["N"]
    assert "kept: `N` is fixed" in rows["B"]
    assert " 89 " in rows["M"] + " " and "perturbed" in rows["M"]
    assert main(["spec", str(f), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["perturbed"]["sizes"] == {"B": 8, "T": 1024, "N": 8192, "M": 89}
    assert data["perturbation"]["T"] == "kept: `N` is fixed"


# ------------------------------------------------------------------------------------ element types
def test_an_element_type_that_is_not_the_parameters_is_an_error_with_the_line_to_write() -> None:
    e = error_of(annotated("N = 1024", y="int"))
    assert e.file == "t.cu" and e.line == 3
    assert "`y` is declared `float* y` (float32 elements) but its annotation says int elements" in e.message
    assert e.fix == "write `// @warpforge arg y: out float[N]` (a distribution, if any, after it)"


def test_the_fix_validates() -> None:
    bad = annotated("N = 1024", x="double")
    e = error_of(bad)
    assert e.fix is not None
    fixed_line = e.fix.split("`")[1]
    lines = bad.splitlines()
    assert e.line is not None
    lines[e.line - 1] = fixed_line
    assert spec_of("\n".join(lines) + "\n").arg("x") is not None


@pytest.mark.parametrize("alias", ["typedef float floatX;", "using floatX = float;",
                                   "typedef float real_t;\ntypedef real_t floatX;"])
def test_typedefs_and_using_aliases_are_resolved(alias: str) -> None:
    body = BODY.replace("const float* x, float* y", "const floatX* x, floatX* y")
    assert spec_of(alias + "\n" + annotated("N = 1024", body=body)).arg("y") is not None
    e = error_of(alias + "\n" + annotated("N = 1024", body=body, y="half"))
    assert "`y` is declared `floatX* y` (float32 elements)" in e.message and "arg y: out float[N]" in (e.fix or "")


def test_template_parameters_take_the_spec_template_arguments() -> None:
    body = BODY.replace("__global__", "template <typename T>\n__global__").replace(
        "const float* x, float* y", "const T* x, T* y").replace("2.0f", "(T)2")
    good = annotated("N = 1024", x="double", y="double", extra="// @warpforge template T=double\n", body=body)
    assert spec_of(good).arg("x") is not None
    bad = annotated("N = 1024", extra="// @warpforge template T=double\n", body=body)
    assert "arg x: in double[N]" in (error_of(bad).fix or "")


def test_types_that_cannot_be_known_here_are_not_checked() -> None:
    # A vector type, a struct: what they hold is the annotation's to say (float4 as float[4N] is fine).
    body = BODY.replace("const float* x, float* y", "const float4* x, float4* y").replace(
        "2.0f * x[i]", "x[i]")
    assert spec_of(annotated("N = 1024", body=body)).arg("x") is not None


# ------------------------------------------------------------------------------------ tolerances
TWO_OUT = """// @warpforge size N = 1024
// @warpforge size C = 64
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg dw: inout float[C] zeros tol atol=2e-3
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
{TOL}__global__ void k(const float* x, float* y, float* dw, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ y[i] = x[i]; atomicAdd(&dw[i % 64], x[i]); }}
}}
"""


def test_a_per_argument_tolerance_applies_to_that_output_only() -> None:
    spec = spec_of(TWO_OUT.format(TOL=""))
    y, dw = spec.arg("y"), spec.arg("dw")
    assert y is not None and dw is not None
    # float's default, untouched by dw's; the kernel sums (an atomicAdd), so the default norm too
    assert spec.tolerance_for(y) == (1e-4, 1e-5, 1e-5)
    assert spec.tolerance_for(dw) == (1e-4, 2e-3, 1e-5)  # its own atol, the default rtol and norm
    # the spec-level tol stays the default of every output without its own
    spec = spec_of(TWO_OUT.format(TOL="// @warpforge tol rtol=1e-3 atol=1e-6\n"))
    y, dw = spec.arg("y"), spec.arg("dw")
    assert y is not None and dw is not None
    # (a spec-level tol is the whole statement: no norm unless it says one)
    assert spec.tolerance_for(y) == (1e-3, 1e-6, 0.0) and spec.tolerance_for(dw) == (1e-3, 2e-3, 0.0)


def test_a_per_argument_tolerance_round_trips_and_changes_the_spec_hash() -> None:
    spec = spec_of(TWO_OUT.format(TOL=""))
    assert "// @warpforge arg dw: inout float[C] zeros tol atol=2e-3" in spec.to_annotation()
    body = TWO_OUT.format(TOL="").split("__global__", 1)[1]
    again = spec_of(spec.to_annotation() + "__global__" + body)
    assert again.spec_hash() == spec.spec_hash()
    loose = spec_of(TWO_OUT.format(TOL="").replace("atol=2e-3", "atol=3e-3"))
    assert loose.spec_hash() != spec.spec_hash()


@pytest.mark.parametrize("line, message", [
    ("// @warpforge arg x: in float[N] tol atol=1e-3", "`x` is an input: it is never compared"),
    ("// @warpforge arg x: in float[N]\n// @warpforge arg y: out float[N] tol", "`tol` of `y` gives no tolerance"),
    ("// @warpforge arg x: in float[N]\n// @warpforge arg y: out float[N] tol btol=1", "cannot read `btol=1`"),
])
def test_per_argument_tolerance_errors(line: str, message: str) -> None:
    text = annotated("N = 1024").replace("// @warpforge arg x: in float[N]\n// @warpforge arg y: out float[N]",
                                         line)
    assert message in error_of(text).message


# ------------------------------------------------------------------------------------ verify's own launch
ORIGINAL = """// @warpforge size B = 4096
// @warpforge size C = 1000
// @warpforge arg inp: in float[B*C]
// @warpforge arg out: out float[B]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(B, 256), block=256
__global__ void rowsum(const float* inp, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) { float s = 0; for (int c = 0; c < cols; ++c) s += inp[r * cols + c]; out[r] = s; }
}
"""

WARP_PER_ROW = """// warp per row: 8 rows per block of 256
// @warpforge launch grid=cdiv(B, 8), block=256
// @warpforge tune UNROLL = 4, 1
// warpforge: compile with -use_fast_math
__global__ void rowsum(const float* inp, float* out, int rows, int cols) {
    int r = blockIdx.x * 8 + threadIdx.x / 32;
    if (r >= rows) return;
    float s = 0;
    for (int c = threadIdx.x % 32; c < cols; c += 32) s += inp[r * cols + c];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) out[r] = s;
}
"""


def test_verify_takes_the_variants_own_launch_tunables_and_flags() -> None:
    spec = spec_of(ORIGINAL, "rowsum", "orig.cu")
    cand = candidate_from_variant(ORIGINAL, WARP_PER_ROW, "rowsum")
    assert cand.grid is None  # reading the kernel alone keeps the original's launch ...
    cand, used = with_variant_directives(cand, spec, WARP_PER_ROW, "var.cu")
    # ... the variant's own lines give it its launch, its tunable's value and its flags
    assert cand.grid == ("cdiv(B, 8)",) and cand.block is None and cand.smem is None
    assert dict(cand.defines) == {"UNROLL": "4"} and cand.flags == ("-use_fast_math",)
    assert (used.grid, used.block, used.smem) == ((512, 1, 1), (256, 1, 1), 0)
    assert used.launch_from == "the variant's own launch (var.cu:2)"
    assert "grid (512, 1, 1) block (256, 1, 1), from the variant's own launch (var.cu:2)" in used.text()
    assert "-DUNROLL=4 -use_fast_math, from the variant's own lines (var.cu:3, var.cu:4)" in used.text()
    assert used.to_json()["flags"] == ["-use_fast_math"]


def test_verify_with_a_variant_that_gives_no_launch_uses_the_originals_and_says_so() -> None:
    plain = WARP_PER_ROW.split("\n", 4)[4]  # the kernel alone
    spec = spec_of(ORIGINAL, "rowsum", "orig.cu")
    cand, used = with_variant_directives(candidate_from_variant(ORIGINAL, plain, "rowsum"), spec, plain, "var.cu")
    assert not cand.overrides_launch and not cand.flags and not cand.defines
    assert used.grid == (16, 1, 1) and used.launch_from == "the original's spec (orig.cu:7)"
    # the same launch written in the variant is not an override either
    same = "// @warpforge launch grid=cdiv(B, 256), block=256\n" + plain
    cand, used = with_variant_directives(candidate_from_variant(ORIGINAL, same, "rowsum"), spec, same, "var.cu")
    assert not cand.overrides_launch and used.launch_from.startswith("the original's spec")


def test_an_accepted_files_launch_comment_is_read_too() -> None:
    text = "// warpforge: launch with grid dim3(cdiv(B, 8), 1) and block 256\n" + WARP_PER_ROW.split("\n", 4)[4]
    d = read_variant_directives(text, "rowsum", "var.cu")
    assert d.launch is not None and d.launch.grid == ("cdiv(B, 8)", "1") and d.lines["launch"] == 1


@pytest.mark.parametrize("lines, message", [
    ("// warpforge: compile with -ccbin /tmp/evil", "var.cu:1: the nvcc option `-ccbin`"),
    ("// @warpforge launch grid=cdiv(B, W), block=256", "var.cu:1: launch grid `cdiv(B, W)`"),
    ("// warpforge: compile with -DX=max(1,2)", "var.cu:1: the value of -DX (`max(1,2)`) contains a comma"),
])
def test_verify_refuses_variant_lines_it_cannot_use_before_the_gpu(lines: str, message: str) -> None:
    text = lines + "\n" + WARP_PER_ROW.split("\n", 4)[4]
    spec = spec_of(ORIGINAL, "rowsum", "orig.cu")
    with pytest.raises(CliError) as info:
        with_variant_directives(candidate_from_variant(ORIGINAL, text, "rowsum"), spec, text, "var.cu")
    assert message in str(info.value)


# --------------------------------------------------------------------------- values checked at their line (issue 26)
_COPY = """{head}
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, BLOCK_X), block=BLOCK_X
__global__ void copy(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}}
"""


@pytest.mark.parametrize(("head", "line", "message"), [
    ("#define BLOCK_X 256\n// @warpforge size N = 4096\n// @warpforge tune BLOCK = 256 | touch, 128", 3,
     "tunable `BLOCK`: unknown name `touch` in `256 | touch`"),
    ("#define BLOCK_X 256\n// @warpforge size N = 1e15", 2,
     "size `N` = 1e15 is a floating-point number (1e+15), but it sets the length of `x`"),
    ("#define BLOCK_X 256\n// @warpforge size N = 1.5", 2, "size `N` = 1.5 is not a whole number"),
    ("#define BLOCK_X 256\n// @warpforge size B = 2.5\n// @warpforge size N = B * 4", 2,
     "size `B` = 2.5 is not a whole number (2.5), but it sets the length of `x`"),
])
def test_tune_values_and_counting_sizes_are_checked_at_their_line(tmp_path: Path, head: str, line: int,
                                                                   message: str) -> None:
    path = tmp_path / "copy.cu"
    path.write_text(_COPY.format(head=head))
    with pytest.raises(SpecError) as e:
        load_spec(path, "copy")
    assert e.value.line == line and message in e.value.message, str(e.value)


def test_tune_values_may_name_sizes_defines_and_types_and_launches_may_use_defines(tmp_path: Path) -> None:
    path = tmp_path / "copy.cu"
    path.write_text(_COPY.format(head="#define BLOCK_X 128\n// @warpforge size N = 4096\n"
                                      "// @warpforge tune VEC = BLOCK_X / 32, 2 * 2\n// @warpforge tune T = float"))
    spec = load_spec(path, "copy")
    assert spec.resolve().block == (128, 1, 1) and spec.resolve().grid == (32, 1, 1)
    held = {s.name: s for s in spec.sizes}["BLOCK_X"]
    assert held.fixed and held.expr == "128"  # the kernel is compiled with it: never perturbed
    assert spec.resolve(perturbed=True).block == (128, 1, 1)


def test_a_float_size_that_only_feeds_a_float_argument_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "scale.cu"
    path.write_text("// @warpforge size N = 4096\n// @warpforge size A = 1.5\n// @warpforge arg x: in float[N]\n"
                    "// @warpforge arg y: out float[N]\n// @warpforge arg n = N\n// @warpforge arg a = A\n"
                    "// @warpforge launch grid=cdiv(N, 256), block=256\n"
                    "__global__ void scale(const float* x, float* y, int n, float a) {\n"
                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i];\n}\n")
    assert load_spec(path, "scale").resolve().sizes["A"] == 1.5


def test_a_one_line_kernel_with_a_syntax_error_is_reported_as_one(tmp_path: Path) -> None:
    path = tmp_path / "broken.cu"
    path.write_text("__global__ void k(float* x, float* y, int n) { y[n] = x[n] + ; }\n")
    with pytest.raises(SpecError) as e:
        load_spec(path, "k")
    assert e.value.line == 1 and e.value.message.startswith("syntax error in `k` at column 60"), str(e.value)
    assert "cannot infer" not in str(e.value)
