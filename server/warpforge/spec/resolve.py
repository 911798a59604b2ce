"""Combine inference and the annotation block into the effective spec, and validate it.

The annotation wins field by field: a user who writes only `@warpforge size N = 4096` keeps everything
else that was inferred from the launch site. Validation resolves the spec at both the spec size and the
perturbed size, so an unknown name or a negative length is reported now, at its line, and not later in a
GPU worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..cuda.model import FileModel, Kernel
from ..cuda.normalize import file_facts
from ..cuda.parser import parse
from ..cuda.text import SourceText
from .annotations import parse_annotation
from .expr import parse as expr_parse
from .infer import infer
from .limits import DEFAULT_LIMITS, LaunchLimits, check_limits
from .model import (
    C_SPELLING,
    DEFAULT_SEEDS,
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


def _fix_for_arg(kernel: Kernel, name: str, template_args: tuple[str, ...] = ()) -> str:
    p = kernel.param(name)
    if p is not None and p.is_pointer:
        role = "in" if p.is_const else "inout"
        # The fix must be writable as is: a template type parameter is not an element type.
        subst = {t.name: a for t, a in zip(kernel.template_params, template_args, strict=False)}
        ctype = subst.get(p.type, p.type)
        if canonical_dtype(ctype) is None:
            ctype = "float"
        return f"add `// @warpforge arg {name}: {role} {ctype}[N]` above the kernel"
    return f"add `// @warpforge arg {name} = VALUE` above the kernel"


def param_dtype(src: SourceText, kernel: Kernel, name: str, template_args: tuple[str, ...] = ()) -> str | None:
    """The canonical element type of pointer parameter ``name``, or None when it cannot be known here.

    Template type parameters take the spec's template arguments; file-level typedefs and ``using`` aliases of
    scalar types are resolved the way the canonical form resolves them (``cuda.normalize.file_facts``).
    Structs, vector types (``float4``), ``void`` and types from headers stay unknown: nothing is checked."""
    p = kernel.param(name)
    if p is None or not p.is_pointer:
        return None
    subst = {t.name: a for t, a in zip(kernel.template_params, template_args, strict=False)}
    ctype = subst.get(p.type, p.type)
    dtype = canonical_dtype(ctype)
    if dtype is None:
        # Only a file that spells a type we do not know needs its typedefs (a second read of a parsed tree).
        aliased = file_facts(src.text).typedefs.get(" ".join(ctype.replace("const", " ").split()))
        dtype = canonical_dtype(aliased) if aliased is not None else None
    return dtype


def _check_element_types(src: SourceText, kernel: Kernel, args: Iterable[ArgSpec],
                         template_args: tuple[str, ...], file: str) -> None:
    """An annotated buffer's element type must be its parameter's: ``int[N]`` for a ``float*`` would fill the
    buffer with integers' bytes and compare floats' bits as integers, a verdict about another program."""
    for a in args:
        if not a.is_buffer:
            continue
        want = param_dtype(src, kernel, a.name, template_args)
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
               limits: LaunchLimits = DEFAULT_LIMITS) -> KernelSpec:
    """The effective spec of ``kernel``; raises ``SpecError`` naming file:line and the fix.

    ``limits`` are the target GPU's (grid, block, shared memory, memory): a spec it cannot launch is an
    error at its line now, not a launch failure of every candidate later."""
    ann = parse_annotation(src, kernel, file)
    inf = infer(src, model, kernel, file, ann.template_args)
    kline = kernel.start_line + 1
    sizes: dict[str, SizeSpec] = {s.name: s for s in inf.sizes}
    for s in ann.sizes:
        sizes[s.name] = s
    args: list[ArgSpec] = []
    for p in kernel.params:
        a = ann.args.get(p.name) or inf.args.get(p.name)
        if a is None:
            why = inf.problems.get(p.name) or inf.problems.get("*") or (
                f"cannot infer {'the length' if p.is_pointer else 'the value'} of `{p.name}`: "
                f"no launch of `{kernel.name}` in this file")
            raise SpecError(file, kline, why, _fix_for_arg(kernel, p.name, ann.template_args or inf.template_args))
        args.append(a)
    _check_element_types(src, kernel, ann.args.values(), ann.template_args or inf.template_args, file)
    launch: LaunchSpec | None = ann.launch or inf.launch
    if launch is None:
        why = inf.problems.get("launch") or f"no launch of `{kernel.name}` in this file"
        raise SpecError(file, kline, f"cannot infer the launch configuration of `{kernel.name}`: {why}",
                        "add `// @warpforge launch grid=(N + 255) / 256, block=256` above the kernel")
    template_args = ann.template_args or inf.template_args
    if kernel.template_params and not template_args:
        names = ", ".join(f"{t.name}=..." for t in kernel.template_params)
        raise SpecError(file, kline, f"`{kernel.name}` is a template and no launch instantiates it",
                        f"add `// @warpforge template {names}`")
    notes: list[str] = []
    if inf.site is not None and any(a.source == "inferred" for a in args):
        notes.append(f"inferred from the launch at line {inf.site.line + 1}")
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
    )
    _validate(spec, ann.lines, limits)
    return spec


def _validate(spec: KernelSpec, lines: dict[str, int] | None = None,
              limits: LaunchLimits = DEFAULT_LIMITS) -> None:
    names = [s.name for s in spec.sizes]
    for t in spec.tunables:
        if t.name in names:
            raise SpecError(spec.file, t.line, f"`{t.name}` is both a size and a tunable", "keep one of them")
    # flops/bytes have no line in the spec itself; check their names here, where the annotation's lines are.
    known = {*names, *(t.name for t in spec.tunables)}
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


def guess_spec(src: SourceText, model: FileModel, kernel: Kernel, file: str) -> KernelSpec:
    """A starting-point spec for ``--write`` when inference cannot finish: sizes N, 1D launch.

    Whatever can be inferred or is annotated is kept; the rest gets an obvious guess the user edits.
    """
    try:
        return build_spec(src, model, kernel, file)
    except SpecError as e:
        # A mistake in the user's own block is reported, not papered over with a guess that would
        # overwrite it: only what inference could not finish is guessed.
        if kernel.comment_span is not None and e.line is not None and e.file == file:
            first = src.line_of(kernel.comment_span.start) + 1
            last = src.line_of(kernel.comment_span.end) + 1
            if first <= e.line <= last:
                raise
    ann = parse_annotation(src, kernel, file)
    inf = infer(src, model, kernel, file, ann.template_args)
    sizes = {s.name: s for s in inf.sizes}
    sizes.update({s.name: s for s in ann.sizes})
    if not sizes:
        sizes["N"] = SizeSpec("N", "1 << 20", source="guessed")
    n = next(iter(sizes))
    args: list[ArgSpec] = []
    for p in kernel.params:
        a = ann.args.get(p.name) or inf.args.get(p.name)
        if a is None:
            dtype = canonical_dtype(p.type) or "float32"
            if p.is_pointer:
                role = Role.IN if p.is_const else Role.INOUT
                a = ArgSpec(p.name, role, dtype, count=n, distribution=default_distribution(dtype), source="guessed")
            else:
                a = ArgSpec(p.name, Role.SCALAR, dtype, value=n if dtype.startswith(("int", "uint")) else "1.0",
                            source="guessed")
        args.append(a)
    launch = ann.launch or inf.launch or LaunchSpec((f"cdiv({n}, 256)",), ("256",), "0", "guessed")
    targs = ann.template_args or inf.template_args or tuple(
        t.default or ("float" if t.kind == "type" else "256") for t in kernel.template_params)
    return KernelSpec(file, kernel.name, tuple(sizes.values()), tuple(args), launch, ann.tolerance,
                      tuple(ann.tunables), tuple(targs), ann.seeds or DEFAULT_SEEDS, ann.flops, ann.bytes,
                      ("guessed: check every line",))


def load_spec(path: str | Path, kernel_name: str, text: str | None = None) -> KernelSpec:
    """Read a file and build the effective spec of one kernel in it."""
    p = Path(path)
    if text is None:
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise SpecError(str(path), None, f"cannot read the file: {e.strerror}") from e
    src = SourceText(text)
    model = parse(src.data)
    return build_spec(src, model, model.require(kernel_name, str(path)), str(path))
