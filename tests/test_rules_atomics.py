"""atomic_aggregate's key-aggregated form and atomics_privatize on the atomics other people write: inside
grid-stride loops, behind early returns, to per-thread addresses, in templates, next to shared arrays of the
kernel's own. Every kernel here is written for this test. Each proposed child must build through the evaluator's
CPU build path (static guards, launch at both verified sizes, translation unit, nvcc); each decline is checked for
its reason in words. Numerics are checked on the GPU (``test_rules_atomics_gpu.py``)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load
from warpforge.policy.whynot import ask
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

#: a histogram over a grid-stride loop, the bin computed from the data, elements skipped with `continue`
STRIDED_COUNT = """// @warpforge size N = 1 << 21
// @warpforge arg codes: in int[N] int(0, 200)
// @warpforge arg counts: inout unsigned[50] zeros
// @warpforge arg total = N
// @warpforge launch grid=160, block=256
__global__ void k(const int* codes, unsigned int* counts, int total) {
  for (int e = threadIdx.x + blockIdx.x * blockDim.x; e < total; e += blockDim.x * gridDim.x) {
    const int c = codes[e];
    if (c >= 150) continue;
    atomicAdd(&counts[c / 3], 1);
  }
}
"""

#: a template scatter of float gradients behind an early return (the target a view `grad + off`)
SCATTER = """// @warpforge size N = 1 << 20
// @warpforge size M = 4096
// @warpforge template T = float
// @warpforge arg upd: in float[N]
// @warpforge arg where: in int[N] int(0, 4095)
// @warpforge arg grad: inout float[M] zeros
// @warpforge arg count = N
// @warpforge launch grid=cdiv(N, 128), block=128
// @warpforge tol rtol=1e-4 atol=1e-3
template <typename T>
__global__ void k(const T* upd, const int* where, T* grad, int count) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= count) {
    return;
  }
  T* row = grad + where[t];
  atomicAdd(row, upd[t] * (T)0.5);
}
"""

#: one address for every thread, updated inside a loop with several atomics (sum, max, 64-bit count)
UNIFORM_LOOP = """// @warpforge size N = 1 << 20
// @warpforge arg vals: in int[N] int(-1000, 1000)
// @warpforge arg stats: inout int[2] zeros
// @warpforge arg seen: inout uint64[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 512), block=(32, 4)
__global__ void k(const int* vals, int* stats, unsigned long long* seen, int n) {
  int base = (blockIdx.x * 128 + threadIdx.y * 32 + threadIdx.x) * 4;
  for (int j = 0; j < 4; ++j) {
    if (base + j >= n) break;
    int v = vals[base + j];
    if (v > 0) {
      atomicAdd(stats, v);
      atomicMax(stats + 1, v);
    }
    atomicAdd(seen, 1ull);
  }
}
"""

#: a bilinear splat in a grid-stride loop: four corners added through a local view, the offsets summed after it
SPLAT = """// @warpforge size N = 1 << 18
// @warpforge size H = 64
// @warpforge size W = 64
// @warpforge arg pts: in float[2 * N] uniform(0, 62)
// @warpforge arg img: inout float[4 * H * W] zeros
// @warpforge arg n = N
// @warpforge arg h = H
// @warpforge arg w = W
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-3 atol=1e-2
__global__ void k(const float* pts, float* img, int n, int h, int w) {
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += blockDim.x * gridDim.x) {
    float fy = pts[2 * p], fx = pts[2 * p + 1];
    int y0 = (int)fy, x0 = (int)fx;
    float ay = fy - y0, ax = fx - x0;
    float* plane = img + (p % 4) * h * w;
    atomicAdd(plane + y0 * w + x0, (1 - ay) * (1 - ax));
    atomicAdd(plane + y0 * w + x0 + 1, (1 - ay) * ax);
    atomicAdd(plane + (y0 + 1) * w + x0, ay * (1 - ax));
    atomicAdd(plane + (y0 + 1) * w + x0 + 1, ay * ax);
  }
}
"""


#: a block-wide count in a `__shared__` scalar, flushed once per block
SHARED_SCALAR = """// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg hits: inout int[1] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const float* x, int* hits, int n) {
  __shared__ int local_hits;
  if (threadIdx.x == 0) local_hits = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.5f) atomicAdd(&local_hits, 1);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(hits, local_hits);
}
"""


def policy(text: str, families: set[str]) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text), families=families)


def children(text: str, family: str) -> tuple[OfflinePolicy, list[Candidate]]:
    pol = policy(text, {family})
    return pol, [c for c in pol.propose_sync(pol.root_candidate()) if c.family == family]


@needs_nvcc
@pytest.mark.parametrize(("text", "step", "words"), [
    (STRIDED_COUNT, "atomic_aggregate:key",
     ["__match_any_sync(__activemask()", "__reduce_add_sync(wfa_g, wfa_v)"]),
    (SCATTER, "atomic_aggregate:key",
     ["__shfl_sync(wfa_g, wfa_own, __ffs(wfa_r) - 1)", "T wfa_v = (upd[t] * (T)0.5);"]),
    (UNIFORM_LOOP, "atomic_aggregate:active",
     ["__reduce_max_sync(wfa_g, wfa_v)", "__shfl_xor_sync(0xffffffffu"]),
    (SPLAT, "atomic_aggregate:key", ["auto wfa_p = (plane + (y0 + 1) * w + x0 + 1);", "float wfa_v = (ay * ax);"]),
    (SHARED_SCALAR, "atomic_aggregate:key", ["auto wfa_p = (&local_hits);", "auto wfa_p = (hits);"]),
], ids=["strided_count", "scatter_template", "uniform_loop", "splat", "shared_scalar"])
def test_atomics_in_loops_and_after_early_exits_are_key_aggregated_and_build(text: str, step: str,
                                                                             words: list[str]) -> None:
    pol, kids = children(text, "atomic_aggregate")
    got = [c for c in kids if c.steps[-1] == step]
    # the whole-warp forms only where one value per thread is sent at the end (the shared-scalar flush)
    assert [c.steps[-1] for c in kids] == ["atomic_aggregate:warp", "atomic_aggregate:block", step][
        0 if text is SHARED_SCALAR else 2:], (pol.errors, [c.steps for c in kids])
    src = got[0].definition
    for w in words:
        assert w in src, (w, src)
    assert src.count("if (wfa_lane == (unsigned)(__ffs(wfa_g) - 1))") == src.count("const unsigned wfa_g =")
    assert got[0].grid is None and got[0].block is None  # the launch is the user's
    r = ca.EvaluatorBuild(pol).check(got[0])
    assert r.ok, (r.stage, r.reason[-2000:], src)


def test_a_parameter_the_body_moves_per_thread_is_not_one_address() -> None:
    text = STRIDED_COUNT.replace("  for (int e", "  counts += threadIdx.x % 2;\n  for (int e").replace(
        "&counts[c / 3]", "counts")
    _, kids = children(text, "atomic_aggregate")
    assert [c.steps[-1] for c in kids] == ["atomic_aggregate:key"]  # grouped by address, not the active mask


def _why(text: str, family: str) -> str:
    load()
    pol = policy(text, {family})
    d = ask(REGISTRY[family], pol.context(pol.root_candidate()))
    assert d is not None, f"{family} proposes"
    return d.reason


HEADER = """// @warpforge size N = 1 << 20
// @warpforge arg x: in int[N] int(0, 63)
// @warpforge arg bins: inout int[64] zeros
// @warpforge arg out: out int[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const int* x, int* bins, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
"""


@pytest.mark.parametrize(("stmt", "words"), [
    ("    out[i] = atomicAdd(&bins[x[i]], 1);", "is used (the old value each thread gets"),
    ("    atomicExch(&bins[x[i]], i);", "do not combine into one"),
    ("    atomicCAS(&bins[x[i]], 0, i);", "do not combine into one"),
    ("    unsigned g = __match_any_sync(__activemask(), x[i]);\n"
     "    if ((g & 1u) != 0u) atomicAdd(&bins[x[i]], 1);", "already groups its lanes"),
    # a thread's own array: its generic address is the same number in every thread, so lanes must not be grouped
    ("    int mine[4] = {0, 0, 0, 0};\n    atomicAdd(&mine[x[i] & 3], 1);\n    out[i] = mine[0];",
     "a thread's own local array cannot be combined"),
    ("    int mine[4] = {0, 0, 0, 0};\n    int* q = mine + 1;\n    atomicAdd(q, 1);\n    out[i] = mine[1];",
     "a thread's own local array cannot be combined"),
], ids=["result_used", "exchange", "cas", "already_grouped", "local_array", "pointer_into_local_array"])
def test_atomic_aggregate_declines_what_does_not_combine(stmt: str, words: str) -> None:
    text = HEADER + stmt + "\n  }\n}\n"
    assert words in _why(text, "atomic_aggregate")


#: a grid-stride histogram whose start and step are locals named before the loop, the target a view `bins + b`
STRIDED_LOCALS = """// @warpforge size N = 1 << 21
// @warpforge arg px: in uint8[N]
// @warpforge arg bins: inout uint32[16] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const unsigned char* px, unsigned int* bins, int n) {
  unsigned first = threadIdx.x + blockIdx.x * blockDim.x;
  unsigned step = blockDim.x * gridDim.x;
  unsigned shade;
  for (unsigned e = first; e < n; e += step) {
    shade = px[e] >> 4;
    atomicAdd(bins + shade, 1u);
  }
}
"""

#: a templated histogram (the spec instantiates the count type), one thread per element behind a guard
TEMPLATED = """// @warpforge size N = 1 << 20
// @warpforge template C = int
// @warpforge arg keys: in int[N] int(0, 1000)
// @warpforge arg bins: inout int[100] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 128), block=128
template <typename C>
__global__ void k(const int* keys, C* bins, int n) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) {
    int b = keys[e] % 100;
    atomicAdd(&bins[b], (C)1);
  }
}
"""


#: gradients scattered through a view of the output: `float* slot = acc + row * W + col` (no bound on the
#: element count other than the guard; the rows are picked by the data)
VIEW = """// @warpforge size N = 1 << 20
// @warpforge size W = 32
// @warpforge arg g: in float[N]
// @warpforge arg rows: in int[N / W] int(0, 7)
// @warpforge arg acc: inout float[8 * W] zeros
// @warpforge arg n = N
// @warpforge arg w = W
// @warpforge launch grid=cdiv(N, 256), block=256
// @warpforge tol rtol=1e-3 atol=1e-2
__global__ void k(const float* g, const int* rows, float* acc, int n, int w) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n) {
    int row = rows[e / w];
    int col = e % w;
    float* slot = acc + row * w + col;
    atomicAdd(slot, g[e]);
  }
}
"""


@needs_nvcc
@pytest.mark.parametrize("text", [STRIDED_LOCALS, TEMPLATED, VIEW], ids=["strided_locals", "templated", "view"])
def test_privatized_histograms_in_other_spellings_build(text: str) -> None:
    pol, got = children(text, "atomics_privatize")
    assert [c.steps[-1] for c in got] == ["atomics_privatize:sm4", "atomics_privatize:sm8"], pol.errors
    src = got[0].definition
    assert "extern __shared__" in src and src.count("__syncthreads();") == 2
    if text is TEMPLATED:
        assert "reinterpret_cast<C*>(wfp_raw)" in src, src
    assert "gridDim.x" in src.split("for (", 2)[2]  # the element loop strides over the whole grid
    if text is VIEW:
        assert "atomicAdd((wfp_priv + (row * w + col)), g[e]);" in src, src
    r = ca.EvaluatorBuild(pol).check(got[0])
    assert r.ok, (r.stage, r.reason[-2000:], src)


PRIV = """// @warpforge size N = 1 << 20
// @warpforge arg x: in int[N] int(0, 255)
// @warpforge arg hist: inout int[256] zeros
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void k(const int* x, int* hist, int n) {
"""


@pytest.mark.parametrize(("body", "words"), [
    ("  __shared__ int part[256];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (i < n) atomicAdd(&part[x[i]], 1);\n  __syncthreads();\n"
     "  if (threadIdx.x < 256) atomicAdd(&hist[threadIdx.x], part[threadIdx.x]);\n",
     "privatized already: `atomicAdd(&part[x[i]], 1)` updates the `__shared__` array `part`"),
    ("  extern __shared__ int dyn[];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (i < n) atomicAdd(&hist[x[i]], 1);\n", "already uses dynamic shared memory"),
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    int n = x[i];\n"
     "    atomicAdd(&hist[n], 1);\n  }\n", "a local `n` shadows the parameter"),
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    int* at = hist + x[i];\n"
     "    atomicAdd(at, 1);\n    atomicAdd(at + 1, (int)(at != hist));\n  }\n", "also used outside its atomicAdds"),
    ("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    atomicAdd(&hist[x[i]], 1);\n"
     "    atomicAdd(&hist2[x[i] / 2], 1);\n  }\n", "go to two arrays, `hist` and `hist2`"),
    ("  __shared__ float table[12100];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (i < n) atomicAdd(&hist[x[i]], 1);\n", "beside 48400 bytes of the kernel's own shared arrays"),
], ids=["privatized_already", "dynamic_shared", "shadowed", "view_used_elsewhere", "two_arrays",
        "no_room_beside_own_shared"])
def test_privatize_declines_each_scope_reason_in_its_own_words(body: str, words: str) -> None:
    text = PRIV + body + "}\n"
    if "hist2" in body:
        text = text.replace("int* hist,", "int* hist, int* hist2,").replace(
            "// @warpforge arg n", "// @warpforge arg hist2: inout int[128] zeros\n// @warpforge arg n")
    assert words in _why(text, "atomics_privatize")
