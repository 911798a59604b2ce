"""coarsen_y: several points per thread along y for 2D/3D one-thread-per-output kernels (issue 16).

CPU checks: where the analysis proposes it (kernels written here in other styles than the corpus: a box
filter with an early exit, a 3D guarded update with ``long`` indices, a gradient with a constant block
height), what the rewrite writes and that it builds with nvcc, and where it declines (threads that
communicate, a prelude the body writes, no bound on ``y``, a launch that does not cover the bound, ``y``
used after being re-assigned, ``blockIdx.y`` read elsewhere, a ``return`` inside a loop). The GPU check
that the variants compute what the originals compute is ``tests/test_rules_gpu.py`` (``stencil2d_5pt``,
``avgpool3x3_stride1_fp16``, ``conv2d_direct_nchw``, ``stencil3d_7pt_long``).
"""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from test_rules_structural import child, text_policy, variants
from warpforge.compiler.build import compile_cubin
from warpforge.cuda.extract import standalone

BOX = """\
// @warpforge size H = 1000
// @warpforge size W = 1024
// @warpforge arg src: in float[H*W]
// @warpforge arg dst: out float[H*W]
// @warpforge arg h = H
// @warpforge arg w = W
// @warpforge launch grid=(cdiv(W, 32), cdiv(H, 8)), block=(32, 8)
__global__ void k(const float* src, float* dst, int h, int w)
{{
{body}
}}
"""

BOX_BODY = """\
    const int col = threadIdx.x + blockDim.x * blockIdx.x;
    const int row = threadIdx.y + blockDim.y * blockIdx.y;
    if (row >= h || col >= w) return;
    float s = 0.f;
    for (int d = -1; d <= 1; ++d) {
        int r = min(max(row + d, 0), h - 1);
        s += src[r * w + col];
    }
    dst[row * w + col] = s * (1.f / 3.f);"""

VOL = """\
// @warpforge size D = 64
// @warpforge arg a: in double[D*D*D]
// @warpforge arg b: inout double[D*D*D]
// @warpforge arg n = D
// @warpforge launch grid=(cdiv(D, 16), cdiv(D, 4), D), block=(16, 4)
__global__ void k(const double* a, double* b, long n)
{
    long z = blockIdx.z;
    long y = blockIdx.y * (long)blockDim.y + threadIdx.y;
    long x = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (x < n && y < n) {
        long at = (z * n + y) * n + x;
        b[at] = 0.5 * b[at] + a[at];
    }
}
"""


def box(body: str, grid: str = "(cdiv(W, 32), cdiv(H, 8))") -> str:
    return BOX.format(body=body).replace("grid=(cdiv(W, 32), cdiv(H, 8))", f"grid={grid}")


def test_proposed_on_other_styles() -> None:
    pol = text_policy(box(BOX_BODY), "k")
    assert variants(pol, "coarsen_y") == ["y2", "y4"]
    c = child(pol, "coarsen_y", "y4")
    assert c.launch is not None and c.launch.grid == ("cdiv(W, 32)", "cdiv(cdiv(H, 8), 4)")
    d = c.definition
    assert "const int row = (blockIdx.y * 4 + wfy_c) * (blockDim.y) + threadIdx.y;" in d
    assert "if (row >= h || col >= w) continue;" in d and "return" not in d
    assert d.index("const int col") < d.index("for (int wfy_c")  # the prelude runs once
    vol = text_policy(VOL, "k")
    assert variants(vol, "coarsen_y") == ["y2", "y4"]
    assert "long y = (blockIdx.y * 2 + wfy_c) * ((long)blockDim.y) + threadIdx.y;" in \
        child(vol, "coarsen_y", "y2").definition


@needs_nvcc
@pytest.mark.parametrize("text", [box(BOX_BODY), VOL])
def test_variants_build(text: str) -> None:
    pol = text_policy(text, "k")
    for p in variants(pol, "coarsen_y"):
        tu = standalone(pol.source, pol.model, pol.kernel, definition=child(pol, "coarsen_y", p).definition)
        res = compile_cubin(tu, arch="sm_90", filename="fixture.cu")
        assert res.ok and res.resources_for("k") is not None, res.log[-2000:]


@pytest.mark.parametrize("body,grid", [
    # threads that communicate: a barrier and shared memory
    (BOX_BODY.replace("    float s = 0.f;", "    __shared__ float t[8][32];\n    t[threadIdx.y][threadIdx.x] = 0.f;\n"
                      "    __syncthreads();\n    float s = t[threadIdx.y][threadIdx.x];"), None),
    # an atomic accumulation across rows
    (BOX_BODY.replace("    dst[row * w + col] = s * (1.f / 3.f);", "    atomicAdd(&dst[col], s);"), None),
    # a prelude variable the body writes: the second point would start from the first one's value
    ("    float s = 0.f;\n" + BOX_BODY.replace("    float s = 0.f;\n", ""), None),
    # no bound on y: points past the original launch would not be excluded
    (BOX_BODY.replace("row >= h || ", ""), None),
    # a launch that does not cover the bound (a fixed grid height): rounding the grid up could overshoot
    (BOX_BODY, "(cdiv(W, 32), 3)"),
    # blockIdx.y read outside the index
    (BOX_BODY.replace("s * (1.f / 3.f)", "s * blockIdx.y"), None),
    # the index re-assigned
    (BOX_BODY.replace("const int row", "int row").replace("    float s = 0.f;", "    row = row;\n    float s = 0.f;"),
     None),
    # a return inside a loop ends the whole thread, not one point
    (BOX_BODY.replace("s += src[r * w + col];", "if (r < 0) return;\n        s += src[r * w + col];"), None),
])
def test_declines(body: str, grid: str | None) -> None:
    pol = text_policy(box(body, grid) if grid else box(body), "k")
    assert variants(pol, "coarsen_y") == []
