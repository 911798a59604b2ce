"""warp_per_row's declines in words (issue 27, item 5): ``why_not`` says what blocked the re-mapping of a
"one thread per row" kernel, in terms a CUDA developer reads, at the blocking line of the candidate's text.

Each kernel is written for the test and is one near-miss of the shape (a global accumulator, a value carried
between iterations, a barrier, an element another lane wrote, no guard, rows too short); the decline must
name the cause, point at the line, and agree with the rule itself (no ``warp_per_row`` variants). The
accepted form gets no reason and does get variants. The wide yardstick's funnel records the same words.
"""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, text_policy
from warpforge.policy.ir.remap import NotLegal
from warpforge.policy.rules import REGISTRY
from warpforge.policy.rules.base import RuleContext
from warpforge.policy.rules.warp_per_row import why_not

HEAD = """\
// @warpforge size R = 3000
// @warpforge size C = {cols}
// @warpforge arg A: in float[R*C] uniform(-1, 1)
// @warpforge arg x: in float[C] uniform(-1, 1)
// @warpforge arg y: out float[R*C]
// @warpforge arg n = R
// @warpforge arg m = C
// @warpforge launch grid=cdiv(R, 128), block=128
__global__ void rows(const float* A, const float* x, float* y, int n, int m)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
"""

GUARDED = """\
    if (i < n) {{
{work}
    }}
}}
"""

#: the accepted form: a local accumulator, the row's result stored once
ACCEPTED = """\
        float s = 0.0f;
        for (int j = 0; j < m; j++)
            s += A[i * m + j] * x[j];
        y[i] = s;"""


def _context(work: str, *, cols: int = 500, guarded: bool = True) -> RuleContext:
    text = HEAD.format(cols=cols) + (GUARDED.format(work=work) if guarded else work + "\n}\n")
    pol = text_policy(text, "rows")
    return pol.context(pol.root_candidate())


def _declined(ctx: RuleContext) -> NotLegal:
    got = why_not(ctx)
    assert got is not None
    assert REGISTRY["warp_per_row"].variants(ctx) == []  # the words agree with the rule: nothing proposed
    return got


def _line(ctx: RuleContext, got: NotLegal) -> str:
    assert got.line > 0
    return ctx.candidate.definition.splitlines()[got.line - 1]


def test_the_accepted_row_loop_has_no_reason_and_is_proposed() -> None:
    ctx = _context(ACCEPTED)
    assert why_not(ctx) is None
    assert "warp8" in REGISTRY["warp_per_row"].variants(ctx)


def test_an_accumulation_through_global_memory_is_named_at_the_loop_write() -> None:
    ctx = _context("""\
        y[i] = 0.0f;
        for (int j = 0; j < m; j++)
            y[i] += A[i * m + j] * x[j];""")
    got = _declined(ctx)
    assert "accumulation through global memory" in got.reason and "local variable" in got.reason
    assert "y[i] += A[i * m + j]" in _line(ctx, got)


def test_a_value_carried_between_iterations_is_serial() -> None:
    ctx = _context("""\
        float s = 0.0f;
        for (int j = 0; j < m; j++)
            s = s * 0.5f + A[i * m + j];
        y[i] = s;""")
    got = _declined(ctx)
    assert "`s`" in got.reason and "other than as a sum" in got.reason and "serial" in got.reason
    assert "s = s * 0.5f" in _line(ctx, got)


def test_a_read_of_another_lanes_written_element_is_named() -> None:
    ctx = _context("""\
        for (int j = 0; j < m; j++)
            y[i * m + j] = A[i * m + j] + y[i * m + m - 1 - j];""")
    got = _declined(ctx)
    assert "other than `E + j`" in got.reason and "another lane owns" in got.reason
    assert "y[i * m + m - 1 - j]" in got.reason
    assert "y[i * m + m - 1 - j]" in _line(ctx, got)


def test_a_barrier_names_the_call() -> None:
    ctx = _context(ACCEPTED.replace("        y[i] = s;", "        __syncthreads();\n        y[i] = s;"))
    got = _declined(ctx)
    assert "`__syncthreads()`" in got.reason and "synchronize" in got.reason
    assert "__syncthreads" in _line(ctx, got)


def test_a_kernel_without_a_guard_is_told_to_bound_its_rows() -> None:
    ctx = _context(ACCEPTED.replace("        ", "    "), guarded=False)
    got = _declined(ctx)
    assert "no guard on the row index `i`" in got.reason
    assert "int i = blockIdx.x" in _line(ctx, got)


def test_short_rows_decline_after_the_shape_is_recognized() -> None:
    ctx = _context(ACCEPTED.replace("j < m", "j < 9"), cols=9)
    got = _declined(ctx)
    assert "fewer than 32 times" in got.reason
    assert "for (int j = 0; j < 9" in _line(ctx, got)


@pytest.mark.parametrize(("work", "words"), [
    ("""\
        int c = 0;
        for (int j = 0; j < m; j++)
            if (A[i * m + j] > 0.0f) c++;
        y[i] = c;""", "counts something declared outside the loop"),
    ("""\
        int k = blockIdx.y * blockDim.y + threadIdx.y;
        float s = 0.0f;
        for (int j = 0; j < m; j++)
            s += A[i * m + j] * x[j];
        y[i * m + k] = s;""", "a second thread index besides the row index `i` (a 2-D thread mapping)"),
    ("""\
        float s = 0.0f;
        int j = 0;
        while (j < m) { s += A[i * m + j]; j++; }
        y[i] = s;""", "a `while` or `do` loop is not split"),
])
def test_other_near_misses_say_what_the_loop_does(work: str, words: str) -> None:
    got = _declined(_context(work))
    assert words in got.reason


@pytest.mark.parametrize(("work", "cols", "words"), [
    ("""\
        y[i] = 0.0f;
        for (int j = 0; j < m; j++)
            y[i] += A[i * m + j] * x[j];""", 500, "accumulation through global memory"),
    (ACCEPTED.replace("j < m", "j < 9"), 9, "fewer than 32 times"),  # recognized, but no launch is sized
])
def test_the_wide_funnel_records_the_same_words(work: str, cols: int, words: str) -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.wide.stages import REJECTIONS, _decline_reason

    REJECTIONS.patch()
    ctx = _context(work, cols=cols)
    reason = _decline_reason(REGISTRY["warp_per_row"], ctx)
    assert words in reason
    got = why_not(ctx)
    assert got is not None and got.reason == reason
