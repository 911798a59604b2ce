"""The profile stage without a GPU: parsers, classifier and WF2xx analyzers on REAL Nsight Compute output.

The pages under ``tests/fixtures/ncu/<kernel>/`` (``details.csv``, ``raw.csv``, ``source.csv``) were exported
on the GPU machine (an NVIDIA H200, Nsight Compute 2025.3.1) by ``python -m warpforge.profile.ncu record``
(``tests/fixtures/ncu/record.sh``) from one profiled launch of each kernel: the reference kernels of
``kernels/`` and six small kernels in ``tests/fixtures/ncu_kernels/`` that each show one problem (a tiny grid,
bank conflicts, a local array, divergence, low occupancy, a register-tiled SGEMM). ``ceilings.json`` is that
GPU's measured ceilings. The collection plumbing (``ncu.collect`` and ``profile_kernel``) runs against a
stand-in ``ncu`` (``fake_ncu.py``) that runs the real harness under the fake pycuda and serves those pages.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import NVCC, ROOT, needs_nvcc
from warpforge.cli import main
from warpforge.profile import ncu as ncu_mod
from warpforge.profile import profiler
from warpforge.profile.context import KernelContext
from warpforge.profile.findings import CODES, Finding
from warpforge.profile.hints import analyze_file
from warpforge.profile.ncu_parse import (
    SECTORS_EXCESSIVE,
    load_profile,
    number,
    parse_details,
    parse_raw,
    parse_source,
)
from warpforge.profile.profiler import ProfileReport, render_profile
from warpforge.profile.roofline import (
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    OCCUPANCY_LIMITED,
    Ceilings,
    Perf,
    blocks_per_sm,
    cached_ceilings,
    classify,
    from_ncu,
    occupancy_limiter,
    perf_from_timing,
    runs_for,
)

NCU = ROOT / "tests" / "fixtures" / "ncu"
FIXTURE_KERNELS = sorted(p.name for p in NCU.iterdir() if (p / "details.csv").is_file())
CEILINGS = Ceilings.from_json(json.loads((NCU / "ceilings.json").read_text()))
FAKE_NCU = NCU / "fake_ncu.py"
FAKE_PYCUDA = ROOT / "tests" / "fake_pycuda"
HAS_NVDISASM = shutil.which("nvdisasm") is not None or NVCC is not None


def meta(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NCU / stem / "meta.json").read_text())
    return data


_RENDERED: dict[str, ProfileReport] = {}


def rendered(stem: str) -> ProfileReport:
    """The report for a recorded profile, as ``warpforge profile --from`` renders it (cached per module)."""
    if stem not in _RENDERED:
        m = meta(stem)
        _RENDERED[stem] = render_profile(str(ROOT / m["file"]), m["kernel"], load_profile(NCU / stem), CEILINGS,
                                         use_compiler=NVCC is not None)
    return _RENDERED[stem]


def found(stem: str, code: str) -> list[Finding]:
    return [f for f in rendered(stem).findings if f.code == code]


def lines(stem: str, code: str) -> list[int]:
    return [f.line for f in found(stem, code)]


# ============================================================================================ parsers
def test_numbers_drop_thousands_separators_and_refuse_text() -> None:
    assert number("268,451,328") == 268451328.0
    assert number("3,198,508,918.62") == pytest.approx(3198508918.62)
    assert number("69.61") == 69.61
    assert number("1e-05") == pytest.approx(1e-5)
    for text in ("", "-", "n/a", "PolicySpread", "32(2)", "(256, 1, 1)", None):
        assert number(text) is None


def test_details_page_gives_sections_rules_and_the_launch() -> None:
    d = parse_details((NCU / "saxpy" / "details.csv").read_text())
    assert d.kernel == "saxpy" and d.cc == "9.0"
    assert d.block == (256, 1, 1) and d.grid == (131072, 1, 1)
    assert d.value("GPU Speed Of Light Throughput", "Duration") == 114816.0
    assert d.value("GPU Speed Of Light Throughput", "DRAM Throughput") == 69.61
    assert d.value("Launch Statistics", "Waves Per SM") == 124.12
    assert d.sections["Launch Statistics"]["Cluster Scheduling Policy"][0] == "PolicySpread"
    cpi = [r for r in d.rules if r.name == "CPIStall" and r.type == "OPT"]
    assert cpi and cpi[0].speedup == 30.39 and cpi[0].speedup_type == "global"
    assert "scoreboard dependency on a L1TEX" in cpi[0].description


def test_raw_page_gives_every_counter_by_name() -> None:
    r = parse_raw((NCU / "saxpy" / "raw.csv").read_text())
    assert r.get("dram__bytes_read.sum") == 268451328.0
    assert r.get("launch__grid_size") == 131072.0
    assert r.get("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio") == 57.36
    assert r.text["device__attribute_display_name"] == "NVIDIA H200"
    assert r.units["dram__bytes_read.sum"] == "byte"
    assert len(r.values) > 1000


def test_source_page_gives_lines_with_their_sass_and_counters() -> None:
    src = parse_source((NCU / "transpose" / "source.csv").read_text())
    by_line = {ln.line: ln for ln in src if ln.file.endswith("transpose.cu")}
    ln = by_line[17]  # out[col * rows + row] = in[row * cols + col];
    assert ln.space.startswith("Global") and ln.samples == 10019.0
    assert ln.active_threads == 32.0
    mem = {i.opcode: i for i in ln.instructions if i.space == "Global"}
    assert set(mem) == {"LDG.E", "STG.E"}
    assert mem["STG.E"].operation == "Store" and mem["STG.E"].size_bits == 32
    assert mem["STG.E"].values[SECTORS_EXCESSIVE] == 14680064.0
    assert mem["LDG.E"].values[SECTORS_EXCESSIVE] == 0.0
    assert ln.stalls and next(iter(ln.stalls)) == "long_scoreboard"


def test_source_page_keeps_each_file_apart() -> None:
    """atomicAdd is inlined from a CUDA header: its lines are the header's, not the kernel file's."""
    prof = load_profile(NCU / "histogram")
    files = {Path(ln.file).name for ln in prof.lines}
    assert files == {"histogram.cu", "device_atomic_functions.hpp"}
    own = prof.lines_of("kernels/histogram.cu")
    assert set(own) == {11, 13, 14, 15, 16, 17, 20}
    assert own[20].stalls["drain"] == 62126.0


@pytest.mark.parametrize("stem", FIXTURE_KERNELS)
def test_every_recorded_profile_parses(stem: str) -> None:
    p = load_profile(NCU / stem)
    m = meta(stem)
    assert p.gpu == "NVIDIA H200" and p.sm_count == 132
    assert p.duration_ns and p.duration_ns > 0
    assert p.grid_blocks == m["grid"][0] * m["grid"][1] * m["grid"][2]
    assert p.block_threads == m["block"][0] * m["block"][1] * m["block"][2]
    assert p.memory_pct is not None and p.compute_pct is not None
    assert p.lines_of(m["file"]), "no source lines for the kernel's own file"
    assert json.dumps(p.summary())


def test_parsers_refuse_the_wrong_page_and_skip_ncu_chatter() -> None:
    details = (NCU / "saxpy" / "details.csv").read_text()
    raw = (NCU / "saxpy" / "raw.csv").read_text()
    with pytest.raises(ValueError):
        parse_details(raw)
    with pytest.raises(ValueError):
        parse_raw(details)
    noisy = "==PROF== Connected to process 1\n==WARNING== Note: unmodified clocks\n" + details
    assert parse_details(noisy).kernel == "saxpy"


# ============================================================================================ classes
EXPECTED: dict[str, tuple[str, str]] = {
    "saxpy": (MEMORY_BOUND, "DRAM"), "gelu": (MEMORY_BOUND, "DRAM"), "rmsnorm": (MEMORY_BOUND, "DRAM"),
    "transpose": (MEMORY_BOUND, "L2"), "sgemm": (MEMORY_BOUND, "L1"), "sgemm_regtile": (MEMORY_BOUND, "L1"),
    "smem_conflicts": (MEMORY_BOUND, "L1"), "conv1d": (COMPUTE_BOUND, ""), "divergent": (COMPUTE_BOUND, ""),
    "histogram": (LATENCY_BOUND, ""), "reduce_sum": (LATENCY_BOUND, ""), "local_array": (LATENCY_BOUND, ""),
    "softmax": (LAUNCH_BOUND, ""), "tiny_saxpy": (LAUNCH_BOUND, ""),
    "low_occupancy": (OCCUPANCY_LIMITED, "shared_mem"),
}


def test_every_fixture_has_an_expected_class() -> None:
    assert set(EXPECTED) == set(FIXTURE_KERNELS)


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_classes_of_the_recorded_kernels(stem: str) -> None:
    kp = from_ncu(load_profile(NCU / stem), CEILINGS)
    cls, unit = EXPECTED[stem]
    assert (kp.cls, kp.bottleneck.unit) == (cls, unit), kp.bottleneck.reason


def test_roofline_numbers_of_saxpy() -> None:
    b = from_ncu(load_profile(NCU / "saxpy"), CEILINGS).bottleneck
    # 384 MB of DRAM traffic in 114.8 µs against a measured 4237 GB/s copy bandwidth
    assert b.achieved_gbps == pytest.approx(3349, rel=0.01)
    assert b.bandwidth_fraction == pytest.approx(0.79, abs=0.01)
    assert b.arithmetic_intensity == pytest.approx(2 * 2**25 / 384476160, rel=0.01)
    assert b.ridge == pytest.approx(64682 / 4237, rel=0.01)
    assert "79 % of the measured copy bandwidth" in b.reason


def test_a_few_busy_sms_do_not_make_an_l1_bound_kernel() -> None:
    """softmax's 16 SMs run their L1 at 80 %; the GPU as a whole idles: launch-bound, not memory-bound."""
    p = load_profile(NCU / "softmax")
    assert p.unit_pct["L1"] > 60
    assert from_ncu(p, CEILINGS).cls == LAUNCH_BOUND


