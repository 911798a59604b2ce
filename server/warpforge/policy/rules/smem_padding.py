"""smem_padding: pad a ``__shared__`` array by bank words so that the lanes of a warp hit distinct banks.

Why it helps: shared memory has 32 banks of 4 bytes; when the lanes of a warp access different words of one
bank the access is replayed once per word (an N-way bank conflict: N passes where one would do). A column
read of a 32x32 float tile (``tile[threadIdx.x][k]``: lane ``l`` at word ``32*l + k``) puts all 32 lanes in
bank ``k``; rows of 33 floats move lane ``l`` to bank ``(l + k) % 32``. The same holds for a flattened tile
(``s[threadIdx.x * 32 + k]``) and for the tree of a work-efficient scan (``temp[offset * (2*thid + 1) - 1]``,
strides of 2, 4, ... 32 words), where the classic fix inserts one word every 32 (``i + (i >> 5)``).

The analysis is WF105's (``profile.analyzers.bank_conflicts``) on the lane model (``profile.lanes``): the
element index of every access of the array as ``cx*threadIdx.x + cy*threadIdx.y + rest`` with the block shape
from the spec, lanes enumerated and their words mapped to banks. A scan's loop variable that is doubled or
halved (``offset *= 2``, ``d >>= 1``) is sampled at 1, 2, ... 16; a part of the index the model cannot
evaluate (a loop counter) is sampled over one period of the padding. It is proposed for an array when some
access has a conflict of degree >= 2 (WF105's threshold) and the padded layout lowers both the worst degree and
the total passes of the array's accesses (padding can also create conflicts: a 16-wide block reading rows).

The layout is ``i -> i + P * (i / C)``: ``P`` elements inserted after every ``C``, ``P`` the fewest bank words
(rows: 1, 2, 4, 8 or 16; a 1-D array: one; ``max(1, 4 / sizeof(T))`` elements a word, at least one element for
8- and 16-byte types) that give the fewest passes: one word spreads a column read, a block 16 wide whose
half-warps read rows a multiple of 32 words apart needs 16. The layout is strictly increasing on the indices a
valid access uses (``i >= 0``), so distinct elements stay distinct and every access keeps its element:

* a 2-D/3-D array ``T a[R][C]`` gets rows of ``C + P`` (``T a[R][C + P]``): only the declaration changes,
  which is legal whenever every use of ``a`` is a full subscript ``a[i][j]`` (the subscripts keep their
  meaning, whatever the analysis could see of them);
* a 1-D array gets every index rewritten (``temp[ai]`` -> ``temp[ai + (ai >> 5)]``; ``C`` is the bank row,
  32 elements of 4 bytes, or the stride of the conflicting access, a flattened tile's row length: for
  ``s[r*C + c]`` this is ``s[r*(C+1) + c]``) and its size enlarged to ``N + P * ((N - 1) / C)``; a dynamic
  ``extern __shared__ T s[]`` (the kernel's only one) gets the launch's shared-memory bytes enlarged the same
  way.

Declines, each in words: no ``__shared__`` array or no conflicted access (scope); an array declared at file
scope, declared twice, whose address escapes (a bare name passed to a function, cast, pointer arithmetic, a row
``a[i]`` or an element address ``&a[i][j]``, which covers ``cp.async``/``memcpy_async``/TMA copies and
``wmma::load_matrix_sync``'s leading dimension), used in ``sizeof``, a 1-D index with a side effect, an element
size or row length the spec does not give (legality); a padded total over the 48 KB static limit, or a dynamic
array whose launch gives no shared-memory bytes (launch).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.candidate import Candidate
from ...cuda.model import DeclKind
from ...cuda.parser import parse
from ...cuda.rewrite import splice
from ...cuda.text import SourceText
from ...profile.analyzers.bank_conflicts import MIN_DEGREE, wavefronts
from ...profile.context import KernelContext
from ...profile.lanes import (
    VARYING_CALLS,
    Poly,
    SharedAccess,
    SharedArray,
    Threads,
    block_x,
    call_name,
    inside,
    lane_addresses,
    threads,
)
from . import register
from ._why import Stage, declined
from .base import Rule, RuleContext

#: the one variant: per array, the padding with the fewest passes (the smallest at a tie)
PARAM = "pad"
#: paddings tried, in bank words: one spreads a column read; a block narrower than a warp whose half-warps read
#: rows a multiple of 32 words apart needs as many words as the block is wide
WORDS = (1, 2, 4, 8, 16)
#: static shared memory a block may declare without opting in
MAX_STATIC = 48 * 1024
#: values a doubled or halved loop variable (a scan's ``offset``, a tree's ``d``) is sampled at
POW2 = (1, 2, 4, 8, 16)
#: base offsets sampled per period at most (an unknown uniform part of an index)
MAX_BASES = 32
_KEY = "smem_padding.kernel_context"
#: calls that copy into shared memory asynchronously or load tiles with a leading dimension
_ASYNC = ("memcpy_async", "cp_async", "cp.async", "pipeline", "bulk", "tma", "tensor")
_WMMA = ("load_matrix_sync", "store_matrix_sync")
_SIMPLE = ("identifier", "number_literal", "field_expression", "subscript_expression", "call_expression",
           "parenthesized_expression")


@dataclass
class _Cost:
    """Shared-memory passes of an array's accesses (summed over the samples) and the worst access's degree."""

    waves: int = 0
    ideal: int = 0
    worst: float = 0.0
    worst_at: Node | None = None

    def add(self, waves: int, ideal: int, node: Node) -> None:
        self.waves += waves
        self.ideal += ideal
        if waves / ideal > self.worst:
            self.worst, self.worst_at = waves / ideal, node


@dataclass
class _Layout:
    """How one array is padded: ``pad`` elements after every ``period``; the edits that write it."""

    arr: SharedArray
    period: int
    pad: int
    before: _Cost
    after: _Cost
    edits: list[tuple[int, int, str]] = field(default_factory=list)
    smem: str | None = None  # the launch's new dynamic shared-memory bytes (a dynamic array)


@dataclass(frozen=True)
class _Site:
    """One access's lane geometry: per sample of the scan variables, the lanes' element offsets and the base
    (``_base``: known part, step of the unknown part)."""

    node: Node
    samples: tuple[tuple[tuple[int, ...], int, int], ...]


def _kernel_context(ctx: RuleContext) -> KernelContext | None:
    """The lane model's context for the candidate: its definition put back into the file in place of the
    kernel, so that the file's macros (``__shared__ int s[SHMEM_SIZE]``) and file-scope arrays are seen; node
    offsets are relative to the definition's kernel (``KernelContext.tree``). Built once per rule context."""
    if _KEY in ctx.extra:
        got: KernelContext | None = ctx.extra[_KEY]
        return got
    k0 = ctx.kernel
    data = ctx.source.data
    definition = ctx.candidate.definition.encode("utf-8")
    if definition == data[k0.span.start : k0.span.end]:
        src, model = ctx.source, ctx.model  # the kernel as written: the file is the one already parsed
    else:
        src = SourceText(data[: k0.span.start] + definition + data[k0.span.end:])
        model = parse(src.data)
    k = next((x for x in model.kernels if x.name == k0.name and x.span.start == k0.span.start), None)
    kctx = None if k is None else KernelContext(ctx.file, src, model, k, arch=ctx.arch, spec=ctx.spec)
    ctx.extra[_KEY] = kctx
    return kctx


