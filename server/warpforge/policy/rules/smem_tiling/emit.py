"""The code smem_tiling writes, and the shape it writes it from (split from ``smem_tiling``, which keeps the
analysis and the rule, so neither file is above the size one person reads at once).

``_Shape`` is what the analysis found (the 2-D output index, the k-loop, the two operands, the statements
before and after it); ``_contiguity`` reads, at the spec's sizes, along which index each operand's address is
contiguous; ``_generate`` writes the tiled body: see ``smem_tiling``'s docstring for the rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tree_sitter import Node

from ....cuda.tree import node_text, walk
from ....spec.expr import Number
from .._structural import (
    Bound,
    Decl,
    condition_of,
    envs,
    flush,
    indent,
    render,
    single_decl,
    subscript_parts,
    unparen,
    upper_bound,
)
from .._util import eval_expr, int_literal
from .cover import CDIV

if TYPE_CHECKING:
    from .analysis import _Analysis

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wft_"


@dataclass
class _Operand:
    array: str  # the name read (a parameter or a local pointer into one)
    root: str  # the pointer parameter it reads
    elem: str  # element type as written (``T``, ``float``)
    node: Node  # the read ``P[IP]``
    locals_: list[str]  # non-uniform locals it depends on
    kfast: bool = True  # the address is contiguous in k (else in the output coordinate)


@dataclass
class _Shape:
    x: Decl
    y: Decl
    acc: Decl
    loop: Node
    k: Decl
    k_cond: Node
    a: _Operand  # uses y and k
    b: _Operand  # uses x and k
    a_first: bool  # the product is written a * b (else b * a)
    fma: str  # the fma function the update is written with ("" for +=)
    #: top-level statements before the loop that every thread of a block computes alike, in order
    hoisted: list[Node]
    #: the kernel's top-level statements (a guarded body opened up), in order
    items: list[Node]
    #: the guard of a guarded body (``if (C) { ...all the rest... }``), or None, and where its body starts
    guard: Node | None
    guard_at: int
    #: conditions under which a thread's y (x) passes every exit term on y (x) alone: the load predicates
    y_ok: list[str] = field(default_factory=list)
    x_ok: list[str] = field(default_factory=list)
    y_bound: Bound | None = None
    x_bound: Bound | None = None
    y_locals: list[str] = field(default_factory=list)
    x_locals: list[str] = field(default_factory=list)
    #: exit terms linear in x and y: a tile where one holds at every corner skips its loads
    masks: list[Node] = field(default_factory=list)
    #: the loop's term ``E`` of ``acc += E`` (None for an fma update): the tiled step computes it as written
    term: Node | None = None
    #: locals of the loop body that name one read (``float a = A[..];``): the term uses them
    named: dict[str, Node] = field(default_factory=dict)
    #: the accumulator starts at a value of its own output: the tiled sum starts from it (``_exact_start``), or
    #: where the statements before the loop cannot run twice, at zero, and is added to it once
    acc_after: bool = False
    #: bounds from the launch's extent where the kernel wrote none (``row < (n)``): each output checks them
    limits: list[str] = field(default_factory=list)
    #: further reads of the term, each with its side (True: moves with y, an A-side tile), each its own tile
    more: list[tuple[_Operand, bool]] = field(default_factory=list)

    def operands(self) -> list[tuple[_Operand, bool]]:
        """Every staged read with its side (True: A, moving with y), A and B first."""
        return [(self.a, True), (self.b, False), *self.more]

    def names(self) -> list[tuple[_Operand, bool, str, str]]:
        """Every staged read with its side, its shared tile's name and its register array's name."""
        out: list[tuple[_Operand, bool, str, str]] = []
        count = {True: 0, False: 0}
        for o, side in self.operands():
            n = count[side]
            count[side] += 1
            suffix = str(n) if n else ""
            tile, reg = ("As", "a") if side else ("Bs", "b")
            out.append((o, side, f"{PREFIX}{tile}{suffix}", f"{PREFIX}{reg}{suffix}"))
        return out


# ----------------------------------------------------------------------------- contiguity


def _address(an: _Analysis, node: Node, env: dict[str, Number], coords: dict[str, int]) -> int | None:
    """The element offset a read ``P[I]`` addresses (pointer parameters at 0), from the spec's sizes."""
    data = an.data
    params = an.ctx.spec

    def ev(n: Node) -> int | None:
        n = unparen(n)
        t = n.type
        if t == "number_literal":
            return int_literal(node_text(n, data))
        if t == "cast_expression":
            inner = n.child_by_field_name("value")
            return ev(inner) if inner is not None else None
        if t == "field_expression":
            return 0  # blockIdx.z: the first batch
        if t == "identifier":
            name = node_text(n, data)
            if name in coords:
                return coords[name]
            if name in an.decls:
                val = an.decls[name].value
                return ev(val) if val is not None else None
            if name in an.root:
                return 0
            spec_arg = params.arg(name)
            if spec_arg is not None and not spec_arg.is_buffer and spec_arg.value is not None:
                got = eval_expr(spec_arg.value, env)
                return got if isinstance(got, int) else None
            return None
        if t == "subscript_expression":
            parts = subscript_parts(n, data)
            if parts is None:
                return None
            b, i = ev(parts[0]), ev(parts[1])
            return b + i if b is not None and i is not None else None
        if t == "unary_expression":
            o, a2 = n.child_by_field_name("operator"), n.child_by_field_name("argument")
            num = ev(a2) if a2 is not None else None
            return -num if num is not None and o is not None and node_text(o, data) == "-" else num
        if t == "binary_expression":
            o, a2, b2 = (n.child_by_field_name(f) for f in ("operator", "left", "right"))
            if o is None or a2 is None or b2 is None:
                return None
            u, w = ev(a2), ev(b2)
            if u is None or w is None:
                return None
            op = node_text(o, data)
            if op == "+":
                return u + w
            if op == "-":
                return u - w
            if op == "*":
                return u * w
            if op == "/" and w:
                return u // w
            if op == "%" and w:
                return u % w
        return None

    return ev(node)


