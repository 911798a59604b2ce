"""The IR under the rules: for each spelling of other people's code that the structural rules used to miss,
the offline policy (which hands a rule the candidate lowered by policy.ir when it finds nothing in the
candidate itself) now proposes the structural rewrite, the rewrite keeps the kernel's signature, and it
builds with nvcc. Each case also checks that it is the lowering that makes the difference (without it, the
family proposes nothing). Numerics are verified on the GPU by the search like any candidate."""

from __future__ import annotations

import pytest

from conftest import needs_nvcc
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.extract import standalone
from warpforge.cuda.types import type_aliases
from warpforge.gpu.guards import signature_findings
from warpforge.policy.offline import OfflinePolicy
from warpforge.spec.resolve import load_spec

ELEMENTWISE = """// @warpforge size N = 1 << 20
// @warpforge arg y: out float[N]
// @warpforge arg x: in float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
"""
ROWS = """// @warpforge size R = 4096
// @warpforge size C = 1024
// @warpforge arg y: out float[R]
// @warpforge arg A: in float[R*C]
// @warpforge arg x: in float[C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(R, 128), block=128
"""
ROW_KERNEL = "__global__ void k(float* y, const float* A, const float* x, int rows, int cols) {\n"

CASES: dict[str, tuple[str, str]] = {
    # a grid-stride loop macro and a type macro (the preprocessor)
    "loop_macro": ("vectorize",
                   "#define KERNEL_LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); "
                   "i += blockDim.x * gridDim.x)\n#define ELEM float\n" + ELEMENTWISE +
                   "__global__ void k(ELEM* y, const ELEM* x, int n) {\n  KERNEL_LOOP(i, n) {\n"
                   "    y[i] = 2.0f * x[i] + 1.0f;\n  }\n}\n"),
    "while_grid_stride": ("vectorize", ELEMENTWISE +
                          "__global__ void k(float* y, const float* x, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  while (i < n) {\n    y[i] = x[i] * x[i];\n    i += blockDim.x * gridDim.x;\n  }\n}\n"),
    # the grid-stride loop of NVIDIA's blog and samples: its start and step held in locals
    "grid_stride_locals": ("vectorize", ELEMENTWISE +
                           "__global__ void k(float* y, const float* x, int n) {\n"
                           "  int index = blockIdx.x * blockDim.x + threadIdx.x;\n"
                           "  const int numThreads = gridDim.x * blockDim.x;\n"
                           "  for (int i = index; i < n; i += numThreads)\n    y[i] = x[i] + y[i];\n}\n"),
    "typedef_signature": ("vectorize", "typedef float real;\n" + ELEMENTWISE +
                          "__global__ void k(real* y, const real* x, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] + 1.0f;\n}\n"),
    "flattened_2d_index": ("vectorize", ELEMENTWISE +
                           "__global__ void k(float* y, const float* x, int n) {\n"
                           "  int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;\n"
                           "  if (i < n) y[i] = x[i] * 3.0f;\n}\n"),
    "global_accumulator": ("warp_per_row", ROWS + ROW_KERNEL +
                           "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  int j;\n  if (r < rows) {\n"
                           "    y[r] = 0;\n    for (j = 0; j < cols; j++) y[r] += A[r * cols + j] * x[j];\n  }\n}\n"),
    "device_function_loop": ("warp_per_row",
                             "__device__ float dot(const float* a, const float* b, int n) {\n  float s = 0.0f;\n"
                             "  for (int j = 0; j < n; j++) s += a[j] * b[j];\n  return s;\n}\n" + ROWS + ROW_KERNEL +
                             "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r < rows) {\n"
                             "    float v = dot(A + r * cols, x, cols);\n    y[r] = v;\n  }\n}\n"),
    "bumped_row_index": ("warp_per_row", ROWS + ROW_KERNEL +
                         "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r >= rows) return;\n"
                         "  int off = r * cols;\n  float s = 0.0f;\n"
                         "  for (int j = 0; j < cols; j++) { s += A[off] * x[j]; off += 1; }\n  y[r] = s;\n}\n"),
    "bumped_column_index": ("column_split", """// @warpforge size R = 4096
// @warpforge size C = 1024
// @warpforge arg y: out float[C]
// @warpforge arg A: in float[R*C]
// @warpforge arg rows = R
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(C, 128), block=128
__global__ void k(float* y, const float* A, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  int at = c;
  float s = 0.0f;
  for (int j = 0; j < rows; j++) { s += A[at]; at += cols; }
  y[c] = s;
}
"""),
    # darknet's spelling of a grid-stride loop: the counter declared before a `for` with no initializer
    "counter_before_loop": ("lane_remap", ROWS + ROW_KERNEL +
                            "  int r = blockIdx.x * blockDim.x + threadIdx.x;\n"
                            "  for (; r < rows; r += blockDim.x * gridDim.x) {\n    float s = 0.0f;\n"
                            "    for (int j = 0; j < cols; j++) s += A[r * cols + j] * x[j];\n    y[r] = s;\n  }\n}\n"),
    "multi_term_view": ("warp_per_row", """// @warpforge size B = 8
// @warpforge size T = 256
// @warpforge size C = 768
// @warpforge arg out: out float[B*T]
// @warpforge arg inp: in float[B*T*C]
// @warpforge arg nb = B
// @warpforge arg nt = T
// @warpforge arg nc = C
// @warpforge launch grid=(cdiv(T, 64), B), block=64
__global__ void k(float* out, const float* inp, int nb, int nt, int nc) {
  int b = blockIdx.y;
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nt) return;
  const float* x = inp + b * nt * nc + t * nc;
  float m = 0.0f;
  for (int i = 0; i < nc; i++) m += x[i];
  out[b * nt + t] = m / nc;
}
"""),
}


def policy(text: str, family: str) -> OfflinePolicy:
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel("k")
    assert k is not None
    return OfflinePolicy("fixture.cu", src, model, k, load_spec("fixture.cu", "k", text=text), families={family})


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_structural_rule_fires_on_the_lowered_spelling_and_builds(case: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    family, text = CASES[case]
    pol = policy(text, family)
    children = pol.propose_sync(pol.root_candidate())
    assert children and {c.family for c in children} == {family}, (case, pol.errors)
    aliases = type_aliases(pol.source, pol.model)
    child = children[0]
    assert signature_findings(pol.kernel, child.definition, aliases) == []
    # parameters the rewrite left alone are spelled as the user wrote them (lowering resolved them)
    assert [p.text for p in parse(child.definition).kernels[0].params] == [p.text for p in pol.kernel.params]
    tu = standalone(pol.source, pol.model, pol.kernel, definition=child.definition, filename=pol.file)
    res = compile_cubin(tu, arch="sm_90", defines={t.name: t.values[0] for t in pol.spec.tunables},
                        filename=pol.file)
    assert res.ok and res.entry_symbol("k") is not None, res.log[-2000:]
    # without the lowering the family had nothing to propose: the IR is what made the difference (but for a
    # typedef'd signature, which the rules now read through the file's aliases themselves: `resolved_type`)
    monkeypatch.setattr(OfflinePolicy, "lowered", lambda self, c: None)
    again = policy(text, family)
    assert (again.propose_sync(again.root_candidate()) == []) == (case != "typedef_signature")
