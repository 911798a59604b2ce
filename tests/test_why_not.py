"""The "why not" hint (issue 27 item 5): every structural rule says why it declines; WF113 says it at the loop.

Self-written kernels, each one spelling a shape a rule nearly accepts; the rules run for real (tree-sitter,
the IR's canonical form), the CLI and the language server as the user meets them. No GPU needed.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warpforge.cuda.parser import parse
from warpforge.cuda.text import SourceText
from warpforge.policy import whynot_hint as why_not_analyzer
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, RuleContext, load
from warpforge.policy.rules._why import Stage
from warpforge.policy.whynot import Decline, ask, closest, explain
from warpforge.profile.hints import analyze_source
from warpforge.spec import build_spec

ROOT = Path(__file__).resolve().parent.parent
why_not_analyzer.install()  # as the language server and `warpforge hints` do before analysing

MATVEC = """\
// @warpforge size n = 4096
// @warpforge arg n = n
// @warpforge arg A: in float[n*n]
// @warpforge arg x: in float[n]
// @warpforge arg y: inout float[n]
// @warpforge launch grid=cdiv(n, 256), block=256
__global__ void matvec_self(const float* A, const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 0;
        for (int j = 0; j < n; j++) {
            y[i] += A[i * n + j] * x[j] + y[j];
        }
    }
}
"""

SOFTMAX = """\
// @warpforge size rows = 4096
// @warpforge size cols = 1024
// @warpforge arg rows = rows
// @warpforge arg cols = cols
// @warpforge arg x: in float[rows*cols]
// @warpforge arg y: out float[rows*cols]
// @warpforge launch grid=cdiv(rows, 128), block=128
__global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -INFINITY;
    for (int j = 0; j < cols; j++) m = fmaxf(m, x[r * cols + j]);
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += expf(x[r * cols + j] - m);
    for (int j = 0; j < cols; j++) y[r * cols + j] = expf(x[r * cols + j] - m) / s;
}
"""


def _ctx(text: str, name: str | None = None) -> RuleContext:
    """The kernel as written, in the context the offline policy gives its rules."""
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernels[0] if name is None else model.require(name, "t.cu")
    policy = OfflinePolicy("t.cu", src, model, k, build_spec(src, model, k, "t.cu"))
    return policy.context(policy.root_candidate())


def _why(family: str, text: str) -> Decline:
    load()
    d = ask(REGISTRY[family], _ctx(text))
    assert d is not None, f"{family} proposes"
    return d


def _line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``, counted from the kernel's ``__global__`` line."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "__global__" in ln)
    return next(i for i, ln in enumerate(lines) if needle in ln) - start + 1


# ----------------------------------------------------------------------------- each rule's words

SPEC_1D = """\
// @warpforge size n = 1 << 20
// @warpforge arg n = n
// @warpforge arg x: in float[n]
// @warpforge arg out: inout float[n]
// @warpforge launch grid=cdiv(n, 256), block=256
"""


def test_stride_reduce_names_the_per_thread_address() -> None:
    text = SPEC_1D + """\
__global__ void chunks(const float* x, float* out, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (int i = t * 4; i < t * 4 + 4; i++) {
        s += x[i];
    }
    atomicAdd(&out[blockIdx.x], s);
}
"""
    d = _why("stride_reduce", text)
    assert d.reason.startswith("`atomicAdd(&out[blockIdx.x], s)` adds to an address that differs between threads"), d
    assert d.stage == Stage.LEGALITY and d.line == _line_of(text, "atomicAdd")


def test_vectorize_names_the_write_at_another_index() -> None:
    text = SPEC_1D + """\
