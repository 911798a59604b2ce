"""warp_reduce on the tree reductions people write (issue 27): interleaved (doubling) strides, the barrier
first in the step, cooperative-groups barriers, combines through temporaries and selects, several arrays
in one tree, a tree inside a block-per-row loop; each accepted kernel's variants compile with nvcc, and the
near misses decline with their reason and stage. Numerics of a rewritten interleaved tree are checked on
the GPU by ``test_rules_warp_reduce_gpu.py``.
"""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.extract import standalone
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load
from warpforge.policy.rules._why import Stage
from warpforge.policy.whynot import ask
from warpforge.spec.resolve import load_spec

HEAD = """\
// @warpforge size N = 1 << 18
// @warpforge arg src: in {t}[N]
// @warpforge arg dst: out {t}[N / 256]
// @warpforge launch grid=N / 256, block=256
"""

#: the doubling stride with a modulo test, an unsigned local copy of the thread index
INTERLEAVED_MOD = HEAD.format(t="int") + """\
__global__ void fold_mod(const int* src, int* dst)
{
    __shared__ int acc[256];
    const unsigned lane = threadIdx.x;
    acc[lane] = src[blockIdx.x * 256 + lane];
    __syncthreads();
    for (unsigned w = 1; w < blockDim.x; w <<= 1) {
        if ((lane % (w * 2)) == 0)
            acc[lane] = acc[lane] + acc[lane + w];
        __syncthreads();
    }
    if (lane == 0) dst[blockIdx.x] = acc[0];
}
"""

#: the doubling stride with a strided index (each active thread owns pair 2*w*t), a max
INTERLEAVED_IDX = HEAD.format(t="float") + """\
__global__ void fold_idx(const float* src, float* dst)
{
    __shared__ float buf[256];
    buf[threadIdx.x] = src[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (int w = 1; w < 256; w = w * 2) {
        int j = 2 * w * threadIdx.x;
        if (j < 256) {
            buf[j] = fmaxf(buf[j + w], buf[j]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = buf[0];
}
"""

#: the barrier first in the step, the combine through temporaries as a conditional store (a min)
BARRIER_FIRST_MIN = HEAD.format(t="double") + """\
__global__ void fold_min(const double* src, double* dst)
{
    __shared__ double m[256];
    m[threadIdx.x] = src[blockIdx.x * blockDim.x + threadIdx.x];
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        __syncthreads();
        if (threadIdx.x < h) {
            const double lo = m[threadIdx.x];
            const double hi = m[threadIdx.x + h];
            if (hi < lo) m[threadIdx.x] = hi;
        }
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = m[0];
}
"""

#: two arrays folded by one tree, inside a block-per-row loop, with cooperative-groups barriers
ROWS_TWO = """\
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// @warpforge size R = 512
// @warpforge size C = 1000
// @warpforge arg x: in float[R*C]
// @warpforge arg s1: out float[R]
// @warpforge arg s2: out float[R]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=128, block=128
__global__ void row_moments(const float* x, float* s1, float* s2, int rows, int cols)
{
    cg::thread_block blk = cg::this_thread_block();
    __shared__ float a[128];
    __shared__ float b[128];
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        float p = 0.0f, q = 0.0f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = x[r * cols + c];
            p += v;
            q += v * v;
        }
        a[threadIdx.x] = p;
        b[threadIdx.x] = q;
        blk.sync();
        for (int k = blockDim.x >> 1; k > 0; k >>= 1) {
            if (blk.thread_index().x < k) {
                a[threadIdx.x] += a[threadIdx.x + k];
                b[threadIdx.x] += b[threadIdx.x + k];
            }
            blk.sync();
        }
        if (threadIdx.x == 0) {
            s1[r] = a[0];
            s2[r] = b[0];
        }
        blk.sync();
    }
}
"""

