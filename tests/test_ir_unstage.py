"""``unstage_tiles``: the textbook shared-memory tiled GEMM handed to the rules as the k-loop it computes (issue 27).

The kernels are written for these tests, each in another spelling of the one-output-per-thread tiling: a 1-D
flattened tile indexed by ``blockDim.x`` (float), 2-D tiles sized by a ``#define`` with a loop counting tiles
(int), a ``template <int BS>`` kernel the spec instantiates (double), the two-pointer loop ``a += aStep, b +=
bStep`` with the block's offsets in locals (then ``output_coordinates``), and file-level constants for every size.
Each must lower to the plain k-loop, and ``smem_tiling`` (which declines a kernel already using shared memory) must
then propose its five variants, which must build. The near misses (a non-square block, a shared array read
elsewhere, a missing barrier, a thread leaving before the loop, a load into another thread's slot, a coordinate
read outside an index) must stay as they were, with the reason in words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_nvcc
from test_rules_tiling import ALL, assert_every_variant_builds, params, tiled
from warpforge.policy.ir import Lowered, lower
from warpforge.spec.resolve import load_spec

#: 1-D flattened tiles, the tile is blockDim.x, float
FLAT = """\
// @warpforge size N = 256 fixed
// @warpforge size K = 192 fixed
// @warpforge arg X: in float[N*K] uniform(-1, 1)
// @warpforge arg Y: in float[K*N] uniform(-1, 1)
// @warpforge arg Z: out float[N*N]
// @warpforge arg n = N
// @warpforge arg kdim = K
// @warpforge launch grid=(N / 16, N / 16), block=(16, 16)
__global__ void staged_flat(const float* X, const float* Y, float* Z, int n, int kdim)
{
    __shared__ float xs[16 * 16];
    __shared__ float ys[16 * 16];
    const int gy = blockDim.y * blockIdx.y + threadIdx.y;
    const int gx = blockDim.x * blockIdx.x + threadIdx.x;
    float sum = 0.0f;
    for (int base = 0; base < kdim; base += blockDim.x) {
        xs[threadIdx.y * blockDim.x + threadIdx.x] = X[gy * kdim + base + threadIdx.x];
        ys[threadIdx.y * blockDim.x + threadIdx.x] = Y[(base + threadIdx.y) * n + gx];
        __syncthreads();
        for (int q = 0; q < blockDim.x; q++)
            sum += xs[threadIdx.y * blockDim.x + q] * ys[q * blockDim.x + threadIdx.x];
        __syncthreads();
    }
    Z[gy * n + gx] = sum;
}
"""

#: 2-D tiles sized by a macro, locals for the thread's coordinates, a loop counting tiles, int
MACRO_2D = """\
#define TILE 8
// @warpforge size R = 64 fixed
// @warpforge size C = 96 fixed
// @warpforge size D = 48 fixed
// @warpforge arg P: in int[R*D] int(-8, 8)
// @warpforge arg Q: in int[D*C] int(-8, 8)
// @warpforge arg out: out int[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg depth = D
// @warpforge launch grid=(C / 8, R / 8), block=(8, 8)
__global__ void staged_2d(const int* P, const int* Q, int* out, int rows, int cols, int depth)
{
    __shared__ int Ps[TILE][TILE];
    __shared__ int Qs[TILE][TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int r = blockIdx.y * blockDim.y + ty;
    const int c = blockIdx.x * blockDim.x + tx;
    int acc = 0;
    for (int t = 0; t < depth / TILE; ++t) {
        Ps[ty][tx] = P[r * depth + t * TILE + tx];
        Qs[ty][tx] = Q[(t * TILE + ty) * cols + c];
        __syncthreads();
        for (int e = 0; e < TILE; ++e) {
            acc += Ps[ty][e] * Qs[e][tx];
        }
        __syncthreads();
    }
    out[r * cols + c] = acc;
}
"""

#: a template on the tile the spec instantiates, double, a bound checked at the store only
TEMPLATE = """\
// @warpforge size M = 96 fixed
// @warpforge size N = 64 fixed
// @warpforge size K = 80 fixed
// @warpforge arg A: in double[M*K] uniform(-1, 1)
// @warpforge arg B: in double[K*N] uniform(-1, 1)
// @warpforge arg C: out double[M*N]
// @warpforge arg m = M
// @warpforge arg n = N
// @warpforge arg k = K
// @warpforge launch grid=(N / 16, M / 16), block=(16, 16)
// @warpforge template 16
template <int BS>
__global__ void staged_tpl(const double* A, const double* B, double* C, int m, int n, int k)
{
    __shared__ double as[BS][BS];
    __shared__ double bs[BS][BS];
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    double v = 0.0;
    for (int p = 0; p < k; p += BS) {
        as[threadIdx.y][threadIdx.x] = A[row * k + (p + threadIdx.x)];
        bs[threadIdx.y][threadIdx.x] = B[(p + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (int i = 0; i < BS; ++i)
            v += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n)
        C[row * n + col] = v;
}
"""

#: the two-pointer loop over a row of A and a column of B, the block's offsets in locals; the launch sized by the
#: expression the width parameter carries (no size is carried by a parameter alone), as NVIDIA's samples do
TWO_POINTER = """\
// @warpforge size S = 32 odd=S - 8
// @warpforge arg Cm: out float[(4 * S) * (4 * S)]
// @warpforge arg Am: in float[(4 * S) * (4 * S)] uniform(-1, 1)
// @warpforge arg Bm: in float[(4 * S) * (4 * S)] uniform(-1, 1)
// @warpforge arg w = 4 * S
// @warpforge launch grid=((4 * S) / 32, (4 * S) / 32), block=(32, 32)
__global__ void staged_pairs(float* Cm, const float* Am, const float* Bm, int w)
{
    __shared__ float sa[32][32];
    __shared__ float sb[32][32];
    int first = w * 32 * blockIdx.y;
    int last = first + w - 1;
    float s = 0;
    for (int pa = first, pb = 32 * blockIdx.x; pa <= last; pa += 32, pb += 32 * w) {
        sa[threadIdx.y][threadIdx.x] = Am[pa + w * threadIdx.y + threadIdx.x];
        sb[threadIdx.y][threadIdx.x] = Bm[pb + w * threadIdx.y + threadIdx.x];
        __syncthreads();
        for (int u = 0; u < 32; ++u)
            s += sa[threadIdx.y][u] * sb[u][threadIdx.x];
        __syncthreads();
    }
    Cm[w * 32 * blockIdx.y + 32 * blockIdx.x + w * threadIdx.y + threadIdx.x] = s;
}
"""

#: file-level constants for the sizes and the tile, no size parameter at all, int
CONSTANTS = """\
constexpr int W = 128;
constexpr int TS = 16;
// @warpforge arg L: in int[128*128] int(-8, 8)
// @warpforge arg R: in int[128*128] int(-8, 8)
// @warpforge arg O: out int[128*128]
// @warpforge launch grid=(8, 8), block=(16, 16)
__global__ void staged_consts(const int* L, const int* R, int* O)
{
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    __shared__ int ls[TS * TS];
    __shared__ int rs[TS * TS];
    int dot = 0;
    for (int i = 0; i < W; i += TS) {
        ls[threadIdx.y * TS + threadIdx.x] = L[y * W + i + threadIdx.x];
        rs[threadIdx.y * TS + threadIdx.x] = R[(i + threadIdx.y) * W + x];
        __syncthreads();
        for (int j = 0; j < TS; j++)
            dot += ls[threadIdx.y * TS + j] * rs[j * TS + threadIdx.x];
        __syncthreads();
    }
    O[y * W + x] = dot;
}
"""


def lowered(text: str, kernel: str) -> Lowered:
    got = lower(text, kernel, path="fixture.cu", spec=load_spec("fixture.cu", kernel, text=text))
    assert isinstance(got, Lowered), got
    return got


def canonical(text: str, kernel: str) -> str:
    return " ".join(lowered(text, kernel).text.split())


def unstage_skips(text: str, kernel: str) -> list[str]:
    return [why for p, why, _ in lowered(text, kernel).skipped if p == "unstage_tiles"]


@pytest.mark.parametrize("text,kernel,loop", [
    (FLAT, "staged_flat", "for (int q = 0; q < kdim; ++q) { sum += X[gy * kdim + q] * Y[(q) * n + gx]; }"),
    # a loop counting tiles: its range is the tiles' count times the tile
    (MACRO_2D, "staged_2d", "for (int e = 0; e < (depth / 8) * 8; ++e) { acc += P[r * depth + e] * "
                            "Q[(e) * cols + c]; }"),
    (TEMPLATE, "staged_tpl", "for (int i = 0; i < k; ++i) { v += A[row * k + (i)] * B[(i) * n + col]; }"),
    # the two pointers at their starts, the tile's position folded into the counter; `<= last` counts w (whole
    # tiles at both sizes: the spec's `odd=` keeps 4 * S a multiple of 32); then the block's origin and the
    # thread's offset as the thread's row and column (`output_coordinates`), the locals that held them gone
    (TWO_POINTER, "staged_pairs", "int row = blockIdx.y * blockDim.y + threadIdx.y; int col = blockIdx.x * "
                                  "blockDim.x + threadIdx.x; float s = 0; for (int u = 0; u < w; "
                                  "++u) { s += Am[w * row + u] * Bm[col + u * w]; } Cm[w * row + col] = s;"),
    # file-level constants read as their values (the rules decline a name declared outside the kernel)
    (CONSTANTS, "staged_consts", "for (int j = 0; j < 128; ++j) { dot += L[y * 128 + j] * R[(j) * 128 + x]; }"),
])
def test_the_staged_loop_lowers_to_its_k_loop(text: str, kernel: str, loop: str) -> None:
    got = canonical(text, kernel)
    assert loop in got, got
    assert "__shared__" not in got and "__syncthreads" not in got
    assert "first" not in got and "last" not in got


def test_the_launch_extent_is_read_through_the_expression_a_parameter_carries() -> None:
    # the grid is ((4 * S) / 32) blocks of 32: `w` carries 4 * S, so each output checks `col < ((w) / 32) * 32`
    d = tiled(TWO_POINTER, "staged_pairs")[0].definition
    assert "col < ((((w)) / 32) * (32))" in d, d


def test_a_coordinate_read_outside_an_index_keeps_the_origin_locals() -> None:
    text = TWO_POINTER.replace("    Cm[w * 32", "    if (threadIdx.x == 0 && w < 0) return;\n    Cm[w * 32")
    skips = [why for p, why, _ in lowered(text, "staged_pairs").skipped if p == "output_coordinates"]
    assert any("is read outside an array index" in why for why in skips), skips
    assert "int first = " in lowered(text, "staged_pairs").text


@pytest.mark.parametrize("text,kernel", [(FLAT, "staged_flat"), (MACRO_2D, "staged_2d"), (TEMPLATE, "staged_tpl"),
                                         (TWO_POINTER, "staged_pairs"), (CONSTANTS, "staged_consts")])
def test_smem_tiling_proposes_its_register_tiled_variants(text: str, kernel: str) -> None:
    kids = tiled(text, kernel)
    assert params(kids) == ALL
    d = kids[0].definition
    assert "__shared__" in d and "wft_acc" in d  # the rule's own tiles, not the kernel's


@pytest.mark.parametrize("text,kernel", [
    # K = 200 is not a whole number of 16-wide tiles: the staged loop reads the last tile whole, past its arrays
    (FLAT.replace("size K = 192 fixed", "size K = 200 fixed"), "staged_flat"),
    # a whole number of tiles at the spec's size, but not at the perturbed one (S = 29: w = 116); the launch
    # rounds up, so nothing says the sizes are whole blocks
    (TWO_POINTER.replace("size S = 32 odd=S - 8", "size S = 32")
     .replace("grid=((4 * S) / 32, (4 * S) / 32)", "grid=(cdiv(4 * S, 32), cdiv(4 * S, 32))"), "staged_pairs"),
])
def test_a_partial_last_tile_at_any_size_declines_with_the_spec_line_to_write(text: str, kernel: str) -> None:
    skips = [why for p, why, _ in lowered(text, kernel).skipped if p == "unstage_tiles"]
    assert any("not a whole number of" in why and "`odd=`" in why for why in skips), skips
    assert "__shared__" in lowered(text, kernel).text


def test_a_launch_for_whole_blocks_keeps_the_perturbed_size_whole_tiles() -> None:
    """``grid = (4 * S) / 32`` (not rounded up): the perturbed S is kept a multiple that the launch divides
    (S = 24, not 29: ``KernelSpec.launch_alignment``), every tile loop is whole there, and the loop un-stages."""
    text = TWO_POINTER.replace("size S = 32 odd=S - 8", "size S = 32")
    low = lowered(text, "staged_pairs")
    assert "__shared__" not in low.text
    assert not [why for p, why, _ in low.skipped if p == "unstage_tiles"]
    assert params(tiled(text, "staged_pairs")) == ALL


@pytest.mark.parametrize("text,kernel,words", [
    # a 16x8 block: slot (r, c) is not thread (c, r)'s load
    (FLAT.replace("block=(16, 16)", "block=(16, 8)").replace("N / 16)", "N / 8)"), "staged_flat",
     "the tile is not square"),
    # the tile is read again after the loop
    (FLAT.replace("Z[gy * n + gx] = sum;", "Z[gy * n + gx] = sum + xs[0];"), "staged_flat",
     "used outside the staged tile loop"),
    # the barrier after the inner loop is missing: the next tile's stores race with this tile's reads
    (MACRO_2D.replace("        }\n        __syncthreads();\n", "        }\n"), "staged_2d", "a barrier is missing"),
    # a thread that leaves early never loads its slots: its neighbours would read what was never stored
    (FLAT.replace("    float sum = 0.0f;\n", "    if (gy >= n) return;\n    float sum = 0.0f;\n"), "staged_flat",
     "may leave the kernel before the tile loop"),
    # the tile holds doubles of a float operand: the store converts, a read of the global would not
    (FLAT.replace("__shared__ float xs", "__shared__ double xs"), "staged_flat", "the store converts"),
    # the width is written after the locals read it: spelled out, the range could read another value
    (TWO_POINTER.replace("    float s = 0;\n", "    float s = 0;\n    w = w | 0;\n"), "staged_pairs",
     "reads a name the kernel writes"),
    # each thread loads the transposed slot
    (FLAT.replace("xs[threadIdx.y * blockDim.x + threadIdx.x] =", "xs[threadIdx.x * blockDim.x + threadIdx.y] ="),
     "staged_flat", "not the thread's own slot"),
])
def test_near_misses_stay_staged_with_the_reason(text: str, kernel: str, words: str) -> None:
    assert any(words in why for why in unstage_skips(text, kernel)), unstage_skips(text, kernel)
    assert "__syncthreads" in canonical(text, kernel)
    assert tiled(text, kernel) == []


@needs_nvcc
@pytest.mark.parametrize("text,kernel", [(FLAT, "staged_flat"), (MACRO_2D, "staged_2d"), (TEMPLATE, "staged_tpl"),
                                         (TWO_POINTER, "staged_pairs"), (CONSTANTS, "staged_consts")])
def test_the_variants_build_through_the_evaluator(tmp_path: Path, text: str, kernel: str) -> None:
    assert_every_variant_builds(tmp_path, text, kernel)
