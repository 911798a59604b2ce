"""The evaluation API: ``await Evaluator(...).evaluate(candidate) -> Evaluation``.

One ``Evaluator`` serves one kernel of one file (its spec, its original as the oracle). Evaluations of
many candidates may be in flight at once: static guards run at once, builds run in a CPU process pool
(in parallel with each other and with GPU work), and GPU work is serialized per device through
``GpuPool``. Identical work is never done twice: an evaluation in flight is shared, a finished one is
kept in the workspace store keyed by (candidate hash, spec hash, GPU, driver).

A candidate is verified in this order, stopping at the first failure (cheapest checks first):

1. static guards on its source (clock reads, device-side launches, a changed signature) → rejected;
2. build (nvcc → cubin, only device code) → compile_error, incl. the compile timeout for compile bombs;
   SASS guards on the cubin → rejected;
3. on the GPU: the launch itself (too much shared memory, too many threads) → rejected; two runs on the
   same inputs must agree within tolerance → racy; every writable buffer must match the original's for
   every seed at the spec's size and at the perturbed (odd) size, every element written, no byte outside
   a buffer touched → incorrect / rejected; a kernel fault → crashed (a sticky one restarts the worker),
   a hang → timeout;
4. timing interleaved with the original, L2 flushed; the outputs of the timed launches must match too
   (a kernel that skips work only while timed) and the time must not beat the physical floor → suspicious;
5. a re-check with fresh inputs (a seed derived from the candidate, new buffers and pointers) → incorrect;
6. optionally energy (objective "energy") and compute-sanitizer memcheck/racecheck (winners) → rejected/racy.

What it reports is in ``reports.py``; the build step that runs in pool processes in ``pool_build.py``; how a
candidate becomes a translation unit and a launch in ``surgery.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..compiler.build import project_key
from ..compiler.project import project_build
from ..compiler.toolchain import default_arch
from ..cuda import FileModel, Kernel, SourceText, parse
from ..cuda.candidate import Candidate
from ..cuda.types import file_aliases
from ..spec import KernelSpec, SpecError, build_spec
from ..spec.model import C_SPELLING, TAIL_ALIGNMENTS
from ..store import EvalKey, Store
from . import guards, surgery
from .backends import Device, DeviceLost, EvaluationBackend, LocalBackend
from .backends import GpuUnavailable as GpuUnavailable  # re-exported: callers catch it from here
from .confirm import Side
from .confirm import confirm as ncu_confirm
from .inputs import TAIL, Layout, tail_plan
from .pool_build import build_job
from .reports import (
    STATUSES,
    BuildStats,
    EnergyReport,
    Evaluation,
    HotFigure,
    RunReport,
    TimingReport,
    crash_context,
)
from .sanitizer import SanitizerReport
from .supervisor import Msg
from .timing import Speedup, TimingSettings, speedup, summarize

#: bump when a change to the engine changes verdicts, so cached evaluations are not reused
ENGINE_VERSION = "10"  # 2: tail-sensitivity runs, automatic graph timing, ncu confirmation of winners; 3: derived
# sizes perturbed once (the odd size of `N = B*T` is B'*T'), fixed sizes hold what they derive from, elements the
# original never writes counted apart; 4: inputs from the counter-based
# generator (gpu/generator.py); 5: read-only inputs shared in place and checksummed after every verification
# run (a candidate that writes its input is rejected now; it passed before); 6: every timed launch cold (L2 flushed
# and outputs reset before each, in graph mode too), the back-to-back figure beside it; 7: inputs kept in their
# declared domain in the sensitivity run (int(lo, hi) floats reflected), the original checked on every run at baseline;
# 8: an original that fails at the perturbed size only is verified at aligned perturbed sizes (``_aligned_baseline``);
# 9: a launch written for whole blocks (``grid = N / 16``) keeps its perturbed sizes whole (``launch_alignment``);
# 10: the outputs of a kernel that sums are compared with a floor of ``norm`` times their largest magnitude
# (``spec.model.DEFAULT_NORMS``): a reordered sum that verified nowhere before can verify now
#: the least time left (s) in which a winner's Nsight Compute confirmation is started
CONFIRM_MIN_SECONDS = 12.0
#: the least time left (s) in which a winner's back-to-back ("hot") figure is measured
HOT_MIN_SECONDS = 3.0
#: an original this long per launch (ms) or longer has its candidates checked in two steps (``Evaluator._lazy``)
LAZY_CHECK_MS = 2.0
#: re-checks after timing draw from this many extra seeds, none of them among the verification seeds
RECHECK_SEED_BASE, RECHECK_SEEDS = 1_000_003, 4
T = TypeVar("T")
ProgressFn = Callable[[str, str], None]


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class EngineSettings:
    """How thoroughly to verify and how to time. Defaults follow docs/architecture.md "Verification"."""

    seeds: tuple[int, ...] | None = None  # None: the spec's seeds
    odd: bool = True  # also verify at the perturbed size where sizes are symbolic
    odd_seeds: int = 1  # how many of the seeds run at the perturbed size
    determinism: bool = True
    recheck: bool = True
    timing: TimingSettings = field(default_factory=TimingSettings)
    objective: Literal["time", "energy"] = "time"
    energy_seconds: float = 1.0
    kernel_timeout: float = 10.0
    compile_timeout: float = 60.0
    sanitize_timeout: float = 300.0
    arch: str | None = None
    #: verify on inputs whose last elements are perturbed too (``inputs.perturb_tail``)
    sensitivity: bool = True
    #: confirm a winner's speedup with Nsight Compute's gpu__time_duration where ncu is available
    confirm: bool = True
    #: stop timing a candidate once its whole speedup interval is below the best verified so far (it cannot
    #: win; its interval is kept, wider): GPU time goes to candidates that can
    abandon_slower: bool = True

    def verdict_key(self) -> str:
        """The settings that can change a verdict (part of the cache key)."""
        d = {"seeds": self.seeds, "odd": self.odd, "odd_seeds": self.odd_seeds, "det": self.determinism,
             "recheck": self.recheck, "graph": self.timing.graph, "flush": self.timing.flush_l2,
             "graph_below": self.timing.graph_below_ms, "sensitivity": self.sensitivity,
             "objective": self.objective, "arch": self.arch}
        return json.dumps(d, sort_keys=True)


# --------------------------------------------------------------------------- backend
#: the local pool under its historical name (``Backend(devices=(0, 1))``); see ``backends.py``
Backend = LocalBackend


# --------------------------------------------------------------------------- evaluator
@dataclass
class _Built:
    key: str
    cubin: bytes
    symbol: str
    stats: BuildStats
    launches: dict[str, tuple[list[int], list[int], int]]
    sass: list[guards.GuardFinding]
    sass_note: str | None = None

    def ref(self) -> Msg:
        return {"key": self.key, "cubin": self.cubin, "symbol": self.symbol, "launch": self.launches}


class _Fail(Exception):
    """Ends an evaluation early with a status and reason."""

    def __init__(self, status: str, reason: str, cacheable: bool = True, variant: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.cacheable = cacheable
        #: the size of the run the original failed in (``spec``, ``odd``), where the failure is the original's
        self.variant = variant


class Evaluator:
    """Verifies and times candidates of one kernel against its original (see the module docstring)."""

    def __init__(
        self,
        file: str | Path,
        kernel: str,
        *,
        text: str | None = None,
        spec: KernelSpec | None = None,
        model: FileModel | None = None,
        backend: EvaluationBackend | None = None,
        store: Store | None = None,
        settings: EngineSettings | None = None,
        progress: ProgressFn | None = None,
        owns_backend: bool | None = None,
    ) -> None:
        self.file = str(file)
        self.text = text if text is not None else Path(file).read_text(encoding="utf-8")
        self.src = SourceText(self.text)
        self.model: FileModel = model if model is not None else parse(self.src.data)
        k = self.model.require(kernel, self.file)
        self.kernel: Kernel = k
        self.spec = spec if spec is not None else build_spec(self.src, self.model, k, self.file)
        self.settings = settings or EngineSettings()
        self.backend: EvaluationBackend = backend or Backend()
        # A backend made here, or handed over with ``owns_backend=True`` (a job's own), closes with this
        # evaluator; a shared one is left to its owner.
        self._own_backend = backend is None if owns_backend is None else owns_backend
        self.store = store
        self.progress = progress
        self.original = Candidate(kernel=k.name, source=self.src.slice(k.span), family="original",
                                  rationale="the kernel as written")
        #: the file's typedef/using aliases over its headers' (found as the project's build finds them): the
        #: signature guard compares types through them
        proj = project_build(self.file) if Path(self.file).is_file() else None
        self.aliases = file_aliases(self.src, self.model, self.file, proj.include_dirs if proj is not None else (),
                                    proj.define_map() if proj is not None else {})
        self.arch = default_arch(self.settings.arch)
        self.variants = ["spec"] + (["odd"] if self.settings.odd and self.spec.symbolic else [])
        self.layouts = {v: Layout.from_resolved(self.spec.resolve(perturbed=(v == "odd")), v) for v in self.variants}
        # compute-sanitizer's size: a smaller problem of the same kernel (``KernelSpec.small_sizes``), where the
        # perturbed size is large; never a verification run
        try:
            self.small_sizes = self.spec.small_sizes()
        except SpecError:
            self.small_sizes = None
        if self.small_sizes is not None:
            self.layouts["small"] = Layout.from_resolved(self.spec.resolve(base=self.small_sizes), "small")
        #: when the user's wait ends (monotonic), set by ``sanitize(deadline=...)``: the winner's checks fit in it
        self.deadline: float | None = None
        self.tolerances = {a.name: self.spec.tolerance_for(a) for a in self.spec.args if a.is_buffer}
        self.spec_key = self._spec_key()
        self._plain_key = self.spec_key
        self._plain_small = self.small_sizes
        #: the original failed at the perturbed size (``_aligned_baseline``): the size verified instead, in words
        self._aligned_note: str | None = None
        #: the size at which the original itself last failed (its oracle run wrote outside its buffers, or it
        #: crashed), in any evaluation: ``odd`` sends the baseline, and the search's root, to aligned sizes
        self._original_failed_at: str | None = None
        #: the perturbed base sizes verified at instead of the plain perturbation (None: the plain one)
        self._odd_bases: dict[str, int] | None = None
        self.problem: Msg = {"id": self.spec_key, "layouts": self.layouts, "tolerances": self.tolerances}
        self._baseline_task: asyncio.Task[_Built] | None = None
        self._baseline_eval: Evaluation | None = None
        self._baseline_lock: asyncio.Lock | None = None
        self._inflight: dict[str, asyncio.Future[Evaluation]] = {}
        self._done: dict[str, Evaluation] = {}
        self._identity: tuple[str, str] | None = None
        #: ``in`` buffers the original writes, already told in a note (``_note_original_writes``)
        self._told_original_writes: set[str] = set()
        #: the best verified speedup of this evaluator's candidates so far (what "clearly slower" means)
        self.best_ratio = 1.0
        #: the original's median time per launch (ms), from the latest timing of it (any evaluation's baseline side)
        self.original_ms: float | None = None
        self._prestart_task: asyncio.Future[None] | None = None
        #: builds started ahead of their evaluation (``prebuild``), by candidate hash; an evaluation takes its own
        self._prebuilt: dict[str, asyncio.Future[_Built]] = {}

    # ----------------------------------------------------------------- keys
    def _spec_key(self) -> str:
        tu = self._translation_unit(self.original)
        h = hashlib.sha256()
        # the project's build (defines, headers) decides what the unit compiles to, so it is part of the key
        for part in (self.spec.spec_hash(), tu, self.arch, ENGINE_VERSION, self.settings.verdict_key(),
                     project_key(tu, self.file)):
            h.update(part.encode("utf-8"))
            h.update(b"\0")
        return h.hexdigest()[:24]

    async def _key(self) -> EvalKey | None:
        if self.store is None:
            return None
        if self._identity is None:
            await self.backend.ensure_compare(self.arch)
            self._identity = await self.backend.identity()
        return EvalKey("", self.spec_key, self._identity[0], self._identity[1])

    def _say(self, cand: Candidate, stage: str) -> None:
        self._say_id(cand.id, stage)

    def _say_id(self, cid: str, stage: str) -> None:
        if self.progress is not None:
            self.progress(cid, stage)

    # ----------------------------------------------------------------- building
    def _translation_unit(self, cand: Candidate) -> str:
        try:
            return surgery.translation_unit(self.src, self.model, self.kernel, self.spec, self.file,
                                            self.original.source, cand)
        except surgery.Rejected as e:
            raise _Fail("rejected", e.reason) from e

    def _defines(self, cand: Candidate) -> dict[str, str]:
        return surgery.defines(self.spec, cand)

    def _launch(self, cand: Candidate, variant: str) -> tuple[list[int], list[int], int]:
        try:
            return surgery.launch(self.spec, self.layouts[variant], cand, variant,
                                  self.small_sizes if variant == "small" else self._odd_bases if variant == "odd"
                                  else None)
        except surgery.Rejected as e:
            raise _Fail("rejected", e.reason) from e

    async def _build(self, cand: Candidate) -> _Built:
        launches = {v: self._launch(cand, v) for v in self.variants}
        if "small" in self.layouts:
            with contextlib.suppress(_Fail):  # no small launch: the sanitizer runs at the verified size
                launches["small"] = self._launch(cand, "small")
        tu = self._translation_unit(cand)
        self._say(cand, "compiling")
        out = await self.backend.cpu(build_job, tu, self.kernel.name, self._defines(cand), list(cand.flags),
                                     self.file, float(self.settings.compile_timeout), self.arch)
        if out.error and not out.stats.messages:
            raise _Fail("compile_error", out.error)
        if not out.stats.ok:
            if out.stats.timed_out:
                raise _Fail("compile_error", f"compilation exceeded {self.settings.compile_timeout:g} s and was "
                                             "killed (a compile bomb?)")
            first = next((m for m in out.stats.messages if ": error" in m or m.startswith("error")),
                         out.stats.messages[0] if out.stats.messages else "nvcc failed")
            raise _Fail("compile_error", first)
        if out.error:
            raise _Fail("compile_error", out.error)
        key = hashlib.sha256(out.cubin).hexdigest()[:24]
        return _Built(key, out.cubin, out.stats.symbol, out.stats, launches, list(out.sass), out.sass_note)

    def prebuild(self, candidate: Candidate) -> None:
        """Start building ``candidate`` now, before it is evaluated: the search's first round is built while the
        original is verified, or while the job's baseline profile holds the GPU (``search.engine``). CPU only
        (the compile pool); its evaluation takes the build instead of starting another. A candidate already
        evaluated, in flight or of another kernel is left alone."""
        h = candidate.hash
        if (candidate.kernel != self.kernel.name or h in self._prebuilt or h in self._inflight
                or candidate.source == self.original.source):
            return
        fut = asyncio.ensure_future(self._build(candidate))
        fut.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._prebuilt[h] = fut

    async def _built(self, cand: Candidate) -> _Built:
        """``cand``'s build: the one ``prebuild`` started, else a new one."""
        ahead = self._prebuilt.pop(cand.hash, None)
        return await ahead if ahead is not None else await self._build(cand)

    async def _baseline_built(self) -> _Built:
        if self._baseline_task is None:
            self._baseline_task = asyncio.ensure_future(self._build(self.original))
        try:
            return await asyncio.shield(self._baseline_task)
        except _Fail as e:
            raise _Fail("rejected", f"cannot verify: the original kernel does not build: {e.reason}", False) from e

    # ----------------------------------------------------------------- public API
    async def baseline(self) -> Evaluation:
        """Build, run and time the original kernel: the oracle outputs, its speed, its own determinism."""
        if self._baseline_lock is None:
            self._baseline_lock = asyncio.Lock()
        async with self._baseline_lock:
            if self._baseline_eval is None:
                self._original_failed_at = None
                ev = await self._run_evaluation(self.original, sanitize=False, baseline=True)
                if not ev.ok and self._original_failed_at == "odd":
                    ev = await self._aligned_baseline(ev)
                self._baseline_eval = ev
            return self._baseline_eval

    async def _aligned_baseline(self, failed: Evaluation) -> Evaluation:
        """The original failed at the perturbed size only (it wrote outside its buffers, or crashed): a kernel
        written for whole blocks or whole vectors (no tail guard, ``float4`` loads), correct at the spec size.
        Rather than refuse it, try perturbed sizes that keep every perturbed base size a multiple of 4, 8, 16,
        ... 1024 (``KernelSpec.aligned_bases``, ``TAIL_ALIGNMENTS``), smallest first (the most tails a candidate
        still meets): the first the original runs cleanly at becomes the second verification size of every
        candidate, said in a note on every evaluation. The user chooses it for good with ``odd=``. None clean:
        the first failure stands, its words unchanged."""
        plain = self.spec.size_values(perturbed=True)
        tried: list[dict[str, int]] = []
        for align in TAIL_ALIGNMENTS:
            bases = self.spec.aligned_bases(align)
            if not bases or bases in tried or all(plain.get(k) == v for k, v in bases.items()):
                continue
            tried.append(bases)
            self._retarget_odd(align, bases)
            self._original_failed_at = None
            ev = await self._run_evaluation(self.original, sanitize=False, baseline=True)
            if ev.ok:
                sizes = ", ".join(f"{k}={v}" for k, v in bases.items())
                self._aligned_note = (
                    f"the original kernel fails at the plain perturbed size ({failed.reason}); every candidate is "
                    f"verified at {sizes} instead (perturbed sizes kept multiples of {align}, where the original "
                    "runs cleanly): set the perturbed size with `odd=` in the spec to choose it")
                ev.notes.append(self._aligned_note)
                return ev
            if self._original_failed_at != "odd":
                break  # now it fails elsewhere: the spec size, the determinism run — not a question of the tail
        self._retarget_odd(0, None)
        return failed

    def _retarget_odd(self, align: int, bases: dict[str, int] | None) -> None:
        """Verify at other perturbed base sizes (``bases``; None: the plain perturbation again). The problem's
        id changes with them, so the workers' cached inputs and oracle outputs of the old size are not reused,
        and the original's build (its launch per size) and every build started ahead are made again."""
        self._odd_bases = bases
        self.layouts["odd"] = Layout.from_resolved(self.spec.resolve(perturbed=True, base=bases), "odd")
        small = self._plain_small
        if small is not None and bases is not None:
            small = self.spec.aligned_bases(align, start=small)
        self.small_sizes = small
        if small is not None:
            self.layouts["small"] = Layout.from_resolved(self.spec.resolve(base=small), "small")
        tag = "" if bases is None else repr(sorted(bases.items()))
        self.spec_key = hashlib.sha256((self._plain_key + tag).encode("utf-8")).hexdigest()[:24] if tag \
            else self._plain_key
        self.problem["id"] = self.spec_key
        self._baseline_task = None
        for fut in self._prebuilt.values():
            fut.cancel()
        self._prebuilt.clear()
        self._done.pop(self.original.hash, None)

    async def evaluate(self, candidate: Candidate, *, sanitize: bool = False) -> Evaluation:
        """Verify and time one candidate (see the module docstring); never raises for what a candidate does.

        Raises ``GpuUnavailable`` when there is no GPU to run on.
        """
        if candidate.kernel != self.kernel.name:
            raise ValueError(f"candidate of `{candidate.kernel}` given to the evaluator of `{self.kernel.name}`")
        key = candidate.hash + (":sanitize" if sanitize else "")
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._run_evaluation(candidate, sanitize=sanitize, baseline=False))
            self._inflight[key] = fut

            def forget(_f: asyncio.Future[Evaluation], k: str = key) -> None:
                self._inflight.pop(k, None)

            fut.add_done_callback(forget)
        ev = await asyncio.shield(fut)
        if not ev.ok and self._original_failed_at == "odd" and self._odd_bases is None and not sanitize:
            # the original failed at the perturbed size only, met first here: as the search's root (the original
            # itself), or beside the one variant ``warpforge verify`` checks. The baseline tries aligned perturbed
            # sizes (``_aligned_baseline``) and the candidate is evaluated again at the one found
            base = await self.baseline()
            if base.ok and self._odd_bases is not None:
                return await self.evaluate(candidate)
        return ev

    async def sanitize(self, candidate: Candidate, deadline: float | None = None) -> Evaluation:
        """``evaluate`` plus compute-sanitizer memcheck and racecheck (for a winner); ``deadline`` (monotonic)
        is when the user's wait ends: the sanitizer is capped to it and the Nsight Compute confirmation skipped
        when too little time is left, each saying so."""
        self.deadline = deadline
        return await self.evaluate(candidate, sanitize=True)

    async def launch_sides(self, candidate: Candidate) -> tuple[Side, Side, Layout, int]:
        """The original and ``candidate`` as built and launched at the spec size, with that size's layout and the
        first seed: what a harness outside the worker needs to re-time them (``verify --independent``). Call it
        after ``evaluate`` (the builds are cached then)."""
        built = await self._build(candidate)
        base = await self._baseline_built()

        def side(b: _Built) -> Side:
            grid, block, smem = b.launches["spec"]
            return Side(b.cubin, b.symbol, (grid, block, smem))

        return side(base), side(built), self.layouts["spec"], self._seeds()[0]

    async def close(self) -> None:
        if self._own_backend:
            await self.backend.aclose()

    async def __aenter__(self) -> Evaluator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- the pipeline
    async def _run_evaluation(self, cand: Candidate, *, sanitize: bool, baseline: bool) -> Evaluation:
        t0 = time.perf_counter()
        key = await self._key()
        ekey = replace(key, candidate_hash=cand.hash) if key is not None else None
        prior = self._done.get(cand.hash)
        if prior is None and ekey is not None and self.store is not None:
            cached = self.store.get_evaluation(ekey)
            if cached is not None:
                prior = Evaluation.from_json(cached)
                prior.cached = True
        if prior is not None and sanitize and prior.ok and not prior.verified:
            prior = None  # its checks stopped early (slower than the best then): a winner now, so verified in full
        if prior is not None:
            if not (sanitize and prior.ok and prior.sanitizer is None):
                self._note_best(prior, baseline)
                return prior
            ev = prior  # verified and timed already: only the sanitizer is missing
            try:
                built = await self._build(cand)
                await self.backend.ensure_compare(self.arch)

                base = await self._baseline_built()

                async def sanitize_only(dev: Device, ev: Evaluation = ev, built: _Built = built,
                                        base: _Built = base) -> None:
                    await self._sanitize_step(ev, built, dev)
                    await self._confirm_step(ev, built, base, dev)
                    await self._hot_step(ev, built, base, dev)

                await self._on_device(ev, sanitize_only)
            except _Fail as f:
                ev.status, ev.reason, ev.cacheable = f.status, f.reason, f.cacheable
        else:
            ev = Evaluation(cand.id, cand.hash, cand.kernel, "ok")
            try:
                await self._pipeline(cand, ev, sanitize=sanitize, baseline=baseline)
            except _Fail as f:
                ev.status, ev.reason, ev.cacheable = f.status, f.reason, f.cacheable
                if f.variant is not None:
                    # the original itself failed (its oracle run wrote outside its buffers, or it crashed): where
                    # at the perturbed size only, ``baseline`` tries aligned sizes, so the verdict depends on
                    # that retry and is not replayed from the store
                    self._original_failed_at = f.variant
                    ev.cacheable = ev.cacheable and f.variant != "odd"
            ev.seconds = time.perf_counter() - t0
        self._note_best(ev, baseline)
        self._say(cand, ev.status)
        if ev.cacheable:
            self._done[cand.hash] = ev
            # a result whose checks stopped early serves this job's search only: another job may need it verified
            if ekey is not None and self.store is not None and (ev.verified or not ev.ok):
                self.store.put_evaluation(ekey, cand.kernel, ev.status, ev.speedup, _json_safe(ev.to_json()))
        return ev

    def _note_best(self, ev: Evaluation, baseline: bool) -> None:
        """Raise ``best_ratio`` (what "clearly slower" is measured against) with a verified result, measured now
        or replayed from the store; and keep the original's time per launch, which every timing measures too."""
        t = ev.timing
        if t is not None and t.baseline is not None and ev.ok:
            self.original_ms = t.baseline.median
        if ev.verified and t is not None and t.speedup is not None and not baseline:
            self.best_ratio = max(self.best_ratio, t.speedup.ratio)

    async def _pipeline(self, cand: Candidate, ev: Evaluation, *, sanitize: bool, baseline: bool) -> None:
        # 1. static guards
        if cand.dropped:
            ev.notes.append("dropped from the candidate (not device code): " + "; ".join(cand.dropped))
        if not baseline and cand.source != self.original.source:
            found = guards.check_candidate(self.kernel, self.original.source, cand.source, self.aliases)
            if found:
                ev.guards = [f.text() for f in found]
                raise _Fail("rejected", "; ".join(ev.guards))
        # 2. builds (the original's and this one's, concurrently), while the GPU workers start
        self._prestart()
        t_build = time.perf_counter()
        base_task = asyncio.ensure_future(self._baseline_built())
        if baseline:
            built = await base_task
        else:
            try:
                built = await self._built(cand)
            except _Fail as f:
                base_task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
                if f.status == "compile_error":
                    ev.build = BuildStats(False, messages=[f.reason])
                raise
        base = await base_task
        ev.time_split["build"] = time.perf_counter() - t_build
        ev.build = built.stats
        if built.sass_note:
            ev.notes.append(built.sass_note)
        if not baseline:
            allowed = {g.code for g in base.sass}
            found = [g for g in built.sass if g.code not in allowed]
            if found:
                ev.guards = [g.text() for g in found]
                raise _Fail("rejected", "; ".join(ev.guards))
        # 3.-6. the GPU: all of it on one device, so the speedup is a ratio measured on that device
        await self.backend.ensure_compare(self.arch)
        await self.backend.warm_up()

        async def on_gpu(dev: Device) -> None:
            info, peak = await self.backend.facts(dev)
            ev.gpu, ev.driver = str(info.get("name", "")), str(info.get("driver", ""))
            await self._gpu(dev, cand, built, base, ev, info, peak, baseline=baseline, sanitize=sanitize)

        await self._on_device(ev, on_gpu)

    async def _on_device(self, ev: Evaluation, work: Callable[[Device], Awaitable[None]]) -> None:
        """Run the GPU part of an evaluation on one device of the backend.

        If that device is lost mid-way (a Ray actor or its node died: ``DeviceLost``), whatever the lost
        attempt wrote into ``ev`` is dropped and the work starts again on another device, so a candidate's
        result is never lost with a device nor made of two devices' measurements. A candidate's own failures
        (``_Fail``) are verdicts and are not retried.
        """
        clean = copy.deepcopy(ev)
        attempts = max(1, self.backend.max_attempts)
        lost: list[str] = []
        for _ in range(attempts):
            t_queue = time.perf_counter()
            try:
                async with self.backend.acquire() as dev:
                    t_held = time.perf_counter()
                    ev.time_split["queue"] = ev.time_split.get("queue", 0.0) + t_held - t_queue
                    try:
                        await work(dev)
                    finally:
                        ev.time_split["gpu"] = ev.time_split.get("gpu", 0.0) + time.perf_counter() - t_held
            except DeviceLost as e:
                lost.append(str(e))
                split = dict(ev.time_split)  # the lost attempt's time was spent all the same
                fresh = copy.deepcopy(clean)
                for f in fields(ev):
                    setattr(ev, f.name, getattr(fresh, f.name))
                ev.time_split = split
                continue
            if lost:
                ev.notes.append(f"evaluated again on another GPU after {len(lost)} lost one"
                                f"{'s' if len(lost) != 1 else ''} mid-evaluation ({lost[-1]})")
            return
        raise _Fail("crashed", f"the GPU was lost under this candidate {attempts} times; last: {lost[-1]}",
                    cacheable=False)

    def _seeds(self) -> list[int]:
        return list(self.settings.seeds or self.spec.seeds)

    async def _request(self, dev: Device, msg: Msg, timeout: float, what: str, ev: Evaluation) -> Msg:
        r: Msg = await dev.request(msg, timeout)
        cost = r.get("cost") or {}
        split = ev.time_split
        split["worker"] = split.get("worker", 0.0) + float(cost.get("wall_s", 0.0))
        split["worker_cpu"] = split.get("worker_cpu", 0.0) + float(cost.get("cpu_s", 0.0))
        split["preempted"] = split.get("preempted", 0.0) + float(cost.get("preempted", 0))
        status = r.get("status")
        if status == "ok":
            return r
        reason = str(r.get("reason", ""))
        if status == "unavailable":
            raise GpuUnavailable(reason)
        variant = None
        if status in ("timeout", "crashed") and r.get("during"):
            # the run that crashed, and whether the inputs of that run rather than the kernel are the cause
            during = r["during"]
            reason = f"{crash_context(during, TAIL, self._domain_lines())}: {reason}"
            if during.get("side") == "original" and not during.get("tail"):
                variant = str(during.get("variant", "spec"))
        if status in ("timeout", "crashed", "rejected"):
            raise _Fail(str(status), f"{what}: {reason}" if status != "rejected" else reason, variant=variant)
        raise _Fail("crashed", f"engine error during {what}: {reason}", cacheable=False)

    def _domain_lines(self) -> dict[str, str]:
        """For each input not declared as an index domain, the annotation line that would declare it one
        (``arg ids: in float[M] int(0, HI)``): what a crash of the original on perturbed inputs suggests."""
        out: dict[str, str] = {}
        for a in self.spec.args:
            if a.is_buffer and a.role.value != "out" and (a.distribution is None or a.distribution.kind != "int"):
                out[a.name] = f"// @warpforge arg {a.name}: {a.role.value} {C_SPELLING.get(a.dtype, a.dtype)}" \
                              f"[{a.count}] int(0, HI)"
        return out

    def _lazy(self, baseline: bool, sanitize: bool) -> bool:
        """Check a candidate in two steps, timing in between? Where the original is a long kernel: every
        verification run then costs as much as a timing repetition, and most candidates of a search are slower
        than the best so far (they cannot win, and their timing stops early), so their other runs would only
        spend the GPU. A winner, and anything the sanitizer is asked for, is always verified in full; so is every
        candidate of an energy search (slower in time is not worse in energy, which is measured after the checks)."""
        if (baseline or sanitize or not self.settings.abandon_slower or self.original_ms is None
                or self.settings.objective != "time"):
            return False
        return self.original_ms >= LAZY_CHECK_MS

    async def _check(self, dev: Device, ev: Evaluation, base: _Built, built: _Built, runs: list[list[Any]],
                     determinism: list[Any] | None, *, baseline: bool) -> None:
        """Verification runs against the oracle; ``_Fail`` on the first that does not match."""
        kt = float(self.settings.kernel_timeout)
        per_request = 120.0 + kt * (len(runs) * 3 + 4)
        msg: Msg = {"op": "check", "problem": self.problem, "oracle": base.ref(),
                    "subject": None if baseline else built.ref(), "runs": runs, "determinism": determinism,
                    "kernel_timeout": kt, "count_unwritten": baseline}
        r = await self._request(dev, msg, per_request, "verification", ev)
        self._note_original_writes(ev, r.get("original_writes"))
        if self._aligned_note is not None and self._aligned_note not in ev.notes:
            ev.notes.append(self._aligned_note)
        for rr in r["runs"]:
            ev.correctness.runs.append(RunReport(rr["variant"], int(rr["seed"]), rr["sizes"], list(rr["buffers"]),
                                                 list(rr["guard"]),
                                                 purpose="sensitivity" if rr.get("tail") else "verify",
                                                 tail_changes=dict(rr.get("tail_changes") or {})))
            if rr.get("unwritten"):
                ev.correctness.unwritten_by_original.update({k: v for k, v in rr["unwritten"].items() if v})
            if rr.get("oracle_guard"):
                where = "perturbed (odd) size" if rr["variant"] == "odd" else f"{rr['variant']} size"
                raise _Fail("rejected", f"cannot verify: the original kernel writes outside its buffers at the {where} "
                                        f"({rr['sizes']}: " + "; ".join(rr["oracle_guard"]) + "); check the spec's "
                                        "lengths", False, variant=str(rr["variant"]))
        if ev.build is not None and r.get("attrs"):
            ev.build.registers = ev.build.registers or int(r["attrs"].get("registers", 0))
        det = r.get("determinism")
        if determinism is not None:
            ev.correctness.determinism = list(det) if det is not None else None
        for name, n in ev.correctness.unwritten_by_original.items():
            note = (f"the original kernel leaves {n} elements of `{name}` unwritten (its spec length is larger "
                    "than what it writes); those elements are not checked")
            if note not in ev.notes:
                ev.notes.append(note)
        if det is not None and not all(b.ok for b in det):
            bad = next(b for b in det if not b.ok)
            who = "the original kernel" if baseline else "the candidate"
            if bad.unwritten:
                raise _Fail("incorrect", f"a second launch on fresh buffers left {bad.unwritten} elements of "
                                         f"`{bad.name}` unwritten: {who} skips work on later calls (results cached "
                                         "across calls?)")
            raise _Fail("racy", f"{who} is not deterministic: two runs on the same inputs differ beyond tolerance "
                                f"({bad.summary()})")
        for run in ev.correctness.runs:
            if run.guard:
                raise _Fail("rejected", f"{run.variant} size ({run.sizes}), seed {run.seed}: " + "; ".join(run.guard))
            bad_bufs = [b for b in run.buffers if not b.ok]
            if bad_bufs and run.purpose == "sensitivity":
                changed = ", ".join(f"{n} of `{k}`" for k, n in run.tail_changes.items() if n) or "none"
                raise _Fail("incorrect", f"tail sensitivity, {run.variant} size ({run.sizes}), seed {run.seed}: with "
                                         f"the last {TAIL} elements of every input perturbed, the original's outputs "
                                         f"change ({changed} elements) but the candidate's do not follow: "
                                         + "; ".join(b.summary() for b in bad_bufs)
                                         + " (does it skip the last elements? a tolerance hid that on plain inputs)")
            if bad_bufs:
                raise _Fail("incorrect", f"{run.variant} size ({run.sizes}), seed {run.seed}: "
                                         + "; ".join(b.summary() for b in bad_bufs))

    async def _gpu(self, dev: Device, cand: Candidate, built: _Built, base: _Built, ev: Evaluation, info: Msg,
                   peak: float, *, baseline: bool, sanitize: bool) -> None:
        kt = float(self.settings.kernel_timeout)
        seeds = self._seeds()
        runs: list[list[Any]] = [["spec", s] for s in seeds]
        if "odd" in self.variants:
            runs += [["odd", s] for s in seeds[: max(1, self.settings.odd_seeds)]]
        if self.settings.sensitivity:
            # Last: the ordinary runs' verdicts come first. Both sizes, as tails are where sizes differ. Inputs
            # whose declared domain the move cannot keep are left as drawn (``inputs.tail_plan``), and said so.
            moved, left = tail_plan(self.layouts["spec"])
            for name, why in left.items():
                note = f"sensitivity check: `{name}` is not perturbed: {why}"
                if note not in ev.notes:
                    ev.notes.append(note)
            if moved:
                runs += [[v, seeds[0], "tail"] for v in self.variants]
            elif left:
                ev.notes.append("sensitivity check skipped: no input can be perturbed inside its declared domain")
        per_request = 120.0 + kt * (len(runs) * 3 + 4)
        determinism = ["spec", seeds[0]] if self.settings.determinism else None
        # -- correctness: all of it first; or, for a long kernel, one run first and the rest once the timing
        #    shows the candidate may win (``_lazy``)
        self._say(cand, "verifying")
        lazy = self._lazy(baseline, sanitize)
        if baseline:
            # The original runs every input set its candidates will be checked on (their oracle results are
            # kept for them): a crash of the original on one of them is its own verdict here, naming the run,
            # not a "crashed" of every candidate later.
            await self._check(dev, ev, base, built, runs, determinism, baseline=True)
        elif lazy:
            await self._check(dev, ev, base, built, runs[:1], None, baseline=False)
        else:
            await self._check(dev, ev, base, built, runs, determinism, baseline=False)
        # -- timing, interleaved with the original
        self._say(cand, "timing")
        ts = self.settings.timing
        sides = [base.ref()] if baseline else [base.ref(), built.ref()]
        tmsg: Msg = {"op": "time", "problem": self.problem, "sides": sides, "variant": "spec", "seed": seeds[0],
                     "settings": ts.to_json(), "kernel_timeout": kt, "oracle": base.ref(),
                     "abandon_below": self.best_ratio if self.settings.abandon_slower and not baseline else None,
                     # the original's repeated-call behaviour was checked with its own evaluation
                     "recheck_sides": [0] if baseline else [1],
                     # given up on as clearly slower, a two-step candidate's checks stop there (``_lazy``)
                     "recheck_unless_abandoned": lazy,
                     # the back-to-back figure: for a winner's checks, or when asked (bench, verify)
                     "hot": ts.hot or sanitize}
        budget = 1.5 * ts.max_seconds + ts.warmup_seconds + kt * ts.batch * len(sides) * 4 + 120.0
        t = await self._request(dev, tmsg, budget, "timing", ev)
        ev.time_split["warmup"] = float(t.get("warmup_seconds") or 0.0)
        ev.time_split["timing"] = float(t.get("elapsed") or 0.0)
        samples = t["samples"]
        base_stats = summarize(samples[0])
        cand_stats = base_stats if baseline else summarize(samples[1])
        timing = TimingReport(
            candidate=cand_stats, baseline=base_stats,
            speedup=None if baseline else speedup(samples[0], samples[1]),
            mode=_mode_text(t.get("graph"), ts),
            gpu=str(info.get("name", "")), driver=str(info.get("driver", "")), sm_clock_mhz=t.get("sm_clock_mhz"),
            max_clock_mhz=int(info.get("clock_mhz") or 0) or None, peak_gbps=peak,
            bytes=self._bytes(), flops=self._flops(),
        )
        if timing.bytes and peak:
            timing.floor_ms = guards.floor_ms(timing.bytes, peak)
        timing.hot = _hot_figure(t.get("hot"), baseline)
        gave_up = t.get("abandoned")
        if gave_up:
            timing.abandoned = True
            ev.notes.append(f"timing stopped after {gave_up['samples']} repetitions: clearly slower than the best "
                            f"verified so far (at most {gave_up['high']:.3f}x, best {gave_up['below']:.3f}x)")
        ev.timing = timing
        outs = t.get("outputs") or []
        side_out = outs[-1] if outs else []
        ev.correctness.timed_outputs = list(side_out)
        bad_timed = [b for b in side_out if not b.ok]
        if bad_timed:
            raise _Fail("suspicious", "the outputs of the timed launches differ from the original's although the "
                                      "verification runs matched: the kernel behaves differently when called "
                                      "repeatedly on the same buffers (cached results?): "
                                      + "; ".join(b.summary() for b in bad_timed))
        if gave_up and lazy:
            # It cannot win: the first run matched and the timing is what the search needs. The skipped checks
            # are listed, and the result is not offerable (``Evaluation.verified``) nor stored for later jobs.
            ev.correctness.skipped = ([_run_text(r) for r in runs[1:]] + (["determinism"] if determinism else [])
                                      + ["repeated call on the timed buffers"]
                                      + (["re-check with fresh inputs"] if self.settings.recheck else []))
            ev.notes.append(f"verification stopped after its first run matched: {len(ev.correctness.skipped)} more "
                            "checks skipped, as the timing showed it clearly slower than the best so far")
            return
        floor = guards.floor_finding(cand_stats.median, timing.bytes, peak,
                                     theoretical_gbps=float(info.get("theoretical_gbps") or 0.0),
                                     l2_bytes=int(info.get("l2_bytes") or 0))
        if floor is not None:
            ev.guards.append(floor.text())
            base_floor = None if baseline else guards.floor_finding(
                base_stats.median, timing.bytes, peak, theoretical_gbps=float(info.get("theoretical_gbps") or 0.0),
                l2_bytes=int(info.get("l2_bytes") or 0))
            extra = " (the original is below it too: the spec's `bytes` is probably too large)" if base_floor else ""
            raise _Fail("suspicious", floor.message + extra)
        if lazy:
            self._say(cand, "verifying")
            # the determinism check is a second launch on a run's inputs: the first run again, then the rest
            rest = (runs[:1] if determinism else []) + runs[1:]
            await self._check(dev, ev, base, built, rest, determinism, baseline=False)
        # -- re-check with fresh inputs and pointers
        if not baseline and self.settings.recheck:
            self._say(cand, "re-checking")
            # Inputs this candidate has not seen (a small pool, so inputs and oracle outputs stay cached).
            fresh = RECHECK_SEED_BASE + int(cand.hash[:6], 16) % RECHECK_SEEDS
            rmsg: Msg = {"op": "check", "problem": self.problem, "oracle": base.ref(), "subject": built.ref(),
                         "runs": [["spec", fresh]], "determinism": None, "kernel_timeout": kt}
            rr = (await self._request(dev, rmsg, per_request, "re-check", ev))["runs"][0]
            rep = RunReport(rr["variant"], int(rr["seed"]), rr["sizes"], list(rr["buffers"]), list(rr["guard"]),
                            purpose="recheck")
            ev.correctness.runs.append(rep)
            if not rep.ok:
                what = "; ".join(rep.guard + [b.summary() for b in rep.buffers if not b.ok])
                raise _Fail("incorrect", f"re-check after timing with fresh inputs (seed {fresh}) failed: {what}")
        # -- energy
        if self.settings.objective == "energy":
            self._say(cand, "measuring energy")
            ev.energy = await self._energy(dev, built, base, baseline)
        # -- the winner's checks: sanitizer, then the speedup confirmed by Nsight Compute
        if sanitize:
            await self._sanitize_step(ev, built, dev)
            await self._confirm_step(ev, built, base, dev)

    async def _sanitize_step(self, ev: Evaluation, built: _Built, dev: Device) -> None:
        self._say_id(ev.candidate_id, "compute-sanitizer")
        ev.sanitizer = await self._sanitize(built, dev)
        ev.notes.extend(ev.sanitizer.notes())
        bad = ev.sanitizer.failed
        if bad is not None:
            status = "racy" if bad.tool == "racecheck" else "rejected"
            raise _Fail(status, f"compute-sanitizer {bad.tool}: {bad.errors} error(s): {bad.first_error}")

    async def _confirm_step(self, ev: Evaluation, built: _Built, base: _Built, dev: Device) -> None:
        """Re-measure a claimed win with ncu's gpu__time_duration (``confirm``); a disagreement beyond the
        timing's interval makes the win not significant: the interval is widened to cover both measurements
        and the evidence says why. Runs in its own process on the device's GPU, which this evaluation holds.
        """
        t = ev.timing
        if (not self.settings.confirm or t is None or t.speedup is None or t.speedup.ratio <= 1.0
                or t.confirmation is not None):
            return
        if not isinstance(self.backend, LocalBackend):
            ev.notes.append("speedup not confirmed by Nsight Compute: it runs with local GPUs only")
            return
        left = self._left()
        if left is not None and left < CONFIRM_MIN_SECONDS:
            ev.notes.append(f"speedup not confirmed by Nsight Compute: {max(0.0, left):.0f} s of the time budget "
                            f"left (it needs about {CONFIRM_MIN_SECONDS:.0f} s)")
            return
        self._say_id(ev.candidate_id, "Nsight Compute confirmation")
        claimed = t.speedup
        # like with like: the timing flushes L2 before every launch (graph mode too), and so does ncu then
        flush = self.settings.timing.flush_l2

        def side(b: _Built) -> Side:
            grid, block, smem = b.launches["spec"]
            return Side(b.cubin, b.symbol, (grid, block, smem))

        layout, seed, device = self.layouts["spec"], self._seeds()[0], dev.device
        loop = asyncio.get_running_loop()
        per_launch = t.baseline.median if t.baseline is not None else None
        cap = 300.0 if left is None else max(5.0, left)
        conf = await loop.run_in_executor(None, lambda: ncu_confirm(side(base), side(built), layout, claimed,
                                                                    seed=seed, device=device, flush=flush,
                                                                    timed_baseline_ms=per_launch, timeout=cap))
        t.confirmation = conf
        ev.notes.append(conf.text())
        if conf.agrees is False and conf.ncu_ratio is not None:
            t.speedup = Speedup(claimed.ratio, min(claimed.low, conf.ncu_ratio), max(claimed.high, conf.ncu_ratio),
                                claimed.pairs)
        elif conf.reduced and conf.ncu_ratio is not None:  # a real win, offered at the size ncu reproduces
            t.speedup = Speedup(conf.ncu_ratio, min(claimed.low, conf.ncu_ratio), claimed.high, claimed.pairs)

    async def _hot_step(self, ev: Evaluation, built: _Built, base: _Built, dev: Device) -> None:
        """A winner verified earlier in the search gets its back-to-back ("hot") figure now: both sides timed in a
        row without flushing, for the report beside the cold claim (the claim itself is not re-timed)."""
        t = ev.timing
        if t is None or t.speedup is None or t.hot is not None or not ev.ok:
            return
        ts = self.settings.timing
        left = self._left()
        if left is not None and left < HOT_MIN_SECONDS:
            ev.notes.append(f"back-to-back (hot) figure not measured: {max(0.0, left):.0f} s of the time budget left")
            return
        kt = float(self.settings.kernel_timeout)
        msg: Msg = {"op": "time", "problem": self.problem, "sides": [base.ref(), built.ref()], "variant": "spec",
                    "seed": self._seeds()[0], "settings": ts.to_json(), "kernel_timeout": kt, "oracle": None,
                    "hot": True, "hot_only": True}
        r = await self._request(dev, msg, ts.max_seconds + ts.warmup_seconds + kt * ts.batch * 8 + 120.0,
                                "back-to-back timing", ev)
        t.hot = _hot_figure(r.get("hot"), False)

    def _note_original_writes(self, ev: Evaluation, names: Sequence[str] | None) -> None:
        """Once per evaluator: ``in`` buffers the original kernel writes (a worker found its checksum changed).

        Not a failure (the spec calls a scratch buffer an input): the worker copies them for every run from
        then on, as every input was copied before, and the spec should say ``inout``."""
        for name in names or ():
            if name not in self._told_original_writes:
                self._told_original_writes.add(name)
                ev.notes.append(f"the original kernel writes `{name}`, which the spec lists as an input: it is "
                                f"copied for every run; mark it `inout` in the spec")

    def _bytes(self) -> float | None:
        r = self.spec.resolve()
        if r.bytes:
            return float(r.bytes)
        # Without a spec figure, the outputs that must be written are a floor.
        out = sum(a.nbytes for a in self.layouts["spec"].writable)
        return float(out) if out else None

    def _flops(self) -> float | None:
        r = self.spec.resolve()
        return float(r.flops) if r.flops else None

    async def _energy(self, dev: Device, built: _Built, base: _Built, baseline: bool) -> EnergyReport:
        from .energy import CAVEAT

        async def one(ref: Msg) -> dict[str, Any] | None:
            msg: Msg = {"op": "energy", "problem": self.problem, "subject": ref, "variant": "spec",
                        "seed": self._seeds()[0], "seconds": self.settings.energy_seconds,
                        "kernel_timeout": self.settings.kernel_timeout}
            r = await dev.request(msg, 120.0 + 4 * self.settings.energy_seconds)
            if r.get("status") == "unavailable":
                return None
            if r.get("status") != "ok":
                raise _Fail(str(r.get("status") if r.get("status") in STATUSES else "crashed"),
                            f"energy measurement: {r.get('reason')}")
            reading: dict[str, Any] = r["reading"]
            return reading

        cand_r = await one(built.ref())
        if cand_r is None:
            return EnergyReport(0.0, None, 0.0, 0, 0.0, "NVML energy counter unavailable: energy not measured")
        base_r = cand_r if baseline else await one(base.ref())
        return EnergyReport(float(cand_r["joules_per_launch"]),
                            float(base_r["joules_per_launch"]) if base_r else None, float(cand_r["seconds"]),
                            int(cand_r["launches"]), float(cand_r["mean_power_w"]), CAVEAT)

    def _prestart(self) -> None:
        """Start the GPU workers (after the comparison module they load) while the first builds run: a worker
        takes ~2 s to start (interpreter, CUDA context, checks of its device kernels), as long as nvcc."""
        if self._prestart_task is None:
            async def start() -> None:
                await self.backend.ensure_compare(self.arch)
                await self.backend.warm_up()

            self._prestart_task = asyncio.ensure_future(start())
            # a failure here is the first candidate's to report, when it asks for a device
            self._prestart_task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _left(self) -> float | None:
        """Seconds until the deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    async def _sanitize(self, built: _Built, dev: Device) -> SanitizerReport:
        """memcheck and racecheck on one launch: at the small size where there is one (a 1.65 GB problem runs
        for minutes under the sanitizer), else at the perturbed size; capped by the deadline.

        A kernel may assume more than the small size gives it. So when the candidate fails there, the original
        runs under the same tool at the same size: if it fails too, the small size is not one the kernel
        supports, and the candidate is checked at the verified (perturbed) size instead."""
        # On the device's own machine: with Ray, that is the node of the actor holding the GPU.
        verified = "odd" if "odd" in self.variants else "spec"
        seed = self._seeds()[0]

        def timeout() -> float:
            left = self._left()
            return self.settings.sanitize_timeout if left is None else \
                max(1.0, min(self.settings.sanitize_timeout, left / 2))

        async def run(b: _Built, variant: str) -> SanitizerReport:
            return await dev.sanitize(b.cubin, b.symbol, self.layouts[variant], tuple(b.launches[variant]),  # type: ignore[arg-type]
                                      seed=seed, timeout=timeout())

        if "small" not in built.launches:
            return await run(built, verified)
        report = await run(built, "small")
        if report.failed is None:
            report.size = f"small size ({self.layouts['small'].describe()})"
            return report
        base = await self._baseline_built()
        if "small" in base.launches:
            orig = await run(base, "small")
            if orig.failed is None:
                report.size = f"small size ({self.layouts['small'].describe()}), where the original passes"
                return report
        again = await run(built, verified)
        again.size = f"{verified} size ({self.layouts[verified].describe()}): the original fails the sanitizer at " \
                     "the small size too"
        return again


def _run_text(run: list[Any]) -> str:
    """A verification run for people: ``spec size, seed 1`` / ``odd size, seed 0, tail perturbed``."""
    tail = ", tail perturbed" if len(run) > 2 and run[2] == "tail" else ""
    return f"{run[0]} size, seed {run[1]}{tail}"


def _mode_text(graph: Msg | None, ts: TimingSettings) -> str:
    """How the sides were timed, for reports: events, or CUDA graphs of cold launches (and why), and the L2
    policy (flushed before every launch, graph mode too)."""
    flushed = ", L2 flushed and outputs reset before each launch" if ts.flush_l2 else ", L2 not flushed"
    if not graph:
        return "events around each launch" + flushed
    if graph.get("unavailable"):
        return f"events around each launch{flushed} (CUDA graphs unavailable: {graph['unavailable']})"
    k = int(graph.get("cold_launches_per_replay") or 0)
    what = f"CUDA graph of {k} launches, events around each launch inside the graph{flushed}"
    if graph.get("auto"):
        fastest = min(graph.get("per_launch_ms") or [0.0]) * 1e3
        return f"{what} (automatic: {fastest:.1f} µs per launch < {float(graph.get('below_ms', 0.0)) * 1e3:.0f} µs)"
    return what + " (asked for)"


def _hot_figure(hot: Msg | None, baseline: bool) -> HotFigure | None:
    """The worker's back-to-back samples as a report (None where they were not asked for)."""
    if not hot or not hot.get("samples") or not all(hot["samples"]):
        return None
    samples = hot["samples"]
    base = summarize(samples[0])
    cand = base if baseline or len(samples) < 2 else summarize(samples[1])
    return HotFigure(cand, base, None if baseline or len(samples) < 2 else speedup(samples[0], samples[1]),
                     int(hot.get("launches_per_sample") or 1), bool(hot.get("graph")))