def _scaled(th: Threads, atom: str) -> bool:
    """A loop-carried local that is doubled or halved (``offset *= 2``, ``d >>= 1``, ``s = s / 2``)."""
    loc = th.locals.get(atom[1:]) if atom.startswith("$") else None
    if loc is None:
        return False
    for d in loc.defs:
        if d.op in ("*=", "/=", "<<=", ">>="):
            return True
        v = d.value
        if d.op == "=" and v is not None and v.type == "binary_expression" and th.mentions(v, loc.name):
            op = v.child_by_field_name("operator")
            if op is not None and op.type in ("*", "/", "<<", ">>"):
                return True
    return False


def _site(th: Threads, sa: SharedAccess, bx: int | None, lanes: int) -> _Site | None:
    """The access's lanes, or None where the model cannot give its strides (WF105 is silent there too)."""
    idx = sa.index
    if idx.tx.is_zero and idx.ty.is_zero:
        return None
    unknown = sorted(a for a in idx.tx.atoms() | idx.ty.atoms() if th.atom_value(a) is None)
    if len(unknown) > 2 or not all(_scaled(th, a) for a in unknown):
        return None
    samples: list[tuple[tuple[int, ...], int, int]] = []
    for values in itertools.product(POW2, repeat=len(unknown)):
        env = dict(zip(unknown, values, strict=True))

        def value(a: str, env: dict[str, int] = env) -> int | None:
            return env[a] if a in env else th.atom_value(a)

        cx, cy = idx.tx.evaluate(value), idx.ty.evaluate(value)
        if cx is None or cy is None or (cx == 0 and (bx is None or bx >= 32)):
            continue  # threadIdx.y alone: the same for the warp, a broadcast
        samples.append((tuple(lane_addresses(cx, cy, bx, lanes)), *_base(idx.rest, value)))
    return _Site(sa.node, tuple(samples)) if samples else None


