"""compile_flags: nvcc/ptxas options — ``-use_fast_math``, ``-maxrregcount=N``, ``-Xptxas -O3``.

Why they help:

* ``-use_fast_math`` maps ``expf``/``tanhf``/``sinf``/division/``sqrtf`` to the hardware's approximate
  instructions (``__expf``, ``MUFU``), flushes denormals to zero and drops IEEE-exact division. It can be a
  large win for transcendental-heavy kernels (GELU, softmax). It CHANGES NUMERICS: it is proposed anyway,
  because verification against the original kernel within the spec's tolerance decides whether the
  difference is acceptable — that is what verification is for. It is proposed only when the kernel does
  floating-point scalar work (float literals, math calls, float variables); for integer or pure copy
  kernels it would compile to the same code.
* ``-maxrregcount=N`` (N ∈ {32, 64}) caps registers per thread so more warps fit on an SM (65,536
  registers: 32 per thread allows full occupancy, 64 half). Proposed only when the kernel uses more than N
  registers — read from the findings' ptxas evidence (WF010/WF011) when present, otherwise from a (cached)
  compile of the candidate — and when the kernel has no ``__launch_bounds__``, which takes precedence over
  the flag. Spills it may cause are measured, not assumed.
* ``-Xptxas -O3`` is ptxas's default level, so it only changes code when something lowered it (``-G``,
  ``-Xptxas -O0..2`` in the candidate's flags); proposing it otherwise compiles to the identical SASS
  (checked with nvcc 13) and would waste an evaluation.

When it is safe: flags never change the source. ``-maxrregcount`` is semantics-preserving;
``-use_fast_math`` is gated by verification as said above. Each flag is added at most once per path.
"""

from __future__ import annotations

import re

from ...compiler.build import compile_cubin
from ...compiler.toolchain import ToolMissing
from ...cuda.candidate import Candidate
from ...cuda.extract import standalone
from ...cuda.tree import node_text, walk
from . import register
from ._util import kernel_body
from .base import Rule, RuleContext

REG_CAPS = (32, 64)
_MATH = re.compile(r"^(__)?(exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|sqrt|rsqrt|cbrt|sin|cos|tan|sincos|"
                   r"tanh|sinh|cosh|asin|acos|atan|atan2|erf|erfc|fdividef|fdiv_r[nzud])f?(_r[nzud])?$")
_FLOAT_LITERAL = re.compile(r"^(\d+\.\d*|\.\d+|\d+\.?\d*[eE][-+]?\d+)[fF]?$|^\d+[fF]$")
_FLOAT_TYPES = frozenset({"float", "double", "half", "__half", "float2", "float4", "double2", "__nv_bfloat16"})
_LOW_OPT = re.compile(r"^-O[012]$|^-G$|^--device-debug$")


def _flag_list(flags: tuple[str, ...]) -> list[str]:
    """Flags as single options (``("-Xptxas", "-O1")`` -> ``["-Xptxas -O1"]``)."""
    out: list[str] = []
    it = iter(flags)
    for f in it:
        out.append(f"{f} {next(it, '')}".strip() if f in ("-Xptxas", "--ptxas-options") else f)
    return out


def floating_point_work(ctx: RuleContext) -> bool:
    """Whether the kernel does scalar floating-point arithmetic that fast math could change."""
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return False
    if any(not p.is_pointer and p.type in _FLOAT_TYPES for p in k.params):
        return True
    body, data = got
    for n in walk(body):
        t = n.type
        if t == "number_literal" and _FLOAT_LITERAL.match(node_text(n, data)):
            return True
        if t == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and _MATH.match(node_text(fn, data)):
                return True
        if t == "declaration":
            ty = n.child_by_field_name("type")
            if ty is not None and node_text(ty, data) in _FLOAT_TYPES and not any(
                    c.type in ("pointer_declarator", "array_declarator") or (
                        c.type == "init_declarator" and (c.child_by_field_name("declarator") or c).type
                        in ("pointer_declarator", "array_declarator"))
                    for c in n.named_children):
                return True
    return False


def registers(ctx: RuleContext) -> int | None:
    """Registers per thread of the candidate: the findings' ptxas evidence, else a cached compile."""
    if "registers" in ctx.extra:
        cached = ctx.extra["registers"]
        return cached if isinstance(cached, int) else None
    regs: int | None = None
    for f in ctx.findings:
        ev = getattr(f, "evidence", None) or {}
        fk = getattr(f, "kernel", None)
        if str(getattr(f, "code", "")) in ("WF010", "WF011") and fk in (None, ctx.kernel.name) \
                and isinstance(ev.get("registers"), int):
            regs = int(ev["registers"])
            break
    if regs is None:
        defines = {t.name: t.values[0] for t in ctx.spec.tunables} | ctx.candidate.define_map()
        try:
            tu = standalone(ctx.source, ctx.model, ctx.kernel, definition=ctx.candidate.definition,
                            filename=ctx.file, instantiate=ctx.spec.template_args or None)
            res = compile_cubin(tu, arch=ctx.arch, defines=defines, flags=list(ctx.candidate.flags),
                                filename=ctx.file)
        except (ToolMissing, ValueError):
            res = None
        r = res.resources_for(ctx.kernel.name) if res is not None and res.ok else None
        regs = r.registers if r is not None else None
    ctx.extra["registers"] = regs
    return regs


class CompileFlags(Rule):
    family = "compile_flags"
    motivated_by = ("WF010", "WF011", "occupancy", "fast_math")

    def _options(self, ctx: RuleContext) -> dict[str, tuple[str, ...]]:
        k = ctx.cand_kernel
        if k is None:
            return {}
        flags = _flag_list(ctx.candidate.flags)
        out: dict[str, tuple[str, ...]] = {}
        if "-use_fast_math" not in flags and "--use_fast_math" not in flags and floating_point_work(ctx):
            out["fast_math"] = ("-use_fast_math",)
        if not any(f.startswith(("-maxrregcount", "--maxrregcount")) for f in flags) and k.launch_bounds is None:
            regs = registers(ctx)
            for cap in REG_CAPS:
                if regs is not None and regs > cap:
                    out[f"maxrregcount={cap}"] = (f"-maxrregcount={cap}",)
        lowered = any(_LOW_OPT.match(f) or re.match(r"^(-Xptxas|--ptxas-options) -O[012]$", f) for f in flags)
        if lowered and "-Xptxas -O3" not in flags:
            out["ptxas_O3"] = ("-Xptxas", "-O3")
        return out

    def variants(self, ctx: RuleContext) -> list[str]:
        return list(self._options(ctx))

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        add = self._options(ctx).get(param)
        if add is None:
            return None
        return ctx.derive(self.family, param, f"compile with {' '.join(add)}", flags=(*ctx.candidate.flags, *add))


register(CompileFlags())
