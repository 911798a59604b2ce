"""Infer a spec from the kernel's signature and a host launch site in the same file.

Most CUDA files that people optimize already say how the kernel runs: ``int n = 1 << 24;``,
``cudaMalloc(&d_x, n * sizeof(float));``, ``k<<<(n + 255) / 256, 256>>>(d_x, n);``. Reading that saves
writing an annotation. Host variables with constant initialisers become sizes (so they can be
perturbed); variables derived from them are inlined as text; buffer lengths come from the allocation
size divided by the element size; roles come from what the kernel body does with each pointer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ..cuda.access import param_access
from ..cuda.extract import needed_declarations
from ..cuda.model import DeclKind, FileModel, Kernel, LaunchSite
from ..cuda.parser import parse_tree
from ..cuda.text import SourceText
from ..cuda.tree import node_text, walk
from .expr import ExprError, parse
from .model import ArgSpec, LaunchSpec, Role, SizeSpec, canonical_dtype, default_distribution

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALLOCATORS = ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocHost", "cudaHostAlloc")


@dataclass
class HostEnv:
    """Constant host definitions visible at a launch site."""

    defs: dict[str, str] = field(default_factory=dict)
    dims: dict[str, tuple[str, ...]] = field(default_factory=dict)
    allocs: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    #: names defined at file scope (``#define``, global constants): device code can see these too
    toplevel: set[str] = field(default_factory=set)

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

    def inline(self, text: str, depth: int = 0) -> str:
        """Replace derived variables by their definitions; constant ones stay as size names."""
        if depth > 20:
            return text

        def sub(m: re.Match[str]) -> str:
            name = m.group(0)
            if name in self.defs and not self.is_constant(name) and name != "sizeof":
                return _wrap(self.inline(self.defs[name], depth + 1))
            return name

        return _IDENT.sub(sub, text)

    def sizes_used(self, texts: list[str]) -> list[str]:
        used: list[str] = []
        for t in texts:
            for name in _IDENT.findall(t):
                if self.is_constant(name) and name not in used:
                    used.append(name)
        return used


@dataclass
class Inference:
    """What could be inferred, and why the rest could not."""

    sizes: list[SizeSpec] = field(default_factory=list)
    args: dict[str, ArgSpec] = field(default_factory=dict)
    launch: LaunchSpec | None = None
    template_args: tuple[str, ...] = ()
    problems: dict[str, str] = field(default_factory=dict)
    site: LaunchSite | None = None



def _wrap(text: str) -> str:
    """Parenthesize an inlined expression, unless it is a single name or number (``n2 = n`` -> ``n``)."""
    t = text.strip()
    return t if re.fullmatch(r"[\w.]+", t) else f"({t})"


_COMPOUND = frozenset({"+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="})
_CASTS = ("reinterpret_cast", "static_cast", "const_cast")


def _collect(node: Node, data: bytes, env: HostEnv, line_base: int, src: SourceText, base: int) -> None:
    for n in list(walk(node)):
        if n.type == "init_declarator":
            decl = n.child_by_field_name("declarator")
            val = n.child_by_field_name("value")
            if decl is None or val is None or decl.type != "identifier":
                continue
            name = node_text(decl, data)
            line = src.line_of(n.start_byte + base) + 1
            if val.type in ("argument_list", "initializer_list"):
                env.dims[name] = tuple(node_text(c, data) for c in val.named_children)
                env.lines[name] = line
            elif val.type == "call_expression" \
                    and node_text(val.child_by_field_name("function") or val, data) == "dim3":
                args = val.child_by_field_name("arguments")
                env.dims[name] = tuple(node_text(c, data) for c in args.named_children) if args else ()
                env.lines[name] = line
            else:
                env.define(name, node_text(val, data), line)
        elif n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            right = n.child_by_field_name("right")
            op = n.child_by_field_name("operator")
            if left is not None and right is not None and left.type == "identifier" and op is not None \
                    and (node_text(op, data) == "=" or node_text(op, data) in _COMPOUND):
                env.define(node_text(left, data), node_text(right, data), src.line_of(n.start_byte + base) + 1,
                           node_text(op, data))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            op = n.child_by_field_name("operator")
            if arg is not None and arg.type == "identifier" and op is not None and node_text(arg, data) in env.defs:
                env.define(node_text(arg, data), "1", src.line_of(n.start_byte + base) + 1,
                           node_text(op, data)[0] + "=")
        elif n.type == "call_expression":
            fn = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            if fn is None or args is None or node_text(fn, data) not in _ALLOCATORS:
                continue
            a = args.named_children
            if len(a) < 2:
                continue
            target = a[0]
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
            if target.type == "pointer_expression":
                inner = target.child_by_field_name("argument")
                if inner is not None and inner.type == "identifier":
                    env.allocs[node_text(inner, data)] = node_text(a[1], data)


def host_env(src: SourceText, model: FileModel, site: LaunchSite) -> HostEnv:
    """Constant definitions: top-level macros and constants, then the launching function's locals."""
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
            _collect(parse_tree(sub).root_node, sub, env, 0, src, d.span.start)
            env.toplevel.update(set(env.defs) - before)
    for d in model.declarations:
        if d.kind is DeclKind.HOST_FUNCTION and site.function in d.names and d.span.contains_span(site.span):
            sub = src.data[d.span.start : site.span.start]
            _collect(parse_tree(sub + b"}").root_node, sub, env, 0, src, d.span.start)
            break
    return env


