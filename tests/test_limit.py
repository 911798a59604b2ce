"""The physical limit (``profile.limit``): which roof a kernel is judged against, from real specs, and the
search's stop rule once the best verified variant is within 5 % of it.

The specs are read from the project's kernels and from small kernels written here; the times and peaks are
numbers a GPU could give (the arithmetic is checked against the spec's own sizes, worked out by hand).
The stop rule runs the real beam and MCTS engines with the synthetic landscape evaluator the search tests
use (tests/test_search.py), each node's time being the baseline's over its speedup.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from conftest import ROOT
from test_search import ROOT as ROOT_CANDIDATE
from test_search import Landscape, LandscapePolicy
from warpforge.gpu.reports import TimingReport
from warpforge.gpu.timing import summarize
from warpforge.profile.limit import (
    RIDGE_FALLBACK,
    Limit,
    SpecWork,
    evaluation_limit,
    limit_reader,
    physical_limit,
    spec_work,
)
from warpforge.profile.roofline import Ceilings
from warpforge.search.beam import BeamConfig, BeamSearch
from warpforge.search.engine import Budget, SearchEvent
from warpforge.search.mcts import MCTS, MCTSConfig
from warpforge.search.tree import Node
from warpforge.spec.resolve import load_spec

H100 = Ceilings("H100 (test numbers)", bandwidth_gbps=3000.0, fp32_gflops=50_000.0, sm_count=132)


def _spec(path: str, kernel: str, text: str | None = None) -> SpecWork:
    return spec_work(load_spec(ROOT / path if text is None else path, kernel, text=text))


def test_saxpy_is_memory_bound_against_the_copy_bandwidth() -> None:
    work = _spec("kernels/saxpy.cu", "saxpy")
    n = 1 << 25
    assert work.bytes == 3 * n * 4 and work.flops == 2 * n and not work.fp64
    floor_ms = 3 * n * 4 / 3000e9 * 1e3  # 0.1342 ms
    lim = physical_limit(0.16, work, 3000.0, H100)
    assert lim.bound == "memory"
    assert lim.floor_ms == pytest.approx(floor_ms, rel=1e-5)
    assert lim.pct_limit == pytest.approx(round(100 * floor_ms / 0.16, 1))
    assert lim.pct_limit == lim.pct_copy_bw
    assert "3000 GB/s" in lim.text() and lim.text().startswith("84 % of the memory limit")
    assert not lim.near() and physical_limit(floor_ms * 1.04, work, 3000.0, H100).near()


def test_sgemm_is_compute_bound_against_the_fp32_rate() -> None:
    work = _spec("kernels/sgemm.cu", "sgemm_naive")
    m = 1024
    assert work.flops == 2 * m**3 + 3 * m * m and work.bytes == 4 * m * m * 4
    lim = physical_limit(0.5, work, 3000.0, H100)
    t_comp = work.flops / 50_000e9 * 1e3  # 0.043 ms: the FP32 floor is above the memory one (0.0056 ms)
    assert lim.bound == "compute"
    assert lim.floor_ms == pytest.approx(t_comp, rel=1e-5)
    assert lim.pct_limit == pytest.approx(round(100 * t_comp / 0.5, 1))
    assert lim.pct_copy_bw is not None and lim.pct_copy_bw < lim.pct_limit
    assert "FP32" in lim.against
    # without the FP32 peak, the intensity (~128 FLOP/byte) still says compute, and no % is invented
    bare = physical_limit(0.5, work, 3000.0, None)
    assert bare.bound == "compute" and bare.pct_limit is None and "FP32 peak" in bare.why
    assert bare.pct_copy_bw == lim.pct_copy_bw


DOUBLE_POLY = """
// @warpforge size N = 1 << 22
// @warpforge arg x: in double[N] uniform(-1, 1)
// @warpforge arg y: out double[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 128), block=128
// @warpforge flops 512 * N
// @warpforge bytes 2 * N * sizeof(double)
__global__ void dpoly(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i], p = 1.0;
    for (int k = 0; k < 256; k++) p = p * v + 1.0;
    y[i] = p;
}
"""

NO_WORK = """
// @warpforge size N = 4096
// @warpforge arg x: in float[N] uniform(-1, 1)
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 128), block=128
__global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def test_fp64_gets_no_compute_percentage_against_the_fp32_roof() -> None:
    work = _spec("dpoly.cu", "dpoly", DOUBLE_POLY)
    assert work.fp64 and work.flops is not None and work.bytes is not None
    assert work.flops / work.bytes > RIDGE_FALLBACK  # 512 FLOP per 16 bytes
    lim = physical_limit(2.0, work, 3000.0, H100)
    assert lim.bound == "compute" and lim.pct_limit is None and "FP64" in lim.why
    assert lim.pct_copy_bw is not None  # the memory side is still known
    assert lim.text().startswith("% of the physical limit unknown")


