"""Whole-program correctness of an accepted variant: every launch site of the kernel in the workspace.

The fixture project (tests/fixtures/launch_project) has the kernel in a .cu with its spec, a header launcher
(.cuh) and a .cpp with a launcher in each style a program uses: ``<<<grid, block>>>`` over dim3 variables,
``cudaLaunchKernel`` with an argument array, ``cudaLaunchKernelEx`` with a config struct, and a launcher
whose block size is a run-time parameter (which no variant's launch can be derived for).
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from warpforge.app import PreparedKernel
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.workspace import find_launches
from warpforge.search.engine import Budget
from warpforge.search.optimize import (
    LaunchKeeping,
    OptimizeRequest,
    apply_workspace,
    keeps_launch,
    optimize,
    prefer_writable,
)
from warpforge.search.tree import Node, SearchContext
from warpforge.spec.resolve import build_spec
from warpforge.spec.sites import to_c

PROJECT = Path(__file__).resolve().parent / "fixtures" / "launch_project"
WARP_PER_ROW = dict(grid=("cdiv(rows, 8)",), block=("256",), family="warp_per_row")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the fixture project, with launches in folders the scan must never read."""
    root = tmp_path / "proj"
    shutil.copytree(PROJECT, root)
    for skipped in ("build", "node_modules/dep", ".git", "cmake-build-debug"):
        (root / skipped).mkdir(parents=True)
        (root / skipped / "stale.cpp").write_text(
            "void stale(const float* a, float* b) { row_sum<<<1, 1>>>(a, b, 1, 1); }\n")
    return root


def _prepared(root: Path) -> PreparedKernel:
    path = root / "src" / "rows.cu"
    text = path.read_text()
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("row_sum")
    return PreparedKernel(str(path), src, model, k, build_spec(src, model, k, str(path))).with_workspace(root)


def _variant(p: PreparedKernel, **launch: object) -> Candidate:
    return Candidate("row_sum", p.kernel_text, **launch)  # type: ignore[arg-type]


# ----------------------------------------------------------------- the file model: launch styles
def test_runtime_api_launches_are_launch_sites_with_their_parts() -> None:
    text = (PROJECT / "src" / "launch.cpp").read_text()
    sites = parse(text).launches_of("row_sum")
    assert [s.style for s in sites] == ["chevron", "launch_kernel", "launch_kernel_ex", "chevron"]
    api, ex = sites[1], sites[2]
    # cudaLaunchKernel: the kernel's arguments come from the `void* args[]` array, casts and & removed
    assert api.args == ("in", "out", "n_rows", "n_cols") and api.args_known
    assert (api.grid, api.block, api.smem, api.stream) == ("dim3((n_rows + 255) / 256)", "dim3(256)", "0", "s")
    # cudaLaunchKernelEx: grid and block are what the function last assigned to cfg's fields
    assert (ex.grid, ex.block, ex.smem, ex.config_var) == ("dim3((n_rows + 255) / 256)", "dim3(256)", None, "cfg")
    assert ex.args == ("in", "out", "n_rows", "n_cols") and ex.config_known
    assert ex.grid_span is not None and text.encode()[ex.grid_span.start:ex.grid_span.end] == ex.grid.encode()


def test_api_launch_forms_templates_aggregates_and_configs_set_elsewhere() -> None:
    text = """
template <typename T> __global__ void fill(T* x, int n) {}
template <typename T> void run(T* x, int n, cudaStream_t s) { fill<T><<<(n + 127) / 128, 128, 0, s>>>(x, n); }
void agg(float* x, int n, cudaStream_t s) {
    cudaLaunchConfig_t c = {dim3(n), dim3(64), 256, s};
    cudaLaunchKernelEx(&c, fill<float>, x, n);
}
void elsewhere(cudaLaunchConfig_t* cfg, float* x, int n) { cudaLaunchKernelEx(cfg, fill<float>, x, n); }
void unknown_args(void** params, int n) { cudaLaunchKernel(reinterpret_cast<void*>(&fill<float>), n, 32, params); }
"""
    model = parse(text)
    sites = model.launches_of("fill")
    assert [(s.style, s.template_args) for s in sites] == [
        ("chevron", ("T",)), ("launch_kernel_ex", ("float",)), ("launch_kernel_ex", ("float",)),
        ("launch_kernel", ("float",))]
    agg, other, unknown = sites[1:]
    assert (agg.grid, agg.block, agg.smem, agg.stream) == ("dim3(n)", "dim3(64)", "256", "s")
    assert not other.config_known and other.grid == "?"
    assert not unknown.args_known and unknown.smem_insert is not None
    # inference starts only from launches it can read
    assert model.readable_launches_of("fill") == (sites[0], agg)


