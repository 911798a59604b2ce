"""What an evaluation reports: the verdict and the build, correctness, timing and energy evidence behind it.

These are plain data with JSON round trips (the workspace store keeps ``Evaluation.to_json()``, front ends
render it); the ``Evaluator`` (``evaluator.py``) fills them in. They live apart from it so that readers of
results (the store, search, reports, front ends) need not import the machinery that produces them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .confirm import Confirmation
from .sanitizer import SanitizerReport
from .timing import Speedup, Stats, hot_differs

if TYPE_CHECKING:  # compare.py needs numpy: imported by the readers below, not by importing this module
    from . import compare as cmp

Status = Literal["ok", "compile_error", "incorrect", "crashed", "timeout", "suspicious", "racy", "rejected"]
STATUSES: tuple[str, ...] = ("ok", "compile_error", "incorrect", "crashed", "timeout", "suspicious", "racy",
                             "rejected")

def crash_context(during: dict[str, Any], tail: int, domain_lines: dict[str, str] | None = None) -> str:
    """Which verification run a crash happened in, from the worker's ``during`` (``Engine._during``), and, when
    the original crashed only on inputs it had not seen at the spec size, that those inputs are the cause and
    how to declare their domain.

    Why: "the original kernel could not be evaluated: verification: an illegal memory access" sent users
    hunting a bug in a correct kernel (an embedding lookup storing its ids as floats, whose sensitivity run
    moved the ids out of the table). ``domain_lines`` maps an input to the annotation line that declares it
    as an index domain (``arg ids: in float[M] int(0, HI)``)."""
    who = "the original kernel" if during.get("side") == "original" else "the candidate"
    variant = str(during.get("variant", "spec"))
    size = "spec size" if variant == "spec" else "perturbed (odd) size" if variant == "odd" else f"{variant} size"
    sizes = str(during.get("sizes") or "")
    what = "sensitivity run" if during.get("tail") else "verification run"
    text = f"{who} crashed in the {what} at the {size}" + (f" ({sizes})" if sizes else "") \
        + f", seed {during.get('seed')}"
    moved = [str(n) for n in during.get("perturbed") or []]
    left = dict(during.get("left") or {})
    if during.get("tail"):
        text += (f", with the last {tail} elements of " + ", ".join(f"`{n}`" for n in moved) + " perturbed"
                 if moved else ", no input perturbed")
        if left:
            text += " (" + ", ".join(f"`{n}` left as drawn" for n in left) + ")"
    plain_run = not during.get("tail") and variant == "spec"
    if during.get("side") != "original" or plain_run:
        return text
    if during.get("plain_ok"):
        text += ("; it runs cleanly on plain inputs at the spec size, so the verification inputs of this run are "
                 "the cause, not the kernel")
    if during.get("tail"):
        lines = [domain_lines[n] for n in moved if domain_lines and n in domain_lines]
        text += ("; the sensitivity run moves floating-point inputs far up (by 10^4 times their scale) and keeps "
                 "`int(LO, HI)` inputs inside [LO, HI), whatever their element type: declare the domain of each "
                 "input the kernel uses as an index or a count"
                 + (" (" + "; ".join(f"`{line}`" for line in lines) + ", with HI its number of valid values)"
                    if lines else ""))
    else:
        text += ("; the perturbed size changes every size not marked `fixed` (and the domains computed from them): "
                 "mark a size the kernel needs exactly `fixed`, or choose its perturbed value with `odd=`")
    return text


@dataclass
class BuildStats:
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    timed_out: bool = False
    arch: str = ""
    symbol: str = ""
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_bytes: int = 0
    messages: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BuildStats:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class RunReport:
    """One correctness run: a size variant ("spec" or "odd") and a seed."""

    variant: str
    seed: int
    sizes: str
    buffers: list[cmp.BufferReport] = field(default_factory=list)
    guard: list[str] = field(default_factory=list)
    purpose: str = "verify"  # verify | recheck | sensitivity (inputs with their last elements perturbed)
    #: sensitivity runs: elements of each output the perturbation changed in the original's results
    tail_changes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.guard and all(b.ok for b in self.buffers)

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "seed": self.seed, "sizes": self.sizes, "purpose": self.purpose,
                "ok": self.ok, "guard": self.guard, "buffers": [b.to_json() for b in self.buffers],
                "tail_changes": self.tail_changes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunReport:
        from . import compare as cmp

        return cls(d["variant"], int(d["seed"]), d["sizes"], [cmp.BufferReport.from_json(b) for b in d["buffers"]],
                   list(d.get("guard", [])), d.get("purpose", "verify"),
                   {str(k): int(v) for k, v in (d.get("tail_changes") or {}).items()})


@dataclass
class CorrectnessReport:
    runs: list[RunReport] = field(default_factory=list)
    determinism: list[cmp.BufferReport] | None = None
    timed_outputs: list[cmp.BufferReport] = field(default_factory=list)
    unwritten_by_original: dict[str, int] = field(default_factory=dict)
    #: verification runs not made: the candidate's first run matched, then its timing showed it clearly slower
    #: than the best verified so far, so it cannot win and the rest of its checks would only spend the GPU
    #: (each ``[variant, seed]`` or ``[variant, seed, "tail"]``, plus ``"determinism"`` and ``"recheck"``)
    skipped: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Were all the verification runs made? Only a complete verification makes a result offerable."""
        return not self.skipped

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.runs if r.purpose == "verify"})

    @property
    def sizes_checked(self) -> list[str]:
        return sorted({r.variant for r in self.runs})

    @property
    def max_abs(self) -> float:
        return max((b.max_abs for r in self.runs for b in r.buffers), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((b.max_rel for r in self.runs for b in r.buffers), default=0.0)

    def evidence(self) -> str:
        """``3 seeds + odd size`` style summary of what was checked."""
        n = len(self.seeds)
        odd = " + odd size" if "odd" in self.sizes_checked else ""
        partial = f"; {len(self.skipped)} more checks skipped: clearly slower than the best" if self.skipped else ""
        return f"{n} seed{'s' if n != 1 else ''}{odd}{partial}"

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_json() for r in self.runs],
                "determinism": None if self.determinism is None else [b.to_json() for b in self.determinism],
                "timed_outputs": [b.to_json() for b in self.timed_outputs],
                "unwritten_by_original": self.unwritten_by_original, "skipped": self.skipped,
                "complete": self.complete, "seeds": self.seeds, "evidence": self.evidence(), "max_abs": self.max_abs,
                "max_rel": self.max_rel}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CorrectnessReport:
        from . import compare as cmp

        det = d.get("determinism")
        return cls([RunReport.from_json(r) for r in d.get("runs", [])],
                   None if det is None else [cmp.BufferReport.from_json(b) for b in det],
                   [cmp.BufferReport.from_json(b) for b in d.get("timed_outputs", [])],
                   dict(d.get("unwritten_by_original", {})), [str(x) for x in d.get("skipped") or []])


