"""GPU check of the structural rules: every variant computes what the original kernel computes.

For each reference kernel and each variant the structural rules propose (plus compositions with the
tuning rules), the original and the variant are compiled (nvcc, sm_90 or the device's own arch), run with
pycuda on the same random inputs — outputs poisoned first, so an element the variant fails to write shows
up — at the spec size (two seeds) and at the perturbed odd size, and every writable buffer is compared
within the spec's tolerances. Then both are timed at the spec size (CUDA events, interleaved rounds,
median) and the speedup is reported in a table at the end.

Besides the reference kernels, ``GENERAL`` lists corpus kernels written apart from the rules in different
styles (guarded bodies, pointer bumping, arg-max pairs, per-row scalar outputs) and the unseen-style
fixture: the rules reach them through the canonical form, and their variants are checked the same way.

A self-contained harness (not ``warpforge.gpu``'s evaluator): it checks the rules, not the engine.
Run on the GPU machine: ``pytest -m gpu tests/test_rules_gpu.py``.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from conftest import KERNEL_FILES, ROOT
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load
from warpforge.spec.model import LaunchSpec, Role, canonical_dtype, default_distribution
from warpforge.spec.resolve import load_spec

pytestmark = pytest.mark.gpu

MINE = frozenset({"vectorize", "warp_reduce", "reduce_coarsen", "warp_per_row", "smem_tiling",
                  "smem_transpose", "atomics_privatize", "coarsen_y", "smem_halo", "single_pass",
                  "column_split", "stride_reduce", "lane_remap", "element_remap", "column_remap"})
#: kernels written apart from the rules (benchmarks/corpus) and the unseen-style fixture, each in another
#: style: the general forms of the rules (through the canonical form) must verify on them too
GENERAL = [*(ROOT / "benchmarks" / "corpus" / f"{n}.cu" for n in (
    "row_softmax_guarded", "log_softmax_bump", "row_argmax", "cross_entropy_loss", "layernorm_fwd_stats",
    # elementwise maps in other styles: fp16 with scalar arguments, an in-place grid-stride loop over size_t,
    # fp64 in place with a broadcast read, a template gathering from a read-only buffer
    "residual_add_scale_fp16", "sgd_momentum_gridstride", "clip_grad_scale_double", "swiglu_fwd_template",
    # maps whose reads are gathers from read-only buffers (a window, a permutation, a plane view)
    "maxpool2x2_nhwc", "permute_nchw_to_nhwc", "bilinear_resize_2x",
    # neighbourhood reads on 2D/3D grids (coarsen_y; smem_halo on all but the convolution): an exit-form fp32
    # stencil, an fp16 pooling window over planes in z, a typedef'd direct convolution, a guarded fp64 3D
    # stencil with long indices on 8x8x8 blocks
    "stencil2d_5pt", "avgpool3x3_stride1_fp16", "conv2d_direct_nchw", "stencil3d_7pt_long",
    # rows over a flattened 2-D grid; a max and a min in one if/else-if chain
    "row_sum_2d_grid", "row_max_min_two_outputs",
    # rows sized from the spec: few long rows walked by a nested loop (blocks of 512/1024 per row), rows that
    # several passes read (staged in shared memory: fp16 through a macro, a size_t-indexed RMS norm)
    "channel_mean_nchw", "softmax_fp16_macro", "rmsnorm_sizet",
    # matmul form: index macros, batches on blockIdx.z with strides, a template with a transposed operand and
    # an epilogue, a causal mask skipped per tile
    "sgemm_macro_2d", "batched_gemm_strided", "gemm_bias_relu_template", "causal_attn_scores",
    # column reductions (column_split: a sum, a compare-and-assign max on a batched 2-D grid) and full sums
    # into one address (stride_reduce: chunks per thread re-dealt, a grid-stride dot product)
    "bias_grad_colsum", "col_max_2d", "full_sum_atomic", "dot_product_gridstride")),
    ROOT / "tests" / "fixtures" / "unseen_rowloss.cu"]
KERNELS = {p.stem: p for p in [*KERNEL_FILES, *GENERAL]}
NP: dict[str, Any] = {
    "float32": np.float32, "float64": np.float64, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
    "uint64": np.uint64, "float16": np.float16, "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
    "uint16": np.uint16}
RESULTS: list[dict[str, Any]] = []


@functools.cache
def policy(stem: str) -> OfflinePolicy:
    load()
    path = KERNELS[stem]
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    (k,) = model.kernels
    return OfflinePolicy(str(path), src, model, k, load_spec(path, k.name), families=set(REGISTRY))


def cases() -> list[tuple[str, Candidate]]:
    """Every structural variant of every reference kernel, those reached through grid_stride first, and
    structural variants stacked on structural variants (reduce_coarsen then warp_reduce, single_pass then
    warp_per_row)."""
    out: list[tuple[str, Candidate]] = []
    for stem in sorted(KERNELS):
        pol = policy(stem)
        root = pol.root_candidate()
        kids = pol.propose_sync(root)
        out.extend((stem, c) for c in kids if c.family in MINE)
        for first in kids:
            # single_pass fuses two passes of a thread-per-row kernel: the search then gives it a warp per row
            if first.steps == ("grid_stride:4",) or first.family == "single_pass" \
                    or (first.family in MINE and first.steps[0].endswith(":sm8")):
                out.extend((stem, c) for c in pol.propose_sync(first) if c.family in MINE)
    return out


CASES = cases()


@pytest.fixture(scope="module")
def cuda() -> Iterator[Any]:
    drv = pytest.importorskip("pycuda.driver")
    drv.init()
    if drv.Device.count() == 0:
        pytest.skip("no CUDA device")
    dev = drv.Device(0)
    ctx = dev.make_context()
    try:
        yield drv
    finally:
        ctx.pop()
        ctx.detach()


def _arch() -> str:
    return os.environ.get("WF_ARCH", "sm_90")


@functools.cache
def _built(stem: str, definition: str | None, defines: tuple[tuple[str, str], ...],
           flags: tuple[str, ...]) -> tuple[bytes, str]:
    pol = policy(stem)
    inst = tuple(pol.spec.template_args) if pol.kernel.template_params else None  # a template needs an instance
    tu = standalone(pol.source, pol.model, pol.kernel, definition=definition, filename=pol.file, instantiate=inst)
    res = compile_cubin(tu, arch=_arch(), defines=dict(defines), flags=list(flags), filename=pol.file)
    assert res.ok, res.log[-3000:]
    sym = res.entry_symbol(pol.kernel.name)
    assert sym is not None
    return res.cubin, sym


def _build(stem: str, cand: Candidate | None) -> tuple[bytes, str]:
    pol = policy(stem)
    defines = {t.name: t.values[0] for t in pol.spec.tunables}
    if cand is not None:
        defines.update(cand.define_map())
    return _built(stem, cand.definition if cand else None, tuple(sorted(defines.items())),
                  tuple(cand.flags) if cand else ())


@pytest.fixture(scope="module", autouse=True)
def _prebuild(cuda: Any) -> None:
    """Compile everything up front, in parallel (nvcc dominates the wall time otherwise)."""
    jobs: list[tuple[str, Candidate | None]] = [(s, None) for s in KERNELS] + list(CASES)
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda j: _build(*j), jobs))


def _inputs(stem: str, resolved: Any, seed: int) -> dict[str, np.ndarray[Any, Any] | np.generic]:
    pol = policy(stem)
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for a in resolved.args:
        p = pol.kernel.param(a.name)
        assert p is not None
        if a.role is Role.SCALAR:
            out[a.name] = NP[canonical_dtype(p.type) or "float32"](a.value)
            continue
        dt: Any = NP[a.dtype]
        n = int(a.count)
        if a.role is Role.OUT:  # poisoned: every element must be written
            arr = np.full(n, np.nan, dt) if np.issubdtype(dt, np.floating) else np.full(n, np.iinfo(dt).max // 3, dt)
        else:
            d = a.distribution
            if d is None:
                spec_arg = pol.spec.arg(a.name)
                assert spec_arg is not None
                d = default_distribution(spec_arg.dtype).resolve({})
            if d.kind == "uniform":
                arr = rng.uniform(d.a, d.b, n).astype(dt)
            elif d.kind == "normal":
                arr = rng.normal(d.a, d.b, n).astype(dt)
            elif d.kind == "int":
                arr = rng.integers(int(d.a), int(d.b), n).astype(dt)
            elif d.kind == "const":
                arr = np.full(n, d.a, dt)
            else:
                arr = np.zeros(n, dt)
        out[a.name] = arr
    return out


def _resolve(stem: str, cand: Candidate | None, perturbed: bool) -> Any:
    spec = policy(stem).spec
    tun = cand.define_map() if cand is not None else None
    if cand is not None and cand.launch is not None:
        lo = cand.launch
        spec = replace(spec, launch=LaunchSpec(lo.grid or spec.launch.grid, lo.block or spec.launch.block,
                                               lo.smem or spec.launch.smem))
    return spec.resolve(perturbed=perturbed, tunables=tun)


class _Runner:
    def __init__(self, drv: Any, stem: str, cand: Candidate | None) -> None:
        self.drv = drv
        self.stem = stem
        cubin, sym = _build(stem, cand)
        self.module = drv.module_from_buffer(cubin)
        self.func = self.module.get_function(sym)
        self.cand = cand

    def launch_args(self, perturbed: bool, host: dict[str, Any]) -> tuple[list[Any], dict[str, Any], Any]:
        r = _resolve(self.stem, self.cand, perturbed)
        pol = policy(self.stem)
        dev: dict[str, Any] = {}
        args: list[Any] = []
        for p in pol.kernel.params:
            v = host[p.name]
            if isinstance(v, np.ndarray):
                dev[p.name] = self.drv.to_device(v)
                args.append(dev[p.name])
            else:
                args.append(v)
        return args, dev, r

    def run(self, perturbed: bool, host: dict[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
        args, dev, r = self.launch_args(perturbed, host)
        self.func(*args, block=r.block, grid=r.grid, shared=r.smem)
        self.drv.Context.synchronize()
        out = {}
        for a in r.args:
            if a.role in (Role.OUT, Role.INOUT):
                out[a.name] = self.drv.from_device_like(dev[a.name], host[a.name])
        for d in dev.values():
            d.free()
        return out

    def time(self, args: list[Any], r: Any, reps: int) -> float:
        drv = self.drv
        start, end = drv.Event(), drv.Event()
        start.record()
        for _ in range(reps):
            self.func(*args, block=r.block, grid=r.grid, shared=r.smem)
        end.record()
        end.synchronize()
        return float(start.time_till(end)) / reps


def _compare(stem: str, want: dict[str, Any], got: dict[str, Any]) -> None:
    spec = policy(stem).spec
    for name, w in want.items():
        g = got[name]
        a = spec.arg(name)
        assert a is not None
        if np.issubdtype(w.dtype, np.floating):
            rtol, atol = spec.tolerance_for(a)
            nan_w, nan_g = np.isnan(w), np.isnan(g)
            assert not nan_w.any(), f"{name}: the original left {int(nan_w.sum())} elements unwritten"
            assert not nan_g.any(), f"{name}: the variant left {int(nan_g.sum())} elements unwritten (NaN)"
            err = np.abs(g.astype(np.float64) - w.astype(np.float64))
            bad = err > atol + rtol * np.abs(w.astype(np.float64))
            assert not bad.any(), (f"{name}: {int(bad.sum())} of {w.size} elements off; worst at "
                                   f"{int(np.argmax(err))}: got {g.flat[int(np.argmax(err))]}, "
                                   f"want {w.flat[int(np.argmax(err))]}")
        else:
            assert np.array_equal(w, g), f"{name}: {int((w != g).sum())} of {w.size} elements differ"


@pytest.mark.parametrize("stem,cand", CASES, ids=[f"{s}-{'+'.join(c.steps)}" for s, c in CASES])
def test_variant_matches_original(cuda: Any, stem: str, cand: Candidate) -> None:
    orig = _Runner(cuda, stem, None)
    var = _Runner(cuda, stem, cand)
    for perturbed, seed in ((False, 0), (False, 1), (True, 2)):
        r = _resolve(stem, None, perturbed)
        host = _inputs(stem, r, seed)
        want = orig.run(perturbed, host)
        got = var.run(perturbed, host)
        try:
            _compare(stem, want, got)
        except AssertionError as e:
            raise AssertionError(f"{'perturbed' if perturbed else 'spec'} size, seed {seed}: {e}") from e
    # timing at the spec size, interleaved rounds, median of per-launch times
    host = _inputs(stem, _resolve(stem, None, False), 3)
    oa, od, orr = orig.launch_args(False, host)
    va, vd, vr = var.launch_args(False, host)
    to, tv = [], []
    orig.time(oa, orr, 3)
    var.time(va, vr, 3)
    for _ in range(7):
        to.append(orig.time(oa, orr, 10))
        tv.append(var.time(va, vr, 10))
    for d in (*od.values(), *vd.values()):
        d.free()
    mo, mv = statistics.median(to), statistics.median(tv)
    RESULTS.append({"kernel": stem, "steps": "+".join(cand.steps), "orig_ms": mo, "variant_ms": mv,
                    "speedup": mo / mv if mv > 0 else float("inf")})


def test_zz_report(cuda: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The table of speedups (runs last in this file)."""
    name = cuda.Device(0).name()
    lines = [f"GPU: {name}", f"{'kernel':<12} {'variant':<36} {'orig ms':>9} {'var ms':>9} {'speedup':>8}"]
    for r in RESULTS:
        lines.append(f"{r['kernel']:<12} {r['steps']:<36} {r['orig_ms']:9.4f} {r['variant_ms']:9.4f} "
                     f"{r['speedup']:7.2f}x")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    path = os.environ.get("WF_GPU_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"gpu": name, "results": RESULTS}, f, indent=1)
