"""The jobs a user starts — optimize one kernel, profile one kernel — independent of their front end.

The CLI (``commands/``) and the language server (``lsp/``) both run these jobs and only render their
events: so a kernel is optimized the same way from either side (profile the baseline, let the measured
findings order the rules, search, confirm, reflect, clean up), and each job parses its file once
(``PreparedKernel``).
"""

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
from .prepared import JobError, PreparedKernel
from .profile import ProfileJob, ProfileSettings

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
