"""stride_reduce on full reductions written in styles the corpus does not hold, and the near misses where
re-dealing the elements among threads would change what is summed (or sum what may not be reordered).
Each kernel goes through the offline policy, so the rule sees it as a search does (canonical form included);
the variants that are proposed are also compiled with nvcc. GPU verification: tests/test_rules_gpu.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import needs_nvcc, text_policy
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone

SPEC = """// @warpforge size N = 1 << 24
// @warpforge arg x: in float[N] uniform(0, 1)
// @warpforge arg w: in float[N] uniform(0, 1)
// @warpforge arg total: inout float[1] zeros
// @warpforge arg n = N
// @warpforge arg chunk = 32
// @warpforge launch grid={grid}, block={block}
// @warpforge tol rtol=1e-3 atol=1e-2
__global__ void k(const float* x, const float* w, float* total, int n, int chunk)
"""
COVERING = "cdiv(N, 128 * 32)"

#: a chunk per thread clamped with min(), guard written as a guarded body (the canonical form sees an exit)
CHUNK_MIN = """{
    const unsigned gid = threadIdx.x + blockDim.x * blockIdx.x;
    int lo = gid * chunk;
    if (lo < n) {
        const int hi = min(lo + chunk, n);
        float acc = 0.0f;
        for (int j = lo; j < hi; ++j) {
            acc = acc + fabsf(x[j] - w[j]);
        }
        atomicAdd(&total[0], acc);
    }
}
"""
#: a grid-stride sum of squares with the stride written the other way round
STRIDE = """{
    float acc = 0.0f;
    for (int j = threadIdx.x + blockIdx.x * blockDim.x; j < n; j += gridDim.x * blockDim.x)
        acc += x[j] * x[j];
    atomicAdd(total, acc);
}
"""


def kernel(body: str, grid: str = COVERING, block: str = "128") -> str:
    return SPEC.format(grid=grid, block=block) + body


def proposals(text: str) -> list[Candidate]:
    pol = text_policy(text, "k")
    out = pol.propose_sync(pol.root_candidate())
    assert not pol.errors, pol.errors
    return out


def strided(text: str) -> dict[str, Candidate]:
    return {c.steps[-1]: c for c in proposals(text) if c.family == "stride_reduce"}


def _builds(text: str, cand: Candidate, tmp: Path) -> None:
    model = parse(SourceText(text).data)
    (k,) = model.kernels
    tu = standalone(SourceText(text), model, k, definition=cand.definition, filename="k.cu")
    src = tmp / "k.cu"
    src.write_text(tu)
    res = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp / "k.cubin"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


def test_clamped_chunks_are_dealt_as_a_grid_stride_with_four_partials() -> None:
    got = strided(kernel(CHUNK_MIN))
    assert set(got) == {"stride_reduce:x4", "stride_reduce:x4sm"}
    keep, sized = got["stride_reduce:x4"].source, got["stride_reduce:x4sm"].source
    # the launch kept: the range is what the launch's chunks covered, clamped to n
    assert ("const long long wfs_u = wfs_T * (long long)(chunk) < (long long)(n) ? wfs_T * (long long)(chunk) "
            ": (long long)(n);") in keep
    assert "const int j = (int)(wfs_i + 3 * wfs_T);" in keep and "wfs_s3 += fabsf(x[j] - w[j]);" in keep
    assert "atomicAdd(&total[0], wfs_v);  // one atomic per block" in keep
    assert got["stride_reduce:x4"].launch is None
    # the spec's grid covers n at both sizes, so a grid sized to the GPU (132 SMs x 16 blocks of 128) sums [0, n)
    assert "const long long wfs_u = (long long)(n);" in sized
    lo = got["stride_reduce:x4sm"].launch
    assert lo is not None and lo.grid == (f"min({COVERING}, 2112)",)


def test_a_grid_stride_sum_keeps_its_range_and_gets_partials() -> None:
    got = strided(kernel(STRIDE, grid="8192"))
    assert set(got) == {"stride_reduce:x4", "stride_reduce:x4sm"}
    src = got["stride_reduce:x4"].source
    assert "const long long wfs_u = (long long)(n);" in src and "wfs_s1 += x[j] * x[j];" in src
    # a launch no larger than the GPU holds at once is not re-sized
    assert set(strided(kernel(STRIDE, grid="1024"))) == {"stride_reduce:x4"}


def test_chunks_that_do_not_reach_n_keep_the_launch_only() -> None:
    # 64 blocks x 128 threads x 32 elements cover 2^18 of the 2^24 elements: the sum is of that prefix,
    # which only the original thread count reproduces
    got = strided(kernel(CHUNK_MIN, grid="64"))
    assert set(got) == {"stride_reduce:x4"}


CHUNK_CLAMP = """{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int start = t * chunk;
    int end = start + chunk;
    if (end > n) end = n;
    float s = 0.0f;
    for (int i = start; i < end; i++)
        s += {term};
    atomicAdd(total, s);
}
"""


@pytest.mark.parametrize("why,body", [
    ("the term reads the buffer the atomic writes", CHUNK_CLAMP.replace("{term}", "x[i] * total[0]")),
    ("the term depends on the thread, not only on the element", CHUNK_CLAMP.replace("{term}", "x[i] * t")),
    ("the term reads another local", CHUNK_CLAMP.replace("{term}", "x[i] * end")),
    ("a running maximum, not a sum", CHUNK_CLAMP.replace("s += {term};", "s = fmaxf(s, x[i]);")),
    ("a decaying recurrence, not a reduction", CHUNK_CLAMP.replace("s += {term};", "s = 0.5f * s + x[i];")),
    ("the partial starts from an element", CHUNK_CLAMP.replace("float s = 0.0f;", "float s = x[0];")
     .replace("{term}", "x[i]")),
    ("every other element: chunks overlap nothing but leave holes",
     CHUNK_CLAMP.replace("i++", "i += 2").replace("{term}", "x[i]")),
    ("chunks of K + 1 elements overlap their neighbours",
     CHUNK_CLAMP.replace("int end = start + chunk;", "int end = start + chunk + 1;").replace("{term}", "x[i]")),
    ("a per-thread target", CHUNK_CLAMP.replace("atomicAdd(total, s);", "atomicAdd(&total[t % 1], s);")
     .replace("{term}", "x[i]")),
    ("a per-block target: re-dealt elements would land in other blocks' totals",
     CHUNK_CLAMP.replace("atomicAdd(total, s);", "atomicAdd(&total[blockIdx.x % 1], s);").replace("{term}", "x[i]")),
    ("an exit that does not follow from the clamp",
     CHUNK_CLAMP.replace("int end", "if (t >= 1000) return;\n    int end").replace("{term}", "x[i]")),
    ("a second memory write", CHUNK_CLAMP.replace("float s = 0.0f;", "float s = 0.0f;\n    (void)w;")
     .replace("atomicAdd(total, s);", "atomicAdd(total, s);\n    total[0] = 1.0f;").replace("{term}", "x[i]")),
    ("an atomic maximum is not a sum", CHUNK_CLAMP.replace("atomicAdd(total, s)", "atomicMax((int*)total, (int)s)")
     .replace("{term}", "x[i]")),
])
def test_stride_reduce_declines_near_misses(why: str, body: str) -> None:
    assert "stride_reduce" not in {c.family for c in proposals(kernel(body))}, why


def test_stride_reduce_needs_whole_warps_and_a_one_dimensional_launch() -> None:
    ok = CHUNK_CLAMP.replace("{term}", "x[i]")
    assert strided(kernel(ok))
    assert not strided(kernel(ok, block="96 + 4"))  # a partial warp would miss the shuffles' full mask
    assert not strided(kernel(ok, block="(32, 4)"))  # t would repeat across threadIdx.y


@needs_nvcc
def test_stride_reduce_variants_build(tmp_path: Path) -> None:
    texts = (kernel(CHUNK_MIN), kernel(STRIDE, grid="8192"), kernel(CHUNK_CLAMP.replace("{term}", "x[i]")))
    for n, text in enumerate(texts):
        got = strided(text)
        assert got
        for name, cand in got.items():
            where = tmp_path / f"{n}_{name.replace(':', '_')}"
            where.mkdir()
            _builds(text, cand, where)
