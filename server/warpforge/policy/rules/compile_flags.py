"""compile_flags: register caps as source (``__launch_bounds__``), and ``-Xptxas -O3`` as the one build change.

Why they help:

* A register cap (what ``-maxrregcount=N``, N in {32, 64}, did) lets more warps fit on an SM (65,536
  registers: 32 per thread allows full occupancy, 64 half). A flag lives in the project's build, which an
  accepted variant never changes (issue 18, item 2), and it caps every kernel of the unit; so the cap is
  written on the kernel: ``__launch_bounds__(T, MINBLOCKS)`` with T the launch's constant block and
  MINBLOCKS = 65536 / (T x N), which makes ptxas keep at most 65536 / (T x MINBLOCKS) registers, the tightest
  cap a launch bound can state at or above N. (``__maxnreg__(N)`` states N itself, but the source model's
  grammar does not read it, and nvcc refuses it next to a ``__launch_bounds__``.) Proposed only when the kernel
  uses more than N registers (the findings' ptxas evidence WF010/WF011, else a cached compile), has no
  ``__launch_bounds__`` yet, and its block is a constant whose MINBLOCKS blocks fit an SM's thread slots.
* ``-Xptxas -O3`` is ptxas's default level, so it only changes code when something lowered it (``-G``,
  ``-Xptxas -O0..2`` in the candidate's flags); proposing it otherwise compiles to the identical SASS
  (checked with nvcc 13) and would waste an evaluation. It is a flag and stays one: a variant carrying it is
  a build change (``Candidate.build_flags``), labelled so wherever it is shown and never applied silently.

``-use_fast_math`` moved to its own rule, ``fast_math``, which writes the intrinsics into the source.

When it is safe: a register cap is semantics-preserving (spills it may cause are measured, not assumed);
a bound equal to the launch's block cannot make the launch fail.
"""

from __future__ import annotations

import re

from ...compiler.build import compile_cubin
from ...compiler.toolchain import ToolMissing
from ...cuda.candidate import Candidate
from ...cuda.extract import standalone
from ...cuda.rewrite import apply_edits, set_launch_bounds
from ...profile.analyzers.resources import max_threads_per_sm
from . import register
from ._util import MAX_BLOCK_THREADS, constant_block
from .base import Rule, RuleContext

REG_CAPS = (32, 64)
REGISTERS_PER_SM = 65536
_LOW_OPT = re.compile(r"^-O[012]$|^-G$|^--device-debug$")


def _flag_list(flags: tuple[str, ...]) -> list[str]:
    """Flags as single options (``("-Xptxas", "-O1")`` -> ``["-Xptxas -O1"]``)."""
    out: list[str] = []
    it = iter(flags)
    for f in it:
        out.append(f"{f} {next(it, '')}".strip() if f in ("-Xptxas", "--ptxas-options") else f)
    return out


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
        lowered = any(_LOW_OPT.match(f) or re.match(r"^(-Xptxas|--ptxas-options) -O[012]$", f) for f in flags)
        if lowered and "-Xptxas -O3" not in flags:
            out["ptxas_O3"] = ("-Xptxas", "-O3")
        return out

    def register_caps(self, ctx: RuleContext) -> dict[str, tuple[int, int]]:
        """``regcap=N`` -> (block threads, MINBLOCKS) of the ``__launch_bounds__`` that caps registers near N."""
        k = ctx.cand_kernel
        if k is None or k.launch_bounds is not None or any(
                f.startswith(("-maxrregcount", "--maxrregcount")) for f in ctx.candidate.flags):
            return {}
        dims = constant_block(ctx)
        if dims is None:
            return {}
        threads = dims[0] * dims[1] * dims[2]
        if not 0 < threads <= MAX_BLOCK_THREADS:
            return {}
        regs = registers(ctx)
        out: dict[str, tuple[int, int]] = {}
        for cap in REG_CAPS:
            blocks = max(1, REGISTERS_PER_SM // (threads * cap))
            if regs is not None and regs > cap and threads * blocks <= max_threads_per_sm(ctx.arch):
                out[f"regcap={cap}"] = (threads, blocks)
        return out

    def variants(self, ctx: RuleContext) -> list[str]:
        return [*self.register_caps(ctx), *self._options(ctx)]

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        cap = self.register_caps(ctx).get(param)
        k = ctx.cand_kernel
        if cap is not None and k is not None:
            threads, blocks = cap
            edit = set_launch_bounds(ctx.cand_src, k, threads, blocks if blocks > 1 else None)
            return ctx.derive(self.family, param,
                              f"cap registers at {REGISTERS_PER_SM // (threads * blocks)} per thread with "
                              f"__launch_bounds__({threads}{f', {blocks}' if blocks > 1 else ''}) (what "
                              f"-maxrregcount={param.split('=')[1]} did, in the source)",
                              definition=apply_edits(ctx.cand_src, [edit]))
        add = self._options(ctx).get(param)
        if add is None:
            return None
        return ctx.derive(self.family, param, f"build change: compile with {' '.join(add)}",
                          flags=(*ctx.candidate.flags, *add))


register(CompileFlags())