# ----------------------------------------------------------------- the workspace scan
def test_scan_finds_every_launcher_and_skips_build_dependency_and_vcs_folders(project: Path) -> None:
    found = find_launches(project, "row_sum", exclude=project / "src" / "rows.cu")
    assert {f.path.relative_to(project.resolve()).as_posix(): [s.line + 1 for s in f.sites]
            for f in found.files} == {"src/launch.cpp": [9, 14, 21, 26], "src/rows.cuh": [8]}
    assert found.skipped == []


def test_scan_uses_the_editors_text_leaves_other_kernels_of_the_name_and_is_bounded(project: Path) -> None:
    other = project / "tools" / "own.cu"
    other.parent.mkdir()
    other.write_text("__global__ void row_sum(int* a) {}\nvoid go(int* a) { row_sum<<<1, 32>>>(a); }\n")
    launcher = (project / "src" / "rows.cuh").resolve()
    unsaved = launcher.read_text().replace("row_sum<<<", "row_sum<<<2 * ")
    found = find_launches(project, "row_sum", overlay={launcher: unsaved}, exclude=project / "src" / "rows.cu")
    header = next(f for f in found.files if f.path == launcher)
    assert header.sites[0].grid.startswith("2 * ")
    assert not any(f.path.name == "own.cu" for f in found.files)
    assert any("own.cu: defines its own `row_sum`" in s for s in found.skipped)
    small = find_launches(project, "row_sum", max_files=2)
    assert len(small.files) <= 2 and any("more than 2 source files" in s for s in small.skipped)
    tiny = find_launches(project, "row_sum", max_file_bytes=100)
    assert tiny.files == [] and any("above the 100-byte limit" in s for s in tiny.skipped)


# ----------------------------------------------------------------- the binding and the rewrite
def test_to_c_writes_ceiling_divisions_as_people_do() -> None:
    assert to_c("cdiv(n_rows, 8)") == "(n_rows + 7) / 8"
    assert to_c("cdiv(a * b, BLOCK)") == "((a * b) + BLOCK - 1) / BLOCK"
    assert to_c("max(n, 1)") == "(n > 1 ? n : 1)"


def test_accept_rewrites_each_mechanical_site_in_its_own_names_in_one_change(project: Path) -> None:
    p = _prepared(project)
    change = p.workspace_change(_variant(p, **WARP_PER_ROW))
    # the kernel's own file: the annotation's launch line follows the variant, and is not the only change
    assert "// @warpforge launch grid=cdiv(rows, 8), block=256" in change.new_text
    cpp, cuh = (project / "src" / "launch.cpp").resolve(), (project / "src" / "rows.cuh").resolve()
    assert set(change.files) == {cpp, cuh}
    new_cpp = change.files[cpp][1]
    # <<<grid, block>>> over dim3 variables (THREADS is a file-scope constexpr): rewritten in place
    assert "row_sum<<<(n_rows + 7) / 8, 256>>>(in, out, n_rows, n_cols);" in new_cpp
    # cudaLaunchKernel keeps its dim3 style and its stream
    assert "cudaLaunchKernel((const void*)row_sum, dim3((n_rows + 7) / 8), dim3(256), args, 0, s);" in new_cpp
    # cudaLaunchKernelEx: the config struct's assignment
    assert "cfg.gridDim = dim3((n_rows + 7) / 8);" in new_cpp
    # the header writes it in the header's names (rows_here is what it passes as n_rows), stream kept
    assert "row_sum<<<(rows_here + 7) / 8, 256, 0, stream>>>(in, out, rows_here, cols_here);" in change.files[cuh][1]
    # the run-time block size: not written, said with file:line, old and new configuration
    [manual] = change.manual
    assert manual.where(change.root) == "src/launch.cpp:26" and not manual.mechanical
    assert manual.old == "<<<(n_rows + threads - 1) / threads, threads>>>"
    assert manual.new == "<<<(n_rows + 7) / 8, 256>>>"
    assert "threads" in manual.reason
    assert "row_sum<<<(n_rows + threads - 1) / threads, threads>>>" in new_cpp  # left as it was
    assert p.launch_writable(_variant(p, **WARP_PER_ROW)) is False


