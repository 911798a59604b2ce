"""Syntax-tree helpers for the structural rules (vectorize, warp_reduce, warp_per_row, smem_tiling, ...).

Why a module of its own: the structural rules recognize *shapes* of code — "the global thread index",
"a guard on it", "a loop over a row", "a read indexed exactly by the loop variable" — on tree-sitter's
tree of the current candidate, and rebuild a kernel from pieces of the original text with some
sub-expressions substituted. Doing that with one set of helpers keeps the recognizers strict in the same
way: names are compared as identifiers (never as substrings), parentheses are looked through, and text
is re-emitted from the tree so comments and formatting inside kept expressions survive.

Everything here is a pure function of (node, bytes); nothing assumes the reference kernels' names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.model import Kernel
from ...cuda.rewrite import apply_edits, replace_body
from ...cuda.tree import member, node_text, walk
from ...cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ...cuda.tree import written_names as written_names  # likewise
from ...spec.expr import Number
from ._util import eval_expr, kernel_body, size_env, strip_parens
from .base import RuleContext

#: calls that synchronize or exchange data between threads: moving code across them changes its meaning
_COLLECTIVE_PREFIXES = ("__sync", "__shfl", "__ballot", "__any", "__all", "__activemask", "__match",
                        "__reduce_", "__threadfence", "atomic", "__nanosleep", "cooperative_groups", "cg::")

#: statements a ``break`` (``continue``: the loops) inside them leaves, not the code around them
_BREAKABLE = frozenset({"for_statement", "while_statement", "do_statement", "switch_statement", "for_range_loop"})

#: 32-bit element types -> (4-wide vector type, 2-wide vector type)
VECTOR_TYPES: dict[str, tuple[str, str]] = {
    "float": ("float4", "float2"),
    "int": ("int4", "int2"),
    "signed": ("int4", "int2"),
    "signed int": ("int4", "int2"),
    "int32_t": ("int4", "int2"),
    "unsigned": ("uint4", "uint2"),
    "unsigned int": ("uint4", "uint2"),
    "uint32_t": ("uint4", "uint2"),
}

#: scalar types a warp shuffle moves (and the structural rules accumulate in)
SHUFFLE_TYPES = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "long long", "long long int", "unsigned long long",
    "unsigned long long int", "int32_t", "uint32_t", "int64_t", "uint64_t",
})

#: binary min/max functions a reduction may use: name -> "max" | "min"
MINMAX_FUNCS = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}


def is_collective(name: str) -> bool:
    return name.startswith(_COLLECTIVE_PREFIXES)


def statements(node: Node | None) -> list[Node]:
    """The statements of a compound statement (comments dropped), or ``[node]`` for a single statement."""
    if node is None:
        return []
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def render(node: Node, data: bytes, replace: Callable[[Node], str | None]) -> str:
    """The text of ``node`` with every subtree for which ``replace`` returns a string replaced by it.

    Outermost matches win; everything between replaced subtrees (whitespace, comments) is kept verbatim.
    """
    sub = replace(node)
    if sub is not None:
        return sub
    if not node.children:
        return node_text(node, data)
    out: list[str] = []
    pos = node.start_byte
    for c in node.children:
        out.append(data[pos : c.start_byte].decode("utf-8", errors="replace"))
        out.append(render(c, data, replace))
        pos = c.end_byte
    out.append(data[pos : node.end_byte].decode("utf-8", errors="replace"))
    return "".join(out)


def identifiers(node: Node, data: bytes) -> set[str]:
    """Every identifier (variables, functions, macros; not field names) in a subtree."""
    return {node_text(n, data) for n in walk(node) if n.type == "identifier"}


def all_names(node: Node, data: bytes) -> set[str]:
    """Identifiers and type identifiers (to check that introduced names cannot clash)."""
    return {node_text(n, data) for n in walk(node) if n.type in ("identifier", "type_identifier",
                                                                   "field_identifier")}


def call_names(node: Node, data: bytes) -> set[str]:
    out: set[str] = set()
    for n in walk(node):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None:
                out.add(node_text(fn, data))
    return out


def has_collective(node: Node, data: bytes) -> bool:
    return any(is_collective(c) for c in call_names(node, data))


def declared_names(node: Node, data: bytes) -> set[str]:
    """Names declared anywhere in a subtree (locals, loop variables)."""
    out: set[str] = set()
    for n in walk(node):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                nm = declarator_name(d, data)
                if nm:
                    out.add(nm)
    return out


def declarator_name(node: Node, data: bytes) -> str | None:
    cur: Node | None = node
    while cur is not None:
        if cur.type == "identifier":
            return node_text(cur, data)
        if cur.type in ("init_declarator", "pointer_declarator", "array_declarator", "reference_declarator"):
            nxt = cur.child_by_field_name("declarator")
            if nxt is None:
                named = [c for c in cur.named_children if c.type == "identifier"]
                nxt = named[0] if named else None
            cur = nxt
        else:
            return None
    return None


def has_jump(node: Node, *, loops_ok: bool) -> bool:
    """Whether a subtree holds ``return``/``goto``/a label, or (``loops_ok``: outside a nested loop or switch)
    a ``break``/``continue``."""
    if next(walk(node, ("return_statement", "goto_statement", "labeled_statement")), None) is not None:
        return True
    inside = (lambda n: n.type in _BREAKABLE) if loops_ok else None  # a break in there leaves only that loop
    return next(walk(node, ("break_statement", "continue_statement"), cut=inside), None) is not None


def is_builtin(node: Node | None, data: bytes, obj: str, axis: str) -> bool:
    """``threadIdx.x`` and friends (``obj``.``axis``), also behind parentheses and casts (``cuda.tree.member``)."""
    m = member(node, data) if node is not None else None
    return m is not None and m[1:] == (obj, axis)


def binary_parts(node: Node, data: bytes) -> tuple[Node, str, Node] | None:
    """``(left, operator text, right)`` of a binary expression (parentheses looked through), else None."""
    node = unparen(node)
    if node.type != "binary_expression":
        return None
    left = node.child_by_field_name("left")
    op = node.child_by_field_name("operator")
    right = node.child_by_field_name("right")
    if left is None or op is None or right is None:
        return None
    return left, node_text(op, data), right


def global_index(node: Node | None, data: bytes, axis: str = "x") -> str | None:
    """The multiplier ``M`` when ``node`` is ``blockIdx.<axis> * M + threadIdx.<axis>`` (either order of
    either operation), ``M`` being ``blockDim.<axis>`` or a constant name/literal; None otherwise."""
    if node is None:
        return None
    b = binary_parts(node, data)
    if b is None or b[1] != "+":
        return None
    for prod, tid in ((b[0], b[2]), (b[2], b[0])):
        if not is_builtin(tid, data, "threadIdx", axis):
            continue
        p = binary_parts(prod, data)
        if p is None or p[1] != "*":
            continue
        for bid, mult in ((p[0], p[2]), (p[2], p[0])):
            if not is_builtin(bid, data, "blockIdx", axis):
                continue
            m = unparen(mult)
            if is_builtin(m, data, "blockDim", axis) or m.type in ("identifier", "number_literal"):
                return node_text(m, data)
    return None


def is_grid_stride(node: Node | None, data: bytes, mult: str, axis: str = "x") -> bool:
    """``blockDim.x * gridDim.x`` (either order; ``M * gridDim.x`` when the index used the constant ``M``)."""
    if node is None:
        return False
    p = binary_parts(node, data)
    if p is None or p[1] != "*":
        return False
    for a, g in ((p[0], p[2]), (p[2], p[0])):
        if is_builtin(g, data, "gridDim", axis) and (node_text(unparen(a), data) == mult
                                                      or (_is_block_dim(mult, axis) and
                                                          is_builtin(a, data, "blockDim", axis))):
            return True
    return False


def _is_block_dim(mult: str, axis: str) -> bool:
    """Whether the index's multiplier text is ``blockDim.<axis>``, also behind a cast (``(size_t)blockDim.x``):
    a stride ``(size_t)gridDim.x * blockDim.x`` is the same number of threads however each side is cast."""
    t = re.sub(r"\(\s*[A-Za-z_][\w\s]*\)", "", mult).replace(" ", "")
    return t in (f"blockDim.{axis}", f"(blockDim.{axis})")


def _monomials(node: Node, data: bytes) -> list[tuple[str, ...]] | None:
    """``node`` as a sum of products of thread coordinates (casts looked through), or None when anything
    else (a name, a literal, a division) takes part."""
    n = unparen(node)
    while n.type == "cast_expression":
        inner = n.child_by_field_name("value")
        if inner is None:
            return None
        n = unparen(inner)
    if n.type == "field_expression":
        arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        if arg is None or fld is None or node_text(arg, data) not in ("threadIdx", "blockIdx", "blockDim", "gridDim"):
            return None
        return [(f"{node_text(arg, data)}.{node_text(fld, data)}",)]
    b = binary_parts(n, data)
    if b is None or b[1] not in ("+", "*"):
        return None
    left, right = _monomials(b[0], data), _monomials(b[2], data)
    if left is None or right is None:
        return None
    if b[1] == "+":
        return left + right
    return [tuple(sorted(x + y)) for x in left for y in right]


#: ``(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x`` expanded
_FLAT_2D = sorted([("threadIdx.x",), ("blockDim.x", "blockIdx.x"), ("blockDim.x", "blockIdx.y", "gridDim.x")])


def flat_index_2d(node: Node | None, data: bytes) -> bool:
    """Whether ``node`` is the global thread index of a 2-D grid of 1-D blocks flattened row-major
    (``blockIdx.y * gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x`` in any arrangement):
    written to stay under the grid's x limit, it equals ``blockIdx.x * blockDim.x + threadIdx.x`` on a
    1-D grid, where ``blockIdx.y`` is 0."""
    if node is None:
        return False
    m = _monomials(node, data)
    return m is not None and sorted(tuple(sorted(x)) for x in m) == _FLAT_2D


@dataclass(frozen=True)
class Decl:
    """A declaration of one variable: ``[const] TYPE [*]NAME = VALUE;``."""

    type: str
    name: str
    value: Node | None
    pointer: bool
    const: bool
    shared: bool
    node: Node


def single_decl(node: Node, data: bytes) -> Decl | None:
    """The one variable a ``declaration`` statement declares (None for several, arrays or references)."""
    if node.type != "declaration":
        return None
    decls = node.children_by_field_name("declarator")
    tnode = node.child_by_field_name("type")
    if len(decls) != 1 or tnode is None:
        return None
    d = decls[0]
    value: Node | None = None
    if d.type == "init_declarator":
        value = d.child_by_field_name("value")
        d2 = d.child_by_field_name("declarator")
        if d2 is None:
            return None
        d = d2
    pointer = False
    if d.type == "pointer_declarator":
        pointer = True
        inner = d.child_by_field_name("declarator")
        if inner is None or inner.type != "identifier":
            return None
        d = inner
    if d.type != "identifier":
        return None
    quals = {node_text(c, data) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
    if value is not None and value.type in ("initializer_list", "argument_list"):
        return None
    return Decl(node_text(tnode, data), node_text(d, data), value, pointer, "const" in quals,
                "__shared__" in quals, node)


@dataclass(frozen=True)
class ForParts:
    """``for (T var = start; cond; update) body``: a loop that declares its one variable with a start value."""

    var: Decl
    cond: Node
    update: Node
    body: Node


def for_parts(node: Node, data: bytes) -> ForParts | None:
    """The parts of a counted ``for`` loop, or None: every part present and the initializer declaring one
    variable (not a pointer) with a start value. The rules that split, tile or fold a loop read where it
    starts, stops and steps from these; a loop missing any of them is not one they can rewrite."""
    if node.type != "for_statement":
        return None
    init, cond, upd, body = (node.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or cond is None or upd is None or body is None:
        return None
    d = single_decl(init, data)
    if d is None or d.pointer or d.value is None:
        return None
    return ForParts(d, cond, upd, body)


@dataclass(frozen=True)
class Bound:
    """``var < limit`` (``inclusive``: ``var <= limit``) as read from a condition."""

    limit: Node
    inclusive: bool


def sole_assignment(block: Node | None, data: bytes) -> tuple[Node, str, Node] | None:
    """``(target, operator text, value)`` when a block (or a lone statement) is exactly one assignment
    statement (``=`` or compound), else None: the loop bodies the reduction and tiling rules rewrite."""
    sts = statements(block)
    if len(sts) != 1 or sts[0].type != "expression_statement" or sts[0].named_child_count != 1:
        return None
    e = sts[0].named_children[0]
    if e.type != "assignment_expression":
        return None
    left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or op is None or right is None:
        return None
    return left, node_text(op, data), right


def upper_bound(cond: Node, data: bytes, var: str) -> Bound | None:
    """``var < E`` / ``E > var`` / ``var <= E`` / ``E >= var``, E not mentioning ``var``."""
    b = binary_parts(cond, data)
    if b is None:
        return None
    left, op, right = b
    lv, rv = unparen(left), unparen(right)
    if lv.type == "identifier" and node_text(lv, data) == var and op in ("<", "<="):
        lim, inc = right, op == "<="
    elif rv.type == "identifier" and node_text(rv, data) == var and op in (">", ">="):
        lim, inc = left, op == ">="
    else:
        return None
    if var in identifiers(lim, data):
        return None
    return Bound(lim, inc)


def failing_bound(cond: Node, data: bytes, var: str) -> Bound | None:
    """The negation form of a guard that leaves: ``var >= E`` / ``E <= var`` / ``var > E`` / ``E < var``."""
    b = binary_parts(cond, data)
    if b is None:
        return None
    left, op, right = b
    lv, rv = unparen(left), unparen(right)
    if lv.type == "identifier" and node_text(lv, data) == var and op in (">=", ">"):
        lim, inc = right, op == ">"
    elif rv.type == "identifier" and node_text(rv, data) == var and op in ("<=", "<"):
        lim, inc = left, op == "<"
    else:
        return None
    if var in identifiers(lim, data):
        return None
    return Bound(lim, inc)


def condition_of(if_node: Node) -> Node | None:
    """The expression inside an ``if``'s condition clause."""
    cond = if_node.child_by_field_name("condition")
    if cond is None:
        return None
    if cond.type == "condition_clause":
        val = cond.child_by_field_name("value")
        if val is None:
            named = [c for c in cond.named_children if c.type != "comment"]
            val = named[0] if len(named) == 1 else None
        return val
    return cond


