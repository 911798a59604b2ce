"""Checks every command runs on its options and input files before any work starts: reading and parsing the
CUDA file, picking its kernel, and each option.

A bad option found after a five-minute search costs the GPU time spent on it (``--report`` into a missing
folder used to fail only when the report was written), and one that reaches a library deep down comes
back as its traceback (``--arch sm_foo``, ``--ray-address bogus:::``). So each option is parsed here,
into the value the job uses, and a problem is one line naming the option or the file and what to write
instead, with exit code 2 (``ExitCode.USAGE``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..compiler.project import warn_refused
from ..compiler.sandbox import run_tool
from ..cuda import FileModel, Kernel, KernelNotFound, SourceText, parse
from ..cuda.model import NAMED_KERNELS, name_list
from ..exitcodes import CliError
from ..spec.limits import LaunchLimits, limits_for_arch

#: the largest source file read: hand-written CUDA is far smaller, and an unbounded read of the wrong path
#: (``/dev/zero``, a core dump) would take the machine's memory before anything could be said about it
MAX_SOURCE_BYTES = 16 * 1024 * 1024
#: how much of a file is looked at for NUL bytes first: a binary file is refused before it is read whole
_SNIFF_BYTES = 64 * 1024


def read_source(path: str) -> SourceText:
    """The file's text, or one line (exit 2) when it is missing, a directory, unreadable, binary, too large
    or not UTF-8 — said of the file by name, before anything parses it."""
    p = Path(path)
    if not p.exists():
        raise CliError(f"{path}: no such file")
    if p.is_dir():
        raise CliError(f"{path}: is a directory; pass .cu files (e.g. {path}/*.cu)")
    try:
        with p.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
            if (wide := wide_encoding(head)) is not None:
                raise CliError(f"{path}: {wide} text, not UTF-8; save the file as UTF-8 (your editor's "
                               f"\"Save with Encoding\", or iconv -f {wide} -t UTF-8)")
            if b"\0" in head:
                raise CliError(f"{path} is not a CUDA source (binary)")
            data = head + f.read(MAX_SOURCE_BYTES + 1 - len(head))
    except OSError as e:
        raise CliError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > MAX_SOURCE_BYTES:
        raise CliError(f"{path}: larger than {MAX_SOURCE_BYTES // (1024 * 1024)} MiB: not a CUDA source WarpForge "
                       "reads; pass the file that holds the kernel")
    if b"\0" in data:
        raise CliError(f"{path} is not a CUDA source (binary)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CliError(f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[e.start]:02x}); save the file as "
                       "UTF-8") from e
    for warning in warn_refused(path):  # options of the project's build not passed on: said once, on stderr
        print(warning, file=sys.stderr)
    return SourceText(data)


def wide_encoding(head: bytes) -> str | None:
    """``UTF-16``/``UTF-32`` when the file's first bytes are that encoding's byte-order mark, or (no mark) when
    every other byte of mostly-ASCII text is NUL; None otherwise. Such a file is text an editor on Windows saved
    in another encoding, not a binary: the user needs to hear which."""
    if head.startswith((b"\xff\xfe\0\0", b"\0\0\xfe\xff")):
        return "UTF-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    sample = head[:4096]
    if len(sample) < 8 or b"\0" not in sample:
        return None
    even, odd = sample[0::2], sample[1::2]
    for zeros, chars in ((odd, even), (even, odd)):  # little-endian ASCII: NULs at odd offsets; big: even
        if zeros.count(0) >= 0.9 * len(zeros) and chars.count(0) <= 0.1 * len(chars):
            return "UTF-16"
    return None


# --------------------------------------------------------------------------- kernels that did not parse
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_GLOBAL = re.compile(r"\b__global__\b(?:[^;{}()]|__launch_bounds__\s*\([^()]*\))*?"
                     r"\b(?!__launch_bounds__\b)([A-Za-z_]\w*)\s*\(")


def unparsed_kernels(src: SourceText, model: FileModel) -> list[tuple[int, str]]:
    """(1-based line, name) of each ``__global__`` function in the text that the parser did not make a
    kernel of: the kernel is there, but its syntax is broken."""
    text = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), src.text)
    parsed = {k.name for k in model.kernels}
    out = []
    for m in _GLOBAL.finditer(text):
        if m.group(1) not in parsed and not _declaration(text, m.end() - 1):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def _declaration(text: str, open_paren: int) -> bool:
    """Whether the parameter list opening at ``open_paren`` is followed by ``;`` (a prototype, no body)."""
    depth = 0
    for i in range(open_paren, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[i + 1:].lstrip().startswith(";")
    return False


def parse_failure(path: str, src: SourceText, model: FileModel, name: str | None) -> str | None:
    """One line saying that the kernel (``name``, or the first one) at line N does not parse and where the
    syntax error is; None when no broken kernel of that name is in the text."""
    broken = [(line, k) for line, k in unparsed_kernels(src, model) if name is None or k == name]
    if not broken:
        return None
    line, kernel = broken[0]
    # The error that broke it: the first one from the kernel's line on (tree-sitter reports a broken item
    # at its first error), else the last one before it (an unclosed brace above swallows the kernel).
    probs = sorted(model.problems, key=lambda p: p.line)
    prob = next((p for p in probs if p.line + 1 >= line), probs[-1] if probs else None)
    where = ""
    if prob is not None:
        near = " ".join(src.slice(prob.span).split())[:40]
        what = f"syntax error near `{near}`" if near else prob.message
        where = f" ({what} at line {prob.line + 1})"
    return (f"{path}:{line}: the kernel `{kernel}` at line {line} does not parse{where}; fix the syntax "
            "(nvcc reports it too) so WarpForge can read the kernel")


# --------------------------------------------------------------------------- option types (argparse)
def load_file(path: str) -> tuple[SourceText, FileModel]:
    """Read (checked: not binary, not too large, UTF-8) and parse a CUDA file."""
    src = read_source(path)
    return src, parse(src.data)


def no_kernels(path: str, src: SourceText | None) -> str:
    """The one line for a file without a ``__global__`` kernel (said of an empty file as such)."""
    if src is not None and not src.data.strip():
        return f"{path}: empty file: no __global__ kernels to read; open the file that holds the kernel"
    return f"{path}: no __global__ kernels found"


def pick_kernel(path: str, model: FileModel, name: str | None, src: SourceText | None = None) -> Kernel:
    """The kernel named ``name``, or the only kernel in the file when no name is given.

    With ``src``, a kernel that is in the text but does not parse is reported as such, with the syntax
    error, rather than as missing."""
    if name is None:
        if len(model.kernels) == 1:
            return model.kernels[0]
        if not model.kernels:
            raise CliError((parse_failure(path, src, model, None) if src is not None else None)
                           or no_kernels(path, src))
        names = name_list([k.name for k in model.kernels])
        listing = f"; `warpforge kernels {path}` lists them all" if len(model.kernels) > NAMED_KERNELS else ""
        raise CliError(f"{path}: {len(model.kernels)} kernels ({names}{listing}); choose one with --kernel NAME")
    try:
        return model.require(name, path)
    except KernelNotFound as e:
        raise CliError((parse_failure(path, src, model, name) if src is not None else None) or str(e)) from e


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, got "
                                         f"`{text}`") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got `{text}`")
    return v


def positive_int(text: str) -> int:
    """A count that must be at least 1 (``--budget``)."""
    v = int(_number(text, int))
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got `{text}`")
    return v


def index_int(text: str) -> int:
    """A CUDA device index: 0 or more (``--device``)."""
    v = int(_number(text, int))
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got `{text}`")
    return v


def positive_float(text: str) -> float:
    """A duration or amount that must be above 0 (``--time``, ``--seconds``)."""
    v = _number(text, float)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got `{text}`")
    return v


def speedup(text: str) -> float:
    """A target speedup (``--target``): a ratio above 1, since every verified win already beats 1."""
    v = _number(text, float)
    if v <= 1:
        raise argparse.ArgumentTypeError(f"is a speedup and must be above 1 (e.g. 1.5), got `{text}`")
    return v


def arch(text: str) -> str:
    """``--arch`` as nvcc spells it (``sm_90``), from ``sm_90``, ``90`` or ``9.0``."""
    from ..compiler.toolchain import normalize_arch

    try:
        return normalize_arch(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
_RAY_ADDRESS = re.compile(rf"^(?:ray://{_HOST}(?::(\d+))?|{_HOST}:(\d+))$")


def ray_address(text: str) -> str:
    """``--ray-address``: ``local``, ``auto``, ``HOST:PORT`` or ``ray://HOST[:PORT]``, checked here because
    Ray itself answers a malformed one with a 40-line traceback."""
    t = text.strip()
    if t in ("local", "auto"):
        return t
    m = _RAY_ADDRESS.match(t)
    port = (m.group(1) or m.group(2)) if m else None
    if m is None or (port is not None and not 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"`{text}` is not a Ray address: write local, auto, HOST:PORT (e.g. "
                                         "10.0.0.5:6379) or ray://HOST:10001")
    return t


# --------------------------------------------------------------------------- output files
def check_writable(path: str, option: str) -> None:
    """Fail now (exit 2) when ``path`` cannot be written, so a long job never ends in a failed write.

    The folder is probed by creating and removing a file in it: permission bits do not tell the truth for
    root, read-only mounts or ACLs."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{option} {path}: is a directory; give a file name")
    folder = p.parent
    if not folder.is_dir():
        raise CliError(f"{option} {path}: the folder {folder} does not exist; create it or write elsewhere")
    if p.exists() and not os.access(p, os.W_OK):
        raise CliError(f"{option} {path}: the file is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".warpforge-probe-"):
            pass
    except OSError as e:
        raise CliError(f"{option} {path}: cannot write in {folder}: {e.strerror or e}") from e


# --------------------------------------------------------------------------- the target GPU's limits
def _local_gpu(device: int) -> tuple[str, str, int] | None:
    """(name, ``sm_XY``, memory bytes) of CUDA device ``device`` from nvidia-smi; None without one."""
    from ..gpu.backends import visible_devices

    smi = shutil.which("nvidia-smi")
    visible = visible_devices()
    if smi is None or not 0 <= device < len(visible):
        return None
    try:
        out = run_tool([smi, f"--id={visible[device].smi_id}", "--query-gpu=name,compute_cap,memory.total",
                        "--format=csv,noheader,nounits"], tool="nvidia-smi", timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = [p.strip() for p in (out.stdout.strip().splitlines() or [""])[0].split(",")]
    m = re.fullmatch(r"(\d+)\.(\d+)", parts[1]) if out.returncode == 0 and len(parts) == 3 else None
    if m is None or not parts[2].isdigit():
        return None
    return parts[0], f"sm_{m.group(1)}{m.group(2)}", int(parts[2]) * 1024 * 1024


def launch_limits(target: str | None, device: int = 0, local: bool = True) -> LaunchLimits:
    """The limits a spec is checked against: this machine's GPU ``device`` when there is one (and ``target``,
    the ``--arch``, is its architecture or not given), else those of ``target`` or sm_90. ``local=False``
    when the GPUs are elsewhere (a Ray cluster)."""
    from ..compiler.toolchain import DEFAULT_ARCH

    gpu = _local_gpu(device) if local else None
    if gpu is not None and (target is None or target.rstrip("af") == gpu[1]):
        return limits_for_arch(target or gpu[1], gpu=gpu[0], memory_bytes=gpu[2])
    return limits_for_arch(target or DEFAULT_ARCH)
