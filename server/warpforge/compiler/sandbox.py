"""Every external tool WarpForge starts runs through here: stdin closed, memory and file-size caps, a time limit.

Why one module: the tools read the user's files (nvcc follows ``#include``s, nvdisasm reads the cubin, ncu and
compute-sanitizer run the kernel), and a file can make a tool misbehave. ``#include "/dev/stdin"`` made the
preprocessor read the language server's own LSP pipe (its stdin) and the editor stopped answering; ``#include
"/dev/zero"`` drove the preprocessor past 4 GB. So no call site starts a tool on its own; each asks
``run_tool`` (run to completion) or ``popen_tool`` (a long-lived worker), which always

* closes stdin (``DEVNULL``): a tool, or any child it starts, reads end-of-file, never the caller's input;
* starts the tool in a session of its own, and on timeout (or when the caller is interrupted) kills the whole
  process group, so cicc, ptxas or a host compiler nvcc started die with it;
* caps, in the child before ``exec`` (inherited by everything it starts), its address space
  (``RLIMIT_AS``), the size of any file it writes (``RLIMIT_FSIZE``: the kernel stops it with ``SIGXFSZ``) and
  core dumps (none).

The caps are per tool (``LIMITS``), because the tools differ:

* ``nvcc`` (and cicc, ptxas, the host preprocessor): 8 GiB of address space. Measured on this project's
  machine (nvcc 13.0): a unit including ``<cub/cub.cuh>`` with four ``BlockReduce`` instantiations fails at
  512 MiB ("catastrophic error: out of memory") and builds at 768 MiB (533 MB resident), so 8 GiB is ten times
  a heavy template build and room for large CUTLASS-style units, while a runaway preprocessor stops there
  instead of taking the machine. ``WARPFORGE_COMPILE_MEMORY_MB`` raises or lowers it. Files: 2 GiB (a cubin is
  megabytes).
* ``nvdisasm``/``cuobjdump``: 4 GiB (nvdisasm needs 64-128 MiB for that cubin), files 1 GiB.
* ``ncu``, ``compute-sanitizer``, the GPU worker and other CUDA processes: **no** address-space cap. A CUDA
  context reserves virtual ranges far beyond physical memory (unified addressing maps the GPU's memory and
  more into the process), so ``RLIMIT_AS`` makes ``cuInit`` fail; their memory is bounded by the GPU and the
  kernel they run, and their time limit. Their file caps bound the reports and caches they write (an ncu
  report of one kernel is megabytes; the worker's input cache is bounded by ``WARPFORGE_INPUT_CACHE_MB``).
* ``nvidia-smi``: no address-space cap (it maps the driver), 64 MiB of files.

``preexec_fn`` runs Python in the forked child; it only calls ``setrlimit`` with values computed before the
fork (no imports, no locks), the use the ``subprocess`` documentation allows with threads present.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """What a tool may use: address space and largest file it may write, in bytes (None: not capped)."""

    memory: int | None
    file_size: int | None

    def describe(self) -> str:
        def size(n: int | None) -> str:
            return "no cap" if n is None else (f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB")
        return f"memory {size(self.memory)}, files {size(self.file_size)}"


#: the caps per tool (see the module docstring for why each is what it is)
LIMITS: dict[str, Limits] = {
    "nvcc": Limits(8 * GiB, 2 * GiB),
    "nvdisasm": Limits(4 * GiB, 1 * GiB),
    "cuobjdump": Limits(4 * GiB, 1 * GiB),
    "ncu": Limits(None, 8 * GiB),
    "compute-sanitizer": Limits(None, 1 * GiB),
    "gpu-worker": Limits(None, 16 * GiB),
    "cuda-python": Limits(None, 1 * GiB),
    "nvidia-smi": Limits(None, 64 * MiB),
}
#: a tool not named above: capped like the binary tools
DEFAULT_LIMITS = Limits(4 * GiB, 1 * GiB)


def limits_for(tool: str) -> Limits:
    """The caps of ``tool``; ``WARPFORGE_COMPILE_MEMORY_MB`` (a positive number) replaces nvcc's memory cap."""
    lim = LIMITS.get(tool, DEFAULT_LIMITS)
    if tool == "nvcc":
        raw = os.environ.get("WARPFORGE_COMPILE_MEMORY_MB", "").strip()
        if raw.isdigit() and int(raw) > 0:
            lim = Limits(int(raw) * MiB, lim.file_size)
    return lim


