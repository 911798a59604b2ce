"""Transposes written here in the styles other people's code uses (and near misses that are not transposes), shared
by the CPU tests (``test_rules_transpose.py``: proposal, nvcc build, declines) and the GPU test
(``test_rules_transpose_gpu.py``: verified against the original at the spec size and the perturbed odd size,
timed). The sizes are not multiples of the 32-wide tile, so partial tiles are exercised."""

from __future__ import annotations

_GRID2D = """// @warpforge size R = 1000
// @warpforge size C = 1400
// @warpforge arg {dst}: out {t}[R*C]
// @warpforge arg {src}: in {t}[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge arg scale = 2.0
// @warpforge launch grid=(cdiv(C, 16), cdiv(R, 16)), block=(16, 16)
"""

#: name -> (source, kernel name): every one must be proposed
TRANSPOSES: dict[str, str] = {
    # the canonical 2-D form behind an early exit, y declared first, operands the other way round, extra scalars
    "grid2d_exit": _GRID2D.format(dst="out", src="in", t="float") +
    "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
    "  const int y = threadIdx.y + blockDim.y * blockIdx.y;\n"
    "  const int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (x >= cols || y >= rows) return;\n"
    "  const float s = scale * 0.5f + 1.0f;\n"
    "  out[rows * x + y] = s * in[y * cols + x] - in[x + cols * y];\n"
    "}\n",
    # a typedef'd element type, a guard around the store, an index computed first, the store coalesced and the read
    # strided (the tile is then loaded along the read's rows)
    "grid2d_read_strided_typedef": "typedef double real_t;\n" +
    _GRID2D.format(dst="b", src="a", t="double").replace("cdiv(C, 16), cdiv(R, 16)", "cdiv(R, 16), cdiv(C, 16)") +
    "__global__ void k(real_t* b, const real_t* a, int rows, int cols, float scale) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  int j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  int from = i * cols + j;\n"
    "  if (i < rows && j < cols) {\n"
    "    b[j * rows + i] = a[from] * scale;\n"
    "  }\n"
    "}\n",
    # a template instantiated by the spec, a read through __ldg
    "grid2d_template_ldg": _GRID2D.format(dst="out", src="in", t="float").replace(
        "// @warpforge launch", "// @warpforge template T = float\n// @warpforge launch") +
    "template <typename T>\n"
    "__global__ void k(T* __restrict__ out, const T* __restrict__ in, int rows, int cols, float scale) {\n"
    "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  if (y < rows && x < cols)\n"
    "    out[x * rows + y] = __ldg(&in[y * cols + x]) + (T)scale;\n"
    "}\n",
    # cuda-samples' style: a per-thread tile loop over a 32x32 tile with a 32x8 block, no guard
    "tile_loop": """#define TILE 32
#define ROWS_PER 8
// @warpforge size W = 1024
// @warpforge size H = 768
// @warpforge arg odata: out float[W*H]
// @warpforge arg idata: in float[W*H]
// @warpforge arg width = W
// @warpforge arg height = H
// @warpforge launch grid=(W / TILE, H / TILE), block=(TILE, ROWS_PER)
__global__ void k(float *odata, float *idata, int width, int height)
{
    int xIndex = blockIdx.x * TILE + threadIdx.x;
    int yIndex = blockIdx.y * TILE + threadIdx.y;
    int index_in  = xIndex + width * yIndex;
    int index_out = yIndex + height * xIndex;
    for (int i = 0; i < TILE; i += ROWS_PER) {
        odata[index_out + i] = idata[index_in + i * width];
    }
}
""",
    # Rodinia kmeans' style: a thread per point, a loop over its features; the store is contiguous across threads,
    # the read strided by the feature count (the loop variable declared before the loop)
    "item_loop": """// @warpforge size P = 10007
// @warpforge size F = 34
// @warpforge arg input: in float[P*F]
// @warpforge arg output: out float[P*F]
// @warpforge arg npoints = P
// @warpforge arg nfeatures = F
// @warpforge launch grid=cdiv(P, 256), block=256
__global__ void k(float *input, float *output, int npoints, int nfeatures)
{
    int point_id = threadIdx.x + blockDim.x * blockIdx.x;
    int i;
    if (point_id < npoints) {
        for (i = 0; i < nfeatures; i++)
            output[point_id + npoints * i] = input[point_id * nfeatures + i];
    }
    return;
}
""",
    # the reverse: the read contiguous across threads, the store strided by the item count
    "item_loop_read_contiguous": """// @warpforge size P = 5003
// @warpforge size F = 70
// @warpforge arg src: in float[P*F]
// @warpforge arg dst: out float[P*F]
// @warpforge arg n = P
// @warpforge arg f = F
// @warpforge launch grid=cdiv(P, 128), block=128
__global__ void k(const float* src, float* dst, int n, int f)
{
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    for (int j = 0; j < f; ++j) {
        float v = src[j * n + p];
        dst[p * f + j] = v * v;
    }
}
""",
    # a flat index split into a row and a column by / and %
    "flat_div_mod": """// @warpforge size R = 999
// @warpforge size C = 333
// @warpforge arg out: out double[R*C]
// @warpforge arg in: in double[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R*C, 256), block=256
__global__ void k(double* out, const double* in, int rows, int cols) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < rows * cols) {
    int r = idx / cols;
    int c = idx % cols;
    out[c * rows + r] = in[idx];
  }
}
""",
}

