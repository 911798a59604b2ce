"""The loops ``vectorize_strided`` rewrites, as the analysis finds them and the code generation reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

PREFIX = "wfs_"



@dataclass
class Stream:
    """``ptr[OFF + j]`` in one loop: consecutive elements of one pointer at one offset."""

    ptr: str
    off: str  # the offset's text, "" for none
    elem: str
    size: int
    const: bool
    read: bool = False
    written: bool = False
    always_written: bool = False
    nodes: list[Node] = field(default_factory=list)


@dataclass
class Loop:
    node: Node
    var: str
    vtype: str
    start: str
    bound: str
    step: str
    body: list[Node]
    streams: dict[tuple[str, str], Stream]

