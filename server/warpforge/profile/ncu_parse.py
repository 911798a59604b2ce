"""Parsers for Nsight Compute's CSV pages: pure functions from exported text to ``NcuProfile``.

Three pages of one profiled launch (see ``ncu.PAGES``), each with its own shape:

- *details* (``--page details --csv --print-units base``): one row per section metric, columns ``"ID",
  "Process ID", ..., "Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",
  "Rule Description","Estimated Speedup Type","Estimated Speedup"``; a guided-analysis rule result is a
  row with the rule columns set and the metric columns empty. Numbers carry thousands separators
  (``"268,451,328"``); base units mean durations in ns and frequencies in Hz.
- *raw* (``--page raw --csv --print-units base``): three rows — counter names, units, values — over
  ~1,300 columns, every metric collected, by its counter name (``dram__bytes_read.sum``).
- *source* (``--page source --csv --print-source sass,cuda``): for each source file a ``"File Path"``
  row, a ``"Function Name"`` row and a header row, then one row per source line (``Line No`` set, its
  counters summed over the line's instructions) followed by one row per SASS instruction of that line
  (``Line No`` empty, ``Address`` and the instruction text set). Counters include warp-stall samples in
  total and per reason (``stall_long_sb``...), instructions and thread instructions executed, the memory
  space / operation / access size, L2 theoretical sectors (total, ideal, excessive) and shared-memory
  N-way bank conflicts. The file path is where the kernel was compiled (a temporary folder), so lines are
  matched to the user's file by name, as the SASS line table is.

Everything here is text in, data out: no ncu, no GPU, so the parsers run in CI on committed fixtures.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.names import same_file

_NUM = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$")


def number(text: str | None) -> float | None:
    """A CSV cell as a number: thousands separators dropped; ``-``, ``n/a``, empty or text give None."""
    if text is None:
        return None
    t = text.strip().rstrip("%").strip()
    if not t or not _NUM.match(t):
        return None
    return float(t.replace(",", ""))


def _rows(text: str) -> list[list[str]]:
    """CSV rows, skipping ncu's own chatter (``==PROF==``/``==WARNING==`` lines) and blank lines."""
    clean = "\n".join(ln for ln in text.splitlines() if ln.strip() and not ln.startswith("=="))
    return [r for r in csv.reader(io.StringIO(clean)) if r]


def _dims(text: str) -> tuple[int, int, int] | None:
    """``"(256, 1, 1)"`` -> (256, 1, 1)."""
    nums = [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", text or "")]
    if not nums:
        return None
    nums = [*nums, 1, 1, 1][:3]
    return nums[0], nums[1], nums[2]


# --------------------------------------------------------------------------------------------- details
@dataclass(frozen=True)
class Rule:
    """One guided-analysis rule result (Nsight Compute's expert interpretation of the metrics)."""

    section: str
    name: str
    type: str  # OPT | WRN | INF | ERR
    description: str
    speedup_type: str = ""  # "local" | "global" | ""
    speedup: float | None = None  # estimated % of the kernel's time the advice would save

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "type": self.type, "description": self.description,
                "speedup_type": self.speedup_type, "speedup": self.speedup}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Rule:
        return cls(d["section"], d["name"], d["type"], d["description"], d.get("speedup_type", ""), d.get("speedup"))


