"""Dead locals: a local nothing reads any more is dropped, so the statements the rules match are the kernel's work.

Why: the rules read a kernel's top-level statements in order (``elementwise_1d`` looks for the index, then its
guard or loop). Once ``grid_stride_loop`` has written a loop's start and step in its header, the locals that
held them (``int index = ...; int stride = blockDim.x * gridDim.x;``) are read nowhere, yet the first of them
still looks like "the thread's index" to a matcher, which then expects a guard after it and finds a loop.
Removing a declaration is exact when its initializer has no effect (no call, assignment or increment) and no
other statement names the local.
"""

from __future__ import annotations

from ...cuda.tree import unparen
from .passes import Changed, Kernel, PassEnv, Result, idents, register, side_effect_free, splice


@register("dead_locals", "a local declared with one side-effect-free initializer and named by no other statement")
def dead_locals(k: Kernel, env: PassEnv) -> Result:
    del env
    for st in k.body.children:
        if st.type != "declaration":
            continue
        ds = st.children_by_field_name("declarator")
        if len(ds) != 1 or ds[0].type != "init_declarator":
            continue
        name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
        if name is None or value is None or name.type != "identifier" or not side_effect_free(value):
            continue
        if unparen(value).type == "initializer_list":
            continue  # an aggregate: its elements are not one value the rules would name
        uses = [u for u in idents(k.fn, k.data, k.t(name)) if u.id != name.id]
        if uses:
            continue
        a, b = st.start_byte, st.end_byte
        while a > 0 and k.data[a - 1:a] in (b" ", b"\t"):
            a -= 1
        while b < len(k.data) and k.data[b:b + 1] in (b" ", b"\t"):
            b += 1
        if (a == 0 or k.data[a - 1:a] == b"\n") and k.data[b:b + 1] == b"\n":
            b += 1  # the declaration had its line to itself: the line goes
        else:
            a, b = st.start_byte, st.end_byte
        return Changed(splice(k.data, [(a, b, "")]), f"`{k.t(name)}` is read nowhere")
    return None