def _json_safe(d: Any) -> Any:
    """Replace non-finite floats (not valid JSON) by strings, recursively."""
    if isinstance(d, float):
        return d if math.isfinite(d) else repr(d)
    if isinstance(d, dict):
        return {k: _json_safe(v) for k, v in d.items()}
    if isinstance(d, list | tuple):
        return [_json_safe(v) for v in d]
    return d


def evaluator_for_job(req: Any, *, workspace: str | Path | None = None, device: int | None = None,
                      gpus: str | int | Sequence[int] | None = None,
                      backend: EvaluationBackend | None = None, store: str | Path | None = None) -> Evaluator:
    """The evaluator of an optimize job (``search.optimize.OptimizeRequest``).

    By default a local pool over every visible GPU of one model (``gpus="all"``, honouring
    ``CUDA_VISIBLE_DEVICES``); ``device`` picks one GPU, ``gpus`` a count or indices, ``backend`` another
    backend (``ray_backend.RayBackend``). The evaluator owns its backend and closes it with itself, so a
    finished job leaves no worker behind. Evaluations are cached in the workspace's store, in the user's cache
    and keyed by the workspace (the file's folder when no workspace is known; ``store``, a path, overrides it:
    see ``store.workspace_db``), so re-running a job never re-measures identical work on the same GPU model and
    driver, and nothing is written into the workspace.
    """
    root = Path(workspace) if workspace is not None else Path(req.file).resolve().parent
    cache = Store.for_workspace(root, store)
    settings = EngineSettings(arch=req.arch or None)
    if backend is None:
        backend = LocalBackend([device] if device is not None else (gpus if gpus is not None else "all"))
    # A request made by a job carries its parsed snapshot and spec: the evaluator reuses them.
    _, model, _, spec = req.prepared if getattr(req, "prepared", None) is not None else (None, None, None, None)
    return Evaluator(req.file, req.kernel, text=req.text, spec=spec, model=model, store=cache, settings=settings,
                     backend=backend, owns_backend=True)