def test_classes_from_timing_alone() -> None:
    saxpy = perf_from_timing(0.118, spec_bytes=3 * 4 * 2**25, spec_flops=2 * 2**25, grid_blocks=131072,
                             block_threads=256, registers=16, shared_bytes=0, ceilings=CEILINGS)
    assert saxpy.source == "timing" and saxpy.theoretical_occupancy == 100.0
    assert classify(saxpy, CEILINGS).cls == MEMORY_BOUND
    low = perf_from_timing(0.26, spec_bytes=2 * 4 * 2**25, spec_flops=None, grid_blocks=2**25 // 128,
                           block_threads=128, registers=16, shared_bytes=40960, ceilings=CEILINGS)
    assert low.occupancy_limiter == "shared_mem" and low.theoretical_occupancy == pytest.approx(31.25)
    assert classify(low, CEILINGS).cls == OCCUPANCY_LIMITED
    tiny = perf_from_timing(0.0024, spec_bytes=3 * 4 * 4096, spec_flops=None, grid_blocks=16, block_threads=256,
                            registers=16, shared_bytes=0, ceilings=CEILINGS)
    assert classify(tiny, CEILINGS).cls == LAUNCH_BOUND
    blind = classify(Perf(source="timing", duration_ns=1e5), None)
    assert blind.cls == LATENCY_BOUND and "only the time is known" in blind.reason