_SIZEOF_TAIL = re.compile(r"^(.*?)\s*\*\s*sizeof\s*\(\s*([^)]+?)\s*\)$", re.S)
_SIZEOF_HEAD = re.compile(r"^sizeof\s*\(\s*([^)]+?)\s*\)\s*\*\s*(.*)$", re.S)


def _strip_parens(t: str) -> str:
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


def elements_from_bytes(nbytes: str, ctype: str) -> str:
    """``n * sizeof(float)`` -> ``n``; otherwise ``(BYTES) / sizeof(T)``."""
    t = _strip_parens(nbytes)
    for rx, count_group, type_group in ((_SIZEOF_TAIL, 1, 2), (_SIZEOF_HEAD, 2, 1)):
        m = rx.match(t)
        if m and canonical_dtype(m.group(type_group)) == canonical_dtype(ctype):
            return _strip_parens(m.group(count_group))
    return f"({t}) / sizeof({ctype})"


def _base_var(arg: str) -> str | None:
    t = _strip_parens(arg)
    t = re.sub(r"^\(\s*[A-Za-z_][\w\s]*\*+\s*\)\s*", "", t)  # (float*)d_x
    t = re.sub(r"^(thrust::raw_pointer_cast|static_cast<[^>]*>|reinterpret_cast<[^>]*>)\s*\((.*)\)$", r"\2", t)
    t = re.sub(r"\.data\(\)$", "", t)
    return t if re.fullmatch(r"[A-Za-z_]\w*", t) else None


