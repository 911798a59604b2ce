"""loop_private_scalars (policy.ir.pass_private) and the accumulators the remaps read (remap.accumulator_update).

The pass moves a local declared at the top of a kernel (C89 style) into the loop whose every iteration writes it
before reading it; each kernel below is written here in a style of its own. What must stay where it is (a value
that flows between iterations or out of the loop, an address taken, a member read first) is checked as
carefully as what moves. Then the remaps propose on a neighbour-gathering kernel written that way, and the
candidate builds with nvcc."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import NVCC, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.cuda.tree import walk
from warpforge.policy.ir import Lowered, lower
from warpforge.policy.ir.passes import find_kernel
from warpforge.policy.ir.remap import NotLegal, Update, accumulator_update, carried_scalars
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.whynot import structural_rules
from warpforge.spec.resolve import load_spec

SIG = "__global__ void k(float* y, const float* x, const int* idx, int n, int m) {\n"


def low(body: str) -> Lowered:
    got = lower(SIG + body + "}\n", "k", preprocess=False)
    assert isinstance(got, Lowered), got
    return got


def moved(got: Lowered) -> str:
    return " ".join(a for a in got.applied if a.startswith("loop_private_scalars"))


def squash(s: str) -> str:
    return " ".join(s.split())


def test_a_scalar_written_first_in_every_iteration_is_declared_by_its_first_write() -> None:
    got = low("  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  int j, nb;\n  float t;\n  float acc = 0.0f;\n"
              "  for (j = 0; j < m; j++) {\n    nb = idx[i * m + j];\n    t = x[nb];\n    acc += t * t;\n  }\n"
              "  y[i] = acc;\n")
    t = squash(got.text)
    assert "`nb`, `t`" in moved(got)
    assert "int nb = idx[i * m + j];" in t and "float t = x[nb];" in t
    assert "int nb;" not in t and "float t;" not in t and "int j, nb" not in t
    assert "float acc = 0.0f;" in t  # the accumulator is carried: it stays


def test_written_in_both_arms_is_declared_at_the_top_of_the_body() -> None:
    got = low("  int i = threadIdx.x;\n  float f;\n  for (int j = 0; j < m; j++) {\n"
              "    if (idx[j] > 0) { f = x[j]; } else f = 2.0f;\n    y[i * m + j] = f;\n  }\n")
    t = squash(got.text)
    assert "for (int j = 0; j < m; j++) { float f; if (idx[j] > 0)" in t
    assert t.count("float f") == 1


@pytest.mark.parametrize(("body", "why"), [
    # written in one arm only: the other path reads last iteration's value
    ("  float f = 0.0f;\n  for (int j = 0; j < m; j++) {\n    if (idx[j] > 0) f = x[j];\n    y[j] = f;\n  }\n",
     "`f` is read"),
    # read after the loop: its last value flows out
    ("  float f;\n  for (int j = 0; j < m; j++) {\n    f = x[j];\n    y[j] = f;\n  }\n  y[0] = f;\n",
     "used outside a loop"),
    # read before it is written: carried from the previous iteration
    ("  float f = 0.0f;\n  for (int j = 0; j < m; j++) {\n    y[j] = f;\n    f = x[j];\n  }\n", "`f` is read"),
    # its address is taken: a write through the pointer is not seen
    ("  float f;\n  float* p = &f;\n  for (int j = 0; j < m; j++) {\n    *p = x[j];\n    y[j] = f;\n  }\n", ""),
    # written only in a nested loop that may run zero times, then read
    ("  float f;\n  for (int j = 0; j < m; j++) {\n    for (int q = 0; q < n; q++) f = x[q];\n    y[j] = f;\n"
     "  }\n", "`f` is read"),
    # named in the loop's header: the condition reads it before the body writes it
    ("  int f = 0;\n  for (int j = 0; j < f + m; j++) {\n    f = idx[j];\n    y[j] = f;\n  }\n", ""),
    # a continue reaches the update with nothing written
    ("  float f;\n  for (int j = 0; j < m; j++) {\n    if (idx[j] < 0) continue;\n    f = x[j];\n    y[j] = f;\n"
     "  }\n  y[0] = f;\n", "used outside a loop"),
])
def test_a_value_that_may_flow_between_iterations_or_out_stays(body: str, why: str) -> None:
    got = low(body)
    assert not moved(got), got.text
    if why:
        reasons = [r for p, r, _ in got.skipped if p == "loop_private_scalars"]
        assert not reasons or any(why in r for r in reasons) or "used outside" in why, reasons


def test_a_path_that_ends_with_continue_before_the_write_is_still_private() -> None:
    got = low("  float f;\n  for (int j = 0; j < m; j++) {\n    if (idx[j] < 0) continue;\n    f = x[j];\n"
              "    y[j] = f * f;\n  }\n")
    assert "float f = x[j];" in got.text and "`f`" in moved(got)


def test_a_struct_with_every_member_written_first_moves_one_read_first_stays() -> None:
    got = low("  int i = threadIdx.x;\n  float3 v;\n  float s = 0.0f;\n  for (int j = 0; j < m; j++) {\n"
              "    v.x = x[3 * j];\n    v.y = x[3 * j + 1];\n    v.z = x[3 * j + 2];\n"
              "    float3 w = v;\n    s += w.x * v.y + v.z;\n  }\n  y[i] = s;\n")
    t = squash(got.text)
    assert "{ float3 v; v.x = x[3 * j];" in t and "`v`" in moved(got)
    kept = low("  int i = threadIdx.x;\n  float3 v;\n  float s = 0.0f;\n  for (int j = 0; j < m; j++) {\n"
               "    v.x = x[3 * j];\n    v.y = x[3 * j + 1];\n    s += v.x + v.z;\n  }\n  y[i] = s;\n")
    assert not moved(kept)
    assert any("`v.z` is read" in r for p, r, _ in kept.skipped if p == "loop_private_scalars")
    # a whole read needs every member of the vector type: two of three are not enough
    partial = low("  float3 v;\n  for (int j = 0; j < m; j++) {\n    v.x = x[j];\n    v.y = x[j];\n"
                  "    y[j] = length(v);\n  }\n")
    assert not moved(partial)


def test_nested_loops_private_to_the_outer_and_reused_by_two_loops() -> None:
    # s is carried across the inner loop but starts again in every outer iteration: private to the outer one
    got = low("  int i = threadIdx.x;\n  int r, c;\n  float s;\n  for (r = 0; r < n; r++) {\n    s = 0.0f;\n"
              "    for (c = 0; c < m; c++) s += x[r * m + c];\n    y[r] = s;\n  }\n")
    t = squash(got.text)
    assert "for (int r = 0; r < n; r++) { float s = 0.0f;" in t
    # one temporary, two loops: each gets its own
    two = low("  float t;\n  for (int j = 0; j < m; j++) {\n    t = x[j];\n    y[j] = t;\n  }\n"
              "  for (int j = 0; j < n; j++) {\n    t = 2.0f * x[j];\n    y[j] += t;\n  }\n")
    assert squash(two.text).count("float t = ") == 2 and "float t;" not in two.text


def test_a_while_loop_temporary_moves_and_the_counter_stays() -> None:
    got = low("  int i = threadIdx.x;\n  int k = 0;\n  float v;\n  while (k < m) {\n    v = x[k];\n    y[k] = v;\n"
              "    k += 2;\n  }\n  y[i] = k;\n")
    assert "float v = x[k];" in got.text and "int k = 0;" in got.text


# -- the accumulators, spelled the long way ------------------------------------------------------------------

def update(stmt: str, type_: str = "float") -> Update | None:
    """``accumulator_update`` on the loop's assignment ``stmt`` of the accumulator ``s``."""
    text = (f"__global__ void k(float* x, int m) {{\n  {type_} s;\n"
            f"  for (int j = 0; j < m; j++) {{\n    {stmt}\n  }}\n}}\n")
    k = find_kernel(text, "k")
    assert k is not None
    (n,) = walk(k.body, ("assignment_expression",))
    return accumulator_update(n, "s", type_, k)


