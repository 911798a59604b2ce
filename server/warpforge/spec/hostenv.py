"""What the host code says at a launch: constants, allocations, vector sizes, followed through callers.

Real programs rarely allocate and launch in one function: ``main`` allocates with ``cudaMalloc`` (or
``cudaMallocAsync``, ``cudaMallocManaged``), fills a struct (``cudaMalloc(&s.out, ...)`` in an ``init``) and
calls a launcher ``void launch_k(float* out, const float* in, int n)`` that holds the ``<<<>>>``. Reading
only the launching function gives "not allocated" for every buffer. So the environment of a launch is built
the way the program runs: file-scope macros and constants, then the callers of the launching function (one
or two levels: the first call of it in the file), binding its parameters to the caller's arguments, then
the launching function's own statements up to the launch. Struct fields are keyed by the field's name
(``s.out``, ``st->out`` and ``self.out`` all read ``.out``) and looked up in whichever host function
allocates or assigns them. ``std::vector``/``thrust::device_vector`` declared with a length give ``v.size()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial

from tree_sitter import Node

from ..cuda.model import Declaration, DeclKind, FileModel, LaunchSite
from ..cuda.parser import parse_tree
from ..cuda.text import SourceText
from ..cuda.tree import node_text, walk
from ..cuda.types import canonical_type, type_aliases
from ..cuda.types import clean as _clean_type
from .expr import ExprError, parse

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ALLOCATORS = ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocHost", "cudaHostAlloc",
              "cudaMallocFromPoolAsync")
_COMPOUND = frozenset({"+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="})
_CASTS = ("reinterpret_cast", "static_cast", "const_cast")
_SIZEOF = re.compile(r"\bsizeof\s*\(\s*([A-Za-z_][\w:\s]*?)\s*\)")
_XYZ = "xyz"
_DIM_FIELD = re.compile(r"\b([A-Za-z_]\w*)\s*\.\s*([xyz])\b")
#: ``obj.field``, ``obj->field``, ``a.b.field`` inside an expression (not a call: ``v.size()`` is not a field)
_FIELD_USE = re.compile(r"\b[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)+\b(?!\s*\()")
_SIZE_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*size\s*\(\s*\)")
#: integer spellings a host size variable has (``int n``, ``size_t bytes``, ``const long B``)
_INT_TYPE = re.compile(r"^(?:(?:const|constexpr|static|unsigned|signed)\s+)*(?:int|long|long long|short|size_t|"
                       r"(?:std::)?u?int(?:8|16|32|64)_t|ptrdiff_t|unsigned|index_t|auto)$")
_VECTOR = re.compile(r"\b(?:vector|device_vector|host_vector)\s*<")
MAX_CALLER_DEPTH = 2


def _wrap(text: str) -> str:
    """Parenthesize an inlined expression, unless it is a single name or number (``n2 = n`` -> ``n``)."""
    t = text.strip()
    return t if re.fullmatch(r"[\w.]+", t) else f"({t})"


def field_key(text: str) -> str | None:
    """``s.out``, ``st->cfg.out``, ``(*p).out`` -> ``.out``: a struct field is known by its name."""
    m = re.fullmatch(r"[\w\s().*\[\]>-]*?(?:\.|->)\s*([A-Za-z_]\w*)", text.strip())
    return f".{m.group(1)}" if m else None


@dataclass
class HostEnv:
    """Constant host definitions visible at a launch site."""

    defs: dict[str, str] = field(default_factory=dict)
    dims: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: buffer (a variable, or ``.field``) -> its allocation size in bytes, as written
    allocs: dict[str, str] = field(default_factory=dict)
    #: vector variable -> its length as written (``std::vector<float> h(n)``)
    vec_sizes: dict[str, str] = field(default_factory=dict)
    #: ``.field`` -> the value last assigned to it (``s.n = n``)
    fields: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    #: names defined at file scope (``#define``, global constants): device code can see these too
    toplevel: set[str] = field(default_factory=set)
    #: integer variables and parameters of the launching function, in order: the sizes in scope there
    in_scope: list[str] = field(default_factory=list)
    #: the file's type aliases: ``sizeof(floatX)`` is read as ``sizeof(float)``
    aliases: dict[str, tuple[str, int]] = field(default_factory=dict)

    def define(self, name: str, text: str, line: int, op: str = "=") -> None:
        """Record ``name = text`` (or ``name op= text``) in program order.

        The new value is expressed through the previous one, so ``n = n * 2`` or ``n *= 2`` after
        ``int n = 1 << 20`` gives ``(1 << 20) * 2`` — recording ``n * 2`` as the definition of ``n`` would
        make it refer to itself. A self-reference with no previous value is unknown, and dropped.
        """
        old = self.defs.get(name)
        if op != "=":
            text = f"{name} {op[:-1]} {_wrap(text)}"
        if re.search(rf"\b{re.escape(name)}\b", text):
            if old is None:
                self.defs.pop(name, None)
                return
            text = re.sub(rf"\b{re.escape(name)}\b", lambda _: _wrap(old), text)
        # the other derived names as they are now: `t = a; a = b; b = t;` must leave b with a's old value, and
        # a definition read later through a name redefined since would take the new value and could lead back
        # to itself
        text = self.inline(text)
        self.defs[name] = text
        self.lines[name] = line
        self.toplevel.discard(name)

    def is_constant(self, name: str) -> bool:
        text = self.defs.get(name)
        if text is None:
            return False
        try:
            e = parse(text)
            e.evaluate({})
        except ExprError:
            return False
        return not e.names()

    def inline(self, text: str, depth: int = 0, memo: dict[str, str] | None = None) -> str:
        """Replace derived variables by their definitions (and ``v.size()`` by the vector's length);
        constant ones stay as size names.

        ``memo`` keeps each name's inlined definition for the rest of the call: definitions that each use
        several derived names (a resize kernel's host code: widths, pitches and scales built from one
        another) otherwise expand the same name once per path to it, which took minutes."""
        memo = {} if memo is None else memo
        if depth > 20:
            return text
        text = _SIZE_CALL.sub(lambda m: _wrap(self.vec_sizes[m.group(1)]) if m.group(1) in self.vec_sizes
                              else m.group(0), text)
        # `block.x` of a `dim3 block(128)`: the dimension as written
        text = _DIM_FIELD.sub(lambda m: _wrap(self.dims[m.group(1)][_XYZ.index(m.group(2))])
                              if m.group(1) in self.dims and _XYZ.index(m.group(2)) < len(self.dims[m.group(1)])
                              else m.group(0), text)
        if self.aliases:
            text = _SIZEOF.sub(lambda m: f"sizeof({self._sizeof_type(m.group(1))})", text)

        def sub(m: re.Match[str]) -> str:
            name = m.group(0)
            if name in memo:
                return memo[name]
            if name in self.defs and not self.is_constant(name) and name != "sizeof":
                memo[name] = name  # while it expands: a definition that leads back to it stays a name
                memo[name] = _wrap(self.inline(self.defs[name], depth + 1, memo))
                return memo[name]
            return name

        return _IDENT.sub(sub, text)

    def _sizeof_type(self, written: str) -> str:
        base, stars = canonical_type(written, self.aliases)
        return base + "*" * stars if base != _clean_type(written) or stars else written

    def sizes_used(self, texts: list[str]) -> list[str]:
        used: list[str] = []
        for t in texts:
            for name in _IDENT.findall(t):
                if self.is_constant(name) and name not in used:
                    used.append(name)
        return used

    def adopt(self, other: HostEnv, text: str) -> str:
        """``text`` (in ``other``'s names) made valid here: ``other``'s constants it uses are carried over;
        one whose name means something else here is replaced by its value."""
        def sub(m: re.Match[str]) -> str:
            name = m.group(0)
            if not other.is_constant(name):
                return name
            if name not in self.defs:
                self.defs[name] = other.defs[name]
                if name in other.lines:
                    self.lines[name] = other.lines[name]
                return name
            return name if self.defs[name] == other.defs[name] else _wrap(other.defs[name])

        return _IDENT.sub(sub, other.inline(text))

    def copy(self) -> HostEnv:
        """An independent copy (a callee's environment starts as its caller's); sizes in scope are the
        callee's own, so they start empty."""
        return HostEnv(dict(self.defs), dict(self.dims), dict(self.allocs), dict(self.vec_sizes),
                       dict(self.fields), dict(self.lines), set(self.toplevel), [], self.aliases)


def _alloc_target(node: Node, data: bytes) -> str | None:
    """The buffer an allocator's first argument names: ``&d_x``, ``(void**)&d_x``, ``&s.out``, ``&p->out``."""
    target = node
    while True:
        if target.type in ("cast_expression", "parenthesized_expression"):
            target = target.child_by_field_name("value") or target.named_children[-1]
            continue
        # reinterpret_cast<void**>(&d_x)
        callee = target.child_by_field_name("function") if target.type == "call_expression" else None
        cargs = target.child_by_field_name("arguments") if callee is not None else None
        if callee is not None and cargs is not None and len(cargs.named_children) == 1 \
                and node_text(callee, data).startswith(_CASTS):
            target = cargs.named_children[0]
            continue
        break
    if target.type != "pointer_expression" or not node_text(target, data).startswith("&"):
        return None
    inner = target.child_by_field_name("argument")
    if inner is None:
        return None
    if inner.type == "identifier":
        return node_text(inner, data)
    if inner.type == "field_expression":
        return field_key(node_text(inner, data))
    return None


def _old_value(old: dict[str, str], m: re.Match[str]) -> str:
    return _wrap(old[m.group(1)])


def _chain(n: Node, data: bytes) -> tuple[list[str], Node] | None:
    """``a = b = v``: the names assigned (outermost first) and the value node, where every link is a plain
    ``=`` to a name; None for a single assignment. The walk meets the outer assignment first, and reading it
    alone would record ``a`` as the text ``b = v``."""
    names: list[str] = []
    cur: Node | None = n
    while cur is not None and cur.type == "assignment_expression":
        left, op = cur.child_by_field_name("left"), cur.child_by_field_name("operator")
        if left is None or left.type != "identifier" or op is None or node_text(op, data) != "=":
            return None
        names.append(node_text(left, data))
        cur = cur.child_by_field_name("right")
    return (names, cur) if len(names) > 1 and cur is not None else None


def _collect(node: Node, data: bytes, env: HostEnv, src: SourceText, base: int) -> None:
    chained: set[int] = set()  # inner links of a chain already recorded with their outermost assignment
    for n in list(walk(node)):
        if n.type == "assignment_expression" and n.id in chained:
            continue
        if n.type == "assignment_expression" and (chain := _chain(n, data)) is not None:
            names, value = chain
            line = src.line_of(n.start_byte + base) + 1
            # every name gets the value read with the definitions from before the statement
            text = node_text(value, data)
            old = {m: env.defs[m] for m in names if m in env.defs}
            if old:
                text = re.sub(r"\b(" + "|".join(map(re.escape, old)) + r")\b", partial(_old_value, old), text)
            for name in names:
                if re.search(rf"\b{re.escape(name)}\b", text):
                    env.defs.pop(name, None)  # its old value unknown: so is the new one
                    continue
                env.define(name, text, line)
            link = n.child_by_field_name("right")
            while link is not None and link.type == "assignment_expression":
                chained.add(link.id)
                link = link.child_by_field_name("right")
            continue
        if n.type == "init_declarator":
            decl = n.child_by_field_name("declarator")
            val = n.child_by_field_name("value")
            if decl is None or val is None or decl.type != "identifier":
                continue
            name = node_text(decl, data)
            line = src.line_of(n.start_byte + base) + 1
            dtype = n.parent.child_by_field_name("type") if n.parent is not None else None
            tname = node_text(dtype, data) if dtype is not None else ""
            if val.type in ("argument_list", "initializer_list") and _VECTOR.search(tname):
                if val.named_children and val.type == "argument_list":
                    env.vec_sizes[name] = node_text(val.named_children[0], data)
            elif val.type in ("argument_list", "initializer_list"):
                env.dims[name] = tuple(node_text(c, data) for c in val.named_children)
                env.lines[name] = line
            elif val.type == "call_expression" \
                    and node_text(val.child_by_field_name("function") or val, data) == "dim3":
                args = val.child_by_field_name("arguments")
                env.dims[name] = tuple(node_text(c, data) for c in args.named_children) if args else ()
                env.lines[name] = line
            else:
                env.define(name, node_text(val, data), line)
            if _INT_TYPE.match(" ".join(tname.split())) and name not in env.in_scope:
                env.in_scope.append(name)
        elif n.type == "declaration":
            # `int n;` (assigned later) is in scope as a size too
            dtype = n.child_by_field_name("type")
            tname = " ".join(node_text(dtype, data).split()) if dtype is not None else ""
            for d in n.children_by_field_name("declarator"):
                if tname == "dim3" and d.type == "function_declarator":
                    # `dim3 block(THREADS);` reads as a function declaration (C++'s most vexing parse)
                    nm, plist = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
                    if nm is not None and plist is not None:
                        env.dims[node_text(nm, data)] = tuple(node_text(c, data) for c in plist.named_children)
                        env.lines[node_text(nm, data)] = src.line_of(n.start_byte + base) + 1
                if d.type == "identifier" and _INT_TYPE.match(tname) and node_text(d, data) not in env.in_scope:
                    env.in_scope.append(node_text(d, data))
        elif n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            right = n.child_by_field_name("right")
            op = n.child_by_field_name("operator")
            if left is None or right is None or op is None:
                continue
            optext = node_text(op, data)
            if left.type == "identifier" and (optext == "=" or optext in _COMPOUND):
                env.define(node_text(left, data), node_text(right, data), src.line_of(n.start_byte + base) + 1,
                           optext)
            elif left.type == "field_expression" and optext == "=":
                key = field_key(node_text(left, data))
                if key is not None:
                    env.fields[key] = env.inline(node_text(right, data))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            op = n.child_by_field_name("operator")
            if arg is not None and arg.type == "identifier" and op is not None and node_text(arg, data) in env.defs:
                env.define(node_text(arg, data), "1", src.line_of(n.start_byte + base) + 1,
                           node_text(op, data)[0] + "=")
        elif n.type == "call_expression":
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            if fn is None or args is None:
                continue
            fname = node_text(fn, data)
            a = args.named_children
            if fname in ALLOCATORS and len(a) >= 2:
                target = _alloc_target(a[0], data)
                if target is not None:
                    env.allocs[target] = env.inline(node_text(a[1], data))
            elif fn.type == "field_expression" and fname.endswith(("resize", "assign")) and a:
                obj = fn.child_by_field_name("argument")
                if obj is not None and obj.type == "identifier":
                    env.vec_sizes[node_text(obj, data)] = node_text(a[0], data)


def _declared(node: Node | None, data: bytes) -> str:
    """The name a parameter declarator declares (``*out``, ``&layer``, ``n = 4``, ``(&rows)[4]``); "" if none."""
    while node is not None and node.type != "identifier":
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in node.named_children if c.type not in ("type_qualifier", "attribute_specifier")),
                         None)
        node = inner
    return node_text(node, data) if node is not None else ""


