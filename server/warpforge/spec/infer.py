"""Infer a spec from the kernel's signature and a host launch site in the same file.

Most CUDA files that people optimize already say how the kernel runs: ``int n = 1 << 24;``,
``cudaMalloc(&d_x, n * sizeof(float));``, ``k<<<(n + 255) / 256, 256>>>(d_x, n);``. Reading that saves
writing an annotation. Host variables with constant initialisers become sizes (so they can be
perturbed); variables derived from them are inlined as text; buffer lengths come from the allocation
size divided by the element size; roles come from what the kernel body does with each pointer (an
element read before the same thread writes it makes ``inout``). What the launch sees is read the way the
program runs, through the launching function's callers, struct fields and vectors (``hostenv``); types
through the file's typedefs (``cuda.types``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tree_sitter import Node, Tree

from ..cuda.access import index_bounds, param_access
from ..cuda.extract import needed_declarations
from ..cuda.model import FileModel, Kernel, LaunchSite
from ..cuda.parser import parse_tree
from ..cuda.text import SourceText
from ..cuda.tree import node_text
from ..cuda.types import (
    Aliases,
    canonical_type,
    empty_struct,
    file_aliases,
    file_enumerators,
    file_enums,
    header_defines,
    project_include_dirs,
)
from .ctypes import TypeScope, with_enumerators
from .domains import HostFills
from .elsewhere import HostFile
from .expr import ExprError, Number, parse
from .hostenv import HostEnv, HostFlow, file_env, launch_env, strip_parens
from .model import ArgSpec, LaunchSpec, Role, SizeSpec, canonical_dtype, default_distribution

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Inference:
    """What could be inferred, and why the rest could not."""

    sizes: list[SizeSpec] = field(default_factory=list)
    args: dict[str, ArgSpec] = field(default_factory=dict)
    launch: LaunchSpec | None = None
    template_args: tuple[str, ...] = ()
    problems: dict[str, str] = field(default_factory=dict)
    site: LaunchSite | None = None
    #: template arguments a guess may take, with why, where the launch's name no type the kernel can be built
    #: with (``scalar_t`` of PyTorch's dispatch macros: ``float``, one type the macro instantiates)
    template_guess: tuple[tuple[str, ...], str] | None = None
    #: the role the kernel's access analysis gives each pointer parameter (also where its length is unknown)
    roles: dict[str, Role] = field(default_factory=dict)
    #: each pointer parameter's element type through aliases and template arguments (``floatX`` -> ``float``)
    ctypes: dict[str, str] = field(default_factory=dict)
    #: the host environment at the launch (sizes in scope for an error's proposal)
    env: HostEnv = field(default_factory=HostEnv)
    #: the other file of the project whose launch was read, when the kernel's own file has none
    host: HostFile | None = None
    #: whether the project was searched for a launch (messages then say where inference looked)
    searched: bool = False
    #: the integer parameters bounding each buffer's subscripts (``cuda.access.index_bounds``): proposals
    bounds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: what the launch says of an argument whose names are no constants there (``rows * cols`` with runtime
    #: ``rows``): a relation a guess keeps, giving the names values (``spec.resolve.proposal``)
    unresolved: dict[str, str] = field(default_factory=dict)
    #: the launch read from the host whose names are no constants there (``(imageW / 16, imageH / 64)``)
    unresolved_launch: LaunchSpec | None = None

    def at(self, line: int) -> str:
        """A launch line (1-based) as the user finds it: ``line 12``, or ``main.cu:12`` in another file."""
        return f"line {line}" if self.host is None else f"{self.host.path.name}:{line}"

    @property
    def nowhere(self) -> str:
        """Where no launch was found."""
        return "this file or its project" if self.searched else "this file"



def _value(text: str, env: HostEnv) -> Number | None:
    """``text`` in the host's constants at a point, as a number; None where a name in it is no constant there
    (derived names inlined, the constants it then reads evaluated)."""
    try:
        t = env.inline(text)
        sizes = {n: parse(env.defs[n]).evaluate({}) for n in env.sizes_used([t])}
        return parse(t).evaluate(sizes)
    except (ExprError, KeyError, ZeroDivisionError, RecursionError):
        return None


def _reachable(site: LaunchSite, flow: HostFlow, data: bytes, tree: Tree) -> bool:
    """False where an ``if`` around the launch is decided against it by the host's constants there:
    ``if (block_size == 16) k<16><<<...>>>(); else k<32><<<...>>>();`` with ``block_size = 32`` (NVIDIA's
    ``matrixMul``). Read at the first launch, the spec paired ``<16>`` with 32-wide blocks and the original
    crashed. A condition that is no expression of constants leaves the launch reachable."""
    node: Node | None = tree.root_node.descendant_for_byte_range(site.span.start, site.span.start)
    env: HostEnv | None = None
    while node is not None:
        parent = node.parent
        if parent is not None and parent.type == "if_statement":
            cons, alt = parent.child_by_field_name("consequence"), parent.child_by_field_name("alternative")
            cond = parent.child_by_field_name("condition")
            inside = [c is not None and c.start_byte <= site.span.start < c.end_byte for c in (cons, alt)]
            if cond is not None and any(inside):
                env = env if env is not None else launch_env(flow, site)
                v = _value(node_text(cond, data), env)
                if v is not None and bool(v) != inside[0]:
                    return False
        node = parent
    return True


def _first_reachable(sites: Sequence[LaunchSite], flow: HostFlow, data: bytes) -> LaunchSite | None:
    """The first launch the host's constants do not rule out (else the first launch, as before)."""
    if len(sites) < 2:
        return sites[0] if sites else None
    tree = parse_tree(data)
    return next((s for s in sites if _reachable(s, flow, data, tree)), sites[0])


