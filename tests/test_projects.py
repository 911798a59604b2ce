"""Real projects (issue 18, items 2, 3, 8): the project's build read, fast math and register caps as source,
defines as ``#ifndef`` defaults, build changes labelled; on two multi-file projects in different styles
(tests/projects/cmake_act: CMake + compile_commands.json; tests/projects/make_norm: a Makefile + warpforge.toml).

CPU tests need nvcc (and cmake for the CMake project); the GPU test optimizes a kernel of each project,
accepts the best into a copy of the project, builds it with its own build and runs its own check program."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from warpforge.compiler.build import BuildResult, compile_cubin
from warpforge.compiler.project import project_build, read_arguments
from warpforge.compiler.toolchain import ToolMissing, toolchain
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone
from warpforge.cuda.model import FileModel, Kernel
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load
from warpforge.search.optimize import apply_candidate, build_change, candidate_notes
from warpforge.spec import KernelSpec, build_spec

PROJECTS = Path(__file__).resolve().parent / "projects"


def _nvcc() -> bool:
    try:
        toolchain()
    except ToolMissing:
        return False
    return True


needs_nvcc = pytest.mark.skipif(not _nvcc(), reason="needs nvcc")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or not _nvcc(), reason="needs cmake and nvcc")


def cmake_copy(dest: Path) -> Path:
    """A configured copy of the CMake project (``build/compile_commands.json``, nothing compiled)."""
    root = dest / "cmake_act"
    shutil.copytree(PROJECTS / "cmake_act", root, ignore=shutil.ignore_patterns("build"))
    subprocess.run(["cmake", "-S", str(root), "-B", str(root / "build"), "-DCMAKE_CUDA_ARCHITECTURES=90"],
                   check=True, capture_output=True, timeout=300)
    return root


def make_copy(dest: Path) -> Path:
    root = dest / "make_norm"
    shutil.copytree(PROJECTS / "make_norm", root)
    return root


def spec_of(path: Path, kernel: str) -> tuple[SourceText, FileModel, Kernel, KernelSpec]:
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    k = model.require(kernel)
    return src, model, k, build_spec(src, model, k, str(path))


def build(path: Path, kernel: str, definition: str | None = None, project: bool = True) -> BuildResult:
    src, model, k, spec = spec_of(path, kernel)
    inst = tuple(spec.template_args) if k.template_params else None
    tu = standalone(src, model, k, filename=str(path), instantiate=inst, definition=definition)
    return compile_cubin(tu, arch="sm_90", filename=str(path), use_cache=False, project=project)


# ------------------------------------------------------------------------------ the project's build, read


def test_only_allow_listed_options_pass_and_the_rest_say_why(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "opts.rsp").write_text('-I"inc" -Xcompiler=-fplugin=evil.so', encoding="utf-8")
    args = shlex.split(
        "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DUSE_X -DTILE=16 -UOLD -isystem inc "
        "-Imissing --options-file opts.rsp -O3 -std=c++17 --generate-code=arch=compute_90,code=[compute_90,sm_90] "
        "-ccbin /tmp/evil --expt-relaxed-constexpr -x cu -c k.cu -o k.o -MD -MT k.o -MF k.d --run "
        "-Xcompiler -fplugin=a.so '-DBAD=$(id)' -Xptxas -O0 --weird-option")
    got = read_arguments(args, tmp_path, "db", str(tmp_path / "k.cu"))
    inc = str((tmp_path / "inc").resolve())
    assert got.include_dirs == (inc,) and got.system_dirs == (inc,)
    assert got.defines == (("USE_X", "1"), ("TILE", "16")) and got.undefines == ("OLD",)
    assert (got.std, got.arch) == ("c++17", "sm_90")
    assert got.flags == ("-O3", "--expt-relaxed-constexpr")
    dropped = "\n".join(got.dropped)
    for refused in ("-ccbin /tmp/evil: refused", "-Xcompiler -fplugin=a.so: refused", "--run: refused",
                    "-Xcompiler=-fplugin=evil.so: refused", "-DBAD=$(id): the value", "-Xptxas -O0: refused",
                    "--weird-option: refused", "-Imissing: not a folder"):
        assert refused in dropped, refused
    # dependency and output options are ignored, not mistaken for input files
    assert "k.d" not in dropped and "k.o" not in dropped


@needs_cmake
def test_compile_commands_give_includes_and_defines_and_kernels_build_as_in_the_project(tmp_path: Path) -> None:
    root = cmake_copy(tmp_path)
    act = root / "src" / "act.cu"
    proj = project_build(act)
    assert proj is not None and proj.origin == str(root / "build" / "compile_commands.json")
    assert proj.include_dirs == (str((root / "include").resolve()),)
    assert ("LEAKY_SLOPE", "0.01f") in proj.defines and proj.arch == "sm_90" and proj.std == "c++17"
    for kernel in ("gelu_leaky_kernel", "row_expsum_kernel"):
        res = build(act, kernel)
        assert res.ok, res.log
        # without the project's build the header is not found and LEAKY_SLOPE is not defined
        assert not build(act, kernel, project=False).ok


@needs_nvcc
def test_warpforge_toml_gives_the_settings_of_a_makefile_project(tmp_path: Path) -> None:
    root = make_copy(tmp_path)
    ops = root / "kernels" / "norm_ops.cu"
    proj = project_build(ops)
    assert proj is not None and proj.origin.endswith("warpforge.toml")
    assert proj.include_dirs == (str((root / "common").resolve()),)
    assert proj.defines == (("NORM_EPS", "1e-5f"),) and proj.flags == ("--expt-relaxed-constexpr",)
    for kernel in ("scale_rows", "softplus_fp64"):
        assert build(ops, kernel).ok
    assert not build(ops, "scale_rows", project=False).ok


@needs_nvcc
def test_an_edited_project_header_is_built_again_not_replayed(tmp_path: Path) -> None:
    root = make_copy(tmp_path)
    ops = root / "kernels" / "norm_ops.cu"
    src, model, k, _ = spec_of(ops, "scale_rows")
    tu = standalone(src, model, k, filename=str(ops))
    first = compile_cubin(tu, arch="sm_90", filename=str(ops))
    assert first.ok
    header = root / "common" / "vec_ops.cuh"
    header.write_text(header.read_text().replace("return v * v;", "return v * v + 1.0f;"), encoding="utf-8")
    second = compile_cubin(tu, arch="sm_90", filename=str(ops))
    assert second.ok and not second.cached and second.cubin != first.cubin


def test_specs_come_from_the_projects_host_code_without_annotations() -> None:
    _, _, _, s = spec_of(PROJECTS / "cmake_act" / "src" / "act.cu", "gelu_leaky_kernel")
    assert [(a.name, a.role.value, a.count or a.value) for a in s.args] == [
        ("out", "out", "n"), ("x", "in", "n"), ("scale", "scalar", "scale"), ("n", "scalar", "n")]
    # sizes from the runner's constants, through the launcher it calls; `real_t` read through the typedef
    assert {z.name: z.expr for z in s.sizes} == {"n": "1 << 20", "scale": "2.0f", "threads": "256"}
    assert [a.dtype for a in s.args] == ["float32", "float32", "float32", "int32"]
    _, _, _, s = spec_of(PROJECTS / "cmake_act" / "src" / "act.cu", "row_expsum_kernel")
    assert s.template_args == ("float",) and s.resolve().grid == (8, 1, 1)
    _, _, _, s = spec_of(PROJECTS / "make_norm" / "kernels" / "norm_ops.cu", "scale_rows")
    assert [a.count for a in s.resolve().args if a.count is not None] == [4096 * 256, 4096 * 256]
    _, _, _, s = spec_of(PROJECTS / "make_norm" / "kernels" / "norm_ops.cu", "softplus_fp64")
    assert s.resolve().block == (256, 1, 1)


# ------------------------------------------------------------------------------ fast math as source


def fast_math_child(text: str, kernel: str, file: str = "fm.cu") -> Candidate | None:
    load()
    src = SourceText(text)
    model = parse(src.data)
    k = model.require(kernel)
    pol = OfflinePolicy(file, src, model, k, build_spec(src, model, k, file), families={"fast_math"})
    ctx = pol.context(pol.root_candidate())
    rule = REGISTRY["fast_math"]
    return rule.apply(ctx, "intrinsics") if rule.variants(ctx) == ["intrinsics"] else None


FM = """
typedef float real_t;
__device__ float sig(float v) {{ return 1.0f / (1.0f + expf(-v)); }}
__device__ float twice(float v) {{ return sig(v) * 2.0f; }}
// @warpforge size N = 4096
// @warpforge arg y: out float[N]
// @warpforge arg x: in float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(real_t* y, const real_t* x, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ {body} }}
}}
void host(void) {{ float q = sig(1.0f); (void)q; }}
"""


def test_fast_math_writes_the_intrinsics_the_flag_implies_into_the_kernel() -> None:
    body = ("real_t v = x[i]; float w = 1.0f / sqrtf(v * v + 1.0f); "
            "y[i] = logf(v * v + 1.0f) / (float)n + powf(v, 2.0f) * tanhf(w) + exp(v) + sinf(v) / 3;")
    c = fast_math_child(FM.format(body=body), "k")
    assert c is not None and c.flags == () and c.build_flags == ()
    assert "rsqrtf(v * v + 1.0f)" in c.source
    assert "__fdividef(__logf(v * v + 1.0f), (float)n)" in c.source
    assert "__powf(v, 2.0f) * __tanhf(w)" in c.source and "__expf(v)" in c.source
    assert "__fdividef(__sinf(v), 3)" in c.source


def test_fast_math_copies_the_same_file_helpers_the_kernel_calls_and_leaves_the_originals() -> None:
    c = fast_math_child(FM.format(body="y[i] = twice(x[i]);"), "k")
    assert c is not None
    # sig has the rewrite; twice calls sig, so both are copied, callees first-seen order aside
    assert "__device__ float sig_fastmath(float v) { return __fdividef(1.0f, (1.0f + __expf(-v))); }" in c.source
    assert "twice_fastmath(float v) { return sig_fastmath(v) * 2.0f; }" in c.source
    assert "y[i] = twice_fastmath(x[i]);" in c.source
    text = FM.format(body="y[i] = twice(x[i]);")
    new = apply_candidate(text, parse(text).require("k"), c)
    # the host's call of sig is untouched, and the result still parses with the kernel in place
    assert "float q = sig(1.0f);" in new and parse(new).kernel("k") is not None


@pytest.mark.parametrize("body", [
    "y[i] = x[i] * 2.0f + 1.0f;",                  # no math function, no division
    "y[i] = (float)(n / 4);",                      # integer division
    "y[i] = (float)((double)x[i] / 3.0);",         # double division: -use_fast_math leaves it
    "y[i] = (float)exp((double)x[i]);",            # double overload
    "y[i] = coshf(x[i]) + sqrtf(x[i]) + exp2f(x[i]);",  # not mapped by the flag (ftz/approx sqrt only)
])
def test_fast_math_declines_what_the_flag_would_not_change(body: str) -> None:
    assert fast_math_child(FM.format(body=body), "k") is None


def test_fast_math_rewrites_only_the_part_the_flag_changes() -> None:
    c = fast_math_child(FM.format(body="y[i] = x[i] / x[i + 1] * 0.5f + coshf(x[i]) + (float)(n / 4);"), "k")
    assert c is not None and "__fdividef(x[i], x[i + 1]) * 0.5f + coshf(x[i]) + (float)(n / 4)" in c.source


def test_fast_math_leaves_double_precision_kernels_alone() -> None:
    text = (PROJECTS / "make_norm" / "kernels" / "norm_ops.cu").read_text(encoding="utf-8")
    assert fast_math_child(text, "softplus_fp64", str(PROJECTS / "make_norm" / "kernels" / "norm_ops.cu")) is None


def test_a_value_of_unknown_type_is_left_exact() -> None:
    text = FM.replace("typedef float real_t;", "struct P {{ float a; }};\ntypedef float real_t;")
    c = fast_math_child(text.format(body="P p; p.a = x[i]; y[i] = p.a / x[i] + expf(x[i]);"), "k")
    assert c is not None and "p.a / x[i]" in c.source and "__expf(x[i])" in c.source


@needs_nvcc
def test_the_fast_math_variant_of_a_project_kernel_builds_with_the_projects_flags(tmp_path: Path) -> None:
    root = make_copy(tmp_path)
    ops = root / "kernels" / "norm_ops.cu"
    c = fast_math_child(ops.read_text(encoding="utf-8"), "scale_rows", str(ops))
    assert c is not None and "rsqrtf(__fdividef(acc, cols) + NORM_EPS)" in c.source
    assert build(ops, "scale_rows", definition=c.source).ok


# ------------------------------------------------------------------------------ accept: defines and flags


def test_an_unguarded_define_becomes_an_ifndef_default_above_the_kernel() -> None:
    text = FM.format(body="y[i] = x[i] * SCALE;")
    k = parse(text).require("k")
    c = Candidate.original(text, "k").derive(defines={"SCALE": "4"})
    new = apply_candidate(text, k, c)
    assert "#ifndef SCALE\n#define SCALE 4\n#endif\n// @warpforge size N = 4096" in new
    assert "compile with" not in new and build_change(c) is None


def test_a_variant_that_needs_a_flag_is_a_build_change_and_says_so() -> None:
    text = FM.format(body="y[i] = x[i];")
    k = parse(text).require("k")
    c = Candidate.original(text, "k").derive(flags=("-Xptxas", "-O3"))
    assert c.build_flags == ("-Xptxas", "-O3")
    assert build_change(c) == "build change: compile with -Xptxas -O3 (the project's build must add it)"
    assert candidate_notes(c) == ["build change: -Xptxas", "build change: -O3"]
    assert "// warpforge: compile with -Xptxas -O3" in apply_candidate(text, k, c)


# ------------------------------------------------------------------------------ GPU: optimize, accept, own build


def _optimize_and_accept(path: Path, kernel: str) -> str:
    """Optimize ``kernel`` (offline rules, small budget) and return the file with the best variant accepted.

    Both kernels run a thread per row over rows of 256 and 1536 floats (uncoalesced), so a verified faster
    variant within 24 candidates is expected, not hoped for."""
    import asyncio

    from warpforge.gpu.evaluator import evaluator_for_job
    from warpforge.policy.offline import offline_policy
    from warpforge.profile.hints import analyze_source
    from warpforge.search.engine import Budget
    from warpforge.search.optimize import OptimizeOutcome, OptimizeRequest, optimize

    text = path.read_text(encoding="utf-8")
    # the static findings order the rules, as the CLI's and the editor's jobs do
    findings = list(analyze_source(str(path), text, kernels=[kernel], arch="sm_90").findings)
    req = OptimizeRequest(str(path), text, kernel, budget=Budget(max_candidates=24, wall_seconds=300),
                          findings=findings)
    evaluator = evaluator_for_job(req, workspace=path.parent)

    async def go() -> OptimizeOutcome:
        try:
            return await optimize(req, evaluator, policy=offline_policy(req))
        finally:
            await evaluator.close()

    out = asyncio.run(go())
    assert out.result.root.ok, out.result.root.evaluation
    best = out.best
    assert build_change(best.candidate) is None, "the rules propose no build change at the root"
    return out.new_text(best)


def _own_build_and_check(root: Path, project: str) -> subprocess.CompletedProcess[str]:
    """Build the project with its own build (cmake --build / make) and run its check program."""
    if project == "cmake_act":
        subprocess.run(["cmake", "--build", str(root / "build"), "-j4"], check=True, capture_output=True,
                       timeout=600)
        exe = root / "build" / "act_check"
    else:
        subprocess.run(["make", "-C", str(root)], check=True, capture_output=True, timeout=600)
        exe = root / "norm_check"
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)


@pytest.mark.gpu
@pytest.mark.parametrize(("project", "file", "kernel"), [
    ("cmake_act", "src/act.cu", "row_expsum_kernel"),
    ("make_norm", "kernels/norm_ops.cu", "scale_rows"),
], ids=["cmake_act", "make_norm"])
def test_optimize_accept_then_the_projects_own_build_and_check_pass(tmp_path: Path, project: str, file: str,
                                                                     kernel: str) -> None:
    from warpforge.gpu.supervisor import gpu_unavailable_reason

    why = gpu_unavailable_reason()
    if why is not None:
        pytest.skip(f"needs an NVIDIA GPU and pycuda: {why}")
    tool = "cmake" if project == "cmake_act" else "make"
    if shutil.which(tool) is None or not _nvcc():
        pytest.skip(f"needs {tool} and nvcc to build the project its own way")
    try:
        root = cmake_copy(tmp_path) if project == "cmake_act" else make_copy(tmp_path)
        before = _own_build_and_check(root, project)
    except subprocess.CalledProcessError as e:
        # The untouched project does not build here (no CUDA toolkit libraries for the link, an old cmake):
        # that says nothing about WarpForge, so it is a skip with the reason, not a pass.
        pytest.skip(f"the project's own build fails here before any change: {(e.stderr or b'')[-400:]!r}")
    assert before.returncode == 0 and "CHECK PASSED" in before.stdout, before.stdout + before.stderr
    path = root / file
    original = path.read_text(encoding="utf-8")
    accepted = _optimize_and_accept(path, kernel)
    assert accepted != original, "a verified faster variant was accepted"
    path.write_text(accepted, encoding="utf-8")
    check = _own_build_and_check(root, project)
    assert check.returncode == 0 and "CHECK PASSED" in check.stdout, check.stdout + check.stderr


@needs_nvcc
def test_the_evaluation_key_follows_the_projects_defines_and_headers(tmp_path: Path) -> None:
    """A changed -D in the project's build or an edited header is measured again, not replayed from the store."""
    from warpforge.compiler.build import project_key

    root = make_copy(tmp_path)
    ops = root / "kernels" / "norm_ops.cu"
    src, model, k, _ = spec_of(ops, "scale_rows")
    tu = standalone(src, model, k, filename=str(ops))
    first = project_key(tu, str(ops))
    assert first and project_key(tu, str(ops)) == first
    toml = root / "warpforge.toml"
    toml.write_text(toml.read_text().replace('"1e-5f"', '"1e-6f"'), encoding="utf-8")
    second = project_key(tu, str(ops))
    assert second != first
    header = root / "common" / "vec_ops.cuh"
    header.write_text(header.read_text() + "\n// edited\n", encoding="utf-8")
    assert project_key(tu, str(ops)) not in (first, second)
    # a file outside any project that includes nothing of its own keeps the key it had
    (tmp_path / "lone.cu").write_text("__global__ void k(float* y) { y[0] = 1.0f; }\n", encoding="utf-8")
    assert project_key("__global__ void k(float* y) { y[0] = 1.0f; }\n", str(tmp_path / "lone.cu")) == ""


