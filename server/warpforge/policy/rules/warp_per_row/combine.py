"""How lanes' partials become the row's value: butterflies of ``__shfl_xor_sync`` for sums, min/max,
argmax/argmin pairs and online-softmax (max, sum) pairs, and for a block per row the warps' results
through shared memory.

Why a module of its own: each reduction kind has its own merge (the arg pairs keep serial tie-breaking, the
online pairs rescale), and these are the parts a reviewer checks for numerical equivalence.
"""

from __future__ import annotations

from .shape import _FULL, PREFIX, _Reduction


def _combine(kind: str, a: str, b: str) -> str:
    return f"{a} + {b}" if kind == "sum" else f"{kind}({a}, {b})"


def _simple_combine(r: _Reduction, p: str, n: int, block: bool, decls: list[str]) -> list[str]:
    """A sum's or min/max's lane partials combined (a butterfly, then the warps' results through shared
    memory for a block) and joined to the accumulator."""
    lines = [f"for (int {PREFIX}o = 16; {PREFIX}o > 0; {PREFIX}o >>= 1) {{\n"
             f"    {p} = {_combine(r.kind, p, f'__shfl_xor_sync({_FULL}, {p}, {PREFIX}o)')};\n}}"]
    if block:
        sh = f"{PREFIX}red{n}_{r.acc}"
        decls.append(f"__shared__ {r.type} {sh}[32];")
        lines.append(f"if ({PREFIX}lane == 0) {{\n    {sh}[{PREFIX}warp] = {p};\n}}")
        lines.append("__syncthreads();")
        lines.append(f"{p} = {sh}[0];")
        lines.append(f"for (int {PREFIX}w = 1; {PREFIX}w < {PREFIX}nwarps; ++{PREFIX}w) {{\n"
                     f"    {p} = {_combine(r.kind, p, f'{sh}[{PREFIX}w]')};\n}}")
    lines.append(f"{r.acc} = {r.acc} + {p};" if r.kind == "sum" else f"{r.acc} = {p};")
    return lines


def _online_merge(r: _Reduction, pm: str, ps: str, om: str, os_: str) -> list[str]:
    """Merge the pair (om, os_) into (pm, ps): the smaller max's sum is rescaled to the larger one (equal
    maxima add as they are, so two partials that saw nothing but their start value do not meet
    exp(-inf + inf))."""
    e = r.exp
    return [
        f"if ({om} > {pm}) {{",
        f"    {ps} = {ps} * {e}({pm} - {om}) + {os_};",
        f"    {pm} = {om};",
        f"}} else if ({om} == {pm}) {{",
        f"    {ps} += {os_};",
        "} else {",
        f"    {ps} += {os_} * {e}({om} - {pm});",
        "}",
    ]


def _online_combine(r: _Reduction, pm: str, ps: str, n: int = 0, block: bool = False,
                    decls: list[str] | None = None) -> list[str]:
    """Butterfly over (max, sum relative to it) with ``_online_merge``. Both lanes of a pair compute the same
    sum (the addition commutes), so every lane ends with the warp's pair; for a block, lane 0 of each warp
    posts it to shared memory and every thread merges the warps' pairs in warp order (all threads alike).
    The row's pair then joins the accumulators the loop started from (its max is at least theirs: every
    partial started from it)."""
    o, om, os_ = f"{PREFIX}o", f"{PREFIX}om", f"{PREFIX}os"
    e = r.exp
    lines = [
        f"for (int {o} = 16; {o} > 0; {o} >>= 1) {{",
        f"    {r.type} {om} = __shfl_xor_sync({_FULL}, {pm}, {o});",
        f"    {r.index_type} {os_} = __shfl_xor_sync({_FULL}, {ps}, {o});",
        *("    " + x for x in _online_merge(r, pm, ps, om, os_)),
        "}",
    ]
    if block:
        assert decls is not None
        shm, shs, w = f"{PREFIX}red{n}_{r.acc}", f"{PREFIX}red{n}_{r.index}", f"{PREFIX}w"
        decls.append(f"__shared__ {r.type} {shm}[32];")
        decls.append(f"__shared__ {r.index_type} {shs}[32];")
        lines += [
            f"if ({PREFIX}lane == 0) {{",
            f"    {shm}[{PREFIX}warp] = {pm};",
            f"    {shs}[{PREFIX}warp] = {ps};",
            "}",
            "__syncthreads();",
            f"{pm} = {shm}[0];",
            f"{ps} = {shs}[0];",
            f"for (int {w} = 1; {w} < {PREFIX}nwarps; ++{w}) {{",
            f"    {r.type} {om} = {shm}[{w}];",
            f"    {r.index_type} {os_} = {shs}[{w}];",
            *("    " + x for x in _online_merge(r, pm, ps, om, os_)),
            "}",
        ]
    return [
        *lines,
        f"if ({pm} > {r.acc}) {{",
        f"    {r.index} = {r.index} * {e}({r.acc} - {pm});",
        f"    {r.acc} = {pm};",
        "}",
        f"{r.index} += {ps};",
    ]


def _arg_combine(r: _Reduction, p: str, pj: str, pf: str) -> list[str]:
    """Butterfly over (value, flag, index): a larger (argmin: smaller) value wins; on equal values a found
    pair beats the start value, then the first (strict compare) or last index wins, as in serial order."""
    better = ">" if r.kind == "argmax" else "<"
    order = "<" if r.first else ">"
    o = f"{PREFIX}o"
    return [
        f"for (int {o} = 16; {o} > 0; {o} >>= 1) {{",
        f"    {r.type} {PREFIX}ob = __shfl_xor_sync({_FULL}, {p}, {o});",
        f"    {r.index_type} {PREFIX}oj = __shfl_xor_sync({_FULL}, {pj}, {o});",
        f"    int {PREFIX}of = __shfl_xor_sync({_FULL}, {pf}, {o});",
        f"    if ({PREFIX}ob {better} {p} || ({PREFIX}ob == {p} && {PREFIX}of"
        f" && (!{pf} || {PREFIX}oj {order} {pj}))) {{",
        f"        {p} = {PREFIX}ob;",
        f"        {pj} = {PREFIX}oj;",
        f"        {pf} = {PREFIX}of;",
        "    }",
        "}",
        f"{r.acc} = {p};",
        f"{r.index} = {pj};",
    ]