__global__ void shift(const float* x, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) {
        out[i + 1] = 2.0f * x[i];
    }
}
"""
    d = _why("vectorize", text)
    assert "`out[i + 1]` is written at another index than the thread's own element `out[i]`" in d.reason, d
    assert d.stage == Stage.LEGALITY and d.line == _line_of(text, "out[i + 1]")


def test_vectorize_out_of_scope_for_a_serial_walk() -> None:
    d = _why("vectorize", MATVEC)
    assert "serial loop over memory" in d.reason and d.stage == Stage.SCOPE, d


TREE_BARRIER_FIRST = """\
// @warpforge size n = 1 << 20
// @warpforge arg n = n
// @warpforge arg x: in float[n]
// @warpforge arg out: out float[cdiv(n, 256)]
// @warpforge launch grid=cdiv(n, 256), block=256
__global__ void block_sum(const float* x, float* out, int n)
{
    __shared__ float sh[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    sh[threadIdx.x] = (i < n) ? x[i] : 0.0f;
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        __syncthreads();
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}
"""


def test_warp_reduce_names_a_barrier_inside_the_step() -> None:
    """A barrier first in the step is a tree (tests/test_rules_warp_reduce.py); one between the step's
    statements is not, and the decline says so at the loop."""
    text = TREE_BARRIER_FIRST.replace(
        "        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];\n",
        "        float t = sh[threadIdx.x];\n        __syncthreads();\n"
        "        if (threadIdx.x < s) sh[threadIdx.x] = t + sh[threadIdx.x + s];\n")
    d = _why("warp_reduce", text)
    assert "a barrier between its statements" in d.reason and d.stage == Stage.SHAPE, d
    assert d.line == _line_of(text, "for (int s")
    # reduce_coarsen uses the same tree matcher but does not borrow its words
    assert _why("reduce_coarsen", text).stage == Stage.SCOPE


def test_warp_reduce_names_a_stride_that_is_not_a_tree() -> None:
    text = TREE_BARRIER_FIRST.replace("for (int s = blockDim.x / 2; s > 0; s >>= 1)",
                                      "for (int s = 2; s < blockDim.x; s *= 2)")
    d = _why("warp_reduce", text)
    assert d.reason.startswith("the tree's step `s` neither halves down to 1") and d.stage == Stage.SHAPE, d
    assert d.line == _line_of(text, "for (int s")


def test_reduce_coarsen_names_the_per_block_store() -> None:
    step = "        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];"
    barrier = "        __syncthreads();"
    text = TREE_BARRIER_FIRST.replace(f"{barrier}\n{step}", f"{step}\n{barrier}").replace(
        "    for (int s", "    __syncthreads();\n    for (int s")
    d = _why("reduce_coarsen", text)
    assert "written with `out[blockIdx.x] = sh[0]`, not accumulated with `atomicAdd`" in d.reason, d
    assert d.line == _line_of(text, "out[blockIdx.x] = sh[0]")


def test_atomic_aggregate_names_the_used_result() -> None:
    text = """\
// @warpforge size n = 1 << 20
// @warpforge arg n = n
// @warpforge arg x: in int[n]
// @warpforge arg hist: inout int[256]
// @warpforge launch grid=cdiv(n, 256), block=256
__global__ void histo(const int* x, int* hist, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int before = atomicAdd(&hist[x[i] & 255], 1);
        if (before == 0) hist[0] = 1;
    }
}
"""
    d = _why("atomic_aggregate", text)
    assert "is used (the old value each thread gets has no aggregated equivalent)" in d.reason, d
    assert d.stage == Stage.LEGALITY and d.line == _line_of(text, "atomicAdd")


def test_privatize_atomics_names_the_other_use_of_the_bins() -> None:
    text = """\
// @warpforge size n = 1 << 20
// @warpforge arg n = n
// @warpforge arg x: in int[n]
// @warpforge arg hist: inout int[256]
// @warpforge launch grid=cdiv(n, 256), block=256
__global__ void histo_read(const int* x, int* hist, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&hist[x[i] & 255], hist[0] > 0 ? 1 : 2);
    }
}
"""
    d = _why("atomics_privatize", text)
    assert "`hist` is also read or written outside its atomicAdds" in d.reason, d
    assert d.stage == Stage.LEGALITY and d.line == _line_of(text, "atomicAdd")


def test_coarsen_y_names_the_missing_bound() -> None:
    text = """\