def file_env(src: SourceText, model: FileModel) -> HostEnv:
    """File-scope constants: ``#define`` values and global variables with constant initialisers."""
    env = HostEnv()
    for d in model.declarations:
        if d.kind is DeclKind.MACRO and len(d.names) == 1:
            text = src.slice(d.span).strip()
            m = re.match(r"#\s*define\s+([A-Za-z_]\w*)\s+(.+)$", text, re.S)
            if m:
                value = re.sub(r"/\*.*?\*/", " ", m.group(2), flags=re.S)  # `#define N 4096 /* elements */`
                value = value.split("//")[0].strip()
                try:
                    parse(value)
                except ExprError:
                    continue
                env.defs[m.group(1)] = value
                env.lines[m.group(1)] = src.line_of(d.span.start) + 1
                env.toplevel.add(m.group(1))
        elif d.kind is DeclKind.GLOBAL and not d.space:
            sub = src.data[d.span.start : d.span.end]
            before = set(env.defs)
            _collect(parse_tree(sub).root_node, sub, env, src, d.span.start)
            env.toplevel.update(set(env.defs) - before)
    env.in_scope.clear()
    return env


@dataclass(frozen=True)
class HostCall:
    """A call of a host function from another: ``launch_k(d_out, d_in, n)`` in ``main``."""

    caller: str
    callee: str
    args: tuple[str, ...]
    offset: int


