"""The adversarial candidate suite: kernels written to cheat or fail, and the guard that must catch each.

Why it ships with the package: a verifier is only worth its guards, and guards depend on the machine (the
driver, the GPU's limits, the toolkit's SASS). ``warpforge selftest`` runs this table on the user's own GPU
and prints which guards held; ``tests/test_gpu_engine.py`` runs the same table in the project's GPU tests.
The originals are copies of the project's ``kernels/`` (a CPU test keeps them identical).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ADVERSARIAL = HERE / "adversarial"
ORIGINALS = HERE / "originals"

#: the originals the suite's candidates are variants of: name -> (file, kernel)
GELU = (ORIGINALS / "gelu.cu", "gelu_forward")
SAXPY = (ORIGINALS / "saxpy.cu", "saxpy")
REDUCE = (ORIGINALS / "reduce_sum.cu", "reduce_sum")
FLOOR = (ADVERSARIAL / "floor_rowsum.cu", "row_sum")


@dataclass(frozen=True)
class Case:
    """One adversarial candidate: its file, its original, the guard expected to catch it and its verdict."""

    file: str
    original: tuple[Path, str]
    status: str
    reason: str  # a phrase the verdict's reason must contain (lower-case comparison)
    guard: str  # the guard, in words
    #: run the tail-sensitivity check too; off where it would catch the candidate before the guard under
    #: test does (``floor_cheat.cu`` ignores its input, which perturbed inputs expose before the floor)
    sensitivity: bool = True

    @property
    def path(self) -> Path:
        return ADVERSARIAL / self.file


CASES: tuple[Case, ...] = (
    Case("gelu_partial_write.cu", GELU, "incorrect", "never written", "outputs poisoned before every run"),
    Case("gelu_cached_flag.cu", GELU, "incorrect", "skips work", "second run on fresh buffers"),
    Case("gelu_cached_pointer.cu", GELU, "suspicious", "timed launches", "timed launches' outputs checked"),
    Case("saxpy_stale_noop.cu", SAXPY, "incorrect", "elements differ", "fresh, scrubbed buffers every run"),
    Case("gelu_clock.cu", GELU, "rejected", "reads the clock", "static guard: clock reads"),
    Case("gelu_globaltimer.cu", GELU, "rejected", "globaltimer", "guard: %globaltimer reads"),
    Case("gelu_device_launch.cu", GELU, "rejected", "launches a kernel from device code",
         "static guard: device-side launches"),
    Case("gelu_signature.cu", GELU, "rejected", "signature changed", "static guard: same signature"),
    Case("floor_cheat.cu", FLOOR, "suspicious", "physical floor", "physical floor (bytes / bandwidth)",
         sensitivity=False),
    Case("reduce_racy.cu", REDUCE, "racy", "not deterministic", "two runs on the same inputs agree"),
    Case("gelu_oob_write.cu", GELU, "rejected", "out-of-bounds write past the end of `out`",
         "guard bytes around every buffer"),
    Case("gelu_writes_input.cu", GELU, "rejected", "writes its input `inp`",
         "read-only inputs checksummed after every run"),
    Case("gelu_static_smem.cu", GELU, "compile_error", "too much shared data", "build limits"),
    Case("gelu_nan.cu", GELU, "incorrect", "NaN where the original has a number", "NaN rules of the comparison"),
    Case("gelu_illegal_address.cu", GELU, "crashed", "illegal", "isolated worker, restarted after a fault"),
    Case("gelu_hang.cu", GELU, "timeout", "did not finish", "kernel timeout"),
    Case("reduce_tail_drop.cu", REDUCE, "incorrect", "tail sensitivity", "tail sensitivity (perturbed last elements)"),
)


@dataclass(frozen=True)
class Outcome:
    """What the engine said of one case, and whether that is the expected verdict."""

    file: str
    guard: str
    expected: str
    status: str
    reason: str
    held: bool
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def held(case: Case, status: str, reason: str) -> bool:
    """The guard held: the expected status, and the reason names what was caught."""
    return status == case.status and case.reason.lower() in reason.lower()


async def run_suite(backend: Any, cases: Sequence[Case] = CASES, *, settings: Any = None,
                    on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Evaluate every case on ``backend`` (an ``EvaluationBackend``), one after the other.

    Raises ``GpuUnavailable`` (from the evaluator) when there is no GPU to run on.
    """
    from dataclasses import replace

    from ..cuda.candidate import candidate_from_variant
    from ..gpu.evaluator import EngineSettings, Evaluator
    from ..gpu.timing import TimingSettings

    settings = settings or EngineSettings(kernel_timeout=4.0, compile_timeout=30.0,
                                          timing=TimingSettings(max_seconds=0.6))
    evaluators: dict[tuple[str, str, bool], Evaluator] = {}
    out: list[Outcome] = []
    try:
        for case in cases:
            key = (str(case.original[0]), case.original[1], case.sensitivity)
            if key not in evaluators:
                evaluators[key] = Evaluator(case.original[0], case.original[1], backend=backend,
                                            settings=replace(settings, sensitivity=case.sensitivity))
            ev = evaluators[key]
            t0 = time.perf_counter()
            cand = candidate_from_variant(ev.text, case.path.read_text(encoding="utf-8"), ev.kernel.name)
            e = await ev.evaluate(cand)
            o = Outcome(case.file, case.guard, case.status, e.status, e.reason, held(case, e.status, e.reason),
                        time.perf_counter() - t0)
            out.append(o)
            if on_outcome is not None:
                on_outcome(o)
    finally:
        for ev in evaluators.values():
            await ev.close()
    return out
