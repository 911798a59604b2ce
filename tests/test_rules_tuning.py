"""The tuning rules of the offline policy: block_size, grid_stride, launch_bounds, unroll, compile_flags,
tunables, readonly_cache.

For each rule: what it proposes on the reference kernels (a table, so a change in applicability is a
visible diff), where it must NOT apply (near misses: the pattern almost matches but the rewrite would be
wrong), that every rewritten definition re-parses as the same kernel with the same parameters, that the
policy proposes and replays compositions without errors — and, with nvcc, that every variant of every
rule on every reference kernel (and stacked compositions of all of them) compiles.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from conftest import KERNEL_FILES, NVCC, needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate, LaunchOverride
from warpforge.cuda.extract import standalone
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, RuleContext, load
from warpforge.policy.rules.block_size import BlockSize, derive_grid, work_extent
from warpforge.spec.resolve import load_spec

MINE = frozenset({"block_size", "grid_stride", "launch_bounds", "unroll", "compile_flags", "fast_math", "tunables",
                  "readonly_cache"})
KERNELS = {p.stem: p for p in KERNEL_FILES}


@functools.cache
def kernel_policy(stem: str) -> OfflinePolicy:
    path = KERNELS[stem]
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    (k,) = model.kernels
    return OfflinePolicy(str(path), src, model, k, load_spec(path, k.name), families=set(MINE))


def text_policy(text: str, kernel: str, findings: tuple[object, ...] = ()) -> OfflinePolicy:
    """A policy over an inline fixture (an annotated kernel written in the test)."""
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", kernel, text=text),
                         findings=findings, families=set(MINE))


def ctx(policy: OfflinePolicy, cand: Candidate | None = None) -> RuleContext:
    return policy.context(cand or policy.root_candidate())


def variants(policy: OfflinePolicy, family: str, cand: Candidate | None = None) -> list[str]:
    load()
    return REGISTRY[family].variants(ctx(policy, cand))


def child(policy: OfflinePolicy, family: str, param: str, cand: Candidate | None = None) -> Candidate:
    load()
    c = ctx(policy, cand)
    assert param in REGISTRY[family].variants(c), (family, param, REGISTRY[family].variants(c))
    out = REGISTRY[family].apply(c, param)
    assert out is not None
    return out


def proposals(policy: OfflinePolicy, cand: Candidate | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in policy.propose_sync(cand or policy.root_candidate()):
        out.setdefault(c.family, []).append(c.steps[-1].split(":", 1)[1])
    assert not policy.errors, policy.errors
    return out


def signature(definition: str, name: str) -> list[tuple[str, str, int, bool, bool]]:
    model = parse(definition)
    assert not model.problems, model.problems
    k = model.kernel(name)
    assert k is not None, f"`{name}` no longer parses"
    return [(p.name, p.type, p.pointer_depth, p.is_const, p.is_restrict) for p in k.params]


# ------------------------------------------------------------------ what each rule proposes on kernels/

B1D = ["64", "128", "512", "1024"]
GS = ["2", "4", "8"]
LB = ["1", "2", "4"]
UN = ["2", "4", "8"]
TUNE = ["BLOCK_SIZE=128", "BLOCK_SIZE=512", "BLOCK_SIZE=1024"]
FAST = ["intrinsics"]
ALL = ["all"]

EXPECTED: dict[str, dict[str, list[str]]] = {
    # fast_math: only where an intrinsic changes something (conv1d's multiply-adds compile the same)
    "conv1d": {"block_size": B1D, "grid_stride": GS, "launch_bounds": LB, "unroll": UN, "readonly_cache": ALL},
    "gelu": {"block_size": B1D, "grid_stride": GS, "launch_bounds": LB, "fast_math": FAST,
             "readonly_cache": ALL},
    # integer-only: fast math would compile to the same code
    "histogram": {"block_size": B1D, "grid_stride": GS, "launch_bounds": LB, "readonly_cache": ALL},
    # block size is a tunable (so no block_size); __shared__ tree: no grid-stride; the reduction loop's
    # trip count is a compile-time constant (no unroll); 1024 x 4 blocks exceed an SM (no MINBLOCKS 4)
    "reduce_sum": {"launch_bounds": ["1", "2"], "tunables": TUNE, "readonly_cache": ALL},
    "rmsnorm": {"launch_bounds": ["1", "2"], "tunables": TUNE, "unroll": UN, "fast_math": FAST,
                "readonly_cache": ALL},
    "saxpy": {"block_size": B1D, "grid_stride": GS, "launch_bounds": LB, "readonly_cache": ALL},
    # 2D launches: 2D shapes; no grid-stride (not a 1D element-per-thread kernel)
    "sgemm": {"block_size": ["32x8", "32x16", "64x4"], "launch_bounds": LB, "unroll": UN,
              "readonly_cache": ALL},
    "softmax": {"block_size": B1D, "grid_stride": GS, "launch_bounds": LB, "unroll": UN, "fast_math": FAST,
                "readonly_cache": ALL},
    # a pure copy: no floating-point arithmetic for fast math to change
    "transpose": {"block_size": ["32x16", "16x16", "64x4"], "launch_bounds": LB, "readonly_cache": ALL},
}


def test_every_reference_kernel_has_an_expectation() -> None:
    assert set(EXPECTED) == set(KERNELS)


@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_root_proposals_on_reference_kernels(stem: str) -> None:
    got = proposals(kernel_policy(stem))
    assert {f: sorted(v) for f, v in got.items()} == {f: sorted(v) for f, v in EXPECTED[stem].items()}


@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_rewrites_reparse_as_the_same_kernel(stem: str) -> None:
    pol = kernel_policy(stem)
    want = signature(pol.root_candidate().definition, pol.kernel.name)
    for c in pol.propose_sync(pol.root_candidate()):
        assert signature(c.definition, pol.kernel.name) == want, c.steps
        assert c.parent == pol.root_candidate().id and len(c.steps) == 1
        assert c.rationale


# ------------------------------------------------------------------ block_size

SAXPY_LIKE = """\
// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid={grid}, block={block}
__global__ void {lb}k(const float* x, float* y, int n)
{{
{body}
}}
"""
PLAIN_BODY = """\
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.0f * x[i];
    }"""


def saxpy_like(grid: str = "cdiv(N, 256)", block: str = "256", body: str = PLAIN_BODY, lb: str = "") -> str:
    return SAXPY_LIKE.format(grid=grid, block=block, body=body, lb=lb)


def test_block_size_derives_the_grid() -> None:
    pol = kernel_policy("conv1d")
    c = child(pol, "block_size", "512")
    assert c.launch == LaunchOverride(("cdiv(N, 512)",), ("512",), None)
    assert c.definition == pol.root_candidate().definition
    pol2 = text_policy(saxpy_like(grid="(N + 255) / 256"), "k")
    c2 = child(pol2, "block_size", "128")
    assert c2.launch is not None and c2.launch.grid == ("cdiv(N, 128)",)
    sg = child(kernel_policy("sgemm"), "block_size", "32x8")
    assert sg.launch == LaunchOverride(("cdiv(N, 32)", "cdiv(M, 8)"), ("32", "8"), None)


def test_block_size_follows_a_named_block_and_a_per_thread_share() -> None:
    """Two launch spellings of other people's code that Kernel Tuner searched and this rule did not (the wide
    sample, H200: Learn-CUDA's `init` 1.17x, llm.c's `encoder_forward_kernel3` 1.19x from the block alone):
    a block named by a fixed size the kernel never names (`block=blockSize`), and a grid dividing the work by a
    multiple of the block (four elements a thread)."""
    named = saxpy_like(grid="(N + blockSize - 1) / blockSize", block="blockSize").replace(
        "// @warpforge arg n = N", "// @warpforge arg n = N\n// @warpforge size blockSize = 256 fixed")
    pol = text_policy(named, "k")
    c = child(pol, "block_size", "512")
    assert c.launch == LaunchOverride(("cdiv(N, 512)",), ("512",), None)
    assert sorted(BlockSize().variants(pol.context(pol.root_candidate())), key=int) == ["64", "128", "512", "1024"]
    # a size the kernel names itself sizes something in it: not the rule's to change
    uses = named.replace("y[i] = 2.0f * x[i];", "y[i] = 2.0f * x[i] + (float)blockSize;")
    pol2 = text_policy(uses, "k")
    assert BlockSize().variants(pol2.context(pol2.root_candidate())) == []
    four = saxpy_like(grid="cdiv(N, 256 * 4)", body="""\
    int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    for (int j = i; j < i + 4 && j < n; j++) {
        y[j] = 2.0f * x[j];
    }""")
    pol3 = text_policy(four, "k")
    c3 = child(pol3, "block_size", "128")
    assert c3.launch == LaunchOverride(("cdiv(N, 128 * 4)",), ("128",), None)
    # the work is not divided by the block: a grid of its own, left alone
    assert BlockSize().variants(text_policy(saxpy_like(grid="cdiv(N * 4, 1024)"), "k").context(
        text_policy(saxpy_like(grid="cdiv(N * 4, 1024)"), "k").root_candidate())) == []


def test_work_extent_recognizes_only_ceiling_divisions() -> None:
    assert work_extent("cdiv(N, 256)", 256) == "N"
    assert work_extent("(N + 255) / 256", 256) == "N"
    assert work_extent("(N + 256 - 1) / 256", 256) == "N"
    assert work_extent("((B * C) + 255) / 256", 256) == "(B * C)"
    assert work_extent("cdiv(N, 128)", 256) is None  # not a division by this block
    assert work_extent("N / 256", 256) is None  # exact division: a remainder is not covered
    assert work_extent("(N + 255) / 256 * 2", 256) is None
    assert work_extent("(N << 1 + 255) / 256", 256) is None  # `+` binds tighter than `<<`
    assert work_extent("(N + 254) / 256", 256) is None
    envs = [{"N": 1000}, {"N": 999}]
    assert derive_grid("min(cdiv(N, 256), 264)", 256, 512, envs) == "min(cdiv(N, 512), 264)"
    assert derive_grid("N / 256", 256, 512, envs) is None


@pytest.mark.parametrize(("why", "text"), [
    ("hard-coded shared array", saxpy_like(body="    __shared__ float s[256];\n" + PLAIN_BODY)),
    ("hard-coded block in the index", saxpy_like(body=PLAIN_BODY.replace("blockDim.x", "256"))),
    ("exact-division grid", saxpy_like(grid="N / 256")),
    ("grid not written in terms of the block", saxpy_like(grid="4096")),
    ("block depends on a size", saxpy_like(block="min(N, 256)")),
])
def test_block_size_near_misses(why: str, text: str) -> None:
    assert variants(text_policy(text, "k"), "block_size") == [], why


def test_block_size_respects_and_updates_launch_bounds() -> None:
    # A user's __launch_bounds__(256): larger blocks would fail to launch.
    pol = text_policy(saxpy_like(lb="__launch_bounds__(256) "), "k")
    assert variants(pol, "block_size") == ["64", "128"]
    # WarpForge's own bound is rewritten with the block.
    conv = kernel_policy("conv1d")
    step = child(conv, "launch_bounds", "2")
    assert "__launch_bounds__(256, 2)" in step.definition
    assert "1024" in variants(conv, "block_size", step)  # 1024 threads x 2 blocks: exactly an SM's 2048
    bigger = child(conv, "block_size", "512", step)
    assert "__launch_bounds__(512, 2)" in bigger.definition and "256, 2" not in bigger.definition


def test_block_size_once_per_path() -> None:
    conv = kernel_policy("conv1d")
    assert variants(conv, "block_size", child(conv, "block_size", "128")) == []


# ------------------------------------------------------------------ grid_stride

def test_grid_stride_rewrites_both_guard_forms() -> None:
    gelu = kernel_policy("gelu")
    c = child(gelu, "grid_stride", "4")
    assert "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {" \
        in c.definition
    assert "if (i < n)" not in c.definition
    assert c.launch is not None and c.launch.grid == (f"min(cdiv(N, 256), {4 * gelu.sm_count})",)
    conv = child(kernel_policy("conv1d"), "grid_stride", "2")
    body = conv.definition.split("{", 1)[1]
    assert "return" not in body and body.count("for (") == 2
    # the old rest of the body moved one level in, inside the loop
    assert "\n        out[i] = acc;\n    }\n}" in conv.definition


def test_grid_stride_wide_index_and_mirrored_bound() -> None:
    body = """\
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n > i) y[i] = x[i];"""
    pol = text_policy(saxpy_like(body=body), "k")
    c = child(pol, "grid_stride", "8")
    assert "i < n; i += (size_t)blockDim.x * gridDim.x) y[i] = x[i];" in c.definition


@pytest.mark.parametrize(("why", "body"), [
    ("compound guard", PLAIN_BODY.replace("i < n", "i < n && x[i] > 0.0f")),
    ("barrier in the body", PLAIN_BODY.replace("y[i] = 2.0f * x[i];", "__syncthreads(); y[i] = x[i];")),
    ("return inside the body", PLAIN_BODY.replace("y[i] = 2.0f * x[i];", "if (x[i] < 0) return; y[i] = x[i];")),
    ("statement before the index", "    int tid = threadIdx.x;\n" + PLAIN_BODY.replace("threadIdx.x;", "tid;")),
    ("not the global index", PLAIN_BODY.replace("blockIdx.x * blockDim.x + threadIdx.x",
                                                "blockIdx.x * (blockDim.x + threadIdx.x)")),
    ("else branch", PLAIN_BODY + " else { }"),
    ("bound assigned in the body", PLAIN_BODY.replace("y[i] = 2.0f * x[i];", "y[i] = x[i]; n = 0;")),
    ("index assigned in the body", PLAIN_BODY.replace("y[i] = 2.0f * x[i];", "y[i] = x[i]; i += 1;")),
    ("thread index used in the body", PLAIN_BODY.replace("2.0f", "threadIdx.x")),
    ("statement after the guard", PLAIN_BODY + "\n    y[0] = 0.0f;"),
])
def test_grid_stride_near_misses(why: str, body: str) -> None:
    assert variants(text_policy(saxpy_like(body=body), "k"), "grid_stride") == [], why


def test_grid_stride_needs_a_1d_launch() -> None:
    assert variants(text_policy(saxpy_like(grid="(cdiv(N, 256), 2)"), "k"), "grid_stride") == []


# ------------------------------------------------------------------ launch_bounds

def test_launch_bounds_follow_a_tunable_block() -> None:
    c = child(kernel_policy("reduce_sum"), "launch_bounds", "2")
    assert "__launch_bounds__(BLOCK_SIZE, 2)" in c.definition
    # and the tunable may still change afterwards: the bound follows the define
    assert "BLOCK_SIZE=1024" in variants(kernel_policy("reduce_sum"), "tunables", c)


def test_launch_bounds_near_misses() -> None:
    assert variants(text_policy(saxpy_like(block="min(N, 256)"), "k"), "launch_bounds") == []
    same = text_policy(saxpy_like(lb="__launch_bounds__(256) "), "k")
    assert variants(same, "launch_bounds") == ["2", "4"]  # (256) is already there
    cluster = text_policy(saxpy_like(lb="__launch_bounds__(256, 2, 1) "), "k")
    assert variants(cluster, "launch_bounds") == []
    conv = kernel_policy("conv1d")
    assert variants(conv, "launch_bounds", child(conv, "launch_bounds", "1")) == []


def test_launch_bounds_use_the_candidates_launch() -> None:
    conv = kernel_policy("conv1d")
    c = child(conv, "launch_bounds", "1", child(conv, "block_size", "128"))
    assert "__launch_bounds__(128)" in c.definition
    sg = kernel_policy("sgemm")
    assert "__launch_bounds__(512)" in child(sg, "launch_bounds", "1", child(sg, "block_size", "32x16")).definition


# ------------------------------------------------------------------ unroll

def test_unroll_inserts_indented_pragmas() -> None:
    c = child(kernel_policy("softmax"), "unroll", "4")
    assert c.definition.count("    #pragma unroll 4\n    for (int j = 0; j < cols; j++) {") == 3
    r = child(kernel_policy("rmsnorm"), "unroll", "8")
    assert r.definition.count("#pragma unroll 8") == 2  # the two strided row loops, not the tree
    assert variants(kernel_policy("softmax"), "unroll", c) == []


UNROLL_FIXTURE = """\
#define TILE 8
// @warpforge size N = 1024
// @warpforge arg x: inout float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(float* x, int n)
{
    float acc = 0.0f;
    for (int j = 0; j < 8; j++) acc += x[j];
    for (int j = 0; j < TILE; j++) acc += x[j];
    #pragma unroll 1
    for (int j = 0; j < n; j++) acc += x[j];
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            acc += x[a] * x[b];
        }
    }
    if (n > 2) for (int j = 0; j < n; j++) acc += x[j];
    for (int j = 0; j < n; j++) {
BIG    }
    x[0] = acc;
}
"""


def test_unroll_near_misses() -> None:
    text = UNROLL_FIXTURE.replace("BIG", "        acc += x[j];\n" * 41)
    pol = text_policy(text, "k")
    c = child(pol, "unroll", "2")
    # only the inner loop of the nest: constant bounds, an existing pragma, a loop that is an `if`'s body
    # and a 41-statement body are all left alone
    assert c.definition.count("#pragma unroll 2") == 1
    assert "        #pragma unroll 2\n        for (int b = 0; b < n; b++) {" in c.definition
    none = text_policy(text.replace("for (int b = 0; b < n; b++)", "for (int b = 0; b < 4; b++)"), "k")
    assert variants(none, "unroll") == []


# ------------------------------------------------------------------ compile_flags

@dataclass(frozen=True)
class FakeFinding:
    code: str
    kernel: str
    evidence: dict[str, object]
    action: str = "launch_bounds"


def test_register_caps_are_launch_bounds_in_the_source() -> None:
    """What -maxrregcount=N did, written on the kernel: __launch_bounds__(T, 65536 / (T x N)), no flag."""
    f = FakeFinding("WF010", "k", {"registers": 80, "block_threads": 256})
    pol = text_policy(saxpy_like(), "k", findings=(f,))
    assert variants(pol, "compile_flags") == ["regcap=32", "regcap=64"]
    capped = child(pol, "compile_flags", "regcap=64")
    assert capped.flags == () and capped.build_flags == ()
    assert "__launch_bounds__(256, 4)" in capped.source
    assert "__launch_bounds__(256, 8)" in child(pol, "compile_flags", "regcap=32").source
    # one bound per kernel: a capped kernel (or one with its own __launch_bounds__) gets no second cap
    assert variants(pol, "compile_flags", capped) == []
    with_lb = text_policy(saxpy_like(lb="__launch_bounds__(256) "), "k", findings=(f,))
    assert variants(with_lb, "compile_flags") == []
    assert variants(text_policy(saxpy_like(), "k", findings=(replace(f, evidence={"registers": 40}),)),
                    "compile_flags") == ["regcap=32"]


def test_ptxas_O3_only_when_the_level_was_lowered() -> None:
    pol = kernel_policy("saxpy")
    assert "ptxas_O3" not in variants(pol, "compile_flags")
    lowered = replace(pol.root_candidate(), flags=("-Xptxas", "-O1"))
    c = child(pol, "compile_flags", "ptxas_O3", lowered)
    assert c.flags == ("-Xptxas", "-O1", "-Xptxas", "-O3")
    # the one flag left is a build change, and says so
    assert c.build_flags == c.flags and c.rationale.startswith("build change:")


# ------------------------------------------------------------------ tunables

def test_tunables_set_defines_once() -> None:
    red = kernel_policy("reduce_sum")
    c = child(red, "tunables", "BLOCK_SIZE=512")
    assert c.define_map() == {"BLOCK_SIZE": "512"} and c.launch is None
    assert red.spec.resolve(tunables=c.define_map()).block == (512, 1, 1)
    assert variants(red, "tunables", c) == []


def test_tunables_skip_invalid_launches() -> None:
    text = """\
