"""Evaluation backends: where an ``Evaluator``'s compiles and GPU work run.

An evaluator decides *what* to do with a candidate (guards, build, verification, timing); a backend
decides *where*. Two implementations share one interface (``EvaluationBackend``):

- ``LocalBackend`` (the default): one worker process per GPU of this machine (all visible GPUs,
  honouring ``CUDA_VISIBLE_DEVICES``, or those chosen with ``--gpus``), builds in a CPU process pool;
- ``RayBackend`` (``ray_backend.py``, extra ``ray``): one GPU actor per GPU of a Ray cluster, each owning a
  worker, builds as Ray CPU tasks.

Why the interface is this narrow: a candidate's GPU work is a conversation with *one* device (verify,
then time interleaved with the original, then re-check), so the unit a backend hands out is a device,
held for the whole GPU part of one candidate. That is what keeps every speedup a ratio measured on one
GPU: the original is timed again, interleaved, on the device that times the candidate, and each device
computes its own oracle outputs. Candidates spread over devices simply because each takes whichever
device is free; nothing is scheduled by hand beyond that checkout.

A device can be *lost* (a Ray actor or its node died) in the middle of a candidate: its handle raises
``DeviceLost`` and the evaluator starts that candidate's GPU part again on another device from a clean
copy of its evaluation, so no result is lost and none is counted twice. A local worker that crashes is
not lost: its supervisor reports the crash as the candidate's verdict and starts a new worker.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..compiler.sandbox import run_tool
from .pool_build import build_job
from .supervisor import DeviceHandle, GpuPool, Msg, gpu_identity

if TYPE_CHECKING:
    from .inputs import Layout
    from .sanitizer import SanitizerReport

T = TypeVar("T")


class GpuUnavailable(RuntimeError):
    """No GPU worker can run here (no GPU, no driver, no pycuda); the message says what to install."""


class DeviceLost(RuntimeError):
    """The device serving a request went away (a Ray actor or its node died, or stopped answering).

    Unlike a crashed kernel, this says nothing about the candidate: the evaluator retries the candidate's
    GPU part on another device.
    """


class GpuSelectionError(ValueError):
    """``--gpus`` asks for GPUs that are not there; the message says which are."""


class Device(Protocol):
    """One GPU as the evaluator sees it, held for the GPU part of one candidate."""

    @property
    def device(self) -> int:
        """The CUDA device index inside the process that owns the worker."""

    @property
    def key(self) -> str:
        """A name unique among the backend's devices (facts are cached per device under it)."""

    @property
    def worker_pid(self) -> int | None:
        """The worker's process id as last seen (a new one means a restarted worker)."""

    async def request(self, msg: Msg, timeout: float = 300.0) -> Msg:
        """Send one request to the device's worker; a reply with a ``status``, or ``DeviceLost``."""

    async def sanitize(self, cubin: bytes, symbol: str, layout: Layout,
                       launch: tuple[Sequence[int], Sequence[int], int], *, seed: int,
                       timeout: float) -> SanitizerReport:
        """Run compute-sanitizer on one launch, on this device's machine and GPU."""


# --------------------------------------------------------------------------- which GPUs
@dataclass(frozen=True)
class VisibleGpu:
    """A GPU as CUDA numbers it in this process (``index``), with what nvidia-smi says of it."""

    index: int
    smi_id: str  # what nvidia-smi's --id takes: a physical index or a UUID
    name: str = ""
    driver: str = ""