def is_return_only(node: Node | None) -> bool:
    """``return;`` or ``{ return; }``."""
    sts = statements(node)
    return len(sts) == 1 and sts[0].type == "return_statement" and sts[0].named_child_count == 0


def is_zero_literal(node: Node, data: bytes) -> bool:
    n = unparen(node)
    if n.type != "number_literal":
        return False
    t = node_text(n, data).lower().rstrip("fulL")
    try:
        return float(t) == 0.0
    except ValueError:
        return False


def subscript_parts(node: Node, data: bytes) -> tuple[Node, Node] | None:
    """(array, index) of ``a[i]``."""
    node = unparen(node)
    if node.type != "subscript_expression":
        return None
    arr = node.child_by_field_name("argument")
    idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
    if arr is None or idx is None:
        return None
    if idx.type == "subscript_argument_list":
        named = [c for c in idx.named_children if c.type != "comment"]
        if len(named) != 1:
            return None
        idx = named[0]
    return arr, idx


def is_ident(node: Node | None, data: bytes, name: str | None = None) -> bool:
    if node is None:
        return False
    n = unparen(node)
    return n.type == "identifier" and (name is None or node_text(n, data) == name)


def is_syncthreads(stmt: Node, data: bytes) -> bool:
    if stmt.type != "expression_statement" or stmt.named_child_count != 1:
        return False
    c = stmt.named_children[0]
    if c.type != "call_expression":
        return False
    fn = c.child_by_field_name("function")
    args = c.child_by_field_name("arguments")
    return fn is not None and node_text(fn, data) == "__syncthreads" and args is not None \
        and args.named_child_count == 0