def test_sum_written_as_s_equals_s_plus_e() -> None:
    assert update("s = s + x[j] * 2.0f;") == Update("sum", 2)


def test_sum_written_as_s_equals_e_plus_s() -> None:
    assert update("s = x[j] * x[j] + s;") == Update("sum", 2)
    assert update("s = x[j] - s;") is None  # s subtracted: not a sum of the partials


def test_maximum_through_fmaxf() -> None:
    assert update("s = fmaxf(s, x[j]);") == Update("fmaxf", 2)


def test_maximum_through_max_with_the_accumulator_second() -> None:
    assert update("s = max(x[j], s);", "int") == Update("max", 2)


def test_maximum_and_minimum_through_a_conditional() -> None:
    assert update("s = s > x[j] ? s : x[j];") == Update("fmaxf", 3)
    assert update("s = x[j] < s ? x[j] : s;", "double") == Update("fmin", 3)
    assert update("s = s > x[j] ? x[j] : s;", "int") == Update("min", 3)
    assert update("s = s > x[j] ? s : x[j + 1];") is None  # compares one value and keeps another


def test_a_vector_sum_declines_with_its_reason() -> None:
    text = ("__global__ void k(float2* y, const float2* p, const float* w, int m) {\n  int i = threadIdx.x;\n"
            "  float2 pos = make_float2(0.0f, 0.0f);\n  for (int j = 0; j < m; j++) pos = pos + w[j] * p[i * m + j];\n"
            "  y[i] = pos;\n}\n")
    k = find_kernel(text, "k")
    assert k is not None
    loop = next(n for n in k.body.named_children if n.type == "for_statement")
    body = loop.child_by_field_name("body")
    assert body is not None
    got = carried_scalars(body, "j", k, {}, elements=True)
    assert isinstance(got, NotLegal) and "`pos` has type `float2`" in got.reason
    assert "a vector type: each of its members (x, y) would need a shuffle" in got.reason


