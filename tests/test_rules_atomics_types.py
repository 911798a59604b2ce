"""The element types ``atomic_aggregate`` reads (issue 27): a type alias chosen under ``#if`` (llm.c's ``floatX``,
``__nv_bfloat16`` when ``ENABLE_BF16`` is defined above it), ``__half`` and ``__nv_bfloat16`` themselves (a warp
shuffle moves them: ``cuda_fp16.h`` and ``cuda_bf16.h`` overload ``__shfl_*_sync``; their ``+`` and ``atomicAdd``
exist on sm_80 and newer, the builds' architecture); and the sizes of the ``long`` spellings and ``clock_t``. The
kernels are written for this test; each proposed child must build through the evaluator's CPU build path."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, load
from warpforge.policy.whynot import ask
from warpforge.spec.model import canonical_dtype
from warpforge.spec.resolve import load_spec

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

#: a bias gradient: each thread sums a column slice, then one atomicAdd per thread into the bias (llm.c's shape).
#: The inputs are -1, 0 or 1 and a bias gets at most ~150 of them (B and its perturbed size): every partial and
#: total is an integer half and bfloat16 hold exactly, so the atomics' order changes nothing. With normal inputs
#: the original itself was not deterministic on an H200 (256 bfloat16 atomicAdds of values near 1 differ by ~1
#: between runs), and the evaluator rightly refuses to verify against it.
BIAS = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
PRELUDE
// @warpforge size B = 128
// @warpforge size OC = 128
// @warpforge arg dout: in ELEM[B*OC] int(-1, 2)
// @warpforge arg dbias: inout ELEM[OC] zeros
// @warpforge arg rows = B
// @warpforge arg oc_n = OC
// @warpforge launch grid=(OC, 4), block=64
__global__ void k(ELEM* dbias, const ELEM* dout, int rows, int oc_n) {
  int oc = blockIdx.x;
  ELEM sum = (ELEM)0.0f;
  for (int r = blockIdx.y * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.y)
    sum += dout[r * oc_n + oc];
  atomicAdd(dbias + oc, sum);
}
"""

#: llm.c's alias: chosen by a define above it (the branch that holds is the one the compiler reads)
FLOATX = """#define ENABLE_BF16
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif"""

CASES = {
    "floatX_bf16": BIAS.replace("PRELUDE", FLOATX).replace("ELEM", "floatX"),
    "half": BIAS.replace("PRELUDE", "").replace("ELEM", "__half"),
    "bfloat16": BIAS.replace("PRELUDE", "").replace("ELEM", "__nv_bfloat16"),
}


def policy(text: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.require("k", "fixture.cu")
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text),
                         families={"atomic_aggregate"})


def children(text: str) -> tuple[OfflinePolicy, list[Candidate]]:
    pol = policy(text)
    return pol, [c for c in pol.propose_sync(pol.root_candidate()) if c.family == "atomic_aggregate"]


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_atomic_aggregate_reads_aliases_and_half_types_and_builds(case: str) -> None:
    pol, kids = children(CASES[case])
    assert kids, (pol.errors, _why(CASES[case]))
    for child in kids:
        r = ca.EvaluatorBuild(pol).check(child)
        assert r.ok, (child.steps, r.stage, r.reason[-2000:], child.definition)


def _why(text: str) -> str:
    load()
    pol = policy(text)
    d = ask(REGISTRY["atomic_aggregate"], pol.context(pol.root_candidate()))
    return d.reason if d is not None else ""


@pytest.mark.parametrize(("spelled", "dtype"), [
    ("clock_t", "int64"), ("long", "int64"), ("long long", "int64"), ("unsigned long", "uint64"),
    ("unsigned long int", "uint64"), ("long unsigned int", "uint64"), ("unsigned long long int", "uint64"),
    ("long long unsigned int", "uint64"), ("short int", "int16"), ("unsigned short int", "uint16"),
    ("ssize_t", "int64"), ("intptr_t", "int64"), ("uintptr_t", "uint64"), ("const clock_t", "int64"),
])
def test_long_spellings_and_clock_t_have_their_sizes(spelled: str, dtype: str) -> None:
    assert canonical_dtype(spelled) == dtype