def shared_arrays(body: Node, data: bytes) -> dict[str, str]:
    """``__shared__`` arrays declared in a kernel body: name -> element type."""
    out: dict[str, str] = {}
    for n in walk(body):
        if n.type != "declaration":
            continue
        quals = {node_text(c, data) for c in n.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if "__shared__" not in quals:
            continue
        tnode = n.child_by_field_name("type")
        for d in n.children_by_field_name("declarator"):
            if d.type == "array_declarator" and tnode is not None:
                inner = d.child_by_field_name("declarator")
                if inner is not None and inner.type == "identifier":
                    out[node_text(inner, data)] = node_text(tnode, data)
    return out


def line_indent_of(node: Node, data: bytes) -> str:
    """The whitespace that starts the line on which ``node`` starts."""
    start = data.rfind(b"\n", 0, node.start_byte) + 1
    end = start
    while end < node.start_byte and data[end : end + 1] in (b" ", b"\t"):
        end += 1
    return data[start:end].decode()


def flush(code: str, node: Node, data: bytes) -> str:
    """Text taken from ``node`` (its first line unindented) with its other lines dedented by the indentation of
    the line it starts on, so it can be re-indented where it goes."""
    ind = line_indent_of(node, data)
    lines = code.split("\n")
    return "\n".join([lines[0]] + [ln[len(ind):] if ln.startswith(ind) else ln.lstrip() for ln in lines[1:]])


def indent(code: str, by: str) -> str:
    return "\n".join((by + line) if line.strip() else "" for line in code.split("\n"))


def resolved_type(ctx: RuleContext, type_text: str) -> str:
    """A type as the kernel is instantiated: a template type parameter becomes the spec's argument for it
    (``T`` -> ``float``), anything else is returned as written. Rules that accumulate in a type (a
    shuffle moves only some) must judge the instantiated type, not the parameter's name."""
    k = ctx.cand_kernel
    t = " ".join(type_text.replace("const ", "").split())
    if k is None or not k.template_params:
        return t
    for p, a in zip(k.template_params, ctx.spec.template_args, strict=False):
        if p.kind == "type" and p.name == t:
            return " ".join(a.split())
    return t


def with_body(ctx: RuleContext, body: str) -> str | None:
    """The candidate's definition with its body replaced (signature, qualifiers and linkage kept)."""
    k = ctx.cand_kernel
    if k is None:
        return None
    return apply_edits(ctx.cand_src, [replace_body(ctx.cand_src, k, body)])


def fresh_body(ctx: RuleContext, prefix: str, *, collectives_ok: bool = False) -> tuple[Kernel, Node, bytes] | None:
    """The candidate's kernel, body and bytes when a rule that moves code around may rewrite it.

    Not when it is a template, already holds names with the rule's ``prefix`` (rewritten already, or names
    ours would clash with), synchronizes (collectives; ``collectives_ok`` for a rule that analyses its
    atomics itself), has shared memory of its own, or declares a local that shadows a parameter: the
    rewrite moves code around and must know what every name means.
    """
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None or k.template_params:
        return None
    body, data = got
    if any(n.startswith(prefix) for n in all_names(body, data)) \
            or (not collectives_ok and has_collective(body, data)) or any(n.type == "__shared__" for n in walk(body)):
        return None
    if declared_names(body, data) & {p.name for p in k.params}:
        return None
    return k, body, data


def envs(ctx: RuleContext) -> list[dict[str, Number]] | None:
    """The spec's size environments (spec size and perturbed size) with the candidate's defines."""
    try:
        return [size_env(ctx, False), size_env(ctx, True)]
    except ValueError:
        return None


def launch_ok(ctx: RuleContext, grid: tuple[str, ...], block: tuple[str, ...]) -> bool:
    """Whether a launch evaluates to positive integers (block within limits) at both sizes."""
    es = envs(ctx)
    if es is None:
        return False
    for env in es:
        threads = 1
        for e in grid:
            v = eval_expr(e, env)
            if not isinstance(v, int) or v < 1 or v > 2**31 - 1:
                return False
        for e in block:
            v = eval_expr(e, env)
            if not isinstance(v, int) or v < 1:
                return False
            threads *= v
        if threads > 1024:
            return False
    return True


def dims_values(ctx: RuleContext, exprs: tuple[str, ...]) -> list[tuple[int, ...]] | None:
    """Launch expressions evaluated at both sizes, padded to three dimensions."""
    es = envs(ctx)
    if es is None:
        return None
    out: list[tuple[int, ...]] = []
    for env in es:
        vals: list[int] = []
        for e in exprs:
            v = eval_expr(e, env)
            if not isinstance(v, int):
                return None
            vals.append(v)
        while len(vals) < 3:
            vals.append(1)
        out.append(tuple(vals))
    return out


def is_1d(ctx: RuleContext, exprs: tuple[str, ...]) -> bool:
    vals = dims_values(ctx, exprs)
    return vals is not None and all(v[1] == 1 and v[2] == 1 for v in vals)


def scalar_value_expr(ctx: RuleContext, node: Node, data: bytes,
                      defs: Mapping[str, Node] | None = None) -> str | None:
    """The spec expression of a kernel-side bound: a scalar parameter (its ``arg NAME = EXPR``), a literal,
    or a macro-free arithmetic of those; None when it cannot be expressed in spec terms.

    ``defs``: locals the caller knows are defined once from such values and never reassigned (``int hw = H *
    W;``), name -> the defining expression, substituted (a bound written through a local is still known)."""
    k = ctx.cand_kernel
    if k is None:
        return None
    params = {p.name for p in k.params if not p.is_pointer}
    seen: set[str] = set()

    def rep(n: Node) -> str | None:
        if n.type == "identifier":
            name = node_text(n, data)
            a = ctx.spec.arg(name)
            if name in params and a is not None and not a.is_buffer and a.value is not None:
                return f"({a.value})"
            if defs is not None and name in defs and name not in seen and name not in params:
                seen.add(name)  # a definition reached again through itself is a cycle: poison it
                sub = render(defs[name], data, rep)
                seen.discard(name)
                return f"({sub})"
            return "\x00"  # unknown name: poison
        return None

    out = render(node, data, rep)
    if "\x00" in out:
        return None
    out = strip_parens(out)
    es = envs(ctx)
    if es is None or any(not isinstance(eval_expr(out, env), int) for env in es):
        return None
    return out


# ----------------------------------------------------------------------------- 2D one-thread-per-output


@dataclass(frozen=True)
class Grid2D:
    """``X = blockIdx.x * blockDim.x + threadIdx.x; Y = ...y...; if (X < NX && Y < NY) { inner }``.

    ``exit_form``: written ``if (X >= NX || Y >= NY) return;`` followed by ``inner``. ``ok_cond`` is the
    condition under which a thread's output exists, as text (the guard, or the negated exit test).
    """

    x: Decl
    y: Decl
    x_bound: Bound
    y_bound: Bound
    guard: Node
    exit_form: bool
    ok_cond: str
    inner: list[Node]


def _split(node: Node, data: bytes, op: str) -> list[Node] | None:
    n = unparen(node)
    b = binary_parts(n, data)
    if b is not None and b[1] == op:
        left = _split(b[0], data, op)
        right = _split(b[2], data, op)
        if left is None or right is None:
            return None
        return left + right
    return [n]


def grid_2d(body: Node, data: bytes) -> Grid2D | None:
    """The 2D one-thread-per-output shape (both indices with blockDim multipliers), or None."""
    sts = statements(body)
    idx: dict[str, Decl] = {}
    at = 0
    while at < len(sts) and len(idx) < 2:
        d = single_decl(sts[at], data)
        if d is None or d.pointer or d.value is None:
            return None
        for axis in ("x", "y"):
            if global_index(d.value, data, axis) == f"blockDim.{axis}" and axis not in idx:
                idx[axis] = d
                break
        else:
            return None
        at += 1
    if len(idx) != 2 or at >= len(sts) or sts[at].type != "if_statement":
        return None
    g = sts[at]
    cond = condition_of(g)
    if cond is None or g.child_by_field_name("alternative") is not None:
        return None
    x, y = idx["x"], idx["y"]
    ands = _split(cond, data, "&&")
    if ands is not None and len(ands) == 2 and at == len(sts) - 1:
        for a, b in ((ands[0], ands[1]), (ands[1], ands[0])):
            bx, by = upper_bound(a, data, x.name), upper_bound(b, data, y.name)
            if bx is not None and by is not None:
                return Grid2D(x, y, bx, by, g, False, node_text(cond, data),
                              statements(g.child_by_field_name("consequence")))
    ors = _split(cond, data, "||")
    if ors is not None and len(ors) == 2 and is_return_only(g.child_by_field_name("consequence")):
        for a, b in ((ors[0], ors[1]), (ors[1], ors[0])):
            bx, by = failing_bound(a, data, x.name), failing_bound(b, data, y.name)
            if bx is not None and by is not None:
                return Grid2D(x, y, bx, by, g, True, f"!({node_text(cond, data)})", sts[at + 1 :])
    return None


def extents_2d(ctx: RuleContext, g: Grid2D, data: bytes) -> tuple[str, str] | None:
    """How many columns and rows a 2D one-thread-per-output kernel covers, in spec terms: what a 2D rule's
    new grid is sized from. None when the launch is not 2D (a z extent) or an extent cannot be said."""
    if not is_2d_launch(ctx):
        return None
    nx = extent_expr(ctx, g.x_bound, data, 0)
    ny = extent_expr(ctx, g.y_bound, data, 1)
    return (nx, ny) if nx is not None and ny is not None else None


def bound_text(var: str, b: Bound, data: bytes) -> str:
    return f"{var} {'<=' if b.inclusive else '<'} {node_text(b.limit, data)}"


def extent_expr(ctx: RuleContext, b: Bound, data: bytes, axis: int) -> str | None:
    """How many indices a bound admits, in spec terms; else what the original launch covered on ``axis``."""
    lim = scalar_value_expr(ctx, b.limit, data)
    if lim is not None:
        return f"{lim} + 1" if b.inclusive else lim
    if len(ctx.grid) > axis and len(ctx.block) > axis:
        return f"({ctx.grid[axis]}) * ({ctx.block[axis]})"
    return None


def is_2d_launch(ctx: RuleContext) -> bool:
    g = dims_values(ctx, ctx.grid)
    b = dims_values(ctx, ctx.block)
    return g is not None and b is not None and all(v[2] == 1 for v in g + b)


# ----------------------------------------------------------------------------- 1D one-thread-per-element


@dataclass
class Elementwise:
    """A one-thread-per-element kernel (see ``elementwise_1d``)."""

    form: str  # "guard" | "exit" | "stride"
    index: Decl
    index_expr: Node
    mult: str
    prefix: list[Node]
    between: list[Node]
    cond: Node
    bound: Bound
    body: list[Node]
    stride: Node | None


def _index_decl_1d(stmt: Node, data: bytes) -> tuple[Decl, str] | None:
    d = single_decl(stmt, data)
    if d is None or d.pointer or d.shared or d.value is None:
        return None
    mult = global_index(d.value, data, "x")
    return (d, mult) if mult is not None else None


def elementwise_1d(body: Node, data: bytes) -> Elementwise | None:
    """One thread per element along x: ``T i = blockIdx.x * M + threadIdx.x;`` then ``if (i < LIMIT) { body }``
    (form "guard", the last statement), ``if (i >= LIMIT) return;`` + body (form "exit"), or a grid-stride loop
    ``for (T i = <that>; i < LIMIT; i += M * gridDim.x) body`` (form "stride", the last statement).

    ``prefix``: statements before the index; ``between``: between it and the guard (callers check them).
    """
    sts = statements(body)
    for at, st in enumerate(sts):
        if st.type == "for_statement":
            init = st.child_by_field_name("initializer")
            if init is None:
                return None
            got = _index_decl_1d(init, data)
            if got is None or at != len(sts) - 1:
                return None
            idx, mult = got
            cond = st.child_by_field_name("condition")
            upd = st.child_by_field_name("update")
            if cond is None or upd is None:
                return None
            bound = upper_bound(cond, data, idx.name)
            u = unparen(upd)
            if bound is None or u.type != "assignment_expression":
                return None
            op = u.child_by_field_name("operator")
            if op is None or node_text(op, data) != "+=" or not is_ident(u.child_by_field_name("left"), data, idx.name):
                return None
            stride = u.child_by_field_name("right")
            if not is_grid_stride(stride, data, mult):
                return None
            assert idx.value is not None
            return Elementwise("stride", idx, idx.value, mult, sts[:at], [], cond, bound,
                          statements(st.child_by_field_name("body")), stride)
        got = _index_decl_1d(st, data)
        if got is None:
            continue
        idx, mult = got
        assert idx.value is not None
        for j in range(at + 1, len(sts)):
            s = sts[j]
            if s.type != "if_statement":
                continue
            cond = condition_of(s)
            if cond is None or s.child_by_field_name("alternative") is not None:
                return None
            up = upper_bound(cond, data, idx.name)
            if up is not None and j == len(sts) - 1:
                return Elementwise("guard", idx, idx.value, mult, sts[:at], sts[at + 1 : j], cond, up,
                              statements(s.child_by_field_name("consequence")), None)
            down = failing_bound(cond, data, idx.name)
            if down is not None and is_return_only(s.child_by_field_name("consequence")):
                return Elementwise("exit", idx, idx.value, mult, sts[:at], sts[at + 1 : j], cond, down,
                              sts[j + 1 :], None)
            return None
        return None
    return None
