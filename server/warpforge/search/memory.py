"""Search memory: what was tried on a kernel and how it went, kept across runs in SQLite.

Why: a second Optimize on the same kernel should not re-learn that `block_size` never helps it or that
`vectorize` breaks its tail; MCTS orders proposals by these priors and the LLM planner reads them. A
user's Reject is recorded too, so a variant family the user does not want is deprioritized.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ..store import Store
from .engine import SearchResult


def kernel_key(kernel_text: str, spec_hash: str) -> str:
    """Identifies 'this kernel under this spec' independent of where it sits in the file."""
    return hashlib.sha256(f"{' '.join(kernel_text.split())}\0{spec_hash}".encode()).hexdigest()[:24]


class SearchMemory:
    """The ``search_memory`` table of a workspace ``Store`` (its schema is the store's, versioned there).

    Given a path rather than a store, it opens the store at that path, for callers that hold no store.
    """

    def __init__(self, store: Store | str | Path) -> None:
        self.store = store if isinstance(store, Store) else Store(store)

    @property
    def path(self) -> Path:
        return self.store.path

    def record(self, key: str, family: str, ok: bool, speedup: float | None, note: str = "") -> None:
        self._record_many([(key, family, ok, speedup, note)])

    def record_result(self, key: str, result: SearchResult) -> None:
        """Every evaluated non-root node of a finished search, credited with its gain over its parent.

        The marginal gain (not the absolute speedup) is what says whether applying the family helped:
        a family applied on top of a 2× variant should not inherit the 2×. One transaction for the whole
        search, so another process never reads half of it.
        """
        rows: list[tuple[str, str, bool, float | None, str]] = []
        for n in result.nodes:
            if n is result.root or n.evaluation is None:
                continue
            parent = n.parent.speedup if n.parent is not None and n.parent.speedup else 1.0
            gain = n.speedup / parent if n.speedup is not None else None
            rows.append((key, n.candidate.family, n.ok, gain, n.evaluation.reason))
        self._record_many(rows)

    def _record_many(self, outcomes: list[tuple[str, str, bool, float | None, str]]) -> None:
        rows = []
        for key, family, ok, speedup, note in outcomes:  # each its own time: notes() lists them in this order
            win = 1 if ok and speedup is not None and speedup > 1.0 else 0
            rows.append((key, family, win, speedup if win and speedup is not None else 1.0, note[:500], time.time()))
        with self.store.writing() as db:
            db.executemany(
                """INSERT INTO search_memory (kernel_key, family, tries, wins, best, last_note, updated)
                   VALUES (?, ?, 1, ?, ?, ?, ?)
                   ON CONFLICT (kernel_key, family) DO UPDATE SET
                     tries = tries + 1, wins = wins + excluded.wins, best = max(best, excluded.best),
                     last_note = excluded.last_note, updated = excluded.updated""",
                rows,
            )

    def record_rejection(self, key: str, family: str, note: str = "rejected by the user") -> None:
        with self.store.writing() as db:
            db.execute(
                """INSERT INTO search_memory (kernel_key, family, rejected, last_note, updated)
                   VALUES (?, ?, 1, ?, ?)
                   ON CONFLICT (kernel_key, family) DO UPDATE SET rejected = rejected + 1,
                     last_note = excluded.last_note, updated = excluded.updated""",
                (key, family, note, time.time()),
            )

    def summary(self, key: str) -> dict[str, tuple[int, int, float]]:
        """family -> (tries, wins, best speedup); a user rejection counts as a failed try."""
        with self.store.reading() as db:
            rows = db.execute("SELECT family, tries, wins, best, rejected FROM search_memory WHERE kernel_key = ?",
                              (key,)).fetchall()
        return {fam: (int(t) + int(r), int(w), float(b)) for fam, t, w, b, r in rows}

    def notes(self, key: str) -> list[tuple[str, str]]:
        with self.store.reading() as db:
            rows = db.execute("SELECT family, last_note FROM search_memory WHERE kernel_key = ? ORDER BY updated",
                              (key,)).fetchall()
        return [(str(f), str(n)) for f, n in rows]