@dataclass(frozen=True)
class HostParam:
    name: str
    type: str


class HostFlow:
    """The file's host functions, their parameters and the calls between them (parsed once per inference)."""

    def __init__(self, src: SourceText, model: FileModel, aliases: dict[str, tuple[str, int]] | None = None) -> None:
        self.src = src
        self.model = model
        self.functions = [d for d in model.declarations if d.kind is DeclKind.HOST_FUNCTION and d.names
                          and src.data[d.span.start : d.span.end].rstrip().endswith(b"}")]
        names = {d.names[0] for d in self.functions}
        self.params: dict[str, list[HostParam]] = {}
        self.calls: list[HostCall] = []
        self.file_env = file_env(src, model)
        # the caller's (the file's over its headers') where it read them, else the file's own
        self.file_env.aliases = aliases if aliases is not None else type_aliases(src, model)
        for d in self.functions:
            data = src.data[d.span.start : d.span.end]
            root = parse_tree(data).root_node
            fdecl = next(iter(walk(root, ("function_declarator",))), None)
            plist = fdecl.child_by_field_name("parameters") if fdecl is not None else None
            ps: list[HostParam] = []
            for c in plist.named_children if plist is not None else ():
                if c.type not in ("parameter_declaration", "optional_parameter_declaration"):
                    continue
                t = c.child_by_field_name("type")
                ps.append(HostParam(_declared(c.child_by_field_name("declarator"), data),
                                    node_text(t, data) if t else ""))
            self.params.setdefault(d.names[0], ps)
            for call in walk(root, ("call_expression",)):
                fn = call.child_by_field_name("function")
                args = call.child_by_field_name("arguments")
                if fn is None or args is None or any(c.type == "kernel_call_syntax" for c in call.children):
                    continue
                if fn.type == "template_function":
                    fn = fn.child_by_field_name("name") or fn
                callee = node_text(fn, data)
                if callee in names and callee != d.names[0]:
                    self.calls.append(HostCall(d.names[0], callee, tuple(
                        node_text(a, data) for a in args.named_children if a.type != "comment"),
                        d.span.start + call.start_byte))

    def _function(self, name: str, offset: int | None = None) -> Declaration | None:
        for d in self.functions:
            if d.names[0] == name and (offset is None or d.span.start <= offset <= d.span.end):
                return d
        return None

    def env_at(self, function: str, offset: int, depth: int = MAX_CALLER_DEPTH) -> HostEnv:
        """The environment inside ``function`` just before ``offset``: its first caller's (``depth`` levels
        up) with the parameters bound to that call's arguments, then the function's own statements."""
        base = self.file_env
        env = base.copy()
        decl = self._function(function, offset)
        params = self.params.get(function, [])
        call = next((c for c in self.calls if c.callee == function), None)
        if depth > 0 and call is not None:
            outer = self.env_at(call.caller, call.offset, depth - 1)
            # Resolve every argument in the caller first: resolving may carry constants into ``outer``.
            bound = [(p.name, arg, self._argument(outer, arg, depth - 1))
                     for p, arg in zip(params, call.args, strict=False) if p.name]
            env = outer.copy()
            for name, arg, (length, value) in bound:
                env.allocs.pop(name, None)
                env.vec_sizes.pop(name, None)
                if length is not None:
                    (env.allocs if length[0] == "bytes" else env.vec_sizes)[name] = length[1]
                if value is None or value == name:
                    if value is None:
                        env.defs.pop(name, None)
                    continue  # same name on both sides: the caller's definition already holds
                env.define(name, value, outer.lines.get(base_var(arg) or "") or self.src.line_of(call.offset) + 1)
        env.in_scope = [p.name for p in params if _INT_TYPE.match(" ".join(p.type.split()))]
        if decl is not None:
            sub = self.src.data[decl.span.start : offset]
            _collect(parse_tree(sub + b"}").root_node, sub, env, self.src, decl.span.start)
        return env

    def _argument(self, outer: HostEnv, arg: str, depth: int) -> tuple[tuple[str, str] | None, str | None]:
        """A caller's argument as the callee sees it: the buffer length it carries, and its value when it is
        arithmetic (``n``, ``B * T``, ``s.n``)."""
        length = self.buffer_bytes(outer, arg, depth)
        value: str | None = outer.inline(arg).strip()
        try:
            parse(value or "")
        except ExprError:
            value = self.field_value(outer, arg, depth)
        return length, value

    def buffer_bytes(self, env: HostEnv, arg: str, depth: int = MAX_CALLER_DEPTH) -> tuple[str, str] | None:
        """How long the buffer passed as ``arg`` is: ``("bytes", text)`` from an allocation or
        ``("count", text)`` from a vector's length, in ``env``'s names."""
        var = base_var(arg)
        if var is not None and var in env.allocs:
            return "bytes", env.allocs[var]
        if var is not None and var in env.vec_sizes:
            return "count", env.inline(env.vec_sizes[var])
        key = field_key(strip_parens(arg))
        if key is None:
            return None
        if key in env.allocs:
            return "bytes", env.allocs[key]
        found = self._field_elsewhere(key, "alloc", depth)
        if found is None:
            return None
        other, text = found
        return "bytes", env.adopt(other, text)

    def field_value(self, env: HostEnv, arg: str, depth: int = MAX_CALLER_DEPTH) -> str | None:
        """The value of a struct field passed as a scalar (``s.n``), wherever the program assigns it."""
        key = field_key(strip_parens(arg))
        if key is None:
            return None
        if key in env.fields:
            return env.fields[key]
        found = self._field_elsewhere(key, "value", depth)
        return env.adopt(found[0], found[1]) if found is not None else None

    def resolve_fields(self, env: HostEnv, text: str) -> str:
        """``text`` with every struct field it reads (``layer.rows * layer.cols``) replaced by the value the
        program gives that field, where one is found; the others are left as written."""
        def sub(m: re.Match[str]) -> str:
            found = m.group(0)
            head = re.match(r"[A-Za-z_]\w*\s*\.\s*[xyz]$", found)
            if head is not None and found.split(".")[0].strip() in env.dims:
                return found
            value = self.field_value(env, found)
            return _wrap(env.inline(value)) if value is not None else found

        return _FIELD_USE.sub(sub, text)

    def _field_elsewhere(self, key: str, what: str, depth: int) -> tuple[HostEnv, str] | None:
        """The host function that allocates (or assigns) field ``key``, and its environment there."""
        if depth < 0:
            return None
        name = key[1:].encode()
        for d in self.functions:
            if name not in self.src.data[d.span.start : d.span.end]:
                continue
            env = self.env_at(d.names[0], d.span.end - 1, depth)
            table = env.allocs if what == "alloc" else env.fields
            if key in table:
                return env, table[key]
        return None


