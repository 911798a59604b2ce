"""The planner: optimization hypotheses for a variant, from the evidence, retrieval and search memory.

Why a separate planning step (the reference design's planner/coder split): deciding *what* to change is
where the bottleneck class, the findings, similar real kernels and what already failed on this kernel
matter; writing the code is a different skill with a different prompt. One hypothesis becomes one branch
of the search, so they must be distinct from each other and from what the path to the current variant
already applied — the policy drops repeats even when the model proposes them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...cuda.candidate import Candidate
from ...rag.index import Index, Query, query_for_kernel
from . import prompts
from .client import LLMClient, ToolHandler
from .context import KernelBrief
from .schema import ToolSpec, array, integer, obj, string

PROPOSE = ToolSpec(
    "propose_hypotheses",
    "Return the optimization hypotheses for the current variant, best first. Each is one focused change.",
    obj({"hypotheses": array(obj({
        "title": string("Short imperative summary, e.g. 'Load x and y as float4 with a scalar tail'"),
        "family": string("snake_case family label, e.g. vectorize, warp_per_row, smem_tiling"),
        "rationale": string("Which evidence (bottleneck, finding codes, retrieved kernels) motivates it and why"),
        "change": string("Exactly what to change in the code, specific enough for a coder to implement"),
        "expected_gain": string("Rough expectation and why, e.g. '1.3-1.6x: 4x fewer load instructions'"),
        "risk": string("What could break correctness (tails, alignment, races) and how to avoid it"),
    }), "Distinct hypotheses, best first")}),
)

OP_CHOICES = ["any", "elementwise", "reduction", "softmax", "layernorm", "gemm", "gemv", "conv", "transpose", "scan",
              "histogram", "sort", "attention", "quantize", "embedding"]

SEARCH_DOCS = ToolSpec(
    "search_docs",
    "Search the index of real CUDA/C++ kernels (production libraries and examples) for code solving a similar "
    "problem or using a technique. Returns the best matching functions with their source.",
    obj({"query": string("What to look for: operation, technique, identifiers (e.g. 'warp shuffle row max "
                         "online softmax')"),
         "op_type": string("Operation type to prefer, or 'any'", enum=OP_CHOICES),
         "k": integer("How many results (1-8)")}),
)


@dataclass(frozen=True)
class Hypothesis:
    title: str
    family: str
    rationale: str = ""
    change: str = ""
    expected_gain: str = ""
    risk: str = ""

    @property
    def label(self) -> str:
        """The family as a safe identifier (the candidate family is ``llm:<label>``)."""
        s = re.sub(r"[^a-z0-9]+", "_", self.family.lower()).strip("_")
        return s[:40] or "rewrite"

    def words(self) -> frozenset[str]:
        return frozenset(w for w in re.findall(r"[a-z0-9]+", f"{self.title} {self.change}".lower()) if len(w) > 2)

    def describe(self) -> str:
        lines = [f"Title: {self.title}", f"Family: {self.label}"]
        for name, v in (("Change", self.change), ("Rationale", self.rationale), ("Expected gain", self.expected_gain),
                        ("Risk", self.risk)):
            if v:
                lines.append(f"{name}: {v}")
        return "\n".join(lines)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Hypothesis:
        return cls(str(d.get("title", "")).strip(), str(d.get("family", "")).strip(), str(d.get("rationale", "")),
                   str(d.get("change", "")), str(d.get("expected_gain", "")), str(d.get("risk", "")))


def is_repeat(h: Hypothesis, others: Sequence[Hypothesis], threshold: float = 0.6) -> bool:
    """Same family and mostly the same words as one of ``others`` (or the same title)."""
    t = h.title.strip().lower()
    hw = h.words()
    for o in others:
        if t and t == o.title.strip().lower():
            return True
        if h.label != o.label:
            continue
        ow = o.words()
        if not hw or not ow:
            return True
        if len(hw & ow) / len(hw | ow) >= threshold:
            return True
    return False


def system_for(role: str, brief: KernelBrief) -> list[str]:
    """The static part of a role's prompt: shared rules + role (one block), then the kernel brief (cached)."""
    return [prompts.load("common").text + "\n\n" + prompts.load(role).text, brief.text()]


def launch_text(c: Candidate) -> str:
    """A variant's launch overrides for a prompt (``grid=(..), block=(..), smem=..``), or "as in the spec"."""
    launch = []
    if c.grid is not None:
        launch.append(f"grid=({', '.join(c.grid)})")
    if c.block is not None:
        launch.append(f"block=({', '.join(c.block)})")
    if c.smem is not None:
        launch.append(f"smem={c.smem}")
    return ", ".join(launch) if launch else "as in the spec"


