"""A scripted model for the LLM tests, and an evaluator with SYNTHETIC speedups (compiles with real nvcc).

The script plays planner, coder, fixer and reflector for ``kernels/saxpy.cu``: the planner proposes a
float4 vectorization (a known-better variant) and a grid-stride loop; the coder writes the vectorized kernel
correctly and the grid-stride one with an undeclared identifier (a compile error nvcc reports), which the
fixer then repairs. The evaluator is LABELLED SYNTHETIC everywhere it reports: it compiles each candidate
with the real nvcc (a candidate that does not compile fails for real) and assigns a fixed speedup per
family instead of timing on a GPU. Real speedups come from the GPU evaluator on the GPU machine.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from typing import Any

from fakes.anthropic_server import Reply, Request, tool
from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone

SYNTHETIC = "SYNTHETIC speedup (deterministic test evaluator, no GPU)"

VECTORIZED = '''extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        float4 xv = *reinterpret_cast<const float4*>(x + i);
        float4 yv = *reinterpret_cast<float4*>(y + i);
        yv.x = a * xv.x + yv.x;
        yv.y = a * xv.y + yv.y;
        yv.z = a * xv.z + yv.z;
        yv.w = a * xv.w + yv.w;
        *reinterpret_cast<float4*>(y + i) = yv;
    } else {
        for (int j = i; j < n; j++) {
            y[j] = a * x[j] + y[j];
        }
    }
}
'''

BROKEN = '''extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * xs[i] + y[i];
    }
}
'''

FIXED = BROKEN.replace("xs[i]", "x[i]")

VEC_HYP = {"title": "Load and store x and y as float4", "family": "vectorize",
           "rationale": "memory-bound at 0.17 FLOP/byte: 4x fewer load/store instructions",
           "change": "each thread handles 4 consecutive elements with float4, scalar tail; grid cdiv(N, 1024)",
           "expected_gain": "1.2-1.5x", "risk": "the tail when N is not a multiple of 4"}
GS_HYP = {"title": "Grid-stride loop over the elements", "family": "grid_stride",
          "rationale": "fewer, longer-lived blocks", "change": "a grid-stride loop with a grid of 4 blocks per SM",
          "expected_gain": "1.05x", "risk": "none"}


def saxpy_model(req: Request) -> Reply:
    """The scripted model (see the module docstring); unknown requests get an empty plan."""
    role = req.role
    first = req.first_user_text
    if role == "planner":
        if "The current variant is the original kernel" in first:
            return tool("propose_hypotheses", {"hypotheses": [VEC_HYP, GS_HYP]},
                        thinking="Bandwidth-bound elementwise kernel; widen the accesses.")
        return tool("propose_hypotheses", {"hypotheses": []})
    if role == "coder":
        if "float4" in first:
            return tool("submit_kernel", {"code": VECTORIZED, "grid": ["cdiv(N, 1024)"], "block": [], "smem": "",
                                          "notes": "4 elements per thread"})
        return tool("submit_kernel", {"code": BROKEN, "grid": ["132 * 4"], "block": [], "smem": "",
                                      "notes": "grid-stride loop"})
    if role == "fixer":
        return tool("submit_kernel", {"code": FIXED, "grid": ["132 * 4"], "block": [], "smem": "",
                                      "notes": "xs was a typo for x"})
    if role == "reflector":
        return tool("record_lessons", {"lessons": [
            {"family": "llm:vectorize", "outcome": "faster", "lesson": "float4 accesses cut the memory instructions"}]})
    return Reply(status=400, error_type="invalid_request_error", message=f"unscripted role {role!r}")


#: family -> SYNTHETIC speedup
FACTORS = {"original": 1.0, "llm:vectorize": 1.6, "llm:grid_stride": 1.05}


@dataclass(frozen=True)
class SyntheticEvaluation:
    status: str
    reason: str
    speedup: float | None
    gpu: str = SYNTHETIC
    evidence: dict[str, Any] = field(default_factory=dict)


class SyntheticEvaluator:
    """Compiles with the real nvcc (when present); speedups are SYNTHETIC, per family (see FACTORS)."""

    gpu_name = SYNTHETIC

    def __init__(self, text: str, kernel: str, *, compile: bool = True, factors: dict[str, float] | None = None,
                 fail: dict[str, SyntheticEvaluation] | None = None) -> None:
        self.src = SourceText(text)
        self.model = parse(self.src.data)
        k = self.model.kernel(kernel)
        assert k is not None
        self.kernel = k
        self.compile = compile and shutil.which("nvcc") is not None
        self.factors = {**FACTORS, **(factors or {})}
        self.fail = fail or {}
        self.seen: list[Candidate] = []

    async def evaluate(self, c: Candidate) -> SyntheticEvaluation:
        self.seen.append(c)
        if self.compile:
            unit = standalone(self.src, self.model, self.kernel, definition=c.source, filename="kernel.cu")
            build = await asyncio.to_thread(compile_cubin, unit, arch="sm_90", defines=dict(c.defines),
                                            flags=list(c.flags), filename="kernel.cu")
            if not build.ok:
                msg = next((m.text for m in build.messages if m.severity == "error"), "compile error")
                return SyntheticEvaluation("compile_error", msg, None)
        if c.family in self.fail:
            return self.fail[c.family]
        return SyntheticEvaluation("ok", SYNTHETIC, self.factors.get(c.family, 1.01))

    async def aclose(self) -> None:
        return None


def make_saxpy_evaluator(req: Any) -> SyntheticEvaluator:
    """``python:fakes.llm_script:make_saxpy_evaluator`` — the plug-in form the suite and the server accept."""
    return SyntheticEvaluator(req.text, req.kernel)