def test_the_diff_shows_every_file_and_the_change_to_make_by_hand(project: Path) -> None:
    p = _prepared(project)
    diff = p.diff(_variant(p, **WARP_PER_ROW))
    assert "+++ b/src/rows.cuh\n" in diff and "+++ b/src/launch.cpp\n" in diff
    assert "+    cfg.gridDim = dim3((n_rows + 7) / 8);" in diff
    assert ("# needs a launch change (not applied): src/launch.cpp:26: launch "
            "<<<(n_rows + threads - 1) / threads, threads>>> -> <<<(n_rows + 7) / 8, 256>>>") in diff
    manual_part = diff.split("+++ b/src/launch.cpp (needs a launch change: not applied)")[1]
    assert "-    row_sum<<<(n_rows + threads - 1) / threads, threads>>>(in, out, n_rows, n_cols);" in manual_part
    assert "+    row_sum<<<(n_rows + 7) / 8, 256>>>(in, out, n_rows, n_cols);" in manual_part


def test_shared_memory_is_added_where_a_launch_does_not_write_it(project: Path) -> None:
    p = _prepared(project)
    change = p.workspace_change(_variant(p, grid=("rows",), block=("128",), smem="128 * 4"))
    new_cpp = change.files[(project / "src" / "launch.cpp").resolve()][1]
    assert "row_sum<<<n_rows, 128, 128 * 4>>>(in, out, n_rows, n_cols);" in new_cpp
    assert "cudaLaunchKernel((const void*)row_sum, dim3(n_rows), dim3(128), args, 128 * 4, s);" in new_cpp
    assert "    cfg.dynamicSmemBytes = 128 * 4;\n    cudaLaunchKernelEx(&cfg, row_sum" in new_cpp


def test_a_variant_keeping_the_launch_changes_no_launch_site(project: Path) -> None:
    p = _prepared(project)
    same = _variant(p, grid=("cdiv(rows,256)",), block=("256",))
    assert keeps_launch(same, p.spec) and keeps_launch(_variant(p), p.spec)
    assert not keeps_launch(_variant(p, **WARP_PER_ROW), p.spec)
    change = p.workspace_change(same)
    assert change.changes == [] and change.files == {} and p.launch_writable(same)


def test_a_size_that_is_not_passed_at_a_site_cannot_be_written_there(tmp_path: Path) -> None:
    """Near miss: the launcher is handed a precomputed block count, not the row count the variant's grid
    needs; its launch matches the spec's only through a name WarpForge cannot relate to `rows`."""
    (tmp_path / "k.cu").write_text(
        "// @warpforge size rows = 1024\n// @warpforge arg x: inout float[rows]\n// @warpforge arg n = rows\n"
        "// @warpforge launch grid=cdiv(rows, 128), block=128\n"
        "__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
        "if (i < n) x[i] *= 2.0f; }\n")
    (tmp_path / "host.cpp").write_text(
        "void go(float* x, int blocks, int len) { scale<<<blocks, 128>>>(x, len); }\n"
        "void called(float* x, int count) { scale<<<(count + 127) / 128, 128>>>(x, count); }\n")
    path = tmp_path / "k.cu"
    src = SourceText(path.read_text())
    model = parse(src.data)
    k = model.require("scale")
    p = PreparedKernel(str(path), src, model, k, build_spec(src, model, k, str(path))).with_workspace(tmp_path)
    change = p.workspace_change(Candidate("scale", p.kernel_text, grid=("cdiv(rows, 512)",), block=("128",)))
    by_line = {c.line: c for c in change.changes}
    assert not by_line[1].mechanical and "grid `blocks`" in by_line[1].reason
    assert by_line[2].mechanical and by_line[2].new == "<<<(count + 511) / 512, 128>>>"


def test_sites_in_the_kernels_own_file_bind_through_callers(tmp_path: Path) -> None:
    """An inferred spec names its sizes after the caller's variables; the launcher's own parameter is what
    the rewrite must use."""
    text = ("__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
            "if (i < n) x[i] *= 2.0f; }\n"
            "void launch(float* x, int count) { scale<<<(count + 255) / 256, 256>>>(x, count); }\n"
            "int main() { int len = 1 << 20; float* d; cudaMalloc(&d, len * sizeof(float)); launch(d, len); }\n")
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("scale")
    spec = build_spec(src, model, k, "k.cu")
    assert [s.name for s in spec.sizes] == ["len"]
    change = apply_workspace("k.cu", text, k, Candidate("scale", src.slice(k.span), grid=("cdiv(len, 1024)",)),
                             spec, model)
    assert "scale<<<(count + 1023) / 1024, 256>>>(x, count);" in change.new_text
    assert [c.mechanical for c in change.changes] == [True]


