"""The WarpForge-specific wire protocol, typed: every custom notification and command result the server sends.

It mirrors ``extension/src/protocol.ts`` interface for interface and field for field (``tests/test_protocol.py``
reads that file and fails when the two drift), so the client never has to guess where a field sits.
Convention on both sides: a TypeScript field without ``?`` is a dataclass field without a default and is
always sent (``null`` when None); a field with ``?`` has a default here and is left out when None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: workspace/executeCommand names the server registers (``Cmd`` in protocol.ts)
CMD_OPTIMIZE = "warpforge.optimize"
CMD_CANCEL = "warpforge.cancel"
CMD_ACCEPT = "warpforge.accept"
CMD_REJECT = "warpforge.reject"
CMD_SHOW_CANDIDATE = "warpforge.showCandidate"
CMD_ADD_SPEC = "warpforge.addSpec"
CMD_PROFILE = "warpforge.profile"
CMD_ACCEPT_HUNKS = "warpforge.acceptHunks"
#: run by the "Add benchmark spec" code action after its edit: shows its argument (where the values came from,
#: which lines are guesses) as window/showMessage
CMD_SPEC_NOTICE = "warpforge.specNotice"
CANDIDATE_NOTIFICATION = "warpforge/candidate"
JOB_DONE_NOTIFICATION = "warpforge/jobDone"
SEARCH_TREE_REQUEST = "warpforge/searchTree"
GPU_STATUS_REQUEST = "warpforge/gpuStatus"
#: the analysis of a document began a phase or ended (the editor's "starting / analysing" language status)
ANALYSIS_NOTIFICATION = "warpforge/analysis"
#: progress tokens of optimize jobs start with this (the client routes their progress by it)
JOB_TOKEN_PREFIX = "warpforge-"


def wire(obj: Any) -> Any:
    """A protocol value as JSON-ready data, following the module's field convention (``wire`` metadata names
    a field whose wire name is a Python keyword)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            optional = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if value is None and optional:
                continue
            out[f.metadata.get("wire", f.name)] = wire(value)
        return out
    if isinstance(obj, list | tuple):
        return [wire(v) for v in obj]
    if isinstance(obj, dict):
        return {k: wire(v) for k, v in obj.items()}
    return obj


# ------------------------------------------------------------------ command results
@dataclass(frozen=True)
class OptimizeResult:
    job: str
    token: str


@dataclass(frozen=True)
class ProfileResult:
    job: str
    token: str


@dataclass(frozen=True)
class CancelResult:
    cancelled: str


@dataclass(frozen=True)
class AcceptResult:
    applied: bool
    reason: str | None = None
    #: the host launch sites the accepted variant changes (``file:line: old -> new``)
    launch_changes: list[str] | None = None
    #: the launch sites that still need a change by hand (each says what to write), not applied
    needs_launch_change: list[str] | None = None
    #: what the user must still do after an applied variant: a build change (``search.optimize.build_change``)
    notice: str | None = None


@dataclass(frozen=True)
class RejectResult:
    rejected: bool


@dataclass(frozen=True)
class AddSpecResult:
    applied: bool


@dataclass(frozen=True)
class DiffHunk:
    """One change of a variant's diff (``lsp.hunks.Hunk``): document lines [old_start, old_end) become variant
    lines [new_start, new_end), 0-based; ``index`` is what ``warpforge.acceptHunks`` names."""

    index: int
    old_start: int
    old_end: int
    new_start: int
    new_end: int


@dataclass(frozen=True)
class CandidateTexts:
    job: str
    candidate: str
    uri: str
    kernel: str
    speedup: float | None
    family: str
    status: str
    #: the whole file as the job saw it
    original: str
    #: the whole file with the candidate applied
    variant: str
    #: the changes from ``original`` to ``variant``, each acceptable alone (``warpforge.acceptHunks``)
    hunks: list[DiffHunk] | None = None


# ------------------------------------------------------------------ notifications
@dataclass(frozen=True)
class Evidence:
    """What was measured and checked for a verified variant (``app.events.Evidence`` on the wire)."""

    headline: str | None = None
    checked: str | None = None
    seeds: int | None = None
    sizes: list[str] | None = None
    interval: list[float] | None = None
    #: the back-to-back ("hot", L2 warm) speedup where it differs from the cold one by more than the interval
    hot: float | None = None


@dataclass(frozen=True)
class PhysicalLimit:
    """A measured time against the kernel's physical limit (``profile.limit.Limit`` on the wire)."""

    #: in words: "84 % of the memory limit (403 MB at the measured copy bandwidth, 3000 GB/s)", or why unknown
    text: str
    #: "memory" | "compute"
    bound: str | None = None
    #: % of the bound's limit
    pct_limit: float | None = None
    #: % of the measured copy bandwidth, whatever the bound
    pct_copy_bw: float | None = None
    #: the bound's least time, in ms
    floor_ms: float | None = None


