"""What an analyzer sees about one kernel: source, tree, spec, ptxas resources, SASS per line.

Analyzers are small functions of a ``KernelContext``; building the context once per kernel (one parse of
the kernel's text, one spec resolution, one SASS line table) keeps each analyzer cheap and the set of
them consistent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar, cast

from tree_sitter import Node, Tree

from ..compiler.build import Resources
from ..cuda.access import Access, param_access
from ..cuda.model import FileModel, Kernel
from ..cuda.parser import parse_tree
from ..cuda.text import Position, Range, SourceText, Span
from ..cuda.tree import walk
from ..spec.model import KernelSpec, ResolvedSpec
from .sass import SassFunction

if TYPE_CHECKING:
    from .roofline import KernelProfile


T = TypeVar("T")

#: streaming multiprocessors of the largest data-centre or desktop part of each architecture (V100, T4, A100,
#: RTX 3090 Ti, RTX 4090, H100 SXM, B200, RTX 5090)
SM_COUNTS = {"sm_70": 80, "sm_75": 40, "sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132, "sm_100": 148,
             "sm_120": 170}


@dataclass
class KernelContext:
    file: str
    src: SourceText
    model: FileModel
    kernel: Kernel
    arch: str = "sm_90"
    #: True when ``arch`` is only the default (none configured, no GPU seen): hints then say "your GPU"
    arch_assumed: bool = False
    spec: KernelSpec | None = None
    spec_error: str | None = None
    resources: Resources | None = None
    sass: SassFunction | None = None
    #: per 1-based source line: SASS instruction categories (empty without SASS)
    sass_lines: dict[int, Counter[str]] = field(default_factory=dict)
    #: the profile stage's evidence (class, Nsight Compute metrics, ceilings); None in static analysis
    profile: KernelProfile | None = None
    #: models built from this context once and shared by the analyzers (see ``shared``)
    _shared: dict[object, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    def shared(self, make: Callable[[KernelContext], T]) -> T:
        """``make(self)``, built on first use and kept: the models several analyzers read (the kernel facts,
        the lane model) are built once per kernel, whichever analyzer asks first."""
        if make not in self._shared:
            self._shared[make] = make(self)
        return cast(T, self._shared[make])

    def gpu(self) -> str:
        """The GPU a hint speaks of: "an sm_80 GPU" when the architecture is known, else "your GPU" (a hint
        must not claim an H100 the user does not have)."""
        return "your GPU" if self.arch_assumed else f"an {self.arch} GPU"

    def warp_schedulers(self) -> int:
        """Warp schedulers of the largest part of the architecture (SMs × 4): below this many warps some
        schedulers have nothing to issue. The default architecture's (sm_90, 132 SMs) when it is unknown."""
        return 4 * SM_COUNTS.get(self.arch.rstrip("af"), SM_COUNTS["sm_90"])

    # ----------------------------------------------------------------- tree access
    @cached_property
    def tree(self) -> Tree:
        """The kernel's own definition, parsed alone (offsets relative to ``kernel.span.start``)."""
        return parse_tree(self.src.data[self.kernel.span.start : self.kernel.span.end])

    @property
    def base(self) -> int:
        return self.kernel.span.start

    @cached_property
    def body(self) -> Node | None:
        """The kernel body's compound_statement."""
        fn = next(walk(self.tree.root_node, ("function_definition",)), None)
        return fn.child_by_field_name("body") if fn is not None else None

    @cached_property
    def access(self) -> dict[str, Access]:
        return param_access(self.src, self.kernel)

    @cached_property
    def resolved(self) -> ResolvedSpec | None:
        if self.spec is None:
            return None
        try:
            return self.spec.resolve()
        except ValueError:
            return None

    def text(self, node: Node) -> str:
        return self.src.data[self.base + node.start_byte : self.base + node.end_byte].decode("utf-8", "replace")

    def span(self, node: Node) -> Span:
        return Span(self.base + node.start_byte, self.base + node.end_byte)

    def range(self, node: Node) -> Range:
        return self.src.range(self.span(node))

    def line_range(self, line: int) -> Range:
        """The non-blank text of a 1-based line of the file."""
        idx = max(0, min(line - 1, self.src.line_count - 1))
        text = self.src.line_text(idx)
        start = len(text) - len(text.lstrip())
        start_units = len(text[:start].encode("utf-16-le")) // 2
        end_units = len(text.rstrip().encode("utf-16-le")) // 2
        return Range(Position(idx, start_units), Position(idx, max(start_units, end_units)))

    def walk(self, node: Node | None = None) -> Iterator[Node]:
        """Pre-order walk of the kernel's tree (or a subtree)."""
        return walk(node if node is not None else self.tree.root_node)

    def node_line(self, node: Node) -> int:
        """1-based file line of a node's start."""
        return self.src.line_of(self.base + node.start_byte) + 1

    @property
    def block_threads(self) -> int | None:
        """Threads per block from the spec, when known."""
        r = self.resolved
        return r.threads if r is not None else None
