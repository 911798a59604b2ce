"""The funnel's denominator test, "a serial loop over global memory or a reduction": the server's own
(``warpforge.cuda.loopclass``), which the "why not" hint uses too, so both count the same kernels."""

from warpforge.cuda.loopclass import LoopClass, classify

__all__ = ["LoopClass", "classify"]