def _base(rest: Poly, value: Callable[[str], int | None]) -> tuple[int, int]:
    """The warp's base element as (the part the numbers give, the step of the part they do not: 0 when none).
    A row's start is a multiple of the row length (``32 * k``), so the unknown part only takes such values."""
    known = step = 0
    for mono, coef in rest.terms:
        v = coef
        for a in mono:
            x = value(a)
            if x is None:
                step = math.gcd(step, coef)
                break
            v *= x
        else:
            known += v
    return known, step


def _cost(sites: list[_Site], b: int, period: int = 0, pad: int = 0) -> _Cost:
    """Passes of the accesses with ``pad`` elements after every ``period`` (0: the array as declared)."""
    out = _Cost()
    for s in sites:
        waves = ideal = 0
        for offs, known, step in s.samples:
            bases = [known] if period == 0 or step == 0 else \
                sorted({known + k * step % period for k in range(period)})
            bases = bases[:: max(1, len(bases) // MAX_BASES)]
            worst = (0, 1)
            for b0 in bases:
                elems = [b0 + o for o in offs]
                if min(elems) < 0:
                    continue
                if period:
                    elems = [e + pad * (e // period) for e in elems]
                low = min(elems)
                w = wavefronts([(e - low) * b for e in elems], b)
                worst = max(worst, w, key=lambda t: t[0] / t[1])
            waves, ideal = waves + worst[0], ideal + worst[1]
        if ideal:
            out.add(waves, ideal, s.node)
    return out


def _escape(th: Threads, use: Node, name: str) -> str:
    """Words for a use of ``name`` that is not an element: where the array's address goes."""
    for up in _ancestors(use, th.ctx.body):  # a matrix load or an async copy anywhere around the address
        if up.type == "call_expression":
            fn = call_name(th.ctx, up)
            if any(w in fn for w in _WMMA):
                return (f"`{name}` is loaded or stored by `{fn}` with a leading dimension: padding the rows would "
                        "need the same change to that argument")
            if any(w in fn.lower() for w in _ASYNC):
                return f"`{name}` is filled by an asynchronous copy (`{fn}`) that writes it as a contiguous block"
        if up.type.endswith("statement") or up.type == "declaration":
            break
    for cur in (use, *_ancestors(use, th.ctx.body)):
        t = cur.type
        if t == "call_expression":
            fn = call_name(th.ctx, cur)
            if fn in ("sizeof", "alignof"):
                return f"`{fn}({name})` would change with the padding"
            if "cast" in fn:
                return f"`{name}` is cast to another type (`{fn}`), so its layout is read elsewhere"
            return f"`{name}`'s address is passed to `{fn}`, which would index it with the unpadded layout"
        if t == "cast_expression":
            return f"`{name}` is cast to another type, so its layout is read elsewhere"
        if t in ("sizeof_expression", "alignof_expression"):
            return f"`sizeof` of `{name}` would change with the padding"
        if t == "asm_statement" or t == "gnu_asm_expression":
            return f"`{name}`'s address is used in inline assembly (an async copy or a matrix load)"
        if t in ("binary_expression", "update_expression"):
            return f"pointer arithmetic on `{name}` (`{th.ctx.text(cur)}`) assumes the unpadded layout"
        if t in ("init_declarator", "assignment_expression", "return_statement"):
            return f"`{name}`'s address is kept in a pointer (`{th.ctx.text(cur)}`), which sees the unpadded layout"
        if t.endswith("statement") or t == "declaration":
            break
    return f"`{name}` is used as an address (`{th.ctx.text(use)}`), not only element by element"


def _uses(th: Threads, name: str, rank: int, decl: Node) -> list[Node] | None:
    """The full subscripts of ``name`` in the body, or None (declined, with the words) when one use is not."""
    out: list[Node] = []
    for ident in th.nodes("identifier"):
        if th.name(ident) != name or inside(ident, decl):
            continue
        p = ident.parent
        if p is not None and (p.type.endswith("declarator") or p.type in ("declaration", "parameter_declaration")):
            return declined(f"`{name}` is declared twice in the kernel, so its uses cannot be told apart", ident,
                            Stage.LEGALITY)
        cur, depth = ident, 0
        while (par := cur.parent) is not None and par.type == "subscript_expression" \
                and par.child_by_field_name("argument") == cur:
            cur, depth = par, depth + 1
        if depth == 0:
            return declined(_escape(th, ident, name), ident, Stage.LEGALITY)
        if depth < rank:
            return declined(f"`{th.ctx.text(cur)}` takes a row of `{name}` as an address, which would walk "
                            "into the padding", cur, Stage.LEGALITY)
        up = cur.parent
        while up is not None and up.type == "parenthesized_expression":
            up = up.parent
        if up is not None and up.type == "pointer_expression" and (op := up.child_by_field_name("operator")) \
                is not None and op.type == "&":
            return declined(_escape(th, up, name), up, Stage.LEGALITY)
        if any(a.type in ("sizeof_expression", "alignof_expression") for a in _ancestors(cur, th.ctx.body)):
            return declined(f"`sizeof` of `{name}` would change with the padding", cur, Stage.LEGALITY)
        out.append(cur)
    return out


def _in_macro(th: Threads, name: str) -> str | None:
    """A macro the kernel uses (or defines in its body) whose text names ``name``: its accesses are not in the
    kernel's text, so padding the array would leave them on the old layout."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    body = th.ctx.body
    for n in th.nodes("preproc_def", "preproc_function_def"):
        if word.search(th.ctx.text(n)):
            return th.ctx.text(n).split()[1].split("(")[0] if len(th.ctx.text(n).split()) > 1 else name
    for d in th.ctx.model.declarations:
        if d.kind is DeclKind.MACRO and body is not None and any(th.mentions(body, m) for m in d.names) \
                and word.search(th.ctx.src.data[d.span.start:d.span.end].decode("utf-8", "replace")):
            return sorted(d.names)[0]
    return None


def _ancestors(node: Node, stop: Node | None) -> Iterator[Node]:
    cur = node.parent
    while cur is not None and cur != stop:
        yield cur
        cur = cur.parent


def _paren(th: Threads, node: Node, *, tight: bool = False) -> str:
    """The expression's text, parenthesized unless it is a primary expression, or (not ``tight``: as the left
    operand of ``+``) an additive or multiplicative one."""
    text = th.ctx.text(node)
    if node.type in _SIMPLE:
        return text
    if not tight and node.type == "binary_expression" and (op := node.child_by_field_name("operator")) is not None \
            and op.type in ("+", "-", "*", "/", "%"):
        return text
    return f"({text})"


def _plus(th: Threads, size: Node, more: str, value: int | None) -> str:
    """``size + more`` for a declaration, as one number when the size is literal arithmetic (``[33]``, not
    ``[32 + 1]``); a size that names a macro or template parameter keeps it (``[TILE + 1]``)."""
    if value is not None and not any(n.type == "identifier" for n in th.ctx.walk(size)):
        return str(value)
    return f"{_paren(th, size)} + {more}"


def _index_edits(th: Threads, arr: SharedArray, uses: list[Node], period: int, pad: int
                 ) -> list[tuple[int, int, str]] | None:
    """``a[i]`` -> ``a[i + P*(i / C)]`` for every use of a 1-D array (None, declined: an index with effects)."""
    shift = period.bit_length() - 1 if period & (period - 1) == 0 else None
    out: list[tuple[int, int, str]] = []
    for u in uses:
        idx = u.child_by_field_name("indices") or u.child_by_field_name("index")
        if idx is not None and idx.type == "subscript_argument_list":
            idx = idx.named_children[0] if idx.named_child_count == 1 else None
        if idx is None:
            return declined(f"`{th.ctx.text(u)}` has no single index to pad", u, Stage.LEGALITY)
        for n in th.ctx.walk(idx):
            if n.type in ("assignment_expression", "update_expression", "comma_expression") or (
                    n.type == "call_expression" and call_name(th.ctx, n) in VARYING_CALLS):
                return declined(f"the index of `{th.ctx.text(u)}` has a side effect, and padding it repeats it",
                                u, Stage.LEGALITY)
            if n.type == "identifier" and th.name(n) == arr.name:
                return declined(f"`{arr.name}` is indexed by its own elements (`{th.ctx.text(u)}`)", u,
                                Stage.LEGALITY)
        if not any(n.type == "identifier" for n in th.ctx.walk(idx)) and (c := th.number(th.value(idx).rest)) \
                is not None and th.value(idx).uniform and c >= 0:
            out.append((idx.start_byte, idx.end_byte, str(c + pad * (c // period))))
            continue
        i, tight = _paren(th, idx), _paren(th, idx, tight=True)
        step = f"({tight} >> {shift})" if shift is not None else f"{tight} / {period}"
        if shift is None and pad > 1:
            step = f"({step})"
        out.append((idx.start_byte, idx.end_byte, f"{i} + {f'{pad} * ' if pad > 1 else ''}{step}"))
    return out


def _elems(words: int, b: int) -> int:
    """Elements in ``words`` bank words of padding (at least one element: 8- and 16-byte types)."""
    return max(1, words * 4 // b)


@dataclass
class _Plan:
    layouts: list[_Layout]
    smem: str | None


def _array(th: Threads, ctx: RuleContext, arr: SharedArray, sites: list[_Site], bx: int | None
           ) -> _Layout | None:
    """The layout for one conflicted array, or None (declined, with the words)."""
    loc = th.locals.get(arr.name)
    if loc is None or loc.decl is None or not loc.shared:
        return declined(f"`{arr.name}` is declared at file scope: the rewrite edits only the kernel's definition",
                        None, Stage.LEGALITY)
    b = arr.elem_bytes
    if b is None:
        return declined(f"the element size of `{arr.name}` ({arr.elem}) is not known", loc.decl, Stage.LEGALITY)
    rank = len(arr.dims)
    uses = _uses(th, arr.name, rank, loc.decl)
    if uses is None:
        return None
    hidden = _in_macro(th, arr.name)
    if hidden is not None:
        return declined(f"`{arr.name}` is named inside the macro `{hidden}`, whose accesses the rewrite cannot "
                        "pad (the kernel's canonical form, macros expanded, is asked instead)", loc.decl,
                        Stage.LEGALITY)
    before = _cost(sites, b)
    # rows of a 2-D/3-D array take 1-16 words; a 1-D array one word (the classic ``i + (i >> 5)``: a wider skew
    # every period is legal but no author writes it, and the periods to try multiply the work)
    pads = sorted({_elems(w, b) for w in WORDS}) if rank >= 2 else [_elems(1, b)]
    size = loc.array_dims[-1]
    row = max(1, 128 // b)
    if rank >= 2:
        if arr.dims[-1] is None or size is None:
            return declined(f"the row length of `{arr.name}` ({arr.dims_text[-1]}) is not known", loc.decl,
                            Stage.LEGALITY)
        periods = {arr.dims[-1]}
    else:
        periods = {row} | {abs(o[1] - o[0]) for s in sites for o, _, _ in s.samples if len(o) > 1} \
            | {abs(o[bx] - o[0]) for s in sites for o, _, _ in s.samples if bx is not None and len(o) > bx}
        periods = {p for p in periods if 2 <= p <= 4096}
    # the fewest passes; at equal passes the smallest padding, then the bank row (the classic ``i >> 5``)
    after, pad, period = min(((_cost(sites, b, c, p), p, c) for c in periods for p in pads),
                             key=lambda t: (t[0].waves, t[0].worst, t[1], t[2] != row, t[2]))
    lay = _Layout(arr, period, pad, before, after)
    if rank >= 2 and size is not None:
        lay.edits = [(size.start_byte, size.end_byte, _plus(th, size, str(pad), period + pad))]
    else:
        edits = _index_edits(th, arr, uses, period, pad)
        if edits is None:
            return None
        lay.edits = edits
        if size is None:
            got = _dynamic(th, ctx, arr, period, pad)
            if got is None:
                return None
            lay.smem = got
        else:
            n, count = _paren(th, size), arr.dims[0]
            more = f"({n} - 1) / {period}" if pad == 1 else f"{pad} * (({n} - 1) / {period})"
            total = count + pad * ((count - 1) // period) if count else None
            lay.edits.append((size.start_byte, size.end_byte, _plus(th, size, more, total)))
    if not (after.worst < before.worst and after.waves < before.waves):
        words = f"by 1 to {WORDS[-1]} bank words" if rank >= 2 else "by one bank word"
        return declined(f"padding `{arr.name}` ({words}) does not spread the lanes of "
                        f"`{th.ctx.text(before.worst_at) if before.worst_at is not None else arr.name}` "
                        f"(a {before.worst:g}-way conflict stays {after.worst:g}-way): its lanes collide inside "
                        "one padded period", before.worst_at, Stage.LEGALITY)
    return lay


def _dynamic(th: Threads, ctx: RuleContext, arr: SharedArray, period: int, pad: int) -> str | None:
    """The launch's new dynamic shared-memory bytes for a padded ``extern __shared__`` array (None: declined)."""
    externs = [loc for loc in th.locals.values() if loc.shared and loc.array_dims and loc.array_dims[-1] is None]
    if len(externs) != 1:
        return declined(f"the kernel declares {len(externs)} `extern __shared__` arrays: they share one buffer, "
                        "so padding one moves the others", None, Stage.LEGALITY)
    r = th.ctx.resolved
    if r is None or r.smem <= 0:
        return declined(f"`{arr.name}` is dynamic shared memory and the launch gives no shared-memory bytes to "
                        "enlarge", None, Stage.LAUNCH)
    b = arr.elem_bytes or 1
    s = ctx.smem
    return f"({s}) + {pad * b} * ((({s}) / {b} - 1) / {period})"


def _static_bytes(th: Threads, layouts: list[_Layout]) -> int | str:
    """The kernel's static shared bytes once padded, or the name of an array whose size is not known."""
    padded = {lay.arr.name: lay for lay in layouts}
    total = 0
    for arr in th.shared_arrays().values():
        loc = th.locals.get(arr.name)
        if loc is not None and loc.array_dims and loc.array_dims[-1] is None:
            continue  # dynamic
        if arr.elem_bytes is None or any(d is None for d in arr.dims):
            return arr.name
        n = 1
        for d in arr.dims:
            n *= d or 0
        lay = padded.get(arr.name)
        if lay is not None:
            n += lay.pad * ((n - 1) // lay.period) if n else 0
        total += n * arr.elem_bytes
    return total


#: types ``declined``'s None as a missing plan
_NO_PLAN: _Plan | None = None


def _no_shared(ctx: RuleContext) -> _Plan | None:
    """Why a kernel with no ``__shared__`` array of its own is not this rule's (one at file scope is named)."""
    k = ctx.cand_kernel
    outside = sorted(n for d in ctx.model.declarations if d.space == "__shared__" for n in d.names
                     if k is not None and n in k.uses)
    if outside:  # the candidate is the kernel's definition alone: the lane model cannot see the file's arrays
        return declined(f"`{outside[0]}` is declared at file scope: the rewrite edits only the kernel's "
                        "definition", None, Stage.LEGALITY, result=_NO_PLAN)
    return declined("the kernel declares no `__shared__` array", None, Stage.SCOPE, result=_NO_PLAN)


def plan(ctx: RuleContext) -> _Plan | None:
    """The arrays to pad and how, or None (the reason recorded with ``declined``)."""
    if "__shared__" not in ctx.candidate.definition:
        # the scope first, before the file is re-parsed around the candidate (``_kernel_context``): the why-not
        # hint asks every rule about every kernel of a file, and a 2 MB file spent a third of its time here
        return _no_shared(ctx)
    kctx = _kernel_context(ctx)
    if kctx is None or kctx.body is None:
        return None
    th = threads(kctx)
    if th.too_big:
        return declined("the kernel is too large for the lane model", None, Stage.SCOPE)
    arrays = th.shared_arrays()
    if not arrays:
        return _no_shared(ctx)
    bx = block_x(kctx)
    lanes = min(32, kctx.block_threads or 32)
    sites: dict[str, list[_Site]] = {}
    for sa in th.shared_accesses():
        s = _site(th, sa, bx, lanes)
        if s is not None:
            sites.setdefault(sa.array.name, []).append(s)
    layouts: list[_Layout] = []
    worst = 0.0
    for name in sorted(sites, key=lambda n: arrays[n].decl_line):
        arr = arrays[name]
        if arr.elem_bytes is None:
            continue
        before = _cost(sites[name], arr.elem_bytes)
        worst = max(worst, before.worst)
        if before.worst < MIN_DEGREE:
            continue
        lay = _array(th, ctx, arr, sites[name], bx)
        if lay is not None:
            layouts.append(lay)
    if not layouts:
        if worst < MIN_DEGREE:
            return declined("no shared-memory access has a bank conflict of 2-way or more that the lane model "
                            f"can see (worst {worst:g}-way)" if worst else
                            "no shared-memory access has lane strides the lane model can see", None, Stage.SCOPE)
        return None
    static = _static_bytes(th, layouts)
    if isinstance(static, str):
        return declined(f"the size of `{static}` is not known, so the padded total cannot be checked against the "
                        "48 KB static limit", None, Stage.LAUNCH)
    dyn = next((lay for lay in layouts if lay.smem is not None), None)
    r = kctx.resolved
    extra = 0
    if dyn is not None and r is not None:
        b = dyn.arr.elem_bytes or 1
        extra = r.smem + dyn.pad * b * ((r.smem // b - 1) // dyn.period)
    if static + extra > MAX_STATIC:
        return declined(f"padded, the kernel's shared memory ({static + extra} bytes) exceeds the 48 KB a block "
                        "gets without opting in", None, Stage.LAUNCH)
    return _Plan(layouts, dyn.smem if dyn is not None else None)


def _describe(lay: _Layout) -> str:
    a = lay.arr
    if len(a.dims) >= 2:
        what = f"rows of `{a.name}` {lay.period} -> {lay.period + lay.pad} elements"
    else:
        what = f"`{a.name}` indexed as i + {f'{lay.pad} * ' if lay.pad > 1 else ''}(i / {lay.period})"
    return f"{what} ({lay.before.worst:g}-way -> {lay.after.worst:g}-way)"


class SmemPadding(Rule):
    family = "smem_padding"
    structural = True
    motivated_by = ("WF105", "WF206", "smem_padding")

    def variants(self, ctx: RuleContext) -> list[str]:
        if self.already_applied(ctx):
            return []
        return [PARAM] if plan(ctx) is not None else []

    def apply(self, ctx: RuleContext, param: str) -> Candidate | None:
        p = plan(ctx) if param == PARAM and not self.already_applied(ctx) else None
        if p is None:
            return None
        k = ctx.cand_kernel
        at = k.span.start if k is not None else 0
        edits = [(at + a, at + b, t) for lay in p.layouts for a, b, t in lay.edits]
        definition = splice(ctx.cand_src.data, edits)
        why = "pad shared memory by bank words against bank conflicts: " + "; ".join(
            _describe(lay) for lay in p.layouts)
        return ctx.derive(self.family, param, why, definition=definition, smem=p.smem)


register(SmemPadding())
