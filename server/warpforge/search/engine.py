"""What every search strategy shares: budgets, cancellation, concurrent evaluation, history, events.

Strategies (beam, MCTS) decide *what* to evaluate; this module decides *how*: many candidates in flight
at once (the evaluator compiles in parallel and serializes the GPU), never the same candidate twice,
every evaluation recorded in the tree and in the best-so-far history, and a stop at any moment —
budget spent, target reached, the best variant within 5 % of the kernel's physical limit, or the user
cancelled — that still returns the best verified variant.

The physical limit is not computed here (the roofline lives in ``profile``, above this package): the
caller passes ``limit_of``, which reads a node's measured time against the limit, and the engine stops once
the best verified node (the original included: a kernel already at its limit has nothing left to find)
reaches ``LIMIT_STOP_PCT`` of it, with an ``at_limit`` event and a stop reason that say so.

The first round does not wait for the original's evaluation: while the root is verified and timed (or waits
for a GPU the job's baseline profile holds, ``app.optimize``), the root's children are proposed and the ones
the strategy takes first (``first_round``) are handed to the evaluator's ``prebuild``, so their compiles run
beside it. Their GPU work still starts only once the root is evaluated, as before.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import defaults
from ..cuda.candidate import Candidate
from .tree import EvaluatorLike, Node, Objective, Policy, SearchContext

#: stop searching once the best verified variant reaches this % of the kernel's physical limit
LIMIT_STOP_PCT = 95.0
#: a reading above this % of the limit is not "at the limit": the time beats the roof, so the roof does not bound
#: this kernel (its data stays in cache between launches, or the spec's bytes/flops overstate its work) and
#: nothing says the search is done; it goes on and the reading is reported as it is
LIMIT_TRUST_PCT = 110.0


class LimitReading(Protocol):
    """A node's measured time against its physical limit (``profile.limit.Limit`` is one)."""

    @property
    def pct_limit(self) -> float | None: ...

    def text(self) -> str: ...


#: reads a verified node's time against the kernel's physical limit (None: no limit known)
LimitOf = Callable[[Node], LimitReading | None]


@dataclass(frozen=True)
class Budget:
    """Limits of one search. ``None`` means unlimited (at least one limit should be set)."""

    max_candidates: int | None = defaults.BUDGET
    wall_seconds: float | None = defaults.TIME_BUDGET
    target_speedup: float | None = None
    #: stop once the best verified variant reaches this % of the physical limit (None: never; needs ``limit_of``)
    limit_pct: float | None = LIMIT_STOP_PCT
    #: when the user's wait began (``time.monotonic()``; None: when the search starts). ``wall_seconds`` covers
    #: everything from then: the baseline's profile and verification, the search, the winner's checks
    started: float | None = None
    #: of ``wall_seconds``, the part kept for the winner's checks after the search (compute-sanitizer, Nsight
    #: Compute confirmation): the search stops this much earlier
    reserve_seconds: float = 0.0

    def search_seconds(self) -> float | None:
        """How long after ``started`` the search itself must stop (None: no time limit)."""
        return None if self.wall_seconds is None else max(0.0, self.wall_seconds - self.reserve_seconds)

    def deadline(self) -> float | None:
        """When the whole wait ends (monotonic), once ``started`` is known."""
        return None if self.wall_seconds is None or self.started is None else self.started + self.wall_seconds


def reserve_for(wall_seconds: float | None) -> float:
    """The time kept for a winner's checks out of a wall-clock budget: a quarter of it, at most 20 s (two
    sanitizer runs at the small size and one Nsight Compute confirmation take 10-20 s)."""
    return 0.0 if wall_seconds is None else min(20.0, 0.25 * wall_seconds)


@dataclass
class SearchEvent:
    """Progress for the CLI's progress bar and the language server's notifications."""

    kind: str  # "round" | "evaluated" | "improved" | "at_limit" | "stopped" | "policy_error" | "limit_error"
    round: int
    evaluations: int
    best_speedup: float
    node: Node | None = None
    message: str = ""


