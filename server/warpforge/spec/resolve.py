"""Combine inference and the annotation block into the effective spec, and validate it.

The annotation wins field by field: a user who writes only `@warpforge size N = 4096` keeps everything
else that was inferred from the launch site. Validation resolves the spec at both the spec size and the
perturbed size, so an unknown name or a negative length is reported now, at its line, and not later in a
GPU worker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..compiler.files import read_text_regular
from ..cuda.access import index_bounds
from ..cuda.loopclass import classify
from ..cuda.model import DeclKind, FileModel, Kernel, Param
from ..cuda.normalize import file_facts
from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..cuda.types import canonical_type, file_enumerators
from .annotations import _TEMPLATE_TYPE, _TYPE_NAME, MARK, Annotation, parse_annotation
from .ctypes import TypeScope, kernel_scope, type_fix, with_enumerators
from .elsewhere import HostFile
from .expr import ExprError, Number
from .expr import parse as expr_parse
from .guess import (
    BLOCK,
    BUDGET_LOG2,
    GRID_STRIDE_BLOCKS,
    LaunchForm,
    budget_values,
    dynamic_shared_type,
    launch_form,
    names_of,
    serial_loop_bounds,
    small_value,
    template_values,
)
from .infer import Inference, infer
from .limits import DEFAULT_LIMITS, LaunchLimits, check_limits
from .model import (
    C_SPELLING,
    DEFAULT_SEEDS,
    GUESSED_TEMPLATE,
    ArgSpec,
    KernelSpec,
    LaunchSpec,
    Role,
    SizeSpec,
    SpecError,
    canonical_dtype,
    default_distribution,
    expr_fix,
)

_DEFAULT_SIZE = "1 << 20"


def proposal(kernel: Kernel, inf: Inference, ann: Annotation, reasons: dict[str, str] | None = None,
             bounds: dict[str, tuple[str, ...]] | None = None, src: SourceText | None = None) -> list[str]:
    """Annotation lines that complete what inference left open, and that validate when written above
    the kernel (``tests/test_spec_hostflow.py`` writes them and builds the spec).

    Sizes come from what exists at the launch: the launch's own expressions when their names are sizes
    or integer variables of the launching function (``n``, ``B * T``), those variables as sizes (their value
    when the host code gives one, else a default to edit). A buffer's length is the kernel's first integer
    argument's value (the usual bound of its index), else the first size in scope. Roles are the access
    analysis's (a write-only output is ``out``), element types are read through typedefs and template
    arguments.

    ``reasons`` receives, per line it guesses (``size N``, ``arg a``, ``launch``), why no better value was found;
    a value read from the host code is no guess. ``bounds`` (``cuda.access.index_bounds``) gives a buffer the
    integer arguments its subscripts are bounded by: ``w[c]`` under ``c < cols`` is ``float[cols's value]``.
    """
    env = inf.env
    why_here: dict[str, str] = reasons if reasons is not None else {}
    no_launch = f"no launch of `{kernel.name}` in {inf.nowhere}"
    site = inf.site
    known = {sz.name for sz in inf.sizes} | {sz.name for sz in ann.sizes}
    new_sizes: dict[str, str] = {}
    lines: list[str] = []
    #: the names of each expression whose values multiply (lengths, integer scalars, grid dimensions), with the
    #: bits of the problem budget they share
    products: list[tuple[str, int]] = []

    def usable(text: str) -> bool:
        """``text`` is arithmetic over known sizes and integer variables in scope at the launch."""
        try:
            names = expr_parse(text).names()
        except ExprError:
            return False
        return all(n in known or n in new_sizes or n in env.in_scope or env.is_constant(n) for n in names)

    def adopt(text: str) -> str:
        for n in sorted(expr_parse(text).names()):
            if n not in known and n not in new_sizes:
                new_sizes[n] = env.defs[n] if env.is_constant(n) else _DEFAULT_SIZE
                if not env.is_constant(n):
                    why_here[f"size {n}"] = f"`{n}` has no constant value at the launch"
        return text

    def usable_dims(text: str) -> bool:
        """A launch dimension, or each of ``(x, y)``, is ``usable``."""
        return all(usable(d) for d in _split_dims(text))

    def adopt_dims(text: str) -> None:
        for d in _split_dims(text):
            adopt(d)

    def fresh(name: str) -> str:
        if name not in known and name not in new_sizes:
            new_sizes[name] = _DEFAULT_SIZE
            why_here[f"size {name}"] = no_launch if site is None else f"no value for `{name}` at the launch"
        return name

    def integer(p: Param) -> bool:
        dtype = canonical_dtype(canonical_type(p.type, env.aliases)[0])
        return dtype is not None and dtype.startswith(("int", "uint"))

    args = inf.args | ann.args
    launch_args = site.args if site is not None and len(site.args) == len(kernel.params) else None
    values: dict[str, str] = {}
    for i, p in enumerate(kernel.params):
        a = args.get(p.name)
        if a is not None and not a.is_buffer and a.value is not None:
            values[p.name] = a.value
        elif p.name not in inf.roles and a is None:
            raw = launch_args[i].strip() if launch_args is not None else ""
            why = no_launch if site is None else f"`{raw}` at the launch is not a constant"
            if raw and usable(raw):
                values[p.name] = adopt(raw)
            elif p.unnamed:
                values[p.name] = "0"  # the kernel cannot read it: any value does
            elif (integer(p) or _is_bool(p.type)) and (small := small_value(p.name, p.type)) is not None:
                values[p.name] = small[0]  # a filter width, a stride, a flag: small, never a problem size
                why_here[f"arg {p.name}"] = f"{why}; {small[1]}: {small[0]} assumed"
            elif integer(p):
                # a size of the same name in another case (`n` and `size N`) is the usual meaning
                same = next((k for k in sorted(known) if k.lower() == p.name.lower()), None)
                values[p.name] = same or fresh(p.name)
                why_here[f"arg {p.name}"] = why
            else:
                values[p.name] = "1.0"  # a coefficient (`float a`): a value to edit, not a size
                why_here[f"arg {p.name}"] = why
            lines.append(f"// @warpforge arg {p.name} = {values[p.name]}")
    # a relation the launch states (`nthreads = outer * inner`); a scalar that is one size is no product
    products.extend((values[p.name], BUDGET_LOG2) for p in kernel.params if p.name in values and integer(p)
                    and len(names_of(values[p.name])) > 1)
    for a in args.values():  # what inference or the block gave: its sizes take part too
        if a.is_buffer and a.count:
            products.append((a.count, BUDGET_LOG2))
    # the kernel's thread mapping: a thread index's extent bounds the subscripts it appears in
    ints = [p.name for p in kernel.params if not p.is_pointer and integer(p) and p.name in values]
    form = launch_form(src, kernel, ints) if src is not None else LaunchForm("unknown")
    if src is not None and form.extents():
        bounds = index_bounds(src, kernel, form.extents())
    # the length a buffer without guards gets: the size guarding the thread index, else the first integer
    # argument that bounds no loop and is not small (`iteration` of a time-step loop is no length)
    body = src.data[kernel.body_span.start : kernel.body_span.end].decode("utf-8", "replace") if src else ""
    loops = serial_loop_bounds(body)
    candidates = [p.name for p in kernel.params
                  if p.name in values and p.name not in inf.roles and integer(p) and not p.unnamed]
    first_int = values[form.x] if form.x is not None and form.x in values else next(
        (values[n] for n in candidates if n not in loops and small_value(n) is None),
        values[candidates[0]] if candidates else None)
    scope_size = next((n for n in env.in_scope if usable(n)), None)
    # a 2-D problem: a buffer no guard bounds spans the plane the grid covers (`imageW * imageH`)
    plane: list[str] | None = None
    if inf.unresolved_launch is not None and len(inf.unresolved_launch.grid) >= 2:
        free_dims = [[n for n in names_of(g) if n not in known and not env.is_constant(n)]
                     for g in inf.unresolved_launch.grid[:2]]
        if all(len(d) == 1 and usable(d[0]) for d in free_dims):
            plane = [d[0] for d in free_dims]
    elif form.kind == "2d" and form.x is not None and form.y is not None:
        plane = [form.x, form.y]
    for p in kernel.params:
        if p.name not in inf.roles or p.name in args:
            continue
        bounded = [values[b] for b in (bounds or {}).get(p.name, ()) if b in values]
        stated = inf.unresolved.get(p.name, "")
        if stated and usable(stated):  # the launch's own length (`rows * cols - cols`), its sizes guessed
            count = adopt(stated)
            how = f"the length the launch allocates, `{stated}`"
        elif bounded and len(bounded) == len((bounds or {})[p.name]):
            count = " * ".join(_factor(v) for v in bounded)
            names = " * ".join((bounds or {})[p.name])
            how = f"length from the kernel's guards (its subscripts stay below `{names}`)"
        elif plane is not None:
            count = " * ".join(adopt(n) if n in env.in_scope else values.get(n, n) for n in plane)
            how = f"a 2-D problem: length assumed to be `{count}`"
        else:
            count = first_int or (adopt(scope_size) if scope_size is not None else None) \
                or next(iter(sorted(known)), None) or fresh("N")
            how = f"length assumed to be `{count}`"
        problem = inf.problems.get(p.name, "").partition(": ")[2]
        why_here[f"arg {p.name}"] = f"{problem}; {how}" if problem and site is not None else how
        role = inf.roles[p.name].value
        products.append((count, BUDGET_LOG2))
        lines.append(f"// @warpforge arg {p.name}: {role} {inf.ctypes.get(p.name, 'float')}[{count}]")
    fixed: set[str] = set()  # sizes valued here that the perturbed run keeps (a filter width, a block size)
    hold: set[str] = set()  # sizes the perturbed run keeps, valued from the budget
    if ann.launch is None and inf.launch is None:
        grid = site.grid.strip() if site is not None else ""
        block = site.block.strip() if site is not None else ""
        smem = site.smem.strip() if site is not None and site.smem else ""
        host_launch = inf.unresolved_launch
        if host_launch is not None and not (grid and block and usable_dims(grid) and usable_dims(block)):
            # the launch as the host computes it (`dim3 blocks(imageW / 16, imageH / 64)`), its sizes guessed
            texts = [*host_launch.grid, *host_launch.block, host_launch.smem]
            if all(usable(t) for t in texts):
                grid, block = _dims_text(host_launch.grid), _dims_text(host_launch.block)
                smem = "" if host_launch.smem in ("", "0") else host_launch.smem
        if grid and block and usable_dims(grid) and usable_dims(block) and smem and not usable(smem):
            # the host computes the dynamic shared memory at run time: the most a block may use without opting in
            adopt_dims(grid)
            adopt_dims(block)
            smem = str(48 * 1024)
            why_here["launch"] = f"`{site.smem if site is not None else ''}` (dynamic shared memory) is not a " \
                "constant at the launch: 48 KiB assumed (the most a block may use without opting in)"
        elif not (grid and block and usable_dims(grid) and usable_dims(block) and (not smem or usable(smem))):
            why = no_launch if site is None else inf.problems.get("launch", "")
            grid, block, smem, how = _guessed_launch(src or SourceText(""), kernel, form, values, first_int, fresh)
            if not form.guarded:  # the kernel assumes the launch covers it exactly: no perturbed size
                hold.update(n for d in (form.x, form.y) if d is not None for n in names_of(values[d]))
            why_here["launch"] = f"{why}; {how}" if why else how
        else:
            adopt_dims(grid)
            adopt_dims(block)
            if smem:
                adopt(smem)
        for n in names_of(block):  # a block size the host sweeps (`for (bs = 32; ...)`): its usual value
            if new_sizes.get(n) == _DEFAULT_SIZE:
                new_sizes[n] = BLOCK
                fixed.add(n)
                why_here[f"size {n}"] = f"`{n}` is the block size and has no constant value at the launch " \
                    f"(a sweep?): {BLOCK} threads assumed"
        # a grid of blocks (`n_blocks`) shares what the block's threads leave; `cdiv(n, 256)` counts elements;
        # the dimensions of one grid multiply
        dims = _split_dims(grid)
        products.append((" * ".join(f"({g})" for g in dims),
                         BUDGET_LOG2 if any("/" in g or "cdiv" in g for g in dims) else BUDGET_LOG2 - 8))
        lines.append(f"// @warpforge launch grid={grid}, block={block}" + (f", smem={smem}" if smem else ""))
    if kernel.template_params and not (ann.template_args or inf.template_args):
        targs, how = inf.template_guess or template_values(kernel)
        lines.append("// @warpforge template " + ", ".join(f"{t.name}={a}"
                                                           for t, a in zip(kernel.template_params, targs,
                                                                           strict=True)))
        why_here["template"] = how
    # placeholders get values by what they are (`spec.guess`): small by name, a share of the problem budget
    # when they multiply with others, else a moderate count
    free = [n for n, v in new_sizes.items() if v == _DEFAULT_SIZE]
    for n in free:
        small = small_value(n)
        if small is not None:
            new_sizes[n] = small[0]
            fixed.add(n)
            why_here[f"size {n}"] = f"{why_here.get(f'size {n}', 'no value')}; {small[1]}: {small[0]} assumed"
    free = [n for n in free if n not in fixed]
    known_values: dict[str, Number] = {}
    for sz in [*inf.sizes, *ann.sizes]:
        try:
            known_values[sz.name] = expr_parse(sz.expr).evaluate(known_values)
        except (ExprError, TypeError, ValueError):
            continue
    for n, (v, how) in budget_values(free, products, known_values, loops).items():
        new_sizes[n] = v
        why_here[f"size {n}"] = f"{why_here.get(f'size {n}', 'no value')}; {how}"
    head = [f"// @warpforge size {n} = {v}" + (" fixed" if n in fixed | hold else "") for n, v in new_sizes.items()]
    return head + lines


def _dims_text(dims: tuple[str, ...]) -> str:
    return dims[0] if len(dims) == 1 else "(" + ", ".join(dims) + ")"


def _is_bool(ctype: str) -> bool:
    return " ".join(ctype.replace("const", " ").split()) == "bool"


def _split_dims(text: str) -> list[str]:
    """``(a, b)`` -> ``["a", "b"]``; ``a`` -> ``["a"]``."""
    t = text.strip()
    if t.startswith("(") and t.endswith(")") and "," in t:
        from .annotations import _split_top

        return _split_top(t[1:-1])
    return [t]


def _guessed_launch(src: SourceText, kernel: Kernel, form: LaunchForm, values: dict[str, str],
                    first_int: str | None, fresh: Callable[[str], str]) -> tuple[str, str, str, str]:
    """``(grid, block, smem, how)`` from the kernel's index form (``guess.launch_form``)."""
    threads = 256
    if form.kind == "2d" and form.x is not None and form.y is not None:
        x, y = values[form.x], values[form.y]
        grid, block = f"(cdiv({x}, 16), cdiv({y}, 16))", "(16, 16)"
        how = (f"a 2-D index guarded by `{form.x}` and `{form.y}`" if form.guarded else
               f"an unguarded 2-D index over `{form.x}` (its row length) and `{form.y}`") \
            + ": 16 x 16 threads over them assumed"
    elif form.kind == "grid-stride":
        grid, block = GRID_STRIDE_BLOCKS, BLOCK
        how = f"a grid-stride loop: {GRID_STRIDE_BLOCKS} blocks (4 per SM of an H100) of {BLOCK} assumed"
    elif form.kind == "block-per-row" and form.x is not None:
        grid, block = values[form.x], BLOCK
        how = f"a block per row of `{form.x}`, {BLOCK} threads striding over it assumed"
    else:
        n = values[form.x] if form.kind == "1d" and form.x is not None else first_int or fresh("N")
        grid, block = f"cdiv({_factor(n)}, {BLOCK})", BLOCK
        how = f"one thread per element of `{n}` assumed"
    if form.kind == "2d":
        threads = 256
    smem = ""
    shared = dynamic_shared_type(src, kernel)
    if shared is not None:
        ctype = shared if canonical_dtype(shared) is not None else "float"
        smem = f"{threads} * sizeof({ctype})"
        how += f"; `extern __shared__` memory of one {ctype} per thread"
    return grid, block, smem, how


def _factor(text: str) -> str:
    """``text`` as a factor of a product: parenthesized unless a name or a number."""
    t = text.strip()
    return t if re.fullmatch(r"[A-Za-z_]\w*|\d+", t) else f"({t})"


def _syntax_error(src: SourceText, model: FileModel, kernel: Kernel, file: str) -> SpecError | None:
    """A syntax error inside the kernel, as the error to report: inference read a kernel tree-sitter could not
    parse, so what it could not infer (a length, a role) follows from the syntax error and would only mislead
    (a one-line kernel missing an operand was "cannot infer the length of `y`", with a block giving `y` the
    wrong role)."""
    for prob in model.problems:
        if kernel.span.start <= prob.span.start < kernel.span.end:
            line = src.line_of(prob.span.start)
            col = prob.span.start - src.line_starts[line] + 1
            what = prob.message.removeprefix("syntax error: ").removeprefix("syntax error")
            return SpecError(file, line + 1, f"syntax error in `{kernel.name}` at column {col}"
                             + (f": {what}" if what else ""),
                             "fix the kernel's syntax first: its spec is read from the kernel's code")
    return None


def _failed(file: str, line: int, message: str, kernel: Kernel, inf: Inference, ann: Annotation,
            src: SourceText) -> SpecError:
    """The error of a failed inference: what is missing, the sizes in scope at the launch, and a block
    that validates (quoted in the fix, and kept whole in ``SpecError.block``)."""
    reasons: dict[str, str] = {}
    lines = tuple(proposal(kernel, inf, ann, reasons, inf.bounds, src))
    scope = inf.env.in_scope
    where = f" (sizes in scope at the launch: {', '.join(scope)})" if scope else ""
    quoted = " ".join(f"`{line}`" for line in lines)
    err = SpecError(file, line, message, f"add above the kernel{where}: {quoted}", lines)
    err.guesses = reasons
    return err


def param_dtype(src: SourceText, kernel: Kernel, name: str, template_args: tuple[str, ...] = (),
                scope: TypeScope | None = None) -> str | None:
    """The canonical element type of pointer parameter ``name``, or None when it cannot be known here.

    Template type parameters take the spec's template arguments; the file's (and its headers') typedefs and
    ``using`` aliases and its enums are resolved (``ctypes.TypeScope``). Structs, vector types (``float4``)
    and ``void`` stay unknown: nothing is checked."""
    p = kernel.param(name)
    if p is None or not p.is_pointer:
        return None
    if scope is None:
        subst = {t.name: a for t, a in zip(kernel.template_params, template_args, strict=False)}
        ctype = subst.get(p.type, p.type)
        dtype = canonical_dtype(ctype)
        if dtype is None:
            # Only a file that spells a type we do not know needs its typedefs (a second read of a parsed tree).
            aliased = file_facts(src.text).typedefs.get(" ".join(ctype.replace("const", " ").split()))
            dtype = canonical_dtype(aliased) if aliased is not None else None
        return dtype
    return scope.dtype(p.type)


def _resolve_types(args: list[ArgSpec], ann: Annotation, scope: TypeScope, enum_values: dict[str, int],
                   kernel: Kernel, file: str, inf_types: dict[str, str] | None = None) -> list[ArgSpec]:
    """Every argument with its real type: a scalar's from its parameter through template arguments, aliases and
    enums (an enum is passed as its integer type, an enumerator by its value: ``arg act = GELU``), or from
    the annotation's ``arg n: TYPE = ...``; a buffer's written type of the file's own (``real[N]``) resolved
    the same way. A type that resolves to nothing is an error at its line (the annotation's, else the
    kernel's), never a silent float."""
    kline = kernel.start_line + 1
    inf_types = inf_types or {}
    out: list[ArgSpec] = []
    for a in args:
        p = kernel.param(a.name)
        written = ann.types.get(a.name) if ann.args.get(a.name) is a else None
        line = a.line if a.source in ("annotation", "guessed") and a.line is not None else kline
        if a.is_buffer:
            if not a.dtype and written is not None:
                dtype = scope.dtype(written)
                if dtype is None:
                    raise SpecError(file, line, f"unknown element type `{written}` for `{a.name}`",
                                    "write a C or numpy type (float, half, double, int, unsigned, int64, uint8, "
                                    "...) or a typedef, `using` or enum of this file")
                dist = a.distribution if a.distribution is not None or a.role is Role.OUT \
                    else default_distribution(dtype)
                a = replace(a, dtype=dtype, distribution=dist)
            out.append(a)
            continue
        declared = scope.dtype(p.type) if p is not None else None
        value = with_enumerators(a.value, enum_values) if a.value is not None else None
        if written is not None:
            dtype = scope.dtype(written)
            if dtype is None:
                raise SpecError(file, line, f"unknown type `{written}` for `{a.name}`",
                                f"write `// @warpforge arg {a.name}: TYPE = ...` with a C or numpy type "
                                "(int, float, uint8, ...) or a typedef, `using` or enum of this file")
            if declared is not None and declared != dtype:
                ptext = " ".join(p.text.split()) if p is not None else a.name
                raise SpecError(file, line, f"`{a.name}` is declared `{ptext}` ({declared}) but its annotation "
                                            f"says {C_SPELLING.get(dtype, dtype)}",
                                f"write `// @warpforge arg {a.name} = {a.value}` (its type comes from the kernel)")
        else:
            # an annotated value of a parameter only inference can type (an empty functor: one byte) keeps
            # inference's type
            inferred = inf_types.get(a.name, "")
            dtype = declared or a.dtype or inferred
        if not dtype:
            ptype = p.type if p is not None else "?"
            raise SpecError(file, line, f"cannot tell the type of `{a.name}` (`{scope.unresolved(ptype)}`)",
                            type_fix(a.name, ptype, scope, kernel))
        out.append(replace(a, dtype=dtype, value=value))
    return out


def _check_element_types(src: SourceText, kernel: Kernel, args: Iterable[ArgSpec],
                         template_args: tuple[str, ...], file: str, scope: TypeScope | None = None) -> None:
    """An annotated buffer's element type must be its parameter's: ``int[N]`` for a ``float*`` would fill the
    buffer with integers' bytes and compare floats' bits as integers, a verdict about another program."""
    for a in args:
        if not a.is_buffer:
            continue
        want = param_dtype(src, kernel, a.name, template_args, scope)
        if want is None or want == a.dtype:
            continue
        p = kernel.param(a.name)
        declared = " ".join(p.text.split()) if p is not None else a.name
        ctype = C_SPELLING.get(want, want)
        raise SpecError(file, a.line,
                        f"`{a.name}` is declared `{declared}` ({want} elements) but its annotation says "
                        f"{C_SPELLING.get(a.dtype, a.dtype)} elements",
                        f"write `// @warpforge arg {a.name}: {a.role.value} {ctype}[{a.count}]` "
                        "(a distribution, if any, after it)")


def build_spec(src: SourceText, model: FileModel, kernel: Kernel, file: str,
               limits: LaunchLimits = DEFAULT_LIMITS, host: HostFile | None = None,
               searched: bool = False) -> KernelSpec:
    """The effective spec of ``kernel``; raises ``SpecError`` naming file:line and the fix.

    ``limits`` are the target GPU's (grid, block, shared memory, memory): a spec it cannot launch is an
    error at its line now, not a launch failure of every candidate later. ``host`` is another file of the
    project that launches the kernel (``spec.elsewhere``), read when this file has no launch of it."""
    ann = parse_annotation(src, kernel, file)
    inf = infer(src, model, kernel, file, ann.template_args, host, searched)
    kline = kernel.start_line + 1
    sizes: dict[str, SizeSpec] = {s.name: s for s in inf.sizes}
    for s in ann.sizes:
        sizes[s.name] = s
    args: list[ArgSpec] = []
    for p in kernel.params:
        a = ann.args.get(p.name) or inf.args.get(p.name)
        if a is None:
            syntax = _syntax_error(src, model, kernel, file)
            if syntax is not None:
                raise syntax
            why = inf.problems.get(p.name) or inf.problems.get("*") or (
                f"cannot infer {'the length' if p.is_pointer else 'the value'} of `{p.name}`: "
                f"no launch of `{kernel.name}` in {inf.nowhere}")
            raise _failed(file, kline, why, kernel, inf, ann, src)
        args.append(a)
    scope = kernel_scope(src, model, kernel, file, ann.template_args or inf.template_args)
    enum_values = file_enumerators(src, model, file)
    args = _resolve_types(args, ann, scope, enum_values, kernel, file,
                          {n: a.dtype for n, a in inf.args.items() if not a.is_buffer})
    _check_element_types(src, kernel, [a for a in args if ann.args.get(a.name) is not None], ann.template_args
                         or inf.template_args, file, scope)
    launch: LaunchSpec | None = ann.launch or inf.launch
    if launch is None:
        why = inf.problems.get("launch") or f"no launch of `{kernel.name}` in {inf.nowhere}"
        raise _failed(file, kline, f"cannot infer the launch configuration of `{kernel.name}`: {why}", kernel, inf,
                      ann, src)
    template_args = ann.template_args or inf.template_args
    if kernel.template_params and not template_args:
        why = (inf.template_guess[1].split(": ")[0] if inf.template_guess else "no launch instantiates it")
        raise _failed(file, kline, f"`{kernel.name}` is a template and {why}", kernel, inf, ann, src)
    sizes = _with_defines(sizes, ann, args, inf)
    notes: list[str] = []
    if "template" in ann.guessed:
        notes.append(GUESSED_TEMPLATE)
    if inf.site is not None and any(a.source == "inferred" for a in args):
        notes.append(f"inferred from the launch at {inf.at(inf.site.line + 1)}")
    spec = KernelSpec(
        file=file,
        kernel=kernel.name,
        sizes=tuple(sizes.values()),
        args=tuple(args),
        launch=launch,
        tolerance=ann.tolerance,
        tunables=tuple(ann.tunables),
        template_args=tuple(template_args),
        seeds=ann.seeds or DEFAULT_SEEDS,
        flops=ann.flops,
        bytes=ann.bytes,
        notes=tuple(notes),
        reduces=_sums(src, kernel),
    )
    file_names = {n for d in model.declarations if d.kind is DeclKind.MACRO for n in d.names}
    _validate(spec, ann.lines, limits, file_names | set(enum_values), ann.template_args)
    return spec


def _sums(src: SourceText, kernel: Kernel) -> bool:
    """Whether the kernel has a serial loop over memory or a reduction (``cuda.loopclass``, the test the wide
    yardstick and the WF113 hint use): its float outputs get the dtype's default ``norm``
    (``KernelSpec.tolerance_for``). A syntactic test on the definition as written, deliberately broad: the
    ``norm`` floor scales with the output and adds nothing to an output of magnitude 1 or less."""
    return classify(src.slice(kernel.span)).counts


def _validate(spec: KernelSpec, lines: dict[str, int] | None = None,
              limits: LaunchLimits = DEFAULT_LIMITS, file_names: set[str] | None = None,
              annotated_template: tuple[str, ...] = ()) -> None:
    names = [s.name for s in spec.sizes]
    for t in spec.tunables:
        if t.name in names:
            raise SpecError(spec.file, t.line, f"`{t.name}` is both a size and a tunable", "keep one of them")
    # flops/bytes have no line in the spec itself; check their names here, where the annotation's lines are.
    known = {*names, *(t.name for t in spec.tunables)}
    _check_values(spec, known | (file_names or set()), annotated_template, (lines or {}).get("template"))
    _check_counting_sizes(spec)
    for what, text in (("flops", spec.flops), ("bytes", spec.bytes)):
        if text:
            missing = sorted(expr_parse(text).names() - known)
            if missing:
                raise SpecError(spec.file, (lines or {}).get(what), f"{what}: unknown name `{missing[0]}` in `{text}`",
                                expr_fix(text, known))
    for perturbed in (False, True):
        r = spec.resolve(perturbed=perturbed)
        for a in r.args:
            if a.count == 0 and not perturbed:
                src = spec.arg(a.name)
                raise SpecError(spec.file, src.line if src else None, f"`{a.name}` has length 0",
                                "give it a positive length")
        check_limits(spec, r, limits)


def _with_defines(sizes: dict[str, SizeSpec], ann: Annotation, args: list[ArgSpec],
                  inf: Inference) -> dict[str, SizeSpec]:
    """``sizes`` with the file's object-like ``#define``s (and other constants of the file) that the annotation's
    expressions name: `launch grid=(cdiv(NJ, DIM_X), ...)` with `#define DIM_X 32` reads DIM_X as the kernel
    is compiled with it. Such a size is ``fixed`` (the kernel's code has its value baked in) and comes first,
    so the annotation's own sizes may be computed from it."""
    texts: list[str] = [t for sz in ann.sizes for t in (sz.expr, sz.odd or "")]
    for a in args:
        if ann.args.get(a.name) is a or a.source == "annotation":
            texts += [a.count or "", a.value or ""]
            if a.distribution is not None:
                texts += [a.distribution.a, a.distribution.b]
    if ann.launch is not None:
        texts += [*ann.launch.grid, *ann.launch.block, ann.launch.smem]
    texts += [ann.flops or "", ann.bytes or ""] + [v for t in ann.tunables for v in t.values]
    tunables = {t.name for t in ann.tunables}
    env = inf.env
    found = {n: SizeSpec(n, env.defs[n], True, None, "inferred", env.lines.get(n))
             for n in env.sizes_used(texts)
             if n not in sizes and n not in tunables and n in env.toplevel}
    return {**found, **sizes} if found else sizes


def _check_values(spec: KernelSpec, known: set[str], annotated_template: tuple[str, ...],
                  template_line: int | None) -> None:
    """Tunable and template values are checked like size expressions: an expression may name only sizes,
    tunables and the file's ``#define``s and enumerators. A value is pasted into nvcc's command line or an
    instantiation, so `256 | touch ...` must be an error at its line, not an expression over names `touch`...
    A bare type name (`float`, `unsigned int`, `Square`) is a type, not an expression."""
    checks = [(t.line, f"tunable `{t.name}`", v) for t in spec.tunables for v in t.values]
    checks += [(template_line, "template argument", v) for v in annotated_template]
    for line, what, value in checks:
        if _TYPE_NAME.fullmatch(value) or (what == "template argument" and _TEMPLATE_TYPE.fullmatch(value)
                                           and value.count("<") == value.count(">")):
            continue
        try:
            missing = sorted(expr_parse(value).names() - known)
        except ExprError:
            continue  # not an expression: the annotation's own check has accepted it as a type
        if missing:
            raise SpecError(spec.file, line, f"{what}: unknown name `{missing[0]}` in `{value}`",
                            "a value is a number, a type name, or an expression over the sizes, tunables and "
                            "the file's #defines" + (f" ({', '.join(sorted(known))})" if known else ""))


def _check_counting_sizes(spec: KernelSpec) -> None:
    """A size that counts something (a buffer's length, the launch, an integer argument) must be an integer,
    reported at the size's own line: `size N = 1.5` or `size N = 1e15` (a floating-point literal) used to fail
    only later, as a non-integer operand of the launch's `cdiv`. Floating-point sizes that only feed floating-
    point arguments (`size F = 1.5`, `arg scale = F`) stay allowed."""
    uses: dict[str, str] = {}
    for a in spec.args:
        if a.is_buffer:
            for n in expr_parse(a.count or "0").names():
                uses.setdefault(n, f"the length of `{a.name}`")
        elif a.value is not None and a.dtype.startswith(("int", "uint")):
            for n in _names(a.value):
                uses.setdefault(n, f"the value of `{a.name}`")
    for text in (*spec.launch.grid, *spec.launch.block, spec.launch.smem):
        for n in _names(text):
            uses.setdefault(n, "the launch")
    deps = spec.size_deps()
    changed = True
    while changed:  # a size computed from a counting size counts too (`N = B*T`: B and T)
        changed = False
        for name, why in list(uses.items()):
            for d in deps.get(name, ()):
                if d not in uses:
                    uses[d] = why
                    changed = True
    values = spec.size_values()
    for sz in spec.sizes:
        v = values.get(sz.name)
        if sz.name in uses and isinstance(v, float):
            fix = (f"write it as an integer: `size {sz.name} = {int(v)}`" if v.is_integer() and abs(v) < 2 ** 63
                   else f"give `{sz.name}` a whole number of elements")
            kind = "a floating-point number" if v.is_integer() else "not a whole number"
            raise SpecError(spec.file, sz.line, f"size `{sz.name}` = {sz.expr} is {kind} ({v:g}), but it sets "
                                                f"{uses[sz.name]}", fix)


def _names(text: str) -> frozenset[str]:
    try:
        return expr_parse(text).names()
    except ExprError:
        return frozenset()


@dataclass(frozen=True)
class Draft:
    """A spec to write above a kernel (``warpforge spec --write``, the editor's "Add benchmark spec"), with
    which of its lines are guesses and why, and the other file it was read from, if any."""

    spec: KernelSpec
    #: ``size N`` / ``arg a`` / ``launch`` -> why no value could be inferred for that line
    guesses: dict[str, str] = field(default_factory=dict)
    #: the project file whose launch gave the values (the kernel's own file has none)
    host: HostFile | None = None
    #: scalars whose type the kernel's file alone cannot resolve (``real a`` with ``real`` known only through
    #: the host file's include): written with their type, ``arg a: float = ...``, so the block stands alone
    typed: frozenset[str] = frozenset()

    def annotation(self) -> str:
        """The block, each guessed line ending in ``// guessed: WHY`` (the parser ignores it)."""
        out = []
        for line in self.spec.to_annotation().splitlines():
            key = _line_key(line)
            name = key.removeprefix("arg ")
            a = self.spec.arg(name) if key.startswith("arg ") and name in self.typed else None
            if a is not None and not a.is_buffer:
                line = line.replace(f"arg {name} = ", f"arg {name}: {C_SPELLING.get(a.dtype, a.dtype)} = ", 1)
            why = self.guesses.get(key)
            out.append(f"{line}  // guessed: {_one_line(why)}" if why else line)
        return "\n".join(out) + "\n"

    def notice(self) -> str:
        """What the user is told after writing the block: where the values came from and which are guesses."""
        parts = []
        if self.host is not None:
            at = next((n for n in self.spec.notes if n.startswith("inferred from")), "")
            parts.append(at or f"values read from {self.host.path.name}")
        if self.guesses:
            parts.append(f"guessed, check them: {', '.join(f'`{k}`' for k in self.guesses)}")
        return "; ".join(parts)


def _line_key(line: str) -> str:
    """``// @warpforge arg x: in float[N]`` -> ``arg x``; ``// @warpforge launch ...`` -> ``launch``."""
    body = line.split(MARK, 1)[-1].strip()
    directive, _, rest = body.partition(" ")
    if directive in ("size", "arg"):
        m = re.match(r"\s*([A-Za-z_]\w*)", rest)
        return f"{directive} {m.group(1)}" if m else directive
    return directive


def _one_line(text: str) -> str:
    return " ".join(text.split())


def guess_spec(src: SourceText, model: FileModel, kernel: Kernel, file: str) -> KernelSpec:
    """``draft_spec(...).spec``: a starting-point spec for a kernel whose file alone is read."""
    return draft_spec(src, model, kernel, file).spec


def draft_spec(src: SourceText, model: FileModel, kernel: Kernel, file: str,
               host: HostFile | None = None, searched: bool = False) -> Draft:
    """A starting-point spec for ``--write`` when inference cannot finish, with its guesses.

    Whatever can be inferred or is annotated is kept (from ``host``, another file of the project that
    launches the kernel, when this file does not); the rest is the error's proposal (``proposal``: sizes
    from the launch site's expressions and the variables in scope there, lengths from the subscripts' guards,
    roles from the access analysis), or, should that not validate, an obvious guess (sizes N, 1D launch) the
    user edits. Each guessed line is named in ``Draft.guesses`` with why.
    """
    try:
        spec = build_spec(src, model, kernel, file, host=host, searched=searched)
        # lines the block still marks `// guessed` keep their remark: rewriting the block never makes a guess exact
        kept = {k: why or "not checked yet" for k, why in parse_annotation(src, kernel, file).guessed.items()}
        return _typed(Draft(spec, kept, host), src, model, kernel)
    except SpecError as e:
        # A mistake in the user's own block is reported, not papered over with a guess that would
        # overwrite it: only what inference could not finish is guessed.
        if kernel.comment_span is not None and e.line is not None and e.file == file:
            first = src.line_of(kernel.comment_span.start) + 1
            last = src.line_of(kernel.comment_span.end) + 1
            if first <= e.line <= last:
                raise
        proposed = _with_block(src, kernel, file, e.block, host, searched) if e.block else None
        if proposed is not None:
            return _typed(Draft(proposed, dict(e.guesses), host), src, model, kernel)
    ann = parse_annotation(src, kernel, file)
    inf = infer(src, model, kernel, file, ann.template_args, host, searched)
    why = f"no launch of `{kernel.name}` in {inf.nowhere}" if inf.site is None else \
        f"not inferred from the launch at {inf.at(inf.site.line + 1)}"
    guesses: dict[str, str] = {}
    sizes = {s.name: s for s in inf.sizes}
    sizes.update({s.name: s for s in ann.sizes})
    if not sizes:
        sizes["N"] = SizeSpec("N", "1 << 20", source="guessed")
        guesses["size N"] = why
    n = next(iter(sizes))
    args: list[ArgSpec] = []
    scope = kernel_scope(src, model, kernel, file, ann.template_args or inf.template_args)
    for p in kernel.params:
        a = ann.args.get(p.name) or inf.args.get(p.name)
        if a is not None and not a.dtype:  # a type left to resolve: the guess takes what can be resolved
            a = replace(a, dtype=scope.dtype(ann.types.get(p.name) or p.type) or "float32")
        if a is None:
            dtype = scope.dtype(p.type) or "float32"
            if p.is_pointer:
                role = Role.IN if p.is_const else Role.INOUT
                a = ArgSpec(p.name, role, dtype, count=n, distribution=default_distribution(dtype), source="guessed")
            else:
                a = ArgSpec(p.name, Role.SCALAR, dtype, value=n if dtype.startswith(("int", "uint")) else "1.0",
                            source="guessed")
            guesses[f"arg {p.name}"] = inf.problems.get(p.name, "").partition(": ")[2] or why
        args.append(a)
    launch = ann.launch or inf.launch
    if launch is None:
        launch = LaunchSpec((f"cdiv({n}, 256)",), ("256",), "0", "guessed")
        guesses["launch"] = inf.problems.get("launch") or why
    targs = ann.template_args or inf.template_args or (inf.template_guess[0] if inf.template_guess else tuple(
        t.default or ("float" if t.kind == "type" else "256") for t in kernel.template_params))
    if kernel.template_params and not (ann.template_args or inf.template_args):
        guesses["template"] = inf.template_guess[1] if inf.template_guess else "no launch instantiates the template"
    spec = KernelSpec(file, kernel.name, tuple(sizes.values()), tuple(args), launch, ann.tolerance,
                      tuple(ann.tunables), tuple(targs), ann.seeds or DEFAULT_SEEDS, ann.flops, ann.bytes,
                      ("guessed: check every line",), _sums(src, kernel))
    return _typed(Draft(spec, guesses, host), src, model, kernel)


def _typed(draft: Draft, src: SourceText, model: FileModel, kernel: Kernel) -> Draft:
    """``draft`` with the scalars its block must type itself (``Draft.typed``): only when read from another file,
    whose includes may resolve a type the kernel's file alone does not."""
    if draft.host is None:
        return draft
    scope = kernel_scope(src, model, kernel, draft.spec.file, draft.spec.template_args)
    typed = frozenset(a.name for a in draft.spec.args if not a.is_buffer and a.dtype
                      and (p := kernel.param(a.name)) is not None and scope.dtype(p.type) is None)
    return replace(draft, typed=typed)


def _with_block(src: SourceText, kernel: Kernel, file: str, block: tuple[str, ...],
                host: HostFile | None = None, searched: bool = False) -> KernelSpec | None:
    """The spec the file would have with ``block`` added at the end of the kernel's annotation block, what
    the block gave marked ``guessed``; None when it does not validate."""
    at = src.line_starts[src.line_of(kernel.span.start)]
    text = src.data[:at] + "".join(f"{line}\n" for line in block).encode() + src.data[at:]
    try:
        psrc = SourceText(text)
        pmodel = parse(psrc.data)
        pk = pmodel.kernel(kernel.name)
        if pk is None:
            return None
        spec = build_spec(psrc, pmodel, pk, file, host=host, searched=searched)
    except SpecError:
        return None
    named = {line.split()[3].rstrip(":") for line in block if len(line.split()) > 3}
    sizes = tuple(replace(sz, source="guessed", line=None) if sz.name in named else sz for sz in spec.sizes)
    args = tuple(replace(a, source="guessed", line=None) if a.name in named else a for a in spec.args)
    launch = spec.launch
    if any(line.startswith("// @warpforge launch") for line in block):
        launch = replace(launch, source="guessed", line=None)
    template = (GUESSED_TEMPLATE,) if any(line.startswith("// @warpforge template") for line in block) else ()
    return replace(spec, sizes=sizes, args=args, launch=launch, notes=("guessed: check every line", *template))


def load_spec(path: str | Path, kernel_name: str, text: str | None = None) -> KernelSpec:
    """Read a file and build the effective spec of one kernel in it."""
    p = Path(path)
    if text is None:
        try:
            text = read_text_regular(p, strict=True)
        except OSError as e:
            raise SpecError(str(path), None, f"cannot read the file: {e.strerror}") from e
    src = SourceText(text)
    model = parse(src.data)
    return build_spec(src, model, model.require(kernel_name, str(path)), str(path))