def test_occupancy_arithmetic() -> None:
    assert blocks_per_sm(256, 16, 0, CEILINGS) == (8, "warps")
    assert blocks_per_sm(256, 64, 0, CEILINGS) == (4, "registers")
    assert blocks_per_sm(128, 16, 40960, CEILINGS) == (5, "shared_mem")
    assert blocks_per_sm(32, 16, 0, CEILINGS) == (32, "blocks")
    limits = {"registers": 4, "shared_mem": 11, "warps": 8, "blocks": 32, "barriers": 32}
    assert occupancy_limiter(limits) == "registers"
    assert occupancy_limiter({**limits, "registers": 16, "shared_mem": 32}) == "warps"


def test_the_class_decides_which_analyzers_run() -> None:
    assert not runs_for("p-tensor-cores", LAUNCH_BOUND) and runs_for("p-tensor-cores", COMPUTE_BOUND)
    assert runs_for("p-launch", LAUNCH_BOUND) and not runs_for("p-launch", MEMORY_BOUND)
    assert not runs_for("p-vectorize", LAUNCH_BOUND) and not runs_for("p-vectorize", COMPUTE_BOUND)
    assert runs_for("p-bottleneck", OCCUPANCY_LIMITED)  # not listed: every class
    # a DRAM-bound kernel gets no tensor-core advice (the analyzer returns for it), an L1-bound matmul does
    assert not found("saxpy", "WF211") and lines("sgemm", "WF211") == [27]