# -- the remaps on a neighbour-gathering kernel in C89 style -------------------------------------------------

NEIGHBOURS = """// @warpforge size N = 65536
// @warpforge size NNB = 64
// @warpforge arg flux: out float[N]
// @warpforge arg ese: in int[N*NNB] int(0, N)
// @warpforge arg w: in float[N*NNB]
// @warpforge arg var: in float[N]
// @warpforge arg n = N
// @warpforge arg nnb = NNB
// @warpforge launch grid=cdiv(N, 128), block=128
__global__ void k(float* flux, const int* ese, const float* w, const float* var, int n, int nnb) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j, nb;
  float f, d;
  float acc = 0.0f;
  if (i >= n) return;
  for (j = 0; j < nnb; j++) {
    nb = ese[AT];
    f = w[AT];
    d = var[i] - var[nb];
    acc = acc + f * d;
  }
  flux[i] = acc;
}
"""


def proposals(text: str) -> list[tuple[str, str]]:
    src = SourceText(text)
    model = parse(src.data)
    kern = model.kernel("k")
    assert kern is not None
    pol = OfflinePolicy("fixture.cu", src, model, kern, load_spec("fixture.cu", "k", text=text),
                        families={r.family for r in structural_rules()})
    return [(c.family, c.definition) for c in pol.propose_sync(pol.root_candidate())]


@needs_nvcc
@pytest.mark.parametrize(("at", "family"), [("i * nnb + j", "lane_remap"), ("i + j * n", "column_remap")])
def test_remaps_propose_on_a_c89_neighbour_loop_and_the_candidate_builds(at: str, family: str,
                                                                         tmp_path: Path) -> None:
    got = dict(proposals(NEIGHBOURS.replace("AT", at)))
    assert family in got, sorted(got)
    text = got[family]
    assert "int nb = ese[" in text and "float f = w[" in text
    cu = tmp_path / "k.cu"
    cu.write_text(text)
    assert NVCC is not None
    r = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_copy_whose_member_is_written_is_not_propagated() -> None:
    """``float3 w = v; w.x += 1`` changes the copy alone: reading ``w`` as ``v`` would change ``v`` (found here:
    copy_propagation counted plain writes only)."""
    got = low("  float3 v = make_float3(x[0], x[1], x[2]);\n  float3 w = v;\n  w.x += 1.0f;\n  y[0] = w.x + v.x;\n")
    assert "float3 w = v;" in got.text and "w.x += 1.0f;" in got.text


def test_a_local_named_in_a_later_declarator_of_its_own_declaration_stays() -> None:
    got = low("  float t, u = t;\n  for (int j = 0; j < m; j++) {\n    t = x[j];\n    y[j] = t + u;\n  }\n")
    assert "float t, u = t;" in got.text and not moved(got)


FLUX3 = """// @warpforge size N = 65536
// @warpforge size NNB = 64
// @warpforge arg flux: out float[3*N]
// @warpforge arg ese: in int[N*NNB] int(0, N)
// @warpforge arg var: in float[3*N]
// @warpforge arg n = N
// @warpforge arg nnb = NNB
// @warpforge launch grid=cdiv(N, 128), block=128
__global__ void k(float* flux, const int* ese, const float* var, int n, int nnb) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j, nb;
  float3 d, acc;
  if (i >= n) return;
  acc.x = 0.0f; acc.y = 0.0f; acc.z = 0.0f;
  for (j = 0; j < nnb; j++) {
    nb = ese[i + j * n];
    d.x = var[3 * nb] - var[3 * i];
    d.y = var[3 * nb + 1] - var[3 * i + 1];
    d.z = var[3 * nb + 2] - var[3 * i + 2];
    acc.x += d.x;
    acc.y = acc.y + d.y;
    acc.z = fmaxf(acc.z, d.z);
  }
  flux[i] = acc.x; flux[n + i] = acc.y; flux[2 * n + i] = acc.z;
}
"""