@dataclass
class Details:
    """The details page: section metrics, rule results and the launch's identity."""

    kernel: str = ""
    device: str = ""
    cc: str = ""
    block: tuple[int, int, int] | None = None
    grid: tuple[int, int, int] | None = None
    #: section display name -> metric name -> (value, unit); values are numbers where they parse
    sections: dict[str, dict[str, tuple[float | str, str]]] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)

    def value(self, section: str, name: str) -> float | None:
        v = self.sections.get(section, {}).get(name)
        return v[0] if v is not None and isinstance(v[0], float) else None

    def find(self, name: str) -> float | None:
        """A metric by display name, from whichever section has it first."""
        for metrics in self.sections.values():
            v = metrics.get(name)
            if v is not None and isinstance(v[0], float):
                return v[0]
        return None

    def to_json(self) -> dict[str, Any]:
        """Everything parsed, losslessly (``from_json`` gives an equal ``Details``): a metric is ``[value, unit]``."""
        return {"kernel": self.kernel, "device": self.device, "cc": self.cc,
                "block": list(self.block) if self.block is not None else None,
                "grid": list(self.grid) if self.grid is not None else None,
                "sections": {sec: {name: [v, unit] for name, (v, unit) in metrics.items()}
                             for sec, metrics in self.sections.items()},
                "rules": [r.to_json() for r in self.rules]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Details:
        return cls(d["kernel"], d["device"], d["cc"], _triple(d.get("block")), _triple(d.get("grid")),
                   {sec: {name: (v, unit) for name, (v, unit) in metrics.items()}
                    for sec, metrics in d["sections"].items()},
                   [Rule.from_json(r) for r in d["rules"]])


def _triple(v: list[int] | None) -> tuple[int, int, int] | None:
    return (int(v[0]), int(v[1]), int(v[2])) if v is not None else None


def parse_details(text: str) -> Details:
    """The details page of one profiled launch (the first kernel's rows when there are several)."""
    rows = _rows(text)
    if not rows or "Metric Name" not in rows[0]:
        raise ValueError("not an Nsight Compute details page: no `Metric Name` column")
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    out = Details()
    first_id: str | None = None

    def get(r: list[str], name: str) -> str:
        i = col.get(name)
        return r[i] if i is not None and i < len(r) else ""

    for r in rows[1:]:
        rid = get(r, "ID")
        if first_id is None:
            first_id = rid
            out.kernel = get(r, "Kernel Name")
            out.device = get(r, "Device")
            out.cc = get(r, "CC")
            out.block = _dims(get(r, "Block Size"))
            out.grid = _dims(get(r, "Grid Size"))
        elif rid != first_id:
            continue
        section = get(r, "Section Name")
        rule = get(r, "Rule Name")
        if rule:
            out.rules.append(Rule(section, rule, get(r, "Rule Type"), get(r, "Rule Description").strip(),
                                  get(r, "Estimated Speedup Type"), number(get(r, "Estimated Speedup"))))
            continue
        name = get(r, "Metric Name")
        if not name:
            continue
        raw = get(r, "Metric Value")
        num = number(raw)
        out.sections.setdefault(section, {})[name] = (num if num is not None else raw, get(r, "Metric Unit"))
    return out


# --------------------------------------------------------------------------------------------- raw
@dataclass
class Raw:
    """The raw page: every collected counter by name, with its unit."""

    values: dict[str, float] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "text": self.text, "units": self.units}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Raw:
        return cls(dict(d["values"]), dict(d["text"]), dict(d["units"]))


def parse_raw(text: str) -> Raw:
    """The raw page (names row, units row, one values row per kernel; the first kernel is taken)."""
    rows = _rows(text)
    if len(rows) < 3 or "ID" not in rows[0] or "Metric Name" in rows[0] or not any("__" in n for n in rows[0]):
        raise ValueError("not an Nsight Compute raw page: expected counter names, units and values rows")
    names, units, values = rows[0], rows[1], rows[2]
    out = Raw()
    for i, name in enumerate(names):
        v = values[i] if i < len(values) else ""
        out.units[name] = units[i] if i < len(units) else ""
        num = number(v)
        if num is not None:
            out.values[name] = num
        else:
            out.text[name] = v
    return out