#ifndef BS
#define BS 256
#endif
// @warpforge size N = 1 << 20
// @warpforge tune BS = 256, 512, 2048
// @warpforge tune ITEMS = 1, 2
// @warpforge arg x: inout float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, BS * ITEMS), block=BS
__global__ void __launch_bounds__(256) k(float* x, int n)
{
    int i = blockIdx.x * BS * ITEMS + threadIdx.x;
    if (i < n) x[i] = 0.0f;
}
"""
    # 2048 threads is not a block; 512 is larger than the kernel's fixed __launch_bounds__(256)
    assert variants(text_policy(text, "k"), "tunables") == ["ITEMS=2"]


# ------------------------------------------------------------------ readonly_cache

def test_readonly_cache_rewrites_loads_through_aliases() -> None:
    c = child(kernel_policy("softmax"), "readonly_cache", "all")
    assert c.definition.count("__ldg(&x[j])") == 2 and "__ldg(&y" not in c.definition
    assert variants(kernel_policy("softmax"), "readonly_cache", c) == []
    conv = child(kernel_policy("conv1d"), "readonly_cache", "all")
    assert "acc += __ldg(&filter[j]) * __ldg(&inp[idx]);" in conv.definition


READONLY_FIXTURE = """\
__device__ float peek(const float* p) { return p[0]; }

