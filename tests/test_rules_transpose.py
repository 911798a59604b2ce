"""smem_transpose decided on the lowered kernel (``policy.ir.transpose``): transposes in the styles other people
write (a 2-D grid in several spellings, a per-thread tile loop, a thread per item with a field loop in either
direction, a flat index split by ``/`` and ``%``) are proposed, keep the signature, launch 32-wide tiles and build
through the evaluator's CPU build path (static guards, the launch at both verified sizes, nvcc for sm_90); kernels
that are not transposes or cannot be staged legally get no proposal and a decline in words. Numerics and speed are
checked on the GPU (``test_rules_transpose_gpu.py``)."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from transpose_kernels import NOT_TRANSPOSES, TRANSPOSES
from warpforge.cuda import SourceText, parse
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load, smem_transpose
from warpforge.policy.whynot import explain
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

load()


def policy(text: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text),
                         families={"smem_transpose"})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(TRANSPOSES))
def test_transposes_are_staged_through_a_tile_and_build(case: str) -> None:
    pol = policy(TRANSPOSES[case])
    children = pol.propose_sync(pol.root_candidate())
    assert [c.steps[-1] for c in children] == ["smem_transpose:b32x8", "smem_transpose:b32x16"], (case, pol.errors)
    for child in children:
        text = child.definition
        rows = child.steps[-1].rsplit("x", 1)[1]
        assert child.block == ("32", rows) and child.grid is not None
        # tiles over x and y; a batch keeps the grid's z
        assert child.grid[2:] == (("NB",) if case.startswith("batched") else ()), child.grid
        assert all(g.startswith("cdiv(") and g.endswith(", 32)") for g in child.grid[:2]), child.grid
        # one barrier, outside every branch: between the two phase loops at the body's top level
        assert text.count("__syncthreads();") == 1 and "\n    __syncthreads();\n" in text
        assert "wfx_tile[wfx_r][threadIdx.x] = " in text and "wfx_tile[threadIdx.x][wfx_r]" in text
        assert "[32][33]" in text and "return" not in text.split("{", 1)[1]
        assert [p.text for p in parse(text).kernels[0].params] == [p.text for p in pol.kernel.params]
        got = ca.EvaluatorBuild(pol).check(child)
        assert got.ok, (case, child.steps, got.stage, got.reason[-2000:], text)


def test_the_store_keeps_its_expression_and_the_reads_come_from_the_tile() -> None:
    pol = policy(TRANSPOSES["grid2d_exit"])
    text = pol.propose_sync(pol.root_candidate())[0].definition
    # both reads of the source at the transposed index, the scalar arithmetic kept
    assert "out[rows * x + y] = s * wfx_tile[threadIdx.x][wfx_r] - wfx_tile[threadIdx.x][wfx_r];" in text
    assert "const float s = scale * 0.5f + 1.0f;" in text and "if (x >= cols || y >= rows) continue;" in text
    ldg = policy(TRANSPOSES["grid2d_template_ldg"]).propose_sync(policy(TRANSPOSES["grid2d_template_ldg"])
                                                                 .root_candidate())[0].definition
    # a load intrinsic's whole call is the read: the tile is not loaded through __ldg (a shared address)
    assert "__ldg(&in[y * cols + x])" in ldg and "__ldg(&wfx_tile" not in ldg and "__shared__ float wfx_tile" in ldg


def test_the_tile_loop_binds_the_counter_to_zero_and_the_item_loop_binds_it_to_the_tile() -> None:
    pol = policy(TRANSPOSES["tile_loop"])
    text = pol.propose_sync(pol.root_candidate())[0].definition
    assert "int xIndex = wfx_u;" in text and "int yIndex = wfx_v;" in text and "const int i = 0;" in text
    pol = policy(TRANSPOSES["item_loop"])
    child = pol.propose_sync(pol.root_candidate())[0]
    assert "int point_id = wfx_v;" in child.definition and "const int i = wfx_u;" in child.definition
    assert "if (!(i < nfeatures)) continue;" in child.definition
    # the features along the tile's x, the points along its y
    assert child.grid == ("cdiv((F), 32)", "cdiv(P, 32)")
    pol = policy(TRANSPOSES["flat_div_mod"])
    flat = pol.propose_sync(pol.root_candidate())[0].definition
    assert "if (wfx_u >= (cols)) continue;" in flat and "int idx = wfx_v * (cols) + wfx_u;" in flat


def reason(text: str) -> str:
    pol = policy(text)
    assert pol.propose_sync(pol.root_candidate()) == []
    norm = pol.normalized(pol.root_candidate())
    ctx = pol.context(norm if norm is not None else pol.root_candidate())
    got = smem_transpose.why_not(ctx)
    assert isinstance(got, NotLegal), got
    return got.reason


@pytest.mark.parametrize("case", sorted(NOT_TRANSPOSES))
def test_declines_say_why(case: str) -> None:
    text, words = NOT_TRANSPOSES[case]
    assert words in reason(text), case


def test_the_why_not_hint_names_the_transpose_decline() -> None:
    """The editor's hint and the funnel ask every rule through ``policy.whynot``: the words reach them."""
    text, _ = NOT_TRANSPOSES["copy_tile_loop"]
    pol = policy(text)
    norm = pol.normalized(pol.root_candidate())
    ctxs = [pol.context(pol.root_candidate())] + ([pol.context(norm)] if norm is not None else [])
    got = explain(ctxs, rules=[r for r in REGISTRY.values() if r.family == "smem_transpose"])
    assert not got.proposed and got.closest is not None and got.closest.family == "smem_transpose"
    assert "not a transpose" in got.closest.reason, got
