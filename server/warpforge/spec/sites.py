"""A variant's launch written at one host launch site, in that site's own names, or why it cannot be.

A spec says how the kernel is launched in its own names: ``grid=cdiv(rows, 8)`` over the size ``rows``. A
launch site in the program says it in the host's: ``k<<<n_rows, 256>>>(out, in, n_rows, n_cols)`` in a
launcher whose ``n_rows`` is a parameter. Accepting a variant verified with another launch must rewrite each
site, so each spec name is *bound* to an expression that means the same thing at the site:

1. a scalar kernel argument whose spec value is a size: the argument passed at the site (``rows`` is what
   the site passes as the kernel's ``n``: ``n_rows``);
2. a tunable: the value the variant chose (a number is valid in any file);
3. a size of the same name visible at the site (a local, a parameter, a file-scope constant);
4. a local or parameter whose value at the site, followed through the callers (``spec.hostenv``), is the size;
5. a derived size: its expression, bound in turn.

A rewrite is *mechanical* only when (a) every name of the variant's launch binds, and (b) the site launches
the kernel the way the spec says today: the spec's own launch, bound the same way, evaluates to the site's
grid, block and shared memory (compared numerically over the site's free names). (b) is what makes the
rewrite correct: the variant was verified against the spec's launch, so a site launching otherwise (a block
size chosen at run time, a grid over other sizes) cannot be assumed to want the variant's. A site that fails
either gets the exact change it needs in words (old and new configuration) and no edit.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cuda.model import FileModel, LaunchSite
from ..cuda.rewrite import TextEdit, make_edit
from ..cuda.text import SourceText, Span
from .expr import ExprError, parse
from .hostenv import HostEnv, HostFlow, launch_env, strip_parens
from .model import KernelSpec, Role

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ATOM = re.compile(r"[A-Za-z_][\w.]*|\d+[uUlL]*|[A-Za-z_]\w*(?:->\w+)+")
#: the spec language's functions (never names to bind)
_FUNCTIONS = frozenset({"cdiv", "ceil_div", "min", "max", "sizeof", "dim3"})
_TRIALS = 3


@dataclass(frozen=True)
class Launch:
    """A launch configuration in the spec's expression language (one to three dimensions each)."""

    grid: tuple[str, ...]
    block: tuple[str, ...]
    smem: str = "0"


@dataclass(frozen=True)
class SiteChange:
    """What accepting a variant does to one launch site: ``edits`` when the rewrite is mechanical, else
    ``reason`` says why not and ``new`` is the configuration the user must write there."""

    path: Path | None
    #: 1-based line of the launch
    line: int
    old: str
    new: str
    #: the edits writing ``new`` at the site; applied only when ``mechanical`` (else shown, as the change to make)
    edits: tuple[TextEdit, ...] = ()
    reason: str = ""

    @property
    def mechanical(self) -> bool:
        return not self.reason

    def where(self, root: Path | None = None) -> str:
        name = "this file" if self.path is None else str(_relative(self.path, root))
        return f"{name}:{self.line}"

    def message(self, root: Path | None = None) -> str:
        """One line for the editor and the CLI: ``file:line: old -> new`` and, when not written, why."""
        head = f"{self.where(root)}: launch {self.old} -> {self.new}"
        return head if self.mechanical else f"{head} (needs a launch change: {self.reason})"


def _relative(path: Path, root: Path | None) -> Path:
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve())
        except ValueError:
            pass
    return path


def _wrap(text: str) -> str:
    t = text.strip()
    return t if _ATOM.fullmatch(t) else f"({t})"