// @warpforge size w = 1024
// @warpforge size h = 1024
// @warpforge arg w = w
// @warpforge arg h = h
// @warpforge arg a: in float[w*h]
// @warpforge arg b: out float[w*h]
// @warpforge launch grid=(cdiv(w, 32), cdiv(h, 8)), block=(32, 8)
__global__ void scale2d(const float* a, float* b, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    b[y * w + x] = 2.0f * a[y * w + x];
}
"""
    d = _why("coarsen_y", text)
    assert "the row index `y` has no top-level bound" in d.reason and d.stage == Stage.SHAPE, d
    assert d.line == _line_of(text, "int y =")


def test_smem_halo_names_a_buffer_passed_to_a_call() -> None:
    text = """\
__device__ float at(const float* p, int i) { return p[i]; }
// @warpforge size w = 1024
// @warpforge size h = 1024
// @warpforge arg w = w
// @warpforge arg h = h
// @warpforge arg a: in float[w*h]
// @warpforge arg b: out float[w*h]
// @warpforge launch grid=(cdiv(w, 32), cdiv(h, 8)), block=(32, 8)
__global__ void blur(const float* a, float* b, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x > 0 && y > 0 && x < w - 1 && y < h - 1) {
        b[y * w + x] = a[(y - 1) * w + x] + a[(y + 1) * w + x] + at(a, y * w + x);
    }
}
"""
    d = _why("smem_halo", text)
    assert "`a` is passed to a call" in d.reason and d.stage == Stage.LEGALITY, d


def test_single_pass_names_different_bounds() -> None:
    text = SOFTMAX.replace("for (int j = 0; j < cols; j++) s += expf", "for (int j = 0; j < rows; j++) s += expf")
    d = _why("single_pass", text)
    assert d.reason == "the max loop and the exp-sum loop run to different bounds" and d.stage == Stage.SHAPE, d
    assert d.line == _line_of(text, "s += expf")


def test_column_split_names_a_loop_that_walks_a_row() -> None:
    text = """\
