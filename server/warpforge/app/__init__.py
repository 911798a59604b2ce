"""The jobs a user starts — optimize one kernel, profile one kernel — independent of their front end.

The CLI (``commands/``) and the language server (``lsp/``) both run these jobs and only render their
events: so a kernel is optimized the same way from either side (profile the baseline, let the measured
findings order the rules, search, confirm, reflect, clean up), and each job parses its file once
(``PreparedKernel``).

The names below are loaded on first use (PEP 562 ``__getattr__``): ``warpforge.app.capabilities`` and
``warpforge.app.errors`` are imported by the language server at start, and must not drag in the whole job
machinery (search, GPU pool, LLM policy: ~0.3 s), which the server needs only when a job starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import JobError
    from .events import (
        CandidateFound,
        Evidence,
        JobEvent,
        JobFailed,
        JobFinished,
        JobStarted,
        Profiled,
        Progress,
    )
    from .optimize import OptimizeJob, OptimizeSettings
    from .prepared import PreparedKernel
    from .profile import ProfileJob, ProfileSettings

#: public name -> the submodule that defines it
_WHERE = {
    **dict.fromkeys(("CandidateFound", "Evidence", "JobEvent", "JobFailed", "JobFinished", "JobStarted",
                     "Profiled", "Progress"), "events"),
    "OptimizeJob": "optimize", "OptimizeSettings": "optimize", "JobError": "errors",
    "PreparedKernel": "prepared", "ProfileJob": "profile", "ProfileSettings": "profile",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CandidateFound",
    "Evidence",
    "JobError",
    "JobEvent",
    "JobFailed",
    "JobFinished",
    "JobStarted",
    "OptimizeJob",
    "OptimizeSettings",
    "PreparedKernel",
    "ProfileJob",
    "ProfileSettings",
    "Profiled",
    "Progress",
]
