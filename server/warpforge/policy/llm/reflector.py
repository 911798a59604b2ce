"""The reflector: turns outcomes of tried variants into lessons kept in search memory.

Why: search memory (``search/memory.py``) keeps numbers per family — tries, wins, best gain. What it
cannot keep is *why*: "vectorizing helped, the division is now the cost", "warp per row broke on the odd
size because lanes past the row end were read". The reflector writes those sentences, one per outcome
that teaches something, into the ``llm_lessons`` table of the workspace store next to search memory (an
in-memory store when the job has none), and the planner reads the latest ones for the same kernel in
later rounds and later jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...store import Store
from .client import LLMClient
from .context import KernelBrief
from .planner import system_for
from .schema import ToolSpec, array, obj, string

OUTCOMES = ["faster", "slower", "no_change", "compile_error", "incorrect", "crashed", "other"]

RECORD = ToolSpec(
    "record_lessons",
    "Record what the outcomes teach about optimizing this kernel, one lesson per instructive outcome.",
    obj({"lessons": array(obj({
        "family": string("The family of the variant the lesson is about"),
        "outcome": string("What happened", enum=OUTCOMES),
        "lesson": string("One or two sentences: what was tried, what happened, the likely reason, what to try next"),
    }))}),
)

@dataclass(frozen=True)
class Outcome:
    """How one variant fared (what the reflector is shown)."""

    family: str
    title: str
    status: str
    reason: str
    speedup: float | None
    parent_speedup: float | None

    def describe(self) -> str:
        s = f"- {self.family}: {self.title} → {self.status}"
        if self.speedup is not None:
            s += f", {self.speedup:.3f}x of the original"
            if self.parent_speedup:
                s += f" ({self.speedup / self.parent_speedup:.3f}x of its parent)"
        if self.reason:
            s += f"; log: {self.reason[:400]}"
        return s


@dataclass(frozen=True)
class Lesson:
    family: str
    outcome: str
    lesson: str


class LessonStore:
    """The ``llm_lessons`` table of a workspace ``Store`` (the one search memory uses), or of a private
    in-memory store for a one-off job; a path opens the store there."""

    def __init__(self, store: Store | str | Path | None = None) -> None:
        if isinstance(store, Store):
            self.store = store
        else:
            self.store = Store(store) if store is not None else Store.in_memory()

    @property
    def path(self) -> Path:
        return self.store.path

    def add(self, kernel_key: str, lessons: Sequence[Lesson]) -> None:
        now = time.time()
        rows = [(kernel_key, x.family, x.outcome, x.lesson[:600], now) for x in lessons]
        with self.store.writing() as db:
            db.executemany("INSERT INTO llm_lessons (kernel_key, family, outcome, lesson, created) "
                           "VALUES (?, ?, ?, ?, ?)", rows)

    def recent(self, kernel_key: str, limit: int = 12) -> list[Lesson]:
        with self.store.reading() as db:
            rows = db.execute("SELECT family, outcome, lesson FROM llm_lessons WHERE kernel_key = ? "
                              "ORDER BY created DESC, rowid DESC LIMIT ?", (kernel_key, limit)).fetchall()
        return [Lesson(str(f), str(o), str(t)) for f, o, t in reversed(rows)]


class Reflector:
    role = "reflector"

    def __init__(self, client: LLMClient, brief: KernelBrief) -> None:
        self.client = client
        self.brief = brief

    async def reflect(self, *, kernel_key: str, outcomes: Sequence[Outcome]) -> list[Lesson]:
        prompt = "\n".join([
            "## Outcomes of variants tried on this kernel (measured by WarpForge)",
            *(o.describe() for o in outcomes), "",
            "## Task", "Record the lessons these outcomes teach by calling `record_lessons`.",
        ])
        result = await self.client.structured(self.role, system=system_for(self.role, self.brief), prompt=prompt,
                                              tool=RECORD, kernel=kernel_key)
        out: list[Lesson] = []
        for d in result.value.get("lessons", []):
            if isinstance(d, dict) and str(d.get("lesson", "")).strip():
                out.append(Lesson(str(d.get("family", "")), str(d.get("outcome", "other")), str(d["lesson"]).strip()))
        return out


def lesson_lines(lessons: Sequence[Lesson]) -> list[str]:
    return [f"lesson ({x.family}, {x.outcome}): {x.lesson}" for x in lessons]


def memory_lines(summary: dict[str, tuple[int, int, float]], notes: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Search memory's per-family numbers as prompt lines."""
    out = []
    for fam, (tries, wins, best) in sorted(summary.items()):
        out.append(f"{fam}: {tries} tried, {wins} faster, best gain {best:.2f}x")
    for fam, note in notes:
        if note:
            out.append(f"{fam}: last note: {note[:200]}")
    return out

