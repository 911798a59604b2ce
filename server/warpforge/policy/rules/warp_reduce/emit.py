"""The code that replaces a recognized tree loop: a halving tree finished with warp shuffles.

Why a module of its own: every spelling the matcher reads (``tree.py``) is written back in one form — the
halving tree ``for (s = S0; s > 32; s >>= 1) { if (tid < s) sh[tid] = c(sh[tid], sh[tid + s]); sync }``
whose last five steps run in warp 0 as ``__shfl_down_sync`` — guarded by run-time conditions under which that
is the same reduction, with the user's loop kept, unchanged, for everything else.
"""

from __future__ import annotations

from .._structural import indent
from .tree import TreeLoop

#: the prefix of every name this rewrite introduces (one per rule, so rules compose without clashes)
PREFIX = "wfr_"

VARIANTS = ("tail", "warps")
_FULL = "0xffffffffu"


def _combine(fmt: str, a: str, b: str) -> str:
    return fmt.format(a=a, b=b)


def _shuffles(loop: TreeLoop, vs: list[str], offsets: str) -> str:
    # each shuffle is bound to a name before the combine: a combine written as a select (``b < a ? b : a``)
    # would otherwise evaluate it in one arm only, a full-mask shuffle run by some lanes (it hung on an H200)
    steps = "\n".join(f"    const {c.elem} {v}_in = __shfl_down_sync({_FULL}, {v}, {PREFIX}o);\n"
                      f"    {v} = {_combine(c.fmt, v, f'{v}_in')};"
                      for c, v in zip(loop.combines, vs, strict=True))
    return f"for (int {PREFIX}o = {offsets}; {PREFIX}o > 0; {PREFIX}o >>= 1) {{\n{steps}\n}}"


def _stores(loop: TreeLoop, vs: list[str], tid: str) -> str:
    body = "\n".join(f"    {c.array}[0] = {v};" for c, v in zip(loop.combines, vs, strict=True))
    return f"if ({tid} == 0) {{\n{body}\n}}"


def fast_conditions(loop: TreeLoop, variant: str) -> list[str]:
    """When the shuffle version computes the same reduction (all uniform in the block)."""
    s0 = f"({loop.start})"
    if loop.form == "interleaved":
        # the doubling tree over N elements folds the same N values as the halving tree from N/2 when N is a
        # power of two and a thread exists for each of them
        return list(loop.fast)
    out = [f"{s0} >= 16", f"{s0} <= 512", f"({s0} & ({s0} - 1)) == 0"]
    if variant == "warps":
        out.append(f"2 * {s0} <= blockDim.x")  # one thread loads each of the 2*S0 elements
    return out


def replacement(loop: TreeLoop, variant: str, n: int) -> str:
    """The code that takes the loop's place (``n`` numbers the trees of one kernel)."""
    s0 = f"({loop.start})"
    tid = loop.tid
    vs = [f"{PREFIX}v{n}_{k}" for k in range(len(loop.combines))]
    sync0 = "__syncthreads();\n" if loop.barrier_first else ""
    if variant == "tail":
        s = f"{PREFIX}s{n}"
        steps = "\n".join(
            f"        {c.array}[{tid}] = {_combine(c.fmt, f'{c.array}[{tid}]', f'{c.array}[{tid} + {s}]')};"
            for c in loop.combines)
        loads = "\n".join(f"    {c.elem} {v} = {c.array}[{tid}];" for c, v in zip(loop.combines, vs, strict=True))
        folds = "\n".join(f"        {v} = {_combine(c.fmt, v, f'{c.array}[{tid} + 32]')};"
                          for c, v in zip(loop.combines, vs, strict=True))
        fast_code = f"""{sync0}for (int {s} = {s0}; {s} > 32; {s} >>= 1) {{
    if ({tid} < {s}) {{
{steps}
    }}
    __syncthreads();
}}
if ({tid} < 32) {{
{loads}
    if ({s0} >= 32) {{
{folds}
    }}
{indent(_shuffles(loop, vs, "16"), "    ")}
{indent(_stores(loop, vs, tid), "    ")}
}}"""
    else:
        parts = [f"{PREFIX}warp{n}_{k}" for k in range(len(loop.combines))]
        decls = "\n".join(f"__shared__ {c.elem} {p}[32];" for c, p in zip(loop.combines, parts, strict=True))
        loads = "\n".join(f"    {c.elem} {v} = {c.array}[{tid}];" for c, v in zip(loop.combines, vs, strict=True))
        keep = "\n".join(f"        {p}[{tid} >> 5] = {v};" for p, v in zip(parts, vs, strict=True))
        gather = "\n".join(f"    {c.elem} {v} = {p}[{tid} < {PREFIX}nw{n} ? {tid} : 0];"
                           for c, v, p in zip(loop.combines, vs, parts, strict=True))
        fast_code = f"""{sync0}{decls}
if ({tid} < 2 * {s0}) {{
{loads}
{indent(_shuffles(loop, vs, "16"), "    ")}
    if (({tid} & 31) == 0) {{
{keep}
    }}
}}
__syncthreads();
if ({tid} < 32) {{
    const int {PREFIX}nw{n} = (2 * {s0}) >> 5;
{gather}
{indent(_shuffles(loop, vs, f"{PREFIX}nw{n} >> 1"), "    ")}
{indent(_stores(loop, vs, tid), "    ")}
}}"""
    fast = " && ".join(fast_conditions(loop, variant))
    return f"""if ({fast}) {{
{indent(fast_code, "    ")}
}} else {{
{indent(loop.original, "    ")}
}}
__syncthreads();"""
