"""Beam search over verified variants (the RLM kernel optimizer's design, made family-aware).

Each round expands the beam: every beam node proposes children (the root proposes ``width ×
branching`` in the first round), the children are evaluated concurrently, and the next beam is chosen
among verified variants faster than ``threshold`` — best per family first, so one strong family cannot
crowd out the others (diversity), then by speed. A crossover child composes the top two variants of
different families. Families that trail the leader and stopped improving are retired; the search stops
early when ``patience`` rounds in a row improve the best by less than ``min_improvement``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..cuda.candidate import Candidate
from .engine import SearchEngine, StopSearch
from .tree import Node


@dataclass(frozen=True)
class BeamConfig:
    width: int = 4
    rounds: int = 4
    branching: int = 2
    #: children of the root (0: width × branching)
    root_fanout: int = 16
    #: expand branches whose speedup over the baseline exceeds this
    threshold: float = 1.0
    min_improvement: float = 0.03
    #: ... in this many rounds in a row (a plateau). One flat round is common right after the root's fan-out:
    #: the second round's compositions of the best families are first tries; it ended a 60 s search of a 1.65 GB
    #: softmax at 25 candidates with 20 s left
    patience: int = 2
    crossover: bool = True
    #: a family is retired when its best marginal gain (speedup over its parent) has not improved for
    #: ``retire_after`` rounds and, in log terms, is below ``retire_fraction`` of the leading family's
    retire_fraction: float = 0.25
    retire_after: int = 2


def select_diverse(nodes: list[Node], width: int) -> list[Node]:
    """Best node of each family first (fastest families first), then the fastest of the rest."""
    ranked = sorted(nodes, key=lambda n: -(n.speedup or 0.0))
    chosen: list[Node] = []
    families: set[str] = set()
    for n in ranked:
        fam = n.candidate.family
        if fam not in families:
            chosen.append(n)
            families.add(fam)
        if len(chosen) == width:
            return chosen
    for n in ranked:
        if n not in chosen:
            chosen.append(n)
        if len(chosen) == width:
            break
    return chosen


class BeamSearch(SearchEngine):
    strategy = "beam"

    def __init__(self, *args: object, config: BeamConfig | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.config = config or BeamConfig()
        self.retired: set[str] = set()
        self._family_best: dict[str, list[float]] = {}

    def _take(self, candidates: list[Candidate], n: int) -> list[Candidate]:
        """Up to ``n`` candidates, round-robin over families, skipping retired ones."""
        by_family: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.family not in self.retired:
                by_family.setdefault(c.family, []).append(c)
        out: list[Candidate] = []
        while len(out) < n and any(by_family.values()):
            for fam in list(by_family):
                if by_family[fam] and len(out) < n:
                    out.append(by_family[fam].pop(0))
        return out

    def first_round(self, proposals: list[Candidate]) -> list[Candidate]:
        """The root's children round 1 takes (``_take`` with the root's fan-out)."""
        cfg = self.config
        return self._take(proposals, cfg.root_fanout or cfg.width * cfg.branching)

    async def _crossover(self, beam: list[Node]) -> list[Node]:
        combine = getattr(self.policy, "combine", None)
        if not self.config.crossover or combine is None:
            return []
        ok = [n for n in beam if n.ok and (n.speedup or 0) > self.config.threshold]
        if len(ok) < 2:
            return []
        a = ok[0]
        b = next((n for n in ok[1:] if n.candidate.family != a.candidate.family), None)
        if b is None:
            return []
        child = await combine(a, b, self.context)
        if child is None:
            return []
        fresh = self.fresh([child])
        return [self.new_node(c, a) for c in fresh]

    def _retire(self) -> None:
        """Retire plateaued families that trail the leader (by marginal gain, so compositions don't hide it)."""
        if not self._family_best:
            return
        leader = max(math.log(max(max(h), 1.0)) for h in self._family_best.values())
        n = self.config.retire_after
        for fam, hist in self._family_best.items():
            if len(hist) <= n or fam == "crossover":
                continue
            plateaued = max(hist[-n:]) <= max(hist[:-n])
            if plateaued and math.log(max(max(hist), 1e-9)) < self.config.retire_fraction * leader:
                self.retired.add(fam)

    async def _run(self, root: Node) -> None:
        cfg = self.config
        beam = [root]
        prev_best = 1.0
        flat = 0
        for r in range(1, cfg.rounds + 1):
            self.round = r
            self.emit("round", message=f"round {r}/{cfg.rounds}")
            # Crossover first: when it coincides with a single-step child, it keeps the crossover label.
            children: list[Node] = await self._crossover(beam)
            for node in beam:
                self.check()
                proposals = await self.propose(node)
                # The root fans out widest: every family deserves a first try before compositions.
                per_node = cfg.root_fanout or cfg.width * cfg.branching if node is root else cfg.branching
                for c in self._take(proposals, per_node):
                    children.append(self.new_node(c, node))
            if not children:
                raise StopSearch("no new proposals")
            evaluated = await self.evaluate(children)
            round_best: dict[str, float] = {}
            for n in evaluated:
                if n.ok and n.parent is not None:
                    gain = (n.speedup or 0.0) / (n.parent.speedup or 1.0)
                    round_best[n.candidate.family] = max(round_best.get(n.candidate.family, 0.0), gain)
            for fam in set(round_best) | set(self._family_best):
                hist = self._family_best.setdefault(fam, [])
                prev = max(hist) if hist else 0.0
                hist.append(max(prev, round_best.get(fam, 0.0)))
            self._retire()
            pool = [n for n in root.walk() if n.ok and n is not root and (n.speedup or 0) > cfg.threshold
                    and n.candidate.family not in self.retired]
            if not pool:
                raise StopSearch("no variant beat the baseline")
            beam = select_diverse(pool, cfg.width)
            best = self.best.speedup if self.best is not None and self.best.speedup else 1.0
            flat = flat + 1 if r > 1 and best < prev_best * (1 + cfg.min_improvement) else 0
            if flat >= max(1, cfg.patience):
                rounds = f"round {r}" if flat == 1 else f"rounds {r - flat + 1}-{r}"
                raise StopSearch(f"plateau: {rounds} improved the best by less than {cfg.min_improvement:.0%}")
            prev_best = best