def _contiguity(an: _Analysis, shape: _Shape) -> None:
    """Per operand, whether consecutive k or consecutive output coordinates are adjacent in memory."""
    es = envs(an.ctx)
    if not es:
        return
    env = es[0]
    kv = shape.k.name
    for o, side in shape.operands():
        c = shape.y.name if side else shape.x.name
        base = _address(an, o.node, env, {kv: 1, c: 1})
        along_k = _address(an, o.node, env, {kv: 2, c: 1})
        along_c = _address(an, o.node, env, {kv: 1, c: 2})
        if base is None or along_k is None or along_c is None:
            continue
        if along_k - base == 1:
            o.kfast = True
        elif along_c - base == 1:
            o.kfast = False

# ----------------------------------------------------------------------------- the rewrite


def _local_decls(shape: _Shape, names: list[str], data: bytes) -> list[str]:
    """The declarations of ``names``, in the kernel's order, as written."""
    out = []
    for st in shape.items:
        d = single_decl(st, data) if st.type == "declaration" else None
        if d is not None and d.name in names:
            out.append(flush(node_text(st, data), st, data))
    return out


def _load(shape: _Shape, data: bytes, o: _Operand, a_side: bool, tile: str) -> str:
    p = PREFIX
    c = shape.y if a_side else shape.x
    kv = shape.k
    oks = (shape.y_ok if a_side else shape.x_ok) + [node_text(shape.k_cond, data)]
    locs = _local_decls(shape, shape.y_locals if a_side else shape.x_locals, data)
    rn, cn = (f"{p}BM", f"{p}BK") if a_side else (f"{p}BN", f"{p}BK")
    # e -> (output coordinate r, k offset q); the faster-varying one follows the contiguous address
    if o.kfast:
        r, q = f"{p}e / {cn}", f"{p}e % {cn}"
    else:
        r, q = f"{p}e % {rn}", f"{p}e / {rn}"
    store = f"{tile}[{p}r][{p}q]" if a_side else f"{tile}[{p}q][{p}r]"
    cond = " && ".join(f"({t})" for t in oks)
    inner = "\n".join([
        f"const {c.type} {c.name} = {p}{'y0' if a_side else 'x0'} + {p}r;",
        f"const {kv.type} {kv.name} = {p}k0 + {p}q;",
        *locs,
        f"{store} = ({cond}) ? {node_text(o.node, data)} : static_cast<{o.elem}>(0);",
    ])
    return f"""#pragma unroll
for (int {p}l = 0; {p}l < {rn} * {cn} / {p}NT; ++{p}l) {{
    const int {p}e = {p}tid + {p}l * {p}NT;
    const int {p}r = {r}, {p}q = {q};
    {{
{indent(inner, "        ")}
    }}
}}"""


