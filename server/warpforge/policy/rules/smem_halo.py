"""smem_halo: stage a block's input tile and its halo in shared memory for neighbourhood reads.

Why it helps: a stencil, an overlapping pooling window or a direct convolution launched one thread per
output reads, for every output, the input at the output's own coordinates plus small constant offsets.
Neighbouring threads therefore read overlapping elements: each input element is fetched up to
``(2rx + 1) * (2ry + 1)`` times through L1/L2. Loading the ``(BY + 2ry) x (BX + 2rx)`` tile once per block,
cooperatively and coalesced, then reading every neighbour from shared memory turns those repeated global
reads into shared-memory reads.

What the analysis requires (the lane model of ``profile/lanes.py``; names, styles and guards are free):

* a buffer ``B`` the spec declares ``in`` (read-only: no access of the kernel stores to it, no name the
  kernel writes or passes to a call is ``B``), whose reads are exact lane values
  ``index = threadIdx.x + S * threadIdx.y + P * threadIdx.z + rest`` with the same row pitch ``S`` (a
  single term: a parameter, a macro, a number) and plane pitch ``P`` (absent on 2D blocks, or when the
  reads do not depend on ``threadIdx.z``), ``rest`` free of other thread-dependent parts;
* ``rest = base + dz * P + dy * S + dx`` where ``base`` is shared by every staged read and uses only
  parameters the body does not assign, block/grid built-ins and file-level names (so it can be computed
  before anything else runs), and ``dz``/``dy``/``dx`` are constants or linear in the variables of
  enclosing ``for`` loops with literal start, bound and a positive step that their bodies do not write
  (``for (dy = -1; dy <= 1; ...)``); the offsets range over at most ``MAX_RADIUS`` on each side. Reads
  that do not decompose (gathers, clamped or periodic coordinates, a plane above or below on a 2D block)
  keep reading global memory, which is still correct because ``B`` is read-only;
* at least one staged offset other than ``(0, 0)`` (threads share elements), the spec's element count of
  ``B`` expressible in the kernel's scalar parameters, a block shape that is the same number at both spec
  sizes, and a tile within ``MAX_SMEM`` bytes;
* no shared memory, barriers or other collectives in the kernel already, and no local that shadows a
  parameter or uses the rule's prefix.

Correctness is algebraic, not a matter of the kernel's guards: tile element ``(p, r, c)`` holds
``B[base + (p + zlo) * P + (r + ylo) * S + (c + xlo)]`` whenever that index is inside ``B``'s allocation
(other elements are not read at all), and a staged read ``B[base + (tz + dz) * P + (ty + dy) * S + (tx +
dx)]`` becomes ``tile[tz + dz - zlo][ty + dy - ylo][tx + dx - xlo]`` -- the same element, including halo
elements that wrap to a neighbouring row or plane. A read the original performs is inside the allocation,
so its tile element was loaded. The load and the barrier come first in the body, before any bound check
or early exit, so every thread of the block reaches the barrier; threads past the bound load their share
and then skip the work as the original body says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.tree import walk
from ...profile.context import KernelContext
from ...profile.lanes import ONE, Access, Mono, Poly, Threads, inside, threads, type_bytes
from . import register
from ._structural import (
    all_names,
    declared_names,
    dims_values,
    has_collective,
    identifiers,
    render,
    resolved_type,
    with_body,
    written_names,
)
from ._util import kernel_body
from ._why import Stage, declined
from .base import Rule, RuleContext

PREFIX = "wfh_"
#: largest offset staged on either side of a dimension (a 9x9 window); wider windows keep their global reads
MAX_RADIUS = 4
#: static shared memory a tile may take (the default per-block limit without opting in)
MAX_SMEM = 48 * 1024
_BLOCK_ATOM = re.compile(r"^(blockIdx|blockDim|gridDim)\.[xyz]$|^threadIdx\.z$")
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class _Read:
    start: int  # candidate offsets of the access expression
    end: int
    dz: Poly  # planes, rows and columns from the thread's own element
    dy: Poly
    dx: Poly


@dataclass
class _Plan:
    param: str
    elem: str
    pitch: Poly
    plane: Poly | None  # the coefficient of threadIdx.z (None: the reads do not depend on it)
    base: Poly
    reads: list[_Read]
    z: tuple[int, int]  # offset ranges, lowest and highest
    y: tuple[int, int]
    x: tuple[int, int]
    length: str
    block: tuple[int, int, int]

    @property
    def depth(self) -> int:
        """Planes of the tile: one per ``threadIdx.z`` (plus the halo) when the reads depend on it, else the
        one plane every slice of the block shares."""
        return (self.block[2] if self.plane is not None else 1) + self.z[1] - self.z[0]

    @property
    def rows(self) -> int:
        return self.block[1] + self.y[1] - self.y[0]

    @property
    def cols(self) -> int:
        return self.block[0] + self.x[1] - self.x[0]


def _kernel_context(ctx: RuleContext) -> KernelContext | None:
    k = ctx.cand_kernel
    if k is None:
        return None
    return KernelContext(ctx.file, ctx.cand_src, ctx.cand_model, k, arch=ctx.arch, spec=ctx.spec)


def _block_level(p: Poly, local: set[str]) -> bool:
    """Whether every atom of ``p`` is the same for all threads of one ``threadIdx.z`` slice and can be written
    before the body runs: parameters the body does not assign, file-level names, block/grid built-ins,
    ``threadIdx.z`` (``local``: the names the body declares or assigns)."""
    for a in p.atoms():
        if a == "~threadIdx.z":
            continue  # uniform across a warp, and across the z slice a tile belongs to
        if a.startswith(("$", "~")):
            return False
        if a.startswith("?"):
            names = set(_IDENT.findall(a[1:]))
            if "threadIdx" in names and not all(m.endswith(".z") for m in re.findall(r"threadIdx\.\w", a)):
                return False
            if names & local:
                return False
        elif "." in a:
            if not _BLOCK_ATOM.match(a):
                return False
        elif a in local:
            return False
    return True


def _split(delta: Poly, pitch: Poly) -> tuple[Poly, Poly] | None:
    """``delta = dy * pitch + dx`` with ``pitch`` a single term; None when the pitch has another form."""
    if len(pitch.terms) != 1 or pitch.terms[0][1] <= 0:
        return None
    mono_s, cs = pitch.terms[0]
    dy: dict[Mono, int] = {}
    dx: dict[Mono, int] = {}
    for m, c in delta.terms:
        rem = _without(m, mono_s)
        if rem is not None and (mono_s or m) and c % cs == 0:
            key = rem
            dy[key] = dy.get(key, 0) + c // cs
        elif not mono_s and not m:
            q = round(c / cs)
            dy[()] = dy.get((), 0) + q
            dx[()] = dx.get((), 0) + c - q * cs
        else:
            dx[m] = dx.get(m, 0) + c
    return Poly.of(dy), Poly.of(dx)


def _without(m: Mono, sub: Mono) -> Mono | None:
    """The monomial ``m / sub`` (atoms as a multiset), or None when ``sub`` does not divide ``m``."""
    rest = list(m)
    for a in sub:
        if a not in rest:
            return None
        rest.remove(a)
    return tuple(sorted(rest))


def _loop_range(th: Threads, acc: Access, var: str) -> tuple[int, int] | None:
    """The values of loop variable ``var`` at ``acc``: an enclosing ``for`` with literal start and bound and a
    positive literal step, whose variable nothing in its body writes."""
    inner = [lp for lp in th.loops() if lp.var == var and inside(acc.node, lp.node)]
    if inner:
        lp = inner[-1]  # pre-order: the last enclosing loop of that name is the innermost
        lo, bound = lp.init.rest.constant, lp.bound_val.rest.constant if lp.bound_val is not None else None
        step = lp.step.rest.constant if lp.step is not None and lp.step.uniform else None
        if not (lp.init.uniform and lp.bound_val is not None and lp.bound_val.uniform) \
                or lo is None or bound is None or step is None or step < 1:
            return None
        body = lp.node.child_by_field_name("body")
        loc = th.locals.get(var)
        if body is None or loc is None or any(inside(d.node, body) for d in loc.defs):
            return None
        hi = bound if lp.inclusive else bound - 1
        return (lo, hi) if hi >= lo else None
    return None  # not a loop variable at this access (a local stepped elsewhere)


def _range(th: Threads, acc: Access, p: Poly) -> tuple[int, int] | None:
    """The interval of an offset linear in bounded loop variables (None: not of that form)."""
    lo = hi = 0
    for m, c in p.terms:
        if not m:
            lo, hi = lo + c, hi + c
            continue
        if len(m) != 1 or not m[0].startswith("$"):
            return None
        r = _loop_range(th, acc, m[0][1:])
        if r is None:
            return None
        a, b = c * r[0], c * r[1]
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def _length_expr(ctx: RuleContext, param: str, scalars: set[str]) -> str | None:
    """The spec's element count of ``param`` in the kernel's terms: each size name replaced by the scalar
    parameter the spec binds to exactly that size (``NY*NX`` -> ``ny*nx``)."""
    arg = ctx.spec.arg(param)
    if arg is None or arg.count is None:
        return None
    binding: dict[str, str] = {}
    for a in ctx.spec.args:
        if a.name in scalars and a.value is not None and _IDENT.fullmatch(a.value.strip()):
            binding.setdefault(a.value.strip(), a.name)
    out: list[str] = []
    pos = 0
    for m in _IDENT.finditer(arg.count):
        name = binding.get(m.group(0))
        if name is None:
            return None
        out.append(arg.count[pos:m.start()] + f"(long long)({name})")
        pos = m.end()
    out.append(arg.count[pos:])
    return "".join(out)


def _analyse(ctx: RuleContext) -> _Plan | None:
    k = ctx.cand_kernel
    got = kernel_body(ctx)
    if k is None or got is None:
        return None
    body, data = got
    if len(ctx.block) < 2:
        return declined("the block is one-dimensional: a stencil tile needs a 2-D (or 3-D) block of rows and "
                        "columns", None, Stage.SCOPE)
    if any(n.startswith(PREFIX) for n in all_names(body, data)):
        return declined("the stencil already reads a shared-memory tile", None, Stage.SCOPE)
    if has_collective(body, data) or any(n.type == "__shared__" for n in walk(body)):
        return declined("the kernel already uses shared memory, barriers or shuffles", body, Stage.SCOPE)
    params = {p.name: p for p in k.params}
    local = declared_names(body, data)
    if local & set(params):
        return declined("a local has the name of a parameter", body, Stage.SHAPE)
    dims = dims_values(ctx, ctx.block)
    if dims is None or len(set(dims)) != 1:
        # SHAPE, not LAUNCH: no stencil has been seen yet, and a launch note must not outrank other rules
        return declined("the block's size is not the same at every size of the spec (the tile is sized by it)",
                        None, Stage.SHAPE)
    bx, by, bz = dims[0][0], dims[0][1], dims[0][2]
    kctx = _kernel_context(ctx)
    if kctx is None:
        return declined("the kernel's text could not be analysed", None, Stage.SCOPE)
    th = threads(kctx)
    accesses = th.global_accesses()
    passed: set[str] = set()  # names handed to a call: what the callee does with them is not seen here
    for c in walk(body):
        args = c.child_by_field_name("arguments") if c.type == "call_expression" else None
        if args is not None:
            passed |= identifiers(args, data)
    written = written_names(body, data)
    scalars = {p.name for p in k.params if not p.pointer_depth}
    best: _Plan | None = None
    for name, p in params.items():
        arg = ctx.spec.arg(name)
        if p.pointer_depth != 1 or arg is None or arg.writable or not arg.is_buffer or name in written \
                or name in passed:
            if p.pointer_depth == 1 and name in passed:
                declined(f"`{name}` is passed to a call, which may read it in ways the tile does not see", None,
                         Stage.LEGALITY)
            continue
        mine = [a for a in accesses if a.param == name]
        if not mine or any(a.store for a in mine) or not _only_read(kctx, name, mine):
            if mine:
                declined(f"`{name}` is not only read element by element (a store, a cast or a non-const view)",
                         None, Stage.LEGALITY)
            continue
        plan = _plan(ctx, th, name, mine, local | written, (bx, by, bz))
        if plan is None:
            continue
        length = _length_expr(ctx, name, scalars)
        if length is None:
            declined(f"the spec's length of `{name}` is not an expression of the kernel's scalar parameters "
                     "(the tile's loads must be bounded by it)", None, Stage.LAUNCH)
            continue
        plan.length = length
        if best is None or len(plan.reads) > len(best.reads):
            best = plan
    return best


def _only_read(kctx: KernelContext, name: str, mine: list[Access]) -> bool:
    """Every mention of ``name`` is inside one of its element reads or initializes a ``const`` pointer view
    (``const T* p = in + off``): a cast, a non-const alias or an address taken could write what the tile
    holds, which the lane model would not see."""
    body = kctx.body
    if body is None:
        return False
    reads = [a.node for a in mine]
    for n in walk(body):
        if n.type != "identifier" or kctx.text(n) != name or any(inside(n, r) for r in reads):
            continue
        decl = n.parent
        while decl is not None and decl.type != "declaration":
            decl = decl.parent
        if decl is None or "const" not in kctx.text(decl).split("=")[0].split("*")[0] \
                or not any(_is_pointer_init(c) for c in decl.children):
            return False
    return True


def _is_pointer_init(n: Node) -> bool:
    d = n.child_by_field_name("declarator") if n.type == "init_declarator" else None
    return d is not None and d.type == "pointer_declarator"


_TZ = ("~threadIdx.z", "threadIdx.z")


def _tz_part(p: Poly) -> tuple[Poly, Poly] | None:
    """``p = threadIdx.z * plane + rest``: (plane, rest), None when ``threadIdx.z`` is not linear in ``p``."""
    plane: dict[Mono, int] = {}
    rest: dict[Mono, int] = {}
    for m, c in p.terms:
        n = sum(a in _TZ for a in m)
        if n > 1:
            return None
        if n:
            key = tuple(a for a in m if a not in _TZ)
            plane[key] = plane.get(key, 0) + c
        else:
            rest[m] = c
    return Poly.of(plane), Poly.of(rest)


def _plan(ctx: RuleContext, th: Threads, name: str, mine: list[Access], local: set[str],
          block: tuple[int, int, int]) -> _Plan | None:
    """The tile for buffer ``name``: the reads that decompose with the most common row pitch (and, on a block
    with a ``threadIdx.z`` term, the plane pitch of the first such read)."""
    loads = [a for a in mine if a.load and a.index.exact and a.index.tx == ONE and not a.index.ty.is_zero]
    if not loads:
        return declined(f"no read of `{name}` is a 2-D neighbourhood `{name}[(y + dy) * pitch + x + dx]` of the "
                        "thread's (x one per threadIdx.x, a row pitch per threadIdx.y)", mine[0].node if mine
                        else None, Stage.SCOPE)
    pitches: dict[Poly, int] = {}
    for a in loads:
        pitches[a.index.ty] = pitches.get(a.index.ty, 0) + 1
    pitch = max(pitches, key=lambda q: pitches[q])
    first = next(a for a in loads if a.index.ty == pitch)
    tz = _tz_part(first.index.rest)
    if tz is None or not _block_level(pitch, local):
        return declined(f"the row pitch of `{name}` is not the same for the whole block", first.node, Stage.SHAPE)
    plane = tz[0] if not tz[0].is_zero else None
    base = Poly.of({m: c for m, c in tz[1].terms if m and not any(x.startswith("$") for x in m)})
    if not _block_level(base, local) or (plane is not None and not _block_level(plane, local)):
        return declined(f"the origin of the block's window of `{name}` is not the same for the whole block",
                        first.node, Stage.SHAPE)
    if plane is not None:
        whole = _split(base, plane)
        if whole is not None and whole[0].coef(()):
            base = base - plane * Poly.const(whole[0].coef(()))
    whole = _split(base, pitch)
    if whole is not None and whole[0].coef(()):
        # a whole number of rows in the first read's base (``(r + i - 1) * pitch``) is an offset, not the tile's
        # origin: moved to the offsets, the tile starts where the reads' window does
        base = base - pitch * Poly.const(whole[0].coef(()))
    reads: list[_Read] = []
    spans: list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = []
    for a in loads:
        mine_tz = _tz_part(a.index.rest)
        if a.index.ty != pitch or mine_tz is None or mine_tz[0] != (plane or Poly()):
            continue
        delta = mine_tz[1] - base
        dz = Poly()
        if plane is not None:
            zs = _split(delta, plane)
            if zs is None:
                continue
            dz, delta = zs
        parts = _split(delta, pitch)
        if parts is None:
            continue
        rz, ry, rx = _range(th, a, dz), _range(th, a, parts[0]), _range(th, a, parts[1])
        if rz is None or ry is None or rx is None or min(rz[0], ry[0], rx[0]) < -MAX_RADIUS \
                or max(rz[1], ry[1], rx[1]) > MAX_RADIUS:
            continue
        reads.append(_Read(th.ctx.base + a.node.start_byte, th.ctx.base + a.node.end_byte, dz, parts[0], parts[1]))
        spans.append((rz, ry, rx))
    if not reads:
        return declined(f"the neighbours of `{name}` are not within {MAX_RADIUS} elements of the thread's, or their "
                        "offsets are not constants", first.node, Stage.SHAPE)
    zlo, zhi = min(r[0][0] for r in spans), max(r[0][1] for r in spans)
    ylo, yhi = min(r[1][0] for r in spans), max(r[1][1] for r in spans)
    xlo, xhi = min(r[2][0] for r in spans), max(r[2][1] for r in spans)
    if zlo == zhi and ylo == yhi and xlo == xhi:  # nothing is shared between threads
        return declined(f"every read of `{name}` is the thread's own element: no neighbour is shared between "
                        "threads, so a tile saves nothing", first.node, Stage.SCOPE)
    k = ctx.cand_kernel
    written_type = next((p.type for p in k.params if p.name == name), "") if k is not None else ""
    # the element type as the signature writes it (a template parameter stays one), sized as instantiated
    elem = " ".join(written_type.replace("const", " ").replace("volatile", " ").replace("__restrict__", " ").split())
    nbytes = type_bytes(resolved_type(ctx, elem)) or th.elem_bytes(elem)
    plan = _Plan(name, elem, pitch, plane, base, reads, (zlo, zhi), (ylo, yhi), (xlo, xhi), "", block)
    if nbytes is None or plan.depth * plan.rows * plan.cols * nbytes > MAX_SMEM:
        return declined(f"the tile of `{name}` ({plan.depth}×{plan.rows}×{plan.cols} elements) does not fit in "
                        f"{MAX_SMEM} bytes of shared memory", first.node, Stage.LAUNCH)
    return plan


def _ll(p: Poly) -> str:
    """A polynomial as a ``long long`` C expression (so products of sizes cannot overflow ``int``)."""
    if p.is_zero:
        return "0LL"
    parts: list[str] = []
    for m, c in p.terms:
        factors = [f"(long long)({a.lstrip('?~')})" for a in m]
        parts.append(" * ".join([f"{c}LL", *factors]) if c != 1 or not factors else " * ".join(factors))
    return " + ".join(f"({t})" for t in parts)


def _off(p: Poly, lo: int) -> str:
    """The tile coordinate offset of a read: its (loop-dependent) offset minus the tile's first one."""
    c = p.constant
    if c is not None:
        return str(c - lo)
    t = p.text()
    return f"({t}) + {-lo}" if lo < 0 else f"({t}) - {lo}" if lo else f"({t})"


