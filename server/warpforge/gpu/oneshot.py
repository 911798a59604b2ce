"""The job file of a one-shot run: one launch of one kernel, pickled for a process that a tool wraps whole.

compute-sanitizer wraps ``python -m warpforge.gpu.worker --oneshot JOB`` and Nsight Compute wraps the profile
harness (``profile/ncu.py``); both read the same keys from the same kind of file, so it is written here once.
The kernel's name and data travel in the file, never on a command line.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..compiler.build import compile_cubin
from ..compiler.toolchain import ToolMissing, default_arch

if TYPE_CHECKING:  # numpy is loaded by whoever lays the inputs out, not by importing the profiler
    from .inputs import Layout


@functools.lru_cache(maxsize=4)
def generator_cubin(arch: str | None = None) -> bytes | None:
    """The device module with the input generator, for a one-shot process to draw its inputs on the GPU
    (``device_inputs``); None when it cannot be built (the process then draws them on the host). Built once
    per process and cached on disk by the compiler like every cubin."""
    from .compare import DEVICE_SOURCE  # numpy, for the one process that launches

    try:
        res = compile_cubin(DEVICE_SOURCE, arch=default_arch(arch), filename="warpforge_compare.cu")
    except ToolMissing:
        return None
    return res.cubin if res.ok and res.cubin else None


def write_job(path: Path, cubin: bytes, symbol: str, layout: Layout,
              launch: tuple[Sequence[int], Sequence[int], int], *, seed: int, device: int,
              **extra: object) -> None:
    """Write the job for one launch (grid, block, dynamic shared bytes) of ``symbol`` from ``cubin`` on the
    spec's inputs for ``seed``; ``extra`` holds what the reading side adds (``repeat``, ``warmup``, ...)."""
    grid, block, smem = launch
    with open(path, "wb") as f:
        pickle.dump({"cubin": cubin, "symbol": symbol, "layout": layout, "seed": seed, "device": device,
                     "launch": (list(grid), list(block), int(smem)), "generator": generator_cubin(), **extra}, f)
