"""How a structural rule says why it does not apply: in words, at a line, with how far its analysis got.

Why: a rule that declines silently (``return None``) leaves the user with nothing, and the wide yardstick with
a raise site. A rule's matcher calls ``declined("the reduction's result is written with `=` ...", node,
Stage.LEGALITY)`` where it gives up; the call returns None, so it reads as the ``return None`` it replaces and
costs nothing when nobody listens. ``policy.whynot`` listens (``recording``) while it asks a rule for
variants, and keeps the note that got furthest (``Stage``): that is the rule's answer to "why not".

Stages are comparable across rules, which is what "the rewrite that came closest" means:

* ``SCOPE``: the kernel lacks what the rule rewrites (no loop, no atomic, no tree reduction);
* ``SHAPE``: the thing is there (a loop, an atomic) but not in a form the rule writes;
* ``LEGALITY``: the shape is there, a dependence or safety check forbids the rewrite;
* ``LAUNCH``: the rewrite is legal, no launch of the spec fits (or there is no spec);
* ``WRITE``: planned, the new body could not be written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from tree_sitter import Node

_T = TypeVar("_T")


class Stage(IntEnum):
    """How far a rule's analysis got before it declined (higher is closer to a proposal)."""

    SCOPE = 0
    SHAPE = 1
    LEGALITY = 2
    LAUNCH = 3
    WRITE = 4


@dataclass(frozen=True)
class Note:
    """One decline: the words, the stage, and the 1-based line of the kernel text it points at (0: none)."""

    reason: str
    stage: Stage
    line: int = 0


_LOG: ContextVar[list[Note] | None] = ContextVar("warpforge_why_not", default=None)


def declined(reason: str, node: Node | None = None, stage: Stage = Stage.SHAPE, *, line: int = 0,
             result: _T | None = None) -> _T | None:
    """Record why the rule gives up here (when someone is listening) and return None, so ``return
    declined(...)`` replaces a bare ``return None``. ``node`` (of the candidate's definition) gives the line.
    (``result`` is never passed: it only types the None as whatever the caller returns, which a plain ``->
    None`` would make mypy reject in ``return declined(...)``.)"""
    log = _LOG.get()
    if log is not None:
        log.append(Note(reason, stage, _line(node) if node is not None else line))
    return result


def _line(node: Node) -> int:
    """1-based line of a node; 0 for a whole body (its ``{`` line says nothing)."""
    return 0 if node.type == "compound_statement" else node.start_point[0] + 1


@contextmanager
def recording() -> Iterator[list[Note]]:
    """Collect the ``declined`` notes of the code run inside (per thread and task: a ContextVar)."""
    log: list[Note] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def furthest(notes: list[Note]) -> Note | None:
    """The note that got furthest (the last of those at the highest stage): a matcher that tries several
    alternatives records each, and the one that went deepest is the telling one."""
    best: Note | None = None
    for n in notes:
        if best is None or n.stage >= best.stage:
            best = n
    return best


class Decline(Exception):
    """A rule's internal "no", raised deep in a matcher and caught where it answers None: it carries the words,
    the node's line and the stage, and ``record`` passes them to ``declined`` at the catch."""

    def __init__(self, reason: str, node: Node | None = None, stage: Stage = Stage.SHAPE) -> None:
        super().__init__(reason)
        self.note = Note(reason, stage, _line(node) if node is not None else 0)

    def record(self) -> None:
        """Pass the note to whoever listens (``recording``)."""
        declined(self.note.reason, None, self.note.stage, line=self.note.line)