// @warpforge size rows = 4096
// @warpforge size cols = 1024
// @warpforge arg rows = rows
// @warpforge arg cols = cols
// @warpforge arg x: in float[rows*cols]
// @warpforge arg out: out float[cols]
// @warpforge launch grid=cdiv(cols, 128), block=128
__global__ void rowsum(const float* x, float* out, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        float p = 0.0f;
        for (int r = 0; r < rows; r++) {
            p += x[c * rows + r];
        }
        out[c] = p;
    }
}
"""
    d = _why("column_split", text)
    assert d.reason.startswith("the loop does not walk down a column") and d.stage == Stage.SHAPE, d
    assert d.line == _line_of(text, "for (int r")


def test_closest_prefers_the_furthest_stage_then_a_line() -> None:
    a = Decline("a", "x", Stage.SHAPE, 0)
    b = Decline("b", "y", Stage.SHAPE, 4)
    c = Decline("c", "z", Stage.SCOPE, 9)
    assert closest([a, b, c]) == b
    assert closest([c, a]) == a
    assert closest([]) is None
    # at the same stage, a rule that re-maps the loop beats one that only coarsens threads, line or not
    assert closest([Decline("coarsen_y", "no bound", Stage.SHAPE, 3), a]) == a


ARGMAX = """\
// @warpforge size R = 4096
// @warpforge size C = 1024
// @warpforge arg out: out float[R]
// @warpforge arg idx: out int[R]
// @warpforge arg x: in float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void k(float* out, int* idx, const float* x, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float m = -1e30f;
  int mi = -1;
  int j;
  for (j = 0; j < cols; j++) {
    float v = x[r * cols + j];
    mi = v > m ? j : mi;
    m = v > m ? v : m;
  }
  out[r] = m;
  idx[r] = mi;
}
"""


def test_explain_gives_the_canonical_forms_words_when_both_forms_get_as_far() -> None:
    # as written, the remap rules stop at the counter declared before its `for`; the lowered form declares it in
    # the header and stops at the argmax `mi` (the real blocker), at the same stage: the hint names the argmax
    src = SourceText(ARGMAX)
    model = parse(src.data)
    k = model.kernels[0]
    policy = OfflinePolicy("t.cu", src, model, k, build_spec(src, model, k, "t.cu"))
    root = policy.root_candidate()
    norm = policy.normalized(root)
    assert norm is not None
    load()
    asked = ask(REGISTRY["lane_remap"], policy.context(root))
    assert asked is not None and "declare its counter" in asked.reason
    v = explain([policy.context(root), policy.context(norm)])
    got = {d.family: d for d in v.declines}
    for fam in ("lane_remap", "element_remap", "column_remap"):
        assert "`mi` is carried across iterations" in got[fam].reason, got[fam]


def test_explain_on_a_proposed_kernel_names_the_families() -> None:
    v = explain([_ctx(SOFTMAX)])
    assert "warp_per_row" in v.proposed and v.closest is None


# ----------------------------------------------------------------------------- the hint (WF113)


def _wf113(text: str, name: str = "k.cu") -> list[dict[str, object]]:
    rep = analyze_source(name, text, use_compiler=False)
    return [f.to_json() for f in rep.findings if f.code == "WF113"]


def test_hint_at_the_loop_line_with_the_blocking_line() -> None:
    got = _wf113(MATVEC)
    assert len(got) == 1, got
    f = got[0]
    loop = MATVEC.splitlines().index("        for (int j = 0; j < n; j++) {") + 1
    blocked = loop - 1  # y[i] = 0 (the canonical form has other line numbers: mapped back by text)
    assert f["line"] == loop and f["severity"] == "hint"
    # element_remap, lane_remap's fallback, got as far and ranks below it; a rule's own "(line N)" (a line of
    # the text it read, not of the user's file) is never shown
    assert f["message"] == ("No structural rewrite applies: closest is lane_remap (one warp per item, its loop "
                            "split over the 32 lanes), blocked by: `y[i]` is written before the item's loops: every "
                            "thread of the group would write it, and `y` is read too (by a lane before lane 0 wrote "
                            f"it) (line {blocked})"), f["message"]
    assert f["related"][0]["line"] == blocked  # type: ignore[index]


def test_no_hint_where_a_structural_rewrite_is_proposed() -> None:
    assert _wf113(SOFTMAX) == []


def test_no_hint_for_an_elementwise_kernel() -> None:
    assert _wf113((ROOT / "kernels" / "saxpy.cu").read_text()) == []


def test_without_a_spec_the_missing_spec_is_the_blocker() -> None:
    text = "\n".join(ln for ln in SOFTMAX.splitlines() if not ln.startswith("// @warpforge")) + "\n"
    got = _wf113(text)
    assert len(got) == 1, got
    assert "blocked by: the kernel has no spec (sizes and launch)" in str(got[0]["message"]), got


def test_a_crashing_rule_is_logged_and_the_hint_skipped(monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    load()
    rule = REGISTRY["warp_reduce"]

    def boom(ctx: RuleContext) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(rule, "analyse", boom)
    text = MATVEC.replace("matvec_self", "matvec_crash")  # not in the cache
    with caplog.at_level(logging.ERROR, logger=why_not_analyzer.__name__):
        rep = analyze_source("k.cu", text, use_compiler=False)
    assert not [f for f in rep.findings if f.code == "WF113"]
    assert any(f.code == "WF111" for f in rep.findings)  # the other analyzers still speak
    assert any("warp_reduce crashed" in r.getMessage() for r in caplog.records)


def test_hint_is_cached_by_kernel_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A big file: the first analysis asks the rules once per kernel; editing one kernel asks again for it only."""
    kernels = [MATVEC.replace("matvec_self", f"mv{i}") for i in range(12)]
    text = "\n".join(kernels)
    calls: list[str] = []
    real = why_not_analyzer._answer

    def counting(ctx: object, definition: str) -> object:
        calls.append(definition.split("(")[0])
        return real(ctx, definition)  # type: ignore[arg-type]

    monkeypatch.setattr(why_not_analyzer, "_answer", counting)
    t0 = time.perf_counter()
    first = [f for f in analyze_source("big.cu", text, use_compiler=False).findings if f.code == "WF113"]
    cold = time.perf_counter() - t0
    assert len(first) == 12 and len(calls) == 12
    # one more line in the second kernel: the kernels after it move down, their text and specs stay the same
    kernels[1] = kernels[1].replace("        y[i] = 0;\n", "        y[i] = 0;\n        y[i] = y[i] * 0;\n")
    edited = "\n".join(kernels)
    assert edited != text
    t0 = time.perf_counter()
    again = [f for f in analyze_source("big.cu", edited, use_compiler=False).findings if f.code == "WF113"]
    warm = time.perf_counter() - t0
    assert len(again) == 12 and len(calls) == 13, calls  # only the edited kernel (mv1) was asked again
    assert warm < cold