@dataclass
class SearchResult:
    root: Node
    best: Node
    history: list[tuple[int, float]]
    evaluations: int
    seconds: float
    stopped: str
    strategy: str
    rounds: int = 0
    nodes: list[Node] = field(default_factory=list)
    history_seconds: list[float] = field(default_factory=list)

    def seconds_to_reach(self, speedup: float) -> float | None:
        """When the best verified speedup first reached ``speedup`` (None: never)."""
        for (_, s), t in zip(self.history, self.history_seconds, strict=False):
            if s >= speedup:
                return t
        return None

    @property
    def best_speedup(self) -> float:
        return self.best.speedup or 1.0

    @property
    def improved(self) -> bool:
        return self.best is not self.root and self.best_speedup > 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "stopped": self.stopped,
            "evaluations": self.evaluations,
            "seconds": round(self.seconds, 3),
            "rounds": self.rounds,
            "best": self.best.id,
            "best_speedup": self.best_speedup,
            "history": [{"evaluations": n, "best_speedup": s, **({"seconds": round(t, 3)} if t is not None else {})}
                        for (n, s), t in zip(self.history, [*self.history_seconds,
                                                             *[None] * (len(self.history) - len(self.history_seconds))],
                                             strict=True)],
            "nodes": [n.to_json() for n in self.root.walk()],
        }


