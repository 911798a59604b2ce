"""smem_halo: a block's input tile plus halo staged in shared memory for neighbourhood reads (issue 16).

CPU checks on kernels written here in other styles than the corpus (a guarded 3x3 blur over a pitched
image with ``size_t`` indices and window loops, a template central-difference gradient with an early
exit, an in-plane heat step over planes in ``blockIdx.z`` whose plane-above/below reads cannot be staged, a
27-point box on 3D blocks whose plane offsets are staged as a third tile dimension):
what the analysis stages and what the rewrite writes, that the children build with nvcc and get through
the evaluator's pre-GPU steps, and where it declines (an in-place stencil, a written view, a gather, a
window wider than the radius limit, a window whose size is a runtime parameter, shared memory and
barriers already there, only the thread's own element read, a loop variable the loop body writes, clamped,
periodic or halved coordinates, a re-assigned pitch parameter, a buffer extent the kernel's parameters
cannot express). That the variants compute what the originals compute is checked on the GPU by
``tests/test_rules_gpu.py`` (``stencil2d_5pt``, ``avgpool3x3_stride1_fp16``, ``stencil3d_7pt_long``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc
from test_rules_structural import child, text_policy, variants
from warpforge.compiler.build import compile_cubin
from warpforge.cuda.extract import standalone

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

BLUR = """\
// @warpforge size H = 500
// @warpforge size W = 700
// @warpforge size P = 704
// @warpforge arg img: in float[H*P]
// @warpforge arg res: out float[H*P]
// @warpforge arg h = H
// @warpforge arg w = W
// @warpforge arg pitch = P
// @warpforge launch grid=(cdiv(W, 16), cdiv(H, 16)), block=(16, 16)
__global__ void blur3(const float* __restrict__ img, float* __restrict__ res, int h, int w, int pitch)
{
    int c = threadIdx.x + blockIdx.x * blockDim.x;
    int r = threadIdx.y + blockIdx.y * blockDim.y;
    if (c < w && r < h) {
        float acc = 0.f;
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) {
                int rr = r + i - 1, cc = c + j - 1;
                if (rr >= 0 && rr < h && cc >= 0 && cc < w)
                    acc += img[(size_t)rr * pitch + cc];
            }
        }
        res[(size_t)r * pitch + c] = acc * (1.f / 9.f);
    }
}
"""

GRAD = """\
// @warpforge size N = 1000
// @warpforge arg u: in double[N*N]
// @warpforge arg g: out double[N*N]
// @warpforge arg n = N
// @warpforge template T = double
// @warpforge launch grid=(cdiv(N, 32), cdiv(N, 4)), block=(32, 4)
template <typename T>
__global__ void grad(const T* u, T* g, int n)
{
    const int ix = blockDim.x * blockIdx.x + threadIdx.x;
    const int iy = blockDim.y * blockIdx.y + threadIdx.y;
    if (ix < 1 || iy < 1 || ix >= n - 1 || iy >= n - 1) return;
    const int at = iy * n + ix;
    g[at] = (u[at + 1] - u[at - 1]) * T(0.5) + (u[at + n] - u[at - n]) * T(0.5);
}
"""

HEAT = """\
// @warpforge size D = 96
// @warpforge arg t0: in float[D*D*D]
// @warpforge arg t1: out float[D*D*D]
// @warpforge arg d = D
// @warpforge arg k = 0.1
// @warpforge launch grid=(cdiv(D, 32), cdiv(D, 8), D), block=(32, 8)
__global__ void heat(const float* t0, float* t1, long d, float k)
{
    long x = blockIdx.x * (long)blockDim.x + threadIdx.x;
    long y = blockIdx.y * (long)blockDim.y + threadIdx.y;
    long z = blockIdx.z;
    if (x > 0 && y > 0 && z > 0 && x < d - 1 && y < d - 1 && z < d - 1) {
        long s = d * d;
        long at = z * s + y * d + x;
        float lap = t0[at - 1] + t0[at + 1] + t0[at - d] + t0[at + d] + t0[at - s] + t0[at + s] - 6.f * t0[at];
        t1[at] = t0[at] + k * lap;
    }
}
"""

BOX27 = """\
// @warpforge size D = 80
// @warpforge arg v: in float[D*D*D]
// @warpforge arg o: out float[D*D*D]
// @warpforge arg d = D
// @warpforge launch grid=(cdiv(D, 16), cdiv(D, 4), cdiv(D, 4)), block=(16, 4, 4)
__global__ void box27(const float* v, float* o, int d)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= d || y >= d || z >= d) return;
    float s = 0.f;
    for (int c = -1; c <= 1; ++c)
        for (int b = -1; b <= 1; ++b)
            for (int a = -1; a <= 1; ++a) {
                int zz = z + c, yy = y + b, xx = x + a;
                if (zz >= 0 && zz < d && yy >= 0 && yy < d && xx >= 0 && xx < d)
                    s += v[(zz * d + yy) * d + xx];
            }
    o[(z * d + y) * d + x] = s / 27.f;
}
"""

FIXTURES = {"blur3": BLUR, "grad": GRAD, "heat": HEAT, "box27": BOX27}


def tile_reads(definition: str) -> int:
    return len(re.findall(r"wfh_tile(?:\[threadIdx\.z\])?\[threadIdx\.y", definition))


def test_stages_window_reads_of_a_pitched_image() -> None:
    pol = text_policy(BLUR, "blur3")
    assert variants(pol, "smem_halo") == ["tile"]
    d = child(pol, "smem_halo", "tile").definition
    assert "__shared__ float wfh_tile[18][18];" in d  # 16x16 block, rows and columns -1..+1
    assert "acc += img[" not in d and "acc += wfh_tile[threadIdx.y + (i - 1) + 1][threadIdx.x + (j - 1) + 1];" in d
    # the tile load and the barrier run before the bound check, so every thread of the block reaches it
    assert d.index("__syncthreads();") < d.index("int c = threadIdx.x") < d.index("if (c < w && r < h)")
    # elements are loaded only inside the buffer's extent, written in the kernel's parameters
    assert "wfh_g < ((long long)(h)*(long long)(pitch))" in d
    assert "(long long)(pitch)" in d.split("const long long wfh_g =")[1].split(";")[0]


def test_template_early_exit_and_unstageable_plane_reads() -> None:
    pol = text_policy(GRAD, "grad")
    assert variants(pol, "smem_halo") == ["tile"]
    d = child(pol, "smem_halo", "tile").definition
    assert "__shared__ T wfh_tile[6][34];" in d and tile_reads(d) == 4 and "u[" not in d.split("__syncthreads")[1]
    heat = text_policy(HEAT, "heat")
    d = child(heat, "smem_halo", "tile").definition
    # the five in-plane reads come from the tile; a plane above or below is not in it and stays global
    assert tile_reads(d) == 6 and "t0[at - s]" in d and "t0[at + s]" in d
    assert "__shared__ float wfh_tile[10][34];" in d


def test_three_d_block_stages_planes_too() -> None:
    """On a 3D block the plane pitch (the coefficient of ``threadIdx.z``) is a third tile dimension: the
    27-point window's plane offsets come from the tile as well."""
    d = child(text_policy(BOX27, "box27"), "smem_halo", "tile").definition
    assert "__shared__ float wfh_tile[6][6][18];" in d
    assert "s += wfh_tile[threadIdx.z + (c) + 1][threadIdx.y + (b) + 1][threadIdx.x + (a) + 1];" in d
    assert "(threadIdx.z * 4 + threadIdx.y) * 16 + threadIdx.x" in d and "wfh_i += 256" in d


