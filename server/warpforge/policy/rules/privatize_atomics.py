"""privatize_atomics: per-block shared-memory copies of a small array updated with global atomics.

Why it helps: a histogram-like kernel doing one global ``atomicAdd`` per element serializes every update
of a popular bin in the L2 cache (the atomic unit), and pays a round trip per element. Giving each block
a private copy in shared memory turns those into fast shared-memory atomics (contended only within the
block), and the block then adds each non-zero private count to the global array once. For the merge to
be cheap relative to the work, the kernel is also turned into a grid-stride loop over a grid of k blocks
per SM (k = 4 or 8), so each block processes many elements per private copy.

Recognized shape (names, types, expressions free)::

    T i = blockIdx.x * blockDim.x + threadIdx.x;
    [declarations not using i or the array]
    if (i < LIMIT) { BODY }                 // or `if (i >= LIMIT) return;` + BODY, or a grid-stride loop

where a pointer parameter ``bins`` (element type unsigned/int/float/unsigned long long as the spec instantiates
it; the spec gives its length) is used only as ``atomicAdd(&bins[E], V)``, ``atomicAdd(bins + E, V)`` or through
a view ``T* v = bins + OFF; atomicAdd(v, V)`` (``OFF`` unchanged after it; the IR's ``view_offset`` writes views
this way), and whose result is not used; BODY has no other synchronization, warp-level exchange or atomics, no
early exit and no use of the thread coordinates (the loop reassigns which thread handles which element). A
grid-stride loop may take its start and step from locals named before it (``int tid = ...; for (int i = tid; ...;
i += stride)``). Templates are rewritten as written. A kernel's own ``__shared__`` arrays stay; its atomics into
one mean it is privatized already, and ``extern __shared__`` of its own would alias the copy (both declined).

The rewrite: the private copy is ``extern __shared__`` memory sized by the launch (``count *
sizeof(element)``; the kernel reads that size from the ``%dynamic_smem_size`` register, so the sizes of the
launch and the kernel cannot disagree); it is zeroed, ``__syncthreads()``, the grid-stride loop runs the
original BODY with ``bins`` replaced by the private copy, ``__syncthreads()``, and each thread adds a share
of the non-zero private counts to ``bins``. Indices stay in range because they are the indices the original
used on an array of the same length. All barriers are outside every branch (the guard became the loop
condition). Integer counts are exact; float sums are reassociated. The spec's array, with the kernel's own
``__shared__`` arrays, must fit in 48 KiB of shared memory at both sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.model import Kernel
from ...cuda.tree import node_text, walk
from ...spec.expr import Number
from ...spec.model import DTYPES
from ..ir.summary import ELEMENT_TYPES
from . import register
from ._structural import (
    Elementwise,
    all_names,
    declared_names,
    elementwise_1d,
    envs,
    flush,
    global_index,
    has_jump,
    indent,
    is_1d,
    is_collective,
    is_grid_stride,
    is_ident,
    launch_ok,
    render,
    resolved_type,
    shared_arrays,
    single_decl,
    statements,
    subscript_parts,
    unparen,
    upper_bound,
    written_names,
)
from ._structural_rule import Launch, StructuralRule
from ._util import eval_expr, kernel_body
from ._why import Stage, declined
from .base import RuleContext

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfp_"

#: param -> blocks per SM of the grid-stride launch
VARIANTS = {"sm4": 4, "sm8": 8}
_TYPES = frozenset({"unsigned", "unsigned int", "int", "float", "unsigned long long", "unsigned long long int"})
_COORDS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})
_MAX_SMEM = 48 * 1024


@dataclass
class _Shape:
    e: Elementwise
    bins: str
    elem: str
    #: the atomicAdd calls' first arguments (replaced by the private copy)
    targets: list[Node]
    #: views of ``bins`` the targets go through: local -> its offset's text (``float* v = bins + (E);``)
    views: dict[str, str]


def _target_base(arg: Node, data: bytes) -> str | None:
    """The array of ``&a[E]``, ``a + E`` or ``a`` (None for anything else)."""
    a = unparen(arg)
    if a.type == "identifier":
        return node_text(a, data)
    if a.type == "pointer_expression" and node_text(a, data).lstrip().startswith("&"):
        inner = a.child_by_field_name("argument")
        parts = subscript_parts(inner, data) if inner is not None else None
        if parts is not None and is_ident(parts[0], data):
            return node_text(unparen(parts[0]), data)
        return None
    if a.type == "binary_expression":
        op, left = a.child_by_field_name("operator"), a.child_by_field_name("left")
        if op is not None and left is not None and node_text(op, data) == "+" and is_ident(left, data):
            return node_text(unparen(left), data)
    return None


def _stride_via_locals(body: Node, data: bytes) -> Elementwise | None:
    """A grid-stride loop whose start or step is a local named before it (``int tid = blockIdx.x * blockDim.x +
    threadIdx.x; ... for (int i = tid; i < n; i += stride)``), read as the loop ``elementwise_1d`` reads: the
    locals' values stand for their names and their declarations are dropped, so each must be used nowhere else."""
    sts = statements(body)
    if not sts or sts[-1].type != "for_statement":
        return None
    loop = sts[-1]
    init, cond, upd = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    idx = single_decl(init, data) if init is not None else None
    if idx is None or idx.value is None or cond is None or upd is None:
        return None
    local = {d.name: (d, st) for st in sts[:-1] if (d := single_decl(st, data)) is not None and d.value is not None}
    drop: list[Node] = []

    def through(n: Node) -> Node:
        n = unparen(n)
        if n.type == "identifier" and node_text(n, data) in local:
            d, st = local[node_text(n, data)]
            drop.append(st)
            assert d.value is not None
            return d.value
        return n

    start = through(idx.value)
    mult = global_index(start, data, "x")
    u = unparen(upd)
    op = u.child_by_field_name("operator") if u.type == "assignment_expression" else None
    right = u.child_by_field_name("right")
    if mult is None or op is None or node_text(op, data) != "+=" or right is None \
            or not is_ident(u.child_by_field_name("left"), data, idx.name):
        return None
    stride = through(right)
    bound = upper_bound(cond, data, idx.name)
    if bound is None or not is_grid_stride(stride, data, mult) or not drop:
        return None
    dropped = {name for name, (_, st) in local.items() if st in drop}
    uses = [n for n in walk(body, ("identifier",)) if node_text(n, data) in dropped]
    if len(uses) != 2 * len(dropped):  # each: its declaration and its one use in the loop header
        return None
    return Elementwise("stride", idx, start, mult, [st for st in sts[:-1] if st not in drop], [], cond, bound,
                       statements(loop.child_by_field_name("body")), stride)