def _call_args(text: str, start: int) -> tuple[list[str], int]:
    """Split the balanced argument list starting at ``text[start] == '('``; returns (args, end index)."""
    depth = 0
    args: list[str] = []
    cur = start + 1
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(text[cur:i].strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(text[cur:i].strip())
            cur = i + 1
    raise ValueError(f"unbalanced parentheses in `{text}`")


def to_c(expr: str) -> str:
    """A spec expression as plain C for host code: ``cdiv(n, 8)`` is ``(n + 7) / 8``; ``min``/``max`` become
    conditionals. Operands are parenthesized only where they are not a single name or number."""
    out = expr
    for fn in ("cdiv", "ceil_div", "min", "max"):
        while True:
            m = re.search(rf"\b{fn}\s*\(", out)
            if m is None:
                break
            args, end = _call_args(out, m.end() - 1)
            args = [to_c(a) for a in args]
            if len(args) != 2:
                raise ValueError(f"cannot translate `{expr}` to C")
            a, b = _wrap(args[0]), _wrap(args[1])
            if fn in ("cdiv", "ceil_div"):
                rep = f"({a} + {int(b) - 1}) / {b}" if b.isdigit() else f"({a} + {b} - 1) / {b}"
            else:
                op = "<" if fn == "min" else ">"
                rep = f"({a} {op} {b} ? {a} : {b})"
            out = out[: m.start()] + rep + out[end:]
    return out


def dims_c(d: Sequence[str], dim3: bool = False) -> str:
    """Launch dimensions as C: one plain expression, or ``dim3(x, y)`` (always ``dim3`` when asked)."""
    if len(d) == 1 and not dim3:
        return to_c(d[0])
    return "dim3(" + ", ".join(to_c(x) for x in d) + ")"


def substitute(expr: str, binding: Mapping[str, str]) -> str:
    """``expr`` with each bound name replaced by its binding (parenthesized unless atomic)."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(0)
        return _wrap(binding[name]) if name in binding and name not in _FUNCTIONS else name

    return _IDENT.sub(sub, expr)


@dataclass
class Binding:
    """Spec names -> expressions at one site, and the names that could not be bound."""

    names: dict[str, str]
    env: HostEnv
    flow: HostFlow

    def expression(self, expr: str, spec: KernelSpec) -> tuple[str, set[str]]:
        """``expr`` (spec names) in the site's names; the spec names left unbound (derived sizes are expanded
        through their definitions first)."""
        sizes = {s.name: s.expr for s in spec.sizes}
        text = expr
        for _ in range(8):
            pending = [n for n in _names(text) if n not in self.names and n in sizes]
            if not pending:
                break
            text = _expand(text, sizes, set(pending))
        unbound = {n for n in _names(text) if n not in self.names and (n in sizes or n in _tunable_names(spec))}
        return strip_parens(substitute(text, self.names)), unbound

    def inline(self, text: str) -> str:
        return strip_parens(self.flow.resolve_fields(self.env, self.env.inline(text)))


def _expand(text: str, sizes: Mapping[str, str], names: set[str]) -> str:
    """``text`` with each of ``names`` (derived sizes) replaced by its parenthesized expression."""
    return _IDENT.sub(lambda m: f"({sizes[m.group(0)]})" if m.group(0) in names else m.group(0), text)


def _names(expr: str) -> list[str]:
    return [n for n in _IDENT.findall(expr) if n not in _FUNCTIONS]


def _tunable_names(spec: KernelSpec) -> set[str]:
    return {t.name for t in spec.tunables}


def tunable_values(spec: KernelSpec, defines: Mapping[str, str]) -> dict[str, str]:
    """Each numeric tunable's value: the variant's define, else the spec's default (its first value)."""
    out: dict[str, str] = {}
    for t in spec.tunables:
        value = str(defines.get(t.name, t.values[0]))
        try:
            parse(value).evaluate({})
            out[t.name] = value
        except ExprError:
            pass
    return out


def bind(spec: KernelSpec, params: Sequence[str], site: LaunchSite, src: SourceText, model: FileModel,
         defines: Mapping[str, str]) -> Binding:
    """Bind the spec's sizes and tunables at ``site`` (the rules of the module docstring); tunables take the
    values of ``defines`` (a variant's), else their defaults."""
    flow = HostFlow(src, model)
    env = launch_env(flow, site)
    names: dict[str, str] = tunable_values(spec, defines)
    sizes = {s.name for s in spec.sizes}
    if site.args_known and len(site.args) == len(params):
        for pname, arg in zip(params, site.args, strict=True):
            a = spec.arg(pname)
            if a is not None and a.role is Role.SCALAR and a.value is not None:
                v = strip_parens(a.value)
                if v in sizes and v not in names:
                    names[v] = arg.strip()
    visible = set(env.in_scope) | set(env.toplevel)
    for s in sizes - set(names):
        if s in visible:
            names[s] = s
            continue
        for v in env.in_scope:
            if strip_parens(env.inline(v)) == s:
                names[s] = v
                break
    return Binding(names, env, flow)


def _site_dims(text: str, env: HostEnv) -> tuple[str, ...]:
    """A site's grid or block as dimensions: a ``dim3`` variable's, ``dim3(a, b)``, or one expression."""
    t = strip_parens(text)
    if t in env.dims:
        return env.dims[t]
    m = re.fullmatch(r"dim3\s*\((.*)\)", t, re.S)
    if m:
        return tuple(x.strip() for x in _call_args("(" + m.group(1) + ")", 0)[0] if x.strip())
    return (t,)


def _values(exprs: Sequence[str], env: HostEnv, rng: random.Random) -> list[int | float] | None:
    """Evaluate ``exprs`` together: the site's constants at their values, every other name at one shared
    random value (None when an expression cannot be read)."""
    try:
        parsed = [parse(e) for e in exprs]
    except ExprError:
        return None
    free: dict[str, int | float] = {}
    for p in parsed:
        for n in p.names():
            if n in free:
                continue
            if env.is_constant(n):
                free[n] = parse(env.defs[n]).evaluate({})
            else:
                free[n] = rng.randint(33, 4099)
    try:
        return [p.evaluate(free) for p in parsed]
    except (ExprError, ZeroDivisionError, OverflowError):
        return None


def _pad(d: Sequence[str]) -> list[str]:
    return [*d, *["1"] * (3 - len(d))]


