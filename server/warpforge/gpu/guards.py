"""Anti-cheat guards: static checks on a candidate's source and SASS, and the physical-floor check.

A search that optimizes a number will find every way to fake that number. These checks reject the ways
that differential testing and timing cannot see by themselves:

- **clock reads** (``clock()``, ``clock64()``, ``%globaltimer``, ``<chrono>``): a kernel that branches on
  time can behave differently when timed than when verified;
- **device-side launches** (``<<<...>>>`` or ``cudaLaunchDevice`` inside device code, i.e. dynamic
  parallelism): work launched from the device can escape the events that time the parent kernel;
- **a changed signature**: the engine passes the original's arguments; a variant expecting other ones
  would read garbage, and one that renames its way around the spec is not the same kernel;
- **a time below the physical floor**: moving the bytes the spec says a launch must move takes at least
  ``bytes / peak bandwidth``; a faster time means the kernel skipped work in a way the checks missed
  (or the spec's ``bytes`` is wrong) and is reported as suspicious, never as a speedup.

Source checks ignore comments, and a finding the original kernel also has is not held against a variant
(a kernel that legitimately reads the clock may keep doing so). The SASS check catches what the source
check cannot see, e.g. a clock read hidden behind a macro from an include.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..compiler.sandbox import run_tool
from ..compiler.toolchain import ToolMissing, UnsafeArgument, find_tool, guard_argv


@dataclass(frozen=True)
class GuardFinding:
    """A reason to reject a candidate. ``line`` is 1-based within the candidate's text, when known."""

    code: str
    message: str
    line: int | None = None

    def text(self) -> str:
        return (f"line {self.line}: " if self.line else "") + self.message

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- lexing
def strip_comments(text: str, *, strings: bool = False) -> str:
    """``text`` with comments (and, if ``strings``, the contents of string/char literals) blanked.

    Newlines are kept, so line numbers stay valid.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            if strings:
                out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            else:
                out.append(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


_CODE_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    ("clock", re.compile(r"\bclock(?:64)?\s*\("), "reads the clock (`{m}`): a kernel must not depend on time"),
    ("clock", re.compile(r"\b(?:std|cuda::std)\s*::\s*chrono\b|\bchrono::"),
     "uses <chrono> (`{m}`): a kernel must not depend on time"),
    ("device_launch", re.compile(r"<<<"),
     "launches a kernel from device code (`<<<`): dynamic parallelism can escape timing"),
    ("device_launch", re.compile(r"\bcuda(?:LaunchDevice\w*|GetParameterBuffer\w*|LaunchKernel\w*|GraphLaunch)\b"),
     "launches work from device code (`{m}`): dynamic parallelism can escape timing"),
]
_ASM_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    ("globaltimer", re.compile(r"%%?globaltimer(?:_lo|_hi)?\b"),
     "reads %globaltimer in inline PTX: a kernel must not depend on time"),
    ("clock", re.compile(r"%%?clock(?:64|_hi)?\b"), "reads %clock in inline PTX: a kernel must not depend on time"),
]


def source_findings(text: str) -> list[GuardFinding]:
    """Clock reads and device-side launches in a candidate's source text."""
    code = strip_comments(text, strings=True)
    with_strings = strip_comments(text)
    found: list[GuardFinding] = []
    seen: set[tuple[str, int]] = set()
    for src, patterns in ((code, _CODE_PATTERNS), (with_strings, _ASM_PATTERNS)):
        for kind, rx, msg in patterns:
            for m in rx.finditer(src):
                line = _line_of(src, m.start())
                if (kind, line) in seen:
                    continue
                seen.add((kind, line))
                found.append(GuardFinding(kind, msg.format(m=m.group(0).strip()), line))
    return found


# --------------------------------------------------------------------------- signature
def _norm_type(t: str) -> str:
    t = re.sub(r"\b(const|volatile|__restrict__|__restrict|restrict|struct|class)\b", " ", t)
    return " ".join(t.split())


def signature_findings(original: Any, candidate_text: str,
                       aliases: Mapping[str, tuple[str, int]] | None = None) -> list[GuardFinding]:
    """Does the candidate define a kernel of the original's name with the original's parameters?

    ``original`` is a ``warpforge.cuda.Kernel``; ``aliases`` are the original file's type aliases
    (``cuda.types.type_aliases``). Types are compared canonically (``cuda.types.param_key``): ``const`` and
    ``__restrict__`` may be added, dropped or moved (they are how a variant tells the compiler more), a
    ``typedef``/``using`` name may be spelled as what it names (``floatX*`` is ``float*`` when
    ``typedef float floatX;``), and a parameter may be named or left unnamed; the canonical types, pointer
    depth, order and count may not change.
    """
    from ..cuda import KernelNotFound, parse
    from ..cuda.types import param_key, type_aliases

    try:
        cmodel = parse(candidate_text.encode("utf-8"))
        cand = cmodel.require(original.name, "the candidate")
    except KernelNotFound as e:
        return [GuardFinding("signature", str(e))]
    # The candidate's own helpers may declare aliases; the file's win where both name one (the candidate
    # is compiled in the file's context, where a second definition of a different type would not build).
    known = {**type_aliases(candidate_text, cmodel), **(aliases or {})}
    line = candidate_text.encode("utf-8").count(b"\n", 0, cand.span.start) + 1
    want = [param_key(p, known) for p in original.params]
    got = [param_key(p, known) for p in cand.params]

    def show(params: list[Any]) -> str:
        return ", ".join(p.text for p in params)

    if len(want) != len(got):
        return [GuardFinding("signature", f"the signature changed: `{original.name}({show(list(original.params))})` "
                                          f"became `{cand.name}({show(list(cand.params))})`", line)]
    for w, g, op, cp in zip(want, got, original.params, cand.params, strict=True):
        if w != g:
            return [GuardFinding("signature", f"parameter `{op.text}` became `{cp.text}`: the signature must stay "
                                              f"the same (only const and __restrict__ may change)", line)]
    tw = [(t.kind, _norm_type(t.type)) for t in original.template_params]
    tg = [(t.kind, _norm_type(t.type)) for t in cand.template_params]
    if tw != tg:
        return [GuardFinding("signature", "the template parameters changed: "
                                          f"<{', '.join(t.name for t in original.template_params)}> became "
                                          f"<{', '.join(t.name for t in cand.template_params)}>", line)]
    return []


