"""warp_per_row's vocabulary: its variants and limits, and the row shape the analysis fills in.

Why a module of its own: the analysis (``analysis``, ``loops``) writes these records and the code generation
(``codegen``, ``combine``, ``vector``) reads them; keeping them apart from both lets each side change without
the other, and ``column_split`` reads the same records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ....cuda.tree import node_text
from .._structural import Bound, Decl

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfw_"

#: param -> (threads per block, rows per block); rows per block 0: one block per row
VARIANTS = {"warp8": (256, 8), "warp4": (128, 4), "block256": (256, 0), "block512": (512, 0),
            "block1024": (1024, 0)}
#: threads an SM keeps resident (sm_80/sm_90: 2048): with fewer rows than SMs x this / 256, a 256-thread
#: block per row leaves most of the GPU idle, and only larger blocks per row can fill it
THREADS_PER_SM = 2048
#: variants that may also stage rows several loops read in shared memory (param + "_smem")
CACHED = ("warp8", "block256", "block512", "block1024")
#: dynamic shared memory a launch may ask for without opting in (cudaFuncSetAttribute)
MAX_SMEM = 48 * 1024
#: variants that may also move each lane's elements in 16-byte vectors (param + "_vec")
VECTOR = ("warp8", "block256", "block512", "block1024")
#: the unsigned type of a vector of so many bytes (loads and stores move the bits; elements are read back
#: through a pointer of the element type)
VEC_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short"}
#: bytes of the element types a row cache may hold
ELEM_BYTES = {"float": 4, "double": 8, "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2,
              "int": 4, "unsigned int": 4, "unsigned": 4, "short": 2, "char": 1, "signed char": 1,
              "unsigned char": 1, "long": 8, "long long": 8, "int64_t": 8, "int32_t": 4, "uint32_t": 4}
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_FULL = "0xffffffffu"


class _Reject(Exception):
    """Why the kernel is not a row loop this rule can split over lanes, in a CUDA developer's words, and the
    1-based line of the candidate's text that blocks it (0: the kernel as a whole).

    Raised by the analysis' checks and caught once (``analysis.explain``): ``why_not`` returns it as a
    ``NotLegal`` for the "why not" hint, and the wide yardstick's funnel records the message as the exception
    is constructed (its first argument)."""

    def __init__(self, reason: str, at: Node | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = at.start_point[0] + 1 if at is not None else 0


def _code(node: Node, data: bytes, limit: int = 60) -> str:
    """A node's text on one line, shortened, in backticks: how a decline quotes the code it stops at."""
    t = " ".join(node_text(node, data).split())
    return f"`{t if len(t) <= limit else t[:limit - 1] + '…'}`"


@dataclass
class _Reduction:
    acc: str
    type: str
    #: "sum", the min/max function name used, or "argmax"/"argmin" (a compare-and-assign with an index)
    kind: str
    #: argmax/argmin: the index accumulator, its type, and whether ties keep the first index (strict compare)
    index: str = ""
    index_type: str = ""
    first: bool = True
    #: argmax/argmin: the if statement that updates the pair (its consequence also sets the lane's flag)
    node_id: int = -1
    #: "online": a running max ``acc`` and a sum ``index`` of exp(v - acc) rescaled when the max grows
    #: (``single_pass``'s loop); ``exp`` the exponential the kernel uses
    exp: str = ""


@dataclass
class _Loop:
    node: Node
    var: str
    reductions: dict[str, _Reduction] = field(default_factory=dict)
    #: the loop's first index when it is not 0 (``for (j = 1; ...)`` after ``m = x[0]``)
    start: str = "0"
    #: locals of the body defined once from the index (``long off = base + i;``): name -> definition
    aliases: dict[str, Node] = field(default_factory=dict)
    #: a running sum read inside the loop (a prefix sum): the accumulator, its type, the update statement
    #: ``acc += E`` that opens the body, and E
    scan: str = ""
    scan_type: str = ""
    scan_head: Node | None = None
    scan_inc: Node | None = None


@dataclass
class _Shape:
    row: Decl
    prefix: list[Node]
    between: list[Node]
    guard: Node
    exit_form: bool
    #: the guard's bound on the row index (None: the guard tests something else, e.g. ``start < n``)
    bound: Bound | None
    rest: list[Node]
    loops: list[_Loop]
    #: ids of top-level statements storing a per-row scalar (done by one lane)
    stores: set[int] = field(default_factory=set)
    #: the guard's other terms (``b < batch`` in ``col < cols && b < batch``): uniform per block
    others: list[Node] = field(default_factory=list)
    #: the kernel reads blockIdx/gridDim .y/.z: the launch keeps the original grid's y and z
    uses_yz: bool = False
    #: the row index is a 2-D grid flattened (``flat_index_2d``): a 1-D launch computes the same rows
    flat: bool = False
    #: ids of loops every lane runs whole (their inner loops are split)
    outer: set[int] = field(default_factory=set)
    #: top-level scalars defined once and never reassigned (``int hw = H * W;``): name -> value, so a loop
    #: bound written through one is still known in spec terms
    defs: dict[str, Node] = field(default_factory=dict)
    #: rows of read-only arrays several loops read whole (``_row_cache``): staged in shared memory
    cache: list[_Cache] = field(default_factory=list)


@dataclass
class _Cache:
    """A row of a read-only array staged in shared memory once and read from there by every loop."""

    #: the pointer read, and the canonical text of the loops' limit L (all equal) and one of its nodes
    name: str
    limit: str
    limit_node: Node
    #: the element type as the kernel writes it (``T``), and its size as instantiated
    type: str = ""
    size: int = 0
    #: ids of the subscripts read from the row -> the loop variable they index with
    subs: dict[int, str] = field(default_factory=dict)
    loops: set[int] = field(default_factory=set)
    #: a read on every iteration of a loop from 0 (the fill's template) and that loop's variable and type
    witness: Node | None = None
    var: str = ""
    var_type: str = "int"
    #: the id of the first top-level statement reading it: the fill goes right before it
    first: int = -1