def same_launch(binding: Binding, spec: KernelSpec, site: LaunchSite, original: Launch) -> str:
    """"" when ``site`` launches as ``original`` (the spec's launch) bound at the site; else why not."""
    if not site.config_known:
        return f"its grid or block is not set in `{site.function or 'this scope'}` where it is launched"
    want: list[str] = []
    for d in (*_pad(original.grid), *_pad(original.block), original.smem or "0"):
        text, unbound = binding.expression(d, spec)
        if unbound:
            return f"{', '.join(sorted(unbound))} cannot be written in the names at this launch"
        want.append(binding.inline(text))
    have: list[str] = []
    for text in (site.grid, site.block):
        dims = _site_dims(text, binding.env)
        if len(dims) > 3:
            return f"`{text}` is not a launch dimension WarpForge can read"
        have.extend(binding.inline(x) for x in _pad(dims))
    have.append(binding.inline(site.smem or "0"))
    rng = random.Random(0x57A7)
    parts = (("grid", site.grid, original.grid, slice(0, 3)), ("block", site.block, original.block, slice(3, 6)),
             ("shared memory", site.smem or "0", (original.smem or "0",), slice(6, 7)))
    for _ in range(_TRIALS):
        vw = _values(want + have, binding.env, rng)
        if vw is None:
            return "its configuration is not arithmetic WarpForge can read"
        got, expected = vw[len(want):], vw[: len(want)]
        for what, written, spec_dims, at in parts:
            if got[at] != expected[at]:
                verified = dims_c([binding.expression(x, spec)[0] for x in spec_dims])
                return (f"its {what} `{written}` is not the {what} the spec launches with (`{verified}` here), "
                        "so the variant's launch cannot be derived from it")
    return ""


def _launch_text(site: LaunchSite, grid: Sequence[str], block: Sequence[str], smem: str) -> str:
    """A configuration written the way ``site`` writes one (for messages and chevron edits)."""
    g, b = dims_c(grid), dims_c(block)
    s = to_c(smem)
    if site.style == "chevron":
        parts = [g, b]
        if s not in ("0", "") or site.stream is not None:
            parts.append(s)
        if site.stream is not None:
            parts.append(site.stream)
        return "<<<" + ", ".join(parts) + ">>>"
    return f"grid {g}, block {b}, smem {s}"


def site_change(spec: KernelSpec, params: Sequence[str], original: Launch, new: Launch,
                defines: Mapping[str, str], src: SourceText, model: FileModel, site: LaunchSite,
                path: Path | None = None) -> SiteChange:
    """The change ``new`` (a variant's launch, spec names) makes to ``site`` (see the module docstring)."""
    binding = bind(spec, params, site, src, model, defines)
    # the site today launches with the spec's default tunables; the variant with its own
    as_is = Binding({**binding.names, **tunable_values(spec, {})}, binding.env, binding.flow)
    grid = [binding.expression(x, spec) for x in new.grid]
    block = [binding.expression(x, spec) for x in new.block]
    smem = binding.expression(new.smem or "0", spec)
    unbound = set().union(*(u for _, u in (*grid, *block, smem)))
    text = _launch_text(site, [g for g, _ in grid], [b for b, _ in block], smem[0])
    old = site.config_text()
    edits = tuple(_edits(src, site, [g for g, _ in grid], [b for b, _ in block], smem[0]))
    if unbound:
        return SiteChange(path, site.line + 1, old, text, edits, reason=(
            f"{', '.join(sorted(unbound))} cannot be written in the names at this launch"))
    why = same_launch(as_is, spec, site, original)
    return SiteChange(path, site.line + 1, old, text, edits, reason=why)


def _edits(src: SourceText, site: LaunchSite, grid: Sequence[str], block: Sequence[str],
           smem: str) -> list[TextEdit]:
    """The text edits writing the configuration at ``site`` in its own style."""
    if site.style == "chevron":
        return [make_edit(src, site.config_span, _launch_text(site, grid, block, smem))]
    edits: list[TextEdit] = []
    for span, dims, old in ((site.grid_span, grid, site.grid), (site.block_span, block, site.block)):
        if span is None:
            continue
        text = dims_c(dims, dim3=strip_parens(old).startswith("dim3"))
        if text != old:
            edits.append(make_edit(src, span, text))
    s = to_c(smem)
    if site.smem_span is not None:
        if s != site.smem:
            edits.append(make_edit(src, site.smem_span, s))
    elif s not in ("0", "") and site.smem_insert is not None:
        at = site.smem_insert
        if site.style == "launch_kernel":
            edits.append(make_edit(src, Span(at, at), f", {s}"))
        else:
            line_start = src.data.rfind(b"\n", 0, at) + 1
            indent = src.data[line_start:at].decode("utf-8", errors="replace")
            indent = indent if not indent.strip() else ""
            edits.append(make_edit(src, Span(at, at), f"{site.config_var}.dynamicSmemBytes = {s};\n{indent}"))
    return edits
