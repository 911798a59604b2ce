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

With ``--json`` an error is also a JSON object on stdout (``error_json``), so a script that parses stdout
gets an answer it can read instead of nothing: ``{"error": {"message", "file", "line", "column",
"exit_code", "kind"}}`` (``kind`` is the code's name below; ``file``/``line``/``column`` null when the error
is not about a place in a file). A batch (``hints``, ``kernels`` over several files) keeps the results of
the good files and puts ``{"file", "error"}`` in place of each bad one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import IntEnum
from typing import Any


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


#: ``kind`` of a JSON error, by exit code
KINDS: dict[int, str] = {ExitCode.OK: "ok", ExitCode.FAILED: "failed", ExitCode.USAGE: "bad_input",
                         ExitCode.UNAVAILABLE: "unavailable", ExitCode.INTERRUPTED: "interrupted"}


def error_json(message: str, code: int, *, files: Iterable[str] = (), file: str | None = None,
               line: int | None = None) -> dict[str, Any]:
    """The ``error`` object of the ``--json`` contract. ``file`` and ``line`` when the caller knows them, else
    read from the message's ``FILE:LINE:COL:`` prefix when it starts with one of ``files`` (the command's
    input files: every message about a file starts with its name)."""
    column: int | None = None
    if file is None:
        for name in sorted((f for f in files if f), key=len, reverse=True):
            if message.startswith(name) and message[len(name):len(name) + 1] in (":", " ", ""):
                file = name
                m = re.match(r":(\d+)(?::(\d+))?:", message[len(name):])
                if m:
                    line = int(m.group(1))
                    column = int(m.group(2)) if m.group(2) else None
                break
    return {"message": message, "file": file, "line": line, "column": column, "exit_code": int(code),
            "kind": KINDS.get(int(code), "failed")}
