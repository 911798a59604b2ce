"""Retrieval: chunking by kernel/function with tree-sitter, op types and pattern tags, the SQLite FTS5 index
on kernels/, source weights and the per-source cap, and the ``warpforge index`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KERNELS_DIR, ROOT
from warpforge.rag.index import Index, Query, chunk_source, op_type, pattern_tags, query_for_kernel, split_identifier
from warpforge.rag.sqlite_fts import SqliteBackend

LIB = """
// Block-wide sum with warp shuffles, then one atomic per block.
template <typename T>
__device__ T warpReduceSum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// Online softmax: one warp per row, running max and sum.
__global__ void __launch_bounds__(256) softmax_warp_online(const float4* __restrict__ in, float* out, int cols) {
    __shared__ float buf[32];
    float4 v = in[threadIdx.x];
    float m = warpReduceSum(v.x);
    out[blockIdx.x] = __expf(m);
}

struct Accum { __device__ void add(float v) { s += v; } float s; };

void launch(const float4* in, float* out) { softmax_warp_online<<<1, 256>>>(in, out, 4); }
"""


@pytest.fixture
def kernels_index(tmp_path: Path) -> Index:
    ix = Index(SqliteBackend(tmp_path / "index.sqlite"))
    assert ix.add_directory(KERNELS_DIR, "reference", 1.0) == 9
    return ix


def test_chunks_by_kernel_and_function_with_tags() -> None:
    chunks = {c.name: c for c in chunk_source(LIB, "lib/softmax.cuh", "lib", 2.0)}
    assert set(chunks) == {"warpReduceSum", "softmax_warp_online", "Accum", "launch"}
    k = chunks["softmax_warp_online"]
    assert k.kind == "kernel" and k.op_type == "softmax" and k.weight == 2.0
    assert {"shared_memory", "vectorized", "launch_bounds", "readonly_cache", "fast_math"} <= set(k.tags)
    assert k.text.startswith("// Online softmax: one warp per row")  # the comment above comes with it
    assert k.start_line == 10
    w = chunks["warpReduceSum"]
    assert w.kind == "device_function" and w.op_type == "reduction" and "warp_shuffle" in w.tags
    assert chunks["Accum"].kind == "type" and chunks["launch"].kind == "function"


def test_op_types_and_identifiers() -> None:
    assert split_identifier("blockReduceSum") == ["block", "reduce", "sum"]
    assert split_identifier("softmax_rows") == ["softmax", "rows"]
    assert [op_type(n) for n in ("sgemm_naive", "rmsnorm_rows", "conv1d", "histogram_atomic", "gelu_forward",
                                 "transpose_naive", "reduce_sum", "frobnicate")] == [
        "gemm", "layernorm", "conv", "histogram", "elementwise", "transpose", "reduction", "other"]
    assert "atomics" in pattern_tags("atomicAdd(&h[b], 1);") and pattern_tags("int x = 1;") == []


def test_softmax_row_reduction_finds_softmax_rows_first(kernels_index: Index) -> None:
    hits = kernels_index.search(Query("softmax row reduction", k=3, per_source=3))
    assert hits[0].chunk.name == "softmax_rows"
    assert hits[0].chunk.path == "softmax.cu" and hits[0].chunk.op_type == "softmax"
    assert [h.chunk.name for h in kernels_index.search(Query("matrix transpose tile", k=1))] == ["transpose_naive"]
    assert kernels_index.search(Query("the of and", k=3)) == []  # stopwords only: nothing to match


def test_query_for_a_kernel_uses_op_type_and_bottleneck(kernels_index: Index) -> None:
    text = (KERNELS_DIR / "rmsnorm.cu").read_text()
    q = query_for_kernel(text, "rmsnorm_rows", [{"action": "warp_reduce"}], "memory-bound (static estimate)")
    assert q.op_type == "layernorm" and "memory" in q.terms() and "warp" in q.terms()
    assert kernels_index.search(q)[0].chunk.name == "rmsnorm_rows"


def test_source_weights_and_per_source_cap(tmp_path: Path) -> None:
    ix = Index(SqliteBackend(tmp_path / "i.sqlite"))
    ix.add_directory(KERNELS_DIR, "examples", 0.5)
    ix.add_directory(KERNELS_DIR, "production", 2.0)
    hits = ix.search(Query("softmax row reduction", k=4, per_source=1))
    assert [h.chunk.source for h in hits] == ["production", "examples"]  # one each, better source first
    assert hits[0].chunk.name == hits[1].chunk.name == "softmax_rows"
    assert hits[0].score == pytest.approx(4 * hits[1].score)
    hits = ix.search(Query("softmax row reduction", k=4, per_source=2))
    assert [h.chunk.source for h in hits] == ["production", "production", "examples", "examples"]
    assert ix.backend.sources() == {"examples": 9, "production": 9}


def test_re_adding_a_source_replaces_it(tmp_path: Path) -> None:
    d = tmp_path / "src"
    d.mkdir()
    (d / "a.cu").write_text("__global__ void old_kernel(float* x) { x[0] = 1; }\n")
    ix = Index(SqliteBackend(tmp_path / "i.sqlite"))
    ix.add_directory(d, "team")
    (d / "a.cu").write_text("__global__ void new_kernel(float* x) { x[0] = 2; }\n")
    ix.add_directory(d, "team")
    assert ix.backend.count() == 1
    assert [h.chunk.name for h in ix.search(Query("kernel", k=5))] == ["new_kernel"]
    ix.add_directory(KERNELS_DIR, "team", replace=False)
    assert ix.backend.count() == 10


def _cli(*args: str, index: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warpforge", "index", *args, "--index", str(index)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_cli_add_search_stats(tmp_path: Path) -> None:
    idx = tmp_path / "cli.sqlite"
    r = _cli("add", str(KERNELS_DIR), "--source", "reference", "--weight", "1.5", index=idx)
    assert r.returncode == 0, r.stderr
    assert "indexed 9 functions" in r.stdout and "`reference` (weight 1.5)" in r.stdout
    r = _cli("search", "softmax row reduction", "--k", "2", "--json", index=idx)
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert hits[0]["name"] == "softmax_rows" and hits[0]["source"] == "reference" and hits[0]["weight"] == 1.5
    assert len(hits) == 2 and "text" in hits[0]
    r = _cli("search", "softmax", index=idx)
    assert r.stdout.startswith("1. softmax_rows  [kernel, op softmax")
    r = _cli("stats", "--json", index=idx)
    assert json.loads(r.stdout) == {"backend": "sqlite", "chunks": 9, "sources": {"reference": 9}}


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    r = _cli("add", str(tmp_path / "missing"), "--source", "x", index=tmp_path / "i.sqlite")
    assert r.returncode == 2 and "no such file or directory" in r.stderr and "Traceback" not in r.stderr
    r = _cli("search", "x", "--backend", "pinecone", index=tmp_path / "i.sqlite")
    assert r.returncode == 2 and ("PINECONE_API_KEY" in r.stderr or "Pinecone index" in r.stderr)
