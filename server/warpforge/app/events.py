"""What a running job tells its front end: typed events, rendered by the CLI (a progress bar, lines of text)
and by the language server (work-done progress, ``warpforge/candidate``, ``warpforge/jobDone``).

Events carry facts, not presentation: a front end decides how a speedup or a failure reads. ``Evidence``
is read here, once, from whatever evaluation the backend produced (the local engine's ``Evaluation`` or a
plug-in evaluator's), so no front end has to guess where a field sits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..profile.findings import Finding
from ..profile.limit import Limit
from ..profile.profiler import ProfileReport
from ..search.tree import Node


@dataclass(frozen=True)
class Evidence:
    """What was measured and checked for one verified variant."""

    gpu: str = ""
    #: relative half-width of the speedup's interval (0.02: ±2 %), when the evaluator gives one
    spread: float | None = None
    #: the speedup's 95 % interval, when the evaluator gives one
    interval: tuple[float, float] | None = None
    headline: str | None = None
    #: what the correctness check compared, in words
    checked: str | None = None
    seeds: int | None = None
    #: the problem sizes the variant was checked at (the spec's, and an odd one when symbolic)
    sizes: tuple[str, ...] = ()
    #: the back-to-back ("hot", L2 warm) speedup, where it differs from the cold one by more than its interval
    hot: float | None = None

    @classmethod
    def of(cls, evaluation: Any) -> Evidence:
        """Read the evidence of an evaluation, whichever evaluator made it (duck-typed on purpose: plug-in
        evaluators are any object with ``status``/``speedup``, optionally ``gpu``, ``spread``, ``evidence``)."""
        extra = getattr(evaluation, "evidence", None)
        extra = extra if isinstance(extra, dict) else {}
        headline = getattr(evaluation, "headline", None)
        sp = getattr(getattr(evaluation, "timing", None), "speedup", None)
        interval = (float(sp.low), float(sp.high)) if sp is not None else None
        spread = getattr(evaluation, "spread", None)
        speedup = getattr(evaluation, "speedup", None)
        if spread is None and interval is not None and speedup:
            spread = (interval[1] - interval[0]) / 2 / float(speedup)
        correctness: Any = getattr(evaluation, "correctness", None)
        checked = correctness.evidence() if callable(getattr(correctness, "evidence", None)) else None
        seeds: Any = getattr(correctness, "seeds", None) if correctness is not None else extra.get("seeds")
        sizes: Any = getattr(correctness, "sizes_checked", None) if correctness is not None else extra.get("sizes")
        hot: Any = getattr(getattr(evaluation, "timing", None), "hot_ratio", None)
        return cls(gpu=str(getattr(evaluation, "gpu", "") or ""),
                   hot=float(hot) if isinstance(hot, int | float) else None,
                   spread=float(spread) if isinstance(spread, int | float) else None, interval=interval,
                   headline=headline() if callable(headline) else None, checked=checked,
                   seeds=len(seeds) if isinstance(seeds, list | tuple) else seeds if isinstance(seeds, int) else None,
                   sizes=tuple(str(s) for s in sizes) if isinstance(sizes, list | tuple) else ())


@dataclass(frozen=True)
class JobStarted:
    kind: str  # "optimize" | "profile"
    kernel: str
    #: what the job does first, in words ("measuring the baseline")
    message: str


@dataclass(frozen=True)
class Progress:
    message: str
    evaluations: int = 0
    #: 0-100 when the job knows how far it is
    percentage: int | None = None
    best_speedup: float | None = None


@dataclass(frozen=True)
class Profiled:
    """The kernel was profiled (a profile job, or an optimize job's baseline). ``findings`` are the measured
    ones, which guide an optimize job's search; empty when nothing could be measured (``report.notice``
    says why, and the static findings stay)."""

    report: ProfileReport
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class CandidateFound:
    """A newly verified faster variant, with its diff against the job's snapshot."""

    node: Node
    speedup: float
    diff: str
    evidence: Evidence
    #: its measured time against the kernel's physical limit (None: no spec bytes/flops, or no time)
    limit: Limit | None = None
    #: each host launch site its launch changes (``file:line: old -> new``), those needing a change by hand
    #: first and saying so (``search.optimize.WorkspaceChange.messages``)
    launch_changes: tuple[str, ...] = ()
    #: some launch site cannot be rewritten for it: accepting it needs a launch change by hand
    needs_launch_change: bool = False


@dataclass(frozen=True)
class JobFinished:
    state: str  # "done" | "cancelled"
    #: the result, in words ("1.60× faster (verified on H100)", "no verified faster variant (budget)")
    message: str
    improved: bool = False
    #: why the search stopped ("within 5 % of the physical limit: ...", "time budget spent", ...)
    stopped: str = ""
    #: the result's time against the physical limit: the best variant's, or the original's when none won
    limit: Limit | None = None
    #: announced variants the winner's checks turned down after all, each (candidate hash, why): the
    #: sanitizer failed, or Nsight Compute contradicted the timing beyond its interval; no longer offered
    withdrawn: tuple[tuple[str, str], ...] = ()
    #: the result's back-to-back ("hot") speedup where it differs from the cold one by more than the interval
    hot: float | None = None


@dataclass(frozen=True)
class JobFailed:
    message: str
    error: BaseException | None = field(default=None, compare=False)


JobEvent = JobStarted | Progress | Profiled | CandidateFound | JobFinished | JobFailed
OnEvent = Callable[[JobEvent], None]


def ignore(_event: JobEvent) -> None:
    """The event sink of a front end that renders only the result."""