def test_calls_are_typed_by_what_the_function_returns_not_by_its_name() -> None:
    """A user's `leaf()` returning an int keeps its integer division; the file's float helper is a float."""
    text = FM.replace("typedef float real_t;", "typedef float real_t;\n__device__ int leaf(int v) {{ return v + 1; }}")
    c = fast_math_child(text.format(body="y[i] = sig(x[i]) / 3.0f + (float)(leaf(n) / 2);"), "k")
    assert c is not None and "(float)(leaf(n) / 2)" in c.source
    assert "__fdividef(sig_fastmath(x[i]), 3.0f)" in c.source


def test_a_name_with_two_types_in_two_scopes_is_left_exact() -> None:
    body = "if (n > 2) { int v = n; y[i] = (float)(v / 2); } else { float v = x[i]; y[i] = v / 2.0f + expf(v); }"
    c = fast_math_child(FM.format(body=body), "k")
    assert c is not None and "(float)(v / 2)" in c.source and "v / 2.0f + __expf(v)" in c.source


@needs_nvcc
def test_fast_math_is_not_proposed_where_the_project_builds_with_the_flag(tmp_path: Path) -> None:
    root = make_copy(tmp_path)
    ops = root / "kernels" / "norm_ops.cu"
    assert fast_math_child(ops.read_text(encoding="utf-8"), "scale_rows", str(ops)) is not None
    toml = root / "warpforge.toml"
    toml.write_text(toml.read_text().replace('flags = ["--expt-relaxed-constexpr"]',
                                             'flags = ["--expt-relaxed-constexpr", "-use_fast_math"]'))
    assert fast_math_child(ops.read_text(encoding="utf-8"), "scale_rows", str(ops)) is None


