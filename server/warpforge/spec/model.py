"""The benchmark spec: everything needed to run a kernel, as plain data.

A ``KernelSpec`` keeps expressions as text (``(N + 255) / 256``) so it can be printed back as an
annotation and perturbed; ``resolve`` turns it into concrete numbers for one run (spec size or the odd,
perturbed size used to catch tail bugs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .expr import ExprError, Number, parse


class SpecError(ValueError):
    """A spec problem located in a file: ``file:line: message`` plus what to write instead."""

    def __init__(self, file: str, line: int | None, message: str, fix: str | None = None,
                 block: tuple[str, ...] = ()) -> None:
        self.file = file
        self.line = line
        self.message = message
        self.fix = fix
        #: annotation lines that, written above the kernel, give a spec that validates (when inference
        #: could not finish: ``spec.resolve.proposal``); the fix quotes them on one line
        self.block = block
        #: why each line of ``block`` that is a guess (``size N``, ``arg a``, ``launch``) could not be inferred
        self.guesses: dict[str, str] = {}
        where = f"{file}:{line}" if line is not None else file
        # One line, always: the CLI prints it as is and editors show it as a diagnostic.
        text = f"{where}: {message}" + (f"; {fix}" if fix else "")
        super().__init__(re.sub(r"\s*\n\s*", " ", text))


def expr_message(e: ExprError) -> str:
    """An expression error on one line: the evaluator's message and where in the text it is."""
    if not e.text:
        return e.message
    where = f", column {e.column + 1}" if e.column >= 0 else ""
    return f"{e.message} (in `{e.text}`{where})"


def expr_fix(text: str, known: Iterable[str]) -> str:
    """What to write instead of an expression that failed: define the unknown names, or fix the syntax."""
    try:
        missing = sorted(parse(text).names() - set(known))
    except ExprError:
        return "write a C-like arithmetic expression, e.g. `(N + 255) / 256`"
    if missing:
        return (f"define it above the kernel with `// @warpforge size {missing[0]} = ...`"
                + (f" or use one of: {', '.join(sorted(known))}" if known else ""))
    return "write an expression that is valid at both the spec size and the perturbed size"


class Role(str, Enum):
    IN = "in"
    OUT = "out"
    INOUT = "inout"
    SCALAR = "scalar"


#: canonical dtype name -> (bytes, kind) ; kind "f" float, "i" signed, "u" unsigned
DTYPES: dict[str, tuple[int, str]] = {
    "float32": (4, "f"), "float16": (2, "f"), "bfloat16": (2, "f"), "float64": (8, "f"),
    "int8": (1, "i"), "int16": (2, "i"), "int32": (4, "i"), "int64": (8, "i"),
    "uint8": (1, "u"), "uint16": (2, "u"), "uint32": (4, "u"), "uint64": (8, "u"),
}

#: C/CUDA spellings -> canonical dtype
C_TYPES: dict[str, str] = {
    "float": "float32", "double": "float64", "half": "float16", "__half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "bfloat16": "bfloat16", "bf16": "bfloat16",
    "int": "int32", "signed": "int32", "signed int": "int32", "unsigned": "uint32", "unsigned int": "uint32",
    "uint": "uint32", "long": "int64", "long long": "int64", "long int": "int64", "long long int": "int64",
    "unsigned long": "uint64", "unsigned long long": "uint64", "size_t": "uint64", "ptrdiff_t": "int64",
    "short": "int16", "unsigned short": "uint16", "char": "int8", "signed char": "int8",
    "unsigned char": "uint8", "bool": "uint8",
    "int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
    "uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
    # the long spellings (``long`` is 8 bytes on the 64-bit targets nvcc builds for) and C's ``clock_t``
    # (``long``: what ``clock()`` returns, which timing kernels store)
    "unsigned long int": "uint64", "long unsigned int": "uint64", "unsigned long long int": "uint64",
    "long long unsigned int": "uint64", "long unsigned": "uint64", "long long unsigned": "uint64",
    "short int": "int16", "signed short": "int16", "unsigned short int": "uint16", "short unsigned int": "uint16",
    "signed long": "int64", "signed long long": "int64", "clock_t": "int64", "ssize_t": "int64",
    "intptr_t": "int64", "uintptr_t": "uint64", "time_t": "int64",
    **{k: k for k in DTYPES},
    "f32": "float32", "f16": "float16", "f64": "float64", "i32": "int32", "u32": "uint32",
}