def _reads_memory(st: Node) -> bool:
    """Whether a statement reads through a subscript or a dereference (a value a store before it can change)."""
    return any(n.type == "subscript_expression" or (n.type == "pointer_expression" and n.children
                                                    and n.children[0].type == "*") for n in walk(st))


def _exact_start(shape: _Shape, data: bytes) -> bool:
    """Whether an accumulator that starts at a value of its own output (``float c_acc = c[i*n+j];``, the
    canonical register of ``c[..] += ..`` in global memory) can start the tiled sum itself, so the additions
    keep the original's order and its rounding: the statements before the loop then run once per output
    before the tiles (``_prologue``) and only their declarations run again after them (``_per_output``),
    which must give the same values a second time — none may read memory, which a store before it changes."""
    if not shape.acc_after:
        return False
    skip = {shape.x.node.id, shape.y.node.id, shape.acc.node.id} | {n.id for n in shape.hoisted}
    loop_at = next(i for i, st in enumerate(shape.items) if st.id == shape.loop.id)
    return not any(st.type == "declaration" and st.id not in skip and _reads_memory(st)
                   for st in shape.items[:loop_at])


def _prologue(shape: _Shape, data: bytes) -> str:
    """The kernel's statements before its loop for one output, once, before the tiles (exact start only):
    exits and masks return false (the output is not computed), the accumulator's declaration gives the tiled
    sum its start value."""
    p = PREFIX
    skip = {shape.x.node.id, shape.y.node.id} | {n.id for n in shape.hoisted}
    lines: list[str] = []
    if shape.limits:
        lines.append(f"if (!({' && '.join(shape.limits)})) return false;  // outside what the original launch "
                     "covered")
    for at, st in enumerate(shape.items):
        if st.id == shape.loop.id:
            break
        if at == shape.guard_at and shape.guard is not None:
            cond = condition_of(shape.guard)
            assert cond is not None
            lines.append(f"if (!({node_text(cond, data)})) return false;")
        if st.id in skip:
            continue
        if st.id == shape.acc.node.id:
            assert shape.acc.value is not None
            lines.append(f"{p}acc[{p}i][{p}j] = {node_text(shape.acc.value, data)};  // where the original's sum "
                         "starts")
            continue
        text = render(st, data, lambda n: "return false;" if n.type == "return_statement" else None)
        lines.append(flush(text, st, data))
    lines.append("return true;")
    return "\n".join(lines)


def _per_output(shape: _Shape, data: bytes) -> str:
    """The kernel's own statements for one output, with the accumulator starting from the tiled sum."""
    p = PREFIX
    skip = {shape.x.node.id, shape.y.node.id, shape.loop.id} | {n.id for n in shape.hoisted}
    lines: list[str] = []
    exact = _exact_start(shape, data)
    if shape.limits and not exact:
        lines.append(f"if (!({' && '.join(shape.limits)})) return;  // outside what the original launch covered")
    acc_value = shape.acc.value
    assert acc_value is not None
    loop_at = next(i for i, st in enumerate(shape.items) if st.id == shape.loop.id)
    for at, st in enumerate(shape.items):
        if exact and at < loop_at:
            # the prologue ran these once (exits, masks, stores); only the declarations are needed again here
            if st.id == shape.acc.node.id:
                lines.append(f"{shape.acc.type} {shape.acc.name} = {p}acc[{p}i][{p}j];  // the loop, tiled")
            elif st.type == "declaration" and st.id not in skip:
                lines.append(flush(node_text(st, data), st, data))
            continue
        if exact and st.id == shape.loop.id:
            continue
        if at == shape.guard_at and shape.guard is not None:
            cond = condition_of(shape.guard)
            assert cond is not None
            lines.append(f"if (!({node_text(cond, data)})) return;")
        if st.id == shape.loop.id and shape.acc_after:
            lines.append(f"{shape.acc.name} += {p}acc[{p}i][{p}j];  // the loop, tiled")
            continue
        if st.id in skip:
            continue
        if st.id == shape.acc.node.id and not shape.acc_after:
            text = render(st, data, lambda n: f"{p}acc[{p}i][{p}j]" if n.id == acc_value.id else None)
            lines.append(flush(text, st, data))
            continue
        lines.append(flush(node_text(st, data), st, data))
    return "\n".join(lines)


