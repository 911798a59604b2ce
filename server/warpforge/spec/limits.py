"""What a GPU can launch, and checking a resolved spec against it at the spec's own lines.

A spec value CUDA cannot launch (a grid of 1.8e16 blocks, 1 TiB of shared memory, an ``int`` argument
of 2^40) used to reach a GPU worker, fail there as a launch error for the original kernel and for every
candidate, and end as "no verified faster variant". Checked here, it is one error at the annotation line
before anything is built. The limits are the GPU's where one is known (its architecture from the driver,
or ``--arch``), else those of sm_90, the default target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import DTYPES, KernelSpec, ResolvedSpec, SpecError

INT64_MAX = 2**63 - 1

#: the most shared memory one block may opt into, per architecture (CUDA C Programming Guide, "Technical
#: Specifications per Compute Capability"); architectures between entries take the one below them
SMEM_PER_BLOCK_KB: dict[int, int] = {
    50: 48, 70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 110: 227,
    120: 99, 121: 99,
}

#: largest finite value of each floating dtype (an argument beyond it would arrive as infinity)
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
              "float64": 1.7976931348623157e308}


@dataclass(frozen=True)
class LaunchLimits:
    arch: str = "sm_90"
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_threads: int = 1024
    smem_per_block: int = 227 * 1024
    #: the GPU's memory, when a GPU is known
    memory_bytes: int | None = None
    #: where the limits come from, for messages: "NVIDIA H100 (sm_90)" or "sm_90 (no GPU known)"
    source: str = "sm_90 (no GPU known)"


def limits_for_arch(arch: str, *, gpu: str | None = None, memory_bytes: int | None = None) -> LaunchLimits:
    """The launch limits of ``arch`` (``sm_90``, ``sm_90a``), naming ``gpu`` in messages when one is known."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    cc = int(m.group(1)) if m else 90
    kb = next((v for k, v in sorted(SMEM_PER_BLOCK_KB.items(), reverse=True) if k <= cc), 48)
    source = f"{gpu} ({arch})" if gpu else f"{arch} (no GPU known)"
    return LaunchLimits(arch=arch, smem_per_block=kb * 1024, memory_bytes=memory_bytes, source=source)


DEFAULT_LIMITS = limits_for_arch("sm_90")


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def check_limits(spec: KernelSpec, r: ResolvedSpec, limits: LaunchLimits = DEFAULT_LIMITS) -> None:
    """Raise ``SpecError`` at the line of the first value of ``r`` that ``limits`` cannot run."""
    at = " at the perturbed size" if r.perturbed else ""
    for s in spec.sizes:
        v = r.sizes.get(s.name)
        if isinstance(v, int) and abs(v) > INT64_MAX:
            raise SpecError(spec.file, s.line, f"size `{s.name}` = {v}{at} does not fit in 64 bits",
                            "use a size a GPU can hold, e.g. `1 << 24`")
    line = spec.launch.line
    for what, dims, top in (("grid", r.grid, limits.max_grid), ("block", r.block, limits.max_block)):
        for axis, v, most in zip("xyz", dims, top, strict=True):
            if v > most:
                raise SpecError(spec.file, line, f"{what}.{axis} = {v}{at} is above CUDA's limit of {most}",
                                "launch fewer, larger blocks or loop inside the kernel (grid-stride)"
                                if what == "grid" else f"use at most {most} threads along {axis}")
    if r.threads > limits.max_threads:
        raise SpecError(spec.file, line, f"block {r.block} has {r.threads} threads{at}",
                        f"CUDA allows at most {limits.max_threads} threads per block")
    if r.smem < 0:
        raise SpecError(spec.file, line, f"dynamic shared memory is negative ({r.smem}){at}",
                        "give `smem=` a byte count of 0 or more")
    if r.smem > limits.smem_per_block:
        raise SpecError(spec.file, line, f"dynamic shared memory of {r.smem} bytes{at} is above the "
                        f"{limits.smem_per_block} bytes ({_bytes(limits.smem_per_block)}) a block can have on "
                        f"{limits.source}", "use less shared memory per block")
    total = 0
    for ra, a in zip(r.args, spec.args, strict=True):
        size, kind = DTYPES[ra.dtype]
        if ra.count is not None:
            nbytes = ra.count * size
            if nbytes > INT64_MAX:
                raise SpecError(spec.file, a.line, f"`{a.name}` needs {ra.count} × {size} bytes{at}, more than "
                                "a 64-bit size can hold", "check the sizes it is computed from")
            total += nbytes
        elif ra.value is not None:
            _check_scalar(spec, a.name, a.line, ra.dtype, kind, size, ra.value, at)
    if limits.memory_bytes is not None and total > limits.memory_bytes:
        raise SpecError(spec.file, spec.args[0].line if spec.args else line,
                        f"the buffers need {_bytes(total)}{at}, more than the {_bytes(limits.memory_bytes)} of "
                        f"{limits.source}", "make the sizes smaller")


def _check_scalar(spec: KernelSpec, name: str, line: int | None, dtype: str, kind: str, size: int,
                  value: float, at: str) -> None:
    """An argument value must survive the conversion to its C type unchanged (no wrap-around, no inf)."""
    if kind in ("i", "u") and isinstance(value, int):
        lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if kind == "i" else (0, (1 << (8 * size)) - 1)
        if not lo <= value <= hi:
            raise SpecError(spec.file, line, f"`{name}` = {value}{at} does not fit its C type ({dtype}: {lo} to "
                            f"{hi})", "give a smaller value, or declare the parameter with a wider type "
                            "(e.g. long long)")
    elif kind == "f" and abs(value) > _FLOAT_MAX[dtype]:
        raise SpecError(spec.file, line, f"`{name}` = {value:g}{at} is beyond the largest {dtype} "
                        f"({_FLOAT_MAX[dtype]:g})", "give a value the type can hold")