@dataclass
class HotFigure:
    """The back-to-back ("hot") figure: both sides launched ``launches`` times in a row with no L2 flush, as
    other tools' warm numbers are. A second figure only: the claim is the cold one (``TimingReport.speedup``)."""

    candidate: Stats
    baseline: Stats
    speedup: Speedup | None = None
    launches: int = 1
    graph: bool = False

    def text(self) -> str:
        """``back-to-back (hot, L2 warm): 1.440x [1.430, 1.450]``, or the original's hot time alone."""
        what = f"back-to-back (hot, L2 warm, {self.launches} launches in a row)"
        if self.speedup is None:
            return f"{what}: {self.baseline.median * 1e3:.2f} µs"
        return f"{what}: {self.speedup.text()}"

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json(), "baseline": self.baseline.to_json(),
                "speedup": self.speedup.to_json() if self.speedup else None, "launches": self.launches,
                "graph": self.graph, "text": self.text()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HotFigure:
        return cls(Stats.from_json(d["candidate"]), Stats.from_json(d["baseline"]),
                   Speedup.from_json(d["speedup"]) if d.get("speedup") else None, int(d.get("launches", 1)),
                   bool(d.get("graph", False)))


@dataclass
class TimingReport:
    candidate: Stats | None = None
    baseline: Stats | None = None
    speedup: Speedup | None = None
    mode: str = "events, L2 flushed before each launch"
    gpu: str = ""
    driver: str = ""
    sm_clock_mhz: int | None = None
    max_clock_mhz: int | None = None
    peak_gbps: float = 0.0
    bytes: float | None = None
    flops: float | None = None
    floor_ms: float | None = None
    #: Nsight Compute's check of a winner's speedup (``confirm``), when one was made
    confirmation: Confirmation | None = None
    #: timing stopped early: the candidate's whole interval was below the best verified speedup so far (its
    #: interval is then wider than the target, and it says so)
    abandoned: bool = False
    #: the back-to-back figure, where it was measured (the original's timing, a winner's checks, ``--hot``)
    hot: HotFigure | None = None

    @property
    def hot_differs(self) -> bool:
        """Is the hot ratio further from the (cold) claim than its interval? Then it is shown beside it."""
        if self.hot is None or self.hot.speedup is None or self.speedup is None:
            return False
        return hot_differs(self.speedup, self.hot.speedup)

    @property
    def hot_ratio(self) -> float | None:
        """The hot ratio where it differs from the cold one by more than the interval (else None)."""
        return self.hot.speedup.ratio if self.hot_differs and self.hot and self.hot.speedup else None

    @property
    def significant(self) -> bool:
        """Is the speedup outside the noise? Its interval excludes 1 and no confirmation disagrees."""
        if self.speedup is None or self.speedup.low <= 1.0:
            return False
        return not (self.confirmation is not None and self.confirmation.agrees is False)

    @property
    def achieved_gbps(self) -> float | None:
        if self.candidate is None or not self.bytes:
            return None
        return self.bytes / (self.candidate.median * 1e-3) / 1e9

    @property
    def achieved_gflops(self) -> float | None:
        if self.candidate is None or not self.flops:
            return None
        return self.flops / (self.candidate.median * 1e-3) / 1e9

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json() if self.candidate else None,
                "baseline": self.baseline.to_json() if self.baseline else None,
                "speedup": self.speedup.to_json() if self.speedup else None, "mode": self.mode, "gpu": self.gpu,
                "driver": self.driver, "sm_clock_mhz": self.sm_clock_mhz, "max_clock_mhz": self.max_clock_mhz,
                "peak_gbps": self.peak_gbps, "bytes": self.bytes, "flops": self.flops, "floor_ms": self.floor_ms,
                "achieved_gbps": self.achieved_gbps, "achieved_gflops": self.achieved_gflops,
                "confirmation": self.confirmation.to_json() if self.confirmation else None,
                "abandoned": self.abandoned, "hot": self.hot.to_json() if self.hot else None,
                "hot_differs": self.hot_differs, "hot_ratio": self.hot_ratio}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TimingReport:
        return cls(Stats.from_json(d["candidate"]) if d.get("candidate") else None,
                   Stats.from_json(d["baseline"]) if d.get("baseline") else None,
                   Speedup.from_json(d["speedup"]) if d.get("speedup") else None,
                   d.get("mode", ""), d.get("gpu", ""), d.get("driver", ""), d.get("sm_clock_mhz"),
                   d.get("max_clock_mhz"), float(d.get("peak_gbps") or 0.0), d.get("bytes"), d.get("flops"),
                   d.get("floor_ms"), Confirmation.from_json(d["confirmation"]) if d.get("confirmation") else None,
                   bool(d.get("abandoned", False)), HotFigure.from_json(d["hot"]) if d.get("hot") else None)


