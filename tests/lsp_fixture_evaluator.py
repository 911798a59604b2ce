"""DETERMINISTIC EVALUATOR FIXTURE for the language-server tests on machines without a GPU (CI).

Labelled as such everywhere it shows: its GPU name says "deterministic fixture (no GPU)". It builds each
candidate with the real nvcc (so a candidate that does not compile fails for real), and assigns a fixed
synthetic speedup per transformation family instead of timing on a GPU. On the GPU machine the same
tests run with the real evaluator (``-m gpu``).

Knobs (environment): WARPFORGE_FIXTURE_DELAY seconds per evaluation (default 0.05; the cancellation test
makes it slow). WARPFORGE_FIXTURE_BASE_MS, when set, gives every evaluation a SYNTHETIC timing report: the
original takes that many ms and a variant that over its synthetic speedup, against a copy bandwidth of
WARPFORGE_FIXTURE_PEAK_GBPS (default 3000) — what the physical-limit tests read; nothing is timed.
A candidate of ``launch_bounds`` alone comes back ok but PARTLY CHECKED (``verified`` False), as the real
evaluator leaves a clearly slower candidate of a long kernel: the search may use it, nobody may accept it.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from warpforge.compiler.build import compile_cubin
from warpforge.cuda import SourceText, parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.extract import standalone
from warpforge.gpu.reports import TimingReport
from warpforge.gpu.timing import summarize
from warpforge.search.optimize import OptimizeRequest

FACTORS = {"const_restrict": 1.08, "launch_bounds": 1.03, "block_size": 1.12, "vectorize": 1.6,
           "warp_per_row": 6.0, "warp_reduce": 1.3, "unroll": 1.02, "crossover": 1.0}
GPU = "deterministic fixture (no GPU)"


@dataclass(frozen=True)
class FixtureEvaluation:
    status: str
    reason: str
    speedup: float | None
    spread: float | None = None
    gpu: str = GPU
    evidence: dict[str, Any] = field(default_factory=dict)
    timing: TimingReport | None = None
    verified: bool = True


def _synthetic_timing(speed: float) -> TimingReport | None:
    base = os.environ.get("WARPFORGE_FIXTURE_BASE_MS")
    if not base:
        return None
    base_ms = float(base)
    peak = float(os.environ.get("WARPFORGE_FIXTURE_PEAK_GBPS", "3000"))
    return TimingReport(candidate=summarize([base_ms / speed] * 5), baseline=summarize([base_ms] * 5),
                        mode="synthetic (deterministic fixture, nothing timed)", gpu=GPU, peak_gbps=peak)


class DeterministicEvaluator:
    gpu_name = GPU

    def __init__(self, req: OptimizeRequest) -> None:
        self.req = req
        if req.prepared is not None:  # the job's one parse, as the real evaluator takes it
            self.src, self.model, self.kernel, _ = req.prepared
        else:
            self.src = SourceText(req.text)
            self.model = parse(self.src.data)
            self.kernel = self.model.kernel(req.kernel)
        self.delay = float(os.environ.get("WARPFORGE_FIXTURE_DELAY", "0.05"))

    async def evaluate(self, c: Candidate) -> FixtureEvaluation:
        await asyncio.sleep(self.delay)
        if self.kernel is not None and shutil.which("nvcc"):
            tu = standalone(self.src, self.model, self.kernel, definition=c.source, filename=self.req.file)
            build = await asyncio.to_thread(compile_cubin, tu, arch="sm_90", defines=dict(c.defines),
                                            flags=list(c.flags), filename=self.req.file)
            if not build.ok:
                first = next((m.text for m in build.messages if m.severity == "error"), "compile error")
                return FixtureEvaluation("compile_error", first, None)
        speed = math.prod(FACTORS.get(s.split(":", 1)[0], 1.01) for s in c.steps)
        partly = bool(c.steps) and all(s.split(":", 1)[0] == "launch_bounds" for s in c.steps)
        return FixtureEvaluation("ok", "", speed, 0.01, evidence={"seeds": 1 if partly else 3,
                                                                  "note": "synthetic speedup"},
                                 timing=_synthetic_timing(speed), verified=not partly)

    async def aclose(self) -> None:
        return None


def make(req: OptimizeRequest) -> DeterministicEvaluator:
    return DeterministicEvaluator(req)
