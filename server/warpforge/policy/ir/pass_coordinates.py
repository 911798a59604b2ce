"""Output coordinates: a 2-D kernel whose indices spell the block's origin and the thread's offset apart,
rewritten to name the thread's row and column.

Why: NVIDIA's samples and many courses index a tile by its origin, ``aBegin = wA * BLOCK_SIZE * blockIdx.y``
then ``A[a + wA * threadIdx.y + k]``, or ``(bid_y + tid_y) * K`` with ``bid_y = blockIdx.y * blockDim.y``. On
a launch whose block is ``(Bx, By)`` every such index is ``cy * row + cx * col + rest`` with ``row = blockIdx.y
* blockDim.y + threadIdx.y`` (``col`` along x); the structural rules (``smem_tiling``) read the output's
coordinates from those two declarations and decline a thread coordinate used anywhere else. Un-staging
(``unstage_tiles``) leaves the cuda-samples GEMMs in exactly this shape.

The rewrite (``output_coordinates``): ``row``/``col`` declared first in the body (or the kernel's own
declarations of them reused), each index that reads a thread coordinate (directly or through a local) written
as that polynomial, and the locals that only fed those indices removed. Exact when (each checked):

* the launch's block is known and the same at every size of the spec, with ``blockDim.z == 1``, and no
  ``.z`` coordinate is read;
* every thread coordinate is read in an array index, or in the value of a top-level local declared once and
  never written whose every use is again such an index or such a local's value;
* each of those indices is affine, with the coefficient of ``blockIdx.y`` equal to ``By`` times that of
  ``threadIdx.y`` (``Bx`` along x), so it equals ``cy * row + cx * col + rest`` in integers on that block;
* what a rewritten index spells out (locals followed to their values) names nothing the kernel writes but loop
  counters;
* the kernel has no shared memory and no barrier (its indices are its global accesses).
"""

from __future__ import annotations

from tree_sitter import Node

from ...cuda.poly import padd, pmul
from ...cuda.tree import walk, written_names
from .affine import NonAffine, Poly, Scope, poly
from .passes import Changed, Kernel, PassEnv, Result, Skipped, register, splice
from .passes import Unmet as _No
from .polyops import coefficient, names_read, render, substitute
from .summary import params_of, scope_of

_COORDS = ("threadIdx.x", "threadIdx.y", "blockIdx.x", "blockIdx.y")
_BLOCK = ("blockDim.x", "blockDim.y", "blockDim.z")




def _coordinate(n: Node, k: Kernel) -> str | None:
    if n.type != "field_expression":
        return None
    t = "".join(k.t(n).split())
    return t if t.split(".")[0] in ("threadIdx", "blockIdx") else None


def _site(n: Node, k: Kernel) -> tuple[str, Node] | None:
    """Where a coordinate (or a local's name) is read: ("index", the index node of the innermost subscript
    it is in) or ("local", the init_declarator of a top-level declaration whose value it is in)."""
    cur = n
    while cur.parent is not None:
        p = cur.parent
        if p.type == "subscript_argument_list" and p.parent is not None and p.parent.type == "subscript_expression":
            return ("index", p)
        if p.type == "init_declarator" and p.child_by_field_name("value") == cur and p.parent is not None \
                and p.parent.type == "declaration" and p.parent.parent == k.body:
            return ("local", p)
        if p.type in ("expression_statement", "compound_statement", "for_statement", "if_statement",
                      "return_statement", "declaration"):
            return None
        cur = p
    return None


def _canonical(value: Node, scope: Scope, norm: dict[str, int], axis: str) -> bool:
    """Whether ``value`` is ``blockIdx.<axis> * blockDim.<axis> + threadIdx.<axis>`` on the block."""
    try:
        got = substitute(poly(value, scope), norm)
    except NonAffine:
        return False
    want = substitute({(f"blockIdx.{axis}", f"blockDim.{axis}"): 1, (f"threadIdx.{axis}",): 1}, norm)
    return got == want


@register("output_coordinates", "a 2-D launch with a known block whose indices read the block's origin and the "
                                "thread's offset apart (through locals), each equal to cy * row + cx * col + rest")
def output_coordinates(k: Kernel, env: PassEnv) -> Result:
    try:
        return _rewrite(k, env)
    except _No as e:
        return Skipped(e.reason, k.line(e.node))