class StopSearch(Exception):
    """Raised inside a strategy when the budget is spent, the target reached or the user cancelled."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SearchEngine:
    """Bookkeeping shared by strategies; a strategy implements ``_run``."""

    strategy = "base"

    def __init__(
        self,
        policy: Policy,
        evaluator: EvaluatorLike,
        *,
        budget: Budget | None = None,
        objective: Objective | None = None,
        cancel: asyncio.Event | None = None,
        on_event: Callable[[SearchEvent], None] | None = None,
        context: SearchContext | None = None,
        min_speedup: float = 1.0,
        limit_of: LimitOf | None = None,
    ) -> None:
        self.policy = policy
        self.evaluator = evaluator
        self.budget = budget or Budget()
        self.objective = objective or Objective()
        self.cancel = cancel or asyncio.Event()
        self.on_event = on_event
        self.context = context
        #: a variant must beat the baseline by more than this factor to count as faster
        self.min_speedup = min_speedup
        self.limit_of = limit_of
        #: the best node's reading once it is within the limit margin (the search then stops)
        self.at_limit: LimitReading | None = None
        self._ids = itertools.count()
        self._seen: set[str] = set()
        self.evaluations = 0
        self.history: list[tuple[int, float]] = []
        #: seconds since the start at each entry of ``history`` (time-to-best comparisons)
        self.history_seconds: list[float] = []
        self.round = 0
        self.root: Node | None = None
        self.best: Node | None = None
        self._t0 = 0.0
        #: proposals made ahead of time, by node id (the root's, while it is evaluated): ``propose`` takes them
        self._ahead: dict[int, asyncio.Future[list[Candidate]]] = {}

    # ----------------------------------------------------------------- helpers for strategies
    def new_node(self, candidate: Candidate, parent: Node | None) -> Node:
        node = Node(next(self._ids), candidate, parent)
        if parent is not None:
            parent.children.append(node)
        return node

    def fresh(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """Drop candidates already evaluated (or proposed twice), by content hash."""
        out: list[Candidate] = []
        for c in candidates:
            if c.hash in self._seen:
                continue
            self._seen.add(c.hash)
            out.append(c)
        return out

    def remaining(self) -> int | None:
        if self.budget.max_candidates is None:
            return None
        return max(0, self.budget.max_candidates - self.evaluations)

    def check(self) -> None:
        """Raise StopSearch if the search must stop now."""
        if self.cancel.is_set():
            raise StopSearch("cancelled")
        if self.at_limit is not None:
            raise StopSearch(self._limit_reason())
        limit = self.budget.search_seconds()
        if limit is not None and time.monotonic() - self._t0 > limit:
            raise StopSearch("time budget spent")
        rem = self.remaining()
        if rem is not None and rem <= 0:
            raise StopSearch("candidate budget spent")
        if (self.budget.target_speedup is not None and self.best is not None
                and (self.best.speedup or 0) >= self.budget.target_speedup):
            raise StopSearch(f"target speedup {self.budget.target_speedup:g}x reached")

    def _limit_reason(self) -> str:
        margin = 100.0 - (self.budget.limit_pct or 0.0)
        return f"within {margin:g} % of the physical limit: {self.at_limit.text() if self.at_limit else '?'}"

    def _check_limit(self, node: Node) -> None:
        """Note when the new best ``node`` is within the margin of the physical limit (``check`` then stops)."""
        if self.limit_of is None or self.budget.limit_pct is None or not node.ok:
            return
        try:
            reading = self.limit_of(node)
        except Exception as e:  # a limit that cannot be read is no reason to stop, nor to fail the search
            self.emit("limit_error", node, f"reading the physical limit: {type(e).__name__}: {e}")
            return
        pct = reading.pct_limit if reading is not None else None
        if reading is not None and pct is not None and self.budget.limit_pct <= pct <= LIMIT_TRUST_PCT:
            self.at_limit = reading
            self.emit("at_limit", node, reading.text())

    def emit(self, kind: str, node: Node | None = None, message: str = "") -> None:
        if self.on_event is not None:
            best = self.best.speedup if self.best is not None and self.best.speedup else 1.0
            self.on_event(SearchEvent(kind, self.round, self.evaluations, best, node, message))

    async def propose(self, node: Node) -> list[Candidate]:
        node.proposed = True
        ahead = self._ahead.pop(node.id, None)
        if ahead is not None:
            return await ahead
        return await self._propose(node)

    def first_round(self, proposals: list[Candidate]) -> list[Candidate]:
        """The root's proposals this strategy evaluates first (what is built ahead, beside the root's
        evaluation); a strategy that knows its first batch overrides it."""
        return proposals

    async def _propose_ahead(self, root: Node) -> list[Candidate]:
        """The root's proposals, made while the root itself is evaluated, with the first round's builds
        started at once (``prebuild``: CPU only, nothing on the GPU; an evaluator without it is left alone)."""
        proposals = await self._propose(root)
        prebuild = getattr(self.evaluator, "prebuild", None)
        if prebuild is not None:
            first = self.first_round(list(proposals))
            if self.budget.max_candidates is not None:  # the root is the budget's first candidate
                first = first[: max(0, self.budget.max_candidates - 1)]
            for c in first:
                try:
                    prebuild(c)
                except Exception as e:  # building ahead is an optimization: the evaluation builds it anyway
                    self.emit("policy_error", root, f"building ahead: {type(e).__name__}: {e}")
        return proposals

    async def _propose(self, node: Node) -> list[Candidate]:
        """The policy's fresh proposals for ``node`` (``proposed`` is set by ``propose``: a strategy reads it as
        "asked already", which proposals made ahead are not until it asks)."""
        assert self.context is not None
        try:
            return self.fresh(await self.policy.propose(node, self.context))
        except Exception as e: # a failing policy is a dead end, not a failed search
            self.emit("policy_error", node, f"{type(e).__name__}: {e}")
            return []

    async def evaluate(self, nodes: list[Node]) -> list[Node]:
        """Evaluate nodes concurrently (up to the candidate budget); returns those evaluated.

        Nodes that will not be evaluated (budget spent, stop) are taken out of the tree: the tree shows
        what was tried, not what was merely proposed.
        """
        try:
            self.check()
        except StopSearch:
            for n in nodes:
                if n.parent is not None and n in n.parent.children:
                    n.parent.children.remove(n)
            raise
        rem = self.remaining()
        todo = nodes if rem is None else nodes[:rem]
        for n in nodes[len(todo):]:
            if n.parent is not None:
                n.parent.children.remove(n)
        tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.evaluator.evaluate(n.candidate))
                                            for n in todo]
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.cancel.wait())
        limit = self.budget.search_seconds()
        deadline = None if limit is None else max(0.0, limit - (time.monotonic() - self._t0))
        done_nodes: list[Node] = []
        pending: dict[asyncio.Future[Any], Node] = dict(zip(tasks, todo, strict=True))
        try:
            while pending:
                done, _ = await asyncio.wait([*pending, cancel_wait], timeout=deadline,
                                             return_when=asyncio.FIRST_COMPLETED)
                if cancel_wait in done or not done:
                    break
                for t in done:
                    n = pending.pop(t)
                    try:
                        n.evaluation = t.result()
                    except Exception as e: # an evaluator bug is this candidate's failure
                        n.evaluation = _Failed("crashed", f"evaluator error: {type(e).__name__}: {e}")
                    self._record(n)
                    done_nodes.append(n)
                if self.at_limit is not None:
                    break  # the rest of the batch cannot matter: stop spending the GPU on it
                if limit is not None:
                    deadline = max(0.0, limit - (time.monotonic() - self._t0))
        finally:
            cancel_wait.cancel()
            for t, n in pending.items():
                t.cancel()
                if n.parent is not None and n in n.parent.children:
                    n.parent.children.remove(n)
        if pending:
            self.check()
            raise StopSearch("time budget spent")
        return done_nodes

    @staticmethod
    def _significant(n: Node) -> bool:
        """A win must be outside the timing noise: the lower end of the speedup's confidence interval
        (when the evaluator reports one) must be above 1."""
        sp = getattr(getattr(n.evaluation, "timing", None), "speedup", None)
        low = getattr(sp, "low", None)
        return low is None or float(low) > 1.0

    def _record(self, n: Node) -> None:
        self.evaluations += 1
        n.eval_index = self.evaluations
        improved = False
        if n.verified and (n.speedup or 0) > self.min_speedup and self._significant(n) and (
                self.best is None or (n.speedup or 0) > (self.best.speedup or 1.0)):
            self.best = n
            improved = True
        self.history.append((self.evaluations, self.best.speedup or 1.0 if self.best else 1.0))
        self.history_seconds.append(time.monotonic() - self._t0)
        self.emit("evaluated", n)
        if improved:
            self.emit("improved", n)
            self._check_limit(n)

    # ----------------------------------------------------------------- entry point
    async def run(self, root_candidate: Candidate, context: SearchContext | None = None) -> SearchResult:
        self._t0 = self.budget.started if self.budget.started is not None else time.monotonic()
        self.context = context or self.context or SearchContext(root=root_candidate)
        root = self.new_node(root_candidate, None)
        self.root = root
        self._seen.add(root_candidate.hash)
        stopped = "finished"
        # the first round is proposed (and built) while the root is evaluated; ``propose(root)`` takes it
        ahead = asyncio.ensure_future(self._propose_ahead(root))
        ahead.add_done_callback(_consume)
        self._ahead[root.id] = ahead
        try:
            # The root is evaluated like any candidate: it must run and verify against itself (the oracle),
            # and its timing is the baseline the others are compared with.
            await self.evaluate([root])
            if not root.ok:
                reason = root.evaluation.reason if root.evaluation else "not evaluated"
                raise StopSearch(f"the original kernel could not be evaluated: {reason}")
            self.best = root
            self._check_limit(root)
            self.check()  # an original already at its limit: nothing to propose
            await self._run(root)
        except StopSearch as s:
            stopped = s.reason
        finally:
            if self._ahead.pop(root.id, None) is not None and not ahead.done():
                ahead.cancel()  # stopped before the first round: its proposals are not needed
        if self.at_limit is not None and stopped != "cancelled":
            stopped = self._limit_reason()  # the reason, whichever limit the strategy met at the same time
        # Proposals created but never evaluated (a stop between proposing and evaluating) leave the tree.
        for n in list(root.walk()):
            if n.evaluation is None and n.parent is not None and n in n.parent.children:
                n.parent.children.remove(n)
        best = self.best if self.best is not None else root
        self.emit("stopped", best, stopped)
        return SearchResult(root, best, self.history, self.evaluations, time.monotonic() - self._t0, stopped,
                            self.strategy, self.round, list(root.walk()), self.history_seconds)

    async def _run(self, root: Node) -> None:
        raise NotImplementedError


def _consume(f: asyncio.Future[Any]) -> None:
    """Retrieve a background future's outcome (so a cancelled or failed one is not reported as lost)."""
    if not f.cancelled():
        f.exception()


@dataclass(frozen=True)
class _Failed:
    status: str
    reason: str
    speedup: float | None = None
