"""Small helpers shared by the transformation rules: the candidate's syntax tree, launch arithmetic.

Why here: every rule asks the same questions of the current candidate — "where is the kernel's body in
the tree", "how many threads does the launch have", "which names are macros" — and answering them one
way keeps the rules' applicability checks consistent with each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tree_sitter import Node

from ...cuda.access import Access, param_access
from ...cuda.model import DeclKind
from ...cuda.normalize import file_facts, normalize_definition
from ...cuda.parser import parse as parse_model
from ...cuda.parser import parse_tree
from ...cuda.rewrite import apply_edits, set_launch_bounds
from ...cuda.text import SourceText
from ...cuda.tree import walk
from ...spec.expr import ExprError, Number, parse
from .base import RuleContext

#: CUDA's per-block thread limit
MAX_BLOCK_THREADS = 1024


def kernel_function(ctx: RuleContext) -> tuple[Node, bytes] | None:
    """The ``function_definition`` node of the candidate's kernel and the bytes it indexes (None: no parse)."""
    k = ctx.cand_kernel
    if k is None:
        return None
    data = ctx.cand_src.data
    tree = parse_tree(data)
    for n in walk(tree.root_node):
        if n.type == "function_definition" and n.start_byte <= k.body_span.start and n.end_byte >= k.body_span.end:
            body = n.child_by_field_name("body")
            if body is not None and body.start_byte == k.body_span.start and not body.has_error:
                return n, data
    return None


def canonical_access(ctx: RuleContext) -> dict[str, Access]:
    """How the candidate's kernel uses each pointer parameter, read on its canonical form.

    A write through a function-like macro (``C(row, col) = sum`` with ``#define C(i, j) c[(i) * N + (j)]``)
    names no parameter in the text as written; a rule that marks parameters ``const`` from the text alone
    would break the build. The canonical form expands such macros (and keeps the signature as written)."""
    k = ctx.cand_kernel
    if k is None:
        return {}
    try:
        text = normalize_definition(ctx.candidate.source, k.name, file_facts(ctx.source.text))
    except (ValueError, RecursionError):
        return param_access(ctx.cand_src, k)
    canon = parse_model(text).kernel(k.name)
    return param_access(SourceText(text), canon) if canon is not None else param_access(ctx.cand_src, k)


def kernel_body(ctx: RuleContext) -> tuple[Node, bytes] | None:
    """The kernel's body (a ``compound_statement``) in the candidate's tree, if it parses cleanly."""
    fn = kernel_function(ctx)
    if fn is None:
        return None
    body = fn[0].child_by_field_name("body")
    return (body, fn[1]) if body is not None else None


def line_indent(data: bytes, offset: int) -> str:
    """The whitespace that starts the line containing ``offset``."""
    start = data.rfind(b"\n", 0, offset) + 1
    end = start
    while end < len(data) and data[end : end + 1] in (b" ", b"\t"):
        end += 1
    return data[start:end].decode()


def starts_line(data: bytes, offset: int) -> bool:
    """Whether only whitespace precedes ``offset`` on its line."""
    start = data.rfind(b"\n", 0, offset) + 1
    return not data[start:offset].strip()


def int_literal(text: str) -> int | None:
    """The value of a C integer literal (``256``, ``0x100``, ``256u``), None for anything else."""
    t = text.rstrip("uUlL")
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
            return int(t, 16)
        if re.fullmatch(r"[0-9]+", t):
            return int(t, 8) if len(t) > 1 and t.startswith("0") else int(t)
    except ValueError:
        return None
    return None


