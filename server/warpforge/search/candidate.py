"""A candidate: one variant of a kernel to compile, verify and time.

A candidate carries only what differs from the original kernel — its definition text, launch overrides,
``-D`` defines and compile flags — plus where it came from (parent, family, rationale) for the search
tree and the report. Its ``content_hash`` covers exactly what determines behaviour, so the evaluation
cache and the search's de-duplication agree on "the same variant".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchOverride:
    """Launch expressions replacing the spec's (same expression language, may use sizes and tunables)."""

    grid: tuple[str, ...] | None = None
    block: tuple[str, ...] | None = None
    smem: str | None = None


@dataclass(frozen=True)
class Candidate:
    kernel: str
    #: the full kernel definition (template prefix and qualifiers included), as it would replace the original
    definition: str
    launch: LaunchOverride | None = None
    defines: tuple[tuple[str, str], ...] = ()
    flags: tuple[str, ...] = ()
    parent: str | None = None
    family: str = "original"
    rationale: str = ""
    #: transformations applied from the original to here (for crossover and the report)
    steps: tuple[str, ...] = field(default=())

    @property
    def content_hash(self) -> str:
        data = {
            "kernel": self.kernel,
            "definition": self.definition.strip(),
            "launch": None if self.launch is None else [self.launch.grid, self.launch.block, self.launch.smem],
            "defines": sorted(self.defines),
            "flags": list(self.flags),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]

    @property
    def id(self) -> str:
        return self.content_hash

    def define_map(self) -> dict[str, str]:
        return dict(self.defines)
