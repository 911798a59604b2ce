"""On a GPU (issue 30): four self-written kernels of the kinds that WarpForge's own verification used to crash
or mistype, each verified end to end: the original evaluates (every run, the sensitivity run included), a
correct variant verifies, and a variant that ignores the last ids (or elements) is found incorrect.

- ``embed_gather.cu``: ids stored as floats, ``int(0, K)``: the sensitivity run used to move them 10^4 K up
  and the original read far outside the table; with ``uniform(0, K)`` it still does, and the crash report says
  the verification inputs are the cause and how to declare them;
- ``embed_scatter.cu``: the backward (atomicAdd into the table); one id left out hides inside the tolerance
  on plain inputs, and the sensitivity run catches it;
- ``histogram_tpl.cu``: ``IndexType nbins`` typed by the template line (it was passed as the bits of a float);
- ``act_enum.cu``: an enum parameter passed as an int (as a float it took no branch and wrote nothing).

The CPU half is tests/test_input_domains.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"no usable GPU: {_WHY}", allow_module_level=True)

from warpforge.cuda.candidate import Candidate  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.reports import Evaluation  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402

DOMAINS = Path(__file__).resolve().parent / "fixtures" / "domains"
SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=60.0, timing=TimingSettings(max_seconds=0.3))


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


# fixture, kernel, the launch of a correct variant, (text, replacement) making a variant that ignores the last ids
CASES = {
    "gather": ("embed_gather.cu", "gather_rows", ("cdiv(M*C, 128)", "128"),
               ("int row = static_cast<int>(ids[r]);", "int row = r < m - 1 ? static_cast<int>(ids[r]) : 0;")),
    "scatter": ("embed_scatter.cu", "embed_backward", ("cdiv(M*C, 128)", "128"),
                ("if (i < m * c) {", "if (i < (m - 1) * c) {")),
    "histogram": ("histogram_tpl.cu", "histogram", ("cdiv(N, 128)", "128"), ("if (i < n) {", "if (i < n - 1) {")),
    "enum": ("act_enum.cu", "activate", ("cdiv(N, 128)", "128"), ("if (i < n) {", "if (i < n - 1) {")),
    # CSR row pointers from `offsets(0, NNZ)` (issue 29): drawn on the host, sorted, perturbed in order
    "spmv": ("spmv_csr.cu", "spmv_csr", ("cdiv(ROWS, 128)", "128"), ("if (r < rows) {", "if (r < rows - 1) {")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_original_evaluates_a_correct_variant_verifies_and_ignoring_the_last_ids_fails(
        backend: Backend, loop: asyncio.AbstractEventLoop, case: str) -> None:
    file, kernel, (grid, block), (text, skip) = CASES[case]
    ev = Evaluator(DOMAINS / file, kernel, backend=backend, settings=SETTINGS)

    def run(c: Candidate | None) -> Evaluation:
        return loop.run_until_complete(ev.baseline() if c is None else ev.evaluate(c))

    try:
        base = run(None)
        assert base.status == "ok", base.reason
        assert any(r.purpose == "sensitivity" for r in base.correctness.runs), base.correctness.runs
        # the original writes every element: an enum passed as a float's bits would leave `y` unwritten
        assert not [n for n in base.notes if "unwritten" in n], base.notes
        good = run(ev.original.derive(grid=(grid,), block=(block,), family="relaunch"))
        assert good.status == "ok", good.reason
        assert any(r.purpose == "sensitivity" and r.ok for r in good.correctness.runs)
        assert text in ev.original.source
        bad = run(ev.original.derive(source=ev.original.source.replace(text, skip), family="skip-last"))
        assert bad.status == "incorrect", (bad.status, bad.reason)
        if case == "scatter":  # hidden by the tolerance on plain inputs: the sensitivity run is what finds it
            assert bad.reason.startswith("tail sensitivity"), bad.reason
    finally:
        loop.run_until_complete(ev.close())


def test_float_ids_without_a_declared_domain_crash_the_original_and_the_report_says_why(
        backend: Backend, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "gather_uniform.cu"
    path.write_text((DOMAINS / "embed_gather.cu").read_text().replace("float[M] int(0, K)", "float[M] uniform(0, K)"))
    ev = Evaluator(path, "gather_rows", backend=backend, settings=SETTINGS)
    try:
        base = loop.run_until_complete(ev.baseline())
    finally:
        loop.run_until_complete(ev.close())
    assert base.status == "crashed", (base.status, base.reason)
    assert "the original kernel crashed in the sensitivity run at the spec size" in base.reason, base.reason
    assert "runs cleanly on plain inputs at the spec size" in base.reason, base.reason
    assert "`// @warpforge arg ids: in float[M] int(0, HI)`" in base.reason, base.reason
