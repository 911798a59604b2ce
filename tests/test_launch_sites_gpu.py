"""On the GPU: after accepting a warp-per-row variant across the workspace, the project's own check passes
for every launcher WarpForge rewrote, and fails for the one it labelled "needs a launch change" (so the label
is needed, not decorative). The original project passes everywhere.

CPU side (the rewrite, and the build with nvcc): tests/test_launch_sites.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_launch_sites import PROJECT, accept_into, build_check

pytestmark = pytest.mark.gpu


def _run(binary: Path, *launchers: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *launchers], capture_output=True, text=True, timeout=120)


def test_every_rewritten_launcher_is_correct_and_the_labelled_one_is_not(tmp_path: Path) -> None:
    original = tmp_path / "original"
    shutil.copytree(PROJECT, original)
    build_check(original, original / "check")
    r = _run(original / "check", "launch_chevron", "launch_api", "launch_ex", "row_sum_async", "launch_any_block")
    assert r.returncode == 0, r.stdout

    accepted = tmp_path / "accepted"
    shutil.copytree(PROJECT, accepted)
    manual = accept_into(accepted)
    assert [m.split(": ")[0] for m in manual] == ["src/launch.cpp:26"]
    build_check(accepted, accepted / "check")
    r = _run(accepted / "check")  # every launcher but launch_any_block
    assert r.returncode == 0, r.stdout
    assert r.stdout.count(": ok") == 4
    r = _run(accepted / "check", "launch_any_block")
    assert r.returncode != 0 and "launch_any_block: row" in r.stdout, r.stdout