def strip_parens(t: str) -> str:
    t = t.strip()
    while t.startswith("(") and t.endswith(")"):
        depth = 0
        ok = True
        for i, ch in enumerate(t):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(t) - 1:
                ok = False
                break
        if not ok:
            break
        t = t[1:-1].strip()
    return t


def base_var(arg: str) -> str | None:
    """The variable a pointer argument is: ``d_x``, ``(float*)d_x``, ``v.data()``, ``raw_pointer_cast(d.data())``."""
    t = strip_parens(arg)
    t = re.sub(r"^\(\s*[A-Za-z_][\w\s:<>]*\*+\s*\)\s*", "", t)  # (float*)d_x
    t = re.sub(r"^(thrust::raw_pointer_cast|raw_pointer_cast|static_cast<[^>]*>|reinterpret_cast<[^>]*>)\s*\((.*)\)$",
               r"\2", t)
    t = re.sub(r"\.data\(\)(?:\.get\(\))?$", "", t.strip())
    return t if re.fullmatch(r"[A-Za-z_]\w*", t) else None


def launch_env(flow: HostFlow, site: LaunchSite) -> HostEnv:
    """The environment at a launch: see the module's docstring."""
    if not site.function:
        return flow.file_env.copy()
    return flow.env_at(site.function, site.span.start)
