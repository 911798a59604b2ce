"""SASS via ``nvdisasm -json -g``: per source line, the instruction mix that matters for performance.

Why SASS and not PTX: what the hardware executes decides whether a load is 32- or 128-bit, whether a
spill really hits local memory, whether ``sqrtf`` became MUFU or a double-precision sequence. The line
table (``-lineinfo`` builds) lets every instruction be charged to a line of the user's file.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..compiler.mangle import split_name
from ..compiler.names import same_file
from ..compiler.sandbox import run_tool
from ..compiler.toolchain import ToolMissing, UnsafeArgument, find_tool, guard_argv


@dataclass(frozen=True)
class Instr:
    opcode: str
    operands: str
    predicate: str
    file: str
    line: int  # 1-based; 0 when unknown


@dataclass
class SassFunction:
    mangled: str
    name: str
    namespace: tuple[str, ...]
    instructions: list[Instr] = field(default_factory=list)

    def lines(self, file_suffix: str | None = None) -> dict[int, Counter[str]]:
        """Per source line: counts of instruction categories (see ``categorize``)."""
        out: dict[int, Counter[str]] = {}
        for ins in self.instructions:
            if ins.line <= 0 or (file_suffix is not None and not _same_file(ins.file, file_suffix)):
                continue
            c = out.setdefault(ins.line, Counter())
            for cat in categorize(ins.opcode):
                c[cat] += 1
        return out

    def totals(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for ins in self.instructions:
            c.update(categorize(ins.opcode))
        return c


def _same_file(a: str, b: str) -> bool:
    """A line without a file name counts as the file's (nvdisasm leaves it out for a one-file unit)."""
    return not a or not b or same_file(a, b)


_FP64 = re.compile(r"^(DADD|DMUL|DFMA|DSETP|DMNMX|DSET|F2F\.F64\.\w+|F2F\.\w+\.F64|I2F\.F64.*|F2I\.\w*F64.*|DMMA.*)")
_WIDTH = re.compile(r"\.(128|64|U8|S8|U16|S16)\b")


def _width(opcode: str) -> int:
    m = _WIDTH.search(opcode)
    if not m:
        return 32
    return {"128": 128, "64": 64, "U8": 8, "S8": 8, "U16": 16, "S16": 16}[m.group(1)]


def categorize(opcode: str) -> list[str]:
    """Categories of one SASS opcode: ``ldg32``, ``stg128``, ``ldl``, ``lds``, ``atom``, ``fp64``, ..."""
    base = opcode.split(".")[0]
    cats: list[str] = []
    if base == "LDG":
        cats.append(f"ldg{_width(opcode)}")
        cats.append("ldg")
        if ".CONSTANT" in opcode:
            cats.append("ldg_constant")
    elif base == "STG":
        cats.append(f"stg{_width(opcode)}")
        cats.append("stg")
    elif base in ("LDL",):
        cats.append("ldl")
    elif base in ("STL",):
        cats.append("stl")
    elif base in ("LDS", "LDSM"):
        cats.append("lds")
    elif base == "STS":
        cats.append("sts")
    elif base in ("ATOMG", "ATOM", "RED", "REDG"):
        cats.append("atom_global")
    elif base in ("ATOMS",):
        cats.append("atom_shared")
    elif base == "MUFU":
        cats.append("mufu")
    elif base in ("HMMA", "HGMMA", "IMMA", "BMMA", "DMMA", "QMMA", "UTCHMMA", "UTCQMMA", "WGMMA"):
        cats.append("tensor")
    elif base in ("BSSY", "BSYNC", "WARPSYNC", "BMOV"):
        cats.append("divergence")
    elif base == "BAR":
        cats.append("barrier")
    elif base in ("SHFL",):
        cats.append("shuffle")
    elif base in ("LDGSTS", "LDGDEPBAR", "UBLKCP", "UTMALDG"):
        cats.append("async_copy")
    if _FP64.match(opcode):
        cats.append("fp64")
    if base in ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "IABS"):
        cats.append("int")
    return cats


def disassemble(cubin: bytes, nvdisasm: str | None = None, timeout: float = 60.0) -> dict[str, SassFunction]:
    """Per-function SASS of a cubin; raises ``ToolMissing`` without nvdisasm."""
    tool = find_tool("nvdisasm", nvdisasm)
    # A fixed name in a private folder: nothing the user named reaches the command line.
    with tempfile.TemporaryDirectory(prefix="warpforge-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            argv = guard_argv("nvdisasm", [str(tool), "-json", "-g", str(path)])
            proc = run_tool(argv, tool="nvdisasm", timeout=timeout)
        except UnsafeArgument as e:
            raise ToolMissing("nvdisasm", f"not run: {e}") from e
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ToolMissing("nvdisasm", f"{tool} failed to run: {e}") from e
    if proc.returncode != 0:
        raise ToolMissing("nvdisasm", f"{tool} could not read the cubin: {proc.stderr.strip()[:200]}")
    return parse_nvdisasm_json(proc.stdout)


def parse_nvdisasm_json(text: str) -> dict[str, SassFunction]:
    data = json.loads(text)
    if not isinstance(data, list) or len(data) < 2:
        return {}
    files: list[str] = []
    if len(data) > 2 and isinstance(data[2], dict):
        dirs = data[2].get("directories", [])
        for f in data[2].get("files", []):
            d = dirs[f.get("dir-idx", 0)] if dirs and 0 <= f.get("dir-idx", 0) < len(dirs) else ""
            files.append(str(Path(d) / f.get("file", "")) if d else f.get("file", ""))
    out: dict[str, SassFunction] = {}
    for fn in data[1]:
        mangled = fn.get("function-name", "")
        parts = split_name(mangled)
        sf = SassFunction(mangled, parts[-1], tuple(parts[:-1]))
        file_id = -1
        line = 0
        for ins in fn.get("sass-instructions", []):
            # nvdisasm only repeats source info where it changes: carry it forward.
            if "source-line" in ins:
                line = int(ins["source-line"])
                file_id = int(ins.get("source-file-id", file_id))
            fname = files[file_id] if 0 <= file_id < len(files) else ""
            sf.instructions.append(Instr(ins.get("opcode", ""), ins.get("operands", ""), ins.get("predicate", ""),
                                         fname, line))
        out[mangled] = sf
    return out