def check_candidate(original_kernel: Any, original_text: str, candidate_text: str,
                    aliases: Mapping[str, tuple[str, int]] | None = None) -> list[GuardFinding]:
    """All static findings against a candidate, minus the kinds the original kernel itself exhibits.

    ``aliases`` are the original file's type aliases, so a variant may spell a typedef'd type directly."""
    allowed = {f.code for f in source_findings(original_text)}
    found = [f for f in source_findings(candidate_text) if f.code not in allowed]
    return found + signature_findings(original_kernel, candidate_text, aliases)


# --------------------------------------------------------------------------- SASS
#: special registers read by instructions (``S2R``/``CS2R``): only a disassembly shows these
_SASS_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    ("clock", re.compile(r"\bSR_CLOCK(?:LO|HI)?\b"), "its machine code reads the SM clock ({m})"),
    ("globaltimer", re.compile(r"\bSR_GLOBALTIMER(?:LO|HI)?\b"), "its machine code reads the global timer ({m})"),
]
#: device-side launches call the device runtime (``cudaLaunchDevice``; since CUDA 12 ``__cudaCDP2LaunchDeviceV2``
#: and ``__cudaCDP2GetParameterBufferV2``). The call's target is a relocation, so the names are in the
#: cubin's symbol table, not in the code a disassembler prints: they are looked for in the ELF bytes.
_DEVICE_LAUNCH = re.compile(rb"[A-Za-z0-9_]*(?:LaunchDevice|GetParameterBuffer)[A-Za-z0-9_]*")


def sass_text(cubin: bytes, nvdisasm: str | None = None, timeout: float = 60.0) -> str:
    """Disassembly of a cubin's code sections (``nvdisasm -c -ndf``).

    Code only and no dataflow analysis: the guard greps instructions, and this halves nvdisasm's time,
    which a search pays for every candidate beside nvcc (0.38 -> 0.22 CPU-s on a small kernel).
    """
    tool = find_tool("nvdisasm", nvdisasm)
    with tempfile.TemporaryDirectory(prefix="warpforge-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            argv = guard_argv("nvdisasm", [str(tool), "--print-code", "--no-dataflow", str(path)])
        except UnsafeArgument as e:
            raise RuntimeError(f"nvdisasm not run: {e}") from e
        proc = run_tool(argv, tool="nvdisasm", timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {proc.stderr.strip()[:300]}")
    return proc.stdout


def sass_findings(cubin: bytes, nvdisasm: str | None = None) -> tuple[list[GuardFinding], str | None]:
    """Findings in the cubin's machine code, and a note when the disassembly could not run (nvdisasm missing)."""
    found: list[GuardFinding] = []
    launch = _DEVICE_LAUNCH.search(cubin)
    if launch:
        found.append(GuardFinding("device_launch", "its machine code launches kernels from the device "
                                                   f"({launch.group(0).decode('ascii', 'replace')})"))
    try:
        sass = sass_text(cubin, nvdisasm)
    except (ToolMissing, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return found, f"SASS guard skipped: {e}"
    for kind, rx, msg in _SASS_PATTERNS:
        m = rx.search(sass)
        if m:
            found.append(GuardFinding(kind, msg.format(m=m.group(0))))
    return found, None


# --------------------------------------------------------------------------- physical floor
#: achieved bandwidth above this multiple of the measured copy bandwidth is physically implausible
FLOOR_SLACK = 1.25


def floor_ms(nbytes: float, peak_gbps: float) -> float:
    """The least time moving ``nbytes`` can take at ``peak_gbps`` (GB/s), in ms."""
    return nbytes / (peak_gbps * 1e9) * 1e3


def floor_finding(
    median_ms: float,
    nbytes: float | None,
    peak_gbps: float,
    *,
    theoretical_gbps: float = 0.0,
    l2_bytes: int = 0,
    slack: float = FLOOR_SLACK,
) -> GuardFinding | None:
    """Is ``median_ms`` faster than the memory system can move the spec's compulsory bytes?

    Only applied when the bytes exceed the L2 cache: a smaller problem's writes can complete into L2 and
    legitimately beat DRAM bandwidth. The limit is ``slack`` times the measured copy bandwidth (or 5 % over
    the theoretical peak, if that is higher), so an excellent kernel is never mistaken for a cheat.
    """
    if not nbytes or nbytes <= 0 or peak_gbps <= 0 or median_ms <= 0 or nbytes < l2_bytes:
        return None
    limit = max(peak_gbps * slack, theoretical_gbps * 1.05)
    achieved = nbytes / (median_ms * 1e-3) / 1e9
    if achieved <= limit:
        return None
    return GuardFinding(
        "below_floor",
        f"{median_ms:.4g} ms is below the physical floor: the spec's {nbytes / 1e6:.1f} MB take at least "
        f"{floor_ms(nbytes, peak_gbps):.4g} ms at the measured {peak_gbps:.0f} GB/s; this would be "
        f"{achieved:.0f} GB/s (limit {limit:.0f}). The kernel skips work the checks did not see, or the "
        f"spec's `bytes` is too large",
    )
