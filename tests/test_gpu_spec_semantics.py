"""On a GPU (issue 18, item 6): the worker's device comparison says when the original never writes an element,
per-argument tolerances reach the comparison of that output only, and ``warpforge verify`` runs a variant
with its own launch and build lines. The CPU halves are in tests/test_spec_semantics.py and
tests/test_gpu_cpu.py (the host comparison)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from warpforge.gpu.supervisor import gpu_unavailable_reason

pytestmark = pytest.mark.gpu

_WHY = gpu_unavailable_reason()
if _WHY is not None:
    pytest.skip(f"no usable GPU: {_WHY}", allow_module_level=True)

from warpforge.cuda.candidate import Candidate  # noqa: E402
from warpforge.gpu.evaluator import Backend, EngineSettings, Evaluator  # noqa: E402
from warpforge.gpu.timing import TimingSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = EngineSettings(kernel_timeout=4.0, compile_timeout=30.0, timing=TimingSettings(max_seconds=0.3))


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


Open = Callable[[str, str], Evaluator]


@pytest.fixture
def open_kernel(backend: Backend, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> Iterator[Open]:
    """``open_kernel(source, kernel)``: the source written to a file of the test's own folder and an ``Evaluator``
    for the kernel on the shared backend, closed when the test ends (its worker and builds go with it)."""
    opened: list[Evaluator] = []

    def open_(source: str, kernel: str) -> Evaluator:
        path = tmp_path / f"{kernel}.cu"
        path.write_text(source, encoding="utf-8")
        ev = Evaluator(path, kernel, backend=backend, settings=SETTINGS)
        opened.append(ev)
        return ev

    yield open_
    for ev in opened:
        loop.run_until_complete(ev.close())


# The original leaves the last element of `y` unwritten (its spec length says N).
SHORT = """// @warpforge size N = 1 << 16
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) y[i] = 2.0f * x[i];
}
"""


def test_device_comparison_says_the_original_never_writes_the_element(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    ev = open_kernel(SHORT, "scale")
    full = ev.original.derive(source=ev.original.source.replace("i < n - 1", "i < n"), family="writes-all")
    e = loop.run_until_complete(ev.evaluate(full))
    assert e.status == "incorrect", e.reason
    # the first mismatch is the last element: the original never writes it, and the message says so
    assert "1 written where the original never writes" in e.reason, e.reason
    assert f"first at [{(1 << 16) - 1}]" in e.reason and "the original never writes" in e.reason, e.reason
    same = loop.run_until_complete(ev.evaluate(ev.original.derive(defines={"WF_SAME": "1"}, family="same")))
    assert same.status == "ok", same.reason


TWO_OUT = """#ifndef DY
#define DY 0.0f
#endif
#ifndef DW
#define DW 0.0f
#endif
// @warpforge size N = 1 << 16
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg dw: out float[N] tol atol=2e-3
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void two(const float* x, float* y, float* dw, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = x[i] + DY; dw[i] = x[i] + DW; }
}
"""


def test_a_per_argument_tolerance_loosens_that_output_only(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    ev = open_kernel(TWO_OUT, "two")

    def evaluate(c: Candidate) -> str:
        e = loop.run_until_complete(ev.evaluate(c))
        return e.status + ": " + e.reason

    # 1e-3 off in dw: inside its own atol of 2e-3
    assert evaluate(ev.original.derive(defines={"DW": "1e-3f"}, family="dw")).startswith("ok")
    # the same 1e-3 in y: far outside float's default atol 1e-5, which dw's tolerance does not loosen
    bad = evaluate(ev.original.derive(defines={"DY": "1e-3f"}, family="dy"))
    assert bad.startswith("incorrect") and "`y`" in bad and "atol=1e-05" in bad, bad


ROWSUM = """// @warpforge size B = 4096
// @warpforge size C = 256
// @warpforge arg inp: in float[B*C]
// @warpforge arg out: out float[B]
// @warpforge arg rows = B
// @warpforge arg cols = C
// @warpforge launch grid=cdiv(B, 256), block=256
// @warpforge tol rtol=1e-4 atol=1e-4
__global__ void rowsum(const float* inp, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) { float s = 0; for (int c = 0; c < cols; ++c) s += inp[r * cols + c]; out[r] = s; }
}
"""

WARP_PER_ROW = """// warp per row: 8 rows per block of 256; only right with its own launch
// @warpforge launch grid=cdiv(B, 8), block=256
// @warpforge tune ROWS = 8
// warpforge: compile with -use_fast_math
__global__ void rowsum(const float* inp, float* out, int rows, int cols) {
    int r = blockIdx.x * ROWS + threadIdx.x / 32;
    if (r >= rows) return;
    float s = 0;
    for (int c = threadIdx.x % 32; c < cols; c += 32) s += inp[r * cols + c];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) out[r] = s;
}
"""


def test_cli_verify_runs_a_variant_with_its_own_launch_and_prints_it(tmp_path: Path) -> None:
    orig, var = tmp_path / "rowsum.cu", tmp_path / "rowsum_warp.cu"
    orig.write_text(ROWSUM, encoding="utf-8")
    var.write_text(WARP_PER_ROW, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "server") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "warpforge", "verify", str(orig), "--candidate", str(var), "--seconds", "0.4",
           "--no-sanitize"]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    data = json.loads(r.stdout)
    assert data["status"] == "ok", data.get("reason")
    assert data["launch"]["grid"] == [512, 1, 1] and data["launch"]["block"] == [256, 1, 1]
    assert data["launch"]["defines"] == {"ROWS": "8"} and data["launch"]["flags"] == ["-use_fast_math"]
    assert data["launch"]["launch_from"] == f"the variant's own launch ({var}:2)"
    text = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert f"launch: grid (512, 1, 1) block (256, 1, 1), from the variant's own launch ({var}:2)" in text.stdout, \
        text.stdout + text.stderr


# Written for whole blocks: no tail guard, a launch that rounds up. Right at multiples of 256 only: at the plain
# perturbed size (943719) its last block writes past the end of `y`.
UNGUARDED = """// @warpforge size N = 1 << 20
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void twice(const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];
}
"""


def test_an_original_without_a_tail_guard_is_verified_at_aligned_perturbed_sizes(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    ev = open_kernel(UNGUARDED, "twice")
    base = loop.run_until_complete(ev.baseline())
    assert base.status == "ok", base.reason
    # 4 ... 64 still leave a partial last block; 128 is the first alignment the original runs cleanly at
    # (943719 rounded down to a multiple of 128 is 943616 = 3686 * 256)
    note = next(n for n in base.notes if "fails at the plain perturbed size" in n)
    assert "N=943616" in note and "multiples of 128" in note and "writes outside its buffers" in note, note
    assert {r.variant for r in base.correctness.runs} >= {"spec", "odd"}
    assert any(r.variant == "odd" and "943616" in r.sizes for r in base.correctness.runs)
    # a candidate is checked at that size too, and told so; a wrong one is still caught there
    good = loop.run_until_complete(ev.evaluate(ev.original.derive(
        source=ev.original.source.replace("const float* x", "const float* __restrict__ x"), family="restrict")))
    assert good.status == "ok", good.reason
    assert note in good.notes
    assert any(r.variant == "odd" and "943616" in r.sizes for r in good.correctness.runs)
    # right at the spec size (4096 blocks), wrong at any other: it skips its last block there
    bad = loop.run_until_complete(ev.evaluate(ev.original.derive(
        source=ev.original.source.replace(
            "    y[i] = 2.0f * x[i];", "    if (gridDim.x != 4096 && blockIdx.x == gridDim.x - 1) return;\n"
                                     "    y[i] = 2.0f * x[i];"),
        family="skips-the-last-block")))
    assert bad.status == "incorrect" and "odd size" in bad.reason, bad.reason


def test_the_search_root_of_an_unguarded_original_is_evaluated_at_the_aligned_size(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    # the search evaluates the original as its root (``evaluate``, not ``baseline``): the same retry applies
    ev = open_kernel(UNGUARDED, "twice")
    root = loop.run_until_complete(ev.evaluate(ev.original))
    assert root.status == "ok", root.reason
    assert any("fails at the plain perturbed size" in n and "N=943616" in n for n in root.notes), root.notes


def test_a_variant_verified_alone_beside_an_unguarded_original_is_evaluated_at_the_aligned_size(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    # ``warpforge verify`` evaluates only the variant: the original's failure at the perturbed size is met in
    # that evaluation, and the same retry applies (the independent re-timing rejected two winners before)
    ev = open_kernel(UNGUARDED, "twice")
    var = loop.run_until_complete(ev.evaluate(ev.original.derive(
        source=ev.original.source.replace("const float* x", "const float* __restrict__ x"), family="restrict")))
    assert var.status == "ok", var.reason
    assert any("fails at the plain perturbed size" in n and "N=943616" in n for n in var.notes), var.notes


# A long sum per row (one thread per row, 16 384 terms of uniform(-1, 1)): LANES=32 adds the same terms in 32
# interleaved partials (a warp's order), SKIP=1 leaves the last term out (a wrong bound).
LONGSUM = """#ifndef LANES
#define LANES 1
#endif
#ifndef SKIP
#define SKIP 0
#endif
{TOL}// @warpforge size B = 2048
// @warpforge size K = 16384
// @warpforge arg x: in float[B*K]
// @warpforge arg out: out float[B]
// @warpforge arg rows = B
// @warpforge arg cols = K
// @warpforge launch grid=cdiv(B, 128), block=128
__global__ void longsum(const float* x, float* out, int rows, int cols) {{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float part[LANES];
    for (int l = 0; l < LANES; ++l) part[l] = 0.0f;
    for (int j = 0; j < cols - SKIP; ++j) part[j % LANES] += x[(size_t)r * cols + j];
    float s = 0.0f;
    for (int l = 0; l < LANES; ++l) s += part[l];
    out[r] = s;
}}
"""


def test_a_reordered_long_sum_verifies_with_the_default_norm_and_a_dropped_term_does_not(
        open_kernel: Open, loop: asyncio.AbstractEventLoop) -> None:
    ev = open_kernel(LONGSUM.format(TOL=""), "longsum")

    def evaluate(e: Evaluator, **defines: str) -> str:
        r = loop.run_until_complete(e.evaluate(e.original.derive(defines=defines, family="-".join(defines))))
        return r.status + ": " + r.reason

    # the kernel sums, no tol is written: outputs are compared with a floor of 1e-5 of their largest magnitude
    assert evaluate(ev, LANES="32").startswith("ok")
    wrong = evaluate(ev, SKIP="1")
    assert wrong.startswith("incorrect") and "norm=1e-05 x max|want|" in wrong, wrong
    # where the user states the tolerance without a norm, the same reordering is out of it: the floor is what
    # lets it verify (and this test can fail)
    strict = open_kernel(LONGSUM.format(TOL="// @warpforge tol rtol=1e-4 atol=1e-5\n"), "longsum")
    again = evaluate(strict, LANES="32")
    assert again.startswith("incorrect") and "norm" not in again, again
