"""Search strategies on deterministic SYNTHETIC objective landscapes (labelled as such: no GPU, no nvcc).

A landscape maps a composition of transformation families to a speedup (factors multiply) or a
failure. The tests prove the strategies' properties — beam keeps family diversity and stops on a
plateau, MCTS widens progressively and asymmetrically and prunes dead ends, budgets and cancellation
hold, search memory changes what a rerun tries first — independent of any real kernel.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from warpforge.cuda.candidate import Candidate
from warpforge.search.beam import BeamConfig, BeamSearch, select_diverse
from warpforge.search.engine import Budget, SearchEvent
from warpforge.search.mcts import MCTS, MCTSConfig
from warpforge.search.memory import SearchMemory
from warpforge.search.tree import Node, Objective, SearchContext


@dataclass(frozen=True)
class Ev:
    status: str
    reason: str
    speedup: float | None


class Landscape:
    """Synthetic: each variant of a family multiplies the speed; 'broken' fails to compile."""

    def __init__(self, variants: dict[str, list[float]], delay: float = 0.0, fail: set[str] | None = None) -> None:
        self.variants = variants
        self.delay = delay
        self.fail = fail or {"broken"}
        self.calls: list[tuple[str, ...]] = []

    def speed(self, steps: tuple[str, ...]) -> float:
        s = 1.0
        for step in steps:
            fam, idx = step.split("#")
            s *= self.variants[fam][int(idx)]
        return s

    async def evaluate(self, c: Candidate) -> Ev:
        self.calls.append(c.steps)
        if self.delay:
            await asyncio.sleep(self.delay)
        if any(st.split("#")[0] in self.fail for st in c.steps):
            return Ev("compile_error", "synthetic compile error", None)
        return Ev("ok", "", self.speed(c.steps))


class LandscapePolicy:
    """Proposes one child per (family, variant) not yet on the path."""

    name = "synthetic"

    def __init__(self, landscape: Landscape) -> None:
        self.landscape = landscape

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        used = {s.split("#")[0] for s in node.candidate.steps}
        out = []
        for fam, factors in self.landscape.variants.items():
            if fam in used:
                continue
            for i in range(len(factors)):
                steps = (*node.candidate.steps, f"{fam}#{i}")
                out.append(Candidate("k", "k:" + "+".join(sorted(steps)), family=fam, steps=tuple(sorted(steps))))
        return out

    async def combine(self, a: Node, b: Node, context: SearchContext | None) -> Candidate | None:
        fams_a = {s.split("#")[0] for s in a.candidate.steps}
        steps = tuple(sorted({*a.candidate.steps, *(s for s in b.candidate.steps if s.split("#")[0] not in fams_a)}))
        return Candidate("k", "k:" + "+".join(steps), family="crossover", steps=steps)


ROOT = Candidate("k", "k:", family="original")


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_beam_keeps_family_diversity() -> None:
    land = Landscape({"A": [1.5, 1.49, 1.48, 1.47], "B": [1.3], "C": [1.2], "D": [0.9]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=200),
                        config=BeamConfig(width=3, rounds=1, branching=3, crossover=False))
    result = asyncio.run(search.run(ROOT))
    assert result.evaluations > 1
    pool = [n for n in result.root.walk() if n.ok and n is not result.root and (n.speedup or 0) > 1.0]
    beam = select_diverse(pool, 3)
    assert [n.candidate.family for n in beam] == ["A", "B", "C"]  # not three variants of A
    assert result.best.candidate.family == "A" and result.best_speedup == pytest.approx(1.5)


def test_beam_composes_over_rounds_and_crossover() -> None:
    land = Landscape({"A": [1.5], "B": [1.3], "C": [1.2]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=200),
                        config=BeamConfig(width=2, rounds=3, branching=2, min_improvement=0.0))
    result = asyncio.run(search.run(ROOT))
    assert result.best_speedup == pytest.approx(1.5 * 1.3 * 1.2)
    assert any(n.candidate.family == "crossover" for n in result.root.walk())
    # best-so-far history is monotone and ends at the best
    values = [s for _, s in result.history]
    assert values == sorted(values) and values[-1] == pytest.approx(result.best_speedup)


def test_beam_early_stop_on_plateau() -> None:
    land = Landscape({"A": [1.5], "B": [1.01], "C": [1.005]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=500),
                        config=BeamConfig(width=3, rounds=4, branching=3, crossover=False))
    result = asyncio.run(search.run(ROOT))
    assert result.stopped == "plateau: rounds 2-3 improved the best by less than 3%"
    assert result.rounds == 3  # two flat rounds in a row
    impatient = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=500),
                           config=BeamConfig(width=3, rounds=4, branching=3, crossover=False, patience=1))
    result = asyncio.run(impatient.run(ROOT))
    assert result.stopped == "plateau: round 2 improved the best by less than 3%" and result.rounds == 2


def test_beam_retires_plateaued_family() -> None:
    land = Landscape({"A": [1.5, 1.6, 1.7], "B": [1.05], "C": [1.2], "D": [1.15], "E": [1.1]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=500),
                        config=BeamConfig(width=2, rounds=4, branching=2, crossover=False, min_improvement=0.0,
                                          retire_after=1, retire_fraction=0.25))
    asyncio.run(search.run(ROOT))
    assert "B" in search.retired  # 1.05x: plateaued, far below the leader's 1.7x
    assert not {"A", "C"} & search.retired  # the leader, and a family that still helps (1.2x)


def test_failures_stay_in_the_tree_as_negative_rewards() -> None:
    land = Landscape({"A": [1.2], "broken": [2.0]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=50),
                        config=BeamConfig(width=2, rounds=1, branching=2))
    result = asyncio.run(search.run(ROOT))
    failed = [n for n in result.root.walk() if n.status == "compile_error"]
    assert failed and failed[0].evaluation is not None and failed[0].evaluation.reason
    assert Objective().reward(failed[0].evaluation) < 0
    assert result.best.candidate.family == "A"


def test_candidate_budget_holds() -> None:
    land = Landscape({f"F{i}": [1.0 + i / 100] for i in range(20)})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=7),
                        config=BeamConfig(width=4, rounds=4, branching=4))
    result = asyncio.run(search.run(ROOT))
    assert result.evaluations == 7
    assert result.stopped == "candidate budget spent"
    assert len(land.calls) == 7


def test_wall_time_budget_holds() -> None:
    land = Landscape({f"F{i}": [1.0 + i / 100] for i in range(50)}, delay=0.05)
    search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=None, wall_seconds=0.4),
                  config=MCTSConfig(parallel=2))
    result = asyncio.run(search.run(ROOT))
    assert result.stopped == "time budget spent"
    assert result.seconds < 1.0


def test_the_time_budget_counts_from_the_users_start_and_keeps_the_reserve() -> None:
    import time

    land = Landscape({f"F{i}": [1.0 + i / 100] for i in range(50)}, delay=0.05)
    # the job began 2 s ago (its baseline profile, say); 2.5 s in all, 0.4 s kept for the winner's checks
    budget = Budget(max_candidates=None, wall_seconds=2.5, started=time.monotonic() - 2.0, reserve_seconds=0.4)
    assert budget.search_seconds() == pytest.approx(2.1)
    assert budget.deadline() == pytest.approx(budget.started + 2.5)  # type: ignore[operator]
    t0 = time.monotonic()
    result = asyncio.run(MCTS(LandscapePolicy(land), land, budget=budget, config=MCTSConfig(parallel=2)).run(ROOT))
    assert result.stopped == "time budget spent"
    assert time.monotonic() - t0 < 1.0  # ~0.1 s: 2.1 s after the user's start, not after the search's
    assert result.seconds > 2.0  # counted from the user's start


def test_the_reserve_is_a_quarter_of_the_budget_at_most_20_s() -> None:
    from warpforge.search.engine import reserve_for

    assert reserve_for(None) == 0.0
    assert reserve_for(20.0) == pytest.approx(5.0)
    assert reserve_for(300.0) == pytest.approx(20.0)


def test_the_winners_checks_get_the_deadline_and_stop_at_it() -> None:
    import time

    from warpforge.search.optimize import confirm_winner

    class Checked:
        def __init__(self, status: str) -> None:
            self.status, self.reason, self.speedup, self.timing = status, "", 2.0, None
            self.significant = True

    class Sanitizing(Landscape):
        def __init__(self) -> None:
            super().__init__({"A": [2.0, 1.5, 1.3]})
            self.checked: list[tuple[tuple[str, ...], float | None]] = []

        async def sanitize(self, c: Candidate, deadline: float | None = None) -> Checked:
            self.checked.append((c.steps, deadline))
            await asyncio.sleep(0.2)
            return Checked("racy")  # every winner fails: the next one is tried while time is left

    land = Sanitizing()
    result = asyncio.run(MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=4),
                              config=MCTSConfig(parallel=1)).run(ROOT))
    assert sum(1 for n in result.nodes if n.ok and (n.speedup or 0) > 1.01) == 3
    deadline = time.monotonic() + 0.1
    asyncio.run(confirm_winner(result, land, deadline=deadline))
    assert len(land.checked) == 1 and land.checked[0][1] == deadline  # the first, with the deadline; then none
    assert result.best is result.root  # nothing passed: nothing is offered
    land.checked.clear()
    asyncio.run(confirm_winner(result, land, deadline=time.monotonic() + 10))
    assert [c[0] for c in land.checked] == [("A#1",), ("A#2",)]  # with time left, the two still unchecked


@dataclass(frozen=True)
class PartlyChecked:
    """A result whose checks stopped after its first run (the evaluator's two-step checks of a long kernel)."""

    status: str
    reason: str
    speedup: float | None
    verified: bool = False


class PartlyCheckedLandscape(Landscape):
    """Family P's single steps come back ok but partly checked; any composition is verified in full."""

    async def evaluate(self, c: Candidate) -> Ev | PartlyChecked:
        ev = await super().evaluate(c)
        if ev.status == "ok" and c.steps and all(st.startswith("P#") for st in c.steps):
            return PartlyChecked("ok", "", ev.speedup)
        return ev


def test_a_partly_checked_result_guides_the_search_but_never_wins() -> None:
    from warpforge.search.optimize import confirm_winner

    land = PartlyCheckedLandscape({"P": [1.5], "A": [1.2]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=10),
                        config=BeamConfig(width=2, branching=4, rounds=3))
    result = asyncio.run(search.run(ROOT))
    p = next(n for n in result.nodes if n.candidate.steps == ("P#0",))
    assert p.ok and not p.verified and p.speedup == pytest.approx(1.5)
    # it was a parent: its child with A is verified and the best (1.8x); P alone (1.5x) was never "the best"
    assert result.best.candidate.steps == ("A#0", "P#0") and result.best.verified
    assert all(best <= 1.2 + 1e-9 or best == pytest.approx(1.8) for _, best in result.history)

    checked: list[tuple[str, ...]] = []

    class Sanitizing(PartlyCheckedLandscape):
        async def sanitize(self, c: Candidate, deadline: float | None = None) -> Ev:
            checked.append(c.steps)
            return Ev("racy", "", 1.0)  # every winner fails: the next verified one is tried

    asyncio.run(confirm_winner(result, Sanitizing({"P": [1.5], "A": [1.2]})))
    assert ("P#0",) not in checked and checked[:2] == [("A#0", "P#0"), ("A#0",)]


def test_target_speedup_stops() -> None:
    land = Landscape({"A": [3.0], "B": [1.1], "C": [1.05]})
    search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=100, target_speedup=2.0),
                  config=MCTSConfig(parallel=1))
    result = asyncio.run(search.run(ROOT))
    assert result.stopped.startswith("target speedup")
    assert result.best_speedup >= 2.0