class SmemHalo(Rule):
    family = "smem_halo"
    structural = True

    def variants(self, ctx: RuleContext) -> list[str]:
        return ["tile"] if _analyse(ctx) is not None else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        if param != "tile":
            return None
        plan = _analyse(ctx)
        got = kernel_body(ctx)
        if plan is None or got is None:
            return None
        body, data = got
        bx, by, bz = plan.block
        depth, rows, cols = plan.depth, plan.rows, plan.cols
        (zlo, zhi), (ylo, yhi), (xlo, xhi) = plan.z, plan.y, plan.x
        spans = {(r.start, r.end): r for r in plan.reads}

        def zidx(r: _Read) -> str:
            if depth == 1:
                return ""
            inner = _off(r.dz, zlo)
            return f"[threadIdx.z + {inner}]" if plan.plane is not None else f"[{inner}]"

        def rep(n: Node) -> str | None:
            r = spans.get((n.start_byte, n.end_byte))
            if r is None or n.type not in ("subscript_expression", "pointer_expression"):
                return None
            return f"{PREFIX}tile{zidx(r)}[threadIdx.y + {_off(r.dy, ylo)}][threadIdx.x + {_off(r.dx, xlo)}]"

        text = render(body, data, rep)
        if text.count(f"{PREFIX}tile") != len(plan.reads) or not text.startswith("{"):
            return None
        zdim = f"[{depth}]" if depth > 1 else ""
        zsub = f"[{PREFIX}p]" if depth > 1 else ""
        zterm = (f" + (long long)({PREFIX}p + ({zlo})) * ({_ll(plan.plane)})" if plan.plane is not None else "")
        tid = f"threadIdx.y * {bx} + threadIdx.x"
        if bz > 1:
            tid = f"(threadIdx.z * {by} + threadIdx.y) * {bx} + threadIdx.x"
        pdecl = f"{PREFIX}p = {PREFIX}i / {rows * cols}, " if depth > 1 else ""
        shape = f"{depth}x{rows}x{cols}" if depth > 1 else f"{rows}x{cols}"
        prologue = "\n".join([
            f"    // smem_halo: the block's {shape} tile of {plan.param} (halo included), loaded once",
            f"    __shared__ {plan.elem} {PREFIX}tile{zdim}[{rows}][{cols}];",
            f"    for (int {PREFIX}i = {tid}; {PREFIX}i < {depth * rows * cols}; {PREFIX}i += {bx * by * bz}) {{",
            f"        const int {pdecl}{PREFIX}r = {PREFIX}i / {cols} % {rows}, "
            f"{PREFIX}c = {PREFIX}i % {cols};",
            f"        const long long {PREFIX}g = {_ll(plan.base)}{zterm} + (long long)({PREFIX}r + ({ylo})) * "
            f"({_ll(plan.pitch)}) + ({PREFIX}c + ({xlo}));",
            f"        if ({PREFIX}g >= 0 && {PREFIX}g < ({plan.length})) {PREFIX}tile{zsub}[{PREFIX}r][{PREFIX}c] = "
            f"{plan.param}[{PREFIX}g];",
            "    }",
            "    __syncthreads();",
        ])
        definition = with_body(ctx, "{\n" + prologue + text[1:])
        if definition is None:
            return None
        halo = f"planes {zlo}..{zhi}, " if zlo != zhi else ""
        why = (f"stage {plan.param}'s {shape} block tile (halo of {halo}rows {ylo}..{yhi}, columns {xlo}..{xhi}) "
               f"in shared memory, loaded coalesced once per block; {len(plan.reads)} neighbourhood read(s) come "
               "from the tile")
        return ctx.derive(self.family, param, why, definition=definition)


register(SmemHalo())
