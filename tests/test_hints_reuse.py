"""Static hints follow the transformations' analysis (issue 16, item 5).

- WF112: a matmul-like loop whose loads are shared by the threads of a block gets the data-reuse hint that
  leads to tiling (action ``smem_tiling``), read from the lane model of the kernel's canonical form, so an
  index macro (``A(i, j)``) or a guarded body does not hide it; it declines where tiling would not help or
  would be wrong (streamed data, a buffer written in place, a gather, a short loop, tiles already staged).
- One root cause, one finding: a row walk's strided accesses (WF103) are folded into the WF111, a shared
  load's stride into the WF112, the divisions of one index decomposition (WF107) into one, with the folded
  lines as related locations (what the editor shows as DiagnosticRelatedInformation).

Source analysis only (``use_compiler=False``): no GPU and no nvcc needed; the kernels below are written here,
apart from the corpus, in styles of their own.
"""

from __future__ import annotations

from conftest import ROOT
from warpforge.cuda.text import Position, Range
from warpforge.lsp.convert import diagnostic
from warpforge.profile.findings import Finding, Severity
from warpforge.profile.hints import analyze_source
from warpforge.profile.rootcause import merge_root_causes


def _findings(text: str, file: str = "k.cu") -> list[Finding]:
    return analyze_source(file, text, use_compiler=False).findings