def test_cancellation_returns_best_so_far() -> None:
    land = Landscape({f"F{i}": [1.0 + i / 10] for i in range(30)}, delay=0.01)

    async def go() -> tuple[object, list[SearchEvent]]:
        cancel = asyncio.Event()
        events: list[SearchEvent] = []

        def on_event(e: SearchEvent) -> None:
            events.append(e)
            if e.kind == "evaluated" and e.evaluations >= 6:
                cancel.set()

        search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=1000), cancel=cancel,
                      on_event=on_event, config=MCTSConfig(parallel=1))
        return await search.run(ROOT), events

    result, events = asyncio.run(go())
    assert result.stopped == "cancelled"  # type: ignore[attr-defined]
    assert 6 <= result.evaluations <= 8  # type: ignore[attr-defined]
    assert result.best_speedup > 1.0  # type: ignore[attr-defined]
    assert events[-1].kind == "stopped"


def test_mcts_widens_progressively_and_deepens() -> None:
    land = Landscape({f"F{i}": [1.0 + (i % 5) / 20] for i in range(12)})
    cfg = MCTSConfig(widen_k=1.0, widen_alpha=0.5, asymmetry=0.0, parallel=1)
    search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=30), config=cfg)
    result = asyncio.run(search.run(ROOT))
    root = result.root
    # children <= ceil(k * N^alpha) at the end (N = root visits), far fewer than the 12 proposals
    assert len(root.children) <= math.ceil(cfg.widen_k * root.visits ** cfg.widen_alpha)
    assert len(root.children) < 12
    assert max(n.depth for n in root.walk()) >= 2  # compositions were explored