def _smi_rows() -> list[tuple[str, str, str, str]] | None:
    """(physical index, uuid, name, driver) of every GPU from nvidia-smi; None if it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = run_tool([smi, "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"],
                       tool="nvidia-smi", timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            rows.append((parts[0], parts[1], parts[2], parts[3]))
    return rows


def visible_devices(env: Mapping[str, str] | None = None) -> list[VisibleGpu]:
    """The GPUs CUDA will see in this process, in CUDA's numbering, honouring ``CUDA_VISIBLE_DEVICES``.

    CUDA reads the variable as a list of physical indices or UUIDs and stops at the first entry it
    cannot use, so this does the same. Without nvidia-smi nothing can be checked: an unset variable then
    gives device 0 alone (its worker will say precisely why it cannot start, if it cannot).
    """
    rows = _smi_rows()
    raw = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        if rows is None:
            return [VisibleGpu(0, "0")]
        return [VisibleGpu(i, r[0], r[2], r[3]) for i, r in enumerate(rows)]
    out: list[VisibleGpu] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            break
        if entry.lstrip("-").isdigit():
            if int(entry) < 0:
                break
            match = [r for r in rows if r[0] == entry] if rows is not None else None
        else:
            match = [r for r in rows if r[1].startswith(entry)] if rows is not None else None
        if match is not None and not match:
            break
        row = match[0] if match else None
        out.append(VisibleGpu(len(out), row[0] if row else entry, row[2] if row else "", row[3] if row else ""))
    return out


def device_identity(device: int) -> tuple[str, str] | None:
    """nvidia-smi's (GPU name, driver) of CUDA device ``device`` (CUDA's numbering, through
    ``CUDA_VISIBLE_DEVICES``), without a CUDA context; None if it cannot tell. What ``LocalBackend.identity``
    keys evaluations by, and what a stored profile is keyed by (``profile.reuse``): one notion of "the same GPU"."""
    smi_id = next((g.smi_id for g in visible_devices() if g.index == device), None)
    return gpu_identity(int(smi_id)) if smi_id is not None and smi_id.isdigit() else None


def parse_gpus(text: str | None) -> str | int | list[int]:
    """``--gpus``: ``all``, a count (``2``), or CUDA indices (``0,1``; one index alone is written ``1,``)."""
    if text is None or text.strip().lower() in ("", "all"):
        return "all"
    t = text.strip()
    if "," in t:
        try:
            idx = [int(p) for p in t.split(",") if p.strip()]
        except ValueError:
            raise GpuSelectionError(f"--gpus {text}: expected all, a number of GPUs, or indices like 0,1") from None
        if not idx or any(i < 0 for i in idx):
            raise GpuSelectionError(f"--gpus {text}: GPU indices are 0 or more")
        return list(dict.fromkeys(idx))
    try:
        n = int(t)
    except ValueError:
        raise GpuSelectionError(f"--gpus {text}: expected all, a number of GPUs, or indices like 0,1") from None
    if n < 1:
        raise GpuSelectionError(f"--gpus {text}: at least one GPU is needed to time candidates")
    return n


def select_gpus(spec: str | int | Sequence[int] | None = "all",
                visible: Sequence[VisibleGpu] | None = None) -> tuple[list[int], str]:
    """CUDA indices for a local pool, and a note on GPUs left out.

    Only GPUs of one model serve one search: a speedup is a ratio on one GPU, but the search ranks
    candidates against each other and the evaluation cache is keyed by the GPU's name, so mixing models
    would compare ratios from different chips. With ``all``, GPUs unlike the first visible one are left out
    (the note says so); an explicit list that mixes models is refused.
    """
    vis = list(visible) if visible is not None else visible_devices()
    chosen: str | int | list[int] = (parse_gpus(spec) if isinstance(spec, str) or spec is None
                                     else spec if isinstance(spec, int) else [int(i) for i in spec])
    if not vis:
        raise GpuSelectionError("no GPU is visible (CUDA_VISIBLE_DEVICES hides them all)")
    note = ""
    if chosen == "all":
        first = vis[0].name
        keep = [g for g in vis if g.name == first]
        left = [g for g in vis if g.name != first]
        if left:
            note = ("left out " + ", ".join(f"GPU {g.index} ({g.name})" for g in left)
                    + f": one search measures on one GPU model ({first})")
        return [g.index for g in keep], note
    if isinstance(chosen, str):
        raise GpuSelectionError(f"--gpus {chosen}: expected all, a number of GPUs, or indices like 0,1")
    if isinstance(chosen, int):
        if chosen > len(vis):
            raise GpuSelectionError(f"--gpus {chosen}: only {len(vis)} GPU{'s' if len(vis) != 1 else ''} visible")
        picked = vis[:chosen]
    else:
        bad = [i for i in chosen if i >= len(vis)]
        if bad:
            raise GpuSelectionError(f"--gpus: no GPU {', '.join(map(str, bad))} (visible: 0..{len(vis) - 1})")
        picked = [vis[i] for i in chosen]
    names = {g.name for g in picked}
    if len(names) > 1:
        raise GpuSelectionError("--gpus mixes GPU models (" + ", ".join(f"{g.index}: {g.name}" for g in picked)
                                + "); one search measures on one model: choose GPUs of one kind")
    return [g.index for g in picked], note


# --------------------------------------------------------------------------- compile priority
#: niceness of compile processes where ``SCHED_IDLE`` is not available. A search compiles many candidates
#: at once, and nvcc can take every core while GPU workers time kernels: a worker waiting for a core
#: stretches each candidate's GPU part (its launches, copies and comparisons are driven from the CPU) and
#: adds noise to its timing, which makes the adaptive timing repeat more.
COMPILE_NICE = 10


def lower_priority(nice: int = COMPILE_NICE) -> None:
    """Run this process, and what it starts (nvcc), below everything else: ``SCHED_IDLE``, else ``nice``.

    Measured on 2 H200s with one compile process per core (benchmarks/RESULTS.md, "Scale-out"): at nice 10
    each GPU worker was still preempted ~10 times per candidate and every candidate held its GPU 19 % longer
    than with one GPU, because CFS still gives a nice-10 process a share of the core a worker wakes up on.
    ``SCHED_IDLE`` (Linux) runs a compile only on a core nothing else wants, so the workers, the parent and
    an editor keep their cores; compiles still use every idle cycle. Inherited by nvcc's children; calling
    again is a no-op.
    """
    with contextlib.suppress(OSError, AttributeError):
        if os.getpriority(os.PRIO_PROCESS, 0) < nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    with contextlib.suppress(OSError, AttributeError):
        if os.sched_getscheduler(0) != os.SCHED_IDLE:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def normal_priority() -> None:
    """Undo ``lower_priority`` as far as this process may (back to ``SCHED_OTHER``; nice 0 needs privilege).

    For processes that may have run compiles before hosting GPU work: Ray can hand a pooled worker process
    that ran compile tasks to a new GPU actor, whose GPU worker would otherwise inherit idle priority.
    """
    with contextlib.suppress(OSError, AttributeError):
        if os.sched_getscheduler(0) == os.SCHED_IDLE:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with contextlib.suppress(OSError, AttributeError):
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)


def niced(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` at compile priority (for CPU workers a backend does not start itself, e.g. Ray's)."""
    lower_priority()
    return fn(*args)


