"""A user's mistake is one line in the log, a bug keeps its traceback (issue 19: a spec error printed a
40-line traceback in the editor's Output channel)."""

from __future__ import annotations

import logging

import pytest

from warpforge.app.prepared import JobError, log_failure
from warpforge.gpu.backends import GpuUnavailable
from warpforge.spec.model import SpecError


@pytest.mark.parametrize("error", [
    SpecError("k.cu", 4, "unknown distribution `gauss(0, 1)`", "write normal(0, 1)"),
    JobError("no GPU in the Ray cluster"),
    GpuUnavailable("no NVIDIA GPU or driver was found"),
])
def test_a_users_mistake_is_one_line_with_its_message(error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("warpforge.test")
    with caplog.at_level(logging.INFO, logger="warpforge.test"):
        log_failure(log, "optimize job for k", error)
    [rec] = caplog.records
    assert rec.exc_info is None and rec.getMessage() == f"optimize job for k failed: {error}"
    with caplog.at_level(logging.DEBUG, logger="warpforge.test"):
        caplog.clear()
        log_failure(log, "optimize job for k", error)
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)  # the trace log keeps it


def test_a_bug_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("warpforge.test")
    try:
        raise KeyError("node 7")
    except KeyError as e:
        with caplog.at_level(logging.INFO, logger="warpforge.test"):
            log_failure(log, "optimize job for k", e)
    [rec] = caplog.records
    assert rec.levelno == logging.INFO and rec.exc_info is not None