def macro_values(ctx: RuleContext) -> dict[str, str]:
    """Object-like macros of the original file (``#define NAME value``), name -> value text."""
    out: dict[str, str] = {}
    for d in ctx.model.declarations:
        if d.kind is not DeclKind.MACRO:
            continue
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)(?!\()\s*(.*)", ctx.source.slice(d.span), re.S)
        if m:
            out[m.group(1)] = m.group(2).split("//")[0].strip()
    return out


def size_env(ctx: RuleContext, perturbed: bool = False) -> dict[str, Number]:
    """Sizes and numeric tunables of the spec with the candidate's defines (spec size or perturbed)."""
    return ctx.spec.size_values(perturbed, ctx.candidate.define_map())


def eval_expr(text: str, env: Mapping[str, Number]) -> Number | None:
    try:
        return parse(text).evaluate(env)
    except ExprError:
        return None


def expr_names(text: str) -> frozenset[str] | None:
    try:
        return parse(text).names()
    except ExprError:
        return None


def block_dims(ctx: RuleContext, perturbed: bool = False) -> tuple[int, int, int] | None:
    """The candidate's block shape as numbers, padded to three dimensions (None: cannot evaluate)."""
    env = size_env(ctx, perturbed)
    vals: list[int] = []
    for e in ctx.block:
        v = eval_expr(e, env)
        if not isinstance(v, int) or v < 1:
            return None
        vals.append(v)
    while len(vals) < 3:
        vals.append(1)
    return vals[0], vals[1], vals[2]


def constant_block(ctx: RuleContext) -> tuple[int, int, int] | None:
    """The block shape when it is the same at the spec size and at the perturbed size."""
    a = block_dims(ctx, False)
    if a is None:
        return None
    try:
        b = block_dims(ctx, True)
    except ValueError:  # SpecError: the perturbed size does not resolve
        return None
    return a if a == b else None


def tunable_names(ctx: RuleContext) -> set[str]:
    return {t.name for t in ctx.spec.tunables}


def families(ctx: RuleContext) -> set[str]:
    """The transformation families already applied on the way to the current candidate."""
    return {s.split(":", 1)[0] for s in ctx.candidate.steps}


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside parentheses/brackets."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return out


def strip_parens(text: str) -> str:
    """``((x + 1))`` -> ``x + 1``: remove parentheses that enclose the whole expression."""
    t = text.strip()
    while t.startswith("(") and t.endswith(")"):
        depth = 0
        for i, ch in enumerate(t):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and i < len(t) - 1:
                return t
        t = t[1:-1].strip()
    return t


def call_args(text: str, func: str) -> list[str] | None:
    """The arguments of ``func(a, b)`` when ``text`` is exactly that call, else None."""
    t = strip_parens(text)
    m = re.match(rf"{re.escape(func)}\s*\(", t)
    if not m or not t.endswith(")"):
        return None
    inner = t[m.end() : -1]
    depth = 0
    for ch in inner:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return None  # `f(a) + g(b)`: the last `)` is not the call's
    return split_top(inner) if depth == 0 else None


def refresh_launch_bounds(ctx: RuleContext, definition: str, block: tuple[str, ...]) -> str | None:
    """``definition`` with a ``__launch_bounds__`` that WarpForge's ``launch_bounds`` step added on this path
    re-targeted to the new ``block`` — for any rule that changes the block size.

    Why: that bound promised the old block; a launch with more threads than the bound fails, so a rule
    that changes the block without this would hand the evaluator a variant that cannot run. Returns the
    definition unchanged when no ``launch_bounds`` step is on the path (a user's own bound is the rule's
    applicability problem, not rewritten behind their back), and None when the new block is not a
    constant or no longer fits with the bound's ``MINBLOCKS`` (threads × blocks above 2048).
    """
    if "launch_bounds" not in families(ctx):
        return definition
    src = SourceText(definition)
    k = parse_model(src.data).kernel(ctx.kernel.name)
    if k is None or k.launch_bounds is None:
        return definition
    threads = 1
    for b in block:
        v = eval_expr(b, {})
        if not isinstance(v, int) or v < 1:
            return None
        threads *= v
    mb = k.launch_bounds.min_blocks
    if mb is not None:
        m = eval_expr(mb, {})
        if not isinstance(m, int) or threads * m > 2048:
            return None
    if threads > MAX_BLOCK_THREADS:
        return None
    return apply_edits(src, [set_launch_bounds(src, k, threads, mb)])