_SIZEOF_TAIL = re.compile(r"^(.*?)\s*\*\s*sizeof\s*\(\s*([^)]+?)\s*\)$", re.S)
_SIZEOF_HEAD = re.compile(r"^sizeof\s*\(\s*([^)]+?)\s*\)\s*\*\s*(.*)$", re.S)


def elements_from_bytes(nbytes: str, ctype: str, aliases: Aliases | None = None) -> str:
    """``n * sizeof(float)`` -> ``n``; otherwise ``(BYTES) / sizeof(T)``.

    ``sizeof(floatX)`` matches ``float`` when ``aliases`` say ``typedef float floatX``."""
    t = strip_parens(nbytes)
    for rx, count_group, type_group in ((_SIZEOF_TAIL, 1, 2), (_SIZEOF_HEAD, 2, 1)):
        m = rx.match(t)
        if m and canonical_dtype(canonical_type(m.group(type_group), aliases or {})[0]) \
                == canonical_dtype(canonical_type(ctype, aliases or {})[0]):
            return strip_parens(m.group(count_group))
    return f"({t}) / sizeof({ctype})"


#: empty tag types passed by value only to select an overload or instantiation: one byte, value irrelevant
_TAG = re.compile(r"^(?:(?:cuda::)?std::)?(?:integral_constant|bool_constant|true_type|false_type)\b")


