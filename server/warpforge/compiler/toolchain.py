"""Find the CUDA tools (nvcc, nvdisasm, ncu, compute-sanitizer) and the default target architecture.

Why a module: the language server, the CLI and worker processes must all agree on which nvcc they use
(a cubin cached from one toolkit must not be reused by another), and a missing tool must produce one
clear message saying what to install, never a traceback.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .sandbox import run_tool


class ToolMissing(RuntimeError):
    """A CUDA tool could not be found; the message says how to get it."""

    def __init__(self, tool: str, hint: str) -> None:
        self.tool = tool
        self.hint = hint
        super().__init__(f"{tool} not found: {hint}")


class UnsafeArgument(ValueError):
    """An argument for a CUDA tool that a shell inside the tool could interpret: the tool is not run.

    nvcc runs cicc, ptxas and the host preprocessor through ``sh -c`` with -D values and file names inside
    double quotes (so ``$(...)``, backticks, ``"`` and ``\\`` still act there) and some options (-Xptxas)
    not quoted at all. Nothing from a file may reach that shell, so every tool call goes through
    ``guard_argv`` first.
    """

    def __init__(self, tool: str, argument: str, why: str) -> None:
        self.tool = tool
        self.argument = argument
        self.why = why
        shown = argument if len(argument) <= 80 else argument[:77] + "..."
        super().__init__(f"refusing to run {tool}: the argument {shown!r} {why}")


#: what a POSIX shell still interprets inside double quotes, plus line breaks and NUL (a newline ends a
#: command in an unquoted context; NUL cannot be passed at all)
SHELL_QUOTED_SPECIALS = frozenset('$`"\\\n\r\0')


def shell_special(text: str) -> str | None:
    """The first character of ``text`` a shell would interpret inside double quotes, or None."""
    return next((ch for ch in text if ch in SHELL_QUOTED_SPECIALS), None)


def describe_char(ch: str) -> str:
    """A character as a reader can see it in a one-line message."""
    return {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL byte"}.get(ch, f"`{ch}`")


def guard_argv(tool: str, argv: Sequence[str]) -> list[str]:
    """``argv`` unchanged when no element holds a shell-interpreted character; else ``UnsafeArgument``.

    The single lowest-level check every CUDA tool call passes (nvcc, nvdisasm, ncu, compute-sanitizer), the
    executable's own path included: whatever validation sits above it, a value that would let a tool's
    internal shell run a command never reaches the tool.
    """
    out = [str(a) for a in argv]
    for arg in out:
        ch = shell_special(arg)
        if ch is not None:
            raise UnsafeArgument(tool, arg, f"contains {describe_char(ch)}, which a shell would interpret")
    return out


_HINTS = {
    "nvcc": "install the CUDA toolkit (and put its bin/ on PATH or set CUDA_HOME), or `pip install nvidia-cuda-nvcc`",
    "nvdisasm": "`pip install nvidia-cuda-nvdisasm` (a WarpForge dependency), or install the CUDA toolkit",
    "cuobjdump": "`pip install nvidia-cuda-cuobjdump`, or install the CUDA toolkit",
    "ncu": "install Nsight Compute (it ships with the CUDA toolkit) and put `ncu` on PATH",
    "compute-sanitizer": "install the CUDA toolkit and put compute-sanitizer on PATH",
}
#: the folders of pip's nvidia-* wheels that hold executables, under a site-packages folder's ``nvidia/``
_WHEEL_BIN = ("cu13", "cu12", "cuda_nvcc", "cuda_nvdisasm", "cuda_cuobjdump")
#: set by the VS Code extension when its bundled server runs (the bundle's folder)
BUNDLE_ENV = "WARPFORGE_BUNDLE"


def _site_dirs() -> list[Path]:
    """Every folder this interpreter imports from: its site-packages, and PYTHONPATH's folders, where the VS Code
    extension's bundle puts the server's libraries (``bundled/libs``, ``bundled/libs-cp3xx``) and with them the
    nvidia-cuda-nvdisasm wheel."""
    out: list[Path] = []
    for entry in [*(sysconfig.get_paths()[k] for k in ("purelib", "platlib")), *sys.path]:
        if not entry:
            continue
        p = Path(entry)
        if p not in out and p.is_dir():
            out.append(p)
    bundle = os.environ.get(BUNDLE_ENV)
    if bundle and Path(bundle).is_dir():
        out += sorted(d for d in Path(bundle).iterdir() if d.is_dir() and d.name.startswith("libs") and d not in out)
    return out


def _pip_bin_dirs() -> list[Path]:
    """Where pip's nvidia-* wheels put their executables (not on PATH), in every folder this interpreter
    imports from (so the .vsix bundle's nvdisasm is found with nothing else installed)."""
    out: list[Path] = []
    for site in _site_dirs():
        for sub in _WHEEL_BIN:
            d = site / "nvidia" / sub / "bin"
            if d.is_dir() and d not in out:
                out.append(d)
    # The interpreter's own prefix (a venv) may hold them too.
    out.append(Path(sys.prefix) / "bin")
    return out


def installed_from() -> str:
    """How this WarpForge was installed: "bundle" (the VS Code extension's .vsix), "checkout" (a source tree,
    ``pip install -e``) or "pip" (an installed package): the advice for a missing tool depends on it."""
    here = Path(__file__).resolve()
    bundle = os.environ.get(BUNDLE_ENV)
    if (bundle and here.is_relative_to(Path(bundle).resolve())) or "bundled" in here.parts:
        return "bundle"
    if (here.parents[3] / "pyproject.toml").is_file():
        return "checkout"
    return "pip"


def missing_advice(name: str) -> str:
    """What to do about a missing tool, for the way WarpForge was installed (see ``installed_from``)."""
    how = installed_from()
    pip = f"`{sys.executable} -m pip install"
    if how == "bundle":
        if name == "nvdisasm":
            return ("the WarpForge extension ships nvdisasm in its bundle, but it is missing or not executable "
                    "there: reinstall the extension, or install the CUDA toolkit and put its bin/ on PATH")
        if name == "nvcc":
            return ("install the CUDA toolkit (nvcc is not bundled with the extension) and put its bin/ on PATH, "
                    "set CUDA_HOME, or set `warpforge.nvccPath`")
        return _HINTS.get(name, "install the CUDA toolkit")
    if name in ("nvdisasm", "cuobjdump"):
        return (f"{pip} nvidia-cuda-{name}` in the environment that runs WarpForge ({sys.prefix})"
                + (" (a WarpForge dependency)" if name == "nvdisasm" else "") + ", or install the CUDA toolkit")
    return _HINTS.get(name, "install the CUDA toolkit")


def _executable(p: Path) -> bool:
    """``p`` is a file that can be run; a bundled one whose execute bit an unzip dropped gets it back."""
    if not p.is_file():
        return False
    if os.access(p, os.X_OK):
        return True
    try:
        p.chmod(p.stat().st_mode | 0o111)
    except OSError:
        return False
    return os.access(p, os.X_OK)


def find_tool(name: str, override: str | None = None) -> Path:
    """Locate a CUDA tool: explicit override, PATH, CUDA_HOME/CUDA_PATH, /usr/local/cuda, pip wheels (in the
    interpreter's site-packages and on its import path, the .vsix bundle's included)."""
    if override:
        p = Path(override)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise ToolMissing(name, f"the configured path {override} is not an executable file")
    found = shutil.which(name)
    if found:
        return Path(found)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and (Path(root) / "bin" / name).is_file():
            return Path(root) / "bin" / name
    candidates = [Path("/usr/local/cuda/bin"), *_pip_bin_dirs()]
    if name == "ncu":
        candidates += sorted(Path("/opt/nvidia").glob("nsight-compute/*"), reverse=True)
    for d in candidates:
        if _executable(d / name):
            return d / name
    raise ToolMissing(name, missing_advice(name))


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    version: str

    @property
    def key(self) -> str:
        """Identifies the compiler for cache keys."""
        return f"{self.nvcc}:{self.version}"


@functools.lru_cache(maxsize=8)
def toolchain(nvcc_override: str | None = None) -> Toolchain:
    nvcc = find_tool("nvcc", nvcc_override)
    try:
        out = run_tool([str(nvcc), "--version"], tool="nvcc", timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolMissing("nvcc", f"{nvcc} does not run ({e})") from e
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return Toolchain(nvcc, m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown")


@functools.lru_cache(maxsize=1)
def local_gpu_arch() -> str | None:
    """``sm_XY`` of the first visible GPU, from nvidia-smi (no CUDA import in this process)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = run_tool([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], tool="nvidia-smi", timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    m = re.match(r"(\d+)\.(\d+)", line)
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


DEFAULT_ARCH = "sm_90"


def default_arch(configured: str | None = None) -> str:
    """The configured arch, else the local GPU's, else sm_90 (Hopper: the common optimization target)."""
    if configured:
        return normalize_arch(configured)
    return local_gpu_arch() or DEFAULT_ARCH


def normalize_arch(arch: str) -> str:
    a = arch.strip().lower()
    if re.fullmatch(r"\d+\.\d+", a):
        a = "sm_" + a.replace(".", "")
    if re.fullmatch(r"\d{2,3}a?", a):
        a = "sm_" + a
    if not re.fullmatch(r"sm_\d{2,3}[af]?", a):
        raise ValueError(f"unknown GPU architecture `{arch}`: write it like sm_90, sm_80 or 9.0")
    return a


_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def define_problem(name: str, value: str) -> str | None:
    """Why ``-Dname=value`` may not go to nvcc (None when it may).

    The value reaches a shell inside double quotes, so `$`, backticks, quotes, backslashes and line breaks
    are refused; a comma too, because nvcc splits ``-D`` values at commas (``-DX=max(1,2)`` would define
    ``X=max(1`` and a macro ``2)``).
    """
    if not _MACRO.fullmatch(name):
        return f"the macro name `{name}` is not a C identifier"
    ch = shell_special(value)
    if ch is not None:
        return f"the value of -D{name} contains {describe_char(ch)}"
    if "," in value:
        return f"the value of -D{name} (`{value}`) contains a comma, which nvcc splits -D values at"
    return None
