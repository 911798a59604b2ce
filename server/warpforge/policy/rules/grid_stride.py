"""grid_stride: turn one-element-per-thread into a grid-stride loop over a grid of k × SM-count blocks.

Why it helps: a launch of N/256 blocks for a large N spends time scheduling and retiring hundreds of
thousands of short blocks and pays a partial last wave; a grid sized to the machine (k resident blocks per
SM) keeps every SM busy with long-lived threads that amortize their index arithmetic and setup over many
elements, and lets the loop's independent iterations overlap their memory latency. k ∈ {2, 4, 8} is
searched; the grid is ``min(original grid, k × SMs)`` so a small problem never launches idle blocks.

When it is safe: only for the exact pattern, recognized on the syntax tree of the candidate's body —
``T i = blockIdx.x * blockDim.x + threadIdx.x;`` (operands in any order, casts allowed) as the first
statement, followed by either ``if (i < n) BODY`` as the only other statement, or ``if (i >= n) return;``
and then the rest of the body. The loop runs BODY once per element exactly as the original threads did,
so BODY must not care which thread or block runs it: no ``return`` (it would end the loop), no barriers
or warp collectives (threads now run different numbers of iterations), no ``__shared__`` memory, no use of
``threadIdx``/``blockIdx``/``gridDim``, and neither ``i`` nor the bound is assigned, nor does the bound
call anything. The launch must be one-dimensional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.rewrite import apply_edits, make_edit
from ...cuda.text import Span
from ...cuda.tree import node_text, walk
from . import register
from ._structural import written_names
from ._util import families, kernel_body, line_indent
from .base import Rule, RuleContext

FACTORS = (2, 4, 8)
_WIDE = re.compile(r"\b(long|size_t|ptrdiff_t|int64_t|uint64_t|intptr_t|uintptr_t)\b")
_FORBIDDEN = frozenset({"threadIdx", "blockIdx", "gridDim", "__syncthreads", "__syncthreads_count",
                        "__syncthreads_and", "__syncthreads_or", "__syncwarp", "__activemask", "this_grid",
                        "this_thread_block", "tiled_partition", "coalesced_threads"})
_FORBIDDEN_PREFIX = ("__shfl", "__ballot", "__any", "__all", "__match", "__reduce_", "__barrier")


@dataclass(frozen=True)
class _Match:
    var: str
    type: str
    init: str
    bound: str
    decl: Node
    guard: Node
    #: the statements that become the loop body
    rest: tuple[Node, ...]
    early_return: bool


def _unwrap(n: Node) -> Node:
    """Look through parentheses and casts: ``(size_t)(blockIdx.x)`` -> ``blockIdx.x``."""
    while True:
        if n.type == "parenthesized_expression" and n.named_children:
            n = n.named_children[0]
        elif n.type == "cast_expression" and n.child_by_field_name("value") is not None:
            v = n.child_by_field_name("value")
            assert v is not None
            n = v
        else:
            return n


def _is_field(n: Node, data: bytes, text: str) -> bool:
    return re.sub(r"\s+", "", node_text(_unwrap(n), data)) == text


def _is_global_index(n: Node, data: bytes) -> bool:
    """``blockIdx.x * blockDim.x + threadIdx.x`` as a tree (operands in any order, parentheses, casts)."""
    n = _unwrap(n)
    if n.type != "binary_expression":
        return False
    op, left, right = (n.child_by_field_name("operator"), n.child_by_field_name("left"),
                       n.child_by_field_name("right"))
    if op is None or left is None or right is None or node_text(op, data) != "+":
        return False
    for a, b in ((left, right), (right, left)):
        if not _is_field(a, data, "threadIdx.x"):
            continue
        prod = _unwrap(b)
        if prod.type != "binary_expression":
            continue
        pop, pl, pr = (prod.child_by_field_name("operator"), prod.child_by_field_name("left"),
                       prod.child_by_field_name("right"))
        if pop is None or pl is None or pr is None or node_text(pop, data) != "*":
            continue
        if {re.sub(r"\s+", "", node_text(_unwrap(x), data)) for x in (pl, pr)} == {"blockIdx.x", "blockDim.x"}:
            return True
    return False


def _statements(body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type != "comment"]


def _is_return(n: Node) -> bool:
    if n.type == "return_statement":
        return not n.named_children
    if n.type == "compound_statement":
        inner = [c for c in n.named_children if c.type != "comment"]
        return len(inner) == 1 and _is_return(inner[0])
    return False


def _condition(cond: Node, var: str, data: bytes, below: bool) -> str | None:
    """The bound ``n`` of ``var < n`` (``below``) or ``var >= n`` (not ``below``), mirrored forms too."""
    while cond.type in ("condition_clause", "parenthesized_expression") and cond.named_children:
        cond = cond.named_children[0]
    if cond.type != "binary_expression":
        return None
    left, right, op = (cond.child_by_field_name("left"), cond.child_by_field_name("right"),
                       cond.child_by_field_name("operator"))
    if left is None or right is None or op is None:
        return None
    o = node_text(op, data)
    lt, rt = node_text(left, data).strip(), node_text(right, data).strip()
    want_left, want_right = ("<", ">") if below else (">=", "<=")
    if o == want_left and lt == var:
        bound = right
    elif o == want_right and rt == var:
        bound = left
    else:
        return None
    if any(n.type == "call_expression" or (n.type == "identifier" and node_text(n, data) == var)
           for n in walk(bound)):
        return None
    return node_text(bound, data)


def _body_ok(nodes: tuple[Node, ...], data: bytes) -> bool:
    for root in nodes:
        for n in walk(root):
            if n.type in ("return_statement", "goto_statement", "labeled_statement", "__shared__"):
                return False
            if n.type in ("identifier", "field_identifier"):
                name = node_text(n, data)
                if name in _FORBIDDEN or name.startswith(_FORBIDDEN_PREFIX):
                    return False
    return True


def match(ctx: RuleContext) -> _Match | None:
    """The one-element-per-thread pattern in the candidate's body, if it is exactly there."""
    got = kernel_body(ctx)
    if got is None:
        return None
    body, data = got
    stmts = _statements(body)
    if len(stmts) < 2 or stmts[0].type != "declaration" or stmts[1].type != "if_statement":
        return None
    decl, guard = stmts[0], stmts[1]
    inits = [c for c in decl.named_children if c.type == "init_declarator"]
    if len(inits) != 1 or any(c.type in ("storage_class_specifier", "attribute_specifier") for c in decl.children):
        return None
    d, v = inits[0].child_by_field_name("declarator"), inits[0].child_by_field_name("value")
    tnode = decl.child_by_field_name("type")
    if d is None or v is None or tnode is None or d.type != "identifier":
        return None
    if not _is_global_index(v, data):
        return None
    var = node_text(d, data)
    ctype = node_text(tnode, data)
    if ctype not in ("int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "unsigned long long",
                     "size_t", "int64_t", "uint64_t", "int32_t", "uint32_t", "ptrdiff_t"):
        return None
    if guard.child_by_field_name("alternative") is not None:
        return None
    cond, cons = guard.child_by_field_name("condition"), guard.child_by_field_name("consequence")
    if cond is None or cons is None:
        return None
    if len(stmts) == 2:
        bound = _condition(cond, var, data, below=True)
        rest: tuple[Node, ...] = (cons,)
        early = False
    else:
        if not _is_return(cons):
            return None
        bound = _condition(cond, var, data, below=False)
        rest = tuple(stmts[2:])
        early = True
    if bound is None or not _body_ok(rest, data):
        return None
    names = {node_text(n, data) for n in walk(cond) if n.type == "identifier"}
    if any(written_names(st, data) & (names | {var}) for st in rest):
        return None
    return _Match(var, ctype, node_text(v, data), bound.strip(), decl, guard, rest, early)


