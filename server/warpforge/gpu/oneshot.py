"""The job file of a one-shot run: one launch of one kernel, pickled for a process that a tool wraps whole.

compute-sanitizer wraps ``python -m warpforge.gpu.worker --oneshot JOB`` and Nsight Compute wraps the profile
harness (``profile/ncu.py``); both read the same keys from the same kind of file, so it is written here once.
The kernel's name and data travel in the file, never on a command line.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

from .inputs import Layout


def write_job(path: Path, cubin: bytes, symbol: str, layout: Layout,
              launch: tuple[Sequence[int], Sequence[int], int], *, seed: int, device: int,
              **extra: object) -> None:
    """Write the job for one launch (grid, block, dynamic shared bytes) of ``symbol`` from ``cubin`` on the
    spec's inputs for ``seed``; ``extra`` holds what the reading side adds (``repeat``, ``warmup``, ...)."""
    grid, block, smem = launch
    with open(path, "wb") as f:
        pickle.dump({"cubin": cubin, "symbol": symbol, "layout": layout, "seed": seed, "device": device,
                     "launch": (list(grid), list(block), int(smem)), **extra}, f)