#: name -> (source, words the decline must contain): none may be proposed
NOT_TRANSPOSES: dict[str, tuple[str, str]] = {
    # cuda-samples' copy kernel: the same tile loop, the store at the read's index
    "copy_tile_loop": (TRANSPOSES["tile_loop"].replace("odata[index_out + i] = idata[index_in + i * width];",
                                                       "odata[index_in + i * width] = idata[index_in + i * width];"),
                       "both contiguous in `xIndex`"),
    # llm.c's unpermute: a flat index decomposed in several levels; d_ is innermost in both the read and the store
    "unpermute_rows": ("""// @warpforge size B = 4
// @warpforge size N = 64
// @warpforge size NH = 12
// @warpforge size D = 64
// @warpforge arg inp: in float[B*N*NH*D]
// @warpforge arg out: out float[B*N*NH*D]
// @warpforge arg B = B
// @warpforge arg N = N
// @warpforge arg NH = NH
// @warpforge arg d = D
// @warpforge launch grid=cdiv(B*N*NH*D, 256), block=256
__global__ void k(const float* inp, float *out, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int b = idx / (NH * N * d);
        int rest = idx % (NH * N * d);
        int nh_ = rest / (N * d);
        rest = rest % (N * d);
        int n = rest / d;
        int d_ = rest % d;
        int other_idx = (b * NH * N * d) + (n * NH * d) + (nh_ * d) + d_;
        out[other_idx] = inp[idx];
    }
}
""", "contiguous"),
    # a plain copy on a 2-D grid
    "copy_2d": (_GRID2D.format(dst="out", src="in", t="float") +
                "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
                "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
                "  if (x < cols && y < rows) out[y * cols + x] = in[y * cols + x];\n}\n",
                "both contiguous in `x`"),
    # in place: another thread's store could come first
    "in_place": (_GRID2D.format(dst="out", src="in", t="float").replace("arg out: out", "arg out: inout") +
                 "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
                 "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
                 "  if (x < cols && y < rows) out[x * rows + y] = out[x * rows + y] + in[y * cols + x];\n}\n",
                 "which it writes"),
    # two arrays stored (llm.c's permute into q, k, v)
    "two_outputs": (_GRID2D.format(dst="out", src="in", t="float").replace(
        "// @warpforge arg rows", "// @warpforge arg out2: out float[R*C]\n// @warpforge arg rows") +
        "__global__ void k(float* out, const float* in, float* out2, int rows, int cols, float scale) {\n"
        "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "  if (x < cols && y < rows) {\n    out[x * rows + y] = in[y * cols + x];\n"
        "    out2[x * rows + y] = 2.0f * in[y * cols + x];\n  }\n}\n",
        "stores to 2 arrays"),
    # a tile loop whose step is not the block's extent: rows of the tile would be stored twice or skipped
    "tile_loop_wrong_step": (TRANSPOSES["tile_loop"].replace("i += ROWS_PER", "i += 4"),
                             "does not cover"),
    # nothing bounds the threads and the launch covers a size that is no multiple of the tile
    "unguarded_odd": (_GRID2D.format(dst="out", src="in", t="float") +
                      "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
                      "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
                      "  out[x * rows + y] = in[y * cols + x];\n}\n",
                      "not a multiple of 32"),
    # the thread coordinate used again in the value: the tile re-binds the threads
    "coordinate_in_value": (_GRID2D.format(dst="out", src="in", t="float") +
                            "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
                            "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
                            "  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
                            "  if (x < cols && y < rows) out[x * rows + y] = in[y * cols + x] + threadIdx.x;\n}\n",
                            "outside the index declarations"),
}

NOT_TRANSPOSES["tile_loop_row_in_value"] = (
    TRANSPOSES["tile_loop"].replace("odata[index_out + i] = idata[index_in + i * width];",
                                    "odata[index_out + i] = idata[index_in + i * width] + yIndex;"),
    "used besides the indices")
NOT_TRANSPOSES["read_before_guard"] = (
    _GRID2D.format(dst="out", src="in", t="float") +
    "__global__ void k(float* out, const float* in, int rows, int cols, float scale) {\n"
    "  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  float v = in[y * cols + x];\n  if (x < cols && y < rows) out[x * rows + y] = v;\n}\n",
    "is read before the exit")

# a batch of matrices, one per block index of z: the tile transposes each, the batch index kept
TRANSPOSES["batched_blockidx_z"] = """// @warpforge size R = 300
// @warpforge size C = 200
// @warpforge size NB = 3
// @warpforge arg out: out float[NB*R*C]
// @warpforge arg in: in float[NB*R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=(cdiv(C, 32), cdiv(R, 32), NB), block=(32, 32)
__global__ void k(float* out, const float* in, int rows, int cols) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int b = blockIdx.z;
  if (x < cols && y < rows) out[b * rows * cols + x * rows + y] = in[b * rows * cols + y * cols + x];
}
"""

# llm.c's 4-D permute: the innermost index moves (a transpose), but through a flat index of four parts
NOT_TRANSPOSES["permute_4d"] = ("""// @warpforge size D1 = 24
// @warpforge size D2 = 42
// @warpforge size D3 = 20
// @warpforge size D4 = 32
// @warpforge arg matrix: in float[D1*D2*D3*D4]
// @warpforge arg out_matrix: out float[D1*D2*D3*D4]
// @warpforge arg dim1 = D1
// @warpforge arg dim2 = D2
// @warpforge arg dim3 = D3
// @warpforge arg dim4 = D4
// @warpforge launch grid=cdiv(D1*D2*D3*D4, 256), block=256
__global__ void k(const float* matrix, float* out_matrix, int dim1, int dim2, int dim3, int dim4) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < dim1 * dim2 * dim3 * dim4) {
        int i1 = (idx / (dim2 * dim3 * dim4)) % dim1;
        int i2 = (idx / (dim3 * dim4)) % dim2;
        int i3 = (idx / dim4) % dim3;
        int i4 = idx % dim4;
        int permuted_idx = i4 * (dim3 * dim1 * dim2) + i3 * (dim1 * dim2) + i1 * dim2 + i2;
        out_matrix[permuted_idx] = matrix[idx];
    }
}
""", "a transpose of more than two dimensions")
