"""Energy per launch from NVML's energy counter (nvidia-ml-py, module ``pynvml``).

How: launch the kernel back to back for at least a second and divide the energy the board consumed by the
number of launches. ``nvmlDeviceGetTotalEnergyConsumption`` is a cumulative counter in millijoules.

**The sensor's sampling caveat.** The counter is not updated continuously: it advances in steps, each
covering the power sensor's averaging window (tens of milliseconds on recent boards; it differs between
GPU generations and driver versions). Reading it at arbitrary moments over a short run can therefore be
off by up to a whole step, and a launch shorter than a window is never "seen" individually. This module
(1) runs for at least ``min_seconds`` (one second by default, i.e. dozens of windows) and (2) aligns both
ends of the measurement to counter updates: it keeps launching until the counter ticks before it starts
counting launches, and again after the time is up, so that the energy and the launch count cover the same
interval. What remains is board energy, not kernel energy: idle and static power during the run are
included, which is what a user pays for but makes small kernels look relatively expensive, and the
measurement says nothing about a single launch's variation. Compare energies of variants measured the
same way on the same GPU, not absolute numbers across machines.

Nothing here imports pynvml at import time; only the GPU worker calls ``NvmlDevice``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

CAVEAT = ("NVML's energy counter advances in steps of the power sensor's averaging window; measured over "
          ">= 1 s with both ends aligned to counter updates; board energy including idle power")


class NvmlUnavailable(RuntimeError):
    """NVML (nvidia-ml-py) is missing or cannot read this GPU's energy counter."""


@dataclass(frozen=True)
class EnergyReading:
    joules: float
    seconds: float
    launches: int

    @property
    def joules_per_launch(self) -> float:
        return self.joules / self.launches if self.launches else 0.0

    @property
    def mean_power_w(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(joules_per_launch=self.joules_per_launch, mean_power_w=self.mean_power_w)
        return d


class NvmlDevice:
    """One GPU as NVML sees it, found by PCI bus id (CUDA and NVML may number devices differently)."""

    def __init__(self, pci_bus_id: str | None = None, index: int = 0) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from e
        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except Exception as e:
            raise NvmlUnavailable(f"NVML could not start: {e}") from e
        handle = None
        if pci_bus_id:
            for bus in (pci_bus_id, _long_bus_id(pci_bus_id)):
                try:
                    handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
                    break
                except Exception:
                    handle = None
        if handle is None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as e:
                raise NvmlUnavailable(f"NVML does not know GPU {index}: {e}") from e
        self._handle = handle

    def energy_mj(self) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception as e:
            raise NvmlUnavailable(f"this GPU has no readable energy counter: {e}") from e

    def sm_clock_mhz(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def driver_version(self) -> str | None:
        try:
            v = self._nvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def _long_bus_id(bus: str) -> str:
    """NVML spells the PCI domain with 8 hex digits (``00000000:3B:00.0``); CUDA often with 4."""
    parts = bus.split(":")
    if len(parts) == 3 and len(parts[0]) < 8:
        parts[0] = parts[0].rjust(8, "0")
    return ":".join(parts).upper()


def measure(
    read_mj: Callable[[], int],
    run_batch: Callable[[], int],
    *,
    min_seconds: float = 1.0,
    max_seconds: float = 20.0,
    clock: Callable[[], float] = time.perf_counter,
) -> EnergyReading:
    """Energy of repeated launches, both ends aligned to counter updates.

    ``run_batch`` launches some kernels, waits for them and returns how many it launched (a batch should
    take a few milliseconds: it is the resolution of the alignment).
    """
    deadline = clock() + max_seconds
    start_mj = read_mj()
    while True:  # align the start to a tick of the counter
        run_batch()
        now_mj = read_mj()
        if now_mj != start_mj or clock() > deadline:
            break
    e0, t0 = now_mj, clock()
    launches = 0
    while clock() - t0 < min_seconds:
        launches += run_batch()
    last = read_mj()
    while True:  # and the end to the next tick
        launches += run_batch()
        e1 = read_mj()
        if e1 != last or clock() > deadline:
            break
    t1 = clock()
    return EnergyReading(joules=(e1 - e0) / 1000.0, seconds=t1 - t0, launches=launches)
