"""Nothing WarpForge reads in-process can block on a FIFO or a device (``compiler.files``).

Found by the test suite itself: cross-file spec inference scanned a temporary folder holding another test's FIFO
named like a source file, and ``warpforge spec`` waited forever for a writer. In the editor the same read would
starve the language server, the hole the compile sandbox closed for nvcc."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from warpforge.compiler.files import read_regular, read_text_regular
from warpforge.cuda import parse
from warpforge.cuda.types import file_aliases
from warpforge.cuda.workspace import find_launches

KERNEL = "__global__ void axpy(float* y, const float* x, float a, int n) {\n" \
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += a * x[i];\n}\n"


def _returns_within(fn: Callable[[], Any], seconds: float = 10.0) -> Any:
    """``fn()``'s result, failing (not hanging) when it does not return in time."""
    out: list[Any] = []
    err: list[BaseException] = []

    def call() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed to the caller's thread
            err.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    if err:
        raise err[0]
    return out[0]


def test_a_fifo_or_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / "x.cuh"
    os.mkfifo(fifo)
    for target in (fifo, Path("/dev/zero")):
        with pytest.raises(OSError):
            _returns_within(lambda t=target: read_regular(t))  # type: ignore[misc]
    (tmp_path / "ok.cuh").write_text("typedef float real;\n")
    assert read_text_regular(tmp_path / "ok.cuh") == "typedef float real;\n"
    (tmp_path / "big.cuh").write_bytes(b"x" * 2048)
    with pytest.raises(OSError):
        read_regular(tmp_path / "big.cuh", limit=1024)


def test_a_workspace_scan_skips_a_fifo_named_like_a_source(tmp_path: Path) -> None:
    (tmp_path / "ops.cu").write_text(KERNEL)
    (tmp_path / "main.cu").write_text("void run(float* y, float* x) { axpy<<<4096, 256>>>(y, x, 0.5f, 1 << 20); }\n")
    os.mkfifo(tmp_path / "stuck.cu")
    found = _returns_within(lambda: find_launches(tmp_path, "axpy", exclude=tmp_path / "ops.cu"))
    assert [f.path.name for f in found.files] == ["main.cu"]
    assert any("stuck.cu: not a regular file" in s for s in found.skipped), found.skipped


def test_a_header_that_is_a_fifo_does_not_block_type_resolution(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "real.h")
    src = '#include "real.h"\n' + KERNEL
    (tmp_path / "k.cu").write_text(src)
    aliases = _returns_within(lambda: file_aliases(src, parse(src.encode()), tmp_path / "k.cu"))
    assert "real" not in aliases


def test_the_cli_spec_ignores_a_fifo_beside_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "ops.cu").write_text(KERNEL)
    (tmp_path / "main.cu").write_text(
        "int main() {\n  int n = 1 << 20;\n  float *y, *x;\n  cudaMalloc(&y, n * sizeof(float));\n"
        "  cudaMalloc(&x, n * sizeof(float));\n  axpy<<<(n + 255) / 256, 256>>>(y, x, 0.5f, n);\n}\n")
    os.mkfifo(tmp_path / "zz.cu")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    r = subprocess.run([sys.executable, "-m", "warpforge", "spec", str(tmp_path / "ops.cu"), "--json"],
                       capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "1 << 20" in r.stdout or "1048576" in r.stdout, r.stdout