def variant_text(c: Candidate, root: Candidate) -> str:
    """The current variant for a prompt: its code when it differs from the original, and its launch."""
    parts: list[str] = []
    if c.source == root.source:
        parts.append("The current variant is the original kernel (shown above).")
    else:
        parts += ["Current variant's code:", "```cuda", c.source.rstrip(), "```"]
    parts.append("Current launch: " + launch_text(c))
    if c.defines:
        parts.append("Defines: " + ", ".join(f"{k}={v}" for k, v in c.defines.items()))
    if c.flags:
        parts.append("Compile flags: " + " ".join(c.flags))
    return "\n".join(parts)


def search_docs_handler(index: Index, per_source: int = 2, max_k: int = 8) -> ToolHandler:
    """SEARCH_DOCS: the planner's mid-generation lookup in the configured index (runs off the event loop)."""
    async def handle(inp: dict[str, Any]) -> str:
        op = str(inp.get("op_type") or "any")
        k = max(1, min(max_k, int(inp.get("k") or 4)))
        q = Query(text=str(inp.get("query") or ""), op_type=None if op == "any" else op, k=k, per_source=per_source)
        hits = await asyncio.to_thread(index.search, q)
        if not hits:
            return "No matching kernels in the index."
        return "\n\n".join(h.snippet() for h in hits)

    return handle


class Planner:
    role = "planner"

    def __init__(self, client: LLMClient, brief: KernelBrief, *, index: Index | None = None,
                 search_rounds: int = 2, per_source: int = 2) -> None:
        self.client = client
        self.brief = brief
        self.index = index
        self.search_rounds = search_rounds
        self.per_source = per_source

    async def plan(
        self,
        *,
        kernel_key: str,
        current: Candidate,
        root: Candidate,
        path: Sequence[tuple[Hypothesis | str, float | None]],
        tried: Sequence[Hypothesis],
        memory: Sequence[str],
        retrieved: Sequence[str],
        n: int,
    ) -> list[Hypothesis]:
        parts = ["## Current variant", variant_text(current, root), ""]
        parts.append("## Applied on the path from the original to this variant (do not repeat)")
        if path:
            for h, speed in path:
                s = f" → {speed:.2f}x of the original (measured)" if speed else ""
                parts.append(f"- {h.label}: {h.title}{s}" if isinstance(h, Hypothesis) else f"- {h}{s}")
        else:
            parts.append("- nothing yet")
        parts += ["", "## Already proposed for this variant (do not repeat)"]
        parts += [f"- {h.label}: {h.title}" for h in tried] or ["- nothing yet"]
        parts += ["", "## Search memory for this kernel (earlier outcomes and lessons)"]
        parts += [f"- {m}" for m in memory] or ["- nothing recorded yet"]
        if retrieved:
            parts += ["", "## Similar kernels from the index", *retrieved]
        parts += ["", "## Task",
                  f"Propose up to {n} distinct hypotheses for the current variant, best first, and answer by "
                  "calling `propose_hypotheses`."
                  + (" You may call `search_docs` first." if self.index is not None else "")]
        helpers: list[tuple[ToolSpec, ToolHandler]] = []
        if self.index is not None and self.search_rounds > 0:
            helpers.append((SEARCH_DOCS, search_docs_handler(self.index, self.per_source)))
        result = await self.client.structured(
            self.role, system=system_for(self.role, self.brief), prompt="\n".join(parts), tool=PROPOSE,
            kernel=kernel_key, helpers=helpers, helper_rounds=self.search_rounds, check=_check_hypotheses)
        out = [Hypothesis.from_json(d) for d in result.value.get("hypotheses", []) if isinstance(d, dict)]
        return out[: max(1, n)]


def _check_hypotheses(value: dict[str, Any]) -> list[str]:
    errors = []
    for i, h in enumerate(value.get("hypotheses") or []):
        if isinstance(h, dict) and not str(h.get("title", "")).strip():
            errors.append(f"$.hypotheses[{i}].title is empty")
        if isinstance(h, dict) and not str(h.get("change", "")).strip():
            errors.append(f"$.hypotheses[{i}].change is empty")
    return errors


def retrieval_snippets(index: Index | None, brief: KernelBrief, current: Candidate, k: int, per_source: int
                       ) -> list[str]:
    """Snippets of kernels like this one (op type, bottleneck, code words) from the index, for the prompt."""
    if index is None or k <= 0:
        return []
    q = query_for_kernel(current.source, brief.name, brief.findings, brief.bottleneck, k=k + 1,
                         per_source=per_source)
    # The kernel itself (when the user indexed their own code) teaches nothing: leave it out.
    own = {_norm(brief.original), _norm(current.source)}
    hits = [h for h in index.search(q) if not any(o and o in _norm(h.chunk.text) for o in own)]
    return [h.snippet() for h in hits[:k]]


def _norm(s: str) -> str:
    return " ".join(s.split())

