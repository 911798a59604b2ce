"""Parent side of the GPU workers: start them, talk to them, and replace them when they die or hang.

The server and the CLI never touch CUDA: each GPU is served by one persistent worker process
(``python -m warpforge.gpu.worker``) that talks over a socket pair with pickled dicts. The supervisor is
the watchdog: every request has a deadline, and a worker that misses it is killed (its hung kernel dies
with its context); a worker that exits (a crash, a sticky CUDA error it reported) is started again on the
next request. Whatever happens, ``request`` returns a reply with a ``status`` and a ``reason``; it never
raises for anything a kernel did.

``GpuPool`` hands devices to asyncio code one at a time, so GPU work is serialized per device while
everything else (compiles, other devices) proceeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..compiler.sandbox import popen_tool, run_tool

if TYPE_CHECKING:
    from .inputs import Layout
    from .sanitizer import SanitizerReport

Msg = dict[str, Any]

WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "warpforge.gpu.worker")


def install_hint() -> str:
    """How to get pycuda for *this* installation (``warpforge.install``): the extension's command in its
    bundle, ``pip install -e`` in a checkout, ``pip install 'warpforge[gpu]'`` for an installed package."""
    from ..install import install_hint as hint

    return hint("gpu")


class WorkerStartError(RuntimeError):
    """A worker could not be started (no GPU, no driver, no pycuda); the message says why."""


def driver_missing() -> bool:
    """No sign of an NVIDIA driver here (neither nvidia-smi nor a device node), without touching it."""
    return shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists()


def gpu_unavailable_reason() -> str | None:
    """Why GPU work cannot run here, without importing pycuda or touching the driver; None if it may."""
    if importlib.util.find_spec("pycuda") is None:
        return "pycuda is not installed"
    if importlib.util.find_spec("numpy") is None:  # the .vsix leaves it to Install GPU Support, with pycuda
        return "numpy is not installed"
    if driver_missing():
        return "no NVIDIA GPU or driver was found"
    return None


def no_gpu_message(command: str, why: str) -> str:
    return (f"`warpforge {command}` needs an NVIDIA GPU and pycuda ({why}): run `{install_hint()}` on a machine "
            "with a GPU")


def gpu_identity(device: int = 0) -> tuple[str, str] | None:
    """(GPU name, driver version) from nvidia-smi, without a CUDA context; None if it cannot tell."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = run_tool([smi, f"--id={device}", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                       tool="nvidia-smi", timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    parts = [p.strip() for p in line.split(",")]
    return (parts[0], parts[1]) if len(parts) >= 2 and parts[0] else None


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class WorkerSupervisor:
    """One worker process for one device, restarted on demand.

    ``command`` is the worker program (tests pass a fake one); it is called with ``--fd N --device D``
    and must answer ``{"status": "ready", "info": {...}}`` first. ``setup`` messages are sent to every
    new worker before its first request (e.g. the device comparison kernels).
    """

    def __init__(
        self,
        device: int = 0,
        *,
        command: Sequence[str] | None = None,
        start_timeout: float = 120.0,
        env: dict[str, str] | None = None,
        setup: Sequence[Msg] = (),
    ) -> None:
        self.device = device
        self.command = tuple(command) if command else WORKER_COMMAND
        self.start_timeout = start_timeout
        self.env = env
        self.setup: list[Msg] = list(setup)
        self.setup_replies: list[Msg] = []
        self.info: Msg | None = None
        self.starts = 0
        self.restarts = 0
        self.last_exit: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- lifecycle
    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._conn is not None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Msg:
        """Start the worker if it is not running; its device info. Raises ``WorkerStartError``."""
        with self._lock:
            if self.alive:
                assert self.info is not None
                return self.info
            self._reap()
            parent, child = socket.socketpair()
            self._log = tempfile.TemporaryFile(prefix="warpforge-worker-")  # noqa: SIM115 (kept open: the worker's stderr)
            cmd = [*self.command, "--fd", str(child.fileno()), "--device", str(self.device)]
            try:
                self._proc = popen_tool(cmd, tool="gpu-worker", pass_fds=(child.fileno(),), stderr=self._log,
                                        env=self.env)
            except OSError as e:
                parent.close()
                raise WorkerStartError(f"cannot start the GPU worker ({' '.join(cmd[:3])}): {e}") from e
            finally:
                child.close()
            self._conn = Connection(parent.detach())
            if self.starts:
                self.restarts += 1
            self.starts += 1
            hello = self._wait(self.start_timeout)
            if not isinstance(hello, dict) or hello.get("status") != "ready":
                why = hello.get("reason") if isinstance(hello, dict) else None
                detail = why or self._describe_death("while starting")
                self._kill()
                raise WorkerStartError(f"the GPU worker could not start: {detail}")
            self.info = dict(hello.get("info") or {})
            self.setup_replies = []
            for m in self.setup:
                r = self._roundtrip(m, self.start_timeout)
                self.setup_replies.append(r)
                if r.get("status") in ("timeout", "crashed"):
                    raise WorkerStartError(f"the GPU worker failed its setup: {r.get('reason')}")
            return self.info

    def close(self) -> None:
        """Ask the worker to exit, then make sure it has."""
        with self._lock:
            if self.alive and self._conn is not None:
                with contextlib.suppress(OSError, EOFError, ValueError):
                    self._conn.send({"op": "exit"})
                    if self._conn.poll(5.0):
                        self._conn.recv()
            self._kill()

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self.last_exit = _exit_text(self._proc.returncode)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        self._conn = None
        self._proc = None if self._proc is None or self._proc.poll() is not None else self._proc

    def _stderr_tail(self, limit: int = 600) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - limit))
            return self._log.read().decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def _describe_death(self, when: str) -> str:
        code = None
        if self._proc is not None:
            # The pipe closes a moment before the process is reaped: wait for its exit status.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            code = self._proc.poll()
        tail = self._stderr_tail()
        last = tail.splitlines()[-1] if tail else ""
        return f"the worker exited {when} ({_exit_text(code)})" + (f": {last}" if last else "")

    # ----------------------------------------------------------------- requests
    def _wait(self, timeout: float) -> Msg | str | None:
        """The next message; None on timeout; "dead" if the worker went away."""
        assert self._conn is not None and self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._conn.poll(0.05):
                    msg: Msg = self._conn.recv()
                    return msg
            except (EOFError, OSError):
                return "dead"
            if self._proc.poll() is not None:
                # Drain anything it managed to send before dying.
                try:
                    if self._conn.poll(0):
                        last: Msg = self._conn.recv()
                        return last
                except (EOFError, OSError):
                    pass
                return "dead"
            if time.monotonic() > deadline:
                return None

    def _roundtrip(self, msg: Msg, timeout: float) -> Msg:
        assert self._conn is not None
        op = msg.get("op", "?")
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as e:
            reason = self._describe_death(f"before `{op}`")
            self._kill()
            return {"status": "crashed", "reason": f"{reason} ({e})", "restart": True}
        reply = self._wait(timeout)
        if reply is None:
            self._kill()
            return {"status": "timeout", "restart": True,
                    "reason": f"the GPU worker did not answer `{op}` within {timeout:.0f} s (a hung kernel?); "
                              "it was killed and a new one will start"}
        if reply == "dead" or not isinstance(reply, dict):
            reason = self._describe_death(f"during `{op}`")
            self._kill()
            return {"status": "crashed", "reason": reason + "; a new worker will start", "restart": True}
        if reply.get("fatal"):
            # The worker exits by itself after a fatal reply; give it a moment, then make sure.
            assert self._proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=20)
            self._kill()
            reply = dict(reply)
            reply["restart"] = True
        return reply

    def request(self, msg: Msg, timeout: float = 300.0) -> Msg:
        """Send one request, wait at most ``timeout`` seconds; always a reply dict with ``status``.

        A worker start failure is reported as status "unavailable" (no GPU, no driver, no pycuda).
        """
        with self._lock:
            if not self.alive:
                try:
                    self.start()
                except WorkerStartError as e:
                    return {"status": "unavailable", "reason": str(e)}
            return self._roundtrip(msg, timeout)