# --------------------------------------------------------------------------------------------- source
#: the per-reason stall columns of the source page, as ncu names them, and a stable short name for each
STALL_COLUMNS: dict[str, str] = {
    "stall_barrier": "barrier", "stall_branch_resolving": "branch_resolving", "stall_dispatch": "dispatch",
    "stall_drain": "drain", "stall_imc": "imc_miss", "stall_lg": "lg_throttle", "stall_long_sb": "long_scoreboard",
    "stall_math": "math_pipe_throttle", "stall_membar": "membar", "stall_mio": "mio_throttle", "stall_misc": "misc",
    "stall_no_inst": "no_instruction", "stall_not_selected": "not_selected", "stall_selected": "selected",
    "stall_short_sb": "short_scoreboard", "stall_sleep": "sleeping", "stall_tex": "tex_throttle",
    "stall_wait": "wait", "stall_gmma": "gmma",
}
SAMPLES = "Warp Stall Sampling (All Samples)"
INST = "Instructions Executed"
THREAD_INST = "Thread Instructions Executed"
SECTORS = "L2 Theoretical Sectors Global"
SECTORS_IDEAL = "L2 Theoretical Sectors Global Ideal"
SECTORS_EXCESSIVE = "L2 Theoretical Sectors Global Excessive"
REQUESTS = "L1 Tag Requests Global"
BANK_NWAY = "L1 Conflicts Shared N-Way"


@dataclass
class SassRow:
    """One SASS instruction of the source page with its counters."""

    address: str
    text: str
    values: dict[str, float] = field(default_factory=dict)
    space: str = ""  # Global | Shared | Local | ...
    operation: str = ""  # Load | Store | Atomic | ...
    size_bits: int | None = None

    @property
    def opcode(self) -> str:
        """``LDG.E.128`` from ``@!P0  LDG.E.128 R4, [R2.64]``."""
        t = self.text.strip()
        if t.startswith("@"):
            t = t.split(None, 1)[1] if " " in t else ""
        return t.split(None, 1)[0] if t else ""

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "text": self.text, "values": self.values, "space": self.space,
                "operation": self.operation, "size_bits": self.size_bits}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SassRow:
        return cls(d["address"], d["text"], dict(d["values"]), d["space"], d["operation"], d["size_bits"])


@dataclass
class SourceLine:
    """One source line of the source page: its counters (summed over its instructions) and instructions."""

    file: str
    line: int
    values: dict[str, float] = field(default_factory=dict)
    space: str = ""
    operation: str = ""
    instructions: list[SassRow] = field(default_factory=list)

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)

    @property
    def samples(self) -> float:
        return self.get(SAMPLES)

    @property
    def stalls(self) -> dict[str, float]:
        """Stall samples by reason (short names, see ``STALL_COLUMNS``), largest first."""
        out = {short: self.values[col] for col, short in STALL_COLUMNS.items() if self.values.get(col)}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def active_threads(self) -> float | None:
        """Average threads active per executed warp instruction of this line."""
        inst = self.get(INST)
        return self.get(THREAD_INST) / inst if inst else None

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "values": self.values, "space": self.space,
                "operation": self.operation, "instructions": [i.to_json() for i in self.instructions]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SourceLine:
        return cls(d["file"], d["line"], dict(d["values"]), d["space"], d["operation"],
                   [SassRow.from_json(i) for i in d["instructions"]])


