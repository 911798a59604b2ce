"""benchmarks/anytime_bench.py (the lead's `--time 20` vs `--time 90` measurement) without a GPU: the CLI it runs
answers "cannot run here" on this machine and the run is recorded as such; the summary's arithmetic (geomeans,
the short budget's fraction, the 10 s target) on rows in the CLI's JSON shape."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_nvcc

sys.path.insert(0, str(ROOT / "benchmarks"))

import anytime_bench as ab

from warpforge.gpu.supervisor import gpu_unavailable_reason


def test_cases_and_the_command_it_runs() -> None:
    files = ab.cases("kernels", ["saxpy", "softmax"])
    assert [f.name for f in files] == ["saxpy.cu", "softmax.cu"]
    assert len(ab.cases("corpus", None)) >= 30
    with pytest.raises(SystemExit, match="no such case"):
        ab.cases("kernels", ["nope"])
    cmd = ab.command(files[0], 20, 32, Path("/tmp/s.db"), python="python3")
    assert cmd == ["python3", "-m", "warpforge", "optimize", str(files[0]), "--time", "20", "--budget", "32",
                   "--json", "--store", "/tmp/s.db"]


def _cli_json(speedup: float, first: float | None, improved: bool = True) -> str:
    return json.dumps({"kernel": "k", "improved": improved, "speedup": speedup, "search": {"evaluations": 9},
                       "first_improvement_seconds": first, "stopped": "time budget spent", "seconds": 20.1,
                       "phases": {"phases": {"profile": {"start": 0.1, "end": 5.0, "seconds": 4.9}},
                                  "profile_beside_search": True},
                       "baseline_profile": {"notice": None, "class": "memory-bound"},
                       "evaluation": {"gpu": "NVIDIA H100"}})


def test_rows_and_summary() -> None:
    f = ROOT / "kernels" / "saxpy.cu"
    rows = []
    for case, (s20, f20), (s90, f90) in [("a", (2.0, 4.0), (2.5, 3.5)), ("b", (1.0, None), (1.5, 30.0)),
                                         ("c", (3.0, 12.0), (3.0, 11.0))]:
        for t, sp, first in ((20, s20, f20), (90, s90, f90)):
            row = ab.row_of(f, t, 32, 0, _cli_json(sp, first, improved=sp > 1.0), "", 21.0)
            row["case"] = case
            rows.append(row)
    assert rows[0]["phases"] == {"profile": 4.9} and rows[0]["profile_beside_search"] is True
    assert rows[2]["speedup"] == 1.0 and rows[2]["first_improvement_s"] is None
    s = ab.summarize(rows)
    assert s["times"] == [20.0, 90.0] and s["measured_at_every_budget"] == 3
    assert s["geomean"]["20s"] == pytest.approx(math.exp((math.log(2) + math.log(3)) / 3))
    assert s["geomean"]["90s"] == pytest.approx((2.5 * 1.5 * 3.0) ** (1 / 3))
    assert s["short_over_long_geomean"] == pytest.approx(s["geomean"]["20s"] / s["geomean"]["90s"], abs=1e-3)
    assert s["meets_80_percent"] is (s["short_over_long_geomean"] >= 0.8)
    assert s["first_improvement_within_10s"] == 1 and s["improved_at_short_budget"] == 2
    text = ab.table(s)
    assert "4.0s" in text and "2.00x" in text and "first verified improvement within 10 s: 1 of 2" in text


@needs_nvcc
@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="checks the answer of a machine without a GPU")
def test_a_machine_without_a_gpu_is_recorded_as_such(tmp_path: Path) -> None:
    row = ab.run_case(ROOT / "kernels" / "saxpy.cu", 20, 4, tmp_path, timeout=300)
    assert row["rc"] == 3 and "GPU" in row["error"] and "speedup" not in row
