"""warp_reduce on the other block reduction people write: one thread folding the shared partials serially
(``rules/warp_reduce/fold.py``). Self-written kernels in the spellings found in others' code: a loop variable
declared before the loop, a fold into a global element then scaled, a fold from element 1 into a value
started at element 0, two arrays in one loop, a max; each accepted kernel's candidate compiles with nvcc, and
each near miss declines with its reason. Numerics and speed are checked on the GPU by
``test_rules_warp_reduce_fold_gpu.py``.
"""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from test_rules_warp_reduce import _children, _policy  # the same policy and variants, one family
from warpforge.compiler.build import compile_cubin
from warpforge.cuda.extract import standalone
from warpforge.policy.rules import REGISTRY, load
from warpforge.policy.rules._why import Stage
from warpforge.policy.whynot import ask

#: per channel, a block of 512 threads strides over batch x spatial; thread 0 folds the 512 partials into a
#: global mean (the loop variable declared at the top, C89 style, and reused)
CHANNEL_MEAN = """\
#define THREADS 512
// @warpforge size C = 64
// @warpforge size B = 4
// @warpforge size S = 3000
// @warpforge arg x: in float[B * C * S]
// @warpforge arg batch = B
// @warpforge arg channels = C
// @warpforge arg spatial = S
// @warpforge arg mean: out float[C]
// @warpforge launch grid=C, block=512
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void channel_mean(const float* x, int batch, int channels, int spatial, float* mean)
{
    __shared__ float part[THREADS];
    int t = threadIdx.x;
    int c = blockIdx.x;
    int i, b;
    part[t] = 0;
    for (b = 0; b < batch; ++b) {
        for (i = 0; i < spatial; i += THREADS) {
            int at = b * spatial * channels + c * spatial + i + t;
            part[t] += (i + t < spatial) ? x[at] : 0.0f;
        }
    }
    __syncthreads();
    if (t == 0) {
        mean[c] = 0;
        for (i = 0; i < THREADS; ++i) {
            mean[c] += part[i];
        }
        mean[c] /= spatial * batch;
    }
}
"""

#: a gradient accumulated into its old value: `g[c] += part[i]` for every partial (no braces)
BIAS_GRAD = """\
// @warpforge size C = 32
// @warpforge size S = 2048
// @warpforge arg g: inout float[C]
// @warpforge arg d: in float[C * S]
// @warpforge arg size = S
// @warpforge launch grid=C, block=256
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void bias_grad(float* g, const float* d, int size)
{
    __shared__ float part[256];
    int p = threadIdx.x;
    float s = 0;
    for (int i = 0; i < size; i += blockDim.x) {
        if (i + p < size) s += d[blockIdx.x * size + i + p];
    }
    part[p] = s;
    __syncthreads();
    if (p == 0) {
        for (int i = 0; i < blockDim.x; ++i) g[blockIdx.x] += part[i];
    }
}
"""

#: the value starts at element 0 and the loop folds the rest; two sums in one loop over one array
#: (interleaved pairs), integers
PAIRS_FROM_ONE = """\
// @warpforge size N = 1 << 16
// @warpforge arg v: in int[2 * N]
// @warpforge arg out: out int[2 * (N / 128)]
// @warpforge launch grid=N / 128, block=128
__global__ void pair_sums(const int* v, int* out)
{
    __shared__ int sh[256];
    const int tid = threadIdx.x;
    const int at = blockIdx.x * blockDim.x + tid;
    sh[2 * tid] = v[2 * at];
    sh[2 * tid + 1] = v[2 * at + 1];
    __syncthreads();
    if (0 == tid) {
        int a = sh[0];
        int b = sh[1];
        for (int k = 1; k < blockDim.x; k++) {
            a = a + sh[2 * k];
            b += sh[2 * k + 1];
        }
        out[2 * blockIdx.x] = a;
        out[2 * blockIdx.x + 1] = b;
    }
}
"""

#: a max over a block's values, written as `m = fmaxf(m, sh[i])`
BLOCK_MAX = """\
// @warpforge size N = 1 << 18
// @warpforge arg x: in float[N]
// @warpforge arg out: out float[N / 256]
// @warpforge launch grid=N / 256, block=256
__global__ void block_max(const float* x, float* out)
{
    __shared__ float sh[256];
    sh[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    if (!threadIdx.x) {
        float m = -1e30f;
        for (int i = 0; i < 256; i++) m = fmaxf(m, sh[i]);
        out[blockIdx.x] = m;
    }
}
"""