@dataclass(frozen=True)
class CandidateParams:
    job: str
    uri: str
    kernel: str
    candidate: str
    speedup: float
    #: relative half-width of the speedup's interval (0.02: ±2 %)
    spread: float | None = None
    gpu: str | None = None
    family: str | None = None
    families: list[str] | None = None
    rationale: str | None = None
    diff: str | None = None
    evidence: Evidence | None = None
    #: the variant's time against the kernel's physical limit
    limit: PhysicalLimit | None = None
    #: each host launch site the variant's launch changes (``file:line: old -> new``)
    launch_changes: list[str] | None = None
    #: a launch site cannot be rewritten for it: accepting it needs a launch change by hand
    needs_launch_change: bool | None = None


@dataclass(frozen=True)
class Withdrawn:
    """A variant offered during the search that the winner's checks turned down, and why."""

    candidate: str
    reason: str


@dataclass(frozen=True)
class JobDoneParams:
    job: str
    #: "optimize" | "profile"
    kind: str
    uri: str
    kernel: str
    #: done | cancelled | failed
    state: str
    #: "improved", else the state
    outcome: str
    message: str
    candidate: str | None
    speedup: float | None
    evaluations: int
    #: profile jobs: the bottleneck class, when one was measured
    cls: str | None = field(default=None, metadata={"wire": "class"})
    #: profile jobs: what was missing (no ncu, no GPU), when something was
    notice: str | None = None
    #: profile jobs: how many findings the profile gave
    findings: int | None = None
    #: optimize jobs: why the search stopped ("within 5 % of the physical limit: ...", "time budget spent")
    stopped: str | None = None
    #: optimize jobs: the result's time (the best variant's, else the original's) against the physical limit
    limit: PhysicalLimit | None = None
    #: optimize jobs: announced variants the winner's checks turned down (sanitizer, Nsight Compute): withdrawn
    withdrawn: list[Withdrawn] | None = None
    #: optimize jobs: the result's back-to-back ("hot", L2 warm) speedup, where it differs from the cold one by
    #: more than the interval
    hot: float | None = None


# ------------------------------------------------------------------ warpforge/searchTree
@dataclass(frozen=True)
class TreeNode:
    id: int
    parent: int | None
    family: str
    rationale: str
    status: str
    reason: str
    speedup: float | None
    depth: int
    visits: int
    eval_index: int | None
    children: list[int]
    #: ok with every verification run made; False for an ok candidate whose checks stopped early (clearly slower
    #: than the best of a long kernel): shown, never offered (absent from older results: True)
    verified: bool = True


@dataclass(frozen=True)
class HistoryPoint:
    evaluations: int
    best_speedup: float
    #: seconds from the job's start (absent from older results)
    seconds: float | None = None


@dataclass(frozen=True)
class SearchTree:
    job: str
    kernel: str
    uri: str
    strategy: str
    state: str
    message: str
    nodes: list[TreeNode]
    history: list[HistoryPoint]
    best: int | None = None
    best_speedup: float | None = None
    evaluations: int | None = None
    stopped: str | None = None
    seconds: float | None = None
    rounds: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any], **job: str) -> SearchTree:
        """From a search's own JSON (``SearchResult.to_json``, or nodes and history of a running search)."""
        return cls(nodes=[TreeNode(**n) for n in data.get("nodes", [])],
                   history=[HistoryPoint(**h) for h in data.get("history", [])],
                   strategy=str(data.get("strategy", "")), best=data.get("best"),
                   best_speedup=data.get("best_speedup"), evaluations=data.get("evaluations"),
                   stopped=data.get("stopped"), seconds=data.get("seconds"), rounds=data.get("rounds"),
                   job=job["job"], kernel=job["kernel"], uri=job["uri"], state=job["state"], message=job["message"])


@dataclass(frozen=True)
class GpuStatus:
    """What GPU work this server can run (``app.capabilities``): the editor shows it in the status bar and
    checks it before Optimize or Profile starts anything."""

    #: one line: the GPUs (or the Ray cluster / plug-in evaluator) variants are measured on, or why none
    summary: str
    can_optimize: bool
    can_profile: bool
    #: why GPU work cannot run on this machine ("" when it can)
    reason: str
    #: what to do instead ("" when nothing is needed)
    advice: str
    backend: str
    gpus: list[str]
    driver: str
    #: nvcc, ncu, compute_sanitizer, pycuda: where each was found, or "not found"
    tools: dict[str, str]


#: every protocol type, by the name of its TypeScript interface (tests/test_protocol.py compares them)
@dataclass(frozen=True)
class AnalysisParams:
    """``warpforge/analysis``: where the hints of ``uri`` are. ``phase`` is "source" (pattern hints, tens of
    milliseconds), "compiler" (nvcc and nvdisasm, about a second) or "done" (published, nothing running)."""

    uri: str
    phase: str


INTERFACES: dict[str, type] = {t.__name__: t for t in (
    OptimizeResult, ProfileResult, CancelResult, AcceptResult, RejectResult, AddSpecResult, DiffHunk, CandidateTexts,
    Evidence, PhysicalLimit, CandidateParams, Withdrawn, JobDoneParams, TreeNode, HistoryPoint, SearchTree,
    GpuStatus, AnalysisParams)}
