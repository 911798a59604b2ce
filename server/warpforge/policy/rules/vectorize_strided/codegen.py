"""Code generation of ``vectorize_strided``: the row's head and tail through the original loop, vector chunks
between."""

from __future__ import annotations

from tree_sitter import Node

from ....cuda.tree import node_text
from .._structural import (
    flush,
    indent,
    render,
)
from .model import PREFIX, Loop


def generate(lp: Loop, data: bytes, w: int, k: int) -> str:
    """The chunked loop replacing ``lp`` (``k`` numbers the loop's names, several loops may be rewritten)."""
    p = f"{PREFIX}{k}_"
    t = lp.vtype
    streams = list(lp.streams.values())
    names = {(s.ptr, s.off): f"{p}s{i}" for i, s in enumerate(streams)}
    types = "\n".join(f"struct alignas(sizeof({s.elem}) * {w}) {names[(s.ptr, s.off)]}_t {{ {s.elem} e[{w}]; }};"
                      for s in streams)
    base = {(s.ptr, s.off): f"({s.ptr} + ({s.off}))" if s.off else s.ptr for s in streams}
    ids = {x.id: names[(s.ptr, s.off)] for s in streams for x in s.nodes}
    comps: list[str] = []
    loads: list[str] = []
    for s in streams:
        nm = names[(s.ptr, s.off)]
        cq = "const " if s.const else ""
        if s.read or not s.always_written:
            q = "" if s.written else "const "
            loads.append(f"{q}{nm}_t {nm} = *reinterpret_cast<{cq}{nm}_t*>({base[(s.ptr, s.off)]} + {p}j0);")
        else:
            loads.append(f"{nm}_t {nm};")
    for c in range(w):
        uses = False

        def rep(n: Node, c: int = c) -> str | None:
            nonlocal uses
            if n.type == "subscript_expression" and n.id in ids:
                return f"{ids[n.id]}.e[{c}]"
            if n.type == "identifier" and node_text(n, data) == lp.var:
                uses = True
            return None

        stmts = "\n".join(flush(render(st, data, rep), st, data) for st in lp.body)
        head = f"const {t} {lp.var} = {p}j0 + {c};\n" if uses else ""
        comps.append("{\n" + indent(head + stmts, "    ") + "\n}")
    stores = [f"*reinterpret_cast<{names[(s.ptr, s.off)]}_t*>({base[(s.ptr, s.off)]} + {p}j0) = "
              f"{names[(s.ptr, s.off)]};" for s in streams if s.written]
    scalar = "\n".join(flush(node_text(st, data), st, data) for st in lp.body)
    vec = "\n".join(loads + comps + stores)
    # The row's first elements up to the first vector boundary of its streams (they must share it: one element
    # size, the same offset within a vector) run the original loop, then the vector chunks, then the original
    # loop over the tail: an odd-length row (llm.c's 50257-wide softmax rows) gets vectors too. Streams that do
    # not share a boundary leave the whole row to the original loop.
    addr = [f"reinterpret_cast<unsigned long long>({base[(s.ptr, s.off)]})" for s in streams]
    size0 = f"sizeof({streams[0].elem})"
    same = " && ".join([f"{a} % sizeof({s.elem}) == 0" for a, s in zip(addr, streams, strict=True)]
                       + [f"sizeof({s.elem}) == {size0} && {a} / {size0} % {w} == {p}mis" for a, s in
                          zip(addr[1:], streams[1:], strict=True)])
    inner = f"""{types}
const {t} {p}n = {lp.bound};
const unsigned long long {p}mis = {addr[0]} / {size0} % {w};
const {t} {p}lead = ({same}) ? ({t})(({w} - {p}mis) % {w}) : {p}n;
const {t} {p}pe = {p}lead < {p}n ? {p}lead : {p}n;
for ({t} {lp.var} = {lp.start}; {lp.var} < {p}pe; {lp.var} += {lp.step}) {{
{indent(scalar, "    ")}
}}
const {t} {p}nv = ({p}n - {p}pe) / {w};
for ({t} {p}c = {lp.start}; {p}c < {p}nv; {p}c += {lp.step}) {{
    const {t} {p}j0 = {p}pe + {p}c * {w};
{indent(vec, "    ")}
}}
for ({t} {lp.var} = {p}pe + {p}nv * {w} + {lp.start}; {lp.var} < {p}n; {lp.var} += {lp.step}) {{
{indent(scalar, "    ")}
}}"""
    return "{\n" + indent(inner, "    ") + "\n}"