class DeviceHandle:
    """One device for asyncio code: its supervisor and a thread to block in."""

    def __init__(self, supervisor: WorkerSupervisor) -> None:
        self.supervisor = supervisor
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"warpforge-gpu{supervisor.device}")

    @property
    def device(self) -> int:
        return self.supervisor.device

    @property
    def key(self) -> str:
        """Unique among a machine's devices (backends cache per-device facts under it)."""
        return f"local:{self.supervisor.device}"

    @property
    def worker_pid(self) -> int | None:
        """The running worker's pid as it reported it (changes when the worker is restarted)."""
        pid = (self.supervisor.info or {}).get("pid")
        return int(pid) if pid is not None else None

    async def request(self, msg: Msg, timeout: float = 300.0) -> Msg:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.supervisor.request, msg, timeout)

    async def sanitize(self, cubin: bytes, symbol: str, layout: Layout,
                       launch: tuple[Sequence[int], Sequence[int], int], *, seed: int,
                       timeout: float) -> SanitizerReport:
        """compute-sanitizer on one launch on this device (a separate process; the worker stays up)."""
        from .sanitizer import run_sanitizer

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: run_sanitizer(cubin, symbol, layout, launch, seed=seed, device=self.device, timeout=timeout))

    async def start(self) -> Msg:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.supervisor.start)

    def close(self) -> None:
        self.supervisor.close()
        self._executor.shutdown(wait=False)


class GpuPool:
    """Devices handed out one at a time per device (GPU work is serialized per device)."""

    def __init__(self, devices: Sequence[int] = (0,), *, command: Sequence[str] | None = None,
                 start_timeout: float = 120.0, env: dict[str, str] | None = None) -> None:
        self.handles = [DeviceHandle(WorkerSupervisor(d, command=command, start_timeout=start_timeout, env=env))
                        for d in devices]
        self._queue: asyncio.Queue[DeviceHandle] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set_setup(self, messages: Sequence[Msg]) -> None:
        """Messages every worker gets after it starts (applies to running workers at their next restart)."""
        for h in self.handles:
            h.supervisor.setup = list(messages)

    def _q(self) -> asyncio.Queue[DeviceHandle]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._queue = asyncio.Queue()
            self._loop = loop
            for h in self.handles:
                self._queue.put_nowait(h)
        return self._queue

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[DeviceHandle]:
        q = self._q()
        handle = await q.get()
        try:
            yield handle
        finally:
            q.put_nowait(handle)

    @property
    def restarts(self) -> int:
        return sum(h.supervisor.restarts for h in self.handles)

    def close(self) -> None:
        for h in self.handles:
            h.close()