#: per item (a loop over items, barriers inside), thread 0 folds interleaved pairs through an index it steps
#: itself (`sid += 2`) and a second array by the loop's variable, starting from element 0 (mmcv's deformable
#: attention gradient spelling)
STEPPED_INDEX = """\
// @warpforge size P = 96
// @warpforge arg g: in float[P * 128 * 3]
// @warpforge arg loc: out float[2 * P]
// @warpforge arg att: out float[P]
// @warpforge arg points = P
// @warpforge launch grid=1, block=128
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void point_grads(const float* g, float* loc, float* att, int points)
{
    __shared__ float pair[2 * 128];
    __shared__ float w[128];
    const int tid = threadIdx.x;
    for (int p = 0; p < points; ++p) {
        pair[2 * tid] = g[(p * 128 + tid) * 3];
        pair[2 * tid + 1] = g[(p * 128 + tid) * 3 + 1];
        w[tid] = g[(p * 128 + tid) * 3 + 2];
        __syncthreads();
        if (tid == 0) {
            float gw = pair[0], gh = pair[1], ga = w[0];
            int sid = 2;
            for (unsigned int t = 1; t < blockDim.x; ++t) {
                gw += pair[sid];
                gh += pair[sid + 1];
                ga += w[t];
                sid += 2;
            }
            loc[2 * p] = gw;
            loc[2 * p + 1] = gh;
            att[p] = ga;
        }
        __syncthreads();
    }
}
"""

#: the same with both arrays in one dynamic shared block: a view of it and a second view at an offset (mmcv keeps
#: its two caches this way)
OFFSET_VIEW = (STEPPED_INDEX.replace("__global__ void point_grads(", "__global__ void point_grads_view(")
               .replace("launch grid=1, block=128", "launch grid=1, block=128, smem=3 * 128 * sizeof(float)")
               .replace("    __shared__ float pair[2 * 128];\n    __shared__ float w[128];\n",
                        "    extern __shared__ int raw[];\n    float* pair = reinterpret_cast<float*>(raw);\n"
                        "    float* w = pair + 2 * blockDim.x;\n"))

ACCEPTED = {"channel_mean": CHANNEL_MEAN, "bias_grad": BIAS_GRAD, "pair_sums": PAIRS_FROM_ONE,
            "block_max": BLOCK_MAX, "point_grads": STEPPED_INDEX, "point_grads_view": OFFSET_VIEW}


@pytest.mark.parametrize("kernel", sorted(ACCEPTED))
def test_serial_folds_are_rewritten(kernel: str) -> None:
    got = _children(ACCEPTED[kernel], kernel)
    assert list(got) == ["warps"]
    code = got["warps"]
    # every thread folds a strided share, the warps shuffle, and warp 0 folds the warps' values
    assert "__shfl_down_sync(0xffffffffu" in code and "+= blockDim.x" in code and "__syncthreads();" in code
    # the user's loop is kept for blocks that are not whole warps
    assert "wfr_fok0" in code and "} else for" in code


def test_the_fold_keeps_what_thread_zero_does_around_it() -> None:
    code = _children(CHANNEL_MEAN, "channel_mean")["warps"]
    # the store before, the fold applied to the same global element, the scaling after, in that order
    at_zero = code.index("mean[c] = 0;")
    applied = code.index("mean[c] = mean[c] + wfr_fv0_0;")
    scaled = code.index("mean[c] /= spatial * batch;")
    assert at_zero < applied < scaled
    # the new strided pass comes before thread 0's branch, after the author's barrier
    assert code.index("for (int wfr_fj0 = (0) + t;") < code.index("if (t == 0)")


def test_a_fold_from_element_one_starts_each_thread_at_its_share() -> None:
    code = _children(PAIRS_FROM_ONE, "pair_sums")["warps"]
    assert "for (int wfr_fj0 = (1) + tid; wfr_fj0 < (blockDim.x); wfr_fj0 += blockDim.x)" in code
    assert "wfr_fv0_0 = wfr_fv0_0 + sh[2 * wfr_fj0];" in code
    assert "wfr_fv0_1 = wfr_fv0_1 + sh[2 * wfr_fj0 + 1];" in code
    assert "a = a + wfr_fv0_0;" in code and "b = b + wfr_fv0_1;" in code


def test_a_max_starts_from_an_element_not_from_zero() -> None:
    code = _children(BLOCK_MAX, "block_max")["warps"]
    # no identity is invented for a max: each thread starts at element S (folding it twice changes nothing)
    assert "wfr_fv0_0 = sh[(0)];" in code
    assert "m = fmaxf(m, wfr_fv0_0);" in code


