"""The fixer: repairs a variant from the log of how it failed — compiler messages or verification results.

Why a role of its own: most first attempts at a new kernel fail on something small (a missing cast, an
undeclared helper, an off-by-one tail), and the compiler or the verifier says exactly what. Feeding that
back with the failing code costs one cheaper call, where dropping the hypothesis would waste the planning
and coding already paid for. Attempts are bounded by the policy (``compile_fix_attempts`` for compile
errors, one repair per failed evaluation).
"""

from __future__ import annotations

from ...cuda.candidate import Candidate
from .coder import SUBMIT, KernelWriter, rationale_of
from .planner import Hypothesis, launch_text, system_for, variant_text


class Fixer:
    role = "fixer"

    def __init__(self, writer: KernelWriter) -> None:
        self.writer = writer

    async def fix(
        self,
        *,
        kernel_key: str,
        base: Candidate,
        root: Candidate,
        hypothesis: Hypothesis,
        failing: Candidate,
        log: str,
        kind: str,
    ) -> Candidate:
        """A corrected kernel for ``hypothesis`` on ``base``; ``failing`` failed with ``log`` (``kind``:
        "compile" or "verification")."""
        w = self.writer
        what = ("It did not compile. Compiler messages (line numbers count from the first line of the failing "
                "code below):" if kind == "compile" else
                "It compiled but failed verification against the original kernel (or crashed). Verification "
                "result:")
        prompt = "\n".join([
            "## Base variant (the hypothesis is applied on top of this)", variant_text(base, root), "",
            "## Hypothesis", hypothesis.describe(), "",
            "## The failing attempt", "```cuda", failing.source.rstrip(), "```",
            "Its launch: " + launch_text(failing), "",
            "## What went wrong", what, "```", (log or "(no details)").strip()[:6000], "```", "",
            "## Task",
            "Write the corrected complete kernel and answer by calling `submit_kernel`.",
        ])
        result = await w.client.structured(self.role, system=system_for(self.role, w.brief), prompt=prompt,
                                           tool=SUBMIT, kernel=kernel_key, check=w.checker(base))
        v = result.value
        notes = str(v.get("notes", ""))
        return w.candidate(v, base, f"llm:{hypothesis.label}",
                           rationale_of(hypothesis, f"fixed after {kind} failure; {notes}" if notes else
                                        f"fixed after {kind} failure"),
                           f"llm:{hypothesis.label}")