def infer(
    src: SourceText, model: FileModel, kernel: Kernel, file: str, template_args: tuple[str, ...] = (),
    host: HostFile | None = None, searched: bool = False,
) -> Inference:
    """Infer sizes, arguments and launch from the first launch site of ``kernel`` in the file.

    ``template_args`` (from an annotation) override the launch's, so that ``T* y`` of a kernel annotated
    ``template T=float`` is known to hold floats. When the file launches the kernel nowhere, ``host`` (another
    file of the project that does, ``spec.elsewhere``) is read instead: its sizes, scalars and launch, with
    the kernel's own file's types and constants; ``searched`` says the project was looked through.
    """
    inf = Inference(searched=searched)
    access = param_access(src, kernel)
    inf.bounds = index_bounds(src, kernel)
    sites = model.readable_launches_of(kernel.name)
    hsrc, hmodel, hfile = src, model, file
    if not sites and host is not None and host.model.readable_launches_of(kernel.name):
        hsrc, hmodel, hfile = host.src, host.model, str(host.path)
        sites = host.model.readable_launches_of(kernel.name)
        inf.host = host
    # the file's aliases over its headers' (``typedef float floatX;`` in a project header)
    aliases = file_aliases(src, model, file)
    if inf.host is None:
        flow = HostFlow(src, model, aliases)
    else:
        # the host file's types and constants, under the kernel file's own (a `#define BLOCK` the kernel
        # is compiled with means what the kernel's file says)
        # the host's aliases under the kernel file's: a header the host reaches (`include/real.h`) may be
        # one the kernel file's include is not found at without the build's -I folders
        aliases = {**file_aliases(hsrc, hmodel, hfile), **aliases}
        flow = HostFlow(hsrc, hmodel, aliases)
        own = file_env(src, model)
        for name, definition in own.defs.items():
            if name not in flow.file_env.defs:
                flow.file_env.defs[name] = definition
                flow.file_env.toplevel.add(name)
    site = _first_reachable(sites, flow, hsrc.data)
    inf.site = site
    tsubst: dict[str, str] = {}
    if site is not None and site.template_args and kernel.template_params:
        # ``k<Dtype><<<...>>>`` inside ``template <typename Dtype> void Layer<Dtype>::Forward_gpu``: the launch
        # passes its own template's parameter, no instantiation (left to the guess, like no launch at all)
        before = hsrc.data[:site.span.start]
        if not dependent_arguments(site.template_args, before):
            # ``k<scalar_t><<<...>>>`` inside PyTorch's ``AT_DISPATCH_*``: one instantiation per dispatched type,
            # ``scalar_t`` no type outside it; the guess takes one the macro dispatches to (``dispatched_type``)
            dispatched = dispatched_type(kernel, site.template_args, before, inf.at(site.line + 1))
            if dispatched is None:
                inf.template_args = site.template_args
            else:
                inf.template_guess = dispatched
    elif site is not None and kernel.template_params:
        inf.template_args = _deduced(kernel, site)
    # the element types follow the instantiation, a dispatched one's guess too (its `template` line says so)
    targs = template_args or inf.template_args or (inf.template_guess[0] if inf.template_guess else ())
    if kernel.template_params and targs:
        tsubst = {p.name: a for p, a in zip(kernel.template_params, targs, strict=False)}
    # sizes a project keeps in its headers (`#define N (1 << 20)` in `config.h`), under the files' own
    for f, fmodel in {file: model, hfile: hmodel}.items():
        for name, macro in header_defines(f, fmodel, project_include_dirs(f)).items():
            if name not in flow.file_env.defs and _expression(macro):
                flow.file_env.defs[name] = macro
                flow.file_env.toplevel.add(name)
    env = launch_env(flow, site) if site is not None else flow.file_env.copy()
    inf.env = env
    if site is not None and len(site.args) != len(kernel.params):
        inf.problems["*"] = (f"the launch at {inf.at(site.line + 1)} passes {len(site.args)} arguments "
                             f"but `{kernel.name}` takes {len(kernel.params)}")
        site = None
    used_texts: list[str] = []

    def inline(text: str) -> str:
        """A launch expression in constants: derived variables, vector sizes, `block.x`, struct fields."""
        return flow.resolve_fields(env, env.inline(text))

    # types through template arguments, aliases and enums (an enum parameter is passed as its integer type)
    scope = TypeScope(aliases, file_enums(src, model, file), tsubst)
    enum_values = file_enumerators(src, model, file)
    fills: HostFills | None = None  # how the host fills its inputs: read at the first input that needs it
    for i, p in enumerate(kernel.params):
        ptype, extra = scope.resolve(p.type)
        dtype = canonical_dtype(ptype)
        if p.is_pointer or extra:
            acc = access.get(p.name)
            if p.is_const or acc is None or not acc.write:
                role = Role.IN
            elif acc.read_first:
                # The kernel reads what was there before it wrote (``+=``, an atomic, a load before any
                # store): the initial contents are an input. Reads only of elements it wrote first are not.
                role = Role.INOUT
            else:
                role = Role.OUT
            inf.roles[p.name] = role
            if dtype is None:
                inf.problems[p.name] = (f"cannot infer the element type of `{p.name}` ({p.text})")
                continue
            inf.ctypes[p.name] = ptype
            count: str | None = None
            if site is not None:
                found = flow.buffer_bytes(env, site.args[i])
                if found is not None:
                    kind, length = found
                    count = strip_parens(inline(length) if kind == "count"
                                         else elements_from_bytes(inline(length), ptype, aliases))
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
                where = f"`{site.function}` or its callers" if site is not None and site.function else "this file"
                why = (f"no launch of `{kernel.name}` in {inf.nowhere}" if site is None else
                       f"`{site.args[i]}` at the launch on {inf.at(site.line + 1)} is not allocated "
                       f"(cudaMalloc, cudaMallocAsync, cudaMallocManaged, a sized vector) in {where}")
                inf.problems[p.name] = f"cannot infer the length of `{p.name}`: {why}"
                continue
            used_texts.append(count)
            dist = None
            if role is not Role.OUT:
                # what the host fills the input with (``'a' + rand() % 26``), else the dtype's default
                filled = None
                if site is not None:
                    fills = fills if fills is not None else HostFills(hsrc.data, env.defs)
                    filled = fills.of(site.args[i], dtype)
                dist = filled if filled is not None else default_distribution(dtype)
            inf.args[p.name] = ArgSpec(p.name, role, dtype, count=count, distribution=dist, source="inferred",
                                       line=site.line + 1 if site else None)
        elif _TAG.match(ptype) or (dtype is None and empty_struct(src, model, ptype)):
            # ``std::bool_constant<Atomic>``, a functor without data (``k<Square><<<...>>>(Square{}, ...)``):
            # an empty struct, one byte; which value is passed is irrelevant
            inf.args[p.name] = ArgSpec(p.name, Role.SCALAR, "uint8", value="0", source="inferred",
                                       line=site.line + 1 if site else None)
        else:
            if site is None:
                if inf.site is None:
                    inf.problems[p.name] = (f"cannot infer the value of `{p.name}`: "
                                            f"no launch of `{kernel.name}` in {inf.nowhere}")
                continue
            value: str | None = strip_parens(inline(with_enumerators(site.args[i], enum_values)))
            try:
                parse(value or "")
            except ExprError:
                value = flow.field_value(env, site.args[i])
                value = strip_parens(env.inline(value)) if value is not None else None
            try:
                parse(value or "")
            except ExprError:
                value = None
            if value is None:
                inf.problems[p.name] = f"cannot infer the value of `{p.name}` from `{site.args[i]}`"
                continue
            used_texts.append(value)
            # a type that resolves to no scalar type stays "" here: ``build_spec`` reports it at its line
            inf.args[p.name] = ArgSpec(p.name, Role.SCALAR, dtype or "", value=value, source="inferred",
                                       line=site.line + 1)
    if site is not None:
        grid = _dims(site.grid, env, inline)
        block = _dims(site.block, env, inline)
        smem: str | None = strip_parens(inline(site.smem)) if site.smem else "0"
        try:
            parse(smem or "0")
        except ExprError:
            smem = None
        if grid is not None and block is not None and smem is not None:
            inf.launch = LaunchSpec(grid, block, smem, "inferred", site.line + 1)
            used_texts.extend([*grid, *block, smem])
        else:
            bad = next(t for t, ok in ((site.grid, grid), (site.block, block), (site.smem or "", smem))
                       if ok is None)
            inf.problems["launch"] = (f"`{bad}` at the launch on {inf.at(site.line + 1)} is not an arithmetic "
                                      "expression of the host's constants")
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
            inf.unresolved[a.name] = text or ""
            del inf.args[a.name]
    if inf.launch is not None:
        launch_texts = (*inf.launch.grid, *inf.launch.block, inf.launch.smem)
        unknown = frozenset().union(*(parse(t).names() for t in launch_texts)) - known
        if unknown:
            inf.problems["launch"] = (f"cannot infer the launch configuration: it uses "
                                      f"{', '.join(sorted(unknown))}, which is not a constant here")
            inf.unresolved_launch = inf.launch
            inf.launch = None
    if inf.host is not None:
        # lines of another file mean nothing in this one: only the kernel file's own constants keep theirs
        own_env = file_env(src, model)
        inf.sizes = [replace(sz, line=own_env.lines.get(sz.name) if own_env.defs.get(sz.name) == sz.expr else None)
                     for sz in inf.sizes]
        inf.args = {n: replace(a, line=None) for n, a in inf.args.items()}
        if inf.launch is not None:
            inf.launch = replace(inf.launch, line=None)
    return inf