@dataclass
class EnergyReport:
    joules_per_launch: float
    baseline_joules_per_launch: float | None
    seconds: float
    launches: int
    mean_power_w: float
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """Baseline energy over candidate energy (> 1: the candidate uses less)."""
        if not self.baseline_joules_per_launch or self.joules_per_launch <= 0:
            return None
        return self.baseline_joules_per_launch / self.joules_per_launch

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EnergyReport:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Evaluation:
    """Everything known about one candidate on one GPU. ``status`` is one of ``STATUSES``."""

    candidate_id: str
    candidate_hash: str
    kernel: str
    status: str
    reason: str = ""
    build: BuildStats | None = None
    correctness: CorrectnessReport = field(default_factory=CorrectnessReport)
    timing: TimingReport | None = None
    energy: EnergyReport | None = None
    sanitizer: SanitizerReport | None = None
    guards: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gpu: str = ""
    driver: str = ""
    seconds: float = 0.0
    cached: bool = False
    cacheable: bool = True
    #: where ``seconds`` went (seconds, and the worker's preemption count): ``build`` (waiting for the
    #: builds), ``queue`` (waiting for a free GPU), ``gpu`` (holding one), of which ``worker`` the worker
    #: spent serving requests (``worker_cpu`` of it on a CPU, ``warmup`` ramping clocks, ``timing`` timing);
    #: ``gpu`` minus ``worker`` is this process's own overhead. Scale-out measurements read these.
    time_split: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Built, ran and matched the original on every run made, and timed. The search uses it (a slower ok
        candidate is still a parent); what is offered to the user must also be ``verified``."""
        return self.status == "ok"

    @property
    def verified(self) -> bool:
        """ok with every verification run made: what may be reported as a winner, offered or accepted."""
        return self.ok and self.correctness.complete

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup.ratio if self.timing and self.timing.speedup else None

    def headline(self) -> str:
        """One line for people: "1.37x faster (verified on NVIDIA H100, 3 seeds + odd size)"."""
        if not self.ok:
            return f"{self.status}: {self.reason}"
        sp = self.speedup
        checked = "verified" if self.correctness.complete else "checked"
        where = f"{checked} on {self.gpu}, {self.correctness.evidence()}"
        if self.cached:  # not measured now: say so wherever the line is shown (CLI, editor, JSON)
            where += "; replayed from the evaluation cache, measured by an earlier run"
        if sp is None:
            return f"verified ({where})"
        word = "faster" if sp >= 1 else "slower"
        factor = sp if sp >= 1 else 1 / sp
        conf = self.timing.confirmation if self.timing else None
        hot = self.timing.hot_ratio if self.timing else None
        if hot is not None:  # the claim is the cold figure; the warm one differs by more than its interval
            word += " cold, L2 flushed before each launch"
            where += f"; back-to-back (hot, L2 warm): {hot:.2f}x"
        if conf is not None and conf.agrees is False:
            return f"{factor:.2f}x {word}, {conf.text()} ({where})"
        return f"{factor:.2f}x {word} ({where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id, "candidate_hash": self.candidate_hash, "kernel": self.kernel,
            "status": self.status, "reason": self.reason, "headline": self.headline(),
            "build": asdict(self.build) if self.build else None, "correctness": self.correctness.to_json(),
            "timing": self.timing.to_json() if self.timing else None,
            "energy": self.energy.to_json() if self.energy else None,
            "sanitizer": self.sanitizer.to_json() if self.sanitizer else None,
            "guards": self.guards, "notes": self.notes, "gpu": self.gpu, "driver": self.driver,
            "seconds": self.seconds, "cached": self.cached, "speedup": self.speedup, "verified": self.verified,
            "time_split": {k: round(v, 4) for k, v in self.time_split.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Evaluation:
        return cls(
            d["candidate_id"], d["candidate_hash"], d["kernel"], d["status"], d.get("reason", ""),
            BuildStats.from_json(d["build"]) if d.get("build") else None,
            CorrectnessReport.from_json(d.get("correctness") or {}),
            TimingReport.from_json(d["timing"]) if d.get("timing") else None,
            EnergyReport.from_json(d["energy"]) if d.get("energy") else None,
            SanitizerReport.from_json(d["sanitizer"]) if d.get("sanitizer") else None,
            list(d.get("guards", [])), list(d.get("notes", [])), d.get("gpu", ""), d.get("driver", ""),
            float(d.get("seconds", 0.0)), bool(d.get("cached", False)),
            time_split={str(k): float(v) for k, v in (d.get("time_split") or {}).items()},
        )