// @warpforge size N = 1024
// @warpforge arg idx: in int[N] int(0, N)
// @warpforge arg a: in float[N]
// @warpforge arg w: inout float[N]
// @warpforge arg r: in float[N]
// @warpforge arg h: in float[N]
// @warpforge arg out: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const int* idx, const float* a, float* w, const float* __restrict__ r, const float* h,
                  float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        w[i] = w[i] * 2.0f;
        out[i] = a[idx[i]] + r[i] + peek(h) + *(&a[i]);
    }
}
"""


def test_readonly_cache_targets_only_safe_pointers() -> None:
    c = child(text_policy(READONLY_FIXTURE, "k"), "readonly_cache", "all")
    # nested reads are both routed; `w` is written, `r` is already const __restrict__, `h` escapes into a
    # call, and an address-of is not a load
    assert "out[i] = __ldg(&a[__ldg(&idx[i])]) + r[i] + peek(h) + *(&a[i]);" in c.definition
    assert "w[i] = w[i] * 2.0f;" in c.definition
    tmpl = """\
// @warpforge size N = 1024
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge template float
// @warpforge launch grid=cdiv(N, 256), block=256
template <typename T>
__global__ void k(const T* x, T* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""
    assert variants(text_policy(tmpl, "k"), "readonly_cache") == []  # __ldg has no overload for any T


# ------------------------------------------------------------------ the policy: propose, replay

@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_policy_proposes_without_errors_and_replays(stem: str) -> None:
    pol = kernel_policy(stem)
    root = pol.root_candidate()
    kids = pol.propose_sync(root)
    assert kids and not pol.errors, pol.errors
    assert len({c.hash for c in kids}) == len(kids)  # no duplicates
    # a two-step composition replays to the same candidate it was built as
    a = kids[0]
    second = pol.propose_sync(a)
    assert not pol.errors, pol.errors
    b = next(c for c in second if c.family != a.family)
    again = pol.replay(root, b.steps)
    assert again is not None and again.hash == b.hash


def test_replay_of_a_composition_that_no_longer_applies() -> None:
    conv = kernel_policy("conv1d")
    root = conv.root_candidate()
    both = conv.replay(root, ["grid_stride:4", "block_size:512"])
    assert both is not None and both.launch == LaunchOverride((f"min(cdiv(N, 512), {4 * conv.sm_count})",),
                                                              ("512",), None)
    lb = conv.replay(root, ["launch_bounds:2", "block_size:512"])
    assert lb is not None and "__launch_bounds__(512, 2)" in lb.definition
    # 1024 threads x 4 resident blocks exceeds an SM: no longer applies, so replay says so
    assert conv.replay(root, ["launch_bounds:4", "block_size:1024"]) is None


# ------------------------------------------------------------------ everything compiles

def stacked(pol: OfflinePolicy, order: list[str]) -> Candidate:
    """Apply the first variant of each family in ``order`` that still applies, one on top of the other."""
    load()
    cur = pol.root_candidate()
    for fam in order:
        vs = REGISTRY[fam].variants(pol.context(cur))
        if vs:
            nxt = REGISTRY[fam].apply(pol.context(cur), vs[-1])
            assert nxt is not None
            cur = nxt
    return cur


def build_jobs() -> list[tuple[str, tuple[str, ...], str, dict[str, str], list[str]]]:
    """One compile per distinct (translation unit, defines, flags): launch-only variants share one."""
    jobs = []
    seen: set[tuple[str, str, str]] = set()
    fixtures = [(text_policy(saxpy_like(grid="(N + 255) / 256"), "k"), "fixture"),
                (text_policy(READONLY_FIXTURE, "k"), "readonly_fixture")]
    policies = [(kernel_policy(s), s) for s in sorted(KERNELS)] + fixtures
    order = sorted(MINE)
    for pol, name in policies:
        cands = pol.propose_sync(pol.root_candidate())
        cands += [stacked(pol, order), stacked(pol, order[::-1])]
        for c in cands:
            tu = standalone(pol.source, pol.model, pol.kernel, definition=c.definition,
                            filename=Path(pol.file).name, instantiate=pol.spec.template_args or None)
            defines = {t.name: t.values[0] for t in pol.spec.tunables} | c.define_map()
            key = (tu, repr(sorted(defines.items())), repr(c.flags))
            if key not in seen:
                seen.add(key)
                jobs.append((name, c.steps, tu, defines, list(c.flags)))
    return jobs


@needs_nvcc
def test_every_variant_compiles() -> None:
    assert NVCC is not None
    jobs = build_jobs()
    assert len(jobs) > 80

    def run(job: tuple[str, tuple[str, ...], str, dict[str, str], list[str]]) -> str | None:
        name, steps, tu, defines, flags = job
        res = compile_cubin(tu, arch="sm_90", defines=defines, flags=flags, filename=f"{name}.cu")
        if not res.ok:
            return f"{name} {steps}: " + "; ".join(m.text for m in res.messages if m.severity == "error")
        return None

    with ThreadPoolExecutor(2) as ex:
        failures = [f for f in ex.map(run, jobs) if f is not None]
    assert not failures, "\n".join(failures)


def test_refresh_launch_bounds_for_rules_that_change_the_block() -> None:
    from warpforge.policy.rules._util import refresh_launch_bounds

    sg = kernel_policy("sgemm")
    root = sg.root_candidate()
    assert refresh_launch_bounds(ctx(sg), root.definition, ("32", "32")) == root.definition  # no step: as is
    bounded = child(sg, "launch_bounds", "2")
    new = refresh_launch_bounds(ctx(sg, bounded), bounded.definition, ("32", "16"))
    assert new is not None and "__launch_bounds__(512, 2)" in new
    four = child(sg, "launch_bounds", "4")
    assert refresh_launch_bounds(ctx(sg, four), four.definition, ("32", "32")) is None  # 1024 x 4 > an SM
    assert refresh_launch_bounds(ctx(sg, bounded), bounded.definition, ("BLOCK",)) is None  # not a constant
