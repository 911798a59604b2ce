"""The exit-code contract (0 done, 1 the job failed, 2 bad input, 3 cannot run here) and the one-line errors,
run as a user runs them: the real ``warpforge`` CLI in a subprocess, on the CI machine (no GPU).

Each case is a reproduction from issue 14: it used to exit 0, end in a traceback, or fail only after the
work. Bad input must now be exit 2 with exactly one line on stderr that names the file or the option, and
nothing may be created or run on the way.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_nvcc
from warpforge.exitcodes import ExitCode
from warpforge.lsp.settings import Settings

NO_GPU = importlib.util.find_spec("pycuda") is None
no_gpu_here = pytest.mark.skipif(not NO_GPU, reason="pycuda is installed here: this case is about a machine without")


def warpforge(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The installed console script when there is one (what a user types), else ``python -m warpforge``."""
    script = Path(sys.executable).parent / "warpforge"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "warpforge"]
    env = dict(os.environ)
    env.pop("WARPFORGE_DEBUG", None)
    env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=180)


def bad_input(r: subprocess.CompletedProcess[str], *names: str) -> str:
    """Exit 2, nothing on stdout, and one stderr line (no traceback) naming every one of ``names``."""
    assert r.returncode == ExitCode.USAGE, (r.returncode, r.stderr, r.stdout)
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warpforge: error: "), r.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def kernel_file(tmp_path: Path, name: str, **subst: str) -> Path:
    """A one-kernel file whose annotation block takes ``subst`` (SIZE, VALUE, SMEM, EXTRA)."""
    values = {"SIZE": "1 << 20", "VALUE": "N", "SMEM": "", "EXTRA": "", **subst}
    text = ("// @warpforge size N = {SIZE}\n{EXTRA}"
            "// @warpforge arg n = {VALUE}\n"
            "// @warpforge arg x: in float[N]\n"
            "// @warpforge arg y: out float[N]\n"
            "// @warpforge launch grid=cdiv(N, 256), block=256{SMEM}\n"
            "__global__ void scale(const float* x, float* y, int n)\n"
            "{\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i < n) y[i] = 2.0f * x[i];\n"
            "}\n")
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the main command, no GPU
@no_gpu_here
def test_the_readme_command_prints_hints_then_exits_cannot_run_here() -> None:
    r = warpforge("optimize", "kernels/softmax.cu")
    assert r.returncode == ExitCode.UNAVAILABLE == 3, r.stderr
    assert "Traceback" not in r.stderr
    # What could be done without a GPU was done: the static findings, in the compiler format.
    assert "kernels/softmax.cu:" in r.stdout and "[WF1" in r.stdout
    assert "static findings for `softmax_rows`" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("Measuring and verifying variants needs a GPU:")


@no_gpu_here
def test_the_no_gpu_result_is_also_machine_readable() -> None:
    import json

    r = warpforge("optimize", "kernels/softmax.cu", "--json")
    assert r.returncode == ExitCode.UNAVAILABLE
    data = json.loads(r.stdout)
    assert data["gpu"] is None and data["findings"] and "needs an NVIDIA GPU" in data["message"]


@no_gpu_here
@pytest.mark.parametrize("command", ["bench", "profile"])
def test_other_gpu_commands_without_a_gpu_exit_cannot_run_here(command: str) -> None:
    r = warpforge(command, "kernels/saxpy.cu", "--no-ncu" if command == "profile" else "--json")
    assert r.returncode == ExitCode.UNAVAILABLE, r.stderr
    assert "Traceback" not in r.stderr and "needs an NVIDIA GPU" in r.stderr + r.stdout


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize(("option", "value"), [
    ("--budget", "-1"), ("--budget", "lots"), ("--time", "-5"), ("--time", "nan"), ("--target", "-2"),
    ("--target", "1"), ("--arch", "sm_foo"), ("--ray-address", "bogus:::"), ("--ray-address", "head:99999"),
    ("--device", "-1"), ("--gpus", "0,x"),
])
def test_bad_options_are_one_line_before_anything_runs(option: str, value: str) -> None:
    # On this machine a search cannot run (exit 3): exit 2 shows the option was refused before that point.
    bad_input(warpforge("optimize", "kernels/softmax.cu", option, value), option, value)


@pytest.mark.parametrize(("command", "option", "value"), [
    ("bench", "--seconds", "-1"), ("verify", "--seconds", "0"), ("profile", "--arch", "sm_x"),
    ("hints", "--arch", "90.x"), ("bench", "--device", "two"),
])
def test_the_other_commands_check_their_options_too(command: str, option: str, value: str) -> None:
    extra = ["--candidate", "kernels/saxpy.cu"] if command == "verify" else []
    bad_input(warpforge(command, "kernels/saxpy.cu", *extra, option, value), option, value)


