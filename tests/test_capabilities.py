"""What GPU work this process can run (``app.capabilities``), known before any job starts.

The GPUs come from nvidia-smi: here (no GPU) the real machine says "none", and an nvidia-smi written for the
test on PATH stands for a GPU machine's (its CSV is nvidia-smi's own format, as the GPU machine prints it).
"""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest

from warpforge.app.capabilities import probe
from warpforge.install import pip_command

NO_GPU = importlib.util.find_spec("pycuda") is None and not Path("/dev/nvidia0").exists()


def _fake_smi(tmp_path: Path, rows: list[str]) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(rows) + "\nEOF\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(not NO_GPU, reason="covers a machine without a GPU (CI)")
def test_without_a_gpu_optimize_is_off_with_the_reason_and_the_alternatives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "nvidia-smi").exists()))
    c = probe("local")
    assert not c.can_optimize and not c.can_profile
    assert c.reason == "no NVIDIA GPU or driver was found on this machine"
    assert c.summary() == f"no GPU: {c.reason}"
    assert "Remote-SSH" in c.advice() and "warpforge.rayAddress" in c.advice() and "--ray-address" in c.advice()
    assert c.tools()["pycuda"] == "not installed"


def test_a_ray_cluster_or_a_plugin_evaluator_can_optimize_but_never_profile_here() -> None:
    ray = probe("ray")
    assert ray.can_optimize and ray.summary() == "GPUs of a Ray cluster (checked when a job connects)"
    plug = probe("python:lsp_fixture_evaluator:make")
    assert plug.can_optimize and plug.summary() == "plug-in evaluator lsp_fixture_evaluator:make"
    assert plug.advice() == ""
    if NO_GPU:
        assert not ray.can_profile and not plug.can_profile


def test_gpus_are_read_from_nvidia_smi_honouring_cuda_visible_devices(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, ["0, GPU-aaaa, NVIDIA H100 80GB HBM3, 580.159.04",
                         "1, GPU-bbbb, NVIDIA H100 80GB HBM3, 580.159.04"])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    c = probe("local")
    assert c.gpus == ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3") and c.driver == "580.159.04"
    if importlib.util.find_spec("pycuda") is None:
        assert not c.can_optimize and "pycuda is not installed" in c.reason
        assert c.summary() == "2 × NVIDIA H100 80GB HBM3 (pycuda missing)"
        assert c.advice() == f"install pycuda on this machine: {pip_command('gpu')}"  # a checkout: pip install -e
    else:
        assert c.can_optimize and c.summary() == "2 × NVIDIA H100 80GB HBM3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert probe("local").gpus == ("NVIDIA H100 80GB HBM3",)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hidden = probe("local")
    assert hidden.gpus == () and not hidden.can_optimize
    assert hidden.reason == "CUDA_VISIBLE_DEVICES hides every GPU of this machine"


def test_the_editors_bundled_server_advises_its_own_pinned_install(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the VS Code extension's bundle there is no checkout to `pip install -e`: the advice names the
    command that installs the extension's pinned pycuda, and nothing else changes."""
    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("pycuda is installed here")
    _fake_smi(tmp_path, ["0, GPU-aaaa, NVIDIA H100 80GB HBM3, 580.159.04"])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("WARPFORGE_PYCUDA", "pycuda==2026.1")
    monkeypatch.delenv("WARPFORGE_BUNDLE", raising=False)
    assert pip_command("gpu") in probe("local").advice()  # the pin alone is not the bundle
    monkeypatch.setenv("WARPFORGE_BUNDLE", str(tmp_path))
    c = probe("local")
    assert not c.can_optimize
    assert c.advice() == ('install pycuda on this machine: VS Code command "WarpForge: Install GPU Support '
                          '(pycuda)", which installs pycuda==2026.1')
    assert "pip install" not in c.reason and "pycuda==2026.1" in c.reason
