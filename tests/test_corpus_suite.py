"""What a corpus row says about why its numbers are what they are (``corpus_suite.why_not``).

On the GPU the corpus suite found a 77x privatized histogram that was never offered: the row said 1.00x and
``atomics_privatize: ok 8``, and only a second device call showed that Nsight Compute's confirmation had
turned all three best variants down. The row must carry that verdict, and the first reason each structural
family failed verification. Real search nodes and evaluation reports, no GPU.
"""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_suite as cs

from warpforge.cuda.candidate import Candidate
from warpforge.gpu.confirm import Confirmation
from warpforge.gpu.reports import Evaluation, TimingReport
from warpforge.gpu.timing import Speedup
from warpforge.search.tree import Node

STRUCTURAL = frozenset({"atomics_privatize", "warp_per_row"})


def _node(i: int, parent: Node | None, steps: tuple[str, ...], status: str, ratio: float | None = None,
          reason: str = "", confirmation: Confirmation | None = None) -> Node:
    cand = Candidate("k", f"__global__ void k() {{ /* {i} */ }}", steps=steps)
    ev = Evaluation(f"c{i}", f"h{i}", "k", status, reason)
    if ratio is not None:
        ev.timing = TimingReport(speedup=Speedup(ratio, ratio * 0.99, ratio * 1.01, 30), confirmation=confirmation)
    node = Node(i, cand, parent, evaluation=ev)
    if parent is not None:
        parent.children.append(node)
    return node


def test_a_row_names_the_variants_turned_down_after_the_search_and_why_families_failed() -> None:
    root = _node(0, None, (), "ok", 1.0)
    no = Confirmation(77.2, 77.0, 77.3, ran=True, agrees=False, ncu_ratio=0.98, baseline_us=[10.0],
                      candidate_us=[10.2])
    turned_down = _node(1, root, ("atomics_privatize:sm8",), "ok", 77.2, confirmation=no)
    offered = _node(2, root, ("block_size:128",), "ok", 1.2)
    _node(3, root, ("warp_per_row:warp8",), "incorrect", reason="`y`: 27 of 16777216 elements differ")
    _node(4, root, ("warp_per_row:block256",), "incorrect", reason="a later failure")
    slower = _node(5, root, ("atomics_privatize:sm4",), "ok", 1.1, confirmation=no)  # below the best: not listed
    out = cs.why_not([root, turned_down, offered, slower, *root.children[2:4]], offered, STRUCTURAL)
    assert [x["steps"] for x in out["not_offered"]] == [["atomics_privatize:sm8"]]
    assert "not significant" in out["not_offered"][0]["verdict"]
    assert out["structural_rejections"] == {"warp_per_row": "incorrect: `y`: 27 of 16777216 elements differ"}


def test_a_case_with_nothing_turned_down_says_so() -> None:
    root = _node(0, None, (), "ok", 1.0)
    best = _node(1, root, ("warp_per_row:warp8",), "ok", 9.0,
                 confirmation=Confirmation(9.0, 8.9, 9.1, ran=True, agrees=True, ncu_ratio=9.0))
    assert cs.why_not([root, best], best, STRUCTURAL) == {"not_offered": [], "structural_rejections": {}}
