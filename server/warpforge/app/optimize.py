"""``OptimizeJob``: one kernel optimized, the same way from the CLI and from the editor.

The job owns everything between "optimize this kernel" and "here is the best verified variant": the
evaluator on the chosen backend, the baseline profile (Nsight Compute on the original kernel; its measured
findings replace the static ones and put the rules they motivate first), the policy (rules, plus the
model when a key is set), the search, the sanitizer's confirmation of the winner, reflection, and closing
the policy and the evaluator whatever happens. Front ends pass the snapshot (``PreparedKernel``) and
render the events; they never assemble the job themselves.

**An anytime search: the profile runs beside the first round.** A profile takes seconds (Nsight Compute
replays the kernel once per metric pass, then exports; the GPU's ceilings are measured the first time), and
a short budget spent waiting for it searches nothing. So, unless the workspace store already holds it
(``profile.reuse``), the profile starts with the search: the static findings order the first round, and the
measured findings order the rounds proposed after the profile arrives (``search.optimize.update_findings``).
It gets ``PROFILE_SHARE`` of the time budget (``profile_seconds``); Nsight Compute is stopped at the end of
that share (its whole session killed), and the search goes on without the profile and says so. A share too
short for any profile to finish (``PROFILE_MIN_SECONDS``) is not spent: the GPU stays the search's.

**Timing stays honest: the profile holds a GPU of the evaluator's own pool.** Candidates are timed on the
devices of the evaluator's local pool (``gpu.backends.LocalBackend``), which hands each device to one piece
of GPU work at a time. The profile takes a device from that same pool before the search starts and keeps it
until Nsight Compute's session has ended: nothing is timed while ncu replays kernels, and ncu never
measures a kernel that shares the GPU with a timed one. With several GPUs the profile holds one from the
start and candidates are verified and timed on the others. **On one GPU the first round goes first**: the
original and the first round (ordered by the static findings) are verified and timed, then the profile takes
the GPU with its share counted from then (never past the job's budget), and the rounds after it wait for it;
its findings order the rounds proposed after it arrives. Measured on an H200 (benchmarks/RESULTS.md, "Anytime
search"), a profile taken first put the first verified improvement of a 90 s job at 9-18 s (Nsight Compute
held the only GPU); the static findings alone reach the long budget's result at 20 s, so the first round
loses little by not waiting for the measured ones. A search that ends within its first round is profiled
after it, for the next job to reuse.
Where the evaluator has no local pool the profile could share (a Ray cluster, whose GPUs may be this
machine's; a plug-in evaluator), the profile runs before the search, as it did before, within the same share.
The job waits for a profile still running when the search ends (it is bounded by its share), so the
profile is kept for the next job and the profile's event always precedes the job's end.

Where the time went is recorded in ``phases`` (``app.phases``): setup, the profile (and how long it held the
GPU), the baseline, the search, the winner's checks, and the first verified improvement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any

from .. import defaults
from ..policy.llm import policy_for_request
from ..profile.findings import Finding
from ..profile.limit import Limit, SpecWork, limit_reader, spec_work
from ..profile.ncu import DEFAULT_SECTIONS
from ..profile.profiler import ProfileReport, profile_kernel
from ..profile.reuse import profile_key, remember, reused
from ..profile.roofline import Ceilings, cached_ceilings
from ..search.engine import Budget, SearchEngine, SearchEvent, reserve_for
from ..search.memory import SearchMemory
from ..search.optimize import HostCodeRefused, OptimizeOutcome, OptimizeRequest, optimize, update_findings
from ..search.tree import EvaluatorLike, Node
from ..store import ProfileKey, Store
from . import backend
from .events import CandidateFound, Evidence, JobEvent, JobFailed, JobFinished, JobStarted, OnEvent, Profiled, Progress
from .events import ignore as _ignore
from .phases import Phases
from .prepared import PreparedKernel, log_failure
from .profile import measured_findings

#: a verified variant is offered when its speedup is above this (and outside the timing noise), as
#: ``search.optimize.confirm_winner`` ranks winners
OFFER_ABOVE = 1.01
#: the baseline's profile before a search runs at most this much data (``profile_kernel(max_bytes=...)``)
PROFILE_MAX_BYTES = 512 << 20
#: the part of the time budget the baseline's profile may take (Nsight Compute is stopped at its end)
PROFILE_SHARE = 0.25
#: the profile's limit without a time budget (s)
PROFILE_MAX_SECONDS = 300.0
#: a share shorter than this (s) is not spent on a profile: Nsight Compute's default sections took 8-17 s on
#: naive kernels (issue 28, H200), so a shorter profile is cut off unfinished, its GPU time lost to the search
PROFILE_MIN_SECONDS = 8.0


def profile_seconds(budget_seconds: float | None) -> float:
    """How long the baseline's profile may take of a ``budget_seconds`` job: ``PROFILE_SHARE`` of it, at most
    ``PROFILE_MAX_SECONDS`` (that alone without a time budget)."""
    if not budget_seconds:
        return PROFILE_MAX_SECONDS
    return min(PROFILE_MAX_SECONDS, PROFILE_SHARE * budget_seconds)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizeSettings:
    strategy: str = defaults.STRATEGY
    #: most candidates to evaluate
    budget: int = defaults.BUDGET
    #: wall-clock budget in seconds
    seconds: float = defaults.TIME_BUDGET
    #: stop once a variant is this many times faster
    target: float | None = None
    #: target architecture (None: the GPU's; the search's default is sm_90)
    arch: str | None = None
    #: Anthropic API key (None: $ANTHROPIC_API_KEY; without one, rules only)
    api_key: str | None = None
    #: the model to ask, when not the default
    model: str | None = None
    nvcc: str | None = None
    #: profile the original kernel first (off for plug-in evaluators: they are not a GPU ncu can reach)
    profile_baseline: bool = True
    #: the CUDA device the baseline is profiled on
    device: int = 0
    #: search only variants that keep the launch contract (``--keep-launch``, ``warpforge.keepLaunch``)
    keep_launch: bool = False
    #: profile the baseline even when the workspace store holds its profile (``--fresh-profile``); the new
    #: profile replaces the stored one
    fresh_profile: bool = False


@dataclass
class OptimizeJob:
    """One optimize job (see the module docstring). ``run`` once; the fields show how it stands meanwhile."""

    prepared: PreparedKernel
    settings: OptimizeSettings
    make_evaluator: Callable[[OptimizeRequest], EvaluatorLike]
    #: the static findings known at the start (the baseline profile may replace them)
    findings: Sequence[Finding] = ()
    memory: SearchMemory | None = None
    on_event: OnEvent = _ignore
    #: where the blocking profile runs (None: the loop's default executor)
    pool: Executor | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    request: OptimizeRequest = field(init=False)
    evaluator: EvaluatorLike | None = field(default=None, init=False)
    search: SearchEngine | None = field(default=None, init=False)
    outcome: OptimizeOutcome | None = field(default=None, init=False)
    #: verified faster variants announced so far, by candidate hash
    announced: dict[str, Node] = field(default_factory=dict, init=False)
    #: what the policy said once (no API key, ...), for the front end to show
    notices: list[str] = field(default_factory=list, init=False)
    #: running | done | cancelled | failed
    state: str = field(default="running", init=False)
    message: str = field(default="", init=False)
    gpu: str = field(default="", init=False)
    #: the GPU's measured ceilings, from the baseline profile (else the disk cache, looked up once per GPU)
    ceilings: dict[str, Ceilings | None] = field(default_factory=dict, init=False)
    #: the baseline's profile, measured now or reused from the store (``report.reused`` says which)
    profile: ProfileReport | None = field(default=None, init=False)
    #: where the job's time went (``app.phases``), filled in as it runs
    phases: Phases = field(default_factory=Phases, init=False)
    #: the blocking profiler (``profile_kernel``'s signature; None: that one); tests on machines without ncu
    #: give a stand-in
    profiler: Callable[..., ProfileReport] | None = None
    _policy: Any = field(default=None, init=False)
    #: set once the first round has been timed, where the profile waits for it (one GPU in the pool)
    _round_one: asyncio.Event | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.request = OptimizeRequest(
            self.prepared.file, self.prepared.text, self.prepared.kernel.name, s.strategy,
            Budget(max_candidates=s.budget, wall_seconds=s.seconds, target_speedup=s.target),
            findings=list(self.findings), arch=s.arch or "sm_90", prepared=self.prepared.parts(),
            keep_launch=s.keep_launch,
            # with host launches to keep correct, a winner whose launch cannot be written there is not preferred
            launch_writable=self.prepared.launch_writable if self.prepared.has_launch_sites else None)

    @property
    def kernel(self) -> str:
        return self.prepared.kernel.name

    def start_evaluator(self) -> EvaluatorLike:
        """Make the evaluator now (a front end that wants "cannot start" before it says "started" calls this;
        ``run`` does otherwise)."""
        if self.evaluator is None:
            self.evaluator = self.make_evaluator(self.request)
        return self.evaluator

    async def run(self) -> OptimizeOutcome:
        """Run the job to its end. The last event is ``JobFinished`` (done or cancelled) or ``JobFailed``, sent
        after the policy and the evaluator are closed; a failure is then raised again for front ends that
        answer it by kind (no GPU, an unreachable cluster)."""
        self._emit(JobStarted("optimize", self.kernel, f"{self.settings.strategy} search: measuring the baseline"))
        policy: Any = None
        profiling: asyncio.Future[None] | None = None
        final: JobEvent
        error: BaseException | None = None
        # The user's wait starts now: the time budget covers the baseline's profile and verification, the
        # search, and the winner's checks (a part of it is kept for those where the evaluator makes them).
        b = self.request.budget
        self.phases = Phases()
        self.request.budget = replace(b, started=self.phases.started, reserve_seconds=0.0)
        self.phases.begin("setup", 0.0)
        try:
            evaluator = self.start_evaluator()
            if getattr(evaluator, "sanitize", None) is not None:
                self.request.budget = replace(self.request.budget, reserve_seconds=reserve_for(b.wall_seconds))
            await backend.ready(evaluator)
            if self.settings.profile_baseline:
                profiling = await self._start_profile()
            if self.phases.seconds("setup") is None:  # a profile before the search ended it already
                self.phases.end("setup")
            # Built after a profile made before the search (or reused): the rules are ordered by the findings
            # they are given; a profile beside the search hands its findings over when it arrives.
            s = self.settings
            policy = self._policy = policy_for_request(
                self.request, api_key=s.api_key, memory=self.memory, settings={"model": s.model} if s.model else None,
                on_notice=self.notices.append, nvcc=s.nvcc)
            if self.profile is not None and profiling is not None:  # arrived while the policy was being made
                update_findings(policy, self.request.findings)
            search_start = self.phases.now()
            self.outcome = await optimize(self.request, evaluator, policy=policy, cancel=self.cancel,
                                          on_event=self._on_search_event, memory=self.memory,
                                          on_search=self._on_search, limit_of=self._limit_of())
            self._search_phases(self.outcome, search_start)
            if self._round_one is not None:
                self._round_one.set()  # a search that ended within its first round: profile now, for the next job
            if profiling is not None and not profiling.done() and not self.cancel.is_set():
                self._emit(Progress("the search is done; waiting for the baseline profile to end (within its "
                                    f"{profile_seconds(s.seconds):.0f} s share) so the next job can reuse it",
                                    self.outcome.result.evaluations))
                try:
                    await profiling
                except Exception as e:  # the search's result stands without it
                    log_failure(log, f"the baseline profile of {self.kernel}", e)
            await policy.reflect(self.outcome.result)
            best = self.outcome.result.best
            if self.outcome.result.improved and best.candidate.hash not in self.announced:
                self._announce(best)  # chosen after the search (the sanitizer, the launch preference): say it
            final = self._finished(self.outcome)
        except asyncio.CancelledError as e:
            final, error = JobFinished("cancelled", "cancelled"), e
        except Exception as e:
            log_failure(log, f"optimize job for {self.kernel}", e)
            final, error = JobFailed(f"{type(e).__name__}: {e}", e), e
        if profiling is not None and not profiling.done():
            profiling.cancel()  # the profile's thread ends at its deadline; the job does not wait for it
        await self._close(policy)
        self.state = final.state if isinstance(final, JobFinished) else "failed"
        self.message = final.message
        self._emit(final)
        if error is not None:
            raise error
        assert self.outcome is not None
        return self.outcome

    def _search_phases(self, outcome: OptimizeOutcome, search_start: float) -> None:
        """The baseline, search and checks spans from the search's own clock (it started with the job)."""
        r = outcome.result
        end = self.phases.now()
        baseline_end = r.history_seconds[0] if r.history_seconds else min(r.seconds, end)
        self.phases.span("baseline", search_start, baseline_end)
        self.phases.span("search", baseline_end, r.seconds)
        self.phases.span("checks", r.seconds, end)
        self.phases.busy(n.evaluation for n in r.nodes if n.evaluation is not None)
        if not r.improved:
            # nothing beat the original: no "first improvement" (the original timed against itself can read
            # 1.002x, which an engine's history or event must not turn into one)
            self.phases.first_improvement = None
        elif self.phases.first_improvement is None:  # an engine that sent no events: read its history
            # the history's first entry is the original's own evaluation, never an improvement
            first = next((t for (_, sp), t in zip(r.history[1:], r.history_seconds[1:], strict=False) if sp > 1.0),
                         None)
            if first is not None:
                self.phases.improved(first)
    def node(self, candidate: str) -> Node | None:
        """A node of the search by candidate hash or node id (what View, Accept and Reject name)."""
        if candidate in self.announced:
            return self.announced[candidate]
        root = self.search.root if self.search is not None else None
        return next((n for n in root.walk() if n.candidate.hash == candidate or str(n.id) == candidate), None) \
            if root is not None else None

    def limit(self, node: Node | None) -> Limit | None:
        """A verified node's measured time against the kernel's physical limit (``profile.limit``); None
        without a verified node, a spec with neither bytes nor flops, or a spec that does not resolve."""
        if node is None:
            return None
        read = self._limit_of()
        return read(node) if read is not None else None

    def _work(self) -> SpecWork | None:
        try:
            return spec_work(self.prepared.spec)
        except ValueError:
            return None

    def _ceilings_of(self, gpu: str) -> Ceilings | None:
        """Measured ceilings of ``gpu``: the baseline profile's, else the cache's (never measured mid-search:
        that would take the GPU from the search's own worker)."""
        if gpu not in self.ceilings:
            self.ceilings[gpu] = cached_ceilings(gpu)
        return self.ceilings[gpu]

    def _limit_of(self) -> Callable[[Any], Limit | None] | None:
        work = self._work()
        return limit_reader(work, self._ceilings_of) if work is not None else None

    def best_announced(self) -> Node | None:
        """The variant to offer: the job's result while it is still offered (the search's final choice, which may
        prefer a launch that can be written over a faster one), else the fastest still offered."""
        r = self.outcome.result if self.outcome is not None else None
        if r is not None and r.improved and r.best.candidate.hash in self.announced:
            return r.best
        return max(self.announced.values(), key=lambda n: n.speedup or 0) if self.announced else None

    # ----------------------------------------------------------------- steps
    def _emit(self, event: JobEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a front end's rendering bug must not lose the search
            log.exception("rendering %s", type(event).__name__)

    def _store(self) -> Store | None:
        """The workspace store the evaluator keeps its evaluations in (None for a plug-in evaluator): stored
        profiles live beside the evaluations they precede."""
        store = getattr(self.evaluator, "store", None)
        return store if isinstance(store, Store) else None

    def _lease(self) -> Any:
        """The evaluator's local GPU pool the profile takes a device from (None: the evaluator has no local pool
        the profile could share, see the module docstring)."""
        pool = getattr(self.evaluator, "backend", None)
        if getattr(pool, "kind", None) != "local" or not callable(getattr(pool, "acquire", None)):
            return None
        return pool

    async def _start_profile(self) -> asyncio.Future[None] | None:
        """Reuse the stored profile, or start profiling: beside the search when the profile can hold a GPU of
        the evaluator's pool (returns its task once it holds the GPU), else before it (returns None when
        done). Best effort: without ncu or counter access the static findings stay and the search goes on."""
        key, report = await self._stored_profile()
        if report is not None:
            self._apply_profile(report, beside=False)
            return None
        share = profile_seconds(self.settings.seconds)
        if share < PROFILE_MIN_SECONDS:
            note = (f"not profiled: the profile's share of a {self.settings.seconds:g} s budget is {share:.0f} s, "
                    f"less than Nsight Compute needs (~{PROFILE_MIN_SECONDS:.0f} s); the static findings guide the "
                    "search (a stored profile, from `warpforge profile` or a longer run, would be reused)")
            self._emit(Progress(note))
            self._apply_profile(ProfileReport(self.prepared.file, self.kernel, notice=note), beside=False)
            return None
        lease = self._lease()
        deadline = self.phases.started + share
        if lease is None:
            self.phases.profile_beside = False
            self._emit(Progress("profiling the original kernel (Nsight Compute)"))
            self.phases.end("setup")
            self.phases.begin("profile")
            made = await self._measure(key, self.settings.device, deadline)
            self.phases.end("profile")
            if made is not None:
                self._apply_profile(made, beside=False)
            return None
        self.phases.profile_beside = True
        if len(getattr(lease, "devices", ())) == 1:
            # One GPU: the first round is timed before the profile takes it (see the module docstring), so the
            # first verified improvement comes within seconds at any budget, not after Nsight Compute's 8-17 s.
            self._round_one = asyncio.Event()
            later = asyncio.ensure_future(self._profile_after_first_round(lease, key, share))
            later.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            return later
        holding = asyncio.Event()
        task = asyncio.ensure_future(self._profile_beside(lease, key, deadline, holding))
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        waiting = asyncio.ensure_future(holding.wait())
        try:
            # the profile is first in the GPU queue: nothing is timed before it has had the GPU
            await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        return task

    async def _profile_after_first_round(self, pool: Any, key: ProfileKey | None, share: float) -> None:
        """One GPU: wait until the first round has been timed (or the search has ended), then profile on the
        pool's GPU with the same share, counted from then and never past the job's time budget."""
        assert self._round_one is not None
        await self._round_one.wait()
        deadline = time.monotonic() + share
        if self.settings.seconds:
            deadline = min(deadline, self.phases.started + self.settings.seconds)
        await self._profile_beside(pool, key, deadline, asyncio.Event(), after_first_round=True)

    async def _profile_beside(self, pool: Any, key: ProfileKey | None, deadline: float,
                              holding: asyncio.Event, after_first_round: bool = False) -> None:
        """Profile on a GPU held from the evaluator's pool, while the search builds (see the module docstring).
        The GPU is given back only once the profiler's thread has returned (Nsight Compute's session ended)."""
        share = max(0.0, deadline - time.monotonic())
        when = ("after the first round, whose timings come first on the only GPU: its findings order the rounds "
                "proposed after it arrives" if after_first_round
                else "beside the first round: static findings order it")
        self._emit(Progress(f"profiling the original kernel (Nsight Compute, at most {share:.0f} s) {when}"))
        self.phases.begin("profile")
        report: ProfileReport | None = None
        reserved: set[str] = getattr(pool, "reserved", set())
        async with pool.acquire() as dev:
            self.phases.begin("profile_gpu")
            reserved.add(dev.key)  # the backend's warm-up measures nothing on it meanwhile
            holding.set()
            device = int(getattr(dev, "device", self.settings.device))
            made = asyncio.ensure_future(self._measure(key, device, deadline))
            try:
                report = await asyncio.shield(made)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await made  # the GPU stays held until ncu has ended, even when the job is cancelled
                raise
            finally:
                reserved.discard(dev.key)
                self.phases.end("profile_gpu")
        self.phases.end("profile")
        if report is not None:
            self._apply_profile(report, beside=True)

    async def _stored_profile(self) -> tuple[ProfileKey | None, ProfileReport | None]:
        """The profile's key in the workspace store, and the profile stored under it (unless ``fresh_profile``).

        A profile of the same kernel text, spec, build and GPU made by an earlier job (or ``warpforge profile``)
        is reused (``profile.reuse``); a complete profile made now is kept there for the next job."""
        s, p = self.settings, self.prepared
        loop = asyncio.get_running_loop()
        store = self._store()
        key: ProfileKey | None = None
        report: ProfileReport | None = None
        if store is not None:
            try:
                key = await loop.run_in_executor(self.pool, lambda: profile_key(
                    p.file, p.text, p.parts(), arch=s.arch, nvcc=s.nvcc, device=s.device, sections=DEFAULT_SECTIONS,
                    max_bytes=PROFILE_MAX_BYTES))
            except Exception as e:  # the key is an optimization: without one, profile as before
                log_failure(log, f"identifying the profile of {self.kernel}", e)
            if key is not None and not s.fresh_profile:
                found = key
                report = await loop.run_in_executor(self.pool, lambda: reused(store, found, p.file))
        if report is not None:
            spent = report.seconds.get("measured")
            took = f"; measuring it took {spent:.1f} s" if spent else ""
            self._emit(Progress(f"baseline profile reused from {report.reused}{took}"))
        return key, report

    async def _measure(self, key: ProfileKey | None, device: int, deadline: float) -> ProfileReport | None:
        """Profile the original on ``device`` by ``deadline`` (its share of the budget) and keep a complete
        profile in the store; None when the profiler failed outright (logged)."""
        s, p = self.settings, self.prepared
        loop = asyncio.get_running_loop()
        store = self._store()
        cap = max(0.0, deadline - time.monotonic())
        try:
            profiler = self.profiler or profile_kernel
            report = await loop.run_in_executor(self.pool, lambda: profiler(
                p.file, p.kernel.name, text=p.text, arch=s.arch, nvcc=s.nvcc, device=device, parsed=p.parts(),
                timeout=cap, max_bytes=PROFILE_MAX_BYTES, deadline=deadline))
        except Exception as e:  # no ncu, no counter access: one line; a bug keeps its traceback
            log_failure(log, f"profiling {self.kernel} before optimizing", e)
            return None
        if store is not None and key is not None:
            made, kept = key, report
            await loop.run_in_executor(self.pool, lambda: remember(store, made, kept))
        return report

    def _apply_profile(self, report: ProfileReport, *, beside: bool) -> None:
        """The profile's results into the job: the GPU's ceilings, and its measured findings for the proposals
        made from now on (the policy's, when the search is already running)."""
        self.profile = report
        kp = report.profile
        if kp is not None and kp.ceilings is not None:
            self.ceilings[kp.ceilings.gpu] = kp.ceilings
            if kp.gpu:
                self.ceilings[kp.gpu] = kp.ceilings
        measured = measured_findings(report, self.kernel) if report.profile is not None else []
        if measured:
            self.request.findings = measured
            if self.search is not None and self.search.context is not None:
                self.search.context.findings = measured
            if self._policy is not None:
                update_findings(self._policy, measured)
        self._emit(Profiled(report, tuple(measured)))
        if beside:
            at = self.phases.now()
            done = self.search.evaluations if self.search is not None else 0  # the progress bar stays where it is
            if measured:
                self._emit(Progress(f"baseline profile arrived at {at:.1f} s: {len(measured)} measured finding"
                                    f"{'s' if len(measured) != 1 else ''} order the rounds proposed from now on",
                                    done))
            else:
                self._emit(Progress(f"baseline profile ended at {at:.1f} s without measurements "
                                    f"({report.notice or 'no profile'}): the search goes on with the static findings",
                                    done))

    def _on_search(self, search: SearchEngine) -> None:
        self.search = search

    def _on_search_event(self, ev: SearchEvent) -> None:
        if ev.kind == "round" and ev.round >= 2 and self._round_one is not None:
            self._round_one.set()  # the first round has been timed: the profile may take the only GPU
        if ev.kind in ("evaluated", "round"):
            budget = self.settings.budget
            self._emit(Progress(f"round {ev.round} · {ev.evaluations} candidates · best {ev.best_speedup:.2f}×",
                                ev.evaluations, min(99, int(100 * ev.evaluations / budget)) if budget else None,
                                ev.best_speedup))
            # every verified variant that is significantly faster than the original is offered, not only those
            # that were the best when they came: after a Reject, "next best" is the next fastest of them all
            node = ev.node
            if (ev.kind == "evaluated" and node is not None and node.parent is not None and node.verified
                    and (node.speedup or 0) > OFFER_ABOVE and SearchEngine._significant(node)):
                self._announce(node)
        elif ev.kind == "improved" and ev.node is not None:
            self.phases.improved()
            self._announce(ev.node)
        elif ev.kind == "at_limit":
            self._emit(Progress(f"within 5 % of the physical limit ({ev.message}): stopping the search",
                                ev.evaluations, None, ev.best_speedup))

    def _announce(self, node: Node) -> None:
        if node.parent is None or node.speedup is None or node.candidate.hash in self.announced:
            return
        try:
            change = self.prepared.workspace_change(node.candidate)
            diff = change.diff(self.prepared.file)
        except HostCodeRefused as e:  # it could not be written into the file: not a variant to offer
            log.info("not announcing %s: %s", node.candidate.hash, e)
            return
        evidence = Evidence.of(node.evaluation)
        self.gpu = evidence.gpu or self.gpu or str(getattr(self.evaluator, "gpu_name", "") or "")
        self.announced[node.candidate.hash] = node
        self._emit(CandidateFound(node, node.speedup, diff, evidence, self.limit(node),
                                  tuple(change.messages()), change.needs_launch_change))

    def _finished(self, outcome: OptimizeOutcome) -> JobFinished:
        r = outcome.result
        gpu = self.gpu or str(getattr(self.evaluator, "gpu_name", "") or "")
        on = f" on {gpu}" if gpu else ""
        message = (f"{r.best_speedup:.2f}× faster (verified{on})" if r.improved
                   else f"no verified faster variant ({r.stopped})")
        limit = self.limit(r.best if r.best.ok else None)
        if limit is not None and limit.pct_limit is not None and limit.text() not in message:
            message += f"; {limit.text()}"
        if r.improved and self.phases.first_improvement is not None:
            message += f"; first verified improvement after {self.phases.first_improvement:.1f} s"
        hot: Any = getattr(getattr(r.best.evaluation, "timing", None), "hot_ratio", None) if r.improved else None
        if isinstance(hot, int | float):
            message += f"; back-to-back (hot, L2 warm): {hot:.2f}×"
        return JobFinished("cancelled" if self.cancel.is_set() else "done", message, r.improved, r.stopped, limit,
                           tuple(self._withdraw().items()), float(hot) if isinstance(hot, int | float) else None)

    def _withdraw(self) -> dict[str, str]:
        """Announced variants the winner's checks turned down after all (``search.optimize.confirm_winner``):
        compute-sanitizer failed, or Nsight Compute contradicted the timing by more than its interval. They
        leave ``announced`` (the lens stops offering them) and the editor is told (``JobFinished.withdrawn``),
        so a demoted claim is demoted in every front end, not only in the CLI's result."""
        out: dict[str, str] = {}
        for h, n in list(self.announced.items()):
            ev = n.evaluation
            conf: Any = getattr(getattr(ev, "timing", None), "confirmation", None)
            if getattr(conf, "agrees", None) is False:
                text = getattr(conf, "text", None)
                out[h] = str(text()) if callable(text) else "not confirmed by Nsight Compute"
            elif not n.verified:
                out[h] = f"{getattr(ev, 'status', 'failed')}: {getattr(ev, 'reason', '')}"
            else:
                continue
            del self.announced[h]
        return out

    async def _close(self, policy: Any) -> None:
        if policy is not None:
            try:
                await policy.aclose()
            except Exception:
                log.exception("closing the policy of the job for %s", self.kernel)
        await backend.close(self.evaluator)