def test_mcts_asymmetric_branching() -> None:
    land = Landscape({"good": [2.0], "meh": [1.01], **{f"X{i}": [1.0 + i / 100] for i in range(10)}})
    search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=40),
                  config=MCTSConfig(widen_k=1.0, asymmetry=3.0, parallel=1))
    result = asyncio.run(search.run(ROOT))
    good = next(n for n in result.root.children if n.candidate.family == "good")
    assert search.width_limit(good) > search.width_limit(
        next(n for n in result.root.walk() if n.ok and (n.speedup or 0) < 1.02 and n is not result.root))
    assert len(good.children) >= max(len(n.children) for n in result.root.children if n is not good)


def test_mcts_prunes_dead_ends() -> None:
    land = Landscape({"broken": [2.0], "A": [1.3], "B": [1.2]})
    search = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=50), config=MCTSConfig(parallel=1))
    result = asyncio.run(search.run(ROOT))
    for n in result.root.walk():
        if n.status == "compile_error":
            assert n.children == [] and n.exhausted
    assert result.stopped == "search space exhausted"
    assert result.best_speedup == pytest.approx(1.3 * 1.2)


def test_search_memory_makes_a_rerun_start_smarter(tmp_path: Path) -> None:
    land = Landscape({f"F{i}": [1.01] for i in range(8)} | {"winner": [1.8]})
    mem = SearchMemory(tmp_path / "warpforge.db")
    key = "kernel-under-spec"
    first = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=40), config=MCTSConfig(parallel=1))
    mem.record_result(key, asyncio.run(first.run(ROOT)))
    summary = mem.summary(key)
    assert summary["winner"][1] >= 1 and summary["winner"][2] == pytest.approx(1.8)

    land.calls.clear()
    second = MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=3), config=MCTSConfig(parallel=1))
    ctx = SearchContext(root=ROOT, memory=mem.summary(key))
    asyncio.run(second.run(ROOT, ctx))
    assert land.calls[1] == ("winner#0",)  # first proposal evaluated after the baseline

    mem.record_rejection(key, "winner")
    assert mem.summary(key)["winner"][0] == summary["winner"][0] + 1


