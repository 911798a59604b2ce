"""The lane model: an abstract interpreter that says how an index expression varies across a warp.

Coalescing (WF103), bank conflicts (WF105), idle threads (WF102) and serial row walks (WF111) all ask the
same question of an index expression: *how does it change from one lane of a warp to the next?* This
module answers it with a small abstract interpretation of the kernel body:

- an integer expression becomes a ``Val``: a coefficient of ``threadIdx.x`` and one of ``threadIdx.y``
  (polynomials over parameters, sizes and macros, e.g. ``cols``) plus a warp-uniform remainder, or
  "inexact" when it depends on the thread in a way we do not model (a gather ``x[idx[i]]``, ``i * i``);
- local variables are followed through their definitions (``int row = blockIdx.x * blockDim.x +
  threadIdx.x``), loop variables with uniform steps keep their thread coefficients (grid-stride loops),
  and local pointers derived from a parameter (``const float* x = inp + row * cols``) carry their offset;
- atoms are evaluated with the numbers the spec resolves (sizes, scalar arguments, tunables, the block
  shape), the file's ``#define`` constants and template arguments.

Anything the interpretation cannot see through becomes inexact, and every analyzer stays silent on
inexact values: a missed hint costs little, a wrong one teaches users to ignore hints.

The model is computed once per kernel and memoized on the context (``threads(ctx)``). The source-pattern
analyzers (``profile.analyzers``) are its users; the geometry helpers at the end (lane addresses, sectors,
row walks) turn its coefficients into what they report.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from tree_sitter import Node

from ..cuda.model import DeclKind, Param
from ..cuda.parser import parse_tree
from ..cuda.tree import element_use, node_text, split_init, subscript_index, walk
from ..spec.expr import ExprError
from ..spec.expr import parse as parse_expr
from ..spec.model import DTYPES, canonical_dtype
from .context import KernelContext

Mono = tuple[str, ...]
_MAX_TERMS = 24
_MAX_DEPTH = 64  # locals followed through other locals, at most
#: syntax nodes in a kernel body beyond which the source-pattern analyzers skip it (~2,000 dense lines;
#: hand-written kernels have a few thousand nodes). Keeps a 10 MB generated file's hints bounded.
MAX_NODES = 60_000

#: bytes of CUDA's built-in vector types (scalars come from the spec's dtype table)
VECTOR_BYTES: dict[str, int] = {
    "char2": 2, "uchar2": 2, "char4": 4, "uchar4": 4, "short2": 4, "ushort2": 4, "short4": 8, "ushort4": 8,
    "int2": 8, "uint2": 8, "int4": 16, "uint4": 16, "float2": 8, "float4": 16, "long2": 16, "ulong2": 16,
    "longlong2": 16, "ulonglong2": 16, "double2": 16, "half2": 4, "__half2": 4, "__nv_bfloat162": 4,
    "nv_bfloat162": 4, "int3": 12, "uint3": 12, "float3": 12, "double4": 32,
}

#: calls whose result differs between the threads of a block even with uniform arguments
VARYING_CALLS = frozenset({
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc", "atomicDec", "atomicCAS",
    "atomicAnd", "atomicOr", "atomicXor", "atomicAdd_block", "atomicAdd_system",
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__shfl", "__shfl_up",
    "__shfl_down", "__shfl_xor", "__ballot_sync", "__ballot", "__any_sync", "__all_sync", "__any", "__all",
    "__activemask", "__match_any_sync", "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
    "__lanemask_lt", "__lanemask_le", "__lanemask_gt", "__lanemask_ge", "__lanemask_eq",
    "clock", "clock64", "__globaltimer", "curand", "curand_uniform", "curand_normal", "curand_init",
    "thread_rank", "thread_index", "meta_group_rank", "shfl", "shfl_up", "shfl_down", "shfl_xor",
    "ballot", "any", "all", "match_any", "match_all", "laneid", "__laneid", "get_lane_id",
})
#: tokens that make a macro or helper function thread-dependent when they appear in its text
_VARYING_TOKENS = re.compile(r"\b(threadIdx|thread_rank|thread_index|laneid|__lane_id|clock64|clock)\b|%laneid")


def text_of(ctx: KernelContext, node: Node) -> str:
    return " ".join(ctx.text(node).split())


def call_name(ctx: KernelContext, call: Node) -> str:
    """The called name: ``f`` for ``f(x)``, ``ns::f<T>(x)``, and ``sync`` for ``block.sync()``."""
    fn = call.child_by_field_name("function")
    while fn is not None:
        if fn.type in ("identifier", "field_identifier"):
            return ctx.text(fn)
        if fn.type == "field_expression":
            fn = fn.child_by_field_name("field")
        elif fn.type in ("qualified_identifier", "template_function"):
            fn = fn.child_by_field_name("name")
        else:
            return ""
    return ""


# --------------------------------------------------------------------------------------------- polynomials
@dataclass(frozen=True)
class Poly:
    """An integer polynomial over named atoms (``2*cols + 1``): coefficients of lanes and uniform parts.

    Atom names: parameters, sizes and macros as written (``cols``); ``blockIdx.x``-style builtins;
    ``$name`` for a loop-carried local (uniform, value unknown statically); ``?text`` for an opaque uniform
    subexpression (``?k / 2``, evaluated with the spec's expression evaluator when its names are known);
    ``~text`` for a value uniform across a warp but not across a block (``threadIdx.x / 32``).
    """

    terms: tuple[tuple[Mono, int], ...] = ()

    @staticmethod
    def of(d: dict[Mono, int]) -> Poly:
        items = [(m, c) for m, c in d.items() if c]
        if len(items) > 1:
            items.sort()
        return Poly(tuple(items))

    @staticmethod
    def const(c: int) -> Poly:
        return Poly.of({(): c})

    @staticmethod
    def atom(name: str) -> Poly:
        return Poly.of({(name,): 1})

    def __add__(self, o: Poly) -> Poly:
        if not o.terms:
            return self
        if not self.terms:
            return o
        d = dict(self.terms)
        for m, c in o.terms:
            d[m] = d.get(m, 0) + c
        return Poly.of(d)

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, o: Poly) -> Poly:
        return self + (-o)

    def __mul__(self, o: Poly) -> Poly:
        if not self.terms or not o.terms:
            return ZERO
        if o.terms == ((((), 1),)):
            return self
        d: dict[Mono, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = tuple(sorted(m1 + m2))
                d[m] = d.get(m, 0) + c1 * c2
        return Poly.of(d)

    @property
    def is_zero(self) -> bool:
        return not self.terms

    @property
    def constant(self) -> int | None:
        """The value when the polynomial has no atoms."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def coef(self, mono: Mono) -> int:
        return dict(self.terms).get(mono, 0)

    def atoms(self) -> set[str]:
        return {a for m, _ in self.terms for a in m}

    def evaluate(self, value: Callable[[str], int | None]) -> int | None:
        total = 0
        for m, c in self.terms:
            v = c
            for a in m:
                x = value(a)
                if x is None:
                    return None
                v *= x
            total += v
        return total

    def text(self) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        for m, c in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            names = [a.lstrip("?$~") for a in m]
            names = [f"({n})" if any(ch in n for ch in " +-*/%") and len(m) + (abs(c) != 1) > 1 else n
                     for n in names]
            body = "*".join(([str(abs(c))] if abs(c) != 1 or not names else []) + names)
            parts.append(("- " if c < 0 else "+ ") + body)
        s = " ".join(parts)
        return s[2:] if s.startswith("+ ") else "-" + s[2:]


ZERO = Poly()
ONE = Poly.const(1)


@dataclass(frozen=True)
class Val:
    """An integer expression as seen by a warp: ``tx*threadIdx.x + ty*threadIdx.y + rest``.

    ``rest`` is uniform across the lanes of a warp (for blocks whose x extent is a multiple of 32, which is
    how warps are formed); ``exact`` False means "thread-dependent in a way not modelled" and makes every
    analyzer stay silent.
    """

    tx: Poly = ZERO
    ty: Poly = ZERO
    rest: Poly = ZERO
    exact: bool = True

    @property
    def uniform(self) -> bool:
        return self.exact and self.tx.is_zero and self.ty.is_zero

    @property
    def thread_free(self) -> bool:
        """Uniform across the whole block (no warp-only atoms)."""
        return self.uniform and not any(a.startswith("~") for a in self.rest.atoms())

    def __add__(self, o: Val) -> Val:
        if not (self.exact and o.exact):
            return INEXACT
        if o == ZERO_VAL:
            return self
        return _checked(Val(self.tx + o.tx, self.ty + o.ty, self.rest + o.rest))

    def __neg__(self) -> Val:
        return Val(-self.tx, -self.ty, -self.rest, self.exact)

    def __sub__(self, o: Val) -> Val:
        return self + (-o)

    def scale(self, p: Poly) -> Val:
        if not self.exact:
            return INEXACT
        return _checked(Val(self.tx * p, self.ty * p, self.rest * p))


INEXACT = Val(exact=False)
ZERO_VAL = Val()


def _checked(v: Val) -> Val:
    if max(len(v.tx.terms), len(v.ty.terms), len(v.rest.terms)) > _MAX_TERMS:
        return INEXACT
    return v


def const_val(c: int) -> Val:
    return Val(rest=Poly.const(c))


def atom_val(name: str) -> Val:
    return Val(rest=Poly.atom(name))


# --------------------------------------------------------------------------------------------- types
def type_bytes(type_text: str) -> int | None:
    """Size of a C/CUDA element type as written (``const float``, ``float4``, ``unsigned int``)."""
    t = " ".join(type_text.replace("const", " ").replace("volatile", " ").replace("__restrict__", " ").split())
    dt = canonical_dtype(t)
    if dt is not None:
        return DTYPES[dt][0]
    return VECTOR_BYTES.get(t)


def _int_literal(text: str) -> int | None:
    t = text.rstrip("uUlL")
    try:
        return int(t, 0)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------- model
@dataclass
class Def:
    """One definition of a local: ``int x = e`` (op "init"), ``x = e`` ("="), ``x += e``, ``x++`` ("++")."""

    op: str
    value: Node | None
    node: Node


@dataclass
class Local:
    name: str
    type: str = ""
    pointer: bool = False
    array_dims: tuple[Node | None, ...] = ()
    shared: bool = False
    defs: list[Def] = field(default_factory=list)
    decl: Node | None = None


@dataclass(frozen=True)
class PtrRef:
    """A pointer expression resolved to a kernel parameter plus an element offset (in ``elem`` units)."""

    param: str
    offset: Val
    elem: str
    via: str | None = None  # the local pointer it went through, if any


@dataclass(frozen=True)
class Access:
    """One access to global memory through a pointer parameter (``x[i]``, ``*(p + i)``)."""

    node: Node
    param: str
    index: Val
    elem: str
    elem_bytes: int | None
    load: bool
    store: bool
    via: str | None


@dataclass(frozen=True)
class SharedArray:
    name: str
    elem: str
    elem_bytes: int | None
    dims: tuple[int | None, ...]  # None: unknown (``extern __shared__ float s[]``)
    decl_line: int
    dims_text: tuple[str, ...]


@dataclass(frozen=True)
class SharedAccess:
    node: Node
    array: SharedArray
    index: Val  # linear element index


@dataclass(frozen=True)
class Loop:
    """A ``for`` loop: its variable, start, bound (``var < bound``), and per-iteration step."""

    node: Node
    var: str
    init: Val
    bound: Node | None
    bound_val: Val | None
    inclusive: bool
    step: Val | None


class Threads:
    """The per-kernel model: locals, pointer aliases, numbers, and ``value(expr)``."""

    def __init__(self, ctx: KernelContext) -> None:
        self.ctx = ctx
        self.params: dict[str, Param] = {p.name: p for p in ctx.kernel.params if p.name}
        self.type_map: dict[str, str] = {}
        self.numbers: dict[str, int] = {}
        self.varying_names: set[str] = set()
        self._file_facts()
        #: every node of the kernel body by type, in pre-order (one walk, shared by all analyzers)
        self.by_type: dict[str, list[Node]] = {}
        #: a kernel too large to analyze in bounded time (generated code): every analyzer stays silent
        self.too_big = False
        body = ctx.body
        if body is not None:
            for count, n in enumerate(ctx.walk(body), 1):
                self.by_type.setdefault(n.type, []).append(n)
                if count > MAX_NODES:
                    self.too_big = True
                    self.by_type = {}
                    break
        self._starts: dict[str, list[int]] = {t: [n.start_byte for n in ns] for t, ns in self.by_type.items()}
        #: identifier texts, decoded once; and where each name occurs (sorted start bytes)
        self.names: dict[int, str] = {}
        self._occurs: dict[str, list[int]] = {}
        for n in self.by_type.get("identifier", []):
            nm = ctx.text(n)
            self.names[n.id] = nm
            self._occurs.setdefault(nm, []).append(n.start_byte)
        self.locals: dict[str, Local] = {}
        self._collect_locals()
        self._value_memo: dict[int, Val] = {}
        self._loop_memo: dict[int, Loop | None] = {}
        self._binding = 0  # > 0 while a local is temporarily bound (values must not be memoized then)
        self._accesses: list[Access] | None = None
        self._shared: list[SharedAccess] | None = None
        self._values: dict[str, Val] = {}
        self._busy: set[str] = set()
        self._ptr_cache: dict[str, PtrRef | None] = {}
        self._busy_ptr: set[str] = set()

    # ---------------------------------------------------------------------------------------- numbers
    def _file_facts(self) -> None:
        """Numbers (macros, spec, template args) and names that expand to thread-dependent code."""
        ctx = self.ctx
        raw: dict[str, str] = {}
        for d in ctx.model.declarations:
            if d.kind not in (DeclKind.MACRO, DeclKind.DEVICE_FUNCTION):
                continue
            text = ctx.src.data[d.span.start : d.span.end].decode("utf-8", "replace")
            if _VARYING_TOKENS.search(text):
                self.varying_names.update(d.names)
            if d.kind is DeclKind.MACRO:
                m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)(?!\()[ \t]+(.*)", text, re.S)
                if m:
                    body = re.sub(r"//.*|/\*.*?\*/", " ", m.group(2).replace("\\\n", " "), flags=re.S).strip()
                    raw[m.group(1)] = body
        # helpers that call thread-dependent helpers are thread-dependent too
        changed = True
        while changed:
            changed = False
            for d in ctx.model.declarations:
                if d.kind in (DeclKind.MACRO, DeclKind.DEVICE_FUNCTION) and not set(d.names) <= self.varying_names \
                        and d.uses & self.varying_names:
                    self.varying_names.update(d.names)
                    changed = True
        nums: dict[str, int] = {}
        r = ctx.resolved
        spec = ctx.spec
        if spec is not None:
            for name, value in zip((t.name for t in ctx.kernel.template_params), spec.template_args, strict=False):
                v = _try_int(value, nums)
                if v is not None:
                    nums[name] = v
                else:
                    self.type_map[name] = value.strip()
            for a in spec.args:
                if a.is_buffer:
                    p = self.params.get(a.name)
                    if p is not None and p.type in (t.name for t in ctx.kernel.template_params):
                        self.type_map.setdefault(p.type, a.dtype)
        for _ in range(3):  # macros referring to macros
            for name, body in raw.items():
                if name not in nums:
                    v = _try_int(body, nums)
                    if v is not None:
                        nums[name] = v
        if r is not None:
            for k, dv in r.defines.items():
                v = _try_int(dv, nums)
                if v is not None:
                    nums[k] = v
            for k, sv in r.sizes.items():
                if isinstance(sv, int) and not isinstance(sv, bool):
                    nums[k] = sv
            for ra in r.args:
                if ra.value is not None and isinstance(ra.value, int) and not isinstance(ra.value, bool):
                    nums[ra.name] = ra.value
            for i, axis in enumerate("xyz"):
                nums[f"blockDim.{axis}"] = r.block[i]
                nums[f"gridDim.{axis}"] = r.grid[i]
        self.numbers = nums
        self._atom_memo: dict[str, int | None] = {}

    def atom_value(self, atom: str) -> int | None:
        if atom.startswith(("$", "~")):
            return None
        if atom.startswith("?"):
            if atom not in self._atom_memo:
                self._atom_memo[atom] = _try_int(atom[1:], self.numbers)
            return self._atom_memo[atom]
        return self.numbers.get(atom)

    def number(self, p: Poly) -> int | None:
        return p.evaluate(self.atom_value)

    def within(self, node: Node, type_: str) -> list[Node]:
        """Body nodes of one type inside ``node`` (itself included), in source order."""
        starts = self._starts.get(type_)
        if not starts:
            return []
        lo = bisect.bisect_left(starts, node.start_byte)
        hi = bisect.bisect_left(starts, node.end_byte, lo)
        return [n for n in self.by_type[type_][lo:hi] if n.end_byte <= node.end_byte]

    def name(self, ident: Node) -> str:
        nm = self.names.get(ident.id)
        return nm if nm is not None else self.ctx.text(ident)

    def mentions(self, node: Node, name: str) -> bool:
        """Whether identifier ``name`` occurs inside ``node``."""
        occ = self._occurs.get(name)
        if not occ:
            return False
        i = bisect.bisect_left(occ, node.start_byte)
        return i < len(occ) and occ[i] < node.end_byte

    def nodes(self, *types: str) -> list[Node]:
        """Body nodes of the given types, in source (pre-)order."""
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        out = [n for t in types for n in self.by_type.get(t, [])]
        out.sort(key=lambda n: (n.start_byte, -n.end_byte))
        return out

    # ---------------------------------------------------------------------------------------- locals
    def _collect_locals(self) -> None:
        ctx = self.ctx
        for n in self.nodes("declaration", "assignment_expression", "update_expression"):
            t = n.type
            if t == "declaration":
                self._declaration(n)
            elif t == "assignment_expression":
                left = n.child_by_field_name("left")
                op = n.child_by_field_name("operator")
                if left is not None and op is not None:
                    target = _lvalue_root(left)
                    if target is not None:
                        self._define(ctx.text(target), op.type if left.type == "identifier" else "elem",
                                     n.child_by_field_name("right"), n)
            elif t == "update_expression":
                arg = n.child_by_field_name("argument")
                if arg is not None:
                    target = _lvalue_root(arg)
                    if target is not None:
                        self._define(ctx.text(target), "++" if arg.type == "identifier" else "elem", None, n)

    def _define(self, name: str, op: str, value: Node | None, node: Node) -> None:
        """Record a definition; an element store (``a[i] = v``) only defines a per-thread local array."""
        loc = self.locals.get(name)
        if op == "elem":
            if loc is not None and not loc.pointer and not loc.shared and loc.array_dims:
                loc.defs.append(Def(op, value, node))
            return
        loc = self._local_or_param(name)
        if loc is not None:
            loc.defs.append(Def(op, value, node))

    def _local_or_param(self, name: str) -> Local | None:
        loc = self.locals.get(name)
        if loc is None and name in self.params:
            p = self.params[name]
            loc = Local(name, p.type, p.is_pointer)
            loc.defs.append(Def("param", None, self.ctx.tree.root_node))
            self.locals[name] = loc
        return loc

    def _declaration(self, n: Node) -> None:
        ctx = self.ctx
        shared = any(c.type == "type_qualifier" and ctx.text(c) == "__shared__" for c in n.children)
        tnode = n.child_by_field_name("type")
        type_text = ctx.text(tnode) if tnode is not None else ""
        for d in n.children_by_field_name("declarator"):
            decl, value = split_init(d)
            pointer = False
            dims: list[Node | None] = []
            cur: Node | None = decl
            while cur is not None and cur.type != "identifier":
                if cur.type in ("pointer_declarator", "reference_declarator"):
                    pointer = pointer or cur.type == "pointer_declarator"
                    nxt = cur.child_by_field_name("declarator")
                    cur = nxt if nxt is not None else (cur.named_children[-1] if cur.named_children else None)
                elif cur.type == "array_declarator":
                    dims.insert(0, cur.child_by_field_name("size"))
                    cur = cur.child_by_field_name("declarator")
                elif cur.type == "parenthesized_declarator":
                    cur = cur.named_children[0] if cur.named_children else None
                else:
                    cur = None
            if cur is None:
                continue
            name = ctx.text(cur)
            loc = Local(name, type_text, pointer, tuple(dims), shared, decl=n)
            if name in self.locals:  # the same name declared twice (two loops' `j`): merge their definitions
                old = self.locals[name]
                loc.defs = old.defs
                loc.pointer = loc.pointer or old.pointer
                if old.type != type_text:
                    loc.type = ""
            self.locals[name] = loc
            if value is not None and value.type not in ("initializer_list", "argument_list"):
                loc.defs.append(Def("init", value, d))
            elif value is not None:
                loc.defs.append(Def("elem", value, d))

    # ---------------------------------------------------------------------------------------- values
    def value(self, node: Node | None) -> Val:
        """The ``Val`` of an integer expression."""
        if node is None:
            return INEXACT
        v = self._value_memo.get(node.id)
        if v is None:
            v = self._value(node)
            if not self._binding:
                self._value_memo[node.id] = v
        return v

    def _value(self, node: Node) -> Val:
        ctx = self.ctx
        t = node.type
        if t == "number_literal":
            lit = _int_literal(ctx.text(node))
            return const_val(lit) if lit is not None else atom_val("?" + ctx.text(node))
        if t in ("true", "false"):
            return const_val(1 if t == "true" else 0)
        if t == "identifier":
            name = self.name(node)
            if name in self.varying_names:
                return INEXACT
            if name in self.locals and not (name in self.params and len(self.locals[name].defs) == 1):
                return self.local_value(name)
            return atom_val(name)
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            fld = node.child_by_field_name("field")
            if arg is not None and fld is not None and arg.type == "identifier":
                base, f = ctx.text(arg), ctx.text(fld)
                if base == "threadIdx":
                    return Val(tx=ONE) if f == "x" else Val(ty=ONE) if f == "y" else atom_val("~threadIdx.z")
                if base in ("blockIdx", "blockDim", "gridDim"):
                    return atom_val(f"{base}.{f}")
                if base in self.params and base not in self.locals:
                    return atom_val("?" + text_of(ctx, node))
            return INEXACT
        if t in ("parenthesized_expression",):
            return self.value(node.named_children[0]) if node.named_children else INEXACT
        if t == "cast_expression":
            return self.value(node.child_by_field_name("value"))
        if t == "unary_expression":
            op = node.child_by_field_name("operator")
            v = self.value(node.child_by_field_name("argument"))
            o = op.type if op is not None else ""
            if o == "-":
                return -v
            if o == "+":
                return v
            return atom_val("?" + text_of(ctx, node)) if v.uniform else INEXACT
        if t == "binary_expression":
            return self._binary(node)
        if t == "conditional_expression":
            c = self.value(node.child_by_field_name("condition"))
            a = self.value(node.child_by_field_name("consequence"))
            b = self.value(node.child_by_field_name("alternative"))
            if c.uniform and a.exact and b.exact and a.tx == b.tx and a.ty == b.ty:
                return Val(a.tx, a.ty, a.rest if a.rest == b.rest else Poly.atom("?" + text_of(ctx, node)))
            return INEXACT
        if t == "call_expression":
            name = call_name(ctx, node)
            if name in VARYING_CALLS or name in self.varying_names:
                return INEXACT
            args = node.child_by_field_name("arguments")
            if args is not None and all(self.value(a).uniform for a in args.named_children):
                return atom_val(("~" if any(not self.value(a).thread_free for a in args.named_children) else "?")
                                + text_of(ctx, node))
            return INEXACT
        if t == "subscript_expression":
            idx = subscript_index(node)
            arr = node.child_by_field_name("argument")
            if arr is not None and idx is not None and self.value(idx).uniform and self._uniform_base(arr):
                return atom_val("?" + text_of(ctx, node))
            return INEXACT
        if t in ("sizeof_expression", "alignof_expression"):
            return atom_val("?" + text_of(ctx, node))
        return INEXACT

    def _uniform_base(self, base: Node) -> bool:
        """Whether ``base[i]`` with a uniform ``i`` reads the same element in every thread of a warp."""
        if base.type == "subscript_expression":
            idx = subscript_index(base)
            inner = base.child_by_field_name("argument")
            return idx is not None and inner is not None and self.value(idx).uniform and self._uniform_base(inner)
        if base.type != "identifier":
            return False
        name = self.ctx.text(base)
        loc = self.locals.get(name)
        if loc is None:
            return True  # a parameter or a global
        if loc.shared:
            return True
        if loc.pointer:
            ref = self.pointer(base)
            return ref is not None and ref.offset.uniform
        return False  # a per-thread local array

    def _binary(self, node: Node) -> Val:
        ctx = self.ctx
        op_node = node.child_by_field_name("operator")
        op = op_node.type if op_node is not None else ""
        a = self.value(node.child_by_field_name("left"))
        b = self.value(node.child_by_field_name("right"))
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            if not (a.exact and b.exact):
                return INEXACT
            if a.uniform:
                return b.scale(a.rest)
            if b.uniform:
                return a.scale(b.rest)
            return INEXACT
        if op == "<<":
            k = self.number(b.rest) if b.uniform else None
            if a.exact and k is not None and 0 <= k < 31:
                return a.scale(Poly.const(1 << k))
            if a.uniform and b.uniform:
                return atom_val("?" + text_of(ctx, node))
            return INEXACT
        if a.uniform and b.uniform:
            warp_only = not (a.thread_free and b.thread_free)
            return atom_val(("~" if warp_only else "?") + text_of(ctx, node))
        # lane / warp decomposition of a value that advances by one per lane: tid % 32, tid & 31, tid / 32
        if a.exact and a.tx == ONE and a.ty.is_zero and b.uniform:
            m = self.number(b.rest)
            if m is not None and m > 0:
                if op in ("%",) and m % 32 == 0:
                    return Val(tx=ONE, rest=Poly.atom("~" + text_of(ctx, node) + " - lane"))
                if op == "&" and (m + 1) % 32 == 0 and (m + 1) & m == 0:
                    return Val(tx=ONE, rest=Poly.atom("~" + text_of(ctx, node) + " - lane"))
                if op == "/" and m % 32 == 0:
                    return atom_val("~" + text_of(ctx, node))
                if op == ">>" and m >= 5:
                    return atom_val("~" + text_of(ctx, node))
        return INEXACT

    def local_value(self, name: str) -> Val:
        if name in self._values:
            return self._values[name]
        if name in self._busy or len(self._busy) > _MAX_DEPTH:
            return INEXACT  # a cycle, or a chain of locals too long to follow (generated code)
        self._busy.add(name)
        try:
            v = self._local_value(name)
        finally:
            self._busy.discard(name)
        if not self._binding:
            self._values[name] = v
        return v

    def _local_value(self, name: str) -> Val:
        loc = self.locals[name]
        if loc.pointer or loc.array_dims:
            return INEXACT
        inits: list[Val] = []
        steps: list[Def] = []
        for d in loc.defs:
            if d.op == "param":
                inits.append(atom_val(name))
            elif d.op in ("init", "=") and d.value is not None and not self.mentions(d.value, name):
                inits.append(self.value(d.value))
            elif d.op == "elem":
                return INEXACT
            else:
                steps.append(d)
        if any(not v.exact for v in inits):
            return INEXACT
        if len(inits) == 1 and not steps:
            return inits[0]
        if not inits:
            return atom_val("$" + name) if not steps else INEXACT
        tx, ty = inits[0].tx, inits[0].ty
        if any(v.tx != tx or v.ty != ty for v in inits):
            return INEXACT
        all_uniform = tx.is_zero and ty.is_zero
        for d in steps:
            inc = self._increment(d, name)
            if (inc is None or not inc.uniform) and not (all_uniform and self._uniform_update(d, name)):
                return INEXACT
        thread_free = all(v.thread_free for v in inits)
        return Val(tx, ty, Poly.atom(("$" if thread_free else "~") + name))

    def _increment(self, d: Def, name: str) -> Val | None:
        """The uniform amount a definition adds to ``name`` (``+= e``, ``-= e``, ``++``, ``= name + e``)."""
        if d.op == "++":
            return const_val(1)
        if d.op in ("+=", "-=") and d.value is not None:
            v = self.value(d.value)
            return v if d.op == "+=" else -v
        if d.op == "=" and d.value is not None and d.value.type == "binary_expression":
            op = d.value.child_by_field_name("operator")
            left = d.value.child_by_field_name("left")
            right = d.value.child_by_field_name("right")
            if op is None or left is None or right is None:
                return None
            o = op.type
            if o in ("+", "-") and left.type == "identifier" and self.ctx.text(left) == name \
                    and not self.mentions(right, name):
                v = self.value(right)
                return v if o == "+" else -v
            if o == "+" and right.type == "identifier" and self.ctx.text(right) == name \
                    and not self.mentions(left, name):
                return self.value(left)
        return None

    def _uniform_update(self, d: Def, name: str) -> bool:
        """A compound update (``s >>= 1``, ``s = s / 2``) that keeps a uniform variable uniform."""
        if d.value is None:
            return d.op == "++"
        v = self.value(d.value) if not self.mentions(d.value, name) else None
        if v is not None:
            return v.uniform
        # `s = s / 2`: uniform when everything but `s` itself is
        saved = self._values.get(name)
        self._values[name] = atom_val("$" + name)
        self._binding += 1
        try:
            return self.value(d.value).uniform
        finally:
            self._binding -= 1
            if saved is None:
                del self._values[name]
            else:
                self._values[name] = saved

    # ---------------------------------------------------------------------------------------- pointers
    def elem_type(self, type_text: str) -> str:
        t = " ".join(type_text.replace("const", " ").replace("volatile", " ").split())
        return self.type_map.get(t, t)

    def elem_bytes(self, type_text: str) -> int | None:
        return type_bytes(self.elem_type(type_text))

    def pointer(self, node: Node | None) -> PtrRef | None:
        """The parameter a pointer expression points into, and the element offset."""
        if node is None:
            return None
        ctx = self.ctx
        t = node.type
        if t == "identifier":
            name = ctx.text(node)
            loc = self.locals.get(name)
            p = self.params.get(name)
            if p is not None and p.pointer_depth == 1 and not p.array_dims and (loc is None or len(loc.defs) == 1):
                return PtrRef(name, Val(), self.elem_type(p.type))
            if loc is not None and loc.pointer and not loc.shared:
                return self._local_pointer(name)
            return None
        if t == "parenthesized_expression":
            return self.pointer(node.named_children[0]) if node.named_children else None
        if t == "binary_expression":
            op_node = node.child_by_field_name("operator")
            op = op_node.type if op_node is not None else ""
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            if op in ("+", "-"):
                lp = self.pointer(left)
                if lp is not None:
                    off = self.value(right)
                    return PtrRef(lp.param, lp.offset + (off if op == "+" else -off), lp.elem, lp.via)
                rp = self.pointer(right) if op == "+" else None
                if rp is not None:
                    return PtrRef(rp.param, rp.offset + self.value(left), rp.elem, rp.via)
            return None
        if t in ("cast_expression", "call_expression"):
            # (T*)p and reinterpret_cast<T*>(p): same place, maybe other units
            if t == "cast_expression":
                tnode = node.child_by_field_name("type")
                inner = node.child_by_field_name("value")
            else:
                fn = node.child_by_field_name("function")
                if fn is None or fn.type != "template_function" or call_name(ctx, node) not in (
                        "reinterpret_cast", "static_cast", "const_cast"):
                    return None
                targs = fn.child_by_field_name("arguments")
                tnode = targs.named_children[0] if targs is not None and targs.named_children else None
                args = node.child_by_field_name("arguments")
                inner = args.named_children[0] if args is not None and len(args.named_children) == 1 else None
            if tnode is None or inner is None:
                return None
            ref = self.pointer(inner)
            ttext = ctx.text(tnode)
            if ref is None or "*" not in ttext:
                return None
            new_elem = self.elem_type(ttext.replace("*", " ").replace("__restrict__", " "))
            if new_elem == ref.elem:
                return ref
            if ref.offset.exact and ref.offset.tx.is_zero and ref.offset.ty.is_zero and ref.offset.rest.is_zero:
                return PtrRef(ref.param, Val(), new_elem, ref.via)
            return None
        if t == "pointer_expression":
            amp = node.child_by_field_name("operator")
            arg = node.child_by_field_name("argument")
            if amp is not None and ctx.text(amp) == "&" and arg is not None and arg.type == "subscript_expression":
                elem_ref = self.pointer(arg.child_by_field_name("argument"))
                idx = subscript_index(arg)
                if elem_ref is not None and idx is not None:
                    return PtrRef(elem_ref.param, elem_ref.offset + self.value(idx), elem_ref.elem, elem_ref.via)
            return None
        return None

    def _local_pointer(self, name: str) -> PtrRef | None:
        if name in self._ptr_cache:
            return self._ptr_cache[name]
        if name in self._busy_ptr or len(self._busy_ptr) > _MAX_DEPTH:
            return None
        self._busy_ptr.add(name)
        try:
            ref = self._local_pointer_uncached(name)
        finally:
            self._busy_ptr.discard(name)
        self._ptr_cache[name] = ref
        return ref

    def _local_pointer_uncached(self, name: str) -> PtrRef | None:
        loc = self.locals[name]
        refs: list[PtrRef] = []
        steps: list[Def] = []
        for d in loc.defs:
            if d.op in ("init", "=") and d.value is not None and not self.mentions(d.value, name):
                r = self.pointer(d.value)
                if r is None:
                    return None
                refs.append(r)
            elif d.op == "param":
                p = self.params[name]
                refs.append(PtrRef(name, Val(), self.elem_type(p.type)))
            else:
                steps.append(d)
        if not refs:
            return None
        first = refs[0]
        own = self.elem_type(loc.type) if loc.type else first.elem
        if any(r.param != first.param or r.elem != first.elem or not r.offset.exact or r.offset.tx != first.offset.tx
               or r.offset.ty != first.offset.ty for r in refs):
            return None
        if own != first.elem:
            if not (first.offset.exact and first.offset.tx.is_zero and first.offset.ty.is_zero
                    and first.offset.rest.is_zero and len(refs) == 1 and not steps):
                return None
            return PtrRef(first.param, Val(), own, name)
        if len(refs) == 1 and not steps:
            return PtrRef(first.param, first.offset, first.elem, name)
        for d in steps:
            inc = self._increment(d, name)
            if inc is None or not inc.uniform:
                return None
        return PtrRef(first.param, Val(first.offset.tx, first.offset.ty, Poly.atom("$" + name)), first.elem, name)

    # ---------------------------------------------------------------------------------------- accesses
    def global_accesses(self) -> list[Access]:
        """Every element access through a pointer parameter (or a local pointer derived from one)."""
        if self._accesses is not None:
            return self._accesses
        out: list[Access] = []
        self._accesses = out
        for n in self.nodes("subscript_expression", "pointer_expression"):
            if n.type == "subscript_expression":
                base = n.child_by_field_name("argument")
                idx = subscript_index(n)
                if base is None or idx is None or base.type == "subscript_expression":
                    continue
                ref = self.pointer(base)
                if ref is None:
                    continue
                index = ref.offset + self.value(idx)
            elif n.type == "pointer_expression":
                op = n.child_by_field_name("operator")
                if op is None or op.type != "*":
                    continue
                ref = self.pointer(n.child_by_field_name("argument"))
                if ref is None:
                    continue
                index = ref.offset
            else:
                continue
            load, store = element_use(n)
            if not (load or store):
                continue
            out.append(Access(n, ref.param, index, ref.elem, type_bytes(ref.elem), load, store, ref.via))
        return out

    def shared_arrays(self) -> dict[str, SharedArray]:
        out: dict[str, SharedArray] = {}
        ctx = self.ctx
        # file-scope __shared__ arrays the kernel uses
        for d in ctx.model.declarations:
            if d.space != "__shared__" or not set(d.names) & ctx.kernel.uses:
                continue
            chunk = ctx.src.data[d.span.start : d.span.end]
            tree = parse_tree(chunk)
            for name, elem, dims_text in _shared_decls(tree.root_node, partial(node_text, data=chunk)):
                if name in self.locals:
                    continue
                dims = tuple(_try_int(x, self.numbers) if x else None for x in dims_text)
                out[name] = SharedArray(name, elem, self.elem_bytes(elem), dims, ctx.src.line_of(d.span.start) + 1,
                                        dims_text)
        for name, loc in self.locals.items():
            if not loc.shared or not loc.array_dims or loc.decl is None:
                continue
            dims_l: list[int | None] = []
            texts: list[str] = []
            for dn in loc.array_dims:
                if dn is None:
                    dims_l.append(None)
                    texts.append("")
                    continue
                v = self.value(dn)
                dims_l.append(self.number(v.rest) if v.uniform else None)
                texts.append(text_of(ctx, dn))
            out[name] = SharedArray(name, self.elem_type(loc.type), self.elem_bytes(loc.type), tuple(dims_l),
                                    ctx.node_line(loc.decl), tuple(texts))
        return out

    def shared_accesses(self) -> list[SharedAccess]:
        """Full-rank element accesses to ``__shared__`` arrays, with their linear element index."""
        if self._shared is not None:
            return self._shared
        arrays = self.shared_arrays()
        out: list[SharedAccess] = []
        self._shared = out
        if not arrays:
            return out
        for n in self.nodes("subscript_expression"):
            parent = n.parent
            if parent is not None and parent.type == "subscript_expression" and parent.child_by_field_name(
                    "argument") == n:
                continue  # not the outermost subscript
            idxs: list[Node] = []
            cur: Node | None = n
            while cur is not None and cur.type == "subscript_expression":
                i = subscript_index(cur)
                if i is None:
                    break
                idxs.insert(0, i)
                cur = cur.child_by_field_name("argument")
            if cur is None or cur.type != "identifier":
                continue
            arr = arrays.get(self.ctx.text(cur))
            if arr is None or len(idxs) != len(arr.dims):
                continue
            lin = Val()
            for k, i in enumerate(idxs):
                stride = 1
                for dsz in arr.dims[k + 1 :]:
                    if dsz is None:
                        stride = -1
                        break
                    stride *= dsz
                if stride < 0:
                    lin = INEXACT
                    break
                lin = lin + self.value(i).scale(Poly.const(stride))
            if lin.exact:
                out.append(SharedAccess(n, arr, lin))
        return out

    # ---------------------------------------------------------------------------------------- loops
    def loop(self, node: Node) -> Loop | None:
        """A ``for (v = init; v < bound; v += step)`` loop (``<=``, ``>``-reversed and ``++`` forms too)."""
        if node.type != "for_statement":
            return None
        if node.id not in self._loop_memo:
            self._loop_memo[node.id] = self._loop(node)
        return self._loop_memo[node.id]

    def _loop(self, node: Node) -> Loop | None:
        ctx = self.ctx
        init = node.child_by_field_name("initializer")
        var = ""
        init_val: Val | None = None
        if init is not None and init.type == "declaration":
            for d in init.children_by_field_name("declarator"):
                if d.type == "init_declarator":
                    nm = d.child_by_field_name("declarator")
                    if nm is not None and nm.type == "identifier":
                        var = ctx.text(nm)
                        init_val = self.value(d.child_by_field_name("value"))
                    break
        elif init is not None and init.type == "assignment_expression":
            left = init.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                var = ctx.text(left)
                init_val = self.value(init.child_by_field_name("right"))
        if not var or init_val is None:
            return None
        cond = node.child_by_field_name("condition")
        bound: Node | None = None
        inclusive = False
        if cond is not None and cond.type == "binary_expression":
            op_node = cond.child_by_field_name("operator")
            op = op_node.type if op_node is not None else ""
            left = cond.child_by_field_name("left")
            right = cond.child_by_field_name("right")
            if left is not None and right is not None:
                if op in ("<", "<=") and left.type == "identifier" and ctx.text(left) == var:
                    bound, inclusive = right, op == "<="
                elif op in (">", ">=") and right.type == "identifier" and ctx.text(right) == var:
                    bound, inclusive = left, op == ">="
        step: Val | None = None
        upd = node.child_by_field_name("update")
        if upd is not None:
            if upd.type == "update_expression":
                arg = upd.child_by_field_name("argument")
                opn = upd.child_by_field_name("operator")
                if arg is not None and ctx.text(arg) == var and opn is not None:
                    step = const_val(1 if opn.type == "++" else -1)
            elif upd.type == "assignment_expression":
                left = upd.child_by_field_name("left")
                opn = upd.child_by_field_name("operator")
                if left is not None and ctx.text(left) == var and opn is not None:
                    step = self._increment(Def(opn.type, upd.child_by_field_name("right"), upd), var)
        bound_val = self.value(bound) if bound is not None else None
        return Loop(node, var, init_val, bound, bound_val, inclusive, step)

    def loops(self) -> Iterator[Loop]:
        for n in self.nodes("for_statement"):
            lp = self.loop(n)
            if lp is not None:
                yield lp


def threads(ctx: KernelContext) -> Threads:
    """The kernel's ``Threads`` model, built once per context and shared by the analyzers."""
    return ctx.shared(Threads)


# --------------------------------------------------------------------------------------------- helpers
def _try_int(text: str, env: dict[str, int]) -> int | None:
    try:
        v = parse_expr(text).evaluate(dict(env))
    except (ExprError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    if isinstance(v, bool):
        return int(v)
    return v if isinstance(v, int) else None  # a float (an `eps`, `0.5f`) is never an index


def _lvalue_root(node: Node) -> Node | None:
    """The variable an lvalue names or indexes: ``x``, ``a[i]`` → ``a``, ``a[i][j]`` → ``a``; not ``*p``."""
    cur: Node | None = node
    while cur is not None:
        if cur.type == "identifier":
            return cur
        if cur.type == "subscript_expression":
            cur = cur.child_by_field_name("argument")
        elif cur.type == "parenthesized_expression":
            cur = cur.named_children[0] if cur.named_children else None
        elif cur.type == "field_expression":
            op = cur.child_by_field_name("operator")
            if op is not None and op.type == "->":
                return None
            cur = cur.child_by_field_name("argument")
        else:
            return None
    return None


def _shared_decls(root: Node, text: Callable[[Node], str]) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """``(name, element type, dims)`` of the ``__shared__`` arrays declared in a (file-scope) tree."""
    def shared(n: Node) -> bool:
        return n.type == "declaration" and any(c.type == "type_qualifier" and text(c) == "__shared__"
                                               for c in n.children)

    for n in walk(root, cut=shared):
        if shared(n):
            tnode = n.child_by_field_name("type")
            elem = text(tnode) if tnode is not None else ""
            for d in n.children_by_field_name("declarator"):
                dims: list[str] = []
                cur: Node | None = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                while cur is not None and cur.type == "array_declarator":
                    size = cur.child_by_field_name("size")
                    dims.insert(0, text(size) if size is not None else "")
                    cur = cur.child_by_field_name("declarator")
                if cur is not None and cur.type == "identifier" and dims:
                    yield text(cur), elem, tuple(dims)


def enclosing(node: Node, types: tuple[str, ...], stop: Node | None = None) -> Iterator[Node]:
    """Ancestors of ``node`` of the given types, innermost first, up to ``stop``."""
    cur = node.parent
    while cur is not None and cur != stop:
        if cur.type in types:
            yield cur
        cur = cur.parent


def inside(node: Node, container: Node) -> bool:
    return container.start_byte <= node.start_byte and node.end_byte <= container.end_byte


def lane_addresses(coef_x: int, coef_y: int, block_x: int | None, lanes: int = 32) -> list[int]:
    """Element offsets of the lanes of one warp: lane ``l`` has ``threadIdx = (l % bx, l / bx)``.

    With a block at least 32 wide (or unknown, assumed so) a warp is 32 consecutive ``threadIdx.x``.
    """
    bx = block_x if block_x is not None and block_x > 0 else 32
    return [(lane % bx) * coef_x + (lane // bx) * coef_y for lane in range(lanes)]


def sectors(addresses_bytes: list[int], width: int, sector: int = 32) -> tuple[int, int]:
    """(sectors touched, sectors an ideal contiguous access of the same distinct bytes would touch)."""
    touched: set[int] = set()
    used: set[int] = set()
    for a in addresses_bytes:
        for b in range(a, a + width):
            used.add(b)
        touched.update(range(a // sector, (a + width - 1) // sector + 1))
    ideal = max(1, -(-len(used) // sector))
    return len(touched), ideal


def row_walk(th: Threads, acc: Access) -> Loop | None:
    """The enclosing loop along which each thread walks its own row, when ``acc`` is such a walk.

    That is ``x[r * S + j]`` (``r`` advancing by one per lane, so ``threadIdx.x`` has coefficient ``S``)
    inside ``for (j = j0; j < S; j++)`` with ``j0`` and ``S`` the same for every thread of the block: each
    thread reads its row element by element while its neighbours read theirs ``S`` elements away.
    """
    for node in enclosing(acc.node, ("for_statement",), th.ctx.body):
        lp = th.loop(node)
        if lp is None or lp.bound_val is None or lp.step is None:
            continue
        if not (lp.init.thread_free and lp.bound_val.thread_free and lp.step.uniform
                and th.number(lp.step.rest) == 1):
            continue
        if acc.index.rest.coef(("$" + lp.var,)) != 1:
            continue
        bound = lp.bound_val.rest + (ONE if lp.inclusive else ZERO)
        if bound == acc.index.tx:
            return lp
        b, s = th.number(bound), th.number(acc.index.tx)
        if b is not None and s is not None and b == s:
            return lp
    return None


def block_x(ctx: KernelContext) -> int | None:
    r = ctx.resolved
    return r.block[0] if r is not None else None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