@pytest.mark.parametrize(("project", "file", "kernel"), [
    ("cmake_act", "src/act.cu", "row_expsum_kernel"),
    ("make_norm", "kernels/norm_ops.cu", "scale_rows"),
], ids=["cmake_act", "make_norm"])
def test_accepted_variants_build_with_the_projects_own_build(tmp_path: Path, project: str, file: str,
                                                              kernel: str) -> None:
    """Accept (on CPU, unverified) a warp-per-row child, which changes the launch, stacked on the fast-math
    child: the file the project gets still builds with its own cmake/make, launch sites updated."""
    tool = "cmake" if project == "cmake_act" else "make"
    if shutil.which(tool) is None or not _nvcc():
        pytest.skip(f"needs {tool} and nvcc")
    root = cmake_copy(tmp_path) if project == "cmake_act" else make_copy(tmp_path)
    path = root / file
    text = path.read_text(encoding="utf-8")
    src, model, k, spec = spec_of(path, kernel)
    pol = OfflinePolicy(str(path), src, model, k, spec, families={"fast_math", "warp_per_row"})
    fast = next(c for c in pol.propose_sync(pol.root_candidate()) if c.family == "fast_math")
    both = next(c for c in pol.propose_sync(fast) if c.family == "warp_per_row")
    assert both.steps[0] == "fast_math:intrinsics" and both.block is not None and both.build_flags == ()
    new = apply_candidate(text, k, both, spec)
    assert "compile with" not in new and ("__expf" in new or "rsqrtf" in new)
    path.write_text(new, encoding="utf-8")
    if project == "cmake_act":
        done = subprocess.run(["cmake", "--build", str(root / "build")], capture_output=True, text=True, timeout=600)
    else:
        done = subprocess.run(["make", "-C", str(root)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