@needs_nvcc
def test_a_vector_accumulated_member_by_member_is_combined_member_by_member(tmp_path: Path) -> None:
    """``acc.x += e`` of a ``float3`` declared outside the loop: each member its own sum (or maximum), combined
    by itself; the temporaries ``nb`` and ``d`` are the iteration's own (Rodinia's cfd, written here)."""
    got = dict(proposals(FLUX3))
    assert "column_remap" in got, sorted(got)
    text = got["column_remap"]
    assert "float3 d;" in text and "int nb = ese[" in text
    assert "__shared__ float wfc_acc__x[" in text and "acc.z = fmaxf(acc.z, wfc_acc__z[" in text
    cu = tmp_path / "k.cu"
    cu.write_text(text)
    assert NVCC is not None
    r = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_vector_read_whole_besides_its_member_sums_is_carried() -> None:
    text = ("__global__ void k(float3* y, const float* x, int m) {\n  int i = threadIdx.x;\n  float3 acc;\n"
            "  acc.x = 0.0f; acc.y = 0.0f; acc.z = 0.0f;\n"
            "  for (int j = 0; j < m; j++) { acc.x += x[i * m + j]; y[j] = acc; }\n  y[i] = acc;\n}\n")
    k = find_kernel(text, "k")
    assert k is not None
    loop = next(n for n in k.body.named_children if n.type == "for_statement")
    body = loop.child_by_field_name("body")
    assert body is not None
    got = carried_scalars(body, "j", k, {}, elements=True)
    assert isinstance(got, NotLegal) and "reads it whole" in got.reason


@pytest.mark.parametrize("body", [
    # a switch: its paths (fall-through, cases) are not followed
    "  int t;\n  for (int j = 0; j < m; j++) {\n    switch (idx[j]) { case 0: t = 1; break; default: t = 2; }\n"
    "    y[j] = t;\n  }\n",
    # a do-while whose condition reads it after a `continue` that skipped the write
    "  float t;\n  for (int j = 0; j < m; j++) {\n    do { if (idx[j] > 0) continue; t = x[j]; } while (t > 0.0f);\n"
    "  }\n",
    # a static local keeps its value between calls
    "  static float t;\n  for (int j = 0; j < m; j++) {\n    t = x[j];\n    y[j] = t;\n  }\n",
    # an array: elements are not followed
    "  float t[2];\n  for (int j = 0; j < m; j++) {\n    t[0] = x[j];\n    y[j] = t[0];\n  }\n",
])
def test_shapes_the_walk_does_not_follow_stay(body: str) -> None:
    assert not moved(low(body))


def test_a_do_while_body_that_always_writes_counts_after_it() -> None:
    got = low("  float t;\n  for (int j = 0; j < m; j++) {\n    int q = 0;\n"
              "    do { t = x[j + q]; q++; } while (q < 2);\n    y[j] = t;\n  }\n")
    assert "`t`" in moved(got) and "float t;" in squash(got.text).split("for (int j = 0; j < m; j++) {")[1]


def test_a_struct_that_is_no_vector_accumulated_member_wise_is_named_with_its_type() -> None:
    text = ("struct Acc { float a; float b; };\n__global__ void k(float* y, const float* x, int m) {\n"
            "  int i = threadIdx.x;\n  Acc s;\n  s.a = 0.0f;\n"
            "  for (int j = 0; j < m; j++) s.a += x[i * m + j];\n  y[i] = s.a;\n}\n")
    k = find_kernel(text, "k")
    assert k is not None
    loop = next(n for n in k.body.named_children if n.type == "for_statement")
    body = loop.child_by_field_name("body")
    assert body is not None
    got = carried_scalars(body, "j", k, {}, elements=True)
    assert isinstance(got, NotLegal) and "its type `Acc` is not a CUDA vector" in got.reason


def test_a_typedef_of_a_vector_type_is_followed_member_by_member() -> None:
    """``typedef float2 cData;`` (NVIDIA's fluidsGL): writing ``.x`` and ``.y`` writes the whole value."""
    got = lower("typedef float2 cData;\n__global__ void k(cData* v, const float* x, int m) {\n  cData t;\n"
                "  for (int j = 0; j < m; j++) {\n    t.x = x[2 * j];\n    t.y = x[2 * j + 1];\n"
                "    v[j] = t;\n  }\n}\n", "k", preprocess=False)
    assert isinstance(got, Lowered) and "`t`" in moved(got)
