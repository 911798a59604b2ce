"""Where an optimize job's time went: its phases in seconds from the start, and its first verified improvement.

A user who asks for ``--time 20`` should see what the 20 s bought: how long the baseline's profile ran (and
whether it ran beside the search or before it, and how long it held the GPU), when the original's own
evaluation ended, how long the search and the winner's checks took, and when the first verified faster
variant came. The phases are wall-clock spans measured from the job's start (``time.monotonic()``), so
spans that ran at the same time overlap (the profile beside the baseline and the first round) and their
seconds do not add up to the total. ``compile_busy`` and ``gpu_busy`` are sums over the evaluations of the
seconds each spent building and on a GPU (``Evaluation.time_split``): with builds in parallel they can exceed
the wall-clock time.

The job (``app.optimize.OptimizeJob``) records them; the CLI prints ``text()`` and puts ``to_json()`` under
``phases`` in ``optimize --json``; the editor's finished message carries the first improvement.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: the order phases are shown in
ORDER = ("setup", "profile", "profile_gpu", "baseline", "search", "checks")
#: what each phase is, for ``text()``
LABELS = {"setup": "setup", "profile": "profile", "profile_gpu": "GPU held by the profile", "baseline": "baseline",
          "search": "search", "checks": "winner's checks"}


@dataclass
class Phases:
    """Spans (start, end) in seconds from ``started`` by phase name, and the first improvement's time."""

    started: float = field(default_factory=time.monotonic)
    spans: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    #: seconds from the start to the first verified, significantly faster variant (None: none yet)
    first_improvement: float | None = None
    #: whether the profile ran beside the search (True), before it (False), or not at all (None)
    profile_beside: bool | None = None
    #: summed seconds of the evaluations' builds and GPU work (overlapping; see the module docstring)
    compile_busy: float = 0.0
    gpu_busy: float = 0.0

    def now(self) -> float:
        return time.monotonic() - self.started

    def begin(self, name: str, at: float | None = None) -> None:
        self.spans[name] = (self.now() if at is None else at, None)

    def end(self, name: str, at: float | None = None) -> None:
        start = self.spans.get(name, (0.0, None))[0]
        self.spans[name] = (start, max(start, self.now() if at is None else at))

    def span(self, name: str, start: float, end: float) -> None:
        self.spans[name] = (start, max(start, end))

    def improved(self, at: float | None = None) -> None:
        """A verified faster variant came now (or ``at``): the first one's time is kept."""
        if self.first_improvement is None:
            self.first_improvement = self.now() if at is None else at

    def seconds(self, name: str) -> float | None:
        """The phase's length (None: it did not happen, or has not ended)."""
        start, end = self.spans.get(name, (0.0, None))
        return None if end is None else end - start

    def busy(self, evaluations: Iterable[Any]) -> None:
        """Sum the evaluations' build and GPU seconds (``time_split``)."""
        self.compile_busy = self.gpu_busy = 0.0
        for ev in evaluations:
            split = getattr(ev, "time_split", None) or {}
            self.compile_busy += float(split.get("build", 0.0) or 0.0)
            self.gpu_busy += float(split.get("gpu", 0.0) or 0.0)

    def to_json(self) -> dict[str, Any]:
        names = [n for n in ORDER if n in self.spans] + sorted(n for n in self.spans if n not in ORDER)
        return {
            "phases": {n: {"start": round(s, 3), "end": None if e is None else round(e, 3),
                           "seconds": None if e is None else round(e - s, 3)}
                       for n in names for s, e in [self.spans[n]]},
            "profile_beside_search": self.profile_beside,
            "first_improvement_seconds": None if self.first_improvement is None else round(self.first_improvement, 3),
            "compile_busy_seconds": round(self.compile_busy, 3),
            "gpu_busy_seconds": round(self.gpu_busy, 3),
        }

    def text(self) -> str:
        """One line: each phase's seconds, and when the first verified improvement came."""
        parts = []
        for n in ORDER:
            sec = self.seconds(n)
            if sec is None:
                continue
            extra = ""
            if n == "profile" and self.profile_beside is not None:
                extra = " beside the search" if self.profile_beside else " before the search"
            parts.append(f"{LABELS[n]} {sec:.1f} s{extra}")
        first = (f"first verified improvement at {self.first_improvement:.1f} s" if self.first_improvement is not None
                 else "no verified improvement")
        return "time: " + " · ".join([*parts, first])
