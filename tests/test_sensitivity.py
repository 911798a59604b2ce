"""The tail perturbation of the sensitivity check, on the host (``inputs.perturb_tail``).

What it must guarantee: the last elements change by far more than any tolerance, in one direction (a sum
cannot cancel the moves), everything before them stays as it was, and integers stay inside their declared
range (indices stay valid). The last test shows the arithmetic of issue 14 with the host comparison: a sum
missing its last 100 of 2^24 elements passes rtol 1e-4 on plain inputs and fails on perturbed ones.
"""

from __future__ import annotations

import numpy as np

from warpforge.gpu.compare import compare, sensitivity_tolerance
from warpforge.gpu.inputs import (
    TAIL,
    TAIL_MAX_FLOAT16,
    TAIL_SCALE,
    ArgLayout,
    bfloat16_to_float32,
    generate,
    perturb_tail,
)


def test_float_tail_moves_up_by_far_more_than_its_scale_and_the_rest_is_untouched() -> None:
    arg = ArgLayout("x", "in", "float32", 1000, dist=("normal", 0.0, 2.0))
    x = generate(arg, 1)
    y = perturb_tail(arg, x)
    assert np.array_equal(y[:-TAIL], x[:-TAIL])
    moved = y[-TAIL:].astype(np.float64) - x[-TAIL:]
    assert np.allclose(moved, TAIL_SCALE * 6.0, rtol=1e-6)  # scale of normal(0, 2): |mu| + 3 sigma
    assert not np.shares_memory(x, y)


def test_half_precision_stays_finite_and_bfloat16_is_perturbed_as_bits() -> None:
    h = ArgLayout("h", "in", "float16", 64, dist=("uniform", -1.0, 1.0))
    hx = generate(h, 2)
    hy = perturb_tail(h, hx)
    assert np.all(np.isfinite(hy)) and np.all(hy[-TAIL:] > TAIL_MAX_FLOAT16 - 2)
    b = ArgLayout("b", "in", "bfloat16", 64, dist=("uniform", 0.0, 1.0))
    bx = generate(b, 2)
    by = bfloat16_to_float32(perturb_tail(b, bx))
    assert np.all(by[-TAIL:] > 0.9 * TAIL_SCALE) and np.array_equal(by[:-TAIL], bfloat16_to_float32(bx)[:-TAIL])


def test_integers_are_reflected_inside_their_range_and_others_left_alone() -> None:
    idx = ArgLayout("idx", "in", "int32", 500, dist=("int", 0.0, 500.0))
    x = generate(idx, 3)
    y = perturb_tail(idx, x)
    assert np.array_equal(y[-TAIL:], 499 - x[-TAIL:])
    assert y.min() >= 0 and y.max() < 500  # still valid indices
    const = ArgLayout("c", "in", "int32", 100, dist=("const", 7.0, 0.0))
    assert np.array_equal(perturb_tail(const, generate(const, 3)), generate(const, 3))


def test_a_buffer_shorter_than_the_tail_is_perturbed_whole() -> None:
    acc = ArgLayout("out", "inout", "float32", 1, dist=("zeros", 0.0, 0.0))
    assert perturb_tail(acc, generate(acc, 0))[0] == TAIL_SCALE
    empty = ArgLayout("e", "in", "float32", 0)
    assert perturb_tail(empty, generate(empty, 0)).size == 0


def test_a_sum_missing_its_tail_passes_rtol_1e_4_on_plain_inputs_and_fails_on_perturbed_ones() -> None:
    arg = ArgLayout("inp", "in", "float32", 1 << 24, dist=("uniform", 0.0, 1.0))
    x = generate(arg, 1)

    def sums(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        full = np.array([data.astype(np.float64).sum()], dtype=np.float32)
        dropped = np.array([data[:-100].astype(np.float64).sum()], dtype=np.float32)
        return dropped, full

    got, want = sums(x)
    assert compare("out", got, want, "float32", 1e-4, 1e-5).ok  # the tolerance hides it...
    got, want = sums(perturb_tail(arg, x))
    assert not compare("out", got, want, "float32", 1e-4, 1e-5).ok  # ...the perturbed tail does not


def _matvec(a: np.ndarray, x: np.ndarray, lanes: int, skip: int = 0) -> np.ndarray:
    """fp32 y = A x as a GPU computes it: ``lanes`` partial sums per row, each a chain of fused multiply-adds
    over columns j = l, l + lanes, ..., then combined by a butterfly (``lanes`` = 1: one thread per row).
    ``skip``: the last columns left out (a tail bug)."""
    n = a.shape[1] - skip
    parts = []
    for lane in range(lanes):
        acc = np.zeros(a.shape[0], dtype=np.float32)
        for j in range(lane, n, lanes):  # fma: the fp32 product is exact in fp64, one rounding to fp32
            acc = (acc.astype(np.float64) + a[:, j].astype(np.float64) * np.float64(x[j])).astype(np.float32)
        parts.append(acc)
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [parts[i] + parts[i + half] for i in range(half)]
    return parts[0]


def test_a_reordered_sum_follows_the_perturbed_tail_and_a_skipped_tail_does_not() -> None:
    # Measured on an H100: a warp-per-row matvec (16384 x 4096, rtol = atol = 1e-3) was turned down by the
    # sensitivity check, one output off by 4e-3, where the perturbed terms (~1e4) cancel to an output near 1.
    # The check asks whether the candidate follows the change; its tolerance grows with the change's size.
    # Built here on purpose: half the rows weigh x's perturbed tail +1, -1, ... so that its terms cancel.
    m, n = 256, 1024
    av = ArgLayout("A", "in", "float32", m * n, dist=("uniform", -1.0, 1.0))
    xv = ArgLayout("x", "in", "float32", n, dist=("uniform", -10.0, 10.0))
    a, x = generate(av, 0).reshape(m, n), generate(xv, 0)
    a[: m // 2, n - TAIL:] = np.where(np.arange(TAIL) % 2 == 0, 1.0, -1.0).astype(np.float32)
    tx = perturb_tail(xv, x)
    plain, perturbed = _matvec(a, x, 1), _matvec(a, tx, 1)
    change = compare("y", perturbed, plain, "float32", 1e-3, 1e-3)
    assert change.mismatches > 0.4 * m  # the outputs follow x's tail (where its terms do not cancel)
    tol = sensitivity_tolerance((1e-3, 1e-3), change.max_abs)
    assert tol[0] == 1e-3 and tol[1] > 1.0
    warp = _matvec(a, tx, 32)
    summed = compare("y", warp, perturbed, "float32", 1e-3, 1e-3)
    assert not summed.ok and summed.mismatches < m // 2  # the spec's tolerance turns down cancelling rows
    assert compare("y", warp, perturbed, "float32", *tol).ok  # follows the change
    skipped = _matvec(a, tx, 32, skip=1)  # drops one perturbed column
    assert not compare("y", skipped, perturbed, "float32", *tol).ok


def test_the_sensitivity_tolerance_leaves_exact_and_unbounded_cases_alone() -> None:
    assert sensitivity_tolerance((0.0, 0.0), 1e6) == (0.0, 0.0)
    assert sensitivity_tolerance((1e-4, 1e-5), float("inf")) == (1e-4, 1e-5)
    assert sensitivity_tolerance((1e-4, 1e-5), 0.0) == (1e-4, 1e-5)
    assert sensitivity_tolerance((1e-4, 1e-5), 100.0) == (1e-4, 1e-5 + 1e-2)
