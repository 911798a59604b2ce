"""``block_items``: a block-per-item cooperative reduction handed to the rules as the thread-per-item loop it computes.

The kernels are written for these tests, each another spelling of "one block per output item, its threads stride
over the item's loop, a shared-memory tree folds their partials, one thread stores": locals for the thread, the
block size and the item with a dynamic shared array and the tree's barrier first (a column sum in double, stored
as float); thread 0 adding the slots up itself, with a literal stride equal to the block; partials kept in the
thread's own shared slot (``buf[t] += ...``, a channel mean; two of them set by one chained assignment);
``blockDim.x`` and ``blockIdx.x`` written inline with a static array sized by a ``#define`` and the thread-0 store
after ``if (threadIdx.x != 0) return;``; darknet's loop strided by a literal block inside a batch loop with the
thread's offset in its body; a row maximum over contiguous elements with an interleaved tree. Each must lower to
the serial loop, and the rule that fixes its access pattern must propose variants that build: ``column_split``
for the column sums (a warp reads 32 neighbouring items), ``warp_per_row`` for the contiguous rows. The near
misses (a second global write, an atomic, a block that is not a power of two, a grid no parameter names, the
thread index used in the loop, a sum that does not start at zero, ...) stay as they were, with the reason in
words.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc, text_policy
from warpforge.cuda.candidate import Candidate
from warpforge.policy.ir import Lowered, lower
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))
import corpus_applicability as ca

#: a column sum (bias gradient): locals for everything, a dynamic shared array, the tree's barrier first
COLSUM = """\
// @warpforge size R = 2048
// @warpforge size C = 384
// @warpforge size NT = 256 fixed
// @warpforge arg grad: out float[C]
// @warpforge arg y: in float[R*C] uniform(-1, 1)
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=C, block=NT, smem=NT*4
__global__ void col_bias_grad(float* grad, const float* y, int rows, int cols)
{
    extern __shared__ float part[];
    const int c = blockIdx.x;
    const int me = threadIdx.x;
    const int nthreads = blockDim.x;
    const float* col = y + c;
    double acc = 0.0;
    for (int r = me; r < rows; r += nthreads) {
        acc += col[r * cols];
    }
    part[me] = (float)acc;
    __syncthreads();
    for (int s = nthreads / 2; s >= 1; s /= 2) {
        __syncthreads();
        if (me < s) {
            part[me] += part[me + s];
        }
    }
    if (me == 0) {
        grad[c] = part[0];
    }
}
"""

#: the same column sum with the builtins inline, a static array sized by a macro, the thread-0 exit
INLINE = """\
#define THREADS 128
// @warpforge size R = 1024
// @warpforge size C = 320
// @warpforge arg out: out float[C]
// @warpforge arg m: in float[R*C] uniform(-1, 1)
// @warpforge arg nr = R
// @warpforge arg nc = C
// @warpforge launch grid=C, block=THREADS
__global__ void col_total(float* out, const float* m, int nr, int nc)
{
    __shared__ float sums[THREADS];
    float t = 0.0f;
    for (int i = threadIdx.x; i < nr; i = i + blockDim.x)
        t += m[i * nc + blockIdx.x];
    sums[threadIdx.x] = t;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    out[blockIdx.x] = sums[0] * 0.5f;
}
"""

#: a row maximum over contiguous elements, an interleaved tree (stride doubling from 1)
ROWMAX = """\
// @warpforge size B = 512
// @warpforge size N = 1000
// @warpforge arg res: out float[B]
// @warpforge arg x: in float[B*N] uniform(-1, 1)
// @warpforge arg n = N
// @warpforge arg b = B
// @warpforge launch grid=B, block=64
__global__ void row_max(float* res, const float* x, int n, int b)
{
    __shared__ float best[64];
    int row = blockIdx.x;
    int lane = threadIdx.x;
    float m = -3.0e38f;
    for (int i = lane; i < n; i += blockDim.x) {
        m = fmaxf(m, x[row * n + i]);
    }
    best[lane] = m;
    __syncthreads();
    for (int s = 1; s < blockDim.x; s *= 2) {
        if (lane % (2 * s) == 0) {
            best[lane] = fmaxf(best[lane], best[lane + s]);
        }
        __syncthreads();
    }
    if (lane == 0) {
        res[row] = best[0];
    }
}
"""

#: a channel mean whose threads accumulate in their own shared slot (``buf[t] += ...``), not in a register
SLOT = """\
#define NT 256
// @warpforge size N = 16
// @warpforge size C = 96
// @warpforge size S = 1024
// @warpforge arg inp: in float[N*C*S] uniform(-1, 1)
// @warpforge arg mean: out float[C]
// @warpforge arg num = N
// @warpforge arg channels = C
// @warpforge arg spatial = S
// @warpforge launch grid=C, block=NT
__global__ void chan_mean(const float* inp, float* mean, int num, int channels, int spatial)
{
    __shared__ float buf[NT];
    int t = threadIdx.x;
    int ch = blockIdx.x;
    buf[t] = 0;
    for (int i = t; i < num * spatial; i += blockDim.x) {
        int at = (i / spatial) * channels * spatial + ch * spatial + i % spatial;
        buf[t] += inp[at];
    }
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            buf[t] += buf[t + s];
        }
        __syncthreads();
    }
    int total = num * spatial;
    if (t == 0) {
        mean[ch] = buf[0] / total;
    }
}
"""

#: no tree: thread 0 adds the slots up itself after a barrier (darknet's spelling), the stride a literal equal to
#: the launch's block, the slots sized by a local holding it
SERIAL = """\
#define NT 256
// @warpforge size R = 1024
// @warpforge size C = 200
// @warpforge arg sums: inout float[C]
// @warpforge arg d: in float[R*C] uniform(-1, 1)
// @warpforge arg nrows = R
// @warpforge arg ncols = C
// @warpforge launch grid=C, block=NT
__global__ void col_acc(float* sums, const float* d, int nrows, int ncols)
{
    const int threads = NT;
    __shared__ float slot[threads];
    int col = blockIdx.x;
    int p = threadIdx.x;
    float s = 0;
    for (int r = p; r < nrows; r += NT) {
        s += d[r * ncols + col];
    }
    slot[p] = s;
    __syncthreads();
    if (p == 0) {
        for (int i = 0; i < threads; ++i) sums[col] += slot[i];
    }
}
"""

#: darknet's spelling: the loop strided by a literal block inside a batch loop, the thread's offset inside the body
#: under a guard (`p + i < sz`), C89 counters, thread 0 adding the slots up into what is there
OFFSET = """\
#define BLK 256
// @warpforge size NB = 4
// @warpforge size F = 96
// @warpforge size S = 700
// @warpforge arg upd: inout float[F]
// @warpforge arg g: in float[NB*F*S] uniform(-1, 1)
// @warpforge arg batch = NB
// @warpforge arg nf = F
// @warpforge arg sz = S
// @warpforge launch grid=F, block=BLK
__global__ void filt_grad(float* upd, const float* g, int batch, int nf, int sz)
{
    __shared__ float part[BLK];
    int b, i;
    int f = blockIdx.x;
    int p = threadIdx.x;
    float acc = 0;
    for (b = 0; b < batch; ++b) {
        for (i = 0; i < sz; i += BLK) {
            int at = p + i + sz * (f + nf * b);
            acc += (p + i < sz) ? g[at] : 0;
        }
    }
    part[p] = acc;
    __syncthreads();
    if (p == 0) {
        for (i = 0; i < BLK; ++i) upd[f] += part[i];
    }
}
"""

#: two partials kept in two shared slots, set by one chained assignment, folded by one tree (mmcv's sync-BN
#: parameter gradient's spelling)
TWO = """\
#define TPB 128
// @warpforge size N = 8
// @warpforge size C = 64
// @warpforge size S = 300
// @warpforge arg go: in float[N*C*S] uniform(-1, 1)
// @warpforge arg nm: in float[N*C*S] uniform(-1, 1)
// @warpforge arg gw: out float[C]
// @warpforge arg gb: out float[C]
// @warpforge arg num = N
// @warpforge arg channels = C
// @warpforge arg spatial = S
// @warpforge launch grid=C, block=TPB
__global__ void bn_param_grad(const float* go, const float* nm, float* gw, float* gb, int num, int channels,
                              int spatial)
{
    __shared__ float b1[TPB];
    __shared__ float b2[TPB];
    int t = threadIdx.x;
    int ch = blockIdx.x;
    b1[t] = b2[t] = 0;
    for (int i = t; i < num * spatial; i += blockDim.x) {
        int at = (i / spatial) * channels * spatial + ch * spatial + i % spatial;
        b1[t] += go[at] * nm[at];
        b2[t] += go[at];
    }
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            b1[t] += b1[t + s];
            b2[t] += b2[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        gw[ch] = b1[0];
        gb[ch] = b2[0];
    }
}
"""


def lowered(text: str, kernel: str) -> Lowered:
    got = lower(text, kernel, path="fixture.cu", spec=load_spec("fixture.cu", kernel, text=text))
    assert isinstance(got, Lowered), got
    return got


def canonical(text: str, kernel: str) -> str:
    return " ".join(lowered(text, kernel).text.split())


def skips(text: str, kernel: str) -> list[str]:
    return [why for p, why, _ in lowered(text, kernel).skipped if p == "block_items"]


def proposed(text: str, kernel: str, family: str) -> list[Candidate]:
    pol = text_policy(text, kernel)
    return [c for c in pol.propose_sync(pol.root_candidate()) if c.family == family]


@pytest.mark.parametrize("text,kernel,parts", [
    (COLSUM, "col_bias_grad", ["const int c = blockIdx.x * blockDim.x + threadIdx.x; if (c >= cols) return;",
                               "for (int r = 0; r < rows; ++r) { acc += col[r * cols]; }",
                               "float part_total = (float)acc; grad[c] = part_total; }"]),
    # no item local: one is declared, every blockIdx.x reads it; the tail after `if (tid != 0) return;`
    (INLINE, "col_total", ["const int item = blockIdx.x * blockDim.x + threadIdx.x; if (item >= nc) return;",
                           "for (int i = 0; i < nr; ++i) t += m[i * nc + item];",
                           "float sums_total = t; out[item] = sums_total * 0.5f; }"]),
    (ROWMAX, "row_max", ["int row = blockIdx.x * blockDim.x + threadIdx.x; if (row >= b) return;",
                         "for (int i = 0; i < n; ++i) { m = fmaxf(m, x[row * n + i]); }",
                         "float best_total = m; res[row] = best_total; }"]),
    # the block's size passed as a parameter beside the launch (`arg bs = NT`): the parameter stays
    (COLSUM.replace("// @warpforge arg cols = C", "// @warpforge arg cols = C\n// @warpforge arg bs = NT")
     .replace("int rows, int cols)", "int rows, int cols, int bs)")
     .replace("    const int nthreads = blockDim.x;\n", "").replace("nthreads", "bs"), "col_bias_grad",
     ["for (int r = 0; r < rows; ++r) { acc += col[r * cols]; }", "grad[c] = part_total; }"]),
    (SERIAL, "col_acc", ["int col = blockIdx.x * blockDim.x + threadIdx.x; if (col >= ncols) return;",
                         "float s = 0; for (int r = 0; r < nrows; ++r) { s += d[r * ncols + col]; }",
                         "float slot_total = s; sums[col] += slot_total; }"]),
    # darknet's offset form: offset_stepped_loop makes it the block-strided loop first (the guard goes with it)
    (OFFSET, "filt_grad", ["int f = blockIdx.x * blockDim.x + threadIdx.x; if (f >= nf) return;",
                           "for (int b = 0; b < batch; ++b) { for (int i = 0; i < sz; ++i) { "
                           "int at = i + sz * (f + nf * b); acc += g[at]; } }",
                           "float part_total = acc; upd[f] += part_total; }"]),
    (TWO, "bn_param_grad", ["float b1_acc = 0; float b2_acc = 0; for (int i = 0; i < num * spatial; ++i) {",
                            "b1_acc += go[at] * nm[at]; b2_acc += go[at]; }",
                            "float b1_total = b1_acc; float b2_total = b2_acc; gw[ch] = b1_total; gb[ch] = b2_total;"]),
    # the shared slot kept in a register first; the declaration every thread runs after the tree stays
    (SLOT, "chan_mean", ["int ch = blockIdx.x * blockDim.x + threadIdx.x; if (ch >= channels) return;",
                         "float buf_acc = 0; for (int i = 0; i < num * spatial; ++i) {", "buf_acc += inp[at]; }",
                         "float buf_total = buf_acc; int total = num * spatial; mean[ch] = buf_total / total; }"]),
])
def test_the_block_reduction_lowers_to_the_items_serial_loop(text: str, kernel: str, parts: list[str]) -> None:
    low = lowered(text, kernel)
    got = " ".join(low.text.split())
    for p in parts:
        assert p in got, got
    assert "__shared__" not in got and "__syncthreads" not in got
    assert got.count("threadIdx.x") == 1 and got.count("blockDim.x") == 1, got
    assert any(a.startswith("block_items:") for a in low.applied), low.applied


def test_column_split_takes_the_lowered_column_sum_with_a_launch_of_its_own() -> None:
    kids = proposed(COLSUM, "col_bias_grad", "column_split")
    assert [c.steps[0] for c in kids] == ["column_split:w32r32x4", "column_split:w8r128x4"]
    c = kids[0]
    # the bound the pass wrote (`cols`, the grid's C) gives the rule its columns; the tree's bytes are not passed
    assert c.launch is not None and c.launch.grid == ("cdiv(C, 32)",) and c.launch.block == ("32", "32")
    assert c.launch.smem == "0"
    d = " ".join(c.definition.split())
    assert "extern __shared__" not in d and "grad[c] = part_total;" in d and "acc += col[i * cols];" not in d


def test_the_lowered_text_carries_the_launch_it_is_meant_for() -> None:
    # one thread per item: the original's grid of one block per item, times its block, would be the items times
    # the block's threads; a rule that scales the launch (column_remap, lane_remap) scales this grid instead
    assert lowered(COLSUM, "col_bias_grad").grid == ("cdiv(C, NT)",)
    kids = proposed(COLSUM, "col_bias_grad", "column_remap")
    assert kids and all(c.launch is not None and c.launch.grid[0].startswith("(cdiv(C, NT)) * ((NT) / ")
                        for c in kids), [c.launch for c in kids]
    # a kernel the pass does not touch keeps the candidate's launch
    assert lowered(COLSUM.replace("part[me] = (float)acc;", "part[me] = (float)acc; grad[c] = 0;"),
                   "col_bias_grad").grid is None


def test_column_split_takes_a_store_that_reads_its_own_element() -> None:
    # `grad[c] = grad[c] + total` (a gradient accumulated into what is there): the one thread that stores the
    # column reads it first, as the original's thread 0 did
    text = COLSUM.replace("grad[c] = part[0];", "grad[c] = (float)((float)grad[c] + part[0]);")
    text = text.replace("arg grad: out", "arg grad: inout")
    kids = proposed(text, "col_bias_grad", "column_split")
    assert [c.steps[0] for c in kids] == ["column_split:w32r32x4", "column_split:w8r128x4"]
    assert "grad[c] = (float)((float)grad[c] + part_total);" in kids[0].definition


@pytest.mark.parametrize("text,kernel", [(ROWMAX, "row_max"), (SLOT, "chan_mean"), (TWO, "bn_param_grad")])
def test_warp_per_row_takes_the_lowered_contiguous_rows(text: str, kernel: str) -> None:
    kids = proposed(text, kernel, "warp_per_row")
    assert kids, "warp_per_row proposed nothing on the lowered kernel"
    assert all("__shfl" in c.definition for c in kids)


@pytest.mark.parametrize("text,kernel,words", [
    # a second global write, by every thread
    (COLSUM.replace("    double acc = 0.0;\n", "    double acc = 0.0;\n    grad[c + 1] = 0.0f;\n"),
     "col_bias_grad", "writes memory outside the one thread's stores"),
    # thread 0 adds up half the slots
    (SERIAL.replace("i < threads;", "i < threads / 2;"), "col_acc", "does not fold exactly the block's partials"),
    # no barrier between the slots' stores and thread 0's fold
    (SERIAL.replace("    __syncthreads();\n", "")
     .replace("slot[i];\n    }\n", "slot[i];\n    }\n    __syncthreads();\n"), "col_acc",
     "no shared-memory tree reduction follows"),
    # past the bound the threads would read other elements
    (OFFSET.replace("(p + i < sz) ? g[at] : 0", "g[at]"), "filt_grad", "is read without the guard"),
    # the offset scaled: the threads' elements are not the item's
    (OFFSET.replace("int at = p + i", "int at = 2 * p + i"), "filt_grad", "as one sum `tid + i`"),
    # the slot read at another thread's index before the barrier
    (SLOT.replace("buf[t] += inp[at];", "buf[t] += inp[at] + buf[0];"), "chan_mean", "reads another thread's slot"),
    # a statement between the partials' stores and the tree
    (COLSUM.replace("    part[me] = (float)acc;\n", "    part[me] = (float)acc;\n    grad[c] = 0.0f;\n"),
     "col_bias_grad", "`grad[c] = 0.0f;` stands between"),
    # an atomic
    (COLSUM.replace("grad[c] = part[0];", "atomicAdd(&grad[c], part[0]);"), "col_bias_grad", "an atomic"),
    # a block of 96 threads: a halving tree leaves partials out
    (COLSUM.replace("size NT = 256 fixed", "size NT = 96 fixed"), "col_bias_grad", "not a power of two"),
    # no parameter carries the grid's C: the items' bound cannot be said in the kernel's names
    (COLSUM.replace("arg cols = C", "arg cols = C + 0"), "col_bias_grad", "no scalar parameter's value"),
    # the thread index read in the loop: a thread's iterations are not the item's
    (COLSUM.replace("acc += col[r * cols];", "acc += col[r * cols] * me;"), "col_bias_grad",
     "names the thread index"),
    # the accumulator read by thread 0 after the tree: there it is that thread's partial, not the total
    (COLSUM.replace("grad[c] = part[0];", "grad[c] = part[0] + acc;"), "col_bias_grad", "one thread's partial"),
    # a thread that stops early stops only its own share of the rows
    (COLSUM.replace("acc += col[r * cols];", "if (col[r * cols] > 0.9f) break;\n        acc += col[r * cols];"),
     "col_bias_grad", "leaves the strided loop"),
    # every thread's partial would add the start value
    (COLSUM.replace("double acc = 0.0;", "double acc = 1.0;"), "col_bias_grad", "not 0"),
    # a tree that starts at a quarter of the block folds half the partials
    (COLSUM.replace("nthreads / 2;", "nthreads / 4;"), "col_bias_grad", "does not fold exactly the block's"),
    # the tree folds a maximum, the loop sums
    (COLSUM.replace("part[me] += part[me + s];", "part[me] = fmaxf(part[me], part[me + s]);"), "col_bias_grad",
     "accumulates `acc` as a sum"),
    # a 2-D grid: blockIdx.y names another coordinate
    (INLINE.replace("grid=C,", "grid=(C, 2),").replace("+ blockIdx.x];", "+ blockIdx.x + blockIdx.y];"),
     "col_total", "grid is not known to be 1-D"),
])
def test_near_misses_stay_as_written_with_the_reason(text: str, kernel: str, words: str) -> None:
    why = skips(text, kernel)
    assert any(words in w for w in why), why
    assert "__syncthreads" in canonical(text, kernel)


def test_a_rounded_up_grid_is_said_in_c() -> None:
    # `cdiv` of the spec is C's rounded-up division of the parameters that carry its sizes
    text = ROWMAX.replace("size B = 512", "size B = 512\n// @warpforge size G = 4")
    text = text.replace("grid=B,", "grid=cdiv(B, G),")
    text = text.replace("// @warpforge arg b = B", "// @warpforge arg b = B\n// @warpforge arg g = G")
    text = text.replace("int n, int b)", "int n, int b, int g)")
    assert "if (row >= (((b) + (g) - 1) / (g))) return;" in canonical(text, "row_max")


def test_a_parameter_carrying_the_whole_grid_is_the_bound() -> None:
    text = ROWMAX.replace("size B = 512", "size H = 16\n// @warpforge size W = 32").replace("grid=B,", "grid=H * W,")
    text = text.replace("arg b = B", "arg b = H * W").replace("float[B]", "float[H*W]").replace("[B*N]", "[H*W*N]")
    assert "if (row >= b) return;" in canonical(text, "row_max")


def test_a_kernel_without_the_shape_is_not_reported() -> None:
    text = COLSUM.replace("int r = me;", "int r = 0;").replace("r += nthreads", "r += 1")
    assert skips(text, "col_bias_grad") == []


@needs_nvcc
@pytest.mark.parametrize("text,kernel,family", [(COLSUM, "col_bias_grad", "column_split"),
                                                (INLINE, "col_total", "column_split"),
                                                (ROWMAX, "row_max", "warp_per_row"),
                                                (SLOT, "chan_mean", "warp_per_row"),
                                                (SERIAL, "col_acc", "column_split"),
                                                (OFFSET, "filt_grad", "warp_per_row"),
                                                (TWO, "bn_param_grad", "warp_per_row")])
def test_the_variants_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str, family: str) -> None:
    path = tmp_path / f"{kernel}.cu"
    path.write_text(text)
    res = ca.check_case(path, families=[family], all_candidates=True)
    assert res.original is not None and res.original.ok, res.original
    fr = res.families[family]
    assert fr.proposed >= 1 and fr.tried == fr.proposed and not fr.failures, fr.failures