class GridStride(Rule):
    family = "grid_stride"
    motivated_by = ("WF203", "tail_effect", "grid_stride")

    def _launch_1d(self, ctx: RuleContext) -> bool:
        return all(g.strip() == "1" for g in ctx.grid[1:]) and all(b.strip() == "1" for b in ctx.block[1:])

    def variants(self, ctx: RuleContext) -> list[str]:
        if self.family in families(ctx) or not self._launch_1d(ctx) or match(ctx) is None:
            return []
        return [str(k) for k in FACTORS]

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        m = match(ctx)
        if m is None or param not in self.variants(ctx):
            return None
        data = ctx.cand_src.data
        stride = "blockDim.x * gridDim.x"
        if _WIDE.search(m.type):
            stride = f"({m.type})blockDim.x * gridDim.x"
        head = f"for ({m.type} {m.var} = {m.init}; {m.var} < {m.bound}; {m.var} += {stride})"
        if not m.early_return:
            cons = m.rest[0]
            edit = make_edit(ctx.cand_src, Span(m.decl.start_byte, cons.start_byte), head + " ")
        else:
            indent = line_indent(data, m.decl.start_byte)
            unit = "\t" if indent.startswith("\t") else "    "
            start, end = m.rest[0].start_byte, m.rest[-1].end_byte
            lines = data[start:end].decode("utf-8").split("\n")
            moved = "\n".join([lines[0]] + [unit + ln if ln.strip() else ln for ln in lines[1:]])
            edit = make_edit(ctx.cand_src, Span(m.decl.start_byte, end),
                             f"{head} {{\n{indent}{unit}{moved}\n{indent}}}")
        blocks = int(param) * ctx.sm_count
        grid = (f"min({ctx.grid[0]}, {blocks})", *ctx.grid[1:])
        return ctx.derive(self.family, param,
                          f"grid-stride loop over `{m.var}` with at most {param} blocks per SM ({blocks} blocks)",
                          definition=apply_edits(ctx.cand_src, [edit]), grid=grid)


register(GridStride())
