"""The IR summary of a lowered kernel: its parallel index space, serial loops, memory accesses,
accumulators and element types.

Why: this is the one place that answers "which thread touches which element, in which iteration" for a
kernel, in a form a transformation can check its legality against (a remap is legal when the accesses
it reorders are independent) and a person can read ("why did no rewrite apply?"). It is computed from the
lowered text, so every spelling the passes fold (macros, helpers, typedefs, bumped indices, ``while``
loops) reads the same here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.tree import element_use, unparen, walk, written_names
from .affine import COORDS, NonAffine, Scope, affine, poly
from .pass_memory import _sum_terms  # the view pass's reading of `P + a + b`, shared
from .passes import Kernel, declared_names, statements

#: element type -> (bytes per element, lanes): what vector width and shuffle a type allows
ELEMENT_TYPES: dict[str, tuple[int, int]] = {
    "float": (4, 1), "float2": (8, 2), "float4": (16, 4), "double": (8, 1), "double2": (16, 2),
    "__half": (2, 1), "half": (2, 1), "__half2": (4, 2), "half2": (4, 2),
    "__nv_bfloat16": (2, 1), "nv_bfloat16": (2, 1), "__nv_bfloat162": (4, 2), "nv_bfloat162": (4, 2),
    "int": (4, 1), "unsigned": (4, 1), "unsigned int": (4, 1), "int32_t": (4, 1), "uint32_t": (4, 1),
    "int2": (8, 2), "int4": (16, 4), "uint2": (8, 2), "uint4": (16, 4),
    "long": (8, 1), "long long": (8, 1), "unsigned long long": (8, 1), "int64_t": (8, 1), "uint64_t": (8, 1),
    "size_t": (8, 1), "short": (2, 1), "unsigned short": (2, 1), "int16_t": (2, 1), "uint16_t": (2, 1),
    "char": (1, 1), "signed char": (1, 1), "unsigned char": (1, 1), "int8_t": (1, 1), "uint8_t": (1, 1),
    "bool": (1, 1), "char4": (4, 4), "uchar4": (4, 4),
}

_INT_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "size_t",
                        "unsigned long long", "int32_t", "uint32_t", "int64_t", "uint64_t", "short", "char",
                        "ptrdiff_t", "auto", "const int", "const unsigned", "const size_t"})


@dataclass(frozen=True)
class ElementType:
    param: str
    type: str
    #: bytes per element and lanes per element (a ``half2`` is 4 bytes, 2 lanes); 0 when unknown
    bytes: int
    lanes: int
    written: bool


@dataclass(frozen=True)
class ParallelDim:
    """One dimension of the parallel index space: a thread-dependent index and how threads cover it."""

    var: str
    #: index atom -> coefficient (see ``affine``); empty with ``why`` when the index is not affine
    index: dict[str, str]
    #: "guard" (an `if` around the work), "exit" (an early return), "grid-stride" or "thread-stride"
    #: (a loop whose start depends on the thread and whose step is the grid's / block's thread count),
    #: "unguarded" (no bound found)
    form: str
    guard: str
    line: int
    why: str = ""


@dataclass(frozen=True)
class Loop:
    var: str
    start: str
    bound: str
    step: str
    line: int
    #: loop variables of the loops around it, outermost first
    outer: tuple[str, ...] = ()


@dataclass(frozen=True)
class Access:
    param: str
    kind: str  # "read" | "write" | "read-write"
    #: index atom -> coefficient; None when non-affine (``why`` says why)
    index: dict[str, str] | None
    why: str
    line: int
    loops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Accumulator:
    """A scalar carried across iterations of a serial loop (``acc += x``, ``m = fmaxf(m, x)``)."""

    name: str
    op: str
    type: str
    loop: str
    line: int


@dataclass(frozen=True)
class Summary:
    parallel: tuple[ParallelDim, ...]
    loops: tuple[Loop, ...]
    accesses: tuple[Access, ...]
    accumulators: tuple[Accumulator, ...]
    elements: tuple[ElementType, ...]
    #: facts that stop a whole-kernel analysis (shared memory, barriers, atomics): a remap must respect them
    notes: tuple[str, ...] = field(default=())


def params_of(k: Kernel) -> tuple[list[tuple[str, str, bool, bool]], set[str]]:
    """(name, base type, is_pointer, is_const) of each parameter, and the scalar (uniform) ones."""
    out: list[tuple[str, str, bool, bool]] = []
    decl = k.fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    for p in plist.named_children if plist is not None else []:
        t, d = p.child_by_field_name("type"), p.child_by_field_name("declarator")
        if t is None or d is None:
            continue
        ptr = False
        while d is not None and d.type in ("pointer_declarator", "reference_declarator", "array_declarator"):
            ptr = ptr or d.type != "reference_declarator"
            d = d.child_by_field_name("declarator") or (d.named_children[0] if d.named_children else None)
        if d is None or d.type != "identifier":
            continue
        const = any(c.type == "type_qualifier" and k.t(c) == "const" for c in p.children)
        out.append((k.t(d), " ".join(k.t(t).split()), ptr, const))
    return out, {n for n, _, ptr, _ in out if not ptr}


def scope_of(k: Kernel, uniform: set[str], template_values: set[str]) -> Scope:
    values: dict[str, Node] = {}
    counts: dict[str, int] = {}
    for d in walk(k.body, ("init_declarator",)):
        nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if nm is not None and v is not None and nm.type == "identifier":
            counts[k.t(nm)] = counts.get(k.t(nm), 0) + 1
            values[k.t(nm)] = v
    counters: set[str] = set()
    for f in walk(k.body, ("for_statement",)):
        init = f.child_by_field_name("initializer")
        if init is not None:
            counters |= declared_names(init, k.data)
    written = written_names(k.body, k.data)
    varying = {n for n in written if n not in counters} | {n for n, c in counts.items() if c > 1}
    return Scope({n: v for n, v in values.items() if n not in counters}, frozenset(counters),
                 frozenset(uniform | template_values), frozenset(varying - counters), k.data)


def _views(k: Kernel, pointers: set[str], scope: Scope) -> dict[str, tuple[str, list[Node]]]:
    """Local pointers declared once as a pointer parameter (or an earlier view) plus integer terms and never
    changed (``const float* a = A + (size_t)row * n``): view name -> (parameter, the offset's terms). An
    access ``a[j]`` is then ``A[(size_t)row * n + j]``, so the summary sees the parameter it touches."""
    out: dict[str, tuple[str, list[Node]]] = {}
    for d in walk(k.body, ("init_declarator",)):
        nm, v = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if nm is None or v is None or nm.type != "pointer_declarator":
            continue
        ident = nm.child_by_field_name("declarator")
        if ident is None or ident.type != "identifier":
            continue
        name = k.t(ident)
        if name in scope.varying or name in pointers or name in out:
            out.pop(name, None)
            continue
        terms = _sum_terms(v, k)
        bases = [t for t in terms if t.type == "identifier" and (k.t(t) in pointers or k.t(t) in out)]
        if len(bases) != 1:
            continue
        base = k.t(bases[0])
        param, offset = out.get(base, (base, []))
        out[name] = (param, offset + [t for t in terms if t is not bases[0]])
    return out


def _affine_sum(nodes: list[Node], scope: Scope) -> tuple[dict[str, str] | None, str]:
    """The affine index of a sum of terms (a view's offset and the subscript)."""
    if len(nodes) == 1:
        return _affine(nodes[0], scope)
    total: dict[tuple[str, ...], int] = {}
    try:
        for n in nodes:
            for m, c in poly(n, scope).items():
                total[m] = total.get(m, 0) + c
        return affine({m: c for m, c in total.items() if c}, scope), ""
    except NonAffine as e:
        return None, str(e)


def _affine(node: Node, scope: Scope) -> tuple[dict[str, str] | None, str]:
    try:
        return affine(poly(node, scope), scope), ""
    except NonAffine as e:
        return None, str(e)


def _enclosing_loops(n: Node, k: Kernel) -> tuple[str, ...]:
    out: list[str] = []
    cur = n.parent
    while cur is not None and cur is not k.body:
        if cur.type == "for_statement":
            init = cur.child_by_field_name("initializer")
            names = sorted(declared_names(init, k.data)) if init is not None else []
            if names:
                out.append(names[0])
        cur = cur.parent
    return tuple(reversed(out))


def summarize(k: Kernel, template_args: dict[str, str] | None = None) -> Summary:
    """The summary of the kernel ``k`` (already lowered)."""
    targs = template_args or {}
    params, uniform = params_of(k)
    scope = scope_of(k, uniform, {n for n, a in targs.items() if not a.replace("_", "").isalpha()})
    written_params: set[str] = set()
    accesses: list[Access] = []
    pointer_params = {n for n, _, ptr, _ in params if ptr}
    views = _views(k, pointer_params, scope)
    for sub in walk(k.body, ("subscript_expression",)):
        arg = sub.child_by_field_name("argument")
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        name = k.t(unparen(arg)) if arg is not None else ""
        if arg is None or idx is None or (name not in pointer_params and name not in views):
            continue
        param, offset = views.get(name, (name, []))
        inner = idx.named_children[0] if idx.type == "subscript_argument_list" and idx.named_children else idx
        loaded, stored = element_use(sub)
        if stored:
            written_params.add(param)
        kind = "read-write" if loaded and stored else "write" if stored else "read"
        index, why = _affine_sum([*offset, inner], scope)
        accesses.append(Access(param, kind, index, why, sub.start_point[0] + 1, _enclosing_loops(sub, k)))
    notes: list[str] = []
    if any(k.t(n) == "__shared__" for n in walk(k.body) if n.type in ("storage_class_specifier", "__shared__")
           ) or "__shared__" in k.text:
        notes.append("shared memory")
    for c in walk(k.body, ("call_expression",)):
        fn = c.child_by_field_name("function")
        name = k.t(fn) if fn is not None else ""
        if name.startswith(("__syncthreads", "__syncwarp")) and "barriers" not in notes:
            notes.append("barriers")
        if name.startswith("atomic") and "atomics" not in notes:
            notes.append("atomics")
        if name.startswith("__shfl") and "shuffles" not in notes:
            notes.append("shuffles")
    elements = tuple(ElementType(n, _resolve(t, targs), *ELEMENT_TYPES.get(_resolve(t, targs), (0, 0)),
                                 written=n in written_params) for n, t, ptr, _ in params if ptr)
    return Summary(tuple(_parallel(k, scope)), tuple(_loops(k, scope)), tuple(accesses),
                   tuple(_accumulators(k)), elements, tuple(notes))


def _resolve(t: str, targs: dict[str, str]) -> str:
    return targs.get(t, t)


def _thread_dependent(node: Node, k: Kernel, scope: Scope, seen: set[str] | None = None) -> bool:
    seen = seen if seen is not None else set()
    for n in walk(node, ("field_expression", "identifier")):
        if n.type == "field_expression":
            a = n.child_by_field_name("argument")
            if a is not None and k.t(a) in COORDS:
                return True
        elif (name := k.t(n)) in scope.values and name not in seen:
            seen.add(name)
            if _thread_dependent(scope.values[name], k, scope, seen):
                return True
    return False


def _loops(k: Kernel, scope: Scope) -> list[Loop]:
    out: list[Loop] = []
    for f in walk(k.body, ("for_statement",)):
        init, cond, upd = (f.child_by_field_name(x) for x in ("initializer", "condition", "update"))
        if init is None or cond is None or upd is None or _thread_dependent(init, k, scope):
            continue
        names = sorted(declared_names(init, k.data))
        if len(names) != 1:
            continue
        ds = init.children_by_field_name("declarator")
        v = ds[0].child_by_field_name("value") if ds and ds[0].type == "init_declarator" else None
        out.append(Loop(names[0], k.t(v) if v is not None else "?", _bound(cond, k), _step(upd, k),
                        f.start_point[0] + 1, _enclosing_loops(f, k)))
    return out


def _bound(cond: Node, k: Kernel) -> str:
    c = unparen(cond)
    right = c.child_by_field_name("right") if c.type == "binary_expression" else None
    op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
    if right is None or op is None:
        return k.t(cond)
    return f"{k.t(op)} {k.t(right)}"


def _step(upd: Node, k: Kernel) -> str:
    u = unparen(upd)
    if u.type == "update_expression":
        return "-1" if "--" in k.t(u) else "1"
    if u.type == "assignment_expression":
        op, right = u.child_by_field_name("operator"), u.child_by_field_name("right")
        if op is not None and right is not None:
            return {"+=": "", "-=": "-"}.get(k.t(op), f"{k.t(op)} ") + k.t(right)
    return k.t(upd)


def _parallel(k: Kernel, scope: Scope) -> list[ParallelDim]:
    """Thread-dependent indices: locals built from coordinates, and loops that start at one."""
    out: list[ParallelDim] = []
    sts = statements(k.body)
    seen: list[dict[str, str]] = []
    ints = _integer_locals(k)
    for name, value in scope.values.items():
        if name not in ints or not _thread_dependent(value, k, scope):
            continue
        index, why = _affine(value, scope)
        form, guard, line = _guard_of(name, sts, k)
        if index is not None and (index in seen or (form == "unguarded" and len(
                [v for v in index if v.split(".")[0] in COORDS]) < 2)):
            continue  # a copy of an index seen already, or a plain coordinate (``tid``) reported in its users
        if index is not None:
            seen.append(index)
        out.append(ParallelDim(name, index or {}, form, guard, line or value.start_point[0] + 1, why))
    for f in walk(k.body, ("for_statement",)):
        init, upd, cond = (f.child_by_field_name(x) for x in ("initializer", "update", "condition"))
        if init is None or upd is None or not _thread_dependent(init, k, scope):
            continue
        names = sorted(declared_names(init, k.data))
        ds = init.children_by_field_name("declarator")
        v = ds[0].child_by_field_name("value") if ds and ds[0].type == "init_declarator" else None
        if len(names) != 1 or v is None:
            continue
        step = k.t(upd)
        form = "grid-stride" if "gridDim" in step else "thread-stride" if "blockDim" in step else "strided"
        index, why = _affine(v, scope)
        out.append(ParallelDim(names[0], index or {}, form, k.t(cond) if cond is not None else "",
                               f.start_point[0] + 1, why))
    return out


def _integer_locals(k: Kernel) -> set[str]:
    """Locals declared with an integer type (indices; a float computed from a thread's element is not one)."""
    out: set[str] = set()
    for d in walk(k.body, ("declaration",)):
        t = d.child_by_field_name("type")
        if t is not None and " ".join(k.t(t).replace("const", "").split()) in _INT_TYPES | {"auto"}:
            out |= declared_names(d, k.data)
    return out


def _guard_of(name: str, sts: list[Node], k: Kernel) -> tuple[str, str, int]:
    for st in sts:
        if st.type != "if_statement":
            continue
        cond = st.child_by_field_name("condition")
        if cond is None or name not in {k.t(i) for i in walk(cond, ("identifier",))}:
            continue
        cons = st.child_by_field_name("consequence")
        inner = statements(cons) if cons is not None else []
        if len(inner) == 1 and inner[0].type == "return_statement":
            return "exit", k.t(cond), st.start_point[0] + 1
        return "guard", k.t(cond), st.start_point[0] + 1
    return "unguarded", "", 0


def _accumulators(k: Kernel) -> list[Accumulator]:
    out: list[Accumulator] = []
    seen: set[tuple[str, int]] = set()
    types: dict[str, str] = {}
    for d in walk(k.body, ("declaration",)):
        t = d.child_by_field_name("type")
        for name in declared_names(d, k.data):
            if t is not None:
                types[name] = k.t(t)
    for f in walk(k.body, ("for_statement", "while_statement", "do_statement")):
        body = f.child_by_field_name("body")
        if body is None:
            continue
        local = declared_names(f, k.data)
        for a in walk(body, ("assignment_expression",)):
            left, op, right = (a.child_by_field_name(x) for x in ("left", "operator", "right"))
            if left is None or op is None or right is None or unparen(left).type != "identifier":
                continue
            name = k.t(unparen(left))
            if name in local or name not in types:
                continue
            o = k.t(op)
            if o == "=":
                names = {k.t(i) for i in walk(right, ("identifier",))}
                if name not in names:
                    continue
                fn = unparen(right).child_by_field_name("function") if unparen(right).type == "call_expression" \
                    else None
                o = k.t(fn) if fn is not None else "="
            key = (name, f.start_byte)
            if key in seen:
                continue
            seen.add(key)
            loop = _enclosing_loops(a, k)
            out.append(Accumulator(name, o, types[name], loop[-1] if loop else "while", a.start_point[0] + 1))
    return out


def index_text(index: dict[str, str]) -> str:
    """``{"threadIdx.x": "1", "blockIdx.x": "blockDim.x"}`` -> ``blockDim.x*blockIdx.x + threadIdx.x``."""
    parts = []
    for v, c in index.items():
        if v == "1":
            parts.append(c)
        elif c == "1":
            parts.append(v)
        else:
            parts.append(f"({c})*{v}" if " " in c else f"{c}*{v}")
    return " + ".join(parts) or "0"


def describe(s: Summary) -> str:
    """The summary as a few lines of text (CLI, logs, the wide yardstick's report)."""
    lines = []
    for p in s.parallel:
        idx = index_text(p.index) if p.index else f"non-affine ({p.why})"
        lines.append(f"parallel {p.var} = {idx} [{p.form}{': ' + p.guard if p.guard else ''}] line {p.line}")
    for lp in s.loops:
        lines.append(f"loop {lp.var} from {lp.start} {lp.bound} step {lp.step} line {lp.line}")
    for a in s.accesses:
        idx = index_text(a.index) if a.index is not None else f"non-affine: {a.why}"
        lines.append(f"{a.kind} {a.param}[{idx}] line {a.line}")
    for ac in s.accumulators:
        lines.append(f"accumulator {ac.name} ({ac.type}) {ac.op} over {ac.loop} line {ac.line}")
    for e in s.elements:
        lines.append(f"element {e.param}: {e.type} ({e.bytes} B, {e.lanes} lane(s)){' written' if e.written else ''}")
    if s.notes:
        lines.append("uses " + ", ".join(s.notes))
    return "\n".join(lines)
