"""``warpforge selftest``: the shipped adversarial suite, its exit codes, and the suite on a GPU.

CPU tests: the suite's files are all there (as package data), its originals are the project's kernels,
and without a GPU the command says so and exits 3 ("could not run here"). The GPU test (``-m gpu``) runs
the whole suite through the command and expects every guard to hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from warpforge.commands.selftest import render
from warpforge.gpu.supervisor import gpu_unavailable_reason
from warpforge.selftest import ADVERSARIAL, CASES, ORIGINALS, Case, Outcome, held

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "warpforge", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)


def test_every_case_file_is_shipped_and_says_how_it_is_caught() -> None:
    assert len(CASES) >= 16
    assert len({c.file for c in CASES}) == len(CASES)
    for c in CASES:
        text = c.path.read_text(encoding="utf-8")
        assert text.startswith("//"), c.file  # the first comment says what it does and how it is caught
        assert c.original[0].is_file(), c.original
        assert c.original[1] in text, (c.file, c.original[1])  # a variant of its original's kernel


def test_the_shipped_originals_are_the_projects_kernels() -> None:
    for f in sorted(ORIGINALS.glob("*.cu")):
        assert f.read_bytes() == (ROOT / "kernels" / f.name).read_bytes(), f"{f.name} differs from kernels/"


def test_the_suite_is_package_data() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"selftest/**/*.cu"' in text
    assert ADVERSARIAL.is_relative_to(ROOT / "server" / "warpforge")


def test_the_table_names_each_candidate_its_guard_and_whether_it_held() -> None:
    outcomes = [Outcome("reduce_tail_drop.cu", "tail sensitivity (perturbed last elements)", "incorrect",
                        "incorrect", "tail sensitivity, spec size", True, 1.0),
                Outcome("gelu_nan.cu", "NaN rules of the comparison", "incorrect", "ok", "", False, 1.0)]
    console = Console(width=200, record=True)
    console.print(render(outcomes))
    text = console.export_text()
    assert "reduce_tail_drop.cu" in text and "tail sensitivity (perturbed last elements)" in text
    assert "held" in text and "FAILED" in text and "ok (expected incorrect)" in text


def test_a_guard_holds_only_with_the_expected_status_and_reason() -> None:
    case = Case("x.cu", (ORIGINALS / "gelu.cu", "gelu_forward"), "incorrect", "tail sensitivity", "g")
    assert held(case, "incorrect", "Tail sensitivity, spec size: ...")
    assert not held(case, "incorrect", "spec size: 3 elements differ")
    assert not held(case, "ok", "tail sensitivity")


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a GPU: the no-GPU path is not taken")
def test_without_a_gpu_selftest_says_so_and_exits_3() -> None:
    r = _cli("selftest")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "cannot run here" in r.stderr and "Traceback" not in r.stderr
    j = _cli("selftest", "--json")
    assert j.returncode == 3
    data = json.loads(j.stdout)
    assert data["ran"] is False and data["cases"] == len(CASES) and data["reason"]


@pytest.mark.gpu
def test_selftest_on_the_gpu_every_guard_holds() -> None:
    why = gpu_unavailable_reason()
    if why is not None:
        pytest.skip(f"needs an NVIDIA GPU and pycuda: {why}")
    r = _cli("selftest", "--json")
    data = json.loads(r.stdout)
    failed = [c for c in data["cases"] if not c["held"]]
    assert r.returncode == 0 and not failed, json.dumps(failed, indent=1) + r.stderr[-2000:]
    assert data["held"] == len(CASES)
    assert {c["file"] for c in data["cases"]} == {c.file for c in CASES}
