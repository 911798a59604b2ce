"""benchmarks/kt_suite.py: Kernel Tuner's inputs for any kernel WarpForge optimizes (templates, C++ names,
launches from the spec), checked without a GPU.

Kernel Tuner is not installed here (it is the ``bench`` extra of the GPU machine), so these tests check
what it is given: the plan's launch of each configuration is the spec's, and the source it compiles builds
with nvcc the way Kernel Tuner's PyCUDA backend builds it (its ``#define`` lines for the configuration
prepended, ``nvcc --cubin -e SYMBOL``, no ``extern "C"`` wrapping because the source says ``extern "C"``),
exporting the mangled symbol it launches. The wrapping that broke templated kernels before is reproduced
to show that it still would.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_nvcc

sys.path.insert(0, str(ROOT / "benchmarks"))

import kt_suite as kt

FIXTURES = ROOT / "tests" / "fixtures"


def kt_source(p: kt.KTPlan, config: dict[str, Any]) -> str:
    """The source as Kernel Tuner prepares it for ``config``: its defines (grid, block, parameters) first."""
    grid, block, _smem = p.launch(config)
    lines = [f"#define grid_size_{d} {g}" for d, g in zip("xyz", grid, strict=True)]
    lines += [f"#define block_size_{d} {b}" for d, b in zip("xyz", block, strict=True)
              if f"block_size_{d}" not in config]
    lines += [f"#define {k} {v}" for k, v in config.items()]
    return "\n".join([*lines, "#define kernel_tuner 1", p.source])


def pycuda_build(tmp_path: Path, p: kt.KTPlan, source: str, name: str) -> subprocess.CompletedProcess[str]:
    """nvcc as PyCUDA's SourceModule runs it (``no_extern_c``: the source as it is), with Kernel Tuner's options."""
    cu = tmp_path / f"{name}.cu"
    cu.write_text(source)
    return subprocess.run(["nvcc", "--cubin", "-arch", "compute_90", "-code", "sm_90", "-Xcompiler=-Wall",
                           *p.compiler_options, "-e", p.symbol, str(cu), "-o", str(tmp_path / f"{name}.cubin")],
                          capture_output=True, text=True, timeout=300)


def builds_symbol(tmp_path: Path, p: kt.KTPlan, config: dict[str, Any], name: str) -> None:
    assert 'extern "C"' in p.source  # what makes Kernel Tuner's PyCUDA backend pass no_extern_c
    proc = pycuda_build(tmp_path, p, kt_source(p, config), name)
    assert proc.returncode == 0, proc.stderr
    assert p.symbol.encode() in (tmp_path / f"{name}.cubin").read_bytes()


def spec_launch(p: kt.KTPlan) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    r = p.spec.resolve()
    return tuple(r.grid), tuple(r.block), int(r.smem)


def kt_grid(p: kt.KTPlan, config: dict[str, Any]) -> tuple[int, ...]:
    """The grid Kernel Tuner computes: ceil(problem_size / divisor), the divisor of an empty list being 1."""
    kw = p.kt_kwargs()
    assert kw["grid_div_x"] == kw["grid_div_y"] == kw["grid_div_z"] == []
    return tuple(math.ceil(s / 1) for s in p.problem_size()(config))


@needs_nvcc
def test_a_templated_kernel_launched_from_host_code(tmp_path: Path) -> None:
    """``tscale<float, 128>``: its launch comes from main() (inferred spec), its symbol is a C++ template's."""
    p = kt.plan(FIXTURES / "host_launch.cu", "tscale")
    assert p.symbol.startswith("_Z6tscaleIfLi128E")  # mangled: the instantiation with the spec's arguments
    assert p.launch(p.default) == spec_launch(p) and kt_grid(p, p.default) == spec_launch(p)[0]
    assert p.free == {}  # it indexes with its template's B: its block is not free to change
    assert p.notes == ["no launch-parameter space: the spec's own launch only"]
    builds_symbol(tmp_path, p, p.default, "tscale")
    # what PyCUDA did before (no `extern "C"` in the source): wrap it all, which a template cannot be
    wrapped = 'extern "C" {\n' + p.source.replace(kt.LINKAGE_NOTE, "") + "\n}\n"
    proc = pycuda_build(tmp_path, p, wrapped, "wrapped")
    assert proc.returncode != 0 and 'extern "C" linkage' in proc.stderr


@needs_nvcc
def test_functor_templates_with_a_free_block_size(tmp_path: Path) -> None:
    """``map_scaled<Square, Scale<3>>`` reads its block through blockDim: Kernel Tuner may vary it, and the
    grid follows the spec's expression `(n + 255) / 256` with the new block."""
    p = kt.plan(FIXTURES / "forms" / "templated.cu", "map_scaled")
    assert p.free == {0: "256"} and p.params == {"block_size_x": [32, 64, 128, 256, 512, 1024]}
    assert p.launch(p.default) == spec_launch(p)
    assert p.launch({"block_size_x": 128}) == ((4, 1, 1), (128, 1, 1), 0)  # n = 512
    assert kt_grid(p, {"block_size_x": 32}) == (16, 1, 1)
    builds_symbol(tmp_path, p, {"block_size_x": 128}, "map_scaled")
    # dynamic shared memory written with the block follows it (`256 * sizeof(floatX)`, one float a thread)
    s = kt.plan(FIXTURES / "forms" / "templated.cu", "staged_copy")
    assert s.launch({"block_size_x": 128})[2] == 512 and "smem_args" in s.kt_kwargs()
    assert s.kt_kwargs()["smem_args"]["size"]({"block_size_x": 64}) == 256


