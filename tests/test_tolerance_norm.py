"""The ``norm`` part of a tolerance: outputs of a kernel that sums are compared with a floor that follows their scale.

Why: a sum of many terms added in another order (every structural rewrite of a reduction) differs from the
sequential sum by rounding errors of the size of its terms, and where the terms cancel the result is far smaller
than they are: the default ``atol`` (1e-5 for float) rejected every reordered 10 816-term sum of darknet's bias
gradient on an H200. These tests read the spec side (``tol ... norm=``, the default for a kernel that sums) and
the host comparison the worker runs (``gpu.compare``) on real float32 sums; the device half is in
tests/test_gpu_spec_semantics.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from warpforge.cuda import SourceText, parse
from warpforge.gpu import compare as cmp
from warpforge.gpu.tolerance import normwise_atol, tolerance_text
from warpforge.spec import KernelSpec, SpecError, build_spec
from warpforge.spec.model import DEFAULT_NORMS

ROWSUM = """{TOL}// @warpforge size B = 256
// @warpforge size K = 4096
// @warpforge arg x: in float[B*K]
// @warpforge arg out: out float[B]{OUT_TOL}
// @warpforge arg rows = B
// @warpforge arg cols = K
// @warpforge launch grid=cdiv(B, 128), block=128
__global__ void rowsum(const float* x, float* out, int rows, int cols) {{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < cols; ++j) s += x[r * cols + j];
    out[r] = s;
}}
"""

SCALE = """// @warpforge size N = 1 << 16
// @warpforge arg x: in float[N]
// @warpforge arg y: out float[N]
// @warpforge arg n = N
// @warpforge launch grid=cdiv(N, 256), block=256
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def spec_of(text: str, kernel: str) -> KernelSpec:
    src = SourceText(text)
    model = parse(src.data)
    return build_spec(src, model, model.require(kernel), "k.cu")


def tol_of(spec: KernelSpec, name: str) -> tuple[float, float, float]:
    arg = spec.arg(name)
    assert arg is not None
    return spec.tolerance_for(arg)


def rowsum(tol: str = "", out_tol: str = "") -> str:
    return ROWSUM.format(TOL=tol, OUT_TOL=out_tol)


def test_a_kernel_that_sums_gets_the_default_norm_and_an_elementwise_one_does_not() -> None:
    spec = spec_of(rowsum(), "rowsum")
    assert spec.reduces
    assert tol_of(spec, "out") == (1e-4, 1e-5, DEFAULT_NORMS["float32"])
    plain = spec_of(SCALE, "scale")
    assert not plain.reduces
    assert tol_of(plain, "y") == (1e-4, 1e-5, 0.0)


def test_a_spec_level_tol_is_the_whole_statement_and_norm_is_read_where_written() -> None:
    # a spec-level tol without norm: the user's statement, no default floor added
    spec = spec_of(rowsum(tol="// @warpforge tol rtol=1e-4 atol=1e-5\n"), "rowsum")
    assert tol_of(spec, "out") == (1e-4, 1e-5, 0.0)
    spec = spec_of(rowsum(tol="// @warpforge tol rtol=1e-4 atol=0 norm=3e-5\n"), "rowsum")
    assert tol_of(spec, "out") == (1e-4, 0.0, 3e-5)
    # an output's own norm; its other components keep the defaults
    spec = spec_of(rowsum(out_tol=" tol norm=1e-6"), "rowsum")
    assert tol_of(spec, "out") == (1e-4, 1e-5, 1e-6)
    # written back the way it was read, and part of what a measurement is keyed by
    block = spec.to_annotation()
    assert "arg out: out float[B] tol norm=1e-6" in block
    again = spec_of(rowsum(tol="// @warpforge tol rtol=1e-4 atol=0 norm=3e-5\n"), "rowsum")
    assert "tol rtol=1e-4 atol=0 norm=3e-5" in again.to_annotation()
    assert again.spec_hash() != spec.spec_hash()


@pytest.mark.parametrize(("line", "words"), [
    ("// @warpforge tol rtol=1e-4 scale=1e-5\n", "cannot read `scale=1e-5` in tol"),
    ("// @warpforge tol norm=-1e-5\n", "norm must not be negative"),
])
def test_a_malformed_norm_is_an_error_at_its_line(line: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_of(rowsum(tol=line), "rowsum")
    assert words in str(e.value) and "k.cu:1" in str(e.value), str(e.value)


def _sums(rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 row sums of uniform(-1, 1) terms in two orders (sequential, as one thread per row adds them;
    and in 32 interleaved partials combined at the end, as a warp's lanes do), and the terms."""
    x = np.random.default_rng(seed).uniform(-1, 1, size=(rows, k)).astype(np.float32)
    seq = np.zeros(rows, dtype=np.float32)
    for j in range(k):
        seq += x[:, j]
    parts = np.zeros((rows, 32), dtype=np.float32)
    for j in range(0, k, 32):
        parts += x[:, j:j + 32]
    lanes = np.zeros(rows, dtype=np.float32)
    for lane in range(32):
        lanes += parts[:, lane]
    return seq, lanes, x


def test_a_reordered_long_sum_passes_with_the_norm_floor_and_fails_without() -> None:
    seq, lanes, _ = _sums(512, 16384, 0)
    rtol, atol = 1e-4, 1e-5
    plain = cmp.compare("out", lanes, seq, "float32", rtol, atol)
    # the reordered sums differ where the terms cancel: the fixed floor rejects a correct kernel
    assert not plain.ok and plain.max_abs < 2e-3, plain.summary()
    scale = cmp.largest_magnitude(seq, "float32")
    assert scale == pytest.approx(float(np.abs(seq).max()))
    floor = normwise_atol(atol, DEFAULT_NORMS["float32"], scale)
    assert floor > atol
    ok = cmp.compare("out", lanes, seq, "float32", rtol, floor)
    assert ok.ok, ok.summary()


def test_the_norm_floor_still_catches_a_sum_that_drops_a_term() -> None:
    seq, _, x = _sums(512, 16384, 1)
    short = (seq - x[:, -1]).astype(np.float32)  # the last term left out (an off-by-one bound)
    floor = normwise_atol(1e-5, DEFAULT_NORMS["float32"], cmp.largest_magnitude(seq, "float32"))
    rep = cmp.compare("out", short, seq, "float32", 1e-4, floor)
    # every row whose last term is larger than the floor is caught: nearly all of them
    assert rep.mismatches > 500, rep.summary()


def test_the_scale_ignores_what_is_not_a_finite_number_and_the_report_names_the_floor() -> None:
    v = np.array([1.0, -250.0, np.nan, np.inf, 3.0], dtype=np.float32)
    assert cmp.largest_magnitude(v, "float32") == 250.0
    assert cmp.largest_magnitude(np.array([], dtype=np.float32), "float32") == 0.0
    assert cmp.largest_magnitude(np.array([7, -9], dtype=np.int32), "int32") == 0.0  # integers: no norm
    assert normwise_atol(1e-5, 1e-5, float("inf")) == 1e-5
    rep = cmp.BufferReport("out", "float32", 8, rtol=1e-4, atol=1e-5, norm=1e-5, scale=250.0)
    assert "rtol=0.0001 atol=1e-05 norm=1e-05 x max|want| 250" in rep.summary()
    assert tolerance_text(0.0, 0.0) == "exact"
