"""The wide yardstick's tooling (``benchmarks/wide``) on a small self-written project, on CPU.

The yardstick itself runs on other people's code kept outside the repository; CI has none of it, so this
checks the tool's behaviour on kernels written here, in the styles the funnel must tell apart: an
elementwise kernel (no serial loop: outside the denominator), a row sum with a serial loop (warp per row
proposes, and the child builds with nvcc), a tree reduction in shared memory, and a kernel in a header whose
only launch is in another file (its spec comes from that host file). The GPU sample's folder is written
from the funnel's records and each unit's spec reads back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc

sys.path.insert(0, str(ROOT))

from benchmarks.wide import funnel, sample
from benchmarks.wide.classify import classify

KERNELS = r"""
#include <cuda_runtime.h>
#define BLOCK 256

__global__ void scale(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

__global__ void row_sum(float* out, const float* in, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += in[r * cols + j];
    out[r] = s;
}

__global__ void block_sum(float* out, const float* in, int n) {
    __shared__ float buf[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}

// one thread per row accumulating in global memory that other rows read: no structural rule takes it
__global__ void mv(float* y, const float* A, int rows) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) {
        y[i] = 0;
        for (int j = 0; j < rows; j++) {
            y[i] += A[i * rows + j] * y[j];
        }
    }
}