def test_original_that_fails_stops_cleanly() -> None:
    class Broken(Landscape):
        async def evaluate(self, c: Candidate) -> Ev:
            return Ev("crashed", "illegal address", None)

    land = Broken({"A": [1.5]})
    result = asyncio.run(BeamSearch(LandscapePolicy(land), land).run(ROOT))
    assert "original kernel could not be evaluated" in result.stopped
    assert result.best is result.root and not result.improved


def test_html_report_shows_tree_plot_and_diff() -> None:
    from warpforge.search.report import ReportInfo, render

    land = Landscape({"A": [1.5], "B": [1.3], "broken": [2.0]})
    result = asyncio.run(BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=30),
                                    config=BeamConfig(width=2, rounds=2)).run(ROOT))
    page = render(result, ReportInfo("k.cu", "k", gpu="NVIDIA H100 80GB HBM3 (synthetic landscape)",
                                     diff="--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new", findings=["WF101 x"]))
    assert f"{result.best_speedup:.2f}× faster" in page
    assert page.count("<circle") == result.evaluations  # one dot per evaluation
    assert "compile_error" in page and "synthetic compile error" in page  # failures shown with reasons
    assert '<span class="add">+new</span>' in page
    assert "<script" not in page  # self-contained, no scripts or external assets


def test_the_tree_holds_only_evaluated_nodes() -> None:
    land = Landscape({f"F{i}": [1.0 + i / 50] for i in range(10)})
    for search in (BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=9),
                              config=BeamConfig(width=3, rounds=3, branching=3)),
                   MCTS(LandscapePolicy(land), land, budget=Budget(max_candidates=9), config=MCTSConfig(parallel=3))):
        result = asyncio.run(search.run(ROOT))
        assert all(n.evaluation is not None for n in result.root.walk())
        assert sum(1 for _ in result.root.walk()) == result.evaluations == 9
