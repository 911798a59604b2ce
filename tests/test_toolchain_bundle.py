"""Tools found where WarpForge ships them (issue 29, item 3): the .vsix bundle carries the nvidia-cuda-nvdisasm
wheel in ``bundled/libs/nvidia/cu13/bin/``, on the server's PYTHONPATH but not in any site-packages and not on
PATH. A clean interpreter (``-S``: no site-packages, a bare PATH) running WarpForge from such a bundle must find
it there, give it back its execute bit if an unzip dropped it, and, when it is missing, advise what fits a
bundle (reinstall the extension), not a pip command for a package the user never installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from warpforge.compiler.toolchain import ToolMissing, find_tool

SERVER = Path(__file__).resolve().parent.parent / "server"


def _real_nvdisasm() -> Path | None:
    try:
        return find_tool("nvdisasm")
    except ToolMissing:
        return None


REAL = _real_nvdisasm()


def bundle(tmp_path: Path, with_tool: bool) -> Path:
    """A bundle laid out as extension/bundle/bundle.py builds it: bundled/libs holds warpforge and the wheel's
    ``nvidia/cu13/bin/nvdisasm`` (copied without its execute bit, as an unzip may leave it)."""
    root = tmp_path / "extension" / "bundled"
    libs = root / "libs"
    shutil.copytree(SERVER / "warpforge", libs / "warpforge", ignore=shutil.ignore_patterns("__pycache__"))
    if with_tool:
        assert REAL is not None
        dest = libs / "nvidia" / "cu13" / "bin" / "nvdisasm"
        dest.parent.mkdir(parents=True)
        shutil.copyfile(REAL, dest)
        dest.chmod(0o644)
    return root


def run_clean(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a clean interpreter that sees only the bundle (as the extension starts its server)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "libs"), "WARPFORGE_BUNDLE": str(root),
           "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(REAL is None, reason="needs nvdisasm (pip install nvidia-cuda-nvdisasm) to copy into the bundle")
def test_the_bundled_nvdisasm_is_found_and_runs(tmp_path: Path) -> None:
    root = bundle(tmp_path, with_tool=True)
    out = run_clean(root, "from warpforge.compiler.toolchain import find_tool, installed_from\n"
                          "import subprocess\n"
                          "p = find_tool('nvdisasm')\n"
                          "print(installed_from()); print(p)\n"
                          "print(subprocess.run([str(p), '--version'], capture_output=True, text=True).stdout)")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "bundle"
    assert Path(lines[1]) == root / "libs" / "nvidia" / "cu13" / "bin" / "nvdisasm"
    assert "nvdisasm" in out.stdout.lower() and "release" in out.stdout.lower()  # it ran
    assert os.access(lines[1], os.X_OK)


def test_a_bundle_without_it_advises_reinstalling_the_extension(tmp_path: Path) -> None:
    root = bundle(tmp_path, with_tool=False)
    out = run_clean(root, "from warpforge.compiler.toolchain import find_tool, ToolMissing\n"
                          "try:\n    find_tool('nvdisasm')\nexcept ToolMissing as e:\n    print(e)")
    assert out.returncode == 0, out.stderr
    assert "ships nvdisasm in its bundle" in out.stdout and "reinstall the extension" in out.stdout
    assert "pip install" not in out.stdout


def test_outside_a_bundle_the_advice_names_this_interpreter(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SERVER), "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run([sys.executable, "-S", "-c", "from warpforge.compiler.toolchain import find_tool, "
                          "ToolMissing\ntry:\n    find_tool('nvdisasm')\nexcept ToolMissing as e:\n    print(e)"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{sys.executable} -m pip install nvidia-cuda-nvdisasm" in out.stdout
