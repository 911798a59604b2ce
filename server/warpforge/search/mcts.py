"""Monte Carlo tree search over verified variants (OptiML / KernelPro), adapted to expensive evaluations.

- Selection: UCT on log-speedup rewards (``mean + c·sqrt(ln N / n)``), skipping dead ends.
- Progressive widening: a node may hold at most ``ceil(k · N^alpha)`` children, so the tree deepens
  (compositions) instead of trying every single-step transformation of the root first.
- Asymmetric branching: a node that beat its parent widens faster (``k`` grows with its reward), so
  promising variants get more children.
- Simulation is the evaluation itself (a verified, timed run); no random rollouts — each costs a GPU run.
- Dead-end pruning: a failed node gets no children; a node with nothing left to propose and all
  children exhausted is exhausted itself.
- Search memory: proposals are ordered by how their family fared on this kernel before (``context.memory``),
  so a rerun starts with what worked.

Several leaves are evaluated per iteration (``parallel``) with virtual loss, so the evaluator's compile
pool and GPU stay busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..cuda.candidate import Candidate
from .engine import SearchEngine, StopSearch
from .tree import Node


@dataclass(frozen=True)
class MCTSConfig:
    exploration: float = 1.0
    widen_k: float = 2.0
    widen_alpha: float = 0.5
    #: how much faster promising nodes widen: k' = k · (1 + asymmetry · max(0, reward))
    asymmetry: float = 2.0
    parallel: int = 4
    virtual_loss: float = 0.5
    max_depth: int = 6


class MCTS(SearchEngine):
    strategy = "mcts"

    def __init__(self, *args: object, config: MCTSConfig | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.config = config or MCTSConfig()

    # ----------------------------------------------------------------- widening and selection
    def width_limit(self, node: Node) -> int:
        """Children allowed now: ceil(k' · max(1, N)^alpha) (progressive widening, asymmetric k')."""
        reward = self.objective.reward(node.evaluation) if node.evaluation is not None else 0.0
        k = self.config.widen_k * (1.0 + self.config.asymmetry * max(0.0, reward))
        return max(1, math.ceil(k * math.pow(max(1, node.visits), self.config.widen_alpha)))

    def uct(self, parent: Node, child: Node) -> float:
        if child.visits == 0:
            return math.inf
        return child.mean_value + self.config.exploration * math.sqrt(math.log(max(1, parent.visits)) / child.visits)

    def _order(self, candidates: list[Candidate]) -> list[Candidate]:
        """Families that worked on this kernel before first; ones that only failed last."""
        mem = self.context.memory if self.context is not None else {}

        def prior(c: Candidate) -> float:
            tries, wins, best = mem.get(c.family, (0, 0, 1.0))
            if tries == 0:
                return 0.0
            return (wins / tries) * math.log(max(best, 1.0)) - (0.5 if wins == 0 else 0.0)

        return sorted(candidates, key=lambda c: -prior(c))

    def first_round(self, proposals: list[Candidate]) -> list[Candidate]:
        """The root's children of the first batch: the ``parallel`` most promising."""
        return self._order(proposals)[: max(1, self.config.parallel)]

    async def _select(self, root: Node, claimed: set[int]) -> Node | None:
        """Descend to a node that should get a new child; None when nothing is left to try this batch."""
        node = root
        while True:
            if node.exhausted:
                return None
            if not node.proposed and node.depth < self.config.max_depth:
                node.pending = self._order(await self.propose(node))
            if node.depth >= self.config.max_depth:
                node.pending = []
            if node.pending and len(node.children) < self.width_limit(node) and node.id not in claimed:
                return node
            live = [c for c in node.children if not c.exhausted and c.evaluation is not None]
            if live:
                node = max(live, key=lambda c: self.uct(node, c))
                continue
            in_flight = any(c.evaluation is None for c in node.children)
            if node.pending:
                # nothing evaluated to descend into: widen beyond the limit rather than stall
                return None if node.id in claimed else node
            if in_flight:
                return None
            node.exhausted = True  # dead end: nothing left to propose, every child exhausted
            if node is root:
                return None
            node = root

    def _backprop(self, node: Node, reward: float) -> None:
        n: Node | None = node
        while n is not None:
            n.visits += 1
            n.value_sum += reward
            n = n.parent

    # ----------------------------------------------------------------- main loop
    async def _run(self, root: Node) -> None:
        root.visits = 1
        root.value_sum = 0.0
        iteration = 0
        while True:
            self.check()
            iteration += 1
            self.round = iteration
            leaves: list[Node] = []
            claimed: set[int] = set()
            for _ in range(self.config.parallel):
                parent = await self._select(root, claimed)
                if parent is None:
                    break
                if not parent.pending:
                    claimed.add(parent.id)
                    continue
                child = self.new_node(parent.pending.pop(0), parent)
                leaves.append(child)
                claimed.add(parent.id)
                # virtual loss: discourage the next selection in this batch from the same path
                self._backprop(parent, -self.config.virtual_loss)
            if not leaves:
                raise StopSearch("search space exhausted")
            self.emit("round", message=f"iteration {iteration}: {len(leaves)} new variants")
            evaluated = await self.evaluate(leaves)
            for leaf in leaves:
                # undo virtual loss
                p = leaf.parent
                while p is not None:
                    p.visits -= 1
                    p.value_sum += self.config.virtual_loss
                    p = p.parent
            for leaf in evaluated:
                reward = self.objective.reward(leaf.evaluation)
                self._backprop(leaf, reward)
                if not leaf.ok:
                    leaf.exhausted = True  # dead end: no children from a failed variant