@needs_nvcc
@pytest.mark.parametrize("name", ["blur3", "heat", "box27"])  # the template is built instantiated, below
def test_variant_builds(name: str) -> None:
    pol = text_policy(FIXTURES[name], name)
    tu = standalone(pol.source, pol.model, pol.kernel, definition=child(pol, "smem_halo", "tile").definition)
    res = compile_cubin(tu, arch="sm_90", filename="fixture.cu")
    assert res.ok and res.resources_for(name) is not None, res.log[-2000:]


@needs_nvcc
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_passes_the_evaluators_build_path(tmp_path: Path, name: str) -> None:
    """Proposed by the offline policy as ``warpforge optimize`` builds it, through guards, launches at both
    sizes, translation unit and nvcc (the CPU half of the evaluator)."""
    path = tmp_path / f"{name}.cu"
    path.write_text(FIXTURES[name])
    res = ca.check_case(path, families=["smem_halo"])
    assert not res.error and res.applicable == ["smem_halo"], (res.error, res.families)


@pytest.mark.parametrize("text,name", [
    # an in-place stencil: the buffer is written by the kernel (neighbours would read updated values)
    (BLUR.replace("arg img: in", "arg img: inout").replace("const float* __restrict__ img", "float* img")
     .replace("res[(size_t)r * pitch + c] = acc", "img[(size_t)r * pitch + c] = acc"), "blur3"),
    # written through a view of the buffer the spec calls read-only
    (GRAD.replace("g[at] =", "T* w = (T*)u;\n    w[at] = g[at] +"), "grad"),
    # a gather: offsets read from memory, not constants
    (BLUR.replace("// @warpforge arg h = H", "// @warpforge arg off: in int[9]\n// @warpforge arg h = H")
     .replace("int h, int w", "const int* off, int h, int w")
     .replace("img[(size_t)rr * pitch + cc]", "img[(size_t)rr * pitch + cc + off[i * 3 + j]]"), "blur3"),
    # a 13x13 window: wider than the radius limit
    (BLUR.replace("i < 3", "i < 13").replace("j < 3", "j < 13").replace("i - 1", "i - 6").replace("j - 1", "j - 6"),
     "blur3"),
    # a window whose radius is a runtime parameter: the tile size is not known
    (BLUR.replace("// @warpforge arg pitch = P", "// @warpforge arg pitch = P\n// @warpforge arg rad = 1")
     .replace("int pitch)", "int pitch, int rad)").replace("i = 0; i < 3", "i = -rad; i <= rad")
     .replace("r + i - 1", "r + i"), "blur3"),
    # shared memory and a barrier already there
    (GRAD.replace("    const int at", "    __shared__ int flag;\n    if (threadIdx.x == 0) flag = 1;\n"
                  "    __syncthreads();\n    const int at"), "grad"),
    # each thread reads only its own element: nothing is shared between threads
    (GRAD.replace("(u[at + 1] - u[at - 1]) * T(0.5) + (u[at + n] - u[at - n]) * T(0.5)", "u[at] * T(2)"), "grad"),
    # a loop variable the loop body moves: the offsets are not the loop's range
    (BLUR.replace("int rr = r + i - 1", "j += (acc > 0.f);\n                int rr = r + i - 1"), "blur3"),
    # clamped coordinates (replicate padding): a neighbour's row is not the thread's row plus the loop offset
    (BLUR.replace("acc += img[(size_t)rr * pitch + cc]",
                  "acc += img[(size_t)min(max(rr, 0), h - 1) * pitch + min(max(cc, 0), w - 1)]"), "blur3"),
    # periodic wrap-around: the offset depends on the thread's position
    (BLUR.replace("acc += img[(size_t)rr * pitch + cc]", "acc += img[(size_t)((rr + h) % h) * pitch + (cc + w) % w]"),
     "blur3"),
    # a row at half the thread's coordinate (an upsampling read): neighbours are not one pitch apart
    (BLUR.replace("acc += img[(size_t)rr * pitch + cc]", "acc += img[(size_t)(rr / 2) * pitch + cc]"), "blur3"),
    # the pitch parameter re-assigned in the body: the tile, computed first, would use another value
    (BLUR.replace("    int c = threadIdx.x", "    if (pitch < w) pitch = w;\n    int c = threadIdx.x"), "blur3"),
    # the buffer's extent names a size no scalar parameter carries: the load could not bound itself
    (BLUR.replace("// @warpforge size P = 704", "// @warpforge size P = 704\n// @warpforge size E = 7")
     .replace("arg img: in float[H*P]", "arg img: in float[H*P+E]"), "blur3"),
])
def test_declines(text: str, name: str) -> None:
    assert variants(text_policy(text, name), "smem_halo") == []
