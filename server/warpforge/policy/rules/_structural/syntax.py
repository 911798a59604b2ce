"""Tree-sitter syntax helpers every structural rule reads a kernel body with: statements, names, calls,
collectives, jumps, subscripts, conditions, and re-emitting text with substitutions.

Why a module of its own: recognizers stay strict in the same way when they share these (names compared as
identifiers, never substrings; parentheses looked through; text re-emitted from the tree so comments and
formatting inside kept expressions survive). Pure functions of (node, bytes).
"""

from __future__ import annotations

from collections.abc import Callable

from tree_sitter import Node

from ....cuda.tree import member, node_text, walk
from ....cuda.tree import unparen as unparen  # re-exported: the rules import it from here
from ....cuda.tree import written_names as written_names  # likewise

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

#: scalar types a warp shuffle moves (and the structural rules accumulate in): ``__shfl_*_sync`` has overloads for
#: ``long``/``unsigned long`` and, in cuda_fp16.h and cuda_bf16.h, for the half and bfloat16 types, whose ``+``
#: (and ``atomicAdd``) exist on the device from sm_80, the builds' architecture (``ir.remap`` reads the same set)
SHUFFLE_TYPES = frozenset({
    "float", "double", "int", "unsigned", "unsigned int", "long long", "long long int", "unsigned long long",
    "unsigned long long int", "int32_t", "uint32_t", "int64_t", "uint64_t", "long", "unsigned long",
    "__half", "half", "__nv_bfloat16", "nv_bfloat16",
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
