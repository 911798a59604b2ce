"""WF211: tensor-core opportunity — a matrix-multiply loop running on the FP32 pipes.

Tensor cores multiply small matrix tiles per instruction (``mma.sync``, ``wmma``, on Hopper ``wgmma``)
at many times the FP32 FMA rate; a loop that accumulates products of two arrays indexed by the loop
variable (``acc += A[row * K + k] * B[k * N + col]``) over a long reduction is exactly their shape. The
profile says whether the kernel already uses them (the tensor pipe's activity) and how much FP32 work it
does; the measured ceilings say what the tensor cores reach on this GPU.

Runs for compute-bound kernels, and for memory-bound kernels limited by L1/shared memory — a matrix
multiply that reloads operands from L1 for every FMA, which tensor-core fragments reuse from registers
(tiling in shared memory comes first, and the message says so when the kernel has no shared tile yet).
Skipped for DRAM-bound kernels, where the FLOP rate is not the limit. Needs a loop whose bound is at
least 32 per the spec (a 9-tap convolution is not worth it), and a tolerance that admits TF32/BF16
inputs, which the message mentions. No gain is stated: it depends on the rewrite.
"""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..roofline import MEMORY_BOUND
from . import analyzer
from ._prof import fmt_count, ncu_for

define("WF211", "tensor-core opportunity: matrix-multiply loop on FP32 pipes", Severity.INFO, "profile",
       "tensor_cores")

MIN_TRIP = 32


def _strip(n: Node) -> Node:
    while n.type == "parenthesized_expression" and n.named_child_count == 1:
        child = n.named_children[0]
        n = child
    return n


def _is_product_of_arrays(n: Node) -> bool:
    n = _strip(n)
    if n.type != "binary_expression" or n.child_by_field_name("operator") is None:
        return False
    op = n.child_by_field_name("operator")
    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
    return (op is not None and op.type == "*" and left is not None and right is not None
            and _strip(left).type == "subscript_expression" and _strip(right).type == "subscript_expression")


def _env(ctx: KernelContext) -> dict[str, int | float]:
    r = ctx.resolved
    if r is None:
        return {}
    env: dict[str, int | float] = {str(k): v for k, v in r.sizes.items()}
    for a in r.args:
        if a.value is not None:
            env[a.name] = a.value
    return env


def _trip(ctx: KernelContext, loop: Node, env: dict[str, int | float]) -> float | None:
    """The loop bound of ``for (...; i < BOUND; ...)`` evaluated with the spec's numbers."""
    cond = loop.child_by_field_name("condition")
    if cond is None or cond.type != "binary_expression":
        return None
    op = cond.child_by_field_name("operator")
    right = cond.child_by_field_name("right")
    if op is None or right is None or op.type not in ("<", "<="):
        return None
    try:
        return float(parse_expr(ctx.text(right)).evaluate(env))
    except (ExprError, ValueError, TypeError, ZeroDivisionError):
        return None


def matmul_loop(ctx: KernelContext) -> tuple[Node, Node, float] | None:
    """(outermost long loop, the multiply-accumulate, its trip count) of a matmul-shaped loop nest."""
    if ctx.body is None:
        return None
    env = _env(ctx)
    for n in ctx.walk(ctx.body):
        if n.type != "assignment_expression":
            continue
        op = n.child_by_field_name("operator")
        right = n.child_by_field_name("right")
        if op is None or op.type != "+=" or right is None or not _is_product_of_arrays(right):
            continue
        best: tuple[Node, float] | None = None
        p = n.parent
        while p is not None:
            if p.type == "for_statement":
                trip = _trip(ctx, p, env)
                if trip is not None and trip >= MIN_TRIP:
                    best = (p, trip)
            p = p.parent
        if best is not None:
            return best[0], n, best[1]
    return None


@analyzer("p-tensor-cores", ("WF211",), needs=("profile",))
def tensor_cores(ctx: KernelContext) -> Iterator[Finding]:
    got = ncu_for(ctx, "p-tensor-cores")
    if got is None:
        return
    prof, ncu = got
    b = prof.bottleneck
    if b.cls == MEMORY_BOUND and b.unit != "L1":
        return
    tensor_active = ncu.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    ffma = ncu.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum") or 0.0
    if (tensor_active or 0.0) > 1.0 or ffma <= 0:
        return
    found = matmul_loop(ctx)
    if found is None:
        return
    loop, mac, trip = found
    c = prof.ceilings
    rate = ""
    ev: dict[str, object] = {"fp32_fma_per_launch": fmt_count(ffma), "tensor_pipe_active_pct": tensor_active or 0.0,
                             "reduction_length": int(trip), "multiply_accumulate": ctx.text(mac)}
    if c is not None and c.tensor_gflops and c.fp32_gflops:
        rate = (f"; on this GPU tensor cores reached {c.tensor_gflops / 1e3:.0f} TFLOP/s ({c.tensor_kind}, measured) "
                f"against {c.fp32_gflops / 1e3:.0f} TFLOP/s of FP32 FMA")
        ev.update(tensor_gflops_measured=round(c.tensor_gflops), fp32_gflops_measured=round(c.fp32_gflops))
    shared = "__shared__" in ctx.text(ctx.body) if ctx.body is not None else False
    first = "" if shared or b.cls != MEMORY_BOUND else \
        "tile A and B in shared memory first (the kernel is L1-bound, see WF200), then "
    start = ctx.node_line(loop)
    msg = (f"the loop at line {start} accumulates products of two arrays over {int(trip)} steps "
           f"(`{ctx.text(mac)}`) — a matrix multiply — on the FP32 pipes ({fmt_count(ffma)} FMAs per launch, "
           f"tensor pipe idle){rate}: {first}compute it with tensor-core tiles (`mma.sync`/`wmma` with TF32 or "
           "BF16 inputs and FP32 accumulation), if the tolerance admits their input rounding")
    yield make("WF211", ctx.file, ctx.line_range(start), msg, kernel=ctx.kernel.name, evidence=ev,
               action="tensor_cores" if shared else "smem_tiling")