def infer(
    src: SourceText, model: FileModel, kernel: Kernel, file: str, template_args: tuple[str, ...] = ()
) -> Inference:
    """Infer sizes, arguments and launch from the first launch site of ``kernel`` in the file.

    ``template_args`` (from an annotation) override the launch's, so that ``T* y`` of a kernel annotated
    ``template T=float`` is known to hold floats.
    """
    inf = Inference()
    access = param_access(src, kernel)
    sites = model.launches_of(kernel.name)
    site = sites[0] if sites else None
    inf.site = site
    tsubst: dict[str, str] = {}
    if site is not None and site.template_args and kernel.template_params:
        inf.template_args = site.template_args
    if kernel.template_params and (template_args or inf.template_args):
        tsubst = {p.name: a for p, a in zip(kernel.template_params, template_args or inf.template_args,
                                            strict=False)}
    env = host_env(src, model, site) if site is not None else HostEnv()
    if site is not None and len(site.args) != len(kernel.params):
        inf.problems["*"] = (f"the launch at line {site.line + 1} passes {len(site.args)} arguments "
                             f"but `{kernel.name}` takes {len(kernel.params)}")
        site = None
    used_texts: list[str] = []
    for i, p in enumerate(kernel.params):
        ptype = tsubst.get(p.type, p.type)
        dtype = canonical_dtype(ptype)
        if p.is_pointer:
            acc = access.get(p.name)
            if p.is_const or acc is None or not acc.write:
                role = Role.IN
            elif acc.read_first:
                # The kernel reads what was there before it wrote (``+=``, an atomic, a load before any
                # store): the initial contents are an input. Reads only of elements it wrote first are not.
                role = Role.INOUT
            else:
                role = Role.OUT
            if dtype is None:
                inf.problems[p.name] = (f"cannot infer the element type of `{p.name}` ({p.text})")
                continue
            count: str | None = None
            if site is not None:
                var = _base_var(site.args[i])
                if var is not None and var in env.allocs:
                    count = elements_from_bytes(env.inline(env.allocs[var]), ptype)
                    count = _strip_parens(count)
            if count is not None:
                try:
                    parse(count)
                except ExprError:
                    inf.problems[p.name] = (f"cannot infer the length of `{p.name}`: `{count}` is not an "
                                            "arithmetic expression of constants")
                    continue
            if count is None:
                if inf.site is not None and site is None:
                    continue  # the launch does not match the kernel: that (problems["*"]) is the reason
                why = (f"no launch of `{kernel.name}` in this file" if site is None else
                       f"`{site.args[i]}` at the launch on line {site.line + 1} is not allocated with cudaMalloc "
                       "in the launching function")
                inf.problems[p.name] = f"cannot infer the length of `{p.name}`: {why}"
                continue
            used_texts.append(count)
            dist = default_distribution(dtype) if role is not Role.OUT else None
            inf.args[p.name] = ArgSpec(p.name, role, dtype, count=count, distribution=dist, source="inferred",
                                       line=site.line + 1 if site else None)
        else:
            if site is None:
                if inf.site is None:
                    inf.problems[p.name] = (f"cannot infer the value of `{p.name}`: "
                                            f"no launch of `{kernel.name}` in this file")
                continue
            value = _strip_parens(env.inline(site.args[i]))
            try:
                parse(value)
            except ExprError:
                inf.problems[p.name] = f"cannot infer the value of `{p.name}` from `{site.args[i]}`"
                continue
            used_texts.append(value)
            inf.args[p.name] = ArgSpec(p.name, Role.SCALAR, dtype or "float32", value=value, source="inferred",
                                       line=site.line + 1)
    if site is not None:
        grid = _dims(site.grid, env)
        block = _dims(site.block, env)
        smem: str | None = _strip_parens(env.inline(site.smem)) if site.smem else "0"
        try:
            parse(smem or "0")
        except ExprError:
            smem = None
        if grid is not None and block is not None and smem is not None:
            inf.launch = LaunchSpec(grid, block, smem, "inferred", site.line + 1)
            used_texts.extend([*grid, *block, smem])
        else:
            inf.problems["launch"] = "cannot infer the launch configuration"
    if inf.template_args:
        inf.template_args = _template_values(kernel, inf.template_args, env)
    # Some sizes must not be perturbed: a block size (the kernel may assume blockDim.x == BLOCK), a
    # template argument, and a file-scope constant the kernel's own code uses (`#define NBINS 64` in the
    # body is compiled into the kernel; shrinking the host's NBINS would only shrink the buffers).
    fixed_names: set[str] = set()
    if inf.launch is not None:
        for t in inf.launch.block:
            fixed_names.update(_IDENT.findall(t))
    for t in inf.template_args:
        fixed_names.update(_IDENT.findall(t))
    device_names = set(kernel.uses).union(*(d.names for d in needed_declarations(model, kernel)))
    device_names -= {p.name for p in kernel.params}
    fixed_names.update(n for n in device_names if n in env.toplevel)
    for name in env.sizes_used(used_texts):
        inf.sizes.append(SizeSpec(name, env.defs[name], name in fixed_names, None, "inferred", env.lines.get(name)))
    # Validate: every name must now be a size.
    known = {s.name for s in inf.sizes}
    for a in list(inf.args.values()):
        text = a.count if a.is_buffer else a.value
        unknown = parse(text or "0").names() - known
        if unknown:
            inf.problems[a.name] = (f"cannot infer {'the length' if a.is_buffer else 'the value'} of `{a.name}`: "
                                    f"`{text}` uses {', '.join(sorted(unknown))}, which is not a constant here")
            del inf.args[a.name]
    if inf.launch is not None:
        launch_texts = (*inf.launch.grid, *inf.launch.block, inf.launch.smem)
        unknown = frozenset().union(*(parse(t).names() for t in launch_texts)) - known
        if unknown:
            inf.problems["launch"] = (f"cannot infer the launch configuration: it uses "
                                      f"{', '.join(sorted(unknown))}, which is not a constant here")
            inf.launch = None
    return inf


def _template_values(kernel: Kernel, args: tuple[str, ...], env: HostEnv) -> tuple[str, ...]:
    """Value template arguments as numbers (``BLOCK`` -> ``128``) when they are host constants.

    The arguments end up in an explicit instantiation compiled without the host code, where a host
    variable or a macro the kernel does not use would be undefined.
    """
    out: list[str] = []
    for i, a in enumerate(args):
        tp = kernel.template_params[i] if i < len(kernel.template_params) else None
        if tp is not None and tp.kind == "value":
            try:
                sizes = {n: parse(env.defs[n]).evaluate({}) for n in env.sizes_used([env.inline(a)])}
                out.append(str(parse(env.inline(a)).evaluate(sizes)))
                continue
            except (ExprError, KeyError):
                pass
        out.append(a)
    return tuple(out)


def _dims(text: str, env: HostEnv) -> tuple[str, ...] | None:
    t = _strip_parens(text)
    if t in env.dims:
        parts = env.dims[t]
    elif t.startswith("dim3(") and t.endswith(")"):
        from .annotations import _split_top

        parts = tuple(_split_top(t[5:-1]))
    else:
        parts = (t,)
    out = []
    for p in parts:
        q = _strip_parens(env.inline(p))
        try:
            parse(q)
        except ExprError:
            return None
        out.append(q)
    return tuple(out) if out else None
