"""Atomic statements anywhere in a kernel, and their key-aggregated rewrite (``atomic_aggregate``'s ``key``/``active``).

Why a module of its own: the atomics other people write sit inside grid-stride loops, behind early returns and
in the middle of a body (a histogram's ``atomicAdd(&bins[b], 1)`` per element, a scatter's ``atomicAdd(grad +
off, g)``), not only as one last statement per thread. Such an atomic can still be combined per warp, at the
point where it is executed, by the lanes that execute it together:

* the lanes that reach the statement together are ``__activemask()`` (lanes that returned, broke out of the
  loop or took another branch are not in it, so early exits are legal);
* ``__match_any_sync`` (sm_70+) splits them into groups that add to the same address (a histogram's bin); an
  address that is the same for every thread (parameters, literals and block coordinates only) needs no
  split: the group is the active mask;
* each group combines its values (``__reduce_*_sync`` for 32-bit integers on sm_80+, else shuffles: a
  butterfly when the group is the whole warp, else one shuffle per member) and its lowest lane issues the one
  atomic with the group's combined value.

Legality (decided per statement, each refusal in words): the call is ``atomicAdd``/``Or``/``And``/``Xor``/
``Min``/``Max`` with two arguments, its result unused (a statement of its own: the old value each thread
would get has no aggregated equivalent), its target a pointer whose element type is read from the kernel's
declarations (a parameter, a local pointer, a ``__shared__`` array or a cast) and moved by a shuffle.
Integer sums, min, max, and, or and xor are exact in any order; float sums are reassociated (the verify
tolerance applies, as it does to any atomic order).
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.model import Kernel
from ...cuda.tree import node_text, unparen, walk, written_names
from ._structural import SHUFFLE_TYPES, indent, resolved_type, subscript_parts
from ._why import Stage, declined
from .base import RuleContext

PREFIX = "wfa_"
#: atomic -> how two values combine
OPS = {"atomicAdd": "add", "atomicOr": "or", "atomicAnd": "and", "atomicXor": "xor", "atomicMin": "min",
       "atomicMax": "max"}
_INT32 = frozenset({"int", "int32_t", "signed", "signed int"})
_UINT32 = frozenset({"unsigned", "unsigned int", "uint32_t"})
_FULL = "0xffffffffu"
_BITWISE = {"or": "|", "and": "&", "xor": "^"}


@dataclass(frozen=True)
class KeySite:
    """One atomic statement the rewrite combines per group of lanes."""

    stmt: Node
    call: Node
    op: str
    #: the element type as written (``T``, ``unsigned int``): what the rewrite declares
    type: str
    #: the element type as instantiated (``float``): what legality is judged on
    resolved: str
    #: True: the address is the same for every thread (no split by address is needed)
    uniform: bool


def atomic_calls(body: Node, data: bytes) -> list[Node]:
    """Every call of a function whose name starts with ``atomic`` (builtin or the user's own)."""
    return [n for n in walk(body, ("call_expression",))
            if node_text(n.child_by_field_name("function") or n, data).startswith("atomic")]


def _uniform(node: Node, data: bytes, params: set[str]) -> bool:
    """Only parameters, literals and block-wide coordinates (blockIdx, blockDim, gridDim)."""
    for n in walk(node):
        if n.type == "identifier":
            name = node_text(n, data)
            if name in ("blockIdx", "blockDim", "gridDim"):
                continue
            if name not in params:
                return False
        elif n.type in ("call_expression", "assignment_expression", "update_expression"):
            return False
    return True


@dataclass(frozen=True)
class _Var:
    """What an atomic's target is made from: its element type, pointer + array levels, and whether every thread
    sees the same memory through it (parameters, ``__shared__`` arrays and pointers into them; not a thread's own
    local array, whose generic address is the same number in every thread)."""

    type: str
    levels: int
    shared_by_threads: bool


def _declared(body: Node, data: bytes, name: str, k: Kernel, depth: int = 0) -> _Var | None:
    """The local ``name`` (its first declaration); None when ``volatile`` or not declared in the body."""
    for d in walk(body, ("declaration",)):
        t = d.child_by_field_name("type")
        if t is None:
            continue
        for dn in d.children_by_field_name("declarator"):
            cur: Node | None = dn
            levels, pointer, init = 0, False, None
            while cur is not None and cur.type != "identifier":
                if cur.type in ("pointer_declarator", "array_declarator"):
                    levels += 1
                    pointer = pointer or cur.type == "pointer_declarator"
                if cur.type == "init_declarator":
                    init = cur.child_by_field_name("value")
                nxt = cur.child_by_field_name("declarator")
                if nxt is None:
                    named = [c for c in cur.named_children if c.type == "identifier"]
                    nxt = named[0] if named else None
                cur = nxt
            if cur is None or node_text(cur, data) != name:
                continue
            quals = {node_text(c, data) for c in d.children if c.type in ("type_qualifier", "storage_class_specifier")}
            if "volatile" in quals:
                return None
            if "__shared__" in quals:
                shared = True
            elif pointer and init is not None and depth < 3:
                # a pointer into memory every thread sees: its value is made from parameters or shared arrays
                shared = any(_space_ok(node_text(n, data), body, data, k, depth + 1)
                             for n in walk(init, ("identifier",)))
            else:
                shared = False
            return _Var(" ".join(node_text(t, data).split()), levels, shared)
    return None


def _space_ok(name: str, body: Node, data: bytes, k: Kernel, depth: int) -> bool:
    p = k.param(name)
    if p is not None:
        return p.is_pointer and not p.is_reference
    v = _declared(body, data, name, k, depth)
    return v is not None and v.levels > 0 and v.shared_by_threads


def pointee(target: Node, body: Node, data: bytes, k: Kernel) -> str | None:
    """The element type an atomic's target points to, as written, or None when the kernel does not say (or the
    target is a thread's own local memory, which threads cannot combine)."""
    t = unparen(target)
    if t.type == "cast_expression":
        tn, value = t.child_by_field_name("type"), t.child_by_field_name("value")
        text = " ".join(node_text(tn, data).split()) if tn is not None else ""
        if not text.endswith("*") or text.count("*") != 1 or "volatile" in text or value is None \
                or pointee(value, body, data, k) is None:
            return None
        return " ".join(text[:-1].replace("const ", "").split())
    depth = 0
    if t.type == "pointer_expression" and node_text(t, data).lstrip().startswith("&"):
        cur = t.child_by_field_name("argument")
        while cur is not None:
            parts = subscript_parts(cur, data)
            if parts is None:
                break
            depth += 1
            cur = parts[0]
        if cur is None:
            return None
        t = unparen(cur)
        if depth == 0:  # `&x`: a scalar every thread of the block sees
            var = _declared(body, data, node_text(t, data), k) if t.type == "identifier" else None
            return var.type if var is not None and var.levels == 0 and var.shared_by_threads else None
    elif t.type == "binary_expression":
        terms = _sum_terms(t, data)
        if terms is None:
            return None
        ptrs = [x for x in terms if x.type == "identifier" and _levels(node_text(x, data), body, data, k) is not None]
        if len(ptrs) != 1:
            return None
        t = ptrs[0]
    if t.type != "identifier":
        return None
    got = _levels(node_text(t, data), body, data, k)
    if got is None:
        return None
    typ, levels = got
    return typ if levels == max(depth, 1) else None


def _sum_terms(node: Node, data: bytes) -> list[Node] | None:
    """The terms of ``a + b * c + d`` (parentheses looked through; a product or difference is one term)."""
    n = unparen(node)
    if n.type != "binary_expression":
        return [n]
    op, a, b = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or a is None or b is None:
        return None
    if node_text(op, data) != "+":
        return [n]
    left, right = _sum_terms(a, data), _sum_terms(b, data)
    return None if left is None or right is None else left + right


def _levels(name: str, body: Node, data: bytes, k: Kernel) -> tuple[str, int] | None:
    """(element type, pointer + array levels) of a parameter or local that is a pointer or an array into memory
    the threads share (None for a thread's own local array)."""
    p = k.param(name)
    if p is not None:
        if p.is_reference or not p.is_pointer:
            return None
        return p.type, p.pointer_depth + len(p.array_dims)
    got = _declared(body, data, name, k)
    return (got.type, got.levels) if got is not None and got.levels > 0 and got.shared_by_threads else None


def key_sites(ctx: RuleContext, body: Node, data: bytes) -> list[KeySite]:
    """Every atomic statement the key-aggregated rewrite may combine (each refusal recorded with its reason)."""
    k = ctx.cand_kernel
    if k is None:
        return []
    params = {p.name for p in k.params}
    written = written_names(body, data)
    out: list[KeySite] = []
    for call in atomic_calls(body, data):
        fn = call.child_by_field_name("function")
        name = node_text(fn, data) if fn is not None else ""
        text = node_text(call, data)
        if name not in OPS:
            why = ("a device function of the kernel's own, not an atomic the rule combines (already aggregated?)"
                   if not name.startswith(("atomicExch", "atomicCAS", "atomicInc", "atomicDec"))
                   and not name.endswith(("_system", "_block")) else
                   "an exchange, compare-and-swap, wrapping increment or a scoped atomic: its operations do not "
                   "combine into one")
            declined(f"`{text}`: {why}", call, Stage.SHAPE)
            continue
        stmt = call.parent
        if stmt is None or stmt.type != "expression_statement" or stmt.named_child_count != 1:
            declined(f"the result of `{text}` is used (the old value each thread gets has no aggregated "
                     "equivalent)", call, Stage.LEGALITY)
            continue
        args = call.child_by_field_name("arguments")
        xs = [a for a in args.named_children if a.type != "comment"] if args is not None else []
        if len(xs) != 2:
            declined(f"`{text}` does not have a target and a value", call, Stage.SHAPE)
            continue
        typ = pointee(xs[0], body, data, k)
        if typ is None:
            declined(f"the element type `{node_text(xs[0], data)}` points to is not declared by a parameter, a "
                     "local pointer into a parameter, a `__shared__` variable or a cast (a thread's own local array "
                     "cannot be combined across lanes)", call, Stage.SHAPE)
            continue
        res = resolved_type(ctx, typ)
        if res not in SHUFFLE_TYPES:
            declined(f"a warp shuffle cannot move `{res}` values (the element type of `{text}`)", call,
                     Stage.LEGALITY)
            continue
        # a parameter the body reassigns (`out += threadIdx.x;`) is no longer the same for every thread
        out.append(KeySite(stmt, call, OPS[name], typ, res, _uniform(xs[0], data, params - written)))
    return out


def _combine(op: str, a: str, b: str) -> str:
    if op == "add":
        return f"{a} + {b}"
    if op in _BITWISE:
        return f"{a} {_BITWISE[op]} {b}"
    return f"({b} {'<' if op == 'min' else '>'} {a} ? {b} : {a})"


def _reduce_call(site: KeySite, arch: int, group: str, v: str) -> str | None:
    """``__reduce_<op>_sync`` for a 32-bit integer on sm_80+ (None: shuffles)."""
    if arch < 80:
        return None
    if site.resolved in _UINT32 or (site.resolved in _INT32 and site.op in ("add", "min", "max")):
        return f"{v} = __reduce_{site.op}_sync({group}, {v});"
    if site.resolved in _INT32:
        return f"{v} = ({site.type})__reduce_{site.op}_sync({group}, (unsigned)({v}));"
    return None


def rewrite_site(site: KeySite, data: bytes, arch: int) -> str:
    """The compound statement that replaces ``site.stmt``: its lanes grouped, one atomic per group."""
    args = site.call.child_by_field_name("arguments")
    assert args is not None
    xs = [a for a in args.named_children if a.type != "comment"]
    fn = site.call.child_by_field_name("function")
    assert fn is not None
    p, v, g, lane = f"{PREFIX}p", f"{PREFIX}v", f"{PREFIX}g", f"{PREFIX}lane"
    own, x, o, r = f"{PREFIX}own", f"{PREFIX}x", f"{PREFIX}o", f"{PREFIX}r"
    group = (f"const unsigned {g} = __activemask();  // the address is the same for every thread" if site.uniform
             else f"const unsigned {g} = __match_any_sync(__activemask(), (unsigned long long)({p}));")
    lines = [f"auto {p} = ({node_text(xs[0], data)});", f"{site.type} {v} = ({node_text(xs[1], data)});",
             f"unsigned {lane};", f'asm volatile("mov.u32 %0, %%laneid;" : "=r"({lane}));', group]
    red = _reduce_call(site, arch, g, v)
    if red is not None:
        lines.append(red)
    else:
        lines += [f"if ({g} == {_FULL}) {{",
                  f"    for (int {o} = 16; {o} > 0; {o} >>= 1) {{",
                  f"        const {site.type} {x} = __shfl_xor_sync({_FULL}, {v}, {o});",
                  f"        {v} = {_combine(site.op, v, x)};", "    }",
                  "} else {",
                  f"    const {site.type} {own} = {v};",
                  f"    for (unsigned {r} = {g} & ({g} - 1u); {r} != 0u; {r} &= {r} - 1u) {{",
                  f"        const {site.type} {x} = __shfl_sync({g}, {own}, __ffs({r}) - 1);",
                  f"        {v} = {_combine(site.op, v, x)};", "    }", "}"]
    lines += [f"if ({lane} == (unsigned)(__ffs({g}) - 1)) {{", f"    {node_text(fn, data)}({p}, {v});", "}"]
    return "{\n" + indent("\n".join(lines), "    ") + "\n}"


def splice_sites(body: Node, data: bytes, sites: list[KeySite], arch: int) -> str:
    """The body's text with every site's statement replaced by its rewrite, indented like its line."""
    out = bytearray()
    pos = body.start_byte
    for s in sorted(sites, key=lambda s: s.stmt.start_byte):
        start = data.rfind(b"\n", 0, s.stmt.start_byte) + 1
        pad = data[start:s.stmt.start_byte].decode("utf-8", errors="replace")
        pad = pad if not pad.strip() else ""
        out += data[pos:s.stmt.start_byte] + rewrite_site(s, data, arch).replace("\n", "\n" + pad).encode("utf-8")
        pos = s.stmt.end_byte
    out += data[pos:body.end_byte]
    return out.decode("utf-8", errors="replace")


def arch_number(arch: str) -> int:
    """``sm_90`` -> 90 (0 when unreadable)."""
    digits = "".join(c for c in arch if c.isdigit())
    return int(digits) if digits else 0