def _size_bits(text: str) -> int | None:
    m = re.match(r"^\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def parse_source(text: str) -> list[SourceLine]:
    """Every source line (of every file section) with its SASS rows; line numbers as ncu gives them."""
    out: list[SourceLine] = []
    file = ""
    head: list[str] = []
    current: SourceLine | None = None
    for r in _rows(text):
        key = r[0].strip()
        if key == "File Path":
            file = r[1] if len(r) > 1 else ""
            current = None
            continue
        if key in ("Function Name", "Kernel Name"):
            continue
        if key in ("Line No", "Address"):
            head = r
            continue
        if not head:
            continue
        cells = dict(zip(head, r, strict=False))
        values = {name: v for name, cell in cells.items() if (v := number(cell)) is not None}
        line_no = number(cells.get("Line No", "")) if "Line No" in cells else None
        if line_no is not None:
            current = SourceLine(file, int(line_no), values, _clean(cells.get("Address Space", "")),
                                 _clean(cells.get("Access Operation", "")))
            out.append(current)
            continue
        # an instruction row: ``Address`` then the instruction text in the second "Source" column
        addr_i = head.index("Address") if "Address" in head else -1
        if addr_i < 0 or addr_i >= len(r) or not r[addr_i].startswith("0x"):
            continue
        sass_text = r[addr_i + 1] if addr_i + 1 < len(r) else ""
        row = SassRow(r[addr_i], sass_text.strip(), values, _clean(cells.get("Address Space", "")),
                      _clean(cells.get("Access Operation", "")), _size_bits(cells.get("Access Size", "")))
        if current is None:
            current = SourceLine(file, 0)
            out.append(current)
        current.instructions.append(row)
    return out


def _clean(text: str) -> str:
    t = (text or "").strip()
    return "" if t == "-" else t


# --------------------------------------------------------------------------------------------- profile
def _same_file(a: str, b: str) -> bool:
    return same_file(a, b)  # by base name, the build's alias of an unusual name included


@dataclass
class NcuProfile:
    """One profiled launch: the three pages parsed, with accessors for the numbers analyzers use."""

    details: Details
    raw: Raw
    lines: list[SourceLine] = field(default_factory=list)

    # ------------------------------------------------------------------ identity
    @property
    def kernel(self) -> str:
        return self.details.kernel

    @property
    def gpu(self) -> str:
        return self.raw.text.get("device__attribute_display_name", "") or self.details.device

    # ------------------------------------------------------------------ metrics
    def metric(self, name: str) -> float | None:
        """A counter from the raw page, else a display name from the details page."""
        v = self.raw.get(name)
        return v if v is not None else self.details.find(name)

    def sol(self, name: str) -> float | None:
        return self.details.value("GPU Speed Of Light Throughput", name)

    @property
    def duration_ns(self) -> float | None:
        return self.metric("gpu__time_duration.sum") or self.sol("Duration")

    @property
    def memory_pct(self) -> float | None:
        return self.sol("Memory Throughput")

    @property
    def compute_pct(self) -> float | None:
        return self.sol("Compute (SM) Throughput")

    @property
    def unit_pct(self) -> dict[str, float]:
        """Throughput of each memory level, % of its peak: DRAM, L2, L1 (L1/TEX and shared memory)."""
        out: dict[str, float] = {}
        for unit, name in (("DRAM", "DRAM Throughput"), ("L2", "L2 Cache Throughput"),
                           ("L1", "L1/TEX Cache Throughput")):
            v = self.sol(name)
            if v is not None:
                out[unit] = v
        return out

    @property
    def dram_bytes(self) -> float | None:
        r, w = self.metric("dram__bytes_read.sum"), self.metric("dram__bytes_write.sum")
        if r is None and w is None:
            return None
        return (r or 0.0) + (w or 0.0)

    @property
    def fp32_flops(self) -> float | None:
        """FP32 operations executed: adds + multiplies + 2 per fused multiply-add (thread-level, predicated on)."""
        parts = [self.metric(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum") for op in ("fadd", "fmul", "ffma")]
        if all(p is None for p in parts):
            return None
        fadd, fmul, ffma = (p or 0.0 for p in parts)
        return fadd + fmul + 2 * ffma

    @property
    def sm_count(self) -> int | None:
        v = self.metric("launch__sm_count") or self.metric("device__attribute_multiprocessor_count")
        return int(v) if v else None

    @property
    def grid_blocks(self) -> int | None:
        v = self.metric("launch__grid_size")
        if v:
            return int(v)
        g = self.details.grid
        return g[0] * g[1] * g[2] if g else None

    @property
    def block_threads(self) -> int | None:
        v = self.metric("launch__block_size")
        if v:
            return int(v)
        b = self.details.block
        return b[0] * b[1] * b[2] if b else None

    @property
    def waves(self) -> float | None:
        return self.metric("launch__waves_per_multiprocessor")

    @property
    def registers(self) -> int | None:
        v = self.metric("launch__registers_per_thread")
        return int(v) if v is not None else None

    @property
    def theoretical_occupancy(self) -> float | None:
        return self.details.value("Occupancy", "Theoretical Occupancy")

    @property
    def achieved_occupancy(self) -> float | None:
        return self.details.value("Occupancy", "Achieved Occupancy")

    @property
    def block_limits(self) -> dict[str, int]:
        """Blocks per SM each resource allows (registers, shared_mem, warps, blocks, barriers)."""
        out: dict[str, int] = {}
        for key in ("registers", "shared_mem", "warps", "blocks", "barriers"):
            v = self.metric(f"launch__occupancy_limit_{key}")
            if v is not None:
                out[key] = int(v)
        return out

    @property
    def active_threads_per_warp(self) -> float | None:
        return self.metric("smsp__thread_inst_executed_per_inst_executed.ratio")

    @property
    def stall_cycles(self) -> dict[str, float]:
        """Cycles per issued instruction each stall reason costs a warp, largest first."""
        pre, post = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
        out = {k[len(pre):-len(post)]: v for k, v in self.raw.values.items()
               if k.startswith(pre) and k.endswith(post) and v > 0}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def rule(self, name: str, type_: str = "OPT") -> Rule | None:
        """The first result of rule ``name`` with the largest estimated speedup."""
        found = [r for r in self.details.rules if r.name == name and r.type == type_]
        found.sort(key=lambda r: -(r.speedup or 0.0))
        return found[0] if found else None

    # ------------------------------------------------------------------ source
    def lines_of(self, file: str) -> dict[int, SourceLine]:
        """Source lines of ``file`` (matched by name: ncu sees the temporary build folder's copy)."""
        return {ln.line: ln for ln in self.lines if ln.line > 0 and _same_file(ln.file, file)}

    def total(self, name: str, lines: Iterable[SourceLine] | None = None) -> float:
        """A source counter summed over all lines (of every file) or the given ones."""
        return sum(ln.get(name) for ln in (self.lines if lines is None else lines))

    def summary(self) -> dict[str, Any]:
        """The numbers a report shows (speed of light, occupancy, launch), for ``--json``."""
        return {
            "kernel": self.kernel, "gpu": self.gpu, "duration_ns": self.duration_ns,
            "memory_pct": self.memory_pct, "compute_pct": self.compute_pct, "units_pct": self.unit_pct,
            "dram_bytes": self.dram_bytes, "fp32_flops": self.fp32_flops,
            "theoretical_occupancy_pct": self.theoretical_occupancy,
            "achieved_occupancy_pct": self.achieved_occupancy, "registers": self.registers,
            "block_limits": self.block_limits, "waves_per_sm": self.waves, "grid_blocks": self.grid_blocks,
            "block_threads": self.block_threads, "sm_count": self.sm_count,
            "active_threads_per_warp": self.active_threads_per_warp, "stall_cycles": self.stall_cycles,
            "rules": [r.to_json() for r in self.details.rules if r.type in ("OPT", "WRN")],
        }

    def to_json(self) -> dict[str, Any]:
        """The three pages as parsed, losslessly (``summary`` is what a reader wants; this is what the workspace
        store keeps so that a profile made once can be reused: ``from_json`` gives an equal profile)."""
        return {"details": self.details.to_json(), "raw": self.raw.to_json(),
                "lines": [ln.to_json() for ln in self.lines]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NcuProfile:
        return cls(Details.from_json(d["details"]), Raw.from_json(d["raw"]),
                   [SourceLine.from_json(ln) for ln in d["lines"]])


def parse_profile(details: str, raw: str | None = None, source: str | None = None) -> NcuProfile:
    """All pages of one launch; the raw and source pages are optional (their accessors give None/empty)."""
    return NcuProfile(parse_details(details), parse_raw(raw) if raw else Raw(),
                      parse_source(source) if source else [])


def load_profile(folder: str | Path) -> NcuProfile:
    """A profile from a folder holding ``details.csv`` (and ``raw.csv``, ``source.csv``): the fixtures' layout."""
    d = Path(folder)

    def read(name: str) -> str | None:
        p = d / name
        return p.read_text() if p.is_file() else None

    details = read("details.csv")
    if details is None:
        raise FileNotFoundError(d / "details.csv")
    return parse_profile(details, read("raw.csv"), read("source.csv"))