def _capped(kind: int, value: int | None) -> tuple[int, int] | None:
    """(soft, hard) for ``setrlimit``: ``value``, never above the caller's own hard limit (raising it fails)."""
    if value is None:
        return None
    _, hard = resource.getrlimit(kind)
    v = value if hard == resource.RLIM_INFINITY else min(value, hard)
    return (v, v)


def _preexec(limits: Limits) -> Callable[[], None]:
    """The child's setup before ``exec``: the caps, computed here so the child only calls ``setrlimit``."""
    todo = [(kind, got) for kind, got in ((resource.RLIMIT_AS, _capped(resource.RLIMIT_AS, limits.memory)),
                                          (resource.RLIMIT_FSIZE, _capped(resource.RLIMIT_FSIZE, limits.file_size)),
                                          (resource.RLIMIT_CORE, (0, 0)))
            if got is not None]

    def apply() -> None:
        for kind, value in todo:
            resource.setrlimit(kind, value)

    return apply


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the tool's process group (it leads its own session), the tool's children with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def run_tool(argv: Sequence[str], *, tool: str, timeout: float, cwd: str | os.PathLike[str] | None = None,
             env: Mapping[str, str] | None = None, merge_stderr: bool = False,
             limits: Limits | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion under ``tool``'s caps; its output decoded as UTF-8 (bad bytes replaced).

    On timeout the whole process group is killed and ``subprocess.TimeoutExpired`` is raised with whatever
    output came before (``output``/``stderr``), as ``subprocess.run`` does, so callers keep their handling.
    ``OSError`` when the tool cannot be started. ``merge_stderr`` sends stderr into stdout (nvcc's log).
    """
    lim = limits or limits_for(tool)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                                cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
                                preexec_fn=_preexec(lim), encoding="utf-8", errors="replace")
    except subprocess.SubprocessError as e:  # the caps could not be set: not run uncapped, reported as not started
        raise OSError(f"{tool} was not started: its limits could not be set ({e})") from e
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                # A grandchild that left the group still holds the pipes: give up on the rest of the output.
                proc.wait()
                out, err = "", ""
            raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
    finally:
        if proc.returncode is None:  # interrupted (an exception in this thread): leave nothing running
            _kill_group(proc)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out or "", err or "")


def popen_tool(argv: Sequence[str], *, tool: str, limits: Limits | None = None,
               stdout: int | IO[Any] | None = subprocess.DEVNULL, stderr: int | IO[Any] | None = None,
               env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start a long-lived tool (the GPU worker) with stdin closed, in its own session, under its caps.

    The caller owns the process (``stop_tool`` ends it with its group)."""
    lim = limits or limits_for(tool)
    try:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                env=dict(env) if env is not None else None, pass_fds=tuple(pass_fds),
                                start_new_session=True, preexec_fn=_preexec(lim))
    except subprocess.SubprocessError as e:
        raise OSError(f"{tool} was not started: its limits could not be set ({e})") from e


def stop_tool(proc: subprocess.Popen[Any]) -> None:
    """Kill a tool started by ``popen_tool`` and everything in its process group, and reap it."""
    _kill_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def exit_note(returncode: int | None, tool: str, limits: Limits | None = None) -> str | None:
    """Why a tool stopped, when one of the caps stopped it (None otherwise): for messages the user reads."""
    lim = limits or limits_for(tool)
    if returncode == -signal.SIGXFSZ:
        return f"{tool} was stopped: it wrote a file larger than its cap ({lim.describe()})"
    return None