# --------------------------------------------------------------------------- the interface
class EvaluationBackend(abc.ABC):
    """Compiles (CPU) and devices (GPU) for evaluators; several evaluators may share one backend.

    Shared here: the device comparison kernels (built once, loaded by every worker when it starts) and
    per-device facts (info and measured peak bandwidth, measured once per worker).
    """

    kind = "base"
    #: devices one candidate may be tried on when devices are lost under it
    max_attempts = 3

    def __init__(self) -> None:
        self._compare_arch: str | None = None
        self._compare_task: asyncio.Task[None] | None = None
        self._facts: dict[str, tuple[Msg, float]] = {}
        self.compare_note = ""
        #: things a user should know about the backend (GPUs left out, devices dropped)
        self.notes: list[str] = []
        #: devices lost in the middle of a candidate (each such candidate was retried elsewhere)
        self.device_losses = 0
        #: how many GPU parts of candidates each device served (by ``Device.key``): the spread, for reports
        self.served: Counter[str] = Counter()
        self._warm_task: asyncio.Task[None] | None = None
        #: devices (by ``Device.key``) held outside the evaluator, by an optimize job's baseline profile
        #: (``app.optimize``): ``warm_up`` starts their workers but measures nothing on them until they are back
        self.reserved: set[str] = set()

    # ----------------------------------------------------------------- what implementations provide
    @abc.abstractmethod
    async def cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` (a module-level function, picklable arguments) on a CPU worker."""

    @abc.abstractmethod
    def acquire(self) -> contextlib.AbstractAsyncContextManager[Device]:
        """Hold one free device for the GPU part of one candidate (raises ``GpuUnavailable`` if none)."""

    @abc.abstractmethod
    async def all_devices(self) -> list[Device]:
        """Every device candidates may be spread over (starting the backend if it needs starting)."""

    @abc.abstractmethod
    def set_setup(self, messages: Sequence[Msg]) -> None:
        """Messages every worker gets after it starts (the device comparison kernels)."""

    @property
    @abc.abstractmethod
    def device_count(self) -> int:
        """How many devices candidates are spread over."""

    @property
    @abc.abstractmethod
    def restarts(self) -> int:
        """Worker restarts plus devices lost (how much trouble the devices had)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker and CPU process this backend started."""

    # ----------------------------------------------------------------- shared
    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.close)

    def summary(self) -> dict[str, Any]:
        """What the backend is, for reports and ``--json``."""
        return {"kind": self.kind, "devices": self.device_count, "device_losses": self.device_losses,
                "restarts": self.restarts, "served": dict(sorted(self.served.items())), "notes": list(self.notes)}

    async def ensure_compare(self, arch: str) -> None:
        """Build the device comparison kernels once; every worker loads them when it starts."""
        if self._compare_task is None or self._compare_arch != arch:
            self._compare_arch = arch
            self._compare_task = asyncio.ensure_future(self._build_compare(arch))
        await asyncio.shield(self._compare_task)

    async def _build_compare(self, arch: str) -> None:
        from . import compare as cmp  # numpy: loaded by the first job that compares, not at import

        out = await self.cpu(build_job, cmp.DEVICE_SOURCE, "wf_compare_4", {}, [], "warpforge_compare.cu", 120.0,
                             arch)
        if out.stats.ok and out.cubin:
            self.set_setup([{"op": "setup", "compare": {"cubin": out.cubin}}])
        else:
            self.compare_note = "device comparison kernels did not build; comparing on the host: " + \
                "; ".join(out.stats.messages[:2])

    async def warm_up(self) -> None:
        """Start every device's worker and measure its facts, all at once, before any candidate holds one.

        Workers otherwise start when a device is first handed out: a search's first candidates then wait
        for the first device while the second is still creating its CUDA context and measuring its
        bandwidth, and a short search ends before the second GPU has done much (one 12-candidate search on
        2 H200s split 11 / 2). Awaited before the first GPU part, so no fact-finding request ever lands
        between a candidate's requests; later calls return at once. A device that fails here is left to
        report its failure when a candidate gets it.
        """
        if self._warm_task is None:
            self._warm_task = asyncio.ensure_future(self._warm_all())
        await asyncio.shield(self._warm_task)

    async def _warm_all(self) -> None:
        try:
            handles = await self.all_devices()
        except Exception:
            return  # e.g. a Ray cluster that cannot be reached: ``acquire`` raises it for the candidate
        # a device the baseline profile holds gets its worker started (no timing), its bandwidth measured later,
        # by the first candidate that holds it (``facts`` inside the lease): nothing is timed beside a profile
        await asyncio.gather(*(self.facts(h, peak=h.key not in self.reserved) for h in handles),
                             return_exceptions=True)

    async def facts(self, handle: Device, *, peak: bool = True) -> tuple[Msg, float]:
        """(device info, measured peak copy bandwidth in GB/s) of a device, measured once per worker.
        ``peak=False`` asks for the info alone (the bandwidth, a timed copy, is measured at a later call)."""
        key = handle.key
        known = self._facts.get(key)
        if known is None or known[0].get("pid") != handle.worker_pid:
            info_r = await handle.request({"op": "info"}, 120.0)
            if info_r.get("status") == "unavailable":
                raise GpuUnavailable(str(info_r.get("reason")))
            if info_r.get("status") != "ok":
                raise GpuUnavailable(f"the GPU worker does not answer: {info_r.get('reason')}")
            known = self._facts[key] = (dict(info_r["info"]), known[1] if known is not None else 0.0)
            self.compare_note = self.compare_note or str(info_r.get("compare", ""))
        if peak and not known[1]:
            pr = await handle.request({"op": "peak"}, 120.0)
            known = self._facts[key] = (known[0], float(pr.get("peak_gbps") or 0.0))
        return known

    async def identity(self) -> tuple[str, str]:
        """(GPU name, driver) of the devices, for cache keys (one model per backend: see ``select_gpus``)."""
        async with self.acquire() as handle:
            info, _ = await self.facts(handle)
        return str(info.get("name", "?")), str(info.get("driver", "?"))


# --------------------------------------------------------------------------- local pool
class LocalBackend(EvaluationBackend):
    """The GPUs of this machine: one worker process per GPU and a pool of compiler processes.

    Builds run in a ``ProcessPoolExecutor`` (nvcc itself is a subprocess; the pool keeps parsing ptxas
    output and disassembling SASS off the event loop, on as many cores as there are). Its processes are
    started with "spawn", never "fork": the parent has threads (the GPU supervisors), and forking a
    threaded process is unsafe. As with any spawn pool, a script that creates a backend must guard its
    entry point with ``if __name__ == "__main__":`` (``python -m warpforge``, the ``warpforge`` script and
    pytest do).

    ``devices`` are CUDA indices, or ``"all"`` / a count / ``None`` (all visible GPUs of one model, see
    ``select_gpus``). Each device has its own worker and serves one candidate at a time, so with N GPUs up
    to N candidates are on GPUs at once while others compile (at lower priority: ``COMPILE_NICE``).
    """

    kind = "local"

    def __init__(self, devices: Sequence[int] | str | int | None = (0,), *, compile_workers: int | None = None,
                 worker_command: Sequence[str] | None = None, worker_env: dict[str, str] | None = None,
                 start_timeout: float = 120.0, compile_nice: int = COMPILE_NICE) -> None:
        super().__init__()
        if devices is None or isinstance(devices, str | int):
            chosen, note = select_gpus(devices if devices is not None else "all")
            if note:
                self.notes.append(note)
        else:
            chosen = list(dict.fromkeys(int(d) for d in devices))
        if not chosen:
            raise GpuSelectionError("no GPU to run on")
        self.devices = chosen
        self.pool = GpuPool(chosen, command=worker_command, start_timeout=start_timeout, env=worker_env)
        self.compile_workers = compile_workers or max(1, min(os.cpu_count() or 2, 16 * len(chosen)))
        self.compile_nice = compile_nice
        self._executor: ProcessPoolExecutor | None = None

    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.compile_workers,
                                                 mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=lower_priority, initargs=(self.compile_nice,))
        return self._executor

    async def cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the compile pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor(), fn, *args)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[DeviceHandle]:
        async with self.pool.acquire() as handle:
            self.served[handle.key] += 1
            yield handle

    async def all_devices(self) -> list[Device]:
        return list(self.pool.handles)

    def set_setup(self, messages: Sequence[Msg]) -> None:
        self.pool.set_setup(messages)

    @property
    def device_count(self) -> int:
        return len(self.pool.handles)

    def summary(self) -> dict[str, Any]:
        d = super().summary()
        d["cuda_devices"] = list(self.devices)
        return d

    async def identity(self) -> tuple[str, str]:
        """nvidia-smi's name and driver of the first device (no CUDA context needed), else the worker's."""
        ident = device_identity(self.pool.handles[0].device)
        if ident is not None:
            return ident
        return await super().identity()

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    def close(self) -> None:
        self.pool.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