#: a pointer view of dynamic shared memory, an xor through a halving stride written `s = s / 2`
VIEW_XOR = """\
// @warpforge size N = 1 << 18
// @warpforge arg src: in unsigned int[N]
// @warpforge arg dst: out unsigned int[N / 128]
// @warpforge launch grid=N / 128, block=128, smem=128 * sizeof(unsigned int)
__global__ void fold_xor(const unsigned int* src, unsigned int* dst)
{
    extern __shared__ unsigned char raw[];
    unsigned int* h = reinterpret_cast<unsigned int*>(raw);
    h[threadIdx.x] = src[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (int s = blockDim.x / 2; s != 0; s = s / 2) {
        if (threadIdx.x < s) h[threadIdx.x] = h[threadIdx.x] ^ h[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = h[0];
}
"""

ACCEPTED = {"fold_xor": VIEW_XOR, "fold_mod": INTERLEAVED_MOD, "fold_idx": INTERLEAVED_IDX,
            "fold_min": BARRIER_FIRST_MIN, "row_moments": ROWS_TWO}


def _policy(text: str, kernel: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", kernel, text=text),
                         families={"warp_reduce"})


def _children(text: str, kernel: str) -> dict[str, str]:
    load()
    pol = _policy(text, kernel)
    ctx = pol.context(pol.root_candidate())
    rule = REGISTRY["warp_reduce"]
    out: dict[str, str] = {}
    for param in rule.variants(ctx):
        c = rule.apply(ctx, param)
        assert c is not None
        out[param] = c.definition
    return out


@pytest.mark.parametrize("kernel", sorted(ACCEPTED))
def test_the_trees_people_write_are_rewritten(kernel: str) -> None:
    got = _children(ACCEPTED[kernel], kernel)
    assert list(got) == ["tail", "warps"]
    for d in got.values():
        assert "__shfl_down_sync(0xffffffffu, wfr_v0_0, wfr_o)" in d
        assert "} else {" in d  # the user's loop, kept for the launches outside the fast path


def test_interleaved_is_rewritten_as_a_halving_tree_under_its_preconditions() -> None:
    t = _children(INTERLEAVED_MOD, "fold_mod")["tail"]
    # the halving tree from N/2, only when N is a power of two with a thread for each element
    assert "for (int wfr_s0 = ((blockDim.x) / 2); wfr_s0 > 32; wfr_s0 >>= 1)" in t
    assert "((blockDim.x) & ((blockDim.x) - 1)) == 0" in t and "(blockDim.x) <= blockDim.x" in t
    assert "acc[threadIdx.x] = acc[threadIdx.x] + acc[threadIdx.x + wfr_s0];" in t
    i = _children(INTERLEAVED_IDX, "fold_idx")["tail"]
    assert "buf[threadIdx.x] = fmaxf(buf[threadIdx.x + wfr_s0], buf[threadIdx.x]);" in i


def test_barrier_first_and_select_and_two_arrays() -> None:
    m = _children(BARRIER_FIRST_MIN, "fold_min")["tail"]
    # the original's first barrier comes before the tree; the select keeps the user's comparison
    assert "__syncthreads();\n        for (int wfr_s0" in m
    # the shuffle is named before the select: inside one arm of ``?:`` a full-mask shuffle runs in some lanes
    # only (the tail variant hung on an H200 that way)
    assert "const double wfr_v0_0_in = __shfl_down_sync(0xffffffffu, wfr_v0_0, wfr_o);\n" in m
    assert "wfr_v0_0 = (wfr_v0_0_in < wfr_v0_0) ? wfr_v0_0_in : wfr_v0_0;" in m
    for variant in ("tail", "warps"):
        text = _children(BARRIER_FIRST_MIN, "fold_min")[variant]
        assert not [line for line in text.splitlines() if "?" in line and "__shfl" in line], variant
    r = _children(ROWS_TWO, "row_moments")["warps"]
    assert "__shared__ float wfr_warp0_0[32];" in r and "__shared__ float wfr_warp0_1[32];" in r
    assert "b[0] = wfr_v0_1;" in r and "2 * (blockDim.x >> 1) <= blockDim.x" in r