def test_a_spec_without_bytes_or_flops_has_no_limit() -> None:
    work = _spec("copy.cu", "copy", NO_WORK)
    assert work.bytes is None and work.flops is None
    lim = physical_limit(0.01, work, 3000.0, H100)
    assert lim.bound is None and lim.pct_limit is None and lim.pct_copy_bw is None and lim.floor_ms is None
    assert "`bytes`" in lim.why
    assert limit_reader(work, lambda _g: H100)(_Verified(0.01)) is None


def test_unmeasured_bandwidth_or_time_gives_no_percentage() -> None:
    work = _spec("kernels/saxpy.cu", "saxpy")
    no_bw = physical_limit(0.16, work, 0.0, H100)
    assert no_bw.bound == "memory" and no_bw.pct_limit is None and "copy bandwidth" in no_bw.why
    no_time = physical_limit(None, work, 3000.0, H100)
    assert no_time.pct_limit is None and no_time.floor_ms is not None and "no time" in no_time.why


def test_an_evaluation_is_read_from_its_timing_report() -> None:
    work = _spec("kernels/saxpy.cu", "saxpy")
    stats = summarize([0.150, 0.151, 0.149, 0.150, 0.152])
    ev = _Evaluation("ok", TimingReport(candidate=stats, peak_gbps=3000.0), "H100")
    lim = evaluation_limit(ev, work, None)
    assert lim.best_ms == pytest.approx(0.150) and lim.bound == "memory"
    assert lim.pct_limit == pytest.approx(round(100 * (3 * (1 << 25) * 4 / 3000e9 * 1e3) / 0.150, 1))
    plugin = evaluation_limit(_Evaluation("ok", None, ""), work, None)  # a plug-in evaluator: no timing
    assert plugin.pct_limit is None and "no time" in plugin.why
    assert Limit.__dataclass_fields__.keys() <= lim.to_json().keys()


# ------------------------------------------------------------------------------------------- the stop rule
@dataclass(frozen=True)
class _Evaluation:
    status: str
    timing: TimingReport | None
    gpu: str
    speedup: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class _Verified:
    """A node-like object with a verified evaluation taking ``ms``."""

    ms: float

    @property
    def evaluation(self) -> _Evaluation:
        return _Evaluation("ok", TimingReport(candidate=summarize([self.ms] * 5), peak_gbps=3000.0), "H100")


SAXPY = _spec("kernels/saxpy.cu", "saxpy")
SAXPY_FLOOR_MS = 3 * (1 << 25) * 4 / 3000e9 * 1e3


def _timed_reader(baseline_ms: float) -> object:
    """``limit_of`` for the landscape: a node's time is the baseline's over its speedup (the landscape gives
    speedups, not times), read against saxpy's spec at 3000 GB/s."""
    def read(node: Node) -> Limit | None:
        sp = node.speedup or (1.0 if node.parent is None and node.ok else None)
        if sp is None:
            return None
        return physical_limit(baseline_ms / sp, SAXPY, 3000.0, H100)
    return read