def _codes(text: str) -> list[str]:
    return [f.code for f in _findings(text)]


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _corpus(name: str) -> str:
    return (ROOT / "benchmarks" / "corpus" / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------- WF112 fires
def test_a_macro_indexed_sgemm_gets_the_tiling_hint_at_the_users_lines() -> None:
    text = _corpus("sgemm_macro_2d.cu")
    (f,) = [f for f in _findings(text, "sgemm_macro_2d.cu") if f.code == "WF112"]
    assert f.action == "smem_tiling" and f.severity == Severity.INFO
    assert f.line == _line(text, "for (int k = 0; k < K; k++)")
    assert {rel.start.line + 1 for rel, _ in f.related} == {_line(text, "sum += A(row, k) * B(k, col)")}
    ev = f.evidence
    assert ev["canonical_form"] is True and ev["trip_value"] == 2048 and ev["loads_per_output"] == 4096
    assert [(b["buffer"], b["threads_per_element"], b["shared_across"]) for b in ev["buffers"]] == [
        ("a", 16, ["threadIdx.x"]), ("b", 16, ["threadIdx.y"])]
    assert "16 threads of a block" in f.message and "shared memory" in f.message


def test_the_matmul_like_kernels_of_the_corpus_and_kernels_get_it() -> None:
    for path in ("benchmarks/corpus/batched_gemm_strided.cu", "benchmarks/corpus/causal_attn_scores.cu",
                 "benchmarks/corpus/gemm_bias_relu_template.cu", "kernels/sgemm.cu"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "WF112" in _codes(text), path


TRANSPOSED_GEMM = """
typedef float real;
#define AT(m, r, c, ld) m[(size_t)(r) * (ld) + (c)]
// @warpforge size M = 512
// @warpforge size N = 512
// @warpforge size K = 256
// @warpforge arg x: in float[M*K] uniform(-1, 1)
// @warpforge arg w: in float[K*N] uniform(-1, 1)
// @warpforge arg y: out float[M*N]
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(M, 32), cdiv(N, 8)), block=(32, 8)
__global__ void linear_fwd(const real* x, const real* w, real* y, int M, int N, int K) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;   /* rows along x: the other way round */
    const int n = blockIdx.y * blockDim.y + threadIdx.y;
    if (m < M) {
        if (n < N) {
            real acc = 0;
            for (int kk = 0; kk < K; kk += 1) {
                acc += AT(x, m, kk, K) * AT(w, kk, n, N);
            }
            AT(y, m, n, N) = acc;
        }
    }
}
"""


def test_a_gemm_in_another_style_gets_it_from_the_analysis() -> None:
    (f,) = [f for f in _findings(TRANSPOSED_GEMM) if f.code == "WF112"]
    assert f.line == _line(TRANSPOSED_GEMM, "for (int kk = 0")
    by = {b["buffer"]: (b["threads_per_element"], b["shared_across"]) for b in f.evidence["buffers"]}
    assert by == {"x": (8, ["threadIdx.y"]), "w": (32, ["threadIdx.x"])}


# ------------------------------------------------------------------------------------------- WF112 declines
MATVEC = """
// @warpforge size R = 4096
// @warpforge size C = 1024
// @warpforge arg a: in float[R*C] uniform(-1, 1)
// @warpforge arg v: in float[C] uniform(-1, 1)
// @warpforge arg out: out float[R]
// @warpforge arg R = R
// @warpforge arg C = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void mv(const float* a, const float* v, float* out, int R, int C) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    float s = 0.f;
    for (int c = 0; c < C; ++c) s += a[r * C + c] * v[c];
    out[r] = s;
}
"""


def _gemm(body: str, *, loop: str = "K", extra: str = "") -> str:
    return f"""
// @warpforge size M = 256
// @warpforge size N = 256
// @warpforge size K = 256
// @warpforge arg A: in float[M*K] uniform(-1, 1)
// @warpforge arg B: inout float[K*N] uniform(-1, 1)
// @warpforge arg C: out float[M*N]
// @warpforge arg idx: in int[K] int(0, 255)
// @warpforge arg M = M
// @warpforge arg N = N
// @warpforge arg K = K
// @warpforge launch grid=(cdiv(N, 16), cdiv(M, 16)), block=(16, 16)
__global__ void g(const float* A, float* B, float* C, const int* idx, int M, int N, int K) {{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    {extra}
    if (row >= M || col >= N) return;
    float s = 0.f;
    for (int k = 0; k < {loop}; k++) {{
        {body}
    }}
    C[row * N + col] = s;
}}
"""


def test_the_plain_gemm_near_miss_fires() -> None:
    # the control for the declines below: the same kernel with only a read-only B
    assert "WF112" in _codes(_gemm("s += A[row * K + k] * B[k * N + col];"))


def test_declines_where_tiling_would_not_help_or_be_wrong() -> None:
    # one thread per row of a matrix-vector product: `a` is streamed (each element used once)
    assert "WF112" not in _codes(MATVEC)
    # B is updated in place in the loop: a staged tile would go stale
    assert "WF112" not in _codes(_gemm("s += A[row * K + k] * B[k * N + col]; B[k * N + col] = s;"))
    # a gather: which threads share `A[idx[k] ...]` is not known
    assert "WF112" not in _codes(_gemm("s += A[row * K + idx[k]] * B[k * N + col] * (float)idx[k];"))
    # a 4-step loop is not a K loop
    assert "WF112" not in _codes(_gemm("s += A[row * K + k] * B[k * N + col];", loop="4"))
    # tiles already staged in shared memory
    assert "WF112" not in _codes(_gemm("s += A[row * K + k] * B[k * N + col] + t[threadIdx.x];",
                                       extra="__shared__ float t[16]; t[threadIdx.x] = 0.f; __syncthreads();"))


def test_b_written_elsewhere_in_the_kernel_declines_too() -> None:
    text = _gemm("s += A[row * K + k] * B[k * N + col];").replace(
        "    C[row * N + col] = s;", "    C[row * N + col] = s;\n    B[row * N + col] = 0.f;")
    assert "WF112" not in _codes(text)


# ------------------------------------------------------------------------------------------- one root cause
def test_a_row_walks_strided_loads_are_folded_into_the_row_walk() -> None:
    text = (ROOT / "kernels" / "softmax.cu").read_text(encoding="utf-8")
    found = _findings(text, "softmax.cu")
    assert [f.code for f in found if f.code in ("WF103", "WF111")] == ["WF111"]
    (walk,) = [f for f in found if f.code == "WF111"]
    folded = [m for m in walk.evidence["merged"] if m["code"] == "WF103"]
    assert len(folded) == 2 and all(m["action"] == "coalesce" for m in folded)
    notes = [msg for _, msg in walk.related if msg.startswith("WF103: ")]
    assert len(notes) == 2 and all("strided by" in n for n in notes)
    # and the editor gets them as DiagnosticRelatedInformation at their own lines
    diag = diagnostic(walk, "file:///softmax.cu")
    lines = {ri.location.range.start.line + 1 for ri in diag.related_information or []}
    assert {m["line"] for m in folded} <= lines


def test_a_shared_loads_stride_is_folded_into_the_reuse_hint() -> None:
    text = _corpus("causal_attn_scores.cu")
    found = _findings(text, "causal_attn_scores.cu")
    assert "WF103" not in [f.code for f in found]
    (reuse,) = [f for f in found if f.code == "WF112"]
    assert [m["code"] for m in reuse.evidence["merged"]] == ["WF103"]


DIVISIONS = """
// @warpforge size N = 1 << 20
// @warpforge size H = 64
// @warpforge size W = 64
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge arg h = H
// @warpforge arg w = W
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void unflatten(const float* x, float* y, int n, int h, int w) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = i % w;
    int r = (i / w) % h;
    int p = i / (w * h);
    y[i] = x[i] * (float)(c + r + p);
}
"""


def test_the_divisions_of_one_index_decomposition_are_one_finding() -> None:
    found = [f for f in _findings(DIVISIONS) if f.code == "WF107"]
    assert len(found) == 1
    (f,) = found
    assert f.line == _line(DIVISIONS, "int c = i % w;")
    merged = f.evidence["merged"]
    assert merged and {m["line"] for m in merged} <= {_line(DIVISIONS, "int r ="), _line(DIVISIONS, "int p =")}
    assert any(msg.startswith("WF107: ") for _, msg in f.related)


def test_findings_of_different_causes_are_left_apart() -> None:
    r = Range(Position(3, 0), Position(3, 5))
    walk = Finding("WF111", Severity.INFO, "k.cu", r, "walk", kernel="k", evidence={"loops": [4]})
    other_kernel = Finding("WF103", Severity.INFO, "k.cu", r, "s", kernel="j", evidence={"row_loop_line": 4})
    outside = Finding("WF103", Severity.INFO, "k.cu", r, "s", kernel="k", evidence={"lines": [9]})
    loop_a = Finding("WF107", Severity.INFO, "k.cu", r, "d1", kernel="k", evidence={"where": "loop at line 4"})
    loop_b = Finding("WF107", Severity.INFO, "k.cu", r, "d2", kernel="k", evidence={"where": "loop at line 9"})
    assert merge_root_causes([walk, other_kernel, outside, loop_a, loop_b]) == [
        walk, other_kernel, outside, loop_a, loop_b]
    inside = Finding("WF103", Severity.INFO, "k.cu", r, "s", kernel="k", evidence={"row_loop_line": 4})
    (host,) = merge_root_causes([walk, inside])
    assert host.evidence["merged"] == [{"code": "WF103", "action": None, "line": 4, "message": "s"}]
