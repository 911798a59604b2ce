"""A candidate: one variant of a kernel, as plain immutable data (the vocabulary every layer above exchanges).

A candidate carries only what differs from the original file: the kernel's definition text (plus any new
device helpers written before it), launch overrides, extra defines and compile flags. Everything else the
kernel needs (includes, helpers, constants) comes from the original file when the candidate is built, so a
policy never has to reproduce the file and host code proposed by a model is never part of a build.

``hash`` covers exactly what determines behaviour (text, launch, defines, flags); lineage and prose
(``parent``, ``family``, ``rationale``) are left out, so two policies proposing the same variant share one
evaluation in the cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class LaunchOverride:
    """Launch expressions replacing the spec's (same expression language; may use sizes and tunables)."""

    grid: tuple[str, ...] | None = None
    block: tuple[str, ...] | None = None
    smem: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A kernel variant.

    ``source`` is the full definition of the kernel named ``kernel`` (from its ``template``/``extern "C"``
    prefix to its closing brace); device helpers it adds may precede it. ``grid``/``block``/``smem`` are
    spec expressions (``cdiv(N, 512)``) that replace the spec's launch configuration when given; they may
    use the spec's sizes, its tunables and numeric ``defines``. ``defines`` become ``-DNAME=VALUE`` and
    override the spec's tunables of the same name.
    """

    kernel: str
    source: str
    grid: tuple[str, ...] | None = None
    block: tuple[str, ...] | None = None
    smem: str | None = None
    defines: Mapping[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    parent: str | None = None
    family: str = ""
    rationale: str = ""
    #: what reducing the text to device code dropped (``line N: what (why)``); a report, not behaviour
    dropped: tuple[str, ...] = ()
    #: transformation steps (``family:param``) from the original to here; lineage, not behaviour (not hashed):
    #: the offline policy replays them to compose two branches (crossover)
    steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Normalise so that equal variants hash equally however they were written down.
        object.__setattr__(self, "defines", {str(k): str(v) for k, v in sorted(dict(self.defines).items())})
        object.__setattr__(self, "flags", tuple(str(f) for f in self.flags))
        object.__setattr__(self, "dropped", tuple(str(d) for d in self.dropped))
        for name in ("grid", "block"):
            dims = getattr(self, name)
            if dims is not None:
                if isinstance(dims, str):
                    dims = (dims,)
                object.__setattr__(self, name, tuple(str(d).strip() for d in dims))

    def behaviour(self) -> dict[str, Any]:
        """The fields that decide what the candidate computes and how fast: the input of ``hash``."""
        return {
            "kernel": self.kernel,
            "source": self.source,
            "grid": list(self.grid) if self.grid is not None else None,
            "block": list(self.block) if self.block is not None else None,
            "smem": self.smem,
            "defines": dict(self.defines),
            "flags": list(self.flags),
        }

    @property
    def hash(self) -> str:
        """Content hash over ``behaviour()`` (32 hex digits)."""
        data = json.dumps(self.behaviour(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(data.encode("utf-8")).hexdigest()[:32]

    @property
    def id(self) -> str:
        """Short identifier for logs and trees."""
        return self.hash[:12]

    @property
    def definition(self) -> str:
        """The kernel definition text (``source``), under the name the source model uses."""
        return self.source

    @property
    def build_flags(self) -> tuple[str, ...]:
        """Compile flags the variant needs that its source cannot carry (``-Xptxas -O3``): a build change.

        Fast math, register caps and defines all become source when a variant is accepted
        (``search.optimize.apply_candidate``); a flag cannot, so the project's own build (CMake, a Makefile)
        must add it, or the accepted code is not the code that was measured. Front ends label such a variant
        a build change and never apply it without saying so (issue 18, item 2)."""
        return self.flags

    def define_map(self) -> dict[str, str]:
        return dict(self.defines)

    @property
    def launch(self) -> LaunchOverride | None:
        """The launch overrides as one value, or None when the spec's launch applies."""
        if not self.overrides_launch:
            return None
        return LaunchOverride(self.grid, self.block, self.smem)

    @property
    def overrides_launch(self) -> bool:
        return self.grid is not None or self.block is not None or self.smem is not None

    def __hash__(self) -> int:
        return hash(self.hash)

    def derive(self, **changes: Any) -> Candidate:
        """A child of this candidate: ``changes`` applied, ``parent`` set to this one's id."""
        changes.setdefault("parent", self.id)
        return replace(self, **changes)

    @classmethod
    def original(cls, text: str, kernel: str) -> Candidate:
        """The kernel ``kernel`` of a file as it is: the oracle every variant is compared with."""
        return cls(kernel=kernel, source=kernel_definition(text, kernel), family="original",
                   rationale="the kernel as written")


def kernel_definition(text: str, kernel: str) -> str:
    """The definition text of ``kernel`` in ``text``; ``KernelNotFound`` naming the kernels present otherwise."""
    from . import SourceText, parse

    src = SourceText(text)
    model = parse(src.data)
    return src.slice(model.require(kernel).span)


def candidate_from_variant(original_text: str, variant_text: str, kernel: str) -> Candidate:
    """A candidate from a hand-written variant file holding a kernel of the same name.

    The variant file is often a copy of the original with the kernel changed, so it is reduced to device
    code (``cuda.reduce``), to what its kernel needs, and to what the original file does not already hold
    (new device helpers, types with their ``;``, toolkit includes); host code and the rest are dropped and
    listed in ``dropped``. Everything else comes from the original file when the candidate is built.
    """
    from . import SourceText, parse
    from .reduce import reduce_device

    parse(SourceText(variant_text).data).require(kernel)
    reduced = reduce_device(variant_text, kernel=kernel, file_text=original_text, only_needed=True)
    if reduced.kernel(kernel) is None:
        raise KeyError(f"the kernel `{kernel}` in the candidate file could not be kept as device code")
    # Drops the user need not hear about: other kernels and helpers the kernel does not use.
    report = tuple(str(d) for d in reduced.dropped if d.host)
    return Candidate(kernel=kernel, source=reduced.assembled(kernel), family="hand-written",
                     rationale="from a variant file", dropped=report)