def test_a_missing_argument_is_one_line() -> None:
    bad_input(warpforge("optimize"), "optimize", "FILE")


def test_a_report_that_cannot_be_written_is_refused_before_the_search(tmp_path: Path) -> None:
    report = tmp_path / "missing" / "r.html"
    bad_input(warpforge("optimize", "kernels/softmax.cu", "--report", str(report)), "--report", str(report))
    assert not report.parent.exists()
    bad_input(warpforge("optimize", "kernels/softmax.cu", "--report", str(tmp_path)), "--report", "is a directory")


@pytest.mark.parametrize("address", ["local", "auto", "10.0.0.5:6379", "ray://head.example:10001", "[::1]:6379"])
def test_good_ray_addresses_pass_the_check(address: str) -> None:
    from warpforge.commands.inputs import ray_address

    assert ray_address(address) == address


# --------------------------------------------------------------------------- input files
def test_dev_zero_is_refused_at_once() -> None:
    bad_input(warpforge("kernels", "/dev/zero"), "/dev/zero is not a CUDA source (binary)")


@pytest.mark.parametrize("command", ["kernels", "hints", "spec", "optimize"])
def test_a_binary_file_is_one_line_not_hundreds_of_syntax_errors(tmp_path: Path, command: str) -> None:
    binary = tmp_path / "a.out.cu"
    binary.write_bytes(Path(sys.executable).resolve().read_bytes()[:200_000])
    bad_input(warpforge(command, str(binary)), f"{binary} is not a CUDA source (binary)")


def test_a_non_utf8_candidate_names_the_file_line_and_column(tmp_path: Path) -> None:
    cand = tmp_path / "variant.cu"
    cand.write_bytes(b"// variant\n// caf\xe9\n__global__ void saxpy(int n) {}\n")
    line = bad_input(warpforge("verify", "kernels/saxpy.cu", "--candidate", str(cand)), f"{cand}:2:7:")
    assert "not UTF-8" in line and "0xe9" in line


def test_a_huge_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    huge = tmp_path / "huge.cu"
    with huge.open("w") as f:
        f.write(("// " + "x" * 1021 + "\n") * (17 * 1024))
    bad_input(warpforge("spec", str(huge)), str(huge), "larger than 16 MiB")


def test_a_kernel_that_does_not_parse_is_named_with_its_syntax_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.cu"
    broken.write_text("#include <cstdio>\n\n__global__ void scale(float* x, int n)\n{\n    x[0] = ; )\n}\n")
    for command in ("spec", "optimize", "kernels", "hints"):
        line = bad_input(warpforge(command, str(broken)), f"{broken}:3: the kernel `scale` at line 3 does not parse")
        assert "syntax error near `= ; )` at line 5" in line and "no __global__ kernels" not in line


def test_a_file_without_kernels_still_says_so(tmp_path: Path) -> None:
    host = tmp_path / "host.cu"
    host.write_text("int main() { return 0; }\n")
    bad_input(warpforge("spec", str(host)), f"{host}: no __global__ kernels found")


# --------------------------------------------------------------------------- spec values
@pytest.mark.parametrize(("subst", "line", "message"), [
    ({"SIZE": "1 << 62"}, 5, "grid.x = 18014398509481984 is above CUDA's limit of 2147483647"),
    ({"VALUE": "1 << 40"}, 2, "`n` = 1099511627776 does not fit its C type (int32"),
    ({"SMEM": ", smem=1 << 40"}, 5, "dynamic shared memory of 1099511627776 bytes is above the "),
    ({"EXTRA": "// @warpforge size N = 4096\n"}, 2, "size `N` is defined twice (first at line 1)"),
])
def test_spec_values_a_gpu_cannot_run_are_errors_at_their_line(tmp_path: Path, subst: dict[str, str], line: int,
                                                               message: str) -> None:
    path = kernel_file(tmp_path, "k.cu", **subst)
    for command in ("spec", "optimize"):
        bad_input(warpforge(command, str(path)), f"{path}:{line}: {message}")


# --------------------------------------------------------------------------- the index
@pytest.mark.parametrize("command", [["stats"], ["search", "softmax"]])
def test_reading_an_index_in_a_missing_folder_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    index = tmp_path / "missing" / "x.sqlite"
    bad_input(warpforge("index", *command, "--index", str(index)), str(index), "does not exist")
    assert not index.parent.exists()


def test_reading_a_missing_index_says_how_to_build_one(tmp_path: Path) -> None:
    index = tmp_path / "x.sqlite"
    bad_input(warpforge("index", "stats", "--index", str(index)), str(index), "warpforge index add")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the net under the checks