def _shared_bytes(ctx: RuleContext, body: Node, data: bytes, env: Mapping[str, Number]) -> int | None:
    """Bytes of the kernel's own ``__shared__`` arrays at one size (None when a size or a type is unknown)."""
    total = 0
    for d in walk(body, ("declaration",)):
        quals = {node_text(c, data) for c in d.children if c.type in ("type_qualifier", "storage_class_specifier")}
        t = d.child_by_field_name("type")
        if "__shared__" not in quals or t is None:
            continue
        size = ELEMENT_TYPES.get(resolved_type(ctx, node_text(t, data)), (0, 0))[0]
        for dn in d.children_by_field_name("declarator"):
            n = size
            cur: Node | None = dn
            while cur is not None and cur.type == "array_declarator":
                dim = cur.child_by_field_name("size")
                v = eval_expr(node_text(dim, data), env) if dim is not None else None
                if not isinstance(v, int):
                    return None
                n *= v
                cur = cur.child_by_field_name("declarator")
            if n == 0 or cur is None or cur.type != "identifier":
                return None
            total += n
    return total


def _views(body: Node, data: bytes, pointers: set[str]) -> dict[str, tuple[str, str, Node]]:
    """Local pointers declared once as a view of a pointer parameter and never reassigned: name -> (parameter,
    offset text, declaration). ``P + a + b`` is read as the base ``P`` plus the offset ``a + b`` (the IR's
    ``view_offset`` writes ``P + (a + b)``; as written it is ``(P + a) + b``, the same offset)."""
    out: dict[str, tuple[str, str, Node]] = {}
    written = written_names(body, data)
    for st in walk(body, ("declaration",)):
        d = single_decl(st, data)
        if d is None or not d.pointer or d.value is None or d.name in written:
            continue
        cur, first = unparen(d.value), None
        while cur.type == "binary_expression" and (op := cur.child_by_field_name("operator")) is not None \
                and node_text(op, data) == "+" and (left := cur.child_by_field_name("left")) is not None:
            first, cur = op, unparen(left)
        if first is None or cur.type != "identifier" or node_text(cur, data) not in pointers:
            continue
        offset = data[first.end_byte:d.value.end_byte].decode("utf-8", errors="replace").strip()
        out[d.name] = (node_text(cur, data), offset, st)
    return out