def _expression(text: str) -> bool:
    try:
        parse(text)
    except ExprError:
        return False
    return True


_CONSTRUCTED = re.compile(r"^\s*([A-Za-z_][\w:]*(?:\s*<[^{}()]*>)?)\s*(?:\{[^{}]*\}|\([^()]*\))\s*$")


def _deduced(kernel: Kernel, site: LaunchSite) -> tuple[str, ...]:
    """Template arguments the compiler deduces from a launch without ``<...>``, where the launch says them:
    a type parameter taken by value and passed a constructed object (``map<<<g, b>>>(Square{}, ...)``
    makes ``Op`` = ``Square``). All type parameters must be deduced, and no value parameter may be left
    without a default: a partial deduction is none (the annotation's ``template`` line says the rest)."""
    found: dict[str, str] = {}
    for p, arg in zip(kernel.params, site.args, strict=False):
        m = _CONSTRUCTED.match(arg)
        if m and not p.is_pointer and any(t.name == p.type and t.kind == "type" for t in kernel.template_params):
            found.setdefault(p.type, m.group(1).strip())
    out: list[str] = []
    for t in kernel.template_params:
        value = found.get(t.name) or t.default
        if value is None:
            return ()
        out.append(value)
    return tuple(out)


_TEMPLATE_HEAD = re.compile(rb"\btemplate\s*<([^<>]*)>")