int main() {
    int n = 1 << 20, rows = 4096, cols = 512;
    float *x, *y, *m, *o, *p;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    cudaMalloc(&m, rows * cols * sizeof(float));
    cudaMalloc(&o, rows * sizeof(float));
    cudaMalloc(&p, (n / BLOCK) * sizeof(float));
    scale<<<(n + 255) / 256, 256>>>(y, x, 2.0f, n);
    row_sum<<<(rows + 127) / 128, 128>>>(o, m, rows, cols);
    block_sum<<<n / BLOCK, BLOCK>>>(p, x, n);
    mv<<<(rows + 255) / 256, 256>>>(o, m, rows);
    return 0;
}
"""

HEADER = r"""
#pragma once
__global__ void shift(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
"""

HOST = r"""
#include "kern/shift.cuh"
int main() {
    int n = 4096;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    shift<<<n / 128, 128>>>(y, x, n);
    return 0;
}
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wide")
    proj = root / "me+demo"
    (proj / "kern").mkdir(parents=True)
    (proj / "kernels.cu").write_text(KERNELS)
    (proj / "kern" / "shift.cuh").write_text(HEADER)
    (proj / "main.cu").write_text(HOST)
    (proj / ".wide_commit").write_text("0123456789abcdef0123456789abcdef01234567\n")
    # a second copy of the elementwise kernel in another file: measured once, counted as a duplicate
    (proj / "copy.cu").write_text(KERNELS.split("__global__ void row_sum")[0])
    # a kernel no file launches: its spec is hand-written, outside the project, per file and kernel
    (proj / "lonely.cu").write_text("__global__ void lonely(float* y, int n) {\n"
                                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    "    if (i < n) y[i] = 0.0f;\n}\n")
    # a kernel no file launches and no hand spec describes: its spec is the guessed block (`spec.guess`)
    (proj / "orphan.cu").write_text("__global__ void orphan_rows(float* out, const float* m, int rows, int cols) {\n"
                                    "    int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    "    if (r >= rows) return;\n    float s = 0.0f;\n"
                                    "    for (int j = 0; j < cols; j++) s += m[r * cols + j];\n"
                                    "    out[r] = s;\n}\n")
    hand = root.parent / f"{root.name}-specs" / "me+demo" / "lonely.cu"
    hand.mkdir(parents=True)
    (hand / "lonely.txt").write_text("// @warpforge size N = 4096\n// @warpforge arg y: out float[N]\n"
                                     "// @warpforge arg n = N\n// @warpforge launch grid=cdiv(N, 128), block=128\n")
    return root


@pytest.fixture(scope="module")
def records(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, funnel.KernelRecord]:
    out = tmp_path_factory.mktemp("wide-out")
    recs = funnel.run(corpus, out, workers=1, specs=corpus.parent / f"{corpus.name}-specs")
    assert (out / "summary.md").is_file() and (out / "kernels.jsonl").is_file()
    return {r.kernel: r for r in recs}


def test_classify_tells_serial_loops_and_reductions_from_elementwise_and_grid_stride() -> None:
    assert not classify("__global__ void k(float* y, const float* x, int n) {"
                        " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }").counts
    grid = classify("__global__ void k(float* y, const float* x, int n) { for (int i = blockIdx.x * blockDim.x +"
                    " threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i]; }")
    assert grid.grid_stride and not grid.counts
    serial = classify("__global__ void k(float* y, const float* A, int n) { int r = blockIdx.x; float s = 0;"
                      " for (int j = threadIdx.x; j < n; j += blockDim.x) s += A[r * n + j]; atomicAdd(y + r, s); }")
    assert serial.serial_loop and serial.reduction
    assert classify("__global__ void k(float* y) { atomicAdd(y, 1.0f); }").reduction


def test_author_versions_pairs_numbered_and_named_versions() -> None:
    got = sample.author_versions(["softmax_kernel1", "softmax_kernel2", "softmax_kernel4", "other",
                                  "transposeNaive", "transposeCoalesced", "reduce0", "reduce6", "copy"])
    assert got == {"softmax_kernel1": "softmax_kernel4", "reduce0": "reduce6", "transposeNaive": "transposeCoalesced"}


#: the closest decline of the self-written matrix-vector kernel (lane_remap, through element_remap's planner)
WRITTEN_BEFORE = ("`y[i]` is written before the item's loops: every thread of the group would write it, and `y` is "
                  "read too (by a lane before lane 0 wrote it)")


@needs_nvcc
def test_funnel_stages_on_self_written_kernels(records: dict[str, funnel.KernelRecord]) -> None:
    # the copy of `scale` counted once
    assert set(records) == {"scale", "row_sum", "block_sum", "shift", "lonely", "mv", "orphan_rows"}
    assert all(r.parsed and r.preprocessed for r in records.values()), \
        {k: (r.parse_note, r.preprocess_error) for k, r in records.items()}
    assert all(r.spec for r in records.values()), {k: r.spec_error for k, r in records.items()}
    assert records["shift"].spec_source == "host file main.cu"
    assert records["lonely"].spec_source == "hand-written"
    # exact specs carry no guessed line; the orphan's is the block "Add benchmark spec" writes, marked guessed,
    # with the reason no exact one was found kept beside it
    assert all(not r.spec_guessed for k, r in records.items() if k != "orphan_rows")
    orphan = records["orphan_rows"]
    assert orphan.spec_source == "guessed" and "no launch of `orphan_rows`" in orphan.spec_error
    assert {"size rows", "size cols", "launch"} <= set(orphan.spec_guessed)
    assert records["row_sum"].serial_or_reduction and records["block_sum"].reduction
    assert not records["scale"].serial_or_reduction
    row = records["row_sum"]
    assert "warp_per_row" in row.proposed and "warp_per_row" in row.built, row.families["warp_per_row"]
    # every structural family is answered: proposed, or declined with a reason
    for r in records.values():
        for fam, o in r.families.items():
            assert o["proposed"] or o["declined"], (r.kernel, fam)
    assert records["scale"].families["smem_tiling"]["declined"]
    # where nothing is proposed, the closest family and its words (policy.whynot), not a raise site
    mv = records["mv"]
    assert not mv.proposed and mv.closest["family"] == "lane_remap", mv.closest
    assert mv.closest["reason"] == WRITTEN_BEFORE and mv.closest["stage"] == "shape"
    assert mv.families["vectorize"]["declined"].startswith("each thread walks a serial loop over memory")
    assert row.closest == {}
    assert row.ir in {"not available", "lowered", "declined", "error"}


@needs_nvcc
def test_summary_names_projects_commits_and_rates(records: dict[str, funnel.KernelRecord], corpus: Path) -> None:
    text = funnel.summary(list(records.values()), {"projects": [
        {"name": "me+demo", "origin": "me/demo", "commit": "0123456789abcdef", "duplicates": 1}]})
    assert "| me/demo | 0123456789ab | 7 | 1 |" in text
    assert "| spec available | 7/7 (100 %): exact 6, guessed 1 |" in text
    assert "the same counting only exact specs (guessed ones as no spec)" in text
    assert "over the kernels with a serial loop over global memory or a reduction" in text
    assert "| warp_per_row |" in text
    # the top blocking reasons, in words
    assert ("| 1 | lane_remap: `…` is written before the item's loops: every thread of the group would write it, "
            "and `…` is read too (by a lane before lane 0 wrote it) |") in text


@needs_nvcc
def test_sample_folder_is_self_contained(records: dict[str, funnel.KernelRecord], corpus: Path,
                                         tmp_path: Path) -> None:
    from warpforge.spec.resolve import load_spec

    fdir = tmp_path / "funnel"
    fdir.mkdir()
    (fdir / "kernels.jsonl").write_text("".join(json.dumps(funnel.asdict(r)) + "\n" for r in records.values()))
    (fdir / "meta.json").write_text(json.dumps({"projects": [
        {"name": "me+demo", "origin": "me/demo", "commit": "0123456789abcdef", "duplicates": 1}]}))
    out = tmp_path / "sample"
    entries = sample.prepare(fdir, corpus, out, n=3, seed=1, specs=None, vendor=(), every_kernel=True)
    assert len([e for e in entries if e.role == "sample"]) == 3
    for e in entries:
        unit = out / e.unit
        assert load_spec(unit, e.kernel).kernel == e.kernel
    shift = next((e for e in entries if e.kernel == "shift"), None)
    if shift is not None:  # a header kernel's unit carries its header's includes and its host file's launch
        assert "@warpforge launch" in (out / shift.unit).read_text()
    man = json.loads((out / "manifest.json").read_text())
    assert man["seed"] == 1 and len(man["entries"]) == len(entries)


def test_aggregate_reads_optimize_and_bench_results(tmp_path: Path) -> None:
    """Geomean over measured kernels, structural winners by the registry's flag, best ÷ author from bench times."""
    (tmp_path / "manifest.json").write_text(json.dumps({"seed": 5, "pool": "test", "entries": [
        {"id": "s000", "role": "sample", "origin": "me/a", "kernel": "k1", "author": "a000"},
        {"id": "a000", "role": "author", "origin": "me/a", "kernel": "k4", "author": ""},
        {"id": "s001", "role": "sample", "origin": "me/b", "kernel": "m", "author": ""},
        {"id": "s002", "role": "sample", "origin": "me/c", "kernel": "broken", "author": ""}]}))
    res = tmp_path / "res"
    res.mkdir()
    (res / "s000.json").write_text(json.dumps({"improved": True, "speedup": 4.0, "families": ["warp_per_row"]}))
    (res / "s001.json").write_text(json.dumps({"improved": True, "speedup": 1.0, "families": ["block_size"]}))
    (res / "s002.json").write_text(json.dumps({"message": "the original kernel could not be evaluated"}))
    (res / "s000.bench.json").write_text(json.dumps({"median_ms": 8.0}))
    (res / "a000.bench.json").write_text(json.dumps({"median_ms": 1.0}))
    text = sample.aggregate(tmp_path, res)
    assert "2 kernels measured of 3 sampled" in text
    assert "geomean speedup **2.00x**" in text
    assert "structural family in the winner: **1/2**" in text
    assert "k1: best 4.00x, author 8.00x, best/author 0.50" in text
    assert "broken: the original kernel could not be evaluated" in text


@needs_nvcc
def test_ir_stage_lowers_with_the_real_ir_and_records_a_decline_with_its_line(tmp_path: Path) -> None:
    """The IR stage calls ``warpforge.policy.ir.lower`` itself: a kernel behind a loop macro lowers; a kernel
    whose file includes a device file is declined at that line (the include check runs before nvcc -E)."""
    from benchmarks.wide.stages import lower_kernel

    from warpforge.cuda import parse
    from warpforge.cuda.text import SourceText

    good = ("#define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); "
            "i += blockDim.x * gridDim.x)\n__global__ void k(float* y, int n) { LOOP(i, n) { y[i] = 2.0f * y[i]; } }\n")
    bad = '#include "/dev/zero"\n__global__ void k(float* y) { y[0] = 1.0f; }\n'
    for text, want in ((good, "lowered"), (bad, "declined")):
        (tmp_path / "k.cu").write_text(text)
        src = SourceText(text)
        model = parse(src.data)
        got = lower_kernel(str(tmp_path / "k.cu"), text, src, model, model.kernels[0], None, [])
        assert got.status == want, got
    assert "/dev/zero" in got.reason and got.reason.endswith("(line 1)"), got


#: an elementwise kernel over a typedef'd element whose body uses a macro: vectorize takes its canonical form,
#: where the typedef is resolved (``__nv_bfloat16* out``)
TYPEDEF_GAIN = r"""
#include <cuda_bf16.h>
typedef __nv_bfloat16 halfX;
#define GAIN sqrtf(2.0f / 3.14159f)

// @warpforge size N = 1 << 20
// @warpforge arg out: out bfloat16[N]
// @warpforge arg inp: in bfloat16[N] uniform(-1, 1)
// @warpforge arg N = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void gain_kernel(halfX* out, const halfX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        out[i] = (halfX)(0.5f * x * GAIN);
    }
}
"""


@needs_nvcc
def test_funnel_children_are_the_ones_the_search_gets(tmp_path: Path) -> None:
    """The funnel's children are ``OfflinePolicy.propose_sync``'s, parameters spelled as the user wrote them
    (``halfX* out``): it built the canonical form's ``__nv_bfloat16* out``, which the evaluator's guard refused
    where the typedef sits in a header under ``#if`` (two llm.c kernels on the wide yardstick)."""
    from benchmarks import corpus_applicability as ca
    from benchmarks.wide import stages

    path = tmp_path / "gain.cu"
    path.write_text(TYPEDEF_GAIN)
    policy = ca.offline_policy(ca.case_request(path, families=["vectorize"]))
    outcomes, children = stages.propose_families(policy, policy.root_candidate())
    vec = outcomes["vectorize"]
    # `vectorize` reads the alias through its #if itself now (`resolved_type`), so it proposes on the kernel as
    # written; either way the children must be the search's, spelled as the user wrote them
    assert vec.proposed >= 1
    assert [c.source for c in children] == [c.source for c in policy.propose_sync(policy.root_candidate())]
    assert all(c.source.startswith("__global__ void gain_kernel(halfX* out, const halfX* inp, int N)")
               for c in children)
    stages.build_children(policy, outcomes, children)
    assert vec.built and not vec.build_failures, vec.build_failures


#: a kernel file and the project's host file that launches it, each with its own copy of a device helper (a
#: sample's "dev" file and its trainer): joined for the launch, the two would be one redefinition
OWN_HELPER = r"""
__device__ inline float mix(float a, float b, float w) { return fmaf(w, b, fmaf(-w, a, a)); }

__global__ void blend(float* out, const float* a, const float* b, float w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = mix(a[i], b[i], w);
}
"""

HOST_WITH_HELPER = r"""
#include <cuda_runtime.h>
__device__ inline float mix(float a, float b, float w) { return fmaf(w, b, fmaf(-w, a, a)); }
__global__ void blend(float* out, const float* a, const float* b, float w, int n);

int main() {
    int n = 1 << 20;
    float *o, *a, *b;
    cudaMalloc(&o, n * sizeof(float));
    cudaMalloc(&a, n * sizeof(float));
    cudaMalloc(&b, n * sizeof(float));
    blend<<<(n + 255) / 256, 256>>>(o, a, b, 0.25f, n);
    return 0;
}
"""


@needs_nvcc
def test_candidates_build_in_the_kernel_file_not_in_the_joined_host_file(tmp_path: Path) -> None:
    """A spec read from the project's host file (its launch) builds candidates in the kernel's own file: the
    host text joined after it repeats the helper, and every candidate failed with "function `mix` has already
    been defined" (nine kernels of the wide yardstick, with llm.c's ``lerp`` and ``cublasCheck``)."""
    root = tmp_path / "wide"
    proj = root / "me+helpers"
    proj.mkdir(parents=True)
    (proj / "blend.cu").write_text(OWN_HELPER)
    (proj / "train.cu").write_text(HOST_WITH_HELPER)
    recs = {r.kernel: r for r in funnel.run(root, tmp_path / "out", workers=1)}
    rec = recs["blend"]
    assert rec.spec_source == "host file train.cu", rec.spec_error
    assert "vectorize" in rec.proposed
    failures = [f for o in rec.families.values() for f in o["build_failures"]]
    assert "vectorize" in rec.built and not failures, failures


#: a CSR row loop templated on a reader functor no file instantiates: the guessed spec gives it `float`, which
#: the kernel calls (`read(col)`), so the original itself does not build
READER_CSR = r"""
struct Direct {
    const float* v;
    __device__ float operator()(int i) const { return v[i]; }
};

template <typename Reader>
__global__ void csr_rows(const float* val, const int* cols, const int* starts, int rows, float* out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    Reader read;
    if (r < rows) {
        float t = 0.0f;
        for (int j = starts[r]; j < starts[r + 1]; j++) t += val[j] * read(cols[j]);
        out[r] = t;
    }
}
"""


@needs_nvcc
def test_an_original_that_does_not_build_is_recorded_not_blamed_on_the_rules(tmp_path: Path) -> None:
    """Where the original does not build (here with the guessed template argument), the evaluator verifies
    nothing: the funnel records why (``build_error``, ``original: ...`` in each proposing family) and builds no
    child; SHOC's spmv kernels were counted as four rules' build failures."""
    root = tmp_path / "wide"
    (root / "me+csr").mkdir(parents=True)
    (root / "me+csr" / "csr.cu").write_text(READER_CSR)
    rec = funnel.run(root, tmp_path / "out", workers=1)[0]
    assert rec.spec_source == "guessed" and rec.proposed, (rec.spec_error, rec.families)
    assert rec.build_error.startswith("original: compile: "), rec.build_error
    assert not rec.built
    for fam in rec.proposed:
        assert rec.families[fam]["build_failures"] == [rec.build_error]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| proposed, but the original itself does not build (no child built) | 1 |" in summary