def test_an_unexpected_exception_is_one_line_with_a_way_to_the_traceback(capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge import cli

    def boom(args: Any) -> int:
        raise RuntimeError("the disk\nmelted")

    monkeypatch.setattr(cli, "cmd_kernels", boom)
    monkeypatch.delenv("WARPFORGE_DEBUG", raising=False)
    assert cli.main(["kernels", "kernels/saxpy.cu"]) == ExitCode.FAILED
    err = capsys.readouterr().err
    assert err == ("warpforge: error: unexpected RuntimeError: the disk melted (run with WARPFORGE_DEBUG=1 for "
                   "the traceback)\n")
    monkeypatch.setenv("WARPFORGE_DEBUG", "1")
    assert cli.main(["kernels", "kernels/saxpy.cu"]) == ExitCode.FAILED
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("for the traceback)")


# --------------------------------------------------------------------------- editor settings
def test_settings_out_of_range_or_of_the_wrong_type_are_refused_with_a_message() -> None:
    s = Settings()
    changed = s.update({"warpforge": {"timeBudget": -5, "budget": "lots", "strategy": "mcts"}})
    assert changed == ["strategy"]
    assert (s.time_budget, s.budget) == (300.0, 48)
    rejected = s.take_rejected()
    assert len(rejected) == 2 and s.take_rejected() == []
    assert rejected[0] == "setting warpforge.timeBudget = -5 ignored: must be above 0.0; keeping 300.0"
    assert rejected[1] == "setting warpforge.budget = 'lots' ignored: expected a whole number; keeping 48"
    assert s.update({"budget": 0, "timeBudget": float("inf"), "debounce": -1, "arch": 90}) == []
    assert len(s.take_rejected()) == 4
    assert s.update({"budget": 12, "timeBudget": 60}) == ["budget", "time_budget"]
    assert (s.budget, s.time_budget) == (12, 60.0) and "_rejected" not in s.public()


# --------------------------------------------------------------------------- a search that cannot start
class _FixtureBackend:
    """What the CLI reads of a backend, for the deterministic fixture evaluator (no GPU)."""

    kind = "fixture"
    device_count = 1
    device_losses = 0

    def __init__(self) -> None:
        self.notes: list[str] = []

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind}


class _FixtureJob:
    """The LSP tests' deterministic evaluator (real nvcc builds, synthetic speedups) as the CLI's evaluator."""

    def __init__(self, req: Any) -> None:
        from lsp_fixture_evaluator import make

        self.inner = make(req)
        self.backend = _FixtureBackend()
        self.evaluated = 0

    async def evaluate(self, candidate: Any) -> Any:
        self.evaluated += 1
        return await self.inner.evaluate(candidate)

    async def close(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def fixture_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[_FixtureJob]:
    """``optimize`` with the fixture evaluator in place of this machine's (absent) GPUs."""
    from warpforge.commands import optimize as cmd

    jobs: list[_FixtureJob] = []

    def evaluator(args: Any, req: Any, workspace: Path) -> _FixtureJob:
        jobs.append(_FixtureJob(req))
        return jobs[-1]

    monkeypatch.setattr(cmd, "_why_not_here", lambda args: None)
    monkeypatch.setattr(cmd, "_evaluator", evaluator)
    monkeypatch.setenv("WARPFORGE_FIXTURE_DELAY", "0")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    return jobs


@needs_nvcc
def test_optimize_fails_when_the_original_kernel_cannot_be_evaluated(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, fixture_gpu: list[_FixtureJob]) -> None:
    from warpforge.cli import main

    path = kernel_file(tmp_path, "k.cu")
    path.write_text(path.read_text().replace("2.0f * x[i]", "2.0f * x[i] + not_declared"))
    code = main(["optimize", str(path), "--budget", "4", "--time", "60"])
    out, _ = capsys.readouterr()
    assert code == ExitCode.FAILED
    assert "stopped: the original kernel could not be evaluated" in out and fixture_gpu[0].evaluated == 1


@needs_nvcc
def test_optimize_that_ran_exits_0_and_a_bad_report_costs_no_evaluation(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, fixture_gpu: list[_FixtureJob]) -> None:
    from warpforge.cli import main

    path = kernel_file(tmp_path, "k.cu")
    report = tmp_path / "r.html"
    assert main(["optimize", str(path), "--budget", "3", "--time", "60", "--report", str(report)]) == ExitCode.OK
    assert report.read_text().startswith("<!") and fixture_gpu[0].evaluated >= 2
    capsys.readouterr()
    assert main(["optimize", str(path), "--report", str(tmp_path / "no" / "r.html")]) == ExitCode.USAGE
    assert len(fixture_gpu) == 1  # no evaluator was even made for the refused run