# ----------------------------------------------------------------- --keep-launch and the preference
@dataclass(frozen=True)
class Ev:
    status: str
    reason: str
    speedup: float | None


class ByFamily:
    """Synthetic evaluator: each family's fixed speedup (no GPU; what is tested is which variants are
    searched and which one wins)."""

    def __init__(self, speeds: dict[str, float]) -> None:
        self.speeds = speeds
        self.seen: list[str] = []

    async def evaluate(self, c: Candidate) -> Ev:
        self.seen.append(c.family)
        return Ev("ok", "", self.speeds.get(c.family, 1.0))


class TwoVariants:
    name = "two"

    def __init__(self, p: PreparedKernel) -> None:
        self.p = p

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        if node.parent is not None:
            return []
        body = self.p.kernel_text
        return [Candidate("row_sum", body, family="warp_per_row", grid=("cdiv(rows, 8)",), block=("256",)),
                Candidate("row_sum", body.replace("float s = 0.0f;", "float s = 0.0f;  // kept"), family="unroll")]


def _request(p: PreparedKernel, keep: bool = False, writable: bool = True) -> OptimizeRequest:
    return OptimizeRequest(p.file, p.text, "row_sum", "beam", Budget(max_candidates=8), prepared=p.parts(),
                           keep_launch=keep, launch_writable=p.launch_writable if writable else None)


def test_keep_launch_searches_only_variants_that_keep_the_launch(project: Path) -> None:
    p = _prepared(project)
    ev = ByFamily({"warp_per_row": 6.0, "unroll": 1.3})
    out = asyncio.run(optimize(_request(p, keep=True), ev, policy=TwoVariants(p)))
    assert "warp_per_row" not in ev.seen and out.result.best.candidate.family == "unroll"
    assert all(keeps_launch(n.candidate, p.spec) for n in out.result.nodes)


def test_a_launch_keeping_winner_close_in_speed_is_preferred_over_one_needing_a_change_by_hand(
        project: Path) -> None:
    p = _prepared(project)
    close = ByFamily({"warp_per_row": 1.40, "unroll": 1.30})
    out = asyncio.run(optimize(_request(p), close, policy=TwoVariants(p)))
    assert out.result.best.candidate.family == "unroll"  # 1.30 >= 0.9 x 1.40, and needs nothing by hand
    far = ByFamily({"warp_per_row": 6.0, "unroll": 1.3})
    out = asyncio.run(optimize(_request(p), far, policy=TwoVariants(p)))
    best = out.result.best.candidate
    assert best.family == "warp_per_row"  # clearly faster: kept first, and labelled
    assert p.workspace_change(best).needs_launch_change
    # without launch sites to keep correct there is no preference: the fastest wins
    out = asyncio.run(optimize(_request(p, writable=False), close, policy=TwoVariants(p)))
    assert out.result.best.candidate.family == "warp_per_row"


def test_prefer_writable_keeps_the_order_when_the_fastest_needs_nothing_by_hand() -> None:
    def node(i: int, speed: float, fam: str) -> Node:
        n = Node(i, Candidate("k", f"s{i}", family=fam), None)
        n.evaluation = Ev("ok", "", speed)
        return n

    a, b, c = node(1, 2.0, "launch"), node(2, 1.85, "x"), node(3, 1.7, "y")

    def writable(cand: Candidate) -> bool:
        return cand.family != "launch"

    assert prefer_writable([a, b, c], writable) == [b, a, c]
    assert prefer_writable([a, c], writable) == [a, c]  # 1.7 < 0.9 x 2.0
    assert prefer_writable([b, a], writable) == [b, a]
    assert prefer_writable([a, b], None) == [a, b]


def test_launch_keeping_policy_forwards_everything_else() -> None:
    class Inner:
        name = "inner"

        async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
            return []

        def report(self) -> str:
            return "inner report"

    text = (PROJECT / "src" / "rows.cu").read_text()
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("row_sum")
    wrapped = LaunchKeeping(Inner(), build_spec(src, model, k, "rows.cu"))
    assert wrapped.name == "inner" and wrapped.report() == "inner report"


# ----------------------------------------------------------------- the editor setting and the CLI's options
def test_keep_launch_setting_takes_true_or_false_only() -> None:
    from warpforge.lsp.settings import Settings

    s = Settings()
    assert s.update({"warpforge": {"keepLaunch": True}}) == ["keep_launch"] and s.keep_launch is True
    assert s.update({"keepLaunch": "yes"}) == [] and s.keep_launch is True
    assert "expected true or false" in s.take_rejected()[0]


