"""smem_padding: a ``__shared__`` array padded by bank words where the lanes of a warp collide in a bank.

CPU checks on kernels written here in several styles: a 32x32 transpose tile read by columns (padded to 33),
the same tile of doubles, a tile already padded and one only read along rows (no conflict: nothing proposed),
a 3-D tile, a 16-wide block whose half-warps read rows 128 floats apart (padded by 16 words), a flattened tile
``s[tx * 32 + ty]`` and a work-efficient scan (1-D: the index padded, ``i + (i >> 5)``), the scan over dynamic
shared memory (the launch's bytes enlarged), a conflict inside one row that padding cannot spread (declined,
not proposed everywhere); the declines in words (an array passed to a device function, an element address
kept in a pointer, a row cast to ``float4``, an async copy, a wmma load with its leading dimension, a
file-scope array, the 48 KB limit, an index with a side effect, an access inside a macro, two dynamic
arrays); WF105's fix family resolving to this rule (it is the rule the hint motivates first); and the variants
building with nvcc through the evaluator's build path. That they verify and are faster is
``tests/test_rules_smem_padding_gpu.py``.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc
from test_rules_structural import text_policy
from warpforge.compiler.build import compile_cubin
from warpforge.cuda.extract import standalone
from warpforge.policy.rules import REGISTRY, load
from warpforge.policy.rules._why import Note, Stage, furthest, recording
from warpforge.profile.hints import analyze_source

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

FAMILY = "smem_padding"

TRANSPOSE = """\
// @warpforge size N = 2048
// @warpforge arg in: in float[N*N]
// @warpforge arg out: out float[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(N / 32, N / 32), block=(32, 32)
__global__ void tr(const float* in, float* out, int n)
{
    __shared__ float tile[32][32];
    int x = blockIdx.x * 32 + threadIdx.x;
    int y = blockIdx.y * 32 + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = in[y * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    out[y * n + x] = tile[threadIdx.x][threadIdx.y];
}
"""

#: a tile of doubles, its size a macro, a block of 32x8 walking the tile in a loop
DTILE = """\
#define TD 32
// @warpforge size N = 1024
// @warpforge arg a: in double[N*N]
// @warpforge arg b: out double[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(N / TD, N / TD), block=(TD, 8)
__global__ void dtr(const double* __restrict__ a, double* __restrict__ b, int n)
{
    __shared__ double t[TD][TD];
    const int bx = blockIdx.x * TD, by = blockIdx.y * TD;
    for (int r = threadIdx.y; r < TD; r += 8)
        t[r][threadIdx.x] = a[(size_t)(by + r) * n + bx + threadIdx.x];
    __syncthreads();
    for (int r = threadIdx.y; r < TD; r += 8)
        b[(size_t)(bx + r) * n + by + threadIdx.x] = 2.0 * t[threadIdx.x][r];
}
"""

#: a 3-D tile: two planes of 32 x 32, each read along columns
CUBE = """\
// @warpforge size N = 64
// @warpforge arg v: in float[N*N*N]
// @warpforge arg o: out float[N*N*N]
// @warpforge launch grid=(N / 32, N / 32, N / 2), block=(32, 32)
__global__ void cube(const float* v, float* o)
{
    __shared__ float c[2][32][32];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int z = 0; z < 2; z++)
        c[z][threadIdx.y][threadIdx.x] = v[((blockIdx.z * 2 + z) * 64 + y) * 64 + x];
    __syncthreads();
    for (int z = 0; z < 2; z++) {
        float s = c[z][threadIdx.x][threadIdx.y] + c[1 - z][threadIdx.y][threadIdx.x];
        o[((blockIdx.z * 2 + z) * 64 + y) * 64 + x] = s;
    }
}
"""

#: a 16-wide block: the two half-warps of a warp read rows 128 floats apart, the same banks; one word of padding
#: shifts the second half by one bank only, sixteen words spread it over the other half of the banks
HALF_ROWS = """\
// @warpforge size W = 4096
// @warpforge size H = 1024
// @warpforge arg src: in float[H*W]
// @warpforge arg dst: out float[H*W]
// @warpforge arg w = W
// @warpforge launch grid=(W / 128, H / 4), block=(16, 4)
__global__ void rows(const float* src, float* dst, int w)
{
    __shared__ float s[4][128];
    const int y = blockIdx.y * 4 + threadIdx.y, x0 = blockIdx.x * 128;
    for (int i = 0; i < 8; i++)
        s[threadIdx.y][threadIdx.x + 16 * i] = src[y * w + x0 + threadIdx.x + 16 * i];
    __syncthreads();
    for (int i = 1; i < 7; i++)
        dst[y * w + x0 + threadIdx.x + 16 * i] = s[threadIdx.y][threadIdx.x + 16 * i - 1] + s[threadIdx.y][16 * i];
}
"""

#: a flattened 32x32 tile written by rows, read by columns
FLAT = """\
// @warpforge size N = 2048
// @warpforge arg in: in float[N*N]
// @warpforge arg out: out float[N*N]
// @warpforge arg n = N
// @warpforge launch grid=(N / 32, N / 32), block=(32, 32)
__global__ void tf(const float* in, float* out, int n)
{
    __shared__ float s[32 * 32];
    int tx = threadIdx.x, ty = threadIdx.y;
    s[ty * 32 + tx] = in[(blockIdx.y * 32 + ty) * n + blockIdx.x * 32 + tx];
    __syncthreads();
    out[(blockIdx.x * 32 + ty) * n + blockIdx.y * 32 + tx] = s[tx * 32 + ty];
}
"""

#: a work-efficient (Blelloch) exclusive scan of one block: up-sweep and down-sweep trees
SCAN = """\
// @warpforge size N = 1024
// @warpforge arg g_odata: out float[N]
// @warpforge arg g_idata: in float[N]
// @warpforge arg n = N
// @warpforge launch grid=(1), block=(N / 2)
__global__ void prescan(float* g_odata, const float* g_idata, int n)
{
    __shared__ float temp[1024];
    int thid = threadIdx.x;
    int offset = 1;
    temp[2 * thid] = g_idata[2 * thid];
    temp[2 * thid + 1] = g_idata[2 * thid + 1];
    for (int d = n >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (thid < d) {
            int ai = offset * (2 * thid + 1) - 1;
            int bi = offset * (2 * thid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset *= 2;
    }
    if (thid == 0) temp[n - 1] = 0;
    for (int d = 1; d < n; d *= 2) {
        offset >>= 1;
        __syncthreads();
        if (thid < d) {
            int ai = offset * (2 * thid + 1) - 1;
            int bi = offset * (2 * thid + 2) - 1;
            float t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    g_odata[2 * thid] = temp[2 * thid];
    g_odata[2 * thid + 1] = temp[2 * thid + 1];
}
"""

DYN_SCAN = SCAN.replace("block=(N / 2)", "block=(N / 2), smem=N * sizeof(float)").replace(
    "__shared__ float temp[1024];", "extern __shared__ float temp[];")

FIXTURES = {"tr": TRANSPOSE, "dtr": DTILE, "cube": CUBE, "tf": FLAT, "prescan": SCAN, "rows": HALF_ROWS}


def asked(text: str, kernel: str) -> tuple[list[str], Note | None]:
    """The rule's variants for the kernel and, when it has none, the note that got furthest."""
    load()
    pol = text_policy(text, kernel)
    with recording() as notes:
        got = REGISTRY[FAMILY].variants(pol.context(pol.root_candidate()))
    return got, furthest(notes)


def padded(text: str, kernel: str) -> tuple[str, str, str | None]:
    """The child's definition, rationale and launch shared-memory bytes."""
    load()
    pol = text_policy(text, kernel)
    c = REGISTRY[FAMILY].apply(pol.context(pol.root_candidate()), "pad")
    assert c is not None and c.steps == ("smem_padding:pad",)
    return c.definition, c.rationale, c.smem


def test_transpose_tile_padded_to_33() -> None:
    assert asked(TRANSPOSE, "tr")[0] == ["pad"]
    d, why, smem = padded(TRANSPOSE, "tr")
    assert "__shared__ float tile[32][33];" in d and smem is None
    # only the declaration changes: the subscripts keep their meaning
    assert d.replace("tile[32][33]", "tile[32][32]") == TRANSPOSE.split("\n", 5)[5].rstrip()
    assert "32-way -> 1-way" in why


def test_double_tile_padded_by_one_element() -> None:
    """Eight-byte elements: one element (two words) moves each lane of a 16-lane phase to its own pair of banks;
    the size as written (a macro) is kept."""
    d, why, _ = padded(DTILE, "dtr")
    assert "__shared__ double t[TD][TD + 1];" in d and "16-way -> 1-way" in why


def test_three_d_tile_pads_its_rows() -> None:
    d, _, _ = padded(CUBE, "cube")
    assert "__shared__ float c[2][32][33];" in d


def test_half_warp_rows_padded_by_sixteen_words() -> None:
    d, why, _ = padded(HALF_ROWS, "rows")
    assert "__shared__ float s[4][144];" in d and "2-way -> 1-way" in why


@pytest.mark.parametrize("text", [
    TRANSPOSE.replace("tile[32][32]", "tile[32][33]"),  # padded already
    TRANSPOSE.replace("tile[threadIdx.x][threadIdx.y]", "tile[threadIdx.y][threadIdx.x]"),  # rows only
])
def test_no_conflict_no_proposal(text: str) -> None:
    got, note = asked(text, "tr")
    assert got == [] and note is not None and note.stage == Stage.SCOPE
    assert "no shared-memory access has a bank conflict" in note.reason


def test_flattened_tile_index_padded() -> None:
    d, why, _ = padded(FLAT, "tf")
    assert "__shared__ float s[1055];" in d  # 1024 + 31 rows' padding
    assert "s[ty * 32 + tx + ((ty * 32 + tx) >> 5)]" in d and "s[tx * 32 + ty + ((tx * 32 + ty) >> 5)]" in d
    assert "32-way -> 1-way" in why


def test_scan_tree_index_padded_everywhere() -> None:
    d, why, _ = padded(SCAN, "prescan")
    assert "__shared__ float temp[1055];" in d
    uses = re.findall(r"temp\[([^\]]*)\]", d.split("temp[1055];")[1])
    assert len(uses) == 11 and all(u.endswith(">> 5)") for u in uses), uses
    assert "temp[bi + (bi >> 5)] += temp[ai + (ai >> 5)];" in d and "temp[n - 1 + ((n - 1) >> 5)] = 0;" in d
    before, after = (float(x) for x in re.findall(r"([\d.]+)-way", why))
    assert before >= 8 and after < 2


def test_dynamic_scan_enlarges_the_launch() -> None:
    d, _, smem = padded(DYN_SCAN, "prescan")
    assert "extern __shared__ float temp[];" in d and "temp[ai + (ai >> 5)]" in d
    assert smem is not None
    pol = text_policy(DYN_SCAN, "prescan")
    env = {"N": 1024}
    from warpforge.spec.expr import parse
    assert parse(smem.replace("sizeof(float)", "4")).evaluate(env) == 4 * (1024 + 1023 // 32)
    assert pol.spec.launch.smem.replace(" ", "") == "N*sizeof(float)"


def test_conflict_inside_a_row_is_not_padded() -> None:
    """``tile[ty][2 * tx]``: the lanes collide inside one row; longer rows spread nothing, so no proposal."""
    text = TRANSPOSE.replace("tile[32][32]", "tile[32][64]").replace(
        "out[y * n + x] = tile[threadIdx.x][threadIdx.y];", "out[y * n + x] = tile[threadIdx.y][2 * threadIdx.x];")
    got, note = asked(text, "tr")
    assert got == [] and note is not None and "does not spread the lanes" in note.reason


DEVICE_FN = "__device__ float corner(float (*t)[32]) { return t[0][0]; }\n" + TRANSPOSE.replace(
    "out[y * n + x] = tile[threadIdx.x][threadIdx.y];",
    "out[y * n + x] = tile[threadIdx.x][threadIdx.y] + corner(tile);")

WMMA = "#include <mma.h>\nusing namespace nvcuda;\n" + TRANSPOSE.replace(
    "__syncthreads();\n", "__syncthreads();\n    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> f;\n"
    "    wmma::load_matrix_sync(f, (half*)&tile[0][0], 32);\n")


@pytest.mark.parametrize("text,kernel,words", [
    (DEVICE_FN, "tr", "passed to `corner`"),
    (TRANSPOSE.replace("out[y * n + x] = tile[threadIdx.x][threadIdx.y];",
                       "float* p = &tile[0][0] + threadIdx.y;\n    out[y * n + x] = tile[threadIdx.x][0] + *p;"),
     "tr", "pointer arithmetic on `tile`"),
    (TRANSPOSE.replace("out[y * n + x] = tile[threadIdx.x][threadIdx.y];",
                       "out[y * n + x] = tile[threadIdx.x][threadIdx.y] + reinterpret_cast<float4*>(tile[1])[0].x;"),
     "tr", "takes a row of `tile`"),
    (TRANSPOSE.replace("tile[threadIdx.y][threadIdx.x] = in[y * n + x];",
                       "__pipeline_memcpy_async(&tile[threadIdx.y][threadIdx.x], &in[y * n + x], 4);"),
     "tr", "asynchronous copy"),
    (WMMA, "tr", "leading dimension"),
    ("__shared__ float tile[32][32];\n" + TRANSPOSE.replace("    __shared__ float tile[32][32];\n", ""), "tr",
     "file scope"),
    (TRANSPOSE.replace("tile[32][32];", "tile[32][32];\n    __shared__ float big[96][128];\n    big[threadIdx.y]"
                       "[threadIdx.x] = 0.f;"), "tr", "48 KB"),
    (SCAN.replace("temp[bi] += temp[ai];", "temp[bi] += temp[ai++];"), "prescan", "side effect"),
    # an access hidden in a macro: the kernel's text has no subscript of it to pad
    ("#define AT(i) temp[(i)]\n" + SCAN.replace("temp[bi] += temp[ai];", "AT(bi) += AT(ai);"), "prescan",
     "inside the macro `AT`"),
    (DYN_SCAN.replace("extern __shared__ float temp[];", "extern __shared__ float temp[];\n"
                      "    extern __shared__ int flags[];\n    flags[thid] = 0;"), "prescan", "2 `extern __shared__`"),
])
def test_declines_in_words(text: str, kernel: str, words: str) -> None:
    got, note = asked(text, kernel)
    assert got == [], text
    assert note is not None and words in note.reason, note
    assert note.stage in (Stage.LEGALITY, Stage.LAUNCH)


def test_wf105_motivates_padding_first() -> None:
    """WF105's fix family is this rule: the offline policy orders it before every rule no finding motivates."""
    report = analyze_source("fixture.cu", TRANSPOSE, use_compiler=False, merge=False)
    wf105 = [f for f in report.findings if f.code == "WF105"]
    assert wf105 and {f.action for f in wf105} == {FAMILY}
    load()
    assert FAMILY in REGISTRY and REGISTRY[FAMILY].structural
    assert not any("WF105" in r.motivated_by for f, r in REGISTRY.items() if f != FAMILY)
    pol = text_policy(TRANSPOSE, "tr")
    pol.findings = tuple(wf105)
    ordered = pol._ordered(list(REGISTRY.values()), {})
    assert ordered[0].family == FAMILY


def test_offline_policy_proposes_replays_and_does_not_stack() -> None:
    load()
    pol = text_policy(TRANSPOSE, "tr")
    pol.families = {FAMILY, "unroll"}
    kids = pol.propose_sync(pol.root_candidate())
    pad = [c for c in kids if c.family == FAMILY]
    assert len(pad) == 1 and not pol.errors
    again = pol.replay(pol.root_candidate(), pad[0].steps)
    assert again is not None and again.hash == pad[0].hash
    assert REGISTRY[FAMILY].variants(pol.context(pad[0])) == []


@needs_nvcc
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_variant_builds(name: str) -> None:
    pol = text_policy(FIXTURES[name], name)
    d, _, _ = padded(FIXTURES[name], name)
    tu = standalone(pol.source, pol.model, pol.kernel, definition=d)
    res = compile_cubin(tu, arch="sm_90", filename="fixture.cu")
    assert res.ok and res.resources_for(name) is not None, res.log[-2000:]


@needs_nvcc
@pytest.mark.parametrize("name,text", [("tr", TRANSPOSE), ("prescan", DYN_SCAN)])
def test_passes_the_evaluators_build_path(tmp_path: Path, name: str, text: str) -> None:
    """Proposed by the offline policy as ``warpforge optimize`` builds it: guards, the launch at both sizes
    (the dynamic scan's enlarged shared memory included), translation unit and nvcc."""
    path = tmp_path / f"{name}.cu"
    path.write_text(textwrap.dedent(text))
    res = ca.check_case(path, families=[FAMILY])
    assert not res.error and res.applicable == [FAMILY], (res.error, res.families)
