"""The reference kernels produce exactly the expected static hints (issue 3: "kernels/ produce the expected set").

The set is the contract of `warpforge hints kernels/*.cu`: every pair was reviewed against the kernel's
code (what the README says a better version would do), so a new analyzer that starts firing on a
reference kernel, or an old one that stops, fails here and gets looked at. Compiled with nvcc (the SASS
analyzers are part of the set), in a private cache so the results come from this toolchain, now.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import KERNEL_FILES, needs_nvcc
from warpforge.policy.whynot_hint import install
from warpforge.profile.analyzers import load
from warpforge.profile.hints import HintsReport, analyze_file

#: (kernel, code) for every finding on kernels/*.cu at the default arch (sm_90, or the local GPU's)
EXPECTED: set[tuple[str, str]] = {
    # every reference kernel reads through pointers that lack __restrict__ while it writes another buffer
    ("conv1d", "WF101"),
    ("gelu_forward", "WF101"),
    ("histogram_atomic", "WF101"),
    ("reduce_sum", "WF101"),
    ("rmsnorm_rows", "WF101"),
    ("saxpy", "WF101"),
    ("sgemm_naive", "WF101"),
    ("softmax_rows", "WF101"),
    ("transpose_naive", "WF101"),
    # elementwise with scalar 32-bit LDG/STG in the SASS: float4 would cut memory instructions 4x
    ("gelu_forward", "WF104"),
    ("saxpy", "WF104"),
    # one global atomic per element into 256 bins: privatize in shared memory
    ("histogram_atomic", "WF110"),
    # one thread per row: a row walked serially by each thread (its loads, strided by the row length, are
    # the same root cause: WF103 is folded into the WF111 as related lines)
    ("softmax_rows", "WF111"),
    # a 16x16 block loads each element of A and B 16 times in the K loop: tile it in shared memory
    ("sgemm_naive", "WF112"),
    # writes strided by `rows`
    ("transpose_naive", "WF103"),
    # a 9-tap filter loop no structural rewrite takes: warp_per_row sees a row, but one of 9 elements gives a warp
    # nothing to spread (the stencil tile wants a 2-D block); the other reference kernels with a loop or a
    # reduction get a structural proposal
    ("conv1d", "WF113"),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HintsReport]:
    load()  # import the analyzer modules once, before threads
    install()  # and WF113, as `warpforge hints` does
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARPFORGE_CACHE", str(tmp_path_factory.mktemp("wf-cache")))
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = pool.map(lambda p: analyze_file(str(p)), KERNEL_FILES)
            return {Path(r.file).name: r for r in done}


@needs_nvcc
def test_kernels_expected_findings(reports: dict[str, HintsReport]) -> None:
    assert len(reports) == len(KERNEL_FILES) >= 9
    for name, r in reports.items():
        assert not r.notes, f"{name}: {r.notes}"
        assert not [f for f in r.findings if f.code in ("WF000", "WF001", "WF002")], name
    got = {(f.kernel, f.code) for r in reports.values() for f in r.findings}
    assert all(k is not None for k, _ in got)
    missing = EXPECTED - got
    extra = got - EXPECTED
    assert not missing and not extra, f"missing: {sorted(missing, key=str)}; unexpected: {sorted(extra, key=str)}"


@needs_nvcc
def test_kernels_findings_are_actionable(reports: dict[str, HintsReport]) -> None:
    """Every finding on the reference kernels has a message, numbers and a transformation family (WF113, which
    says why no structural family applies, names the closest one instead)."""
    for r in reports.values():
        for f in r.findings:
            assert f.message and f.evidence and (f.action or (f.code == "WF113" and f.evidence["closest"])), \
                (f.kernel, f.code)