@pytest.mark.parametrize("strategy", ["beam", "mcts"])
def test_search_stops_when_the_best_is_within_5_percent_of_the_limit(strategy: str) -> None:
    # the original at 50 % of the copy bandwidth; family A makes it 1.5x (75 %), B another 1.3x (97.5 %)
    baseline = SAXPY_FLOOR_MS / 0.5
    land = Landscape({"A": [1.5], "B": [1.3], "C": [1.01], "D": [1.02], "E": [1.01]})
    events: list[SearchEvent] = []
    started: list[int] = []  # evaluator calls started when the limit was reached

    def on_event(e: SearchEvent) -> None:
        events.append(e)
        if e.kind == "at_limit":
            started.append(len(land.calls))

    kwargs = dict(budget=Budget(max_candidates=200), on_event=on_event, limit_of=_timed_reader(baseline))
    search = (BeamSearch(LandscapePolicy(land), land, config=BeamConfig(width=3, rounds=6, min_improvement=0.0),
                         **kwargs) if strategy == "beam"  # type: ignore[arg-type]
              else MCTS(LandscapePolicy(land), land, config=MCTSConfig(), **kwargs))  # type: ignore[arg-type]
    result = asyncio.run(search.run(ROOT_CANDIDATE))
    best_lim = _timed_reader(baseline)(result.best)  # type: ignore[operator]
    assert best_lim.pct_limit >= 95.0
    assert result.stopped.startswith("within 5 % of the physical limit: ")
    assert "% of the memory limit" in result.stopped
    at = [e for e in events if e.kind == "at_limit"]
    assert len(at) == 1 and at[0].node is result.best and at[0].message == best_lim.text()
    assert events[-1].kind == "stopped" and events[-1].message == result.stopped
    # it stopped there: no evaluation started after the one that reached the limit
    assert started == [len(land.calls)] and result.evaluations < 200


def test_search_below_the_limit_runs_its_budget() -> None:
    baseline = SAXPY_FLOOR_MS / 0.2  # at 20 %: even 1.5 * 1.3 stays far below the limit
    land = Landscape({"A": [1.5], "B": [1.3]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=200),
                        config=BeamConfig(width=2, rounds=3, min_improvement=0.0), limit_of=_timed_reader(baseline))  # type: ignore[arg-type]
    result = asyncio.run(search.run(ROOT_CANDIDATE))
    assert "physical limit" not in result.stopped and result.best_speedup == pytest.approx(1.95)


def test_an_original_at_its_limit_is_not_searched() -> None:
    land = Landscape({"A": [1.5]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=50),
                        limit_of=_timed_reader(SAXPY_FLOOR_MS / 0.98))  # type: ignore[arg-type]
    result = asyncio.run(search.run(ROOT_CANDIDATE))
    assert result.evaluations == 1 and result.best is result.root
    assert result.stopped.startswith("within 5 % of the physical limit")


def test_the_stop_rule_can_be_turned_off() -> None:
    land = Landscape({"A": [1.5]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=50, limit_pct=None),
                        limit_of=_timed_reader(SAXPY_FLOOR_MS / 0.98))  # type: ignore[arg-type]
    result = asyncio.run(search.run(ROOT_CANDIDATE))
    assert result.evaluations > 1 and "physical limit" not in result.stopped


def test_a_time_that_beats_the_roof_does_not_stop_the_search() -> None:
    """At 130 % of the copy bandwidth the roof does not bound the kernel (cache-resident data, or a spec whose
    bytes overstate the work): that is no sign the search is done."""
    land = Landscape({"A": [1.5]})
    search = BeamSearch(LandscapePolicy(land), land, budget=Budget(max_candidates=50),
                        limit_of=_timed_reader(SAXPY_FLOOR_MS / 1.3))  # type: ignore[arg-type]
    result = asyncio.run(search.run(ROOT_CANDIDATE))
    assert result.evaluations > 1 and "physical limit" not in result.stopped
