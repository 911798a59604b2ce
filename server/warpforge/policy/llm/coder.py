"""The coder: one hypothesis → one complete kernel with the original's signature, as a candidate.

Why the whole kernel and not a diff: a model writes coherent code far more reliably than it writes
patches, and a candidate is a whole definition anyway. What it returns is checked before the search sees
it (``code.extract_kernel``: the kernel present, the exact signature, no host code; launch expressions
that evaluate over the spec's sizes); a failed check is shown to the model once, as the tool's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...cuda.candidate import Candidate
from ...cuda.model import FileModel, Kernel
from ...cuda.text import SourceText
from ...spec.model import KernelSpec
from .client import LLMClient
from .code import check_launch, extract_kernel, launch_dims
from .context import KernelBrief
from .planner import Hypothesis, system_for, variant_text
from .schema import ToolSpec, array, obj, string

SUBMIT = ToolSpec(
    "submit_kernel",
    "Submit the complete kernel: any new device helpers followed by the whole kernel definition, with the "
    "launch it needs.",
    obj({
        "code": string("Complete CUDA code: new __device__ helpers (if any), then the whole kernel definition "
                       "with the original's exact name and parameters. No host code, no launches."),
        "grid": array(string(), "Grid as spec expressions, one per dimension (x[, y[, z]]); [] keeps the current"),
        "block": array(string(), "Block as spec expressions, one per dimension; [] keeps the current"),
        "smem": string("Dynamic shared memory in bytes as a spec expression; empty keeps the current"),
        "notes": string("What changed and why, in two or three sentences"),
    }),
)


class KernelWriter:
    """What the coder, the fixer and synthesis share: the submit tool's checks and the candidate it makes."""

    def __init__(self, client: LLMClient, brief: KernelBrief, src: SourceText, model: FileModel, kernel: Kernel,
                 spec: KernelSpec | None) -> None:
        self.client, self.brief = client, brief
        self.src, self.model, self.kernel, self.spec = src, model, kernel, spec
        #: what was dropped from the last accepted answer (host code, other kernels), for the record
        self.dropped: list[str] = []

    def checker(self, base: Candidate) -> Callable[[dict[str, Any]], list[str]]:
        def check(value: dict[str, Any]) -> list[str]:
            code = extract_kernel(str(value.get("code", "")), self.kernel, self.src, self.model)
            errors = list(code.errors)
            grid = launch_dims(value.get("grid") or []) or base.grid
            block = launch_dims(value.get("block") or []) or base.block
            smem = str(value.get("smem") or "").strip() or base.smem
            errors += check_launch(self.spec, grid, block, smem, base.define_map())
            return errors

        return check

    def candidate(self, value: dict[str, Any], base: Candidate, family: str, rationale: str,
                  step: str) -> Candidate:
        code = extract_kernel(str(value.get("code", "")), self.kernel, self.src, self.model)
        self.dropped = code.dropped
        grid = launch_dims(value.get("grid") or [])
        block = launch_dims(value.get("block") or [])
        smem = str(value.get("smem") or "").strip() or None
        return base.derive(
            source=code.source,
            grid=grid if grid is not None else base.grid,
            block=block if block is not None else base.block,
            smem=smem if smem is not None else base.smem,
            family=family,
            rationale=rationale[:600],
            steps=(*base.steps, step),
            dropped=tuple(code.dropped),
        )


def rationale_of(h: Hypothesis, notes: str = "") -> str:
    text = h.title
    if h.rationale:
        text += f" — {h.rationale}"
    if notes:
        text += f" (coder: {notes})"
    return text


class Coder:
    role = "coder"

    def __init__(self, writer: KernelWriter) -> None:
        self.writer = writer

    async def write(self, *, kernel_key: str, base: Candidate, root: Candidate, hypothesis: Hypothesis) -> Candidate:
        w = self.writer
        prompt = "\n".join([
            "## Current variant (start from this code)", variant_text(base, root), "",
            "## Hypothesis to implement", hypothesis.describe(), "",
            "## Task",
            "Write the complete kernel implementing this hypothesis on top of the current variant and answer by "
            "calling `submit_kernel`.",
        ])
        result = await w.client.structured(self.role, system=system_for(self.role, w.brief), prompt=prompt,
                                           tool=SUBMIT, kernel=kernel_key, check=w.checker(base))
        v = result.value
        return w.candidate(v, base, f"llm:{hypothesis.label}", rationale_of(hypothesis, str(v.get("notes", ""))),
                           f"llm:{hypothesis.label}")