def test_ceilings_are_cached_by_gpu_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.profile import roofline

    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path))
    assert cached_ceilings("NVIDIA H200") is None
    path = roofline.ceilings_path("NVIDIA H200")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(CEILINGS.to_json()))
    monkeypatch.setattr(roofline, "measure_ceilings", lambda *a, **k: pytest.fail("measured although cached"))
    got = roofline.ceilings_for("NVIDIA H200")
    assert got == CEILINGS and got is not None and got.tensor_kind == "mma.sync f16 -> f32"


# ============================================================================================ analyzers
def test_profile_codes_are_catalogued_and_documented() -> None:
    doc = (ROOT / "docs" / "findings.md").read_text()
    ours = sorted(c for c in CODES if c.startswith("WF2"))
    assert ours == ["WF200", "WF201", "WF202", "WF203", "WF204", "WF205", "WF206", "WF207", "WF208", "WF209",
                    "WF210", "WF211", "WF212", "WF299"]
    for code in ours:
        assert CODES[code].source == "profile"
        assert f"## {code}" in doc, f"{code} is not documented in docs/findings.md"


def test_transpose_uncoalesced_store_is_measured_and_replaces_the_static_guess() -> None:
    (f,) = found("transpose", "WF205")
    assert f.line == 17 and f.action == "coalesce"
    assert "the store (STG.E) touches 32 sectors per warp request where 4 would do" in f.message
    assert f.evidence["excessive_sectors"] == 14680064.0
    assert f.gain == 4.0 and f.gain_basis and "UncoalescedGlobalAccess" in f.gain_basis
    if NVCC is not None:
        static = analyze_file(str(ROOT / "kernels" / "transpose.cu"))
        assert any(s.code == "WF103" for s in static.findings)
    assert not found("transpose", "WF103")


def test_bank_conflict_measured_on_the_column_read_only() -> None:
    (f,) = found("smem_conflicts", "WF206")
    assert f.line == 24 and f.evidence["conflict_degree"] == 32.0 and f.evidence["sass"] == "LDS"
    assert f.action == "smem_padding" and f.gain is not None
    assert not found("sgemm_regtile", "WF206")  # LDS.128 at 4-way is conflict-free for 16-byte lanes
    assert not found("smem_conflicts", "WF105")


def test_occupancy_limited_by_shared_memory_says_how_much_to_give_back() -> None:
    (f,) = found("low_occupancy", "WF201")
    assert f.evidence["limiter"] == "shared_mem"
    assert f.evidence["shared_bytes_for_next_block"] == 37888
    assert f.evidence["shared_bytes_for_full_occupancy"] == 13568
    assert "13,568 B allows 16 blocks (100 %)" in f.message


def test_occupancy_limited_by_registers_suggests_launch_bounds() -> None:
    (f,) = found("sgemm_regtile", "WF201")
    assert f.evidence["limiter"] == "registers" and f.action == "launch_bounds"
    assert "`__launch_bounds__(256, 5)` makes ptxas fit 48 registers" in f.message
    assert f.evidence["registers_for_full_occupancy"] == 32


def test_launch_bound_softmax_gets_the_launch_finding_not_the_vectorization_one() -> None:
    (f,) = found("softmax", "WF202")
    assert f.evidence["idle_sms"] == 116 and f.action == "block_size"
    assert lines("softmax", "WF205") == [26, 31, 36]
    assert not found("softmax", "WF210") and not found("softmax", "WF104")


def test_tiny_kernel_launch_overhead() -> None:
    assert found("tiny_saxpy", "WF202") and found("tiny_saxpy", "WF204")
    (f,) = found("tiny_saxpy", "WF204")
    assert f.evidence["duration_us"] == 2.4 and f.action is None
    assert not found("tiny_saxpy", "WF208")  # a few dozen samples locate nothing


