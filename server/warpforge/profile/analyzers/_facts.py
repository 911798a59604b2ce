"""Facts about one kernel body shared by the index, access and precision analyzers (WF104, WF107-WF110).

Why a shared module: "is this index the global thread index?", "does this address vary across the threads
of a block?", "is this expression computed in 32 bits?" are asked by several analyzers, and each answer
must be the same everywhere or the hints contradict each other. The analysis is deliberately small and
conservative — a forward walk of the kernel's own tree, locals resolved through their definitions, no
alias analysis beyond ``T* p = param + offset`` — because an analyzer that cannot prove its premise must
stay silent (a false positive costs more than a missed hint).

The module name starts with ``_`` so the registry's auto-discovery does not import it as an analyzer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.model import DeclKind, Param
from ...cuda.poly import Poly, padd, pmul
from ...cuda.tree import element_use, node_text, split_init, subscript_index, walk
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from ..context import KernelContext

#: dependence flags: varies across the threads of a block / across blocks / across loop iterations /
#: comes from memory / could not be analyzed
TID, BID, LOOP, LOAD, UNKNOWN = "tid", "bid", "loop", "load", "unknown"

#: integer C types -> (bits, signed)
INT_TYPES: dict[str, tuple[int, bool]] = {
    "int": (32, True), "signed": (32, True), "signed int": (32, True), "int32_t": (32, True),
    "unsigned": (32, False), "unsigned int": (32, False), "uint32_t": (32, False), "uint": (32, False),
    "short": (16, True), "unsigned short": (16, False), "char": (8, True), "unsigned char": (8, False),
    "int16_t": (16, True), "uint16_t": (16, False), "int8_t": (8, True), "uint8_t": (8, False),
    "long": (64, True), "long int": (64, True), "long long": (64, True), "long long int": (64, True),
    "unsigned long": (64, False), "unsigned long long": (64, False), "unsigned long long int": (64, False),
    "size_t": (64, False), "ptrdiff_t": (64, True), "int64_t": (64, True), "uint64_t": (64, False),
    "ssize_t": (64, True), "intptr_t": (64, True), "uintptr_t": (64, False), "bool": (8, False),
}
FLOAT_TYPES = frozenset({"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16"})

#: the built-in index variables (all ``unsigned int`` components)
BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})

#: device functions whose result depends only on their arguments
PURE_FUNCTIONS = frozenset({
    "min", "max", "umin", "umax", "llmin", "llmax", "abs", "labs", "llabs", "__mul24", "__umul24", "__mulhi",
    "__umulhi", "__popc", "__clz", "__ffs", "__brev", "static_cast", "reinterpret_cast",
    "sqrtf", "expf", "logf", "fabsf", "fminf", "fmaxf", "rsqrtf", "__expf", "__logf", "tanhf", "powf",
    "sqrt", "exp", "log", "fabs", "fmin", "fmax", "rsqrt", "tanh", "pow", "floorf", "ceilf", "floor", "ceil",
})
#: intrinsics that exchange values between the threads of a warp
CROSS_THREAD = frozenset({
    "__shfl_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_xor_sync", "__shfl", "__shfl_down",
    "__shfl_up", "__shfl_xor", "__ballot_sync", "__any_sync", "__all_sync", "__activemask", "__match_any_sync",
    "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
})
ATOMICS = frozenset({
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc", "atomicDec", "atomicCAS",
    "atomicAnd", "atomicOr", "atomicXor", "atomicAdd_block", "atomicAdd_system", "atomicMin_block",
    "atomicMax_block", "atomicAnd_block", "atomicOr_block", "atomicExch_block",
})
LOOPS = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})

_MACRO = re.compile(r"#\s*define\s+([A-Za-z_]\w*)[ \t]+(.*?)\s*$", re.S)
_INT_LITERAL = re.compile(r"^(0[xX][0-9a-fA-F']+|0[bB][01']+|\d[\d']*)([uUlL]*)$")



def int_literal(text: str) -> tuple[int, int, bool] | None:
    """(value, bits, signed) of a C integer literal, or None if it is not one."""
    m = _INT_LITERAL.match(text.strip())
    if not m:
        return None
    digits, suffix = m.group(1).replace("'", ""), m.group(2).lower()
    try:
        value = int(digits, 0) if not (len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()) \
            else int(digits, 8)
    except ValueError:
        return None
    unsigned = "u" in suffix
    bits = 64 if "l" in suffix or value > 0xFFFFFFFF or (not unsigned and value > 0x7FFFFFFF) else 32
    return value, bits, not unsigned


def normalize_type(text: str) -> str:
    """``const unsigned  int`` -> ``unsigned int``; drops qualifiers and CUDA memory spaces."""
    words = [w for w in text.replace("*", " ").replace("&", " ").split()
             if w not in ("const", "volatile", "__restrict__", "static", "register", "__shared__", "__device__",
                          "__constant__", "extern", "constexpr", "std::", "struct")]
    return " ".join(words).replace("std::", "")


@dataclass
class Var:
    """A local variable of the kernel body (all declarations of one name merged)."""

    name: str
    type: str | None = None
    decls: list[Node] = field(default_factory=list)
    #: value expressions assigned with ``=`` (initializers included)
    defs: list[Node] = field(default_factory=list)
    #: ``+=``/``++``-style updates (the whole assignment/update node)
    updates: list[Node] = field(default_factory=list)
    #: the for-statement whose initializer declares it (a loop counter)
    loop: Node | None = None
    shared: bool = False
    array: bool = False
    pointer: bool = False
    const: bool = False


@dataclass(frozen=True)
class Access:
    """``buf[index]`` on a pointer parameter ``buf`` (directly, or via a local ``T* p = buf + off``)."""

    buffer: str
    node: Node
    index: Node | None
    load: bool
    store: bool
    #: the offset expression when accessed through a local pointer ``p = buffer + offset``
    alias_offset: Node | None = None
    alias: str | None = None


class KernelFacts:
    """Variables, loops, dependences and accesses of one kernel; built once per KernelContext."""

    def __init__(self, ctx: KernelContext) -> None:
        self.ctx = ctx
        self._data = ctx.src.data[ctx.kernel.span.start:ctx.kernel.span.end]
        self.params: dict[str, Param] = {p.name: p for p in ctx.kernel.params}
        self.template_values = {t.name for t in ctx.kernel.template_params if t.kind == "value"}
        self.vars: dict[str, Var] = {}
        #: parameters the body assigns to (pointer bumps, reused scalars): their values are not the spec's
        self.reassigned_params: set[str] = set()
        self.loops: list[Node] = []
        self.calls: list[Node] = []
        self.has_shared = False
        self.has_sync = False
        self.nodes: list[Node] = []
        body = ctx.body
        if body is not None:
            self._collect(body)
        self.macros = self._macros()
        self._macro_values: dict[str, int | None] = {}
        self._deps: dict[str, frozenset[str]] = {}
        self._solve_var_deps()
        self.accesses = self._accesses()

    # ----------------------------------------------------------------- collection
    def text(self, node: Node) -> str:
        return node_text(node, self._data)

    def _collect(self, body: Node) -> None:
        for n in walk(body):
            self.nodes.append(n)
            t = n.type
            if t in LOOPS:
                self.loops.append(n)
            elif t == "declaration":
                self._declaration(n)
            elif t == "assignment_expression":
                left = n.child_by_field_name("left")
                op = n.child_by_field_name("operator")
                right = n.child_by_field_name("right")
                name, whole = self._lvalue_name(left)
                if name is not None:
                    v = self.vars.setdefault(name, Var(name))
                    if whole and op is not None and self.text(op) == "=" and right is not None:
                        v.defs.append(right)
                    else:
                        v.updates.append(n)
            elif t == "update_expression":
                name, _ = self._lvalue_name(n.child_by_field_name("argument"))
                if name is not None:
                    self.vars.setdefault(name, Var(name)).updates.append(n)
            elif t == "call_expression":
                self.calls.append(n)
                fn = self.call_name(n)
                if fn in ("__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                          "__syncwarp") or fn.endswith((".sync", "::sync", "::sync_warp")):
                    self.has_sync = True

    def _lvalue_name(self, node: Node | None) -> tuple[str | None, bool]:
        """The local an assignment changes, and whether it replaces the whole variable.

        ``v = e`` defines ``v``; ``v.x = e`` and ``arr[k] = e`` (a local array) update it; a store through a
        pointer (``p[k] = e`` with ``p`` a pointer, ``*p = e``) writes memory, not the variable: (None, False).
        """
        whole = True
        while node is not None and node.type in ("field_expression", "subscript_expression",
                                                 "parenthesized_expression"):
            if node.type == "subscript_expression":
                base = node.child_by_field_name("argument")
                if base is not None and base.type == "identifier":
                    v = self.vars.get(self.text(base))
                    if v is None or v.pointer or not v.array:
                        return None, False
            if node.type != "parenthesized_expression":
                whole = False
            node = node.child_by_field_name("argument") if node.type != "parenthesized_expression" \
                else (node.named_children[0] if node.named_children else None)
        if node is None or node.type != "identifier":
            return None, False
        name = self.text(node)
        if name in self.params:
            self.reassigned_params.add(name)  # e.g. ``x += offset``: later ``x[i]`` is not the buffer's x[i]
            return None, False
        return name, whole

    def _declaration(self, n: Node) -> None:
        tnode = n.child_by_field_name("type")
        qualifiers = " ".join(self.text(c) for c in n.children if c.type in ("type_qualifier",
                                                                           "storage_class_specifier"))
        ttext = normalize_type(self.text(tnode)) if tnode is not None else None
        if ttext in ("auto",):
            ttext = None
        shared = "__shared__" in qualifiers
        self.has_shared |= shared
        in_for_init = n.parent is not None and n.parent.type == "for_statement" and \
            n.parent.child_by_field_name("initializer") == n
        for d in n.children_by_field_name("declarator"):
            decl, value = split_init(d)
            pointer = array = False
            ident: Node | None = decl
            while ident is not None and ident.type in ("pointer_declarator", "array_declarator",
                                                       "reference_declarator"):
                pointer |= ident.type == "pointer_declarator"
                array |= ident.type == "array_declarator"
                ident = ident.child_by_field_name("declarator") or (
                    ident.named_children[-1] if ident.named_children else None)
            if ident is None or ident.type != "identifier":
                continue
            name = self.text(ident)
            v = self.vars.setdefault(name, Var(name))
            if v.type is None:
                v.type = ttext
            elif v.type != ttext:
                v.type = None  # two declarations with different types: unknown
            v.decls.append(n)
            v.shared |= shared
            v.array |= array
            v.pointer |= pointer
            v.const = "const" in qualifiers or "constexpr" in qualifiers
            if value is not None and value.type != "initializer_list":
                v.defs.append(value)
            elif value is not None:
                v.updates.append(value)
            if in_for_init:
                v.loop = n.parent

    def _macros(self) -> dict[str, str]:
        """Object-like macros of the file (``#define NAME body``), with the spec's -D values on top."""
        out: dict[str, str] = {}
        for d in self.ctx.model.declarations:
            if d.kind is DeclKind.MACRO:
                m = _MACRO.match(self.ctx.src.slice(d.span).rstrip())
                if m:
                    out.setdefault(m.group(1), m.group(2).split("//")[0].strip())
        r = self.ctx.resolved
        if r is not None:
            out.update(r.defines)
        return out

    def macro_value(self, name: str, _seen: tuple[str, ...] = ()) -> int | None:
        """The integer a macro expands to, when it is a constant expression of numbers and other macros."""
        if name in self._macro_values:
            return self._macro_values[name]
        body = self.macros.get(name)
        if body is None or name in _seen:
            return None
        value: int | None = None
        try:
            expr = parse_expr(body)
            env: dict[str, int | float] = {}
            for n in expr.names():
                inner = self.macro_value(n, (*_seen, name))
                if inner is None:
                    raise ExprError(f"`{n}` is not a constant", 0, body)
                env[n] = inner
            v = expr.evaluate(env)
            if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
                value = int(v)
        except ExprError:
            value = None
        self._macro_values[name] = value
        return value

    # ----------------------------------------------------------------- calls and structure
    def call_name(self, call: Node) -> str:
        fn = call.child_by_field_name("function")
        if fn is None:
            return ""
        if fn.type == "template_function":
            nm = fn.child_by_field_name("name")
            return self.text(nm) if nm is not None else ""
        return self.text(fn)

    def call_args(self, call: Node) -> list[Node]:
        args = call.child_by_field_name("arguments")
        return list(args.named_children) if args is not None else []

    def ancestors(self, node: Node) -> Iterator[Node]:
        p = node.parent
        while p is not None:
            yield p
            p = p.parent

    def loops_around(self, node: Node) -> list[Node]:
        """Enclosing loops, innermost first (only those whose body, not header, holds ``node``)."""
        out: list[Node] = []
        child = node
        for a in self.ancestors(node):
            if a.type in LOOPS:
                body = a.child_by_field_name("body")
                if body is not None and body.start_byte <= child.start_byte and child.end_byte <= body.end_byte:
                    out.append(a)
            child = a
        return out

    def loop_vars(self, loop: Node) -> set[str]:
        """Variables a loop changes on each iteration (its counter and anything updated in its body)."""
        out = {name for name, v in self.vars.items() if v.loop is loop}
        for name, v in self.vars.items():
            for u in (*v.updates, *v.defs):
                if loop.start_byte <= u.start_byte and u.end_byte <= loop.end_byte:
                    declared_inside = any(loop.start_byte <= d.start_byte < loop.end_byte for d in v.decls)
                    if not declared_inside or v.loop is loop:
                        out.add(name)
        return out

    # ----------------------------------------------------------------- dependence
    def _solve_var_deps(self) -> None:
        """Each local's dependence flags: its definitions' own flags, closed over the locals they use."""
        direct: dict[str, set[str]] = {}
        uses: dict[str, set[str]] = {}
        for name, v in self.vars.items():
            d: set[str] = set()
            names: set[str] = set()
            for e in (*v.defs, *v.updates):
                d |= self._expr_deps(e, names)
            if v.loop is not None or self._changes_in_loop(v):
                d.add(LOOP)
            if v.shared:
                d |= {TID, LOAD}  # other threads write it
            if not v.decls:
                d.add(UNKNOWN)  # assigned but never declared here: a global or a macro-defined name
            direct[name] = d
            uses[name] = names - {name}
        deps = {name: set(d) for name, d in direct.items()}
        changed = True
        while changed:
            changed = False
            for name, names in uses.items():
                before = len(deps[name])
                for other in names:
                    deps[name] |= deps.get(other, set())
                changed |= len(deps[name]) != before
        self._deps = {name: frozenset(d) for name, d in deps.items()}

    def _changes_in_loop(self, v: Var) -> bool:
        """Assigned inside a loop that does not also contain its declaration (a loop-carried value)."""
        for u in (*v.updates, *v.defs):
            for loop in self.loops_around(u):
                if not any(loop.start_byte <= d.start_byte < loop.end_byte for d in v.decls):
                    return True
        return False

    def deps(self, node: Node | None) -> frozenset[str]:
        """What the value of ``node`` depends on (TID, BID, LOOP, LOAD, UNKNOWN); empty = uniform constant."""
        return frozenset(self._expr_deps(node)) if node is not None else frozenset()

    def _expr_deps(self, node: Node | None, names: set[str] | None = None) -> set[str]:
        """Flags of ``node``; locals resolve through their solved flags, or are collected into ``names``."""
        if node is None:
            return set()
        t = node.type
        if t in ("number_literal", "string_literal", "char_literal", "true", "false", "null", "nullptr",
                 "sizeof_expression", "type_descriptor", "primitive_type", "comment"):
            return set()
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                builtin = self.text(arg)
                if builtin == "threadIdx":
                    return {TID}
                if builtin == "blockIdx":
                    return {BID}
                if builtin in ("blockDim", "gridDim"):
                    return set()
            return self._expr_deps(arg, names)
        if t == "identifier":
            name = self.text(node)
            if name in self.vars:
                if names is not None:
                    names.add(name)
                    return set()
                return set(self._deps.get(name, frozenset()))
            return set()  # a parameter, a macro, a constant, a global
        if t == "subscript_expression":
            d = self._expr_deps(node.child_by_field_name("indices"), names)
            base = node.child_by_field_name("argument")
            return d | self._expr_deps(base, names) | {LOAD}
        if t == "pointer_expression":
            op = node.child_by_field_name("operator")
            d = self._expr_deps(node.child_by_field_name("argument"), names)
            return d | ({LOAD} if op is not None and self.text(op) == "*" else set())
        if t == "call_expression":
            fname = self.call_name(node)
            d = set()
            for a in self.call_args(node):
                d |= self._expr_deps(a, names)
            if fname.split("::")[-1] in PURE_FUNCTIONS:
                return d
            if fname in CROSS_THREAD:
                return d | {TID}
            if fname in ("__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"):
                return d | {LOAD}
            return d | {UNKNOWN}
        if t in ("assignment_expression",):
            return self._expr_deps(node.child_by_field_name("right"), names) | self._expr_deps(
                node.child_by_field_name("left"), names)
        d = set()
        for c in node.named_children:
            if c.type in ("type_descriptor", "template_argument_list"):
                continue
            d |= self._expr_deps(c, names)
        return d

    def thread_varying(self, node: Node | None) -> bool:
        return bool(self.deps(node) & {TID, UNKNOWN})

    # ----------------------------------------------------------------- polynomial index forms
    def poly(self, node: Node | None, _depth: int = 0) -> Poly | None:
        """The expression as a polynomial over atoms (``threadIdx.x``, parameters, ``loop:j``), or None.

        Locals with exactly one definition and no updates are substituted; loop counters become atoms.
        """
        if node is None or _depth > 30:
            return None
        t = node.type
        if t == "number_literal":
            lit = int_literal(self.text(node))
            return {(): lit[0]} if lit is not None else None
        if t == "parenthesized_expression":
            return self.poly(node.named_children[0], _depth + 1) if node.named_children else None
        if t == "cast_expression":
            ty = node.child_by_field_name("type")
            if ty is not None and normalize_type(self.text(ty)) in INT_TYPES:
                return self.poly(node.child_by_field_name("value"), _depth + 1)
            return None
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            fld = node.child_by_field_name("field")
            if arg is not None and fld is not None and self.text(arg) in BUILTINS:
                return {(f"{self.text(arg)}.{self.text(fld)}",): 1}
            return None
        if t == "identifier":
            name = self.text(node)
            if name in self.vars:
                v = self.vars[name]
                if v.loop is not None:
                    return {(f"loop:{name}",): 1}
                if len(v.defs) == 1 and not v.updates and not v.array and not v.shared:
                    return self.poly(v.defs[0], _depth + 1)
                return None
            if name in self.params or name in self.template_values:
                return {(name,): 1}
            mv = self.macro_value(name)
            if mv is not None:
                return {(): mv}
            return {(name,): 1}  # a constant we cannot evaluate: an opaque uniform atom
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            a = self.poly(node.child_by_field_name("left"), _depth + 1)
            b = self.poly(node.child_by_field_name("right"), _depth + 1)
            if a is None or b is None or op is None:
                return None
            o = self.text(op)
            if o == "+":
                return padd(a, b, 1)
            if o == "-":
                return padd(a, b, -1)
            if o == "*":
                return pmul(a, b)
            if o == "<<" and set(b) <= {()}:
                return pmul(a, {(): 1 << b.get((), 0)}) if 0 <= b.get((), 0) < 63 else None
            return None
        return None

    def is_global_index(self, p: Poly | None) -> bool:
        """``blockIdx.x * S + threadIdx.x`` with S uniform (``blockDim.x``, a constant): one element per thread."""
        if p is None or p.get(("threadIdx.x",)) != 1 or len(p) != 2:
            return False
        (other, coef), = ((m, c) for m, c in p.items() if m != ("threadIdx.x",))
        return coef > 0 and "blockIdx.x" in other and not any(
            a.startswith(("threadIdx", "loop:")) for a in other)

    def is_grid_stride_counter(self, name: str) -> bool:
        """``for (int i = <global index>; ...; i += <uniform>)``: a grid-stride loop's counter."""
        v = self.vars.get(name)
        if v is None or v.loop is None or len(v.defs) != 1 or len(v.updates) != 1:
            return False
        upd = v.updates[0]
        if upd.type != "assignment_expression":
            return False
        op = upd.child_by_field_name("operator")
        right = upd.child_by_field_name("right")
        return op is not None and self.text(op) == "+=" and not self.deps(right) & {TID, LOOP, UNKNOWN, LOAD} \
            and self.is_global_index(self.poly(v.defs[0]))

    def is_element_index(self, node: Node | None) -> bool:
        """The index of a one-element-per-thread access: the global thread index or a grid-stride counter."""
        if node is None:
            return False
        if node.type == "identifier" and self.is_grid_stride_counter(self.text(node)):
            return True
        return self.is_global_index(self.poly(node))

    # ----------------------------------------------------------------- types and constants
    def int_type(self, node: Node | None, _depth: int = 0) -> tuple[int, bool] | None:
        """(bits, signed) of an integer expression by C's usual arithmetic conversions; None if not known
        to be an integer (floats, templates, macros that are not integer constants, unknown calls)."""
        if node is None or _depth > 40:
            return None
        t = node.type
        if t == "number_literal":
            lit = int_literal(self.text(node))
            return (lit[1], lit[2]) if lit is not None else None
        if t == "parenthesized_expression":
            return self.int_type(node.named_children[0], _depth + 1) if node.named_children else None
        if t == "identifier":
            name = self.text(node)
            if name in self.vars:
                v = self.vars[name]
                return None if v.pointer or v.type is None else INT_TYPES.get(v.type)
            if name in self.params:
                p = self.params[name]
                return None if p.is_pointer else INT_TYPES.get(normalize_type(p.type))
            if name in self.template_values:
                return 32, True
            mv = self.macro_value(name)
            if mv is not None:
                return (32, True) if -(2**31) <= mv < 2**31 else (64, True)
            return None
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            return (32, False) if arg is not None and self.text(arg) in BUILTINS else None
        if t == "cast_expression":
            ty = node.child_by_field_name("type")
            return INT_TYPES.get(normalize_type(self.text(ty))) if ty is not None else None
        if t == "call_expression":
            fn = node.child_by_field_name("function")
            if fn is not None and fn.type == "template_function" and self.call_name(node) == "static_cast":
                targs = fn.child_by_field_name("arguments")
                return INT_TYPES.get(normalize_type(self.text(targs).strip("<>"))) if targs is not None else None
            if self.call_name(node) in ("min", "max", "umin", "umax"):
                types = [self.int_type(a, _depth + 1) for a in self.call_args(node)]
                return _convert(types) if types and all(x is not None for x in types) else None
            return None
        if t == "subscript_expression":
            base = node.child_by_field_name("argument")
            if base is not None and base.type == "identifier":
                name = self.text(base)
                if name in self.params and self.params[name].pointer_depth == 1:
                    return INT_TYPES.get(normalize_type(self.params[name].type))
                lv = self.vars.get(name)
                if lv is not None and lv.type is not None:
                    al = self.pointer_alias(name)
                    if al is not None:
                        return INT_TYPES.get(normalize_type(self.params[al[0]].type))
                    return INT_TYPES.get(lv.type)
            return None
        if t == "unary_expression":
            op = node.child_by_field_name("operator")
            if op is not None and self.text(op) == "!":
                return 32, True
            inner = self.int_type(node.child_by_field_name("argument"), _depth + 1)
            return _promote(inner) if inner is not None else None
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            o = self.text(op) if op is not None else ""
            if o in ("<", ">", "<=", ">=", "==", "!=", "&&", "||"):
                return 32, True
            a = self.int_type(node.child_by_field_name("left"), _depth + 1)
            if o in ("<<", ">>"):
                return _promote(a) if a is not None else None
            b = self.int_type(node.child_by_field_name("right"), _depth + 1)
            return _convert([a, b]) if a is not None and b is not None else None
        if t == "conditional_expression":
            a = self.int_type(node.child_by_field_name("consequence"), _depth + 1)
            b = self.int_type(node.child_by_field_name("alternative"), _depth + 1)
            return _convert([a, b]) if a is not None and b is not None else None
        return None

    def compile_time(self, node: Node | None, _depth: int = 0) -> bool:
        """A value the compiler knows: literals, macros, template values, ``const`` locals of constants."""
        if node is None or _depth > 30:
            return False
        t = node.type
        if t in ("number_literal", "sizeof_expression", "true", "false", "char_literal"):
            return True
        if t == "identifier":
            name = self.text(node)
            if name in self.vars:
                v = self.vars[name]
                return v.const and len(v.defs) == 1 and not v.updates and self.compile_time(v.defs[0], _depth + 1)
            return name in self.template_values or (name in self.macros and name not in self.params)
        if t in ("parenthesized_expression", "binary_expression", "unary_expression", "cast_expression",
                 "conditional_expression"):
            kids = [c for c in node.named_children if c.type not in ("type_descriptor",)]
            return bool(kids) and all(self.compile_time(c, _depth + 1) for c in kids)
        return False

    # ----------------------------------------------------------------- accesses
    def pointer_alias(self, name: str) -> tuple[str, Node | None] | None:
        """For a local ``T* p = buf + off`` (or ``&buf[off]``, or ``= buf``): (buf, off)."""
        v = self.vars.get(name)
        if v is None or not v.pointer or len(v.defs) != 1 or v.updates:
            return None
        e = v.defs[0]
        while e.type in ("parenthesized_expression", "cast_expression"):
            nxt = (e.child_by_field_name("value") if e.type == "cast_expression" else
                   (e.named_children[0] if e.named_children else None))
            if nxt is None:
                break
            e = nxt
        if e.type == "identifier" and self.text(e) in self.params:
            return self.text(e), None
        if e.type == "binary_expression":
            op = e.child_by_field_name("operator")
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            if op is not None and self.text(op) == "+" and left is not None and right is not None:
                if left.type == "identifier" and self.text(left) in self.params:
                    return self.text(left), right
                if right.type == "identifier" and self.text(right) in self.params:
                    return self.text(right), left
        if e.type == "pointer_expression" and e.child_by_field_name("operator") is not None:
            arg = e.child_by_field_name("argument")
            if arg is not None and arg.type == "subscript_expression":
                base = arg.child_by_field_name("argument")
                if base is not None and base.type == "identifier" and self.text(base) in self.params:
                    return self.text(base), subscript_index(arg)
        return None

    def _accesses(self) -> list[Access]:
        out: list[Access] = []
        for n in self.nodes:
            if n.type != "subscript_expression":
                continue
            base = n.child_by_field_name("argument")
            if base is None or base.type != "identifier":
                continue
            name = self.text(base)
            alias: str | None = None
            offset: Node | None = None
            if name in self.params:
                if not self.params[name].is_pointer:
                    continue
                buf = name
            else:
                al = self.pointer_alias(name)
                if al is None:
                    continue
                buf, offset = al
                alias = name
            load, store = element_use(n)
            out.append(Access(buf, n, subscript_index(n), load, store, offset, alias))
        return out


def _promote(t: tuple[int, bool]) -> tuple[int, bool]:
    """Integer promotion: anything narrower than int becomes int."""
    return (32, True) if t[0] < 32 else t


def _convert(types: list[tuple[int, bool] | None]) -> tuple[int, bool] | None:
    """The usual arithmetic conversions over integer operand types (LP64: long is 64-bit)."""
    out: tuple[int, bool] | None = None
    for t in types:
        if t is None:
            return None
        t = _promote(t)
        if out is None:
            out = t
        elif t[0] != out[0]:
            out = max(out, t)
        else:
            out = (t[0], out[1] and t[1])
    return out


def facts(ctx: KernelContext) -> KernelFacts:
    """The kernel's facts, computed once per context (stored on the context; several analyzers share it)."""
    return ctx.shared(KernelFacts)


def line_opcodes(ctx: KernelContext, line: int) -> list[str]:
    """SASS opcodes charged to a 1-based line of the analyzed file (empty without SASS)."""
    if ctx.sass is None:
        return []
    name = ctx.file.replace("\\", "/").rsplit("/", 1)[-1]
    return [i.opcode for i in ctx.sass.instructions
            if i.line == line and (not i.file or i.file.replace("\\", "/").rsplit("/", 1)[-1] == name)]


def in_kernel(ctx: KernelContext, line: int) -> bool:
    return ctx.kernel.start_line + 1 <= line <= ctx.kernel.end_line + 1
