"""What GPU work this process can run, and which CUDA tools it measures with, known before a job starts.

Why: without a GPU, an Optimize started anyway, failed on the original's evaluation and ended after seconds
as an *information* message saying "no verified faster variant (... GpuUnavailable ...)", with a search view
of one flat point; the user learnt that nothing could ever have run only by reading the whole message. The
editor asks at start and again when settings change, and says it *before* anything starts, with what to
do; its status bar shows it all the time. The server refuses an optimize job it cannot evaluate with the
same words, for any client.

Nothing here imports pycuda or touches the driver (the server never does): the GPUs come from nvidia-smi
(honouring ``CUDA_VISIBLE_DEVICES``, as CUDA will), pycuda from its import spec, the tools from the same
search the jobs use. A Ray cluster's GPUs are only known once a job connects (``backend.ready`` checks them
before the baseline), and a plug-in evaluator (``python:MODULE:FUNCTION``) brings its own: both count as
able to optimize, and the text says where the GPUs are meant to be.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass

from ..compiler.nsight import ncu_path
from ..compiler.toolchain import ToolMissing, toolchain
from ..gpu.backends import visible_devices
from ..gpu.sanitizer import sanitizer_path
from ..gpu.supervisor import driver_missing, install_hint

#: what a user without a local GPU can do instead, in the order they are offered
ALTERNATIVES = ("open the folder on a machine with an NVIDIA GPU through VS Code Remote-SSH (the extension and "
                "its server run where the workspace is)", "set `warpforge.rayAddress` (CLI: `--ray-address`) to "
                "a Ray cluster with GPUs")


@dataclass(frozen=True)
class Capabilities:
    """``can_optimize``: an optimize job can evaluate variants (locally: a visible GPU and pycuda; or a Ray
    cluster / plug-in evaluator). ``can_profile``: a local GPU and pycuda (profiles never run remotely).
    ``reason``: why GPU work cannot run on this machine, in words ("" when it can); with a Ray cluster or a
    plug-in evaluator ``can_optimize`` holds anyway."""

    backend: str
    gpus: tuple[str, ...]
    driver: str
    pycuda: bool
    nvcc: str
    ncu: str
    sanitizer: str
    can_optimize: bool
    can_profile: bool
    reason: str

    def summary(self) -> str:
        """One line: where variants are measured, or why they cannot be."""
        if self.backend == "ray":
            return "GPUs of a Ray cluster (checked when a job connects)"
        if self.backend.startswith("python:"):
            return f"plug-in evaluator {self.backend[len('python:'):]}"
        if self.gpus:
            names = sorted(set(self.gpus))
            many = f"{len(self.gpus)} × " if len(self.gpus) > 1 and len(names) == 1 else ""
            return f"{many}{', '.join(names)}" + ("" if self.pycuda else " (pycuda missing)")
        return f"no GPU: {self.reason}"

    def advice(self) -> str:
        """What to do when ``can_optimize`` is False (empty otherwise)."""
        if self.can_optimize:
            return ""
        if self.gpus and not self.pycuda:
            return f"install pycuda on this machine: {install_hint()}"
        return "; or ".join(ALTERNATIVES)

    def tools(self) -> dict[str, str]:
        """Each CUDA tool and where it was found (``not found`` otherwise); keys are identifiers."""
        def where(path: str) -> str:
            return path or "not found"
        return {"nvcc": where(self.nvcc), "ncu": where(self.ncu), "compute_sanitizer": where(self.sanitizer),
                "pycuda": "installed" if self.pycuda else "not installed"}


def _nvcc(override: str | None) -> str:
    try:
        tc = toolchain(override or None)
    except ToolMissing:
        return ""
    return f"{tc.nvcc} ({tc.version})"


def _local_gpus() -> tuple[tuple[str, ...], str, str]:
    """(names, driver, why none) of the GPUs CUDA would see here."""
    if driver_missing():
        return (), "", "no NVIDIA GPU or driver was found on this machine"
    gpus = visible_devices()
    if not gpus:
        return (), "", "CUDA_VISIBLE_DEVICES hides every GPU of this machine"
    if all(not g.name for g in gpus) and shutil.which("nvidia-smi") is None:
        return ("NVIDIA GPU",), "", ""  # a device node but no nvidia-smi: the worker will tell more
    return tuple(g.name for g in gpus if g.name), next((g.driver for g in gpus if g.driver), ""), \
        "" if any(g.name for g in gpus) else "nvidia-smi lists no GPU"


def probe(backend: str = "local", nvcc_path: str | None = None) -> Capabilities:
    """What this process can do with ``backend`` (``local``, ``ray`` or ``python:MODULE:FUNCTION``)."""
    gpus, driver, why = _local_gpus()
    pycuda = importlib.util.find_spec("pycuda") is not None
    local_ok = bool(gpus) and pycuda
    if not why and not pycuda:
        why = f"pycuda is not installed ({install_hint()})"
    remote = backend == "ray" or backend.startswith("python:")
    return Capabilities(backend=backend, gpus=gpus, driver=driver, pycuda=pycuda, nvcc=_nvcc(nvcc_path),
                        ncu=ncu_path() or "", sanitizer=sanitizer_path() or "",
                        can_optimize=local_ok or remote, can_profile=local_ok, reason="" if local_ok else why)
