"""Finding Nsight Compute (``ncu``) and saying why it cannot run: shared by everything that starts it.

Two layers start ncu: ``gpu.confirm`` (a winner's speedup checked with ``gpu__time_duration``) and
``profile.ncu`` (the full profile). Both need the same lookup, the same failure type and the same
messages; they live here, beside the other tool lookups (``toolchain.find_tool``), so the device layer
need not import the profiler above it (docs/architecture.md).
"""

from __future__ import annotations

import subprocess

from .sandbox import run_tool
from .toolchain import ToolMissing, find_tool

#: what ncu prints when the driver does not let this user read the performance counters
PERMISSION_CODE = "ERR_NVGPUCTRPERM"


class ProfilerUnavailable(RuntimeError):
    """Nsight Compute cannot profile here; ``kind`` is missing | permission | failed | timeout."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def ncu_path(override: str | None = None) -> str | None:
    """The ``ncu`` executable, or None where Nsight Compute is not installed."""
    try:
        return str(find_tool("ncu", override))
    except ToolMissing:
        return None


def missing_message() -> str:
    return ("Nsight Compute (`ncu`) was not found: install it (it ships with the CUDA toolkit) and put `ncu` "
            "on PATH")


def permission_message() -> str:
    return ("Nsight Compute may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root, "
            "or allow it for all users (`options nvidia NVreg_RestrictProfilingToAdminUsers=0`, see "
            "https://developer.nvidia.com/ERR_NVGPUCTRPERM)")


def run_ncu(cmd: list[str], *, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run an ncu command line (already built and guarded) in the sandbox (``compiler.sandbox``); a timeout or
    an ncu that cannot start is ``ProfilerUnavailable``, so profiling and confirmation degrade the same way.

    On a timeout the sandbox kills ncu's whole process group, not only ``ncu``: the harness it launched (the
    process holding a CUDA context and launching the kernel) is gone before the caller gives the GPU back to
    timing (``app.optimize``'s profile beside the search holds the GPU until this returns)."""
    try:
        return run_tool(cmd, tool="ncu", timeout=max(0.1, timeout), env=env)
    except subprocess.TimeoutExpired as e:
        raise ProfilerUnavailable("timeout", f"Nsight Compute did not finish within {timeout:.0f} s") from e
    except OSError as e:
        raise ProfilerUnavailable("missing", f"{cmd[0]} could not be started: {e}") from e