def test_local_memory_lines_of_a_dynamically_indexed_array() -> None:
    fs = found("local_array", "WF207")
    assert [f.line for f in fs] == [17, 22, 23]
    hot = next(f for f in fs if f.line == 22)
    assert hot.evidence["stall_sample_share"] == pytest.approx(0.81, abs=0.01)
    assert hot.action == "registers" and "indexed by a run-time value" in hot.message


def test_divergent_lines_with_four_active_lanes() -> None:
    fs = found("divergent", "WF209")
    assert [f.line for f in fs] == [17, 18]
    assert all(f.evidence["active_threads"] == pytest.approx(4.0, abs=0.1) for f in fs)
    assert not found("divergent", "WF208")  # issue-bound lines (not selected) are not stalls


def test_saxpy_vectorization_with_the_headroom_to_the_copy_roof() -> None:
    (f,) = found("saxpy", "WF210")
    assert f.line == 15 and f.action == "vectorize"
    assert f.evidence["sass"] == ["LDG.E", "LDG.E", "STG.E"]
    assert f.gain == pytest.approx(1.27, abs=0.02)
    (top,) = found("saxpy", "WF200")
    assert top.gain == f.gain and top.evidence["unit"] == "DRAM"
    assert not found("saxpy", "WF104")


def test_stall_reasons_choose_their_action() -> None:
    (barrier,) = [f for f in found("reduce_sum", "WF208") if f.line == 33]
    assert "barrier" in barrier.message and barrier.action == "warp_reduce"
    drain = [f for f in found("histogram", "WF208") if f.line == 20]
    assert drain and "drain" in drain[0].message
    (l1,) = found("sgemm", "WF208")
    assert l1.line == 28 and l1.action == "smem_tiling"


@needs_nvcc
def test_atomics_draining_at_exit_point_at_privatization() -> None:
    if not HAS_NVDISASM:
        pytest.skip("nvdisasm is needed to see the atomics in SASS")
    (drain,) = [f for f in found("histogram", "WF208") if f.line == 20]
    assert drain.action == "atomics_privatize"


def test_tensor_core_advice_for_matmul_loops_only() -> None:
    (naive,) = found("sgemm", "WF211")
    assert naive.action == "smem_tiling" and "tile A and B in shared memory first" in naive.message
    assert naive.evidence["reduction_length"] == 1024
    (tiled,) = found("sgemm_regtile", "WF211")
    assert tiled.action == "tensor_cores" and tiled.line == 24
    assert not found("conv1d", "WF211")  # compute-bound, but a 9-tap reduction


def test_other_ncu_rules_pass_through_once() -> None:
    (f,) = found("gelu", "WF212")
    assert f.evidence["rule"] == "FPInstructions" and f.action == "compile_flags"
    assert "https://" not in f.message
    assert not any(f.evidence.get("rule") == "CPIStall" for s in FIXTURE_KERNELS for f in found(s, "WF212"))


def test_tail_effect_of_a_partial_last_wave() -> None:
    from warpforge.cuda import parse
    from warpforge.cuda.text import SourceText
    from warpforge.profile.analyzers.p_tail import idle_share, tail

    assert idle_share(1.2) == pytest.approx(0.4) and idle_share(4.0) == 0.0 and idle_share(0.5) == 0.0
    kp = from_ncu(load_profile(NCU / "saxpy"), CEILINGS)
    kp.perf.waves = 1.2
    path = ROOT / "kernels" / "saxpy.cu"
    src = SourceText(path.read_bytes())
    model = parse(src.data)
    ctx = KernelContext(str(path), src, model, model.kernels[0], profile=kp)
    (f,) = list(tail(ctx))
    assert f.code == "WF203" and f.gain == pytest.approx(1.67, abs=0.01) and f.action == "grid_stride"
    kp.perf.waves = 124.12
    assert not list(tail(ctx))