def dependent_arguments(args: tuple[str, ...], before: bytes) -> bool:
    """Whether a launch's template arguments name a parameter of the template around the launch (the last
    ``template <typename T, ...>`` head before it): a dependent name, not a type the kernel can be built with.

    Why no scope walk: a template parameter's name means nothing outside its template, so a launch that uses
    it as a type sits inside that template (the last head before the launch, functions not being nested)."""
    heads = list(_TEMPLATE_HEAD.finditer(before))
    if not heads:
        return False
    params = {m.group(1).decode("utf-8", "replace")
              for m in re.finditer(rb"(?:typename|class)\s+([A-Za-z_]\w*)", heads[-1].group(1))}
    return any(a.strip() in params for a in args)


#: PyTorch's dispatch macros (``AT_DISPATCH_FLOATING_TYPES_AND_HALF(t.scalar_type(), "name", [&] {...})``): the
#: lambda is instantiated once per dispatched type, which it sees as ``scalar_t``
_DISPATCH = re.compile(rb"\bAT_DISPATCH_(\w+)\s*\(")


def dispatched_type(kernel: Kernel, args: tuple[str, ...], before: bytes, where: str) -> tuple[tuple[str, ...],
                                                                                              str] | None:
    """Where a launch inside an open ``AT_DISPATCH_*(`` call passes ``scalar_t`` as a template argument: the
    arguments with ``scalar_t`` as one type the macro dispatches to (``float`` for the floating and all-types
    macros, ``int`` for the integral ones, else ``float`` as for a template no launch instantiates) and why; None
    elsewhere. ``before`` is the host text up to the launch, ``where`` the launch's place for the reason."""
    if not any(a.strip() == "scalar_t" for a in args):
        return None
    for m in reversed(list(_DISPATCH.finditer(before))):
        tail = before[m.end():]
        if tail.count(b"(") - tail.count(b")") < 0:
            continue  # closed before the launch
        kind = m.group(1).decode("utf-8", "replace")
        macro = f"AT_DISPATCH_{kind}"
        if ("FLOATING" in kind and "REDUCED" not in kind) or kind.startswith("ALL_TYPES"):
            ctype, how = "float", f"float, one of the types `{macro}` instantiates"
        elif kind.startswith("INTEGRAL"):
            ctype, how = "int", f"int, one of the types `{macro}` instantiates"
        else:
            ctype, how = "float", f"float (which types `{macro}` instantiates is not known here)"
        out = tuple(ctype if a.strip() == "scalar_t" and i < len(kernel.template_params)
                    and kernel.template_params[i].kind == "type" else a for i, a in enumerate(args))
        return out, (f"the launch at {where} instantiates the template with `scalar_t`, the type `{macro}` "
                     f"dispatches on at run time: {how}")
    return None


def _template_values(kernel: Kernel, args: tuple[str, ...], env: HostEnv) -> tuple[str, ...]:
    """Value template arguments as numbers (``BLOCK`` -> ``128``) when they are host constants.

    The arguments end up in an explicit instantiation compiled without the host code, where a host
    variable or a macro the kernel does not use would be undefined.
    """
    out: list[str] = []
    for i, a in enumerate(args):
        tp = kernel.template_params[i] if i < len(kernel.template_params) else None
        v = _value(a, env) if tp is not None and tp.kind == "value" else None
        out.append(str(v) if v is not None else a)
    return tuple(out)


def _dims(text: str, env: HostEnv, inline: Callable[[str], str]) -> tuple[str, ...] | None:
    t = strip_parens(text)
    if t in env.dims:
        parts = env.dims[t]
    elif t.startswith("dim3(") and t.endswith(")"):
        from .annotations import _split_top

        parts = tuple(_split_top(t[5:-1]))
    else:
        parts = (t,)
    out = []
    for p in parts:
        q = strip_parens(inline(p))
        try:
            parse(q)
        except ExprError:
            return None
        out.append(q)
    return tuple(out) if out else None
