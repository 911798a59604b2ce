"""The Ray backend: one search spread over the GPUs of a Ray cluster (extra ``ray``: ``pip install
'warpforge[ray]'``; ``warpforge optimize --ray-address ADDR``, or the editor setting ``rayAddress``).

Ray does the cluster work, so WarpForge does not: it places one **GPU actor** per GPU (``num_gpus=1``; Ray
sets ``CUDA_VISIBLE_DEVICES`` for it), restarts actors that die (``max_restarts=-1``), runs compiles as
**CPU tasks** wherever cores are free and retries them when a worker or node dies (``max_retries``), and
moves the bytes (cubins, layouts, replies). Each actor owns one WarpForge GPU worker through the same
``WorkerSupervisor`` as the local pool, so a hung or crashed kernel is handled exactly as on one machine
(watchdog, restart, the candidate's verdict) and verification is identical.

What stays in the driver (the CLI or the language server): the evaluator, hence the search, the
evaluation store (results go into the same workspace SQLite file as local runs) and the checkout of free
actors: a candidate holds one actor for its whole GPU part (verify, time interleaved with the original,
re-check), so its speedup is a ratio measured on one GPU.

Losing an actor or its node in the middle of a candidate raises ``DeviceLost`` from the actor's handle;
the evaluator then drops that attempt and runs the candidate's GPU part again on another actor (see
``Evaluator._on_device``): the result is written once, by the driver, after the one attempt that finished,
so nothing is lost or counted twice. The lost actor is probed in the background while Ray restarts it,
and rejoins the pool when it answers; an actor that cannot come back (no GPU free anywhere) is dropped.

``close()`` asks every actor to stop its worker, kills the actors, and shuts Ray down when this process
started it (a driver connected to an existing cluster only disconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..install import install_hint
from .backends import (
    Device,
    DeviceLost,
    EvaluationBackend,
    GpuUnavailable,
    niced,
    normal_priority,
    visible_devices,
)
from .supervisor import Msg, WorkerSupervisor

if TYPE_CHECKING:
    from .evaluator import Evaluator
    from .inputs import Layout
    from .sanitizer import SanitizerReport

T = TypeVar("T")
#: seconds a reply may come after the worker's own deadline before the actor counts as unresponsive
GRACE = 60.0

log = logging.getLogger(__name__)

# One Ray connection per process, shared by every backend in it (the language server may run several
# jobs); Ray is shut down when the last backend that needed the connection this process made is closed.
_RAY_LOCK = threading.Lock()
_RAY_USERS = 0
_RAY_OURS = False


def ray_module() -> Any:
    """``import ray``, or ``GpuUnavailable`` saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise GpuUnavailable(f"the Ray backend needs Ray: {install_hint('ray')}") from e
    return ray