def _rewrite(k: Kernel, env: PassEnv) -> Result:
    coords = [n for n in walk(k.body, ("field_expression",)) if _coordinate(n, k) is not None]
    if not coords or not env.blocks:
        return None
    if any("__shared__" in k.t(d) for d in walk(k.body, ("declaration",))) or "__syncthreads" in k.text:
        return None
    _, uniform = params_of(k)
    scope = scope_of(k, uniform | set(env.constants), set())
    norm: dict[str, int] = {}
    if len(set(env.blocks)) == 1:
        norm = dict(zip(_BLOCK, env.blocks[0], strict=True))
    bx, by, bz = env.blocks[0]
    if not norm or bz != 1 or by == 1:
        return None
    if any(_coordinate(n, k) not in _COORDS for n in coords):
        return None
    # the kernel's own row/col declarations, if it has them: kept, and reused
    names: dict[str, str] = {}
    keep: set[Node] = set()
    for d in k.body.named_children:
        ds = d.children_by_field_name("declarator") if d.type == "declaration" else []
        if len(ds) != 1 or ds[0].type != "init_declarator":
            continue
        nm, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if nm is None or v is None or nm.type != "identifier" or k.t(nm) in written_names(k.body, k.data):
            continue
        for axis in ("y", "x"):
            if axis not in names and _canonical(v, scope, norm, axis):
                names[axis] = k.t(nm)
                keep.add(ds[0])
    # which reads of a coordinate are outside the kept declarations: each must be an index or a local's value
    sites: dict[int, Node] = {}
    locals_: dict[str, Node] = {}
    todo: list[Node] = [n for n in coords if not any(d.start_byte <= n.start_byte < d.end_byte for d in keep)]
    if not todo:
        return None
    seen: set[int] = set()
    while todo:
        n = todo.pop()
        if n.start_byte in seen and n.type == "identifier":
            continue
        seen.add(n.start_byte)
        got = _site(n, k)
        if got is None:
            raise _No(f"`{k.t(n)}` is read outside an array index (the thread's row and column would not be the "
                      "only coordinates left)", n)
        kind, node = got
        if kind == "index":
            sites[node.start_byte] = node
            continue
        if node in keep:  # the kernel's own row/col: stays, with what it reads
            continue
        nm = node.child_by_field_name("declarator")
        if nm is None or nm.type != "identifier" or k.t(nm) in written_names(k.body, k.data):
            raise _No(f"`{k.t(node)}`: a local that reads a thread coordinate is written later", node)
        name = k.t(nm)
        if name in locals_:
            continue
        locals_[name] = node
        todo += [u for u in walk(k.body, ("identifier",)) if k.t(u) == name and u != nm
                 and not (u.parent is not None and u.parent.type == "field_expression")]
    if not sites:
        return None
    written = written_names(k.body, k.data) - scope.counters  # a counter is read where it stands
    row = names.get("y") or _fresh(k, "row")
    col = names.get("x") or _fresh(k, "col", {row})
    edits: list[tuple[int, int, str]] = []
    for idx in sites.values():
        if idx.named_child_count != 1:
            raise _No(f"`{k.t(idx)}` is not one index", idx)
        e = idx.named_children[0]
        try:
            p = substitute(poly(e, scope), norm)
        except NonAffine as err:
            raise _No(f"`{k.t(e)}` is not affine: {err}", e) from None
        parts: list[tuple[Poly, str]] = []
        for axis, b, name in (("y", by, row), ("x", bx, col)):
            ct, cb = coefficient(p, f"threadIdx.{axis}"), coefficient(p, f"blockIdx.{axis}")
            if cb != pmul(ct, {(): b}):
                raise _No(f"`{k.t(e)}`: its blockIdx.{axis} is not the block's {b} times its threadIdx.{axis}: not "
                          f"a multiple of the thread's {'row' if axis == 'y' else 'column'}", e)
            if any(a in _COORDS for m in ct for a in m):
                raise _No(f"`{k.t(e)}` multiplies two thread coordinates", e)
            parts.append((ct, name))
        rest: Poly = {}
        for m, c in p.items():
            if not any(a in _COORDS for a in m):
                rest = padd(rest, {m: c})
        if any(a in _COORDS for m in rest for a in m):
            raise _No(f"`{k.t(e)}` is not affine in the thread coordinates", e)
        if (names_read(rest) | {w for ct, _ in parts for w in names_read(ct)}) & written:
            raise _No(f"`{k.t(e)}` reads, through a local, a name the kernel writes: spelled out it could differ", e)
        terms = [_times(ct, name) for ct, name in parts if ct] + ([render(rest)] if rest else [])
        edits.append((e.start_byte, e.end_byte, " + ".join(terms) or "0"))
    # a local the kept row/col declarations read stays (and what it reads)
    alive: set[str] = set()
    frontier = [v for d in keep if (v := d.child_by_field_name("value")) is not None]
    while frontier:
        v = frontier.pop()
        for u in walk(v, ("identifier",)):
            if k.t(u) in locals_ and k.t(u) not in alive:
                alive.add(k.t(u))
                val = locals_[k.t(u)].child_by_field_name("value")
                if val is not None:
                    frontier.append(val)
    for name, d in locals_.items():
        if name in alive:
            continue
        decl = d.parent
        assert decl is not None
        start = k.data.rfind(b"\n", 0, decl.start_byte) + 1
        whole = not k.data[start:decl.start_byte].strip() and k.data[decl.end_byte:decl.end_byte + 1] == b"\n"
        edits.append((start, decl.end_byte + 1, "") if whole else (decl.start_byte, decl.end_byte, ""))
    head = "".join(f"\n    int {name} = blockIdx.{axis} * blockDim.{axis} + threadIdx.{axis};"
                   for axis, name in (("y", row), ("x", col)) if axis not in names)
    open_brace = k.body.children[0]
    if head:
        edits.append((open_brace.end_byte, open_brace.end_byte, head))
    return Changed(splice(k.data, edits), f"indices written in the thread's `{row}` and `{col}`")


def _times(c: Poly, name: str) -> str:
    if c == {(): 1}:
        return name
    t = render(c)
    return f"{t} * {name}" if len(c) == 1 else f"({t}) * {name}"


def _fresh(k: Kernel, base: str, taken: set[str] | None = None) -> str:
    used = {k.t(n) for n in walk(k.fn, ("identifier",))} | (taken or set())
    name = base
    while name in used:
        name = f"wf_{name}"
    return name
