"""WF107: integer division or modulo by a runtime value on the kernel's per-element path.

GPUs have no integer divider: ``a / b`` with a runtime 32-bit ``b`` compiles to a reciprocal in floating
point (``I2F``, ``MUFU.RCP``, ``F2I``) and a Newton correction — about 20 instructions, a 64-bit one to a
~70-instruction subroutine — where a multiply-add would do. Index arithmetic such as
``row = idx / cols; col = idx % cols`` runs once per element, so in a light (memory-bound) kernel it can
become a visible share of the issued instructions. A compile-time divisor is cheap (the compiler turns it
into a multiply-high and a shift, for any constant, power of two or not), so it is not reported.

The rule for "per-element path" (documented in docs/findings.md):
- inside a loop, when an operand changes from one iteration to the next (a loop-invariant division is
  hoisted out of the loop by the compiler, so it is not reported);
- outside loops only in a kernel that has no loops at all: there each thread's straight-line code *is* its
  per-element work. In a kernel with loops, a division outside them is once-per-thread setup, amortized
  over the loop, and not reported.

The fix families (action ``index_math``): a 2D/3D launch that gives the row and column directly, a
compile-time divisor (template parameter or macro), a precomputed fast divider (multiply-high by a
magic number, as PyTorch's ``IntDivider``), or shifts and masks when the spec's size is a power of two
and the code may require it.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...cuda.tree import walk
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from . import analyzer
from ._facts import LOOP, KernelFacts, facts, line_opcodes

define("WF107", "integer division/modulo by a runtime value in index arithmetic", Severity.INFO, "source",
       "index_math")

_DIV_OPS = {"/": "division", "%": "modulo", "/=": "division", "%=": "modulo"}


def _operands(f: KernelFacts, node: Node) -> tuple[str, Node | None, Node | None] | None:
    op = node.child_by_field_name("operator")
    if op is None:
        return None
    o = f.text(op)
    if o not in _DIV_OPS:
        return None
    return o.rstrip("="), node.child_by_field_name("left"), node.child_by_field_name("right")


@analyzer("index-math", ("WF107",), needs=("source",))
def index_math(ctx: KernelContext) -> Iterator[Finding]:
    f = facts(ctx)
    has_loops = bool(f.loops)
    groups: dict[tuple[str, str], list[tuple[Node, str, Node | None]]] = {}
    for n in f.nodes:
        if n.type not in ("binary_expression", "assignment_expression"):
            continue
        ops = _operands(f, n)
        if ops is None:
            continue
        o, left, right = ops
        lt, rt = f.int_type(left), f.int_type(right)
        if lt is None or rt is None or right is None or left is None:
            continue  # not provably integer arithmetic (floats, templates, unknown macros)
        if f.compile_time(right):
            continue  # constant divisors become a multiply-high and a shift
        loops = f.loops_around(n)
        if loops:
            varying = set()
            for loop in loops:
                varying |= f.loop_vars(loop)
            if LOOP not in (f.deps(left) | f.deps(right)) and not _mentions(f, n, varying):
                continue  # loop-invariant: hoisted out of the loop by the compiler
        elif has_loops:
            continue  # once-per-thread setup before or after the kernel's loops: amortized
        key = (f.text(left), f.text(right))
        groups.setdefault(key, []).append((n, o, loops[0] if loops else None))
    r = ctx.resolved
    for (dividend, divisor), items in groups.items():
        first, _, first_loop = items[0]
        exprs = list(dict.fromkeys(f"{dividend} {o} {divisor}" for _, o, _ in items))
        lt = f.int_type(first.child_by_field_name("left"))
        rt = f.int_type(first.child_by_field_name("right"))
        assert lt is not None and rt is not None
        bits = max(lt[0], rt[0], 32)
        signed = lt[1] and rt[1] if lt[0] == rt[0] else (lt if lt[0] > rt[0] else rt)[1]
        lines = sorted({ctx.node_line(n) for n, _, _ in items})
        opcodes = [op for ln in lines for op in line_opcodes(ctx, ln)]
        evidence: dict[str, object] = {
            "expressions": exprs, "divisor": divisor, "bits": bits, "signed": signed,
            "where": (f"loop at line {ctx.node_line(first_loop)}" if first_loop is not None
                      else "per thread, kernel has no loops"),
        }
        if r is not None and divisor in r.sizes:
            evidence["divisor_value"] = r.sizes[divisor]
        elif r is not None:
            val = next((a.value for a in r.args if a.name == divisor and a.value is not None), None)
            if val is not None:
                evidence["divisor_value"] = val
        dv = evidence.get("divisor_value")
        if opcodes:
            evidence["sass_instructions_at_lines"] = len(opcodes)
            evidence["sass_division_sequence"] = any(op.startswith("MUFU.RCP") for op in opcodes) and any(
                op.startswith("I2F") for op in opcodes)
        cost = "~20 instructions" if bits == 32 else "a ~70-instruction subroutine call"
        where = "per loop iteration" if first_loop is not None else "per element"
        hint = ""
        if isinstance(dv, int) and dv > 0 and dv & (dv - 1) == 0:
            hint = f" (`{divisor}` is {dv} in the spec, a power of two: a shift and a mask if that is guaranteed)"
        what = " and ".join(f"`{e}`" for e in exprs)
        verb = "divide" if len(exprs) > 1 else "divides"
        yield make(
            "WF107", ctx.file, ctx.range(first),
            f"{what} {verb} by the runtime integer `{divisor}`: {cost} {where}, since GPUs have no integer "
            f"divider; a 2D launch, a compile-time divisor or a precomputed fast divider avoids it{hint}",
            kernel=ctx.kernel.name, evidence=evidence,
            related=tuple((ctx.range(n), "same division") for n, _, _ in items[1:]),
        )


def _mentions(f: KernelFacts, node: Node, names: set[str]) -> bool:
    """Does ``node`` mention any of ``names`` (loop counters or variables updated in the loop)?"""
    return any(f.text(n) in names for n in walk(node, ("identifier",)))