def ray_available() -> bool:
    try:
        ray_module()
    except GpuUnavailable:
        return False
    return True


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _loopback_only(ray: Any) -> None:
    """Make a cluster started here bind 127.0.0.1 only: it serves this machine, so no port of it should be
    reachable from the network (Ray binds every interface by default, and ``_node_ip_address`` alone does
    not change that). Ray's single-machine mode does: its switch is read from the environment by the
    processes Ray starts, and by the driver once at import, hence both the variable and the constant."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    with contextlib.suppress(ImportError, AttributeError):
        import ray._private.ray_constants as constants

        constants.ENABLE_RAY_CLUSTER = False
    del ray


def _connect(address: str | None, init_kwargs: dict[str, Any]) -> None:
    """Join (or, for ``None``/"local", start on loopback) the cluster; counted per backend."""
    global _RAY_USERS, _RAY_OURS
    ray = ray_module()
    with _RAY_LOCK:
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
            if address in (None, "", "local"):
                _loopback_only(ray)
                kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
            else:
                kwargs["address"] = address
            kwargs.update(init_kwargs)
            # log_to_driver=False: worker output must not reach this process's stdout, which is the
            # language server's protocol channel. Ray is started off the event loop's thread on purpose,
            # so its warning that it cannot install a SIGTERM handler there is expected noise.
            quiet = _DropMessage("SIGTERM handler is not set")
            ray_log = logging.getLogger("ray._private.worker")
            ray_log.addFilter(quiet)
            try:
                ray.init(**kwargs)
            finally:
                ray_log.removeFilter(quiet)
            _RAY_OURS = True
        _RAY_USERS += 1


def _disconnect() -> None:
    global _RAY_USERS, _RAY_OURS
    ray = ray_module()
    with _RAY_LOCK:
        _RAY_USERS = max(0, _RAY_USERS - 1)
        if _RAY_USERS == 0 and _RAY_OURS and ray.is_initialized():
            ray.shutdown()
            _RAY_OURS = False


# --------------------------------------------------------------------------- the actor
class GpuActor:
    """Runs in a Ray worker process that Ray gave one GPU; owns one WarpForge GPU worker.

    Plain class: ``RayBackend`` makes it an actor (``ray.remote(num_gpus=1, ...)``) at run time, so this
    module imports without Ray. The worker inherits the actor's ``CUDA_VISIBLE_DEVICES``, hence device 0.
    """

    def __init__(self, command: Sequence[str] | None, env: dict[str, str] | None, start_timeout: float) -> None:
        normal_priority()  # this process may have run compile tasks at idle priority before
        full = dict(os.environ)
        full.update({k: v for k, v in (env or {}).items() if k != "CUDA_VISIBLE_DEVICES"})
        self.supervisor = WorkerSupervisor(0, command=command, start_timeout=start_timeout, env=full)

    def describe(self) -> dict[str, Any]:
        """Where this actor is and which GPU it has (nvidia-smi, no CUDA context)."""
        ray = ray_module()
        vis = visible_devices()
        g = vis[0] if vis else None
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "name": g.name if g else "", "driver": g.driver if g else ""}

    def ping(self) -> int:
        return os.getpid()

    def request(self, msg: Msg, timeout: float, setup: list[Msg] | None) -> tuple[Msg, int | None, int]:
        """One worker request (never raises for what a kernel does), the worker's pid and this actor's."""
        if setup is not None and setup != self.supervisor.setup:
            self.supervisor.setup = list(setup)  # applies when the worker (re)starts, as in the local pool
        reply = self.supervisor.request(msg, timeout)
        pid = (self.supervisor.info or {}).get("pid") if self.supervisor.alive else None
        return reply, int(pid) if pid is not None else None, os.getpid()

    def sanitize(self, cubin: bytes, symbol: str, layout: Layout, launch: tuple[Sequence[int], Sequence[int], int],
                 seed: int, timeout: float) -> SanitizerReport:
        from .sanitizer import run_sanitizer

        return run_sanitizer(cubin, symbol, layout, launch, seed=seed, device=0, timeout=timeout)

    def close(self) -> None:
        self.supervisor.close()


# --------------------------------------------------------------------------- the driver side
class RayDevice:
    """The driver's handle on one GPU actor (the evaluator's ``Device``)."""

    def __init__(self, backend: RayBackend, actor: Any, index: int, described: dict[str, Any]) -> None:
        self.backend = backend
        self.actor = actor
        self.index = index
        self.described = described
        self.lost = False
        self.dropped = False
        self._pid: int | None = None
        #: the actor process serving the current checkout (see ``request``)
        self._actor_pid: int | None = None

    @property
    def device(self) -> int:
        return 0

    @property
    def key(self) -> str:
        return f"ray:{self.index}"

    @property
    def worker_pid(self) -> int | None:
        return self._pid

    @property
    def label(self) -> str:
        host = self.described.get("host") or "?"
        return f"Ray GPU actor {self.index} on {host}"

    async def request(self, msg: Msg, timeout: float = 300.0) -> Msg:
        ref = self.actor.request.remote(msg, timeout, self.backend.setup_ref)
        reply, pid, actor_pid = await self.backend.wait(ref, timeout + GRACE, self)
        if self._actor_pid is not None and actor_pid != self._actor_pid:
            # Ray restarted the actor between two requests of one candidate (a call made while it restarts
            # waits for the new one, possibly on another GPU): the candidate's GPU part starts over.
            self.backend.lose(self)
            raise DeviceLost(f"{self.label} was restarted in the middle of a candidate")
        self._actor_pid = actor_pid
        self._pid = pid
        out: Msg = reply
        return out

    async def sanitize(self, cubin: bytes, symbol: str, layout: Layout,
                       launch: tuple[Sequence[int], Sequence[int], int], *, seed: int,
                       timeout: float) -> SanitizerReport:
        ref = self.actor.sanitize.remote(cubin, symbol, layout, launch, seed, timeout)
        report: SanitizerReport = await self.backend.wait(ref, 2 * timeout + GRACE, self)  # memcheck + racecheck
        return report


class RayBackend(EvaluationBackend):
    """GPU actors and CPU tasks on a Ray cluster (see the module docstring).

    ``address``: ``None``/"local" starts a private cluster on this machine (loopback only); "auto", a
    ``HOST:PORT`` or a ``ray://HOST:10001`` joins an existing one. ``gpus``: how many GPU actors (default:
    every GPU the cluster has when the backend starts). ``worker_env`` is added to each actor's environment
    for its worker (never its ``CUDA_VISIBLE_DEVICES``, which is Ray's to set). Nothing starts until the
    first use, so making a backend is cheap and never blocks an event loop.
    """

    kind = "ray"

    def __init__(self, address: str | None = None, *, gpus: int | None = None,
                 worker_command: Sequence[str] | None = None, worker_env: dict[str, str] | None = None,
                 start_timeout: float = 120.0, compile_cpus: float = 1.0, recover_timeout: float = 120.0,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        ray_module()  # fail now, with the install hint, rather than at the first candidate
        self.address = address
        self.gpus = gpus
        self.worker_command = tuple(worker_command) if worker_command else None
        self.worker_env = dict(worker_env) if worker_env else None
        self.start_timeout = start_timeout
        self.compile_cpus = compile_cpus
        self.recover_timeout = recover_timeout
        self.init_kwargs = dict(init_kwargs or {})
        self.devices: list[RayDevice] = []
        self.setup_ref: Any = None
        self._setup: list[Msg] = []
        self._task: Any = None
        self._started = False
        self._connected = False
        self._start_lock: asyncio.Lock | None = None
        self._free: list[RayDevice] = []
        self._cond: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recovering: set[asyncio.Task[None]] = set()
        self.tasks_submitted = 0

    # ----------------------------------------------------------------- start
    async def start(self) -> None:
        """Connect to (or start) the cluster and place the GPU actors; idempotent."""
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._start_blocking)
            self._started = True

    def _start_blocking(self) -> None:
        ray = ray_module()
        _connect(self.address, self.init_kwargs)
        self._connected = True
        if self._setup and self.setup_ref is None:
            self.setup_ref = ray.put(self._setup)
        total = float(ray.cluster_resources().get("GPU", 0.0))
        n = self.gpus if self.gpus is not None else int(total)
        if n <= 0:
            self.notes.append("the Ray cluster has no GPUs: candidates can be compiled there but not run")
            return
        if n > int(total):
            self.notes.append(f"asked for {n} GPU actors, the cluster has {int(total)} GPUs now: waiting "
                              f"{self.start_timeout:.0f} s for the rest")
        actor_cls = ray.remote(num_gpus=1, num_cpus=0, max_restarts=-1, max_task_retries=0)(GpuActor)
        actors = [actor_cls.remote(self.worker_command, self.worker_env, self.start_timeout) for _ in range(n)]
        refs = [a.describe.remote() for a in actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.start_timeout)
        placed: list[tuple[Any, dict[str, Any]]] = []
        for a, r in zip(actors, refs, strict=True):
            if r in ready:
                try:
                    placed.append((a, dict(ray.get(r))))
                    continue
                except ray.exceptions.RayError as e:
                    self.notes.append(f"a GPU actor failed to start: {type(e).__name__}")
            ray.kill(a, no_restart=True)
        if len(placed) < n:
            self.notes.append(f"{n - len(placed)} of {n} GPU actors could not be placed within "
                              f"{self.start_timeout:.0f} s (GPUs busy or missing); using {len(placed)}")
        # One GPU model per search (see backends.select_gpus): keep the most common one.
        names = Counter(d.get("name", "") for _, d in placed)
        if len(names) > 1:
            keep = names.most_common(1)[0][0]
            for a, d in placed:
                if d.get("name", "") != keep:
                    ray.kill(a, no_restart=True)
                    self.notes.append(f"left out a {d.get('name')} on {d.get('host')}: one search measures on "
                                      f"one GPU model ({keep})")
            placed = [(a, d) for a, d in placed if d.get("name", "") == keep]
        self.devices = [RayDevice(self, a, i, d) for i, (a, d) in enumerate(placed)]
        self._free = list(self.devices)

    # ----------------------------------------------------------------- CPU tasks
    async def cpu(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` as a Ray task on any node's CPU (retried by Ray if its worker or node dies)."""
        await self.start()
        ray = ray_module()
        if self._task is None:
            # at compile priority, below the GPU actors' workers on the same node (see COMPILE_NICE)
            self._task = ray.remote(num_cpus=self.compile_cpus, max_retries=3)(niced)
        self.tasks_submitted += 1
        result: T = await asyncio.wrap_future(self._task.remote(fn, *args).future())
        return result

    # ----------------------------------------------------------------- devices
    async def all_devices(self) -> list[Device]:
        await self.start()
        return [d for d in self.devices if not d.dropped]

    def set_setup(self, messages: Sequence[Msg]) -> None:
        self._setup = list(messages)
        # Put once; every request names it, so a restarted actor's new worker gets it too.
        self.setup_ref = ray_module().put(self._setup) if self._connected else None

    @property
    def device_count(self) -> int:
        return sum(1 for d in self.devices if not d.dropped)

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._cond is None or self._loop is not loop:
            self._cond = asyncio.Condition()
            self._loop = loop
        return self._cond

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[RayDevice]:
        await self.start()
        cond = self._condition()
        async with cond:
            while not self._free:
                if self.device_count == 0:
                    why = "; ".join(self.notes[-2:]) or "no GPU actors"
                    raise GpuUnavailable(f"no GPU left in the Ray cluster ({why})")
                await cond.wait()
            dev = self._free.pop(0)
        dev._actor_pid = None  # a new checkout: whichever process serves its first request
        self.served[dev.key] += 1
        try:
            yield dev
        finally:
            if dev.lost:
                task = asyncio.ensure_future(self._recover(dev))
                self._recovering.add(task)
                task.add_done_callback(self._recovering.discard)
            else:
                await self._release(dev)

    async def _release(self, dev: RayDevice) -> None:
        cond = self._condition()
        async with cond:
            if not dev.dropped:
                self._free.append(dev)
            cond.notify_all()

    async def wait(self, ref: Any, timeout: float, dev: RayDevice) -> Any:
        """The value of an actor call; ``DeviceLost`` if the actor or its node is gone or silent."""
        ray = ray_module()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
        except TimeoutError:
            self.lose(dev)
            with contextlib.suppress(Exception):
                ray.kill(dev.actor, no_restart=False)  # Ray starts a fresh one
            raise DeviceLost(f"{dev.label} did not answer within {timeout:.0f} s") from None
        except ray.exceptions.RayTaskError:
            raise  # our own code failed in the actor: a bug, not a lost device
        except ray.exceptions.RayError as e:
            self.lose(dev)
            raise DeviceLost(f"{dev.label} was lost ({type(e).__name__})") from e

    def lose(self, dev: RayDevice) -> None:
        """Mark a device lost (its candidate is retried elsewhere; it is probed before it serves again)."""
        if not dev.lost:
            dev.lost = True
            self.device_losses += 1
            log.warning("%s lost; its candidate is retried on another GPU", dev.label)

    async def _recover(self, dev: RayDevice) -> None:
        """Wait for Ray to restart a lost actor; put it back in the pool, or drop it for good."""
        ray = ray_module()
        deadline = time.monotonic() + self.recover_timeout
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(asyncio.wrap_future(dev.actor.ping.remote().future()),
                                       max(1.0, min(30.0, deadline - time.monotonic())))
            except ray.exceptions.ActorDiedError:
                break  # dead for good (e.g. killed without restart)
            except (TimeoutError, ray.exceptions.RayError):
                await asyncio.sleep(0.5)
                continue
            dev.lost = False
            dev._pid = None  # a new process: facts are measured again for its new worker
            with contextlib.suppress(Exception):
                dev.described = dict(await asyncio.wrap_future(dev.actor.describe.remote().future()))
            await self._release(dev)
            return
        dev.dropped = True
        with contextlib.suppress(Exception):
            ray.kill(dev.actor, no_restart=True)
        self.notes.append(f"{dev.label} did not come back within {self.recover_timeout:.0f} s; dropped")
        await self._release(dev)  # wakes waiters, who fail if no device is left

    async def identity(self) -> tuple[str, str]:
        """nvidia-smi's name and driver as the first actor saw them, else its worker's."""
        await self.start()
        first = next((d for d in self.devices if not d.dropped), None)
        if first is not None and first.described.get("name"):
            return str(first.described["name"]), str(first.described.get("driver", ""))
        return await super().identity()

    @property
    def restarts(self) -> int:
        return self.device_losses

    def summary(self) -> dict[str, Any]:
        d = super().summary()
        d.update(address=self.address or "local", nodes=len({x.described.get("node") for x in self.devices}),
                 gpus=[str(x.described.get("name", "")) for x in self.devices if not x.dropped])
        return d

    # ----------------------------------------------------------------- shutdown
    async def aclose(self) -> None:
        for t in list(self._recovering):
            t.cancel()
        await super().aclose()

    def close(self) -> None:
        if not self._connected:
            return
        ray = ray_module()
        actors = [d.actor for d in self.devices]
        if actors and ray.is_initialized():
            refs = [a.close.remote() for a in actors]
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=30)  # workers stop their CUDA contexts cleanly
            for a in actors:
                with contextlib.suppress(Exception):
                    ray.kill(a, no_restart=True)
        self._free = []  # ``devices`` stay listed: what the job ran on, for its summary
        self._connected = False
        self._started = False
        _disconnect()


def evaluator_for_job(req: Any, *, workspace: str | Path | None = None, address: str | None = None,
                      gpus: int | None = None, store: str | Path | None = None) -> Evaluator:
    """The Ray evaluator of an optimize job: the local evaluator's store and settings, Ray's GPUs."""
    from .evaluator import evaluator_for_job as local_evaluator_for_job

    return local_evaluator_for_job(req, workspace=workspace, backend=RayBackend(address, gpus=gpus), store=store)

