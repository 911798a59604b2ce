"""The search tree: nodes (a candidate and how it fared), the objective, and the protocols searches use.

Both strategies (beam, MCTS) share these types, so the report, the language server's search view and
search memory read one tree whatever produced it. Failures stay in the tree with their reason: they
are negative rewards and evidence, never silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..cuda.candidate import Candidate


@runtime_checkable
class EvaluationLike(Protocol):
    """What a search needs from an evaluation (``warpforge.gpu.reports.Evaluation`` satisfies it)."""

    @property
    def status(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def speedup(self) -> float | None: ...


class EvaluatorLike(Protocol):
    async def evaluate(self, candidate: Candidate) -> EvaluationLike: ...


@dataclass
class Node:
    """A candidate in the tree, with its evaluation once known and MCTS statistics."""

    id: int
    candidate: Candidate
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    evaluation: EvaluationLike | None = None
    visits: int = 0
    value_sum: float = 0.0
    #: set when a node can no longer produce children worth trying (dead end)
    exhausted: bool = False
    #: order of evaluation (for the best-speedup-over-evaluations plot)
    eval_index: int | None = None
    #: candidates proposed for this node but not yet expanded (progressive widening)
    pending: list[Candidate] = field(default_factory=list)
    proposed: bool = False

    @property
    def depth(self) -> int:
        d, n = 0, self.parent
        while n is not None:
            d, n = d + 1, n.parent
        return d

    @property
    def status(self) -> str:
        return "pending" if self.evaluation is None else self.evaluation.status

    @property
    def ok(self) -> bool:
        return self.evaluation is not None and self.evaluation.status == "ok"

    @property
    def verified(self) -> bool:
        """ok with every verification run made (``Evaluation.verified``): what may win, be offered or accepted.
        An ok node whose checks stopped early (slower than the best then) still guides the search."""
        return self.ok and bool(getattr(self.evaluation, "verified", True))

    @property
    def speedup(self) -> float | None:
        return self.evaluation.speedup if self.ok and self.evaluation is not None else None

    @property
    def families(self) -> tuple[str, ...]:
        """The transformation families applied from the root to here (the composition path)."""
        out: list[str] = []
        n: Node | None = self
        while n is not None and n.parent is not None:
            out.append(n.candidate.family)
            n = n.parent
        return tuple(reversed(out))

    @property
    def mean_value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    def walk(self) -> Iterator[Node]:
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))

    def to_json(self) -> dict[str, Any]:
        ev = self.evaluation
        return {
            "id": self.id,
            "parent": self.parent.id if self.parent else None,
            "family": self.candidate.family,
            "rationale": self.candidate.rationale,
            "status": self.status,
            "verified": self.verified,
            "reason": ev.reason if ev is not None else "",
            "speedup": self.speedup,
            "depth": self.depth,
            "visits": self.visits,
            "eval_index": self.eval_index,
            "children": [c.id for c in self.children],
        }


@dataclass(frozen=True)
class Objective:
    """Reward of an evaluation: log speedup (so 2× and 0.5× are symmetric), failures negative.

    Log-reward calibration (KernelPro): a variant twice as fast is worth as much as one half as fast is
    bad, and rewards of compositions add. Failures get fixed negative rewards worse than any plausible
    regression, so the search learns to avoid a family that breaks kernels, but they are finite so one
    failure does not make a branch untouchable forever.
    """

    kind: str = "time"  # "time" | "energy"
    compile_error: float = -1.0
    incorrect: float = -1.5
    crash: float = -2.0

    def reward(self, ev: EvaluationLike | None) -> float:
        if ev is None:
            return 0.0
        if ev.status == "ok" and ev.speedup is not None and ev.speedup > 0:
            return math.log(ev.speedup)
        if ev.status == "compile_error":
            return self.compile_error
        if ev.status in ("incorrect", "racy", "suspicious", "rejected"):
            return self.incorrect
        return self.crash


@dataclass
class SearchContext:
    """What a policy may look at when proposing: the original candidate, findings, what was tried."""

    root: Candidate
    findings: Sequence[Any] = ()
    #: family -> (tries, successes, best speedup) from search memory of earlier runs on this kernel
    memory: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)


class Policy(Protocol):
    """Proposes children of a node. Async because the LLM policy waits on the network."""

    name: str

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]: ...