def test_an_index_the_loop_steps_itself_is_read_as_a_function_of_the_loop_variable() -> None:
    code = _children(STEPPED_INDEX, "point_grads")["warps"]
    # sid = 2 + 2 * (t - 1) at iteration t; the step itself is gone from the block-wide pass
    assert "wfr_fv0_0 = wfr_fv0_0 + pair[((2) + (2) * (wfr_fj0 - (1)))];" in code
    assert "wfr_fv0_1 = wfr_fv0_1 + pair[((2) + (2) * (wfr_fj0 - (1))) + 1];" in code
    assert "wfr_fv0_2 = wfr_fv0_2 + w[wfr_fj0];" in code
    assert "gw = gw + wfr_fv0_0;" in code and "ga = ga + wfr_fv0_2;" in code


@needs_nvcc
@pytest.mark.parametrize("kernel", sorted(ACCEPTED))
def test_the_rewritten_folds_compile(kernel: str) -> None:
    text = ACCEPTED[kernel]
    pol = _policy(text, kernel)
    for param, definition in _children(text, kernel).items():
        tu = standalone(pol.source, pol.model, pol.kernel, definition=definition, filename=pol.file)
        res = compile_cubin(tu, arch="sm_90", filename=pol.file)
        assert res.ok and res.entry_symbol(kernel) is not None, (param, res.log[-2000:])


@pytest.mark.parametrize(("text", "kernel", "words"), [
    # a difference is not associative
    (BLOCK_MAX.replace("m = fmaxf(m, sh[i]);", "m = m - sh[i];"), "block_max",
     "is not a sum, `|`, `^`, min or max of a shared element into one value"),
    # the range depends on the thread
    (BIAS_GRAD.replace("i < blockDim.x; ++i) g", "i < p + 1; ++i) g"), "bias_grad",
     "the loop's bound `p + 1` may differ between the block's threads"),
    # no barrier between the partials and the fold
    (BIAS_GRAD.replace("    part[p] = s;\n    __syncthreads();\n", "    __syncthreads();\n    part[p] = s;\n"),
     "bias_grad", "no block barrier precedes the `if` in its block"),
    # a thread may leave before the fold: it would miss the new barrier
    (BLOCK_MAX.replace("    __shared__ float sh[256];\n",
                       "    __shared__ float sh[256];\n    if (x[0] > 1e30f) return;\n"), "block_max",
     "a `return` comes before the fold"),
    # the loop's variable is read after it
    (CHANNEL_MEAN.replace("mean[c] /= spatial * batch;", "mean[c] /= spatial * batch + i;"), "channel_mean",
     "the loop's variable `i` is read after the loop"),
    # a double accumulator over float partials: the original sums in double
    (BLOCK_MAX.replace("float m = -1e30f;", "double m = -1e30;").replace("fmaxf(m, sh[i])", "fmax(m, sh[i])"),
     "block_max", "is not known to hold `float` values like `sh`"),
    # the bound is a local of thread 0's branch: the block-wide pass before the `if` cannot name it
    (BIAS_GRAD.replace("    if (p == 0) {\n        for (int i = 0; i < blockDim.x;",
                       "    if (p == 0) {\n        int m = blockDim.x;\n        for (int i = 0; i < m;"),
     "bias_grad", "names a local of thread 0's branch"),
    # the stepped index is used after the loop
    (STEPPED_INDEX.replace("att[p] = ga;", "att[p] = ga + sid;"), "point_grads",
     "the loop's variable `sid` is read after the loop"),
    # a store between the barrier and the fold (through any name: it could be another view of the partials, which
    # every thread would then read while one thread may still be writing)
    (OFFSET_VIEW.replace("        if (tid == 0) {\n            float gw",
                         "        if (tid == 5) loc[0] = 0.0f;\n        if (tid == 0) {\n            float gw"),
     "point_grads_view", "or writing memory in between"),
    # the step changes between iterations
    (STEPPED_INDEX.replace("sid += 2;", "sid += t;"), "point_grads",
     "the index `sid` is not the loop's variable with uniform offsets"),
])
def test_near_misses_decline_with_their_reason(text: str, kernel: str, words: str) -> None:
    assert _children(text, kernel) == {}
    load()
    pol = _policy(text, kernel)
    d = ask(REGISTRY["warp_reduce"], pol.context(pol.root_candidate()))
    assert d is not None and words in d.reason and d.stage in (Stage.SHAPE, Stage.LEGALITY), d