@pytest.mark.parametrize("stem", FIXTURE_KERNELS)
def test_findings_are_well_formed(stem: str) -> None:
    rep = rendered(stem)
    assert rep.cls == EXPECTED[stem][0] and rep.notice is None and not rep.notes
    m = meta(stem)
    src_lines = (ROOT / m["file"]).read_text().count("\n") + 1
    wf2 = [f for f in rep.findings if f.code.startswith("WF2")]
    assert [f.code for f in wf2].count("WF200") == 1
    for f in wf2:
        assert f.kernel == m["kernel"] and 1 <= f.line <= src_lines and f.message
        assert f.gain is None or (1.0 < f.gain <= 4.0 and f.gain_basis and f.gain_basis.startswith("up to"))
        json.dumps(f.to_json())


# ============================================================================================ CLI
def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_renders_a_recorded_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "profile", str(ROOT / "kernels" / "transpose.cu"), "--from", str(NCU / "transpose"))
    assert code == 0
    assert out.startswith("transpose_naive on NVIDIA H200: memory-bound (L2)")
    assert "speed of light (Nsight Compute, one launch, 252.4 µs):" in out
    assert "4237 GB/s measured copy" in out
    assert "transpose.cu:17:9: info: line 17 moves 18,874,368 sectors" in out and "[WF205]" in out
    assert "findings for `transpose_naive`" in err


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profile", str(ROOT / "kernels" / "saxpy.cu"), "--from", str(NCU / "saxpy"), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["class"] == MEMORY_BOUND and data["profile"]["bottleneck"]["unit"] == "DRAM"
    assert data["profile"]["ncu"]["waves_per_sm"] == 124.12
    assert {"WF200", "WF210"} <= {f["code"] for f in data["findings"]}


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "profile", str(ROOT / "kernels" / "saxpy.cu"), "--kernel", "nope")
    assert code == 2 and "no __global__ kernel named `nope`" in err
    code, _, err = run(capsys, "profile", str(ROOT / "kernels" / "saxpy.cu"), "--from", str(tmp_path))
    assert code == 2 and "no recorded profile" in err