@needs_nvcc
def test_a_launch_through_a_struct_and_a_helper(tmp_path: Path) -> None:
    """``bias_relu``: its launch is in a helper taking a struct (`threads`, a size of the inferred spec)."""
    p = kt.plan(FIXTURES / "forms" / "launcher_struct.cu", "bias_relu")
    assert p.free == {0: "threads"} and p.launch(p.default) == spec_launch(p)
    rows_cols = 64 * 768
    assert p.launch({"block_size_x": 512})[0] == (math.ceil(rows_cols / 512), 1, 1)
    builds_symbol(tmp_path, p, {"block_size_x": 512}, "bias_relu")


@needs_nvcc
def test_spec_tunables_are_the_space_and_2d_blocks_are_restricted(tmp_path: Path) -> None:
    p = kt.plan(ROOT / "kernels" / "reduce_sum.cu")
    assert p.params == {"BLOCK_SIZE": [256, 128, 512, 1024]} and p.block_names[0] == "BLOCK_SIZE"
    assert p.default == {"BLOCK_SIZE": 256} and p.launch(p.default) == spec_launch(p)
    grid, block, _ = p.launch({"BLOCK_SIZE": 512})
    assert block == (512, 1, 1) and grid == (spec_launch(p)[0][0] // 2, 1, 1)  # the spec's grid follows BLOCK_SIZE
    builds_symbol(tmp_path, p, {"BLOCK_SIZE": 512}, "reduce_sum")
    t = kt.plan(ROOT / "kernels" / "transpose.cu")
    assert t.free == {0: "32", 1: "8"}
    assert all(32 <= c["block_size_x"] * c["block_size_y"] <= 1024 for c in t.configs())
    assert not t.valid({"block_size_x": 8, "block_size_y": 2}) and t.valid({"block_size_x": 64, "block_size_y": 4})
    assert t.launch(t.default) == spec_launch(t) == ((128, 512, 1), (32, 8, 1), 0)
    assert t.launch({"block_size_x": 64, "block_size_y": 4}) == ((64, 1024, 1), (64, 4, 1), 0)


def test_a_file_with_several_kernels_needs_one_named() -> None:
    with pytest.raises(kt.PlanError, match="name one as FILE:KERNEL"):
        kt.plan(FIXTURES / "host_launch.cu")


def _solutions(p: kt.KTPlan) -> list[dict[str, Any]]:
    """The configurations python-constraint (Kernel Tuner 1.x's search-space solver) keeps with the plan's
    restriction added as Kernel Tuner 1.5 adds a plain function: with one parameter, a ``FunctionConstraint``
    called with the value as a positional argument; with several, its "monolithic" wrapper, which calls the
    function with the configuration as a dict (``check_instance_restrictions``)."""
    from constraint import FunctionConstraint, Problem

    kw = p.kt_kwargs()
    (function,) = kw["restrictions"]
    assert callable(function) and not isinstance(function, tuple)
    names = list(p.params)
    problem = Problem()
    for name, values in p.params.items():
        problem.addVariable(name, list(values))
    if len(names) == 1:
        problem.addConstraint(FunctionConstraint(function), names)
    else:
        problem.addConstraint(FunctionConstraint(lambda *vals: bool(function(dict(zip(names, vals, strict=True))))),
                              names)
    return sorted(problem.getSolutions(), key=lambda c: [c[n] for n in p.params])


@needs_nvcc
def test_the_restriction_is_called_as_kernel_tuner_calls_it() -> None:
    """Kernel Tuner 1.5 hands a one-parameter space's bare value to a restriction (an ``int`` where ``valid``
    wanted a dict: 20 of the wide sample's 50 kernels failed so) and a several-parameter space's dict; the plan
    takes both, and the solver keeps exactly the plan's own configurations, one parameter or two."""
    one = kt.plan(FIXTURES / "forms" / "templated.cu", "map_scaled")
    assert _solutions(one) == one.configs() and len(one.configs()) == 6
    two = kt.plan(ROOT / "kernels" / "transpose.cu")
    got = _solutions(two)
    assert got == sorted(two.configs(), key=lambda c: [c[n] for n in two.params]) and len(got) >= 20
    assert all(32 <= c["block_size_x"] * c["block_size_y"] <= 1024 for c in got)


@needs_nvcc
def test_a_fixed_shared_memory_tile_keeps_the_block(tmp_path: Path) -> None:
    """A tile of fixed size in shared memory indexed by threadIdx: another block size would index past it (on
    the GPU, illegal accesses that killed Kernel Tuner's context for every later configuration), so the block
    is not searched; a dynamic (``extern``) array follows the launch and leaves it free."""
    fixed = tmp_path / "tiled.cu"
    fixed.write_text("""// @warpforge size n = 1 << 16
// @warpforge arg x: in float[n]
// @warpforge arg y: out float[n]
// @warpforge arg n = n
// @warpforge launch grid=cdiv(n, 256), block=256
__global__ void stage(const float* x, float* y, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = tile[blockDim.x - 1 - threadIdx.x];
}
""")
    p = kt.plan(fixed, "stage")
    assert p.free == {} and p.configs() == [p.default]
    dynamic = tmp_path / "dynamic.cu"
    dynamic.write_text(fixed.read_text().replace("__shared__ float tile[256];", "extern __shared__ float tile[];")
                       .replace("block=256", "block=256, smem=256 * 4"))
    d = kt.plan(dynamic, "stage")
    assert d.free == {0: "256"} and len(d.configs()) == 6