def _plain_product(shape: _Shape, data: bytes) -> bool:
    """Whether the loop's term is the two reads multiplied (``a * b``, either order, named or not): zero when
    either is."""
    t = unparen(shape.term) if shape.term is not None else None
    if t is None or t.type != "binary_expression" or shape.more:
        return False
    op, left, right = (t.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or left is None or right is None or node_text(op, data) != "*":
        return False
    reads = {shape.a.node.id, shape.b.node.id}

    def read(n: Node) -> bool:
        n = unparen(n)
        return n.id in reads or (n.type == "identifier" and node_text(n, data) in shape.named)

    return read(left) and read(right)


def _registers(o: _Operand, a_side: bool, tile: str, reg: str) -> str:
    """A thread's values of one tile for this k: TM rows (A side) or TN columns (B side), into registers."""
    p = PREFIX
    if a_side:
        return f"""{o.elem} {reg}[{p}TM];
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    {reg}[{p}i] = {tile}[{p}ty + {p}i * {p}TY][{p}kk];
}}"""
    return f"""{o.elem} {reg}[{p}TN];
#pragma unroll
for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
    {reg}[{p}j] = {tile}[{p}kk][{p}tx + {p}j * {p}TX];
}}"""


def _generate(shape: _Shape, data: bytes, bm: int, bn: int, bk: int, tm: int, tn: int) -> str:
    p = PREFIX
    x, y, kv = shape.x, shape.y, shape.k
    acc = shape.acc
    init = node_text(acc.value, data) if acc.value is not None and not shape.acc_after \
        else f"static_cast<{acc.type}>(0)"
    kb = upper_bound(shape.k_cond, data, kv.name)
    assert kb is not None and kv.value is not None
    k_end = f"({node_text(kb.limit, data)}) + 1" if kb.inclusive else f"({node_text(kb.limit, data)})"
    staged = shape.names()
    av, bv = f"{p}a[{p}i]", f"{p}b[{p}j]"
    if shape.fma:
        step = f"{p}acc[{p}i][{p}j] = {shape.fma}({av if shape.a_first else bv}, {bv if shape.a_first else av}, " \
               f"{p}acc[{p}i][{p}j]);"
    else:
        assert shape.term is not None
        reads = {o.node.id: f"{reg}[{p}i]" if side else f"{reg}[{p}j]" for o, side, _, reg in staged}
        # a name the loop body gave a read (``float a = A[..];``) stands for that read's tile value
        named = {name: reads[r.id] for name, r in shape.named.items() if r.id in reads}

        def tile_value(n: Node) -> str | None:
            return named.get(node_text(n, data)) if n.type == "identifier" else reads.get(n.id)

        step = f"{p}acc[{p}i][{p}j] += {render(shape.term, data, tile_value)};"
        if not _plain_product(shape, data):
            # a partial k-tile's padding is zeros, which adds nothing to a product of the two reads; any other term
            # (``alpha * a * b`` with alpha infinite, ``a * b + 1``) would add its value at 0: skip k past the end
            step = f"if ({p}k0 + {p}kk < {k_end}) {step}"
    hoisted = "\n".join(flush(node_text(n, data), n, data) for n in shape.hoisted)
    masks = ""
    compute_open, compute_close = "", ""
    if shape.masks:
        test = " || ".join(f"({node_text(m, data)})" for m in shape.masks)
        corners = " && ".join(f"{p}masked({p}x0{dx}, {p}y0{dy})" for dx in ("", f" + {p}BN - 1")
                              for dy in ("", f" + {p}BM - 1"))
        masks = (f"// a linear mask holds on a whole tile when it holds at the tile's corners\n"
                 f"auto {p}masked = [&](const {x.type} {x.name}, const {y.type} {y.name}) -> bool {{ "
                 f"return {test}; }};\n"
                 f"const bool {p}skip = {corners};\n")
        compute_open, compute_close = f"if (!{p}skip) {{\n", "\n}"
    loads = "\n".join(indent(_load(shape, data, o, side, tile), "    ") for o, side, tile, _ in staged)
    registers = "\n".join(indent(_registers(o, side, tile, reg), "        ") for o, side, tile, reg in staged)
    # padded by one where the loads run across the tile's rows, so a column of the tile hits distinct banks
    tiles = "\n".join(f"__shared__ {o.elem} {tile}[{p}BM][{p}BK + {0 if o.kfast else 1}];" if side else
                      f"__shared__ {o.elem} {tile}[{p}BK][{p}BN + {1 if o.kfast else 0}];"
                      for o, side, tile, _ in staged)
    kloop = f"""for ({kv.type} {p}k0 = {node_text(kv.value, data)}; {p}k0 < {k_end}; {p}k0 += {p}BK) {{
{loads}
    __syncthreads();
    #pragma unroll
    for (int {p}kk = 0; {p}kk < {p}BK; ++{p}kk) {{
{registers}
        #pragma unroll
        for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
            #pragma unroll
            for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
                {step}
            }}
        }}
    }}
    __syncthreads();
}}"""
    if compute_open:
        kloop = compute_open + indent(kloop, "    ") + compute_close
    prologue, run = "", ""
    if _exact_start(shape, data):
        run = f"if ({p}live[{p}i][{p}j]) "
        prologue = f"""bool {p}live[{p}TM][{p}TN];
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    #pragma unroll
    for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
        const {y.type} {y.name} = {p}y0 + {p}ty + {p}i * {p}TY;
        const {x.type} {x.name} = {p}x0 + {p}tx + {p}j * {p}TX;
        {p}live[{p}i][{p}j] = [&]() -> bool {{  // the statements before the loop, once: the sum's start
{indent(_prologue(shape, data), "            ")}
        }}();
    }}
}}
"""
    cdiv = f"auto {CDIV} = [](long long n, long long d) {{ return (n + d - 1) / d; }};\n" \
        if any(CDIV in lim for lim in shape.limits) else ""
    code = f"""{hoisted}
{cdiv}constexpr int {p}BM = {bm}, {p}BN = {bn}, {p}BK = {bk}, {p}TM = {tm}, {p}TN = {tn};
constexpr int {p}TX = {p}BN / {p}TN, {p}TY = {p}BM / {p}TM, {p}NT = {p}TX * {p}TY;
static_assert(({p}BM * {p}BK) % {p}NT == 0 && ({p}BK * {p}BN) % {p}NT == 0, "whole tiles per thread");
{tiles}
const int {p}tx = threadIdx.x, {p}ty = threadIdx.y;
const int {p}tid = {p}ty * {p}TX + {p}tx;
const {y.type} {p}y0 = blockIdx.y * {p}BM;
const {x.type} {p}x0 = blockIdx.x * {p}BN;
{acc.type} {p}acc[{p}TM][{p}TN];
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    #pragma unroll
    for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
        {p}acc[{p}i][{p}j] = {init};
    }}
}}
{prologue}{masks}{kloop}
#pragma unroll
for (int {p}i = 0; {p}i < {p}TM; ++{p}i) {{
    #pragma unroll
    for (int {p}j = 0; {p}j < {p}TN; ++{p}j) {{
        const {y.type} {y.name} = {p}y0 + {p}ty + {p}i * {p}TY;
        const {x.type} {x.name} = {p}x0 + {p}tx + {p}j * {p}TX;
        {run}[&]() {{  // the kernel's statements for this output: its exits return from here
{indent(_per_output(shape, data), "            ")}
        }}();
    }}
}}"""
    return "{\n" + indent(code.lstrip("\n"), "    ") + "\n}"

