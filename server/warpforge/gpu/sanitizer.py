"""compute-sanitizer (memcheck, racecheck) on a candidate, in a separate process, before it is offered.

Differential testing sees outputs; it cannot see a read past the end of a buffer that happened to hit
harmless bytes, or a shared-memory race that happened to resolve the right way this time. NVIDIA's
sanitizer instruments the kernel and sees both. It is slow (tens of times slower than a plain run), so the
engine runs it on winners only, on the perturbed (odd) size where tail bugs live, in its own process
(``python -m warpforge.gpu.worker --oneshot``) with buffers allocated at their exact sizes so memcheck
knows the true bounds. Where compute-sanitizer is not installed the check is skipped with a notice, never
silently passed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..compiler.sandbox import run_tool
from ..compiler.toolchain import ToolMissing, UnsafeArgument, find_tool, guard_argv
from .oneshot import write_job

if TYPE_CHECKING:  # numpy: its caller already laid the inputs out
    from .inputs import Layout

ERROR_EXIT = 86
TOOLS = ("memcheck", "racecheck")
#: every compute-sanitizer tool a caller may ask for
KNOWN_TOOLS = (*TOOLS, "synccheck", "initcheck")


@dataclass(frozen=True)
class ToolReport:
    tool: str
    ran: bool
    ok: bool
    errors: int = 0
    first_error: str = ""
    summary: str = ""
    seconds: float = 0.0
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SanitizerReport:
    tools: list[ToolReport] = field(default_factory=list)
    skipped: str = ""
    #: the problem size the tools ran at, in words (the evaluator's choice: small, or the verified size)
    size: str = ""

    @property
    def ok(self) -> bool:
        """No tool found an error (a skipped or timed-out tool is not an error, but says so in ``notes``)."""
        return all(t.ok for t in self.tools)

    @property
    def failed(self) -> ToolReport | None:
        return next((t for t in self.tools if t.ran and not t.ok), None)

    def notes(self) -> list[str]:
        out = [self.skipped] if self.skipped else []
        if self.size and self.tools:
            out.append(f"compute-sanitizer ran at the {self.size}")
        out += [f"{t.tool}: {t.note}" for t in self.tools if t.note]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"tools": [t.to_json() for t in self.tools], "skipped": self.skipped, "ok": self.ok,
                "size": self.size}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SanitizerReport:
        return cls([ToolReport(**{k: t[k] for k in ToolReport.__dataclass_fields__ if k in t})
                    for t in d.get("tools", [])], d.get("skipped", ""), d.get("size", ""))


def sanitizer_path() -> str | None:
    try:
        return str(find_tool("compute-sanitizer"))
    except ToolMissing:
        return None


_SUMMARY = re.compile(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, "
                      r"(\d+) warnings?\))")
_ERROR_COUNT = re.compile(r"ERROR SUMMARY: (\d+) error")
_FIRST = re.compile(r"=+\s+((?:Invalid|Error|Race|Misaligned|Out-of-range|Address|Warp|Barrier|Uninitialized)[^\n]*)")


def parse_output(tool: str, text: str, returncode: int) -> tuple[bool, int, str, str]:
    """(ok, errors, first error line, summary line) from a compute-sanitizer run's output."""
    errors = 0
    summary = ""
    for m in _SUMMARY.finditer(text):
        summary = m.group(1)
        if m.group(2) is not None:
            errors = max(errors, int(m.group(2)))
    for m in _ERROR_COUNT.finditer(text):
        errors = max(errors, int(m.group(1)))
    first = ""
    fm = _FIRST.search(text)
    if fm:
        first = fm.group(1).strip()
    if returncode == ERROR_EXIT and errors == 0:
        errors = 1
    ok = errors == 0 and returncode in (0,)
    if not first and not ok:
        tail = [ln for ln in text.strip().splitlines() if ln.strip()]
        first = tail[-1].strip("= ") if tail else f"exit code {returncode}"
    return ok, errors, first, summary


#: a kernel's symbol as ptxas names it (mangled or ``extern "C"``): a C++ identifier, nothing else
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def sanitizer_command(exe: str, tool: str, job: str, python: str = sys.executable) -> list[str]:
    """The compute-sanitizer command line for one tool on one pickled job; ``UnsafeArgument`` if any part
    (the job's temporary path, the interpreter's path) holds a character a shell would interpret.

    The kernel's name and data travel in the job file, never on the command line, and the job file has a
    fixed name in a private folder. compute-sanitizer's handling of the target's argv is not documented, so
    the command passes the same guard as nvcc's.
    """
    if tool not in KNOWN_TOOLS:
        raise UnsafeArgument("compute-sanitizer", tool, f"is not a sanitizer tool ({', '.join(KNOWN_TOOLS)})")
    return guard_argv("compute-sanitizer", [exe, "--tool", tool, "--error-exitcode", str(ERROR_EXIT),
                                            "--print-limit", "20", python, "-m", "warpforge.gpu.worker",
                                            "--oneshot", job])


def run_sanitizer(
    cubin: bytes,
    symbol: str,
    layout: Layout,
    launch: tuple[Sequence[int], Sequence[int], int],
    *,
    seed: int = 0,
    device: int = 0,
    tools: Sequence[str] = TOOLS,
    timeout: float = 300.0,
    python: str = sys.executable,
    sanitizer: str | None = None,
) -> SanitizerReport:
    """Run each tool on one launch of the kernel; a missing compute-sanitizer gives a skipped report."""
    exe = sanitizer or sanitizer_path()
    if exe is None:
        return SanitizerReport([], "compute-sanitizer not found: memcheck/racecheck skipped "
                                   "(install the CUDA toolkit to check winners for out-of-bounds accesses and races)")
    if not SYMBOL.fullmatch(symbol):
        return SanitizerReport([ToolReport(t, False, False, note=f"not run: the kernel symbol {symbol[:80]!r} is "
                                                                 "not a C++ identifier") for t in tools])
    reports: list[ToolReport] = []
    with tempfile.TemporaryDirectory(prefix="warpforge-sanitize-") as tmp:
        job = Path(tmp) / "job.pkl"
        write_job(job, cubin, symbol, layout, launch, seed=seed, device=device, repeat=1)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        for tool in tools:
            try:
                cmd = sanitizer_command(exe, tool, str(job), python)
            except UnsafeArgument as e:
                reports.append(ToolReport(tool, False, False, note=f"not run: {e}"))
                continue
            t0 = time.perf_counter()
            try:
                proc = run_tool(cmd, tool="compute-sanitizer", timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                reports.append(ToolReport(tool, False, True, seconds=time.perf_counter() - t0,
                                          note=f"did not finish within {timeout:.0f} s; not checked"))
                continue
            text = (proc.stdout or "") + "\n" + (proc.stderr or "")
            ok, errors, first, summary = parse_output(tool, text, proc.returncode)
            if proc.returncode not in (0, ERROR_EXIT) and errors == 0 and "oneshot: CUDA error" not in text:
                reports.append(ToolReport(tool, False, True, seconds=time.perf_counter() - t0,
                                          note=f"could not run (exit {proc.returncode}): {first}"))
                continue
            reports.append(ToolReport(tool, True, ok, errors, first, summary, time.perf_counter() - t0))
    return SanitizerReport(reports)
