"""The exit-code contract of every ``warpforge`` command, in one place.

Scripts and CI jobs branch on these numbers, so each one means one thing for every command:

- ``OK`` (0): the job was done. ``optimize`` finding no faster variant is a result, not a failure.
- ``FAILED`` (1): the job ran and failed (a variant is wrong, the original kernel could not be evaluated,
  a file could not be written).
- ``USAGE`` (2): bad input the user must fix (an option, a file, a spec value); nothing ran.
- ``UNAVAILABLE`` (3): this machine cannot do the job (no GPU, pycuda, Ray or Nsight Compute); what could
  be done without it was printed first.

``CliError`` carries its code with its one-line message, so validation anywhere can stop a command with
the right code without the command knowing where the problem was found.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    UNAVAILABLE = 3
    #: the shell's convention for SIGINT (128 + 2)
    INTERRUPTED = 130


class CliError(Exception):
    """A user-facing error: printed as one line, exit code ``code``."""

    def __init__(self, message: str, code: int = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code
