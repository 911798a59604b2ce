"""The kernel IR: every kernel lowered to one canonical text and a summary before any rule runs.

``lower(source, kernel_name, ...)`` returns ``Lowered`` (the canonical definition the structural rules
consume, and the ``Summary``: parallel index space, serial loops, affine accesses, accumulators, element
types) or ``Declined(reason, line)``. See ``docs/transformations.md`` ("The kernel IR").
"""

from .lower import ORDER, Declined, Lowered, build_settings, lower
from .summary import Access, Accumulator, ElementType, Loop, ParallelDim, Summary, describe

__all__ = ["ORDER", "Access", "Accumulator", "Declined", "ElementType", "Loop", "Lowered", "ParallelDim",
           "Summary", "build_settings", "describe", "lower"]