def test_cli_without_a_gpu_gives_static_findings_and_one_notice(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.gpu import supervisor

    for module in (profiler, supervisor):  # the profiler's check, and the command's for its exit code
        monkeypatch.setattr(module, "gpu_unavailable_reason", lambda: "no NVIDIA GPU or driver was found")
    code, out, _ = run(capsys, "profile", str(ROOT / "kernels" / "saxpy.cu"))
    assert code == 3  # "cannot run here", after the static findings
    assert out.count("[WF299]") == 1 and "profiling needs an NVIDIA GPU" in out
    assert "[WF101]" in out  # the static findings are all there


# ============================================================================================ collection
@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An ``ncu`` that runs the harness under the fake pycuda and serves the recorded saxpy pages."""
    exe = tmp_path / "ncu"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_NCU} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_PYCUDA), str(ROOT / "server"),
                                                       os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WARPFORGE_FAKE_NCU_PAGES", str(NCU / "saxpy"))
    ncu_mod._sections_cache.clear()
    return str(exe)


def _saxpy_job() -> tuple[bytes, str, Any, tuple[list[int], list[int], int]]:
    from warpforge.gpu.inputs import Layout
    from warpforge.spec import build_spec

    path = ROOT / "kernels" / "saxpy.cu"
    from warpforge.cuda import parse
    from warpforge.cuda.text import SourceText

    src = SourceText(path.read_bytes())
    model = parse(src.data)
    spec = build_spec(src, model, model.kernels[0], str(path))
    r = spec.resolve()
    cubin = b"\x7fELF fake cubin: saxpy"
    return cubin, "saxpy", Layout.from_resolved(r, "spec"), (list(r.grid), list(r.block), r.smem)


def test_collect_profiles_one_marked_launch_and_exports_the_pages(fake_ncu: str) -> None:
    cubin, symbol, layout, launch = _saxpy_job()
    exp = ncu_mod.collect(cubin, symbol, layout, launch, ncu=fake_ncu, warmup_seconds=0.05)
    assert set(exp.pages) == {"details", "raw", "source"}
    cmd = exp.command
    for flag, value in (("--clock-control", "none"), ("--launch-count", "1"), ("--kernel-name", "saxpy"),
                        ("--profile-from-start", "off"), ("--import-source", "yes"), ("--kernel-name-base", "mangled")):
        assert cmd[cmd.index(flag) + 1] == value
    sections = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"]
    assert sections == list(ncu_mod.DEFAULT_SECTIONS)
    assert "--metrics" in cmd and "dram__bytes_read.sum" in cmd[cmd.index("--metrics") + 1]
    assert exp.harness["gpu"] == "Fake GPU" and exp.harness["warmup_launches"] >= 1
    assert load_profile_from_pages(exp.pages).kernel == "saxpy"


def load_profile_from_pages(pages: dict[str, str]) -> Any:
    from warpforge.profile.ncu_parse import parse_profile

    return parse_profile(pages["details"], pages.get("raw"), pages.get("source"))


def test_unknown_sections_are_left_out() -> None:
    listing = (NCU / "env.txt").read_text()
    assert ncu_mod.usable_sections(["SpeedOfLight", "NoSuchSection", "SourceCounters"], listing) == \
        ["SpeedOfLight", "SourceCounters"]
    assert ncu_mod.usable_sections(["X"], None) == ["X"]
    assert ncu_mod.usable_sections(ncu_mod.DEFAULT_SECTIONS, listing) == list(ncu_mod.DEFAULT_SECTIONS)


def test_counters_not_permitted_is_a_clear_error(fake_ncu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_FAKE_NCU_MODE", "permission")
    cubin, symbol, layout, launch = _saxpy_job()
    with pytest.raises(ncu_mod.ProfilerUnavailable) as e:
        ncu_mod.collect(cubin, symbol, layout, launch, ncu=fake_ncu)
    assert e.value.kind == "permission" and "ERR_NVGPUCTRPERM" in str(e.value)


def test_missing_ncu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncu_mod, "ncu_path", lambda override=None: None)
    cubin, symbol, layout, launch = _saxpy_job()
    with pytest.raises(ncu_mod.ProfilerUnavailable) as e:
        ncu_mod.collect(cubin, symbol, layout, launch)
    assert e.value.kind == "missing" and "Nsight Compute" in str(e.value)


@pytest.fixture
def gpu_machine(fake_ncu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """profile_kernel as on the GPU machine: a GPU (said to be there), the fake ncu, cached ceilings."""
    monkeypatch.setenv("WARPFORGE_CACHE", str(tmp_path / "cache"))
    from warpforge.profile import roofline

    kept = roofline.ceilings_path("NVIDIA H200")  # kept under the GPU's name (the driver unknown here)
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps(CEILINGS.to_json()))
    monkeypatch.setattr(profiler, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(ncu_mod, "ncu_path", lambda override=None: fake_ncu)
    return fake_ncu


@needs_nvcc
def test_profile_kernel_end_to_end(gpu_machine: str) -> None:
    rep = profiler.profile_kernel(str(ROOT / "kernels" / "saxpy.cu"), "saxpy")
    assert rep.notice is None and rep.cls == MEMORY_BOUND
    assert rep.profile is not None and rep.profile.ncu is not None and rep.profile.ceilings == CEILINGS
    assert {"WF200", "WF210"} <= {f.code for f in rep.findings}
    assert {"static", "build", "ncu", "export", "ceilings", "total"} <= set(rep.seconds)


@needs_nvcc
def test_profile_kernel_falls_back_to_timing_with_one_notice(gpu_machine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_FAKE_NCU_MODE", "permission")
    monkeypatch.setattr(profiler, "_time_kernel", lambda *a: (0.118, "NVIDIA H200"))
    rep = profiler.profile_kernel(str(ROOT / "kernels" / "saxpy.cu"), "saxpy")
    assert rep.notice is not None and "ERR_NVGPUCTRPERM" in rep.notice and "timing only" in rep.notice
    assert [f.code for f in rep.findings].count("WF299") == 1
    assert rep.profile is not None and rep.profile.ncu is None and rep.profile.perf.source == "timing"
    assert rep.cls == MEMORY_BOUND
    assert "WF104" in {f.code for f in rep.findings}  # nothing measured replaces the static hint
    assert not any(f.code in ("WF205", "WF210") for f in rep.findings)