def test_hint_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "mv.cu"
    path.write_text(MATVEC)
    env = {"PYTHONPATH": str(ROOT / "server"), "PATH": "/usr/bin:/bin", "WARPFORGE_CACHE": str(tmp_path / "c")}
    out = subprocess.run([sys.executable, "-m", "warpforge", "hints", "--no-compile", "--json", str(path)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    findings = data["findings"] if isinstance(data, dict) else [f for r in data for f in r["findings"]]
    wf = [f for f in findings if f["code"] == "WF113"]
    loop = MATVEC.splitlines().index("        for (int j = 0; j < n; j++) {") + 1
    assert len(wf) == 1 and wf[0]["line"] == loop and "closest is lane_remap" in wf[0]["message"], wf


SMEM_INTERLEAVED = """\
// @warpforge size N = 1 << 20
// @warpforge arg v: in int[N]
// @warpforge arg v_r: out int[N / 256]
// @warpforge launch grid=N / 256, block=256
__global__ void sum_reduction(const int* v, int* v_r) {
    __shared__ int partial_sum[256];
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    partial_sum[threadIdx.x] = v[tid];
    __syncthreads();
    for (int s = 1; s < blockDim.x; s *= 2) {
        if (threadIdx.x % (2 * s) == 0) {
            partial_sum[threadIdx.x] += partial_sum[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        v_r[blockIdx.x] = partial_sum[0];
    }
}
"""


def test_a_remap_of_another_kind_of_kernel_is_not_the_closest() -> None:
    """A shared-memory tree reduction (a teaching kernel's interleaved stride): the remaps that bind a serial
    loop to threads decline it at the scope ("the kernel uses shared memory") and rank below the rules that
    got into the kernel's shape (on the wide yardstick "column_remap: the kernel uses shared memory" was the
    top closest reason, for 82 kernels)."""
    assert "warp_reduce" in explain([_ctx(SMEM_INTERLEAVED)]).proposed  # the interleaved tree is rewritten
    odd = SMEM_INTERLEAVED.replace("int s = 1;", "int s = 2;")  # a stride that is no tree
    v = explain([_ctx(odd)])
    assert v.closest is not None and v.closest.family not in {"lane_remap", "column_remap", "element_remap"}
    assert v.closest.stage >= Stage.SHAPE, v.closest
    reduce = next(d for d in v.declines if d.family == "warp_reduce")
    assert "neither halves down to 1" in reduce.reason and reduce.stage == v.closest.stage
    for fam in ("lane_remap", "column_remap", "element_remap"):
        d = _why(fam, SMEM_INTERLEAVED)
        assert d.reason.startswith("the kernel uses shared memory") and d.stage == Stage.SCOPE, d