@needs_nvcc
@pytest.mark.parametrize("kernel", sorted(ACCEPTED))
def test_rewritten_trees_compile(kernel: str) -> None:
    text = ACCEPTED[kernel]
    pol = _policy(text, kernel)
    for param, definition in _children(text, kernel).items():
        tu = standalone(pol.source, pol.model, pol.kernel, definition=definition, filename=pol.file)
        res = compile_cubin(tu, arch="sm_90", filename=pol.file)
        assert res.ok and res.entry_symbol(kernel) is not None, (param, res.log[-2000:])


# ----------------------------------------------------------------------------- near misses, with their reason


@pytest.mark.parametrize(("text", "kernel", "stage", "words"), [
    # another element read after the tree: the rewrite leaves other partials in acc[1..]
    (INTERLEAVED_MOD.replace("dst[blockIdx.x] = acc[0];", "dst[blockIdx.x] = acc[0] + acc[1];"), "fold_mod",
     Stage.LEGALITY, "after the tree, `acc` is read at another element than [0]"),
    # the pairs stop before the steps do: not one tree over the same elements
    (INTERLEAVED_IDX.replace("if (j < 256)", "if (j < 128)"), "fold_idx", Stage.SHAPE,
     "the interleaved tree's pairs stop at `128`, its steps at `256`"),
    # a difference is not associative
    (INTERLEAVED_MOD.replace("acc[lane] + acc[lane + w]", "acc[lane] - acc[lane + w]"), "fold_mod", Stage.SHAPE,
     "is not a sum, product, min/max or bitwise combine"),
    # the extent differs between threads
    (BARRIER_FIRST_MIN.replace("int h = blockDim.x / 2;", "int h = threadIdx.x / 2;"), "fold_min",
     Stage.LEGALITY, "the tree's extent `threadIdx.x / 2` differs between threads"),
    # the shared memory is reached through a second name too: the view is not the only way to its elements
    (VIEW_XOR.replace("    h[threadIdx.x] = src", "    raw[0] = 0;\n    h[threadIdx.x] = src"), "fold_xor", Stage.SCOPE,
     "no loop of the kernel is a shared-memory tree reduction"),
    # a nested tree with no rewrite of the arrays before it in its block: it could fold an earlier row's values
    (ROWS_TWO.replace("        b[threadIdx.x] = q;\n", "").replace(
        "    for (int r = blockIdx.x", "    b[threadIdx.x] = 0.0f;\n    for (int r = blockIdx.x"),
     "row_moments", Stage.LEGALITY, "no `b[tid] = ...;` precedes the nested tree"),
])
def test_near_misses_decline_with_their_reason(text: str, kernel: str, stage: Stage, words: str) -> None:
    assert _children(text, kernel) == {}
    load()
    pol = _policy(text, kernel)
    d = ask(REGISTRY["warp_reduce"], pol.context(pol.root_candidate()))
    assert d is not None and words in d.reason and d.stage == stage, d


TEMPLATED = """\
// @warpforge size N = 1 << 18
// @warpforge arg src: in float[N]
// @warpforge arg dst: out float[N / 256]
// @warpforge template V = float
// @warpforge launch grid=N / 256, block=256
template <typename V>
__global__ void fold_t(const V* src, V* dst)
{
    __shared__ V part[256];
    part[threadIdx.x] = src[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = max(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = part[0];
}
"""


def test_a_template_element_is_judged_as_the_spec_instantiates_it() -> None:
    assert list(_children(TEMPLATED, "fold_t")) == ["tail", "warps"]
    assert "V wfr_v0_0 = part[threadIdx.x];" in _children(TEMPLATED, "fold_t")["tail"]