#: (rtol, atol) per dtype: |got - want| <= atol + rtol * |want|
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2), "float64": (1e-10, 1e-12),
}

#: the components of a tolerance, in the order of its tuple (``KernelSpec.tolerance_for``, ``tol`` lines)
TOL_KEYS = ("rtol", "atol", "norm")

#: the default ``norm`` per dtype for the outputs of a kernel that sums (``KernelSpec.reduces``): an element also
#: passes within ``norm * max|want|``, the largest magnitude of that output. Why: a sum of K terms added in
#: another order (a block tree, warp shuffles: every structural rewrite of a reduction) differs from the
#: sequential sum by rounding errors that scale with the terms' magnitudes, not with the result's, and where
#: terms cancel the result is far smaller than they are (darknet's bias gradient, 10 816 terms of +-1: results near
#: 0.2, reordering errors near 1.5e-4, against the default atol 1e-5; on an H200). The fixed ``atol`` assumes outputs
#: of magnitude 1; this floor follows the output's own scale. It adds nothing where outputs are at most 1 (a
#: softmax), and a wrong element — off by a term, a row, an index — is off by far more than 1e-5 of the scale.
DEFAULT_NORMS: dict[str, float] = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 4e-3, "float64": 1e-13}

DEFAULT_SEEDS = (0, 1, 2)


def canonical_dtype(ctype: str) -> str | None:
    """Canonical dtype of a C type spelling (``const`` and extra spaces ignored), or None."""
    t = " ".join(ctype.replace("const", " ").replace("volatile", " ").split())
    return C_TYPES.get(t)


def is_float(dtype: str) -> bool:
    return DTYPES[dtype][1] == "f"


@dataclass(frozen=True)
class Distribution:
    """How input values are drawn: uniform(a, b), normal(a=mean, b=std), int(a, b) in [a, b), offsets(a, b)
    (sorted, from exactly a to exactly b: CSR row pointers), const(a), zeros.

    The parameters are expressions (``int(0, NBINS)``), evaluated with the sizes of each run.
    """

    kind: str
    a: str = "0"
    b: str = "0"

    def __str__(self) -> str:
        if self.kind == "zeros":
            return "zeros"
        if self.kind == "const":
            return f"const({self.a})"
        return f"{self.kind}({self.a}, {self.b})"

    def resolve(self, env: dict[str, Number]) -> ResolvedDistribution:
        return ResolvedDistribution(self.kind, float(parse(self.a).evaluate(env)),
                                    float(parse(self.b).evaluate(env)))


@dataclass(frozen=True)
class ResolvedDistribution:
    kind: str
    a: float
    b: float


def default_distribution(dtype: str) -> Distribution:
    return Distribution("uniform", "-1", "1") if is_float(dtype) else Distribution("int", "0", "100")


