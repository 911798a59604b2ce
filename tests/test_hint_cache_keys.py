"""Hint cache keys hold everything a result depends on (issue 29, item 2): the project's build (warpforge.toml /
compile_commands.json), the contents of the headers the unit reaches, the tools; a failed build is never kept on
disk. Checked with the real nvcc, in this process and in fresh ``warpforge hints`` processes sharing one cache
(the editor's and the CLI's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warpforge.compiler.toolchain import ToolMissing, toolchain
from warpforge.profile.hints import analyze_source

SERVER = Path(__file__).resolve().parent.parent / "server"


def _nvcc() -> bool:
    try:
        toolchain()
    except ToolMissing:
        return False
    return True


pytestmark = pytest.mark.skipif(not _nvcc(), reason="needs nvcc")

KERNEL = """#include "util.cuh"

__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
"""
HEADER = """#pragma once
#ifndef FACTOR
#error FACTOR is set by the build
#endif
__device__ inline float twice(float x) { return FACTOR * x; }
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "util.cuh").write_text(HEADER, encoding="utf-8")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ops.cu").write_text(KERNEL, encoding="utf-8")
    return tmp_path


def errors_here(f: Path) -> list[str]:
    rep = analyze_source(str(f), f.read_bytes(), arch="sm_90")
    return [x.message for x in rep.findings if x.code == "WF000"]


def errors_cli(f: Path, cache: Path) -> list[str]:
    """``warpforge hints --json`` in a new process on the same cache (what a restarted editor sees)."""
    env = {**os.environ, "WARPFORGE_CACHE": str(cache), "PYTHONPATH": str(SERVER)}
    out = subprocess.run([sys.executable, "-m", "warpforge", "hints", "--json", "--arch", "sm_90", str(f)],
                         env=env, capture_output=True, text=True, timeout=120)
    data = json.loads(out.stdout)
    return [x["message"] for r in data for x in r["findings"] if x["code"] == "WF000"]


def test_configuring_the_build_clears_the_errors_here_and_in_a_new_process(project: Path) -> None:
    f = project / "src" / "ops.cu"
    cache = project / "cache"
    assert errors_here(f) == ["util.cuh: No such file or directory"]
    assert errors_cli(f, cache) == ["util.cuh: No such file or directory"]
    # the include folder but not the define: the header's own #error, on the #include line
    (project / "warpforge.toml").write_text('[build]\ninclude = ["include"]\n', encoding="utf-8")
    assert errors_here(f) == ["#error FACTOR is set by the build (in util.cuh:3)"]
    # the project's define, from a CMake-style database the toml names: no error, here or after a restart
    db = project / "out" / "compile_commands.json"
    db.parent.mkdir()
    db.write_text(json.dumps([{"directory": str(project), "file": str(f),
                               "command": f"nvcc -I{project / 'include'} -DFACTOR=2.0f -c {f}"}]), encoding="utf-8")
    (project / "warpforge.toml").write_text('[build]\ncompile_commands = "out/compile_commands.json"\n',
                                            encoding="utf-8")
    assert errors_here(f) == []
    assert errors_cli(f, cache) == []
    # the build's flags are in the key: another value compiles again (and still compiles)
    db.write_text(db.read_text().replace("-DFACTOR=2.0f", "-DFACTOR=3.0f"), encoding="utf-8")
    assert errors_here(f) == []


def test_a_header_edit_compiles_again(project: Path) -> None:
    f = project / "src" / "ops.cu"
    (project / "warpforge.toml").write_text('[build]\ninclude = ["include"]\ndefines = { FACTOR = "2.0f" }\n',
                                            encoding="utf-8")
    assert errors_here(f) == []
    header = project / "include" / "util.cuh"
    header.write_text(HEADER.replace("FACTOR * x", "FACTOR * nope"), encoding="utf-8")
    assert errors_here(f) == ['identifier "nope" is undefined (in util.cuh:5)']
    header.write_text(HEADER, encoding="utf-8")
    assert errors_here(f) == []


def test_failed_builds_are_not_kept_on_disk(project: Path) -> None:
    f = project / "src" / "ops.cu"
    cache = project / "cache"

    def stored() -> list[Path]:
        return sorted(cache.rglob("*.json"))

    assert errors_here(f)
    assert stored() == []  # neither the hints nor the build cache kept the failure
    (project / "warpforge.toml").write_text('[build]\ninclude = ["include"]\ndefines = { FACTOR = "2.0f" }\n',
                                            encoding="utf-8")
    assert errors_here(f) == []
    kept = stored()
    assert kept and all(json.loads(p.read_text())["ok"] for p in kept)  # a success is kept, in both caches
    assert any("hints" in p.relative_to(cache).parts for p in kept)
    assert any(p.name == "result.json" for p in kept)
