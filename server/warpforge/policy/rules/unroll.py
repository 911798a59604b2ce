"""unroll: ``#pragma unroll N`` before innermost loops whose trip count is only known at run time.

Why it helps: nvcc fully unrolls loops with a constant trip count on its own, but a loop bounded by a
kernel argument (``j < cols``, ``k < K``) runs one iteration per trip with a compare-and-branch each and
its loads issued one after another. Unrolling by N (with the remainder handled by the compiler) lets the
loads of N iterations be issued back to back — more memory-level parallelism per thread — and amortizes
the loop overhead. Too large a factor costs registers and instruction cache, so N ∈ {2, 4, 8} are
separate variants, each applied to every such loop of the kernel.

When it is safe: always, semantically — ``#pragma unroll N`` never changes what a loop computes (barriers
in the body included). It is proposed only where it can matter and is written where nvcc accepts it:
innermost ``for`` loops (no loop nested inside) that start their own line directly inside a block, whose
condition names something other than the loop variable and compile-time constants (macros, template
values), with no ``#pragma`` already in front, and whose body has at most 40 statements.
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.rewrite import apply_edits, make_edit
from ...cuda.text import Span
from ...cuda.tree import node_text, walk
from . import register
from ._util import families, kernel_body, line_indent, macro_values, starts_line, tunable_names
from .base import Rule, RuleContext

FACTORS = (2, 4, 8)
MAX_BODY_STATEMENTS = 40
_LOOPS = ("for_statement", "while_statement", "do_statement")


def _loop_vars(loop: Node, data: bytes) -> set[str]:
    out: set[str] = set()
    init = loop.child_by_field_name("initializer")
    if init is not None:
        for n in walk(init):
            if n.type == "init_declarator":
                d = n.child_by_field_name("declarator")
                if d is not None and d.type == "identifier":
                    out.add(node_text(d, data))
            elif n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                if left is not None and left.type == "identifier":
                    out.add(node_text(left, data))
    upd = loop.child_by_field_name("update")
    if upd is not None:
        for n in walk(upd):
            target = None
            if n.type == "update_expression":
                target = n.child_by_field_name("argument")
            elif n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            if target is not None and target.type == "identifier":
                out.add(node_text(target, data))
    return out


def _statement_count(body: Node) -> int:
    return sum(1 for n in walk(body) if (n.type.endswith("_statement") and n.type != "compound_statement")
               or n.type == "declaration")


def _has_pragma_before(loop: Node, data: bytes) -> bool:
    prev = loop.prev_sibling
    while prev is not None and prev.type == "comment":
        prev = prev.prev_sibling
    return prev is not None and prev.type == "preproc_call" and node_text(prev, data).lstrip().startswith("#pragma")


def loops(ctx: RuleContext) -> list[Node]:
    """The candidate's innermost runtime-bounded ``for`` loops that can take a pragma."""
    got = kernel_body(ctx)
    k = ctx.cand_kernel
    if got is None or k is None:
        return []
    body, data = got
    constants = set(macro_values(ctx)) | tunable_names(ctx) | {p.name for p in k.template_params if p.kind == "value"}
    out = []
    for n in walk(body):
        if n.type != "for_statement" or n.parent is None or n.parent.type != "compound_statement":
            continue
        lbody = n.child_by_field_name("body")
        cond = n.child_by_field_name("condition")
        if lbody is None or cond is None or any(m.type in _LOOPS for m in walk(lbody)):
            continue
        if not starts_line(data, n.start_byte) or _has_pragma_before(n, data):
            continue
        if _statement_count(lbody) > MAX_BODY_STATEMENTS:
            continue
        names = {node_text(m, data) for m in walk(cond) if m.type == "identifier"}
        if not names - _loop_vars(n, data) - constants:
            continue  # constant trip count: nvcc unrolls it already
        out.append(n)
    return out


class Unroll(Rule):
    family = "unroll"
    motivated_by = ("loop_overhead", "unroll")

    def variants(self, ctx: RuleContext) -> list[str]:
        if self.family in families(ctx) or not loops(ctx):
            return []
        return [str(f) for f in FACTORS]

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        found = loops(ctx)
        if not found or param not in self.variants(ctx):
            return None
        data = ctx.cand_src.data
        edits = []
        for n in found:
            start = data.rfind(b"\n", 0, n.start_byte) + 1
            edits.append(make_edit(ctx.cand_src, Span(start, start),
                                   f"{line_indent(data, n.start_byte)}#pragma unroll {param}\n"))
        return ctx.derive(self.family, param, f"#pragma unroll {param} on {len(found)} runtime-bounded "
                          f"innermost loop{'s' if len(found) != 1 else ''}",
                          definition=apply_edits(ctx.cand_src, edits))


register(Unroll())