@dataclass(frozen=True)
class SizeSpec:
    name: str
    expr: str
    fixed: bool = False
    odd: str | None = None
    source: str = "annotation"
    line: int | None = None


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument. Buffers have ``count``; scalars have ``value``."""

    name: str
    role: Role
    dtype: str
    count: str | None = None
    value: str | None = None
    distribution: Distribution | None = None
    align: int = 16
    source: str = "annotation"
    line: int | None = None
    #: this output's own (rtol, atol, norm) (``arg dw: out float[C] tol atol=2e-3``); a component left None
    #: takes the spec's default for this argument (the spec-level ``tol``, else the dtype's)
    tol: tuple[float | None, float | None, float | None] | None = None

    @property
    def is_buffer(self) -> bool:
        return self.role is not Role.SCALAR

    @property
    def writable(self) -> bool:
        return self.role in (Role.OUT, Role.INOUT)


@dataclass(frozen=True)
class LaunchSpec:
    grid: tuple[str, ...]
    block: tuple[str, ...]
    smem: str = "0"
    source: str = "annotation"
    line: int | None = None


@dataclass(frozen=True)
class Tunable:
    name: str
    values: tuple[str, ...]
    line: int | None = None


@dataclass(frozen=True)
class ResolvedArg:
    name: str
    role: Role
    dtype: str
    count: int | None
    value: Number | None
    distribution: ResolvedDistribution | None
    align: int


@dataclass(frozen=True)
class ResolvedSpec:
    """Concrete numbers for one run."""

    sizes: dict[str, Number]
    args: tuple[ResolvedArg, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    defines: dict[str, str]
    perturbed: bool
    flops: float | None
    bytes: float | None

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


#: the note of a spec whose template arguments are guesses (they have no source of their own)
GUESSED_TEMPLATE = "guessed: template"

#: what ``KernelSpec.small_sizes`` aims for (bytes over all buffers) and the smallest base size it makes
SMALL_BYTES = 16 << 20
SMALL_MIN = 33
#: the multiples a perturbed size is kept to, smallest first (the most tails still met): where the launch was
#: written for whole blocks (``KernelSpec.launch_alignment``), and where the original fails at the plain
#: perturbed size only (``Evaluator._aligned_baseline``)
TAIL_ALIGNMENTS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _elem_bytes(dtype: str) -> int:
    """Bytes of a canonical element type (``float32`` 4, ``bfloat16`` 2, ``uint8`` 1)."""
    m = re.search(r"(\d+)$", dtype)
    return max(1, int(m.group(1)) // 8) if m else 4


@dataclass(frozen=True)
class KernelSpec:
    file: str
    kernel: str
    sizes: tuple[SizeSpec, ...]
    args: tuple[ArgSpec, ...]
    launch: LaunchSpec
    tolerance: tuple[float, float, float] | None = None
    tunables: tuple[Tunable, ...] = ()
    template_args: tuple[str, ...] = ()
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    flops: str | None = None
    bytes: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: the kernel has a serial loop over memory or a reduction (``cuda.loopclass``): its float outputs may be
    #: sums whose rounding depends on the order of addition, so they get the dtype's default ``norm``
    reduces: bool = False

    # ----------------------------------------------------------------- queries
    @property
    def guessed(self) -> tuple[str, ...]:
        """The lines whose values are guesses nobody has checked (``size N``, ``arg x``, ``launch``,
        ``template``): what "Add benchmark spec" completed with ``spec.guess`` and marked ``// guessed:``.
        Empty for an exact spec (inferred, annotated and checked, or both), so tools count the two apart."""
        out = [f"size {s.name}" for s in self.sizes if s.source == "guessed"]
        out += [f"arg {a.name}" for a in self.args if a.source == "guessed"]
        if self.launch.source == "guessed":
            out.append("launch")
        if GUESSED_TEMPLATE in self.notes:
            out.append("template")
        return tuple(out)

    def arg(self, name: str) -> ArgSpec | None:
        return next((a for a in self.args if a.name == name), None)

    def tolerance_for(self, arg: ArgSpec) -> tuple[float, float, float]:
        """(rtol, atol, norm) the comparison uses for ``arg``: its own ``tol`` where given, else the spec-level
        ``tol``, else the dtype's default. One atomic sum's loose tolerance loosens only that output.

        An element passes when ``|got - want| <= atol + rtol * |want| + norm * max|want|`` (``max|want|`` the
        largest finite magnitude of that output in the original's run). The dtype's default ``norm`` applies
        to a kernel that sums (``reduces``) where the spec writes no ``tol`` at all: a spec-level ``tol`` is the
        user's whole statement, so a component it leaves out is 0."""
        if self.tolerance is not None:
            base = self.tolerance
        else:
            rtol, atol = DEFAULT_TOLERANCES.get(arg.dtype, (0.0, 0.0))
            base = (rtol, atol, DEFAULT_NORMS.get(arg.dtype, 0.0) if self.reduces else 0.0)
        if arg.tol is None:
            return base
        own = arg.tol
        return (base[0] if own[0] is None else own[0], base[1] if own[1] is None else own[1],
                base[2] if own[2] is None else own[2])

    @property
    def symbolic(self) -> bool:
        """True when at least one size changes at the perturbed size: a base size that no fixed size holds,
        a size with ``odd=``, or a size derived from one of those."""
        deps = self.size_deps()
        held = self.held_sizes()
        changes: dict[str, bool] = {}
        for s in self.sizes:
            changes[s.name] = s.name not in held and (
                s.odd is not None or not deps[s.name] or any(changes.get(d, False) for d in deps[s.name]))
        return any(changes.values())

    # ----------------------------------------------------------------- resolution
    def size_deps(self) -> dict[str, frozenset[str]]:
        """The sizes each size's expression names directly (an expression that fails to parse names none)."""
        names = {s.name for s in self.sizes}
        deps: dict[str, frozenset[str]] = {}
        for s in self.sizes:
            try:
                deps[s.name] = frozenset(parse(s.expr).names() & names)
            except ExprError:
                deps[s.name] = frozenset()
        return deps

    def held_sizes(self) -> dict[str, str]:
        """Sizes that keep their value at the perturbed size, each with the fixed size that holds it.

        A ``fixed`` size holds itself, and it holds every size its expression depends on (transitively):
        ``size N = B*T fixed`` can only keep its value if ``B`` and ``T`` keep theirs, and a derived size that
        disagreed with its own expression would not be the size the kernel is told about.
        """
        deps = self.size_deps()
        held: dict[str, str] = {}
        for s in self.sizes:
            if not s.fixed:
                continue
            todo = [s.name]
            while todo:
                n = todo.pop()
                if n in held:
                    continue
                held[n] = s.name
                todo.extend(deps.get(n, ()))
        return held

    def perturbation(self) -> dict[str, str]:
        """How each size changes at the perturbed size, in words (what ``warpforge spec`` prints):
        ``fixed``, ``kept: N is fixed``, ``odd=EXPR``, ``perturbed`` (a base size: about 10 % smaller, odd)
        or ``derived from B, T`` (its expression over the perturbed sizes, never perturbed again)."""
        deps = self.size_deps()
        held = self.held_sizes()
        out: dict[str, str] = {}
        for s in self.sizes:
            if s.name in held:
                out[s.name] = "fixed" if held[s.name] == s.name else f"kept: `{held[s.name]}` is fixed"
            elif s.odd is not None:
                out[s.name] = f"odd={s.odd}"
            elif deps[s.name]:
                out[s.name] = "derived from " + ", ".join(sorted(deps[s.name]))
            else:
                out[s.name] = "perturbed"
        got = self.launch_alignment()
        if got is not None:
            for name in got[1]:
                if out.get(name) == "perturbed":
                    out[name] = f"perturbed, kept a multiple of {got[0]} (the launch divides it into whole blocks)"
        return out

    def size_values(self, perturbed: bool = False, tunables: dict[str, str] | None = None,
                    base: dict[str, int] | None = None) -> dict[str, Number]:
        """The sizes of one run. At the perturbed size, base sizes (whose expression names no other size) are
        perturbed once and derived sizes are computed from them: ``N = B*T`` is the product of the perturbed
        ``B`` and ``T``, not that product perturbed again. ``odd=`` wins over both; ``fixed`` sizes, and every
        size a fixed size is computed from, keep their spec value. Where the launch was written for whole
        blocks (``launch_alignment``), the perturbed base sizes are kept multiples of its alignment."""
        if perturbed and base is None:
            got = self.launch_alignment(tunables)
            if got is not None:
                base = got[1]
        return self._size_values(perturbed, tunables, base)

    def launch_alignment(self, tunables: dict[str, str] | None = None) -> tuple[int, dict[str, int]] | None:
        """(alignment, base sizes) where the launch's grid divides a size exactly at the spec size and not at the
        plain perturbed one; None elsewhere (no such division, or it stays exact, or no alignment helps).

        Why: ``grid = (wA / 16, hA / 16)`` — a division not rounded up — is the author saying the sizes are
        whole blocks: at a perturbed size that is not, the launch leaves the last rows without a thread, and a
        tile loop reads past its arrays (the original too: verifying against it there checks nothing, and
        compute-sanitizer rejects every variant that reads what it reads). So the perturbed base sizes are
        kept multiples of a power of two from 4 to 1024 (the smallest that makes every such division exact and
        still changes a size): a candidate still meets a second size, one that the original's launch supports."""
        if not self.symbolic:
            return None
        spec_env = self._size_values(False, tunables, None)

        def divisions(env: dict[str, Number]) -> list[tuple[Number, Number]]:
            out: list[tuple[Number, Number]] = []
            for text in self.launch.grid:
                with contextlib.suppress(ExprError):
                    out.extend(parse(text).divisions(env))
            return out

        whole = [i for i, (a, b) in enumerate(divisions(spec_env))
                 if isinstance(a, int) and isinstance(b, int) and b > 1 and a > 0 and a % b == 0]
        if not whole:
            return None

        def exact(env: dict[str, Number]) -> bool:
            got = divisions(env)
            return len(got) == len(divisions(spec_env)) and all(
                isinstance(got[i][0], int) and isinstance(got[i][1], int) and got[i][1] > 0
                and int(got[i][0]) > 0 and int(got[i][0]) % int(got[i][1]) == 0 for i in whole)

        try:
            if exact(self._size_values(True, tunables, None)):
                return None
            spec_bases = self._size_values(False, None, None)
            for align in TAIL_ALIGNMENTS:
                bases = self.aligned_bases(align)
                if not bases or all(spec_bases.get(k) == v for k, v in bases.items()):
                    continue
                if exact(self._size_values(True, tunables, bases)):
                    return align, bases
        except SpecError:
            return None
        return None

    def _size_values(self, perturbed: bool, tunables: dict[str, str] | None,
                     base: dict[str, int] | None) -> dict[str, Number]:
        env: dict[str, Number] = {}
        for t in self.tunables:
            raw = (tunables or {}).get(t.name, t.values[0])
            # A non-numeric tunable (a type, a flag) is a define only, not an arithmetic name.
            with contextlib.suppress(ExprError):
                env[t.name] = parse(str(raw)).evaluate({})
        deps = self.size_deps() if perturbed else {}
        held = self.held_sizes() if perturbed else {}
        for s in self.sizes:
            try:
                v = parse(s.expr).evaluate(env)
            except ExprError as e:
                raise SpecError(self.file, s.line, f"size `{s.name}`: {expr_message(e)}",
                                expr_fix(s.expr, env)) from e
            if perturbed and s.name not in held:
                if s.odd is not None:
                    try:
                        v = parse(s.odd).evaluate({**env, s.name: v})
                    except ExprError as e:
                        raise SpecError(self.file, s.line, f"odd size of `{s.name}`: {expr_message(e)}",
                                        expr_fix(s.odd, {**env, s.name: v})) from e
                elif isinstance(v, int) and not deps[s.name]:
                    v = base[s.name] if base and s.name in base else perturb(v)
            env[s.name] = v
        return env

    def resolve(self, perturbed: bool = False, tunables: dict[str, str] | None = None,
                base: dict[str, int] | None = None) -> ResolvedSpec:
        """Concrete numbers for one run: the spec size, or the perturbed size (``perturbed``); ``base`` sets
        perturbable base sizes to given values at the perturbed size (``small_sizes``: a smaller problem)."""
        env = self.size_values(perturbed or bool(base), tunables, base)
        args: list[ResolvedArg] = []
        for a in self.args:
            count: int | None = None
            value: Number | None = None
            dist: ResolvedDistribution | None = None
            if a.is_buffer:
                count = int(self._eval(a.count or "0", env, a.line, f"length of `{a.name}`"))
                if count < 0:
                    raise SpecError(self.file, a.line, f"length of `{a.name}` is negative ({count})"
                                    + (" at the perturbed size" if perturbed else ""),
                                    "make the length expression positive for every size (see `size ... odd=`)")
                if a.distribution is not None:
                    try:
                        dist = a.distribution.resolve(env)
                    except ExprError as e:
                        raise SpecError(self.file, a.line, f"distribution of `{a.name}`: {expr_message(e)}",
                                        expr_fix(f"{a.distribution.a} + {a.distribution.b}", env)) from e
                    if dist.kind == "offsets" and dist.b < dist.a:
                        raise SpecError(self.file, a.line, f"`{a.distribution}` of `{a.name}` ends below its start"
                                        + (" at the perturbed size" if perturbed else ""),
                                        "offsets rise from the first number to the second")
                    if dist.kind in ("uniform", "int") and dist.b <= dist.a:
                        raise SpecError(self.file, a.line, f"`{a.distribution}` of `{a.name}` is an empty range",
                                        "the second number must be larger than the first")
            else:
                value = self._eval(a.value or "0", env, a.line, f"value of `{a.name}`")
            args.append(ResolvedArg(a.name, a.role, a.dtype, count, value, dist, a.align))
        grid = self._dims(self.launch.grid, env, "grid", perturbed)
        block = self._dims(self.launch.block, env, "block", perturbed)
        smem = int(self._eval(self.launch.smem, env, self.launch.line, "dynamic shared memory"))
        defines = {t.name: str((tunables or {}).get(t.name, t.values[0])) for t in self.tunables}
        flops = float(self._eval(self.flops, env, None, "flops")) if self.flops else None
        nbytes = float(self._eval(self.bytes, env, None, "bytes")) if self.bytes else None
        return ResolvedSpec(env, tuple(args), grid, block, smem, defines, perturbed, flops, nbytes)

    def aligned_bases(self, align: int, start: dict[str, int] | None = None) -> dict[str, int]:
        """The perturbable base sizes (not fixed, not held by a fixed size, no ``odd=``) of the perturbed size
        (or of ``start``), each rounded down to a multiple of ``align`` — or of the largest power of two that
        divides its spec value, where that is smaller — and kept at its spec value where rounding leaves
        nothing. Why: a kernel written for whole blocks (no tail guard) or whole vectors writes outside its
        buffers, or faults, at the plain perturbed size; it is correct at sizes with the spec's divisibility,
        and a candidate checked at a second such size still meets a size the spec did not name
        (``Evaluator._aligned_baseline``)."""
        deps, held = self.size_deps(), self.held_sizes()
        spec = self.size_values()
        now = start if start is not None else self._size_values(True, None, None)
        out: dict[str, int] = {}
        for s in self.sizes:
            v, p = spec.get(s.name), now.get(s.name)
            if s.name in held or s.odd is not None or deps[s.name] or not isinstance(v, int) \
                    or not isinstance(p, int) or v <= 0:
                continue
            g = min(align, v & -v)
            q = (p // g) * g
            # rounding left nothing: a perturbed size keeps its spec value; a small (sanitizer) size takes one
            # multiple, the smallest size with the spec's divisibility
            out[s.name] = q if q > 0 else (g if start is not None else v)
        return out

    def small_sizes(self, max_bytes: int = SMALL_BYTES) -> dict[str, int] | None:
        """Base sizes for a small run of the same kernel (what compute-sanitizer checks: it runs a kernel ~40x
        slower, so a 1.65 GB problem would take minutes), or None when the perturbed size is small already.

        Starting from the perturbed size, the largest base size that the perturbation may change (not fixed,
        not held by a fixed size, no ``odd=``) is divided by 4 and made odd again, until the buffers hold at
        most ``max_bytes`` or no size can shrink below ``SMALL_MIN``: tails and odd remainders stay, as at the
        perturbed size. Derived sizes follow; a shrink that makes the spec unusable is not taken.
        """
        deps, held = self.size_deps(), self.held_sizes()
        env = self.size_values(perturbed=True)
        cur = {s.name: int(env[s.name]) for s in self.sizes
               if s.name not in held and s.odd is None and not deps[s.name] and isinstance(env[s.name], int)}

        def total(sizes: dict[str, int]) -> int:
            r = self.resolve(perturbed=True, base=sizes)
            return sum(int(a.count or 0) * _elem_bytes(a.dtype) for a in r.args if a.count is not None)

        try:
            now = total(cur)
        except SpecError:
            return None
        changed = False
        while now > max_bytes:
            name = max((n for n, v in cur.items() if v > SMALL_MIN), key=lambda n: cur[n], default=None)
            if name is None:
                break
            trial = {**cur, name: perturb(max(SMALL_MIN, cur[name] // 4))}
            try:
                now = total(trial)
            except SpecError:
                break
            cur, changed = trial, True
        if changed:
            got = self.launch_alignment()
            if got is not None:  # the small run keeps the whole blocks the launch was written for
                cur = {**cur, **self.aligned_bases(got[0], start=cur)}
        return cur if changed else None

    def _eval(self, text: str, env: dict[str, Number], line: int | None, what: str) -> Number:
        try:
            return parse(text).evaluate(env)
        except ExprError as e:
            raise SpecError(self.file, line, f"{what}: {expr_message(e)}", expr_fix(text, env)) from e

    def _dims(
        self, exprs: tuple[str, ...], env: dict[str, Number], what: str, perturbed: bool = False
    ) -> tuple[int, int, int]:
        vals = [int(self._eval(e, env, self.launch.line, what)) for e in exprs]
        while len(vals) < 3:
            vals.append(1)
        if any(v < 1 for v in vals):
            raise SpecError(self.file, self.launch.line, f"{what} {tuple(vals)} has a dimension below 1"
                            + (" at the perturbed size" if perturbed else ""),
                            "round up, e.g. `cdiv(N, 256)` rather than `N / 256`")
        return vals[0], vals[1], vals[2]

    # ----------------------------------------------------------------- output
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for a, arg in zip(d["args"], self.args, strict=True):
            a["role"] = arg.role.value
            a["distribution"] = None if arg.distribution is None else str(arg.distribution)
        return d

    def spec_hash(self) -> str:
        """Stable hash of what determines a measurement (not where the spec came from)."""
        d = self.to_json()
        for key in ("file", "notes"):
            d.pop(key, None)
        for group in ("sizes", "args"):
            for item in d[group]:
                item.pop("source", None)
                item.pop("line", None)
        d["launch"].pop("source", None)
        d["launch"].pop("line", None)
        for t in d["tunables"]:
            t.pop("line", None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def to_annotation(self) -> str:
        """The spec as an annotation block (see docs/spec-format.md)."""
        p = "// @warpforge "
        lines = []
        for s in self.sizes:
            extra = " fixed" if s.fixed else (f" odd={s.odd}" if s.odd else "")
            lines.append(f"{p}size {s.name} = {s.expr}{extra}")
        for a in self.args:
            if a.is_buffer:
                dist = f" {a.distribution}" if a.distribution and a.role is not Role.OUT else ""
                align = f" align={a.align}" if a.align != 16 else ""
                ctype = C_SPELLING.get(a.dtype, a.dtype)
                tol = "" if a.tol is None else " tol" + "".join(
                    f" {k}={number_text(v)}" for k, v in zip(TOL_KEYS, a.tol, strict=True) if v is not None)
                lines.append(f"{p}arg {a.name}: {a.role.value} {ctype}[{a.count}]{dist}{align}{tol}")
            else:
                lines.append(f"{p}arg {a.name} = {a.value}")
        lines.append(f"{p}launch {_launch_text(self.launch)}")
        if self.tolerance is not None:
            norm = f" norm={number_text(self.tolerance[2])}" if self.tolerance[2] else ""
            lines.append(f"{p}tol rtol={number_text(self.tolerance[0])} atol={number_text(self.tolerance[1])}{norm}")
        for t in self.tunables:
            lines.append(f"{p}tune {t.name} = {', '.join(t.values)}")
        if self.template_args:
            lines.append(f"{p}template {', '.join(self.template_args)}")
        if self.seeds != DEFAULT_SEEDS:
            lines.append(f"{p}seeds {', '.join(map(str, self.seeds))}")
        if self.flops:
            lines.append(f"{p}flops {self.flops}")
        if self.bytes:
            lines.append(f"{p}bytes {self.bytes}")
        return "\n".join(lines) + "\n"


#: how annotations spell the common dtypes (the way the kernel's C code does); others stay canonical
C_SPELLING = {"float32": "float", "float64": "double", "float16": "half", "int32": "int", "uint32": "unsigned"}


def _dims_text(d: tuple[str, ...]) -> str:
    return d[0] if len(d) == 1 else "(" + ", ".join(d) + ")"



def number_text(x: float) -> str:
    """A number as people write it in a spec: ``1e-5``, ``1e-4``, ``0.05``, ``2`` (Python's ``1e-05`` and
    ``0.0001`` are not how tolerances are written, and rewriting a user's ``1e-5`` as ``1e-05`` dirtied a
    spec that said the same thing). Small and large magnitudes in short scientific form, others as %g."""
    if x == 0 or 1e-2 <= abs(x) < 1e5:
        return f"{x:g}"
    mant, _, exp = f"{x:.12e}".partition("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"

def _launch_text(launch: LaunchSpec) -> str:
    smem = f", smem={launch.smem}" if launch.smem not in ("0", "") else ""
    return f"grid={_dims_text(launch.grid)}, block={_dims_text(launch.block)}{smem}"


def perturb(v: int) -> int:
    """A smaller odd size: about 10 % less, made odd, at least 1 — exercises tails and odd remainders."""
    if v <= 2:
        return v
    p = v - max(1, v // 10)
    return p if p % 2 else p - 1 if p > 1 else 1