def _scope(ctx: RuleContext) -> tuple[Kernel, Node, bytes] | None:
    """The kernel when this rewrite may move its code around, each refusal its own reason: privatized already
    (this rule's names, or atomics into a ``__shared__`` array of its own), dynamic shared memory of its own (the
    private copy would alias it), or a local that shadows a parameter. Templates are rewritten as written (the
    spec's instantiation judges the types); other ``__shared__`` arrays stay, their bytes counted (``launches``)."""
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return declined("the kernel is privatized already (it holds this rule's `wfp_` names)", None, Stage.SCOPE)
    shared = shared_arrays(body, data)
    for call in walk(body, ("call_expression",)):
        fn = call.child_by_field_name("function")
        args = call.child_by_field_name("arguments")
        if fn is None or args is None or not node_text(fn, data).startswith("atomic") or not args.named_children:
            continue
        base = _target_base(args.named_children[0], data)
        if base is not None and base in shared:
            return declined(f"the kernel is privatized already: `{node_text(call, data)}` updates the `__shared__` "
                            f"array `{base}`", call, Stage.SCOPE)
    for d in walk(body, ("declaration",)):
        quals = {node_text(c, data) for c in d.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if {"extern", "__shared__"} <= quals:
            return declined("the kernel already uses dynamic shared memory (`extern __shared__`), which the private "
                            "copy would alias", d, Stage.SHAPE)
    shadow = sorted(declared_names(body, data) & {p.name for p in k.params})
    if shadow:
        return declined(f"a local `{shadow[0]}` shadows the parameter of that name (the rewrite moves code and "
                        "must know what each name means)", body, Stage.SHAPE)
    return k, body, data


def _analyse(ctx: RuleContext) -> tuple[_Shape, bytes] | None:
    whole = kernel_body(ctx)
    if whole is not None and not any(n.type == "call_expression" and node_text(
            n.child_by_field_name("function") or n, whole[1]) == "atomicAdd" for n in walk(whole[0])):
        return declined("the kernel has no atomicAdd into a histogram", None, Stage.SCOPE)
    got = _scope(ctx)
    if got is None:
        return None
    k, body, data = got
    e = elementwise_1d(body, data) or _stride_via_locals(body, data)
    if e is None or not e.body or e.mult != "blockDim.x":
        return declined("the atomics are not in a one-thread-per-element kernel (`i = blockIdx.x * blockDim.x + "
                        "threadIdx.x` with a guard, or a grid-stride loop)", body, Stage.SHAPE)
    i = e.index.name
    pointers = {p.name: p for p in k.params if p.is_pointer and p.pointer_depth == 1 and not p.array_dims}
    for st in e.prefix + e.between:
        ids = {node_text(n, data) for n in walk(st) if n.type == "identifier"}
        if st.type != "declaration" or i in ids or ids & (set(pointers) | _COORDS):
            return declined("a statement before the element's guard is not a declaration independent of the "
                            "index and of memory", st, Stage.SHAPE)
    targets: list[Node] = []
    bins: str | None = None
    calls: list[Node] = []
    views = _views(body, data, set(pointers))
    used: dict[str, str] = {}
    for st in e.body:
        if has_jump(st, loops_ok=True):
            return declined("the element's body returns or breaks early", st, Stage.SHAPE)
        for n in walk(st):
            if n.type == "identifier" and node_text(n, data) in _COORDS:
                return declined(f"the element's body reads `{node_text(n, data)}` again", n, Stage.SHAPE)
            if n.type != "call_expression":
                continue
            fn = n.child_by_field_name("function")
            name = node_text(fn, data) if fn is not None else ""
            if not is_collective(name):
                continue
            args = n.child_by_field_name("arguments")
            xs = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if name != "atomicAdd" or len(xs) != 2 or n.parent is None or n.parent.type != "expression_statement":
                return declined(f"`{name}` is not a plain `atomicAdd(&bins[b], v);` statement (its result used, "
                                "another atomic, or a shuffle/barrier)", n, Stage.SHAPE)
            base = _target_base(xs[0], data)
            if base in views:
                used[base] = views[base][1]
                base = views[base][0]
            if base is None or base not in pointers:
                return declined(f"the atomicAdd's target `{node_text(xs[0], data)}` is not `&bins[...]`, `bins + i` or "
                                "a view `T* v = bins + i` of a pointer parameter", n, Stage.SHAPE)
            if bins is not None and base != bins:
                return declined(f"the atomicAdds go to two arrays, `{bins}` and `{base}` (the rule privatizes one)",
                                n, Stage.SHAPE)
            bins = base
            targets.append(xs[0])
            calls.append(n)
    if bins is None:
        return declined("the element's body has no atomicAdd", body, Stage.SCOPE)
    elem = resolved_type(ctx, pointers[bins].type)
    if elem not in _TYPES:
        return declined(f"the histogram's element type `{elem}` has no shared-memory atomicAdd the rule writes",
                        calls[0], Stage.LEGALITY)
    if i in {w for st in e.body for w in written_names(st, data)}:
        return declined(f"the index `{i}` is changed in the body", body, Stage.LEGALITY)
    # `bins` appears nowhere but as the base of those atomicAdd targets (or of the views they go through)
    inside = {n.id for t in targets for n in walk(t)} | {n.id for v in used for n in walk(views[v][2])}
    for v in used:
        offset_names = {node_text(n, data) for n in walk(views[v][2], ("identifier",))} - {v, bins}
        if offset_names & {w for st in e.body for w in written_names(st, data)}:
            return declined(f"the offset of the view `{v}` is changed in the body after it is taken", views[v][2],
                            Stage.LEGALITY)
    for n in walk(body):
        if n.type == "identifier" and node_text(n, data) in used and n.id not in inside:
            return declined(f"the view `{node_text(n, data)}` of `{bins}` is also used outside its atomicAdds", n,
                            Stage.LEGALITY)
        if n.type == "identifier" and node_text(n, data) == bins and n.id not in inside:
            return declined(f"`{bins}` is also read or written outside its atomicAdds, so a per-block copy would "
                            "not hold what the kernel reads", n, Stage.LEGALITY)
    for c in calls:  # the values added must not mention the array either
        args = c.child_by_field_name("arguments")
        if args is not None and any(node_text(n, data) == bins for x in args.named_children[1:] for n in walk(x)
                                    if n.type == "identifier"):
            return declined(f"the value added reads `{bins}` itself", c, Stage.LEGALITY)
    return _Shape(e, bins, pointers[bins].type, targets, used), data


class PrivatizeAtomics(StructuralRule[_Shape]):
    family = "atomics_privatize"
    structural = True
    motivated_by = ("WF110", "atomics_privatize")

    def analyse(self, ctx: RuleContext) -> tuple[_Shape, bytes] | None:
        return _analyse(ctx)

    def launches(self, ctx: RuleContext, shape: _Shape, data: bytes) -> dict[str, Launch]:
        if not (is_1d(ctx, ctx.grid) and is_1d(ctx, ctx.block)) or ctx.smem.strip() not in ("0", ""):
            declined("the launch is not 1-D or already uses dynamic shared memory", None, Stage.LAUNCH)
            return {}
        a = ctx.spec.arg(shape.bins)
        if a is None or not a.is_buffer or a.count is None or a.dtype not in DTYPES:
            declined(f"the spec gives no element count and type for `{shape.bins}` (the per-block copy's size)",
                     None, Stage.LAUNCH)
            return {}
        smem = f"({a.count}) * {DTYPES[a.dtype][0]}"
        es = envs(ctx)
        got = kernel_body(ctx)
        if es is None or got is None:
            return {}
        for env in es:
            v = eval_expr(smem, env)
            own = _shared_bytes(ctx, got[0], got[1], env)
            if own is None:
                declined("the size of the kernel's own `__shared__` arrays is not known at the spec's sizes (the "
                         "private copy must fit beside them)", None, Stage.LAUNCH)
                return {}
            if not isinstance(v, int) or v < 1 or v + own > _MAX_SMEM:
                declined(f"a per-block copy of `{shape.bins}` ({smem} bytes, beside {own} bytes of the kernel's own "
                         f"shared arrays) does not fit in {_MAX_SMEM // 1024} KiB of shared memory at every size of "
                         "the spec", None, Stage.LAUNCH)
                return {}
        out: dict[str, Launch] = {}
        for param, per_sm in VARIANTS.items():
            grid = (f"min({ctx.grid[0]}, {per_sm * ctx.sm_count})",)
            if launch_ok(ctx, grid, ctx.block):
                out[param] = Launch(grid, smem=smem)
        return out

    def body(self, ctx: RuleContext, shape: _Shape, data: bytes, param: str) -> str:
        return _generate(shape, data, bool(ctx.cand_kernel is not None and ctx.cand_kernel.template_params))

    def rationale(self, shape: _Shape, param: str) -> str:
        return (f"privatize {shape.bins} per block in shared memory (shared atomics, one global atomicAdd per "
                f"non-zero entry per block), grid-stride loop over {VARIANTS[param]} blocks per SM")


def _generate(shape: _Shape, data: bytes, template: bool) -> str:
    e = shape.e
    p = PREFIX
    i = e.index.name
    priv = f"{p}priv"
    targets = {t.id: t for t in shape.targets}

    def rep(n: Node) -> str | None:
        t = targets.get(n.id)
        if t is None:
            return None

        def name(m: Node) -> str | None:
            if m.type != "identifier":
                return None
            t = node_text(m, data)
            return priv if t == shape.bins else f"({priv} + ({shape.views[t]}))" if t in shape.views else None

        return render(t, data, name)

    body = "\n".join(flush(render(st, data, rep), st, data) for st in e.body)
    cmp = "<=" if e.bound.inclusive else "<"
    limit = node_text(e.bound.limit, data)
    stride = node_text(e.stride, data) if e.stride is not None else "blockDim.x * gridDim.x"
    pre = "\n".join(flush(node_text(n, data), n, data) for n in e.prefix + e.between)
    # a template's instantiations must not declare one extern array with different types: bytes, cast
    decl = (f"extern __shared__ __align__(16) unsigned char {p}raw[];\n{shape.elem}* const {priv} = "
            f"reinterpret_cast<{shape.elem}*>({p}raw);" if template else f"extern __shared__ {shape.elem} {priv}[];")
    code = f"""{decl}
unsigned int {p}bytes;
asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"({p}bytes));
const unsigned int {p}n = {p}bytes / sizeof({shape.elem});
for (unsigned int {p}b = threadIdx.x; {p}b < {p}n; {p}b += blockDim.x) {{
    {priv}[{p}b] = 0;
}}
__syncthreads();
{pre}
for ({e.index.type} {i} = {node_text(e.index_expr, data)}; {i} {cmp} {limit}; {i} += {stride}) {{
{indent(body, "    ")}
}}
__syncthreads();
for (unsigned int {p}b = threadIdx.x; {p}b < {p}n; {p}b += blockDim.x) {{
    const {shape.elem} {p}c = {priv}[{p}b];
    if ({p}c != 0) {{
        atomicAdd(&{shape.bins}[{p}b], {p}c);
    }}
}}"""
    code = "\n".join(ln for ln in code.split("\n") if ln.strip())
    return "{\n" + indent(code, "    ") + "\n}"


register(PrivatizeAtomics())