def test_cli_workspace_must_be_a_folder_and_defaults_to_the_files_folder_outside_the_current_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from warpforge.cli import main
    from warpforge.commands.optimize import workspace_root

    kernel = PROJECT / "src" / "rows.cu"
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    assert main(["optimize", str(kernel), "--keep-launch", "--workspace", str(tmp_path / "nope")]) == 2
    assert "--workspace" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(workspace=None, file=str(kernel))
    assert workspace_root(args) == kernel.parent.resolve()
    monkeypatch.chdir(PROJECT)
    assert workspace_root(args) == PROJECT.resolve()


# ----------------------------------------------------------------- the project's own build after accept
def warp_per_row_variant(p: PreparedKernel) -> Candidate:
    """The warp-per-row rule's own variant of the fixture kernel (what a search would offer)."""
    from warpforge.policy.offline import offline_policy

    req = OptimizeRequest(p.file, p.text, "row_sum", prepared=p.parts())
    root = p.original()
    proposed = asyncio.run(offline_policy(req).propose(Node(0, root, None), SearchContext(root=root)))
    return next(c for c in proposed if c.steps == ("warp_per_row:warp8",))


def accept_into(root: Path) -> list[str]:
    """Accept the warp-per-row variant into the project at ``root`` the way --apply does; the manual sites."""
    p = _prepared(root)
    change = p.workspace_change(warp_per_row_variant(p))
    Path(p.file).write_text(change.new_text)
    for path, (_old, new) in change.files.items():
        path.write_text(new)
    return [c.message(change.root) for c in change.manual]


def build_check(root: Path, out: Path) -> None:
    """The project's own build: every source compiled as CUDA and linked into its check program."""
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    import subprocess

    r = subprocess.run([nvcc, "-arch=sm_90", "-x", "cu", "-o", str(out), "src/rows.cu", "src/launch.cpp",
                        "src/check.cu"], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_project_builds_with_its_own_build_after_accepting_a_warp_per_row_variant(project: Path) -> None:
    manual = accept_into(project)
    assert len(manual) == 1 and manual[0].startswith("src/launch.cpp:26: ")
    kernel_file = (project / "src" / "rows.cu").read_text()
    assert "// @warpforge launch grid=cdiv(rows, 8), block=256" in kernel_file and "__shfl_xor_sync" in kernel_file
    assert "row_sum<<<(rows_here + 7) / 8, 256, 0, stream>>>" in (project / "src" / "rows.cuh").read_text()
    build_check(project, project / "check")
    assert (project / "check").stat().st_size > 0


def test_a_tunable_block_size_is_a_launch_change_written_as_its_value(tmp_path: Path) -> None:
    """The spec's launch uses the tunable BLOCK; a variant tuned to BLOCK=128 changes the launch of a host
    site that writes 256, and the site gets the value (its file cannot see the kernel file's #define)."""
    (tmp_path / "k.cu").write_text(
        "#ifndef BLOCK\n#define BLOCK 256\n#endif\n"
        "// @warpforge size n = 4096\n// @warpforge arg x: inout float[n]\n// @warpforge arg len = n\n"
        "// @warpforge tune BLOCK = 256, 128\n// @warpforge launch grid=cdiv(n, BLOCK), block=BLOCK\n"
        "__global__ void twice(float* x, int len) { int i = blockIdx.x * BLOCK + threadIdx.x; "
        "if (i < len) x[i] *= 2.0f; }\n")
    (tmp_path / "host.cpp").write_text("void go(float* x, int m) { twice<<<(m + 255) / 256, 256>>>(x, m); }\n")
    path = tmp_path / "k.cu"
    src = SourceText(path.read_text())
    model = parse(src.data)
    k = model.require("twice")
    p = PreparedKernel(str(path), src, model, k, build_spec(src, model, k, str(path))).with_workspace(tmp_path)
    tuned = Candidate("twice", p.kernel_text, defines={"BLOCK": "128"})
    assert not keeps_launch(tuned, p.spec) and keeps_launch(Candidate("twice", p.kernel_text), p.spec)
    change = p.workspace_change(tuned)
    [site] = change.changes
    assert site.mechanical, site.reason
    assert change.files[(tmp_path / "host.cpp").resolve()][1] == \
        "void go(float* x, int m) { twice<<<(m + 127) / 128, 128>>>(x, m); }\n"
    assert "#define BLOCK 128" in change.new_text
