"""Type passes: typedef'd types in the signature, and the spec's template instantiation, substituted.

Why: element sizes decide vector widths and shuffle types; ``real* y`` (``typedef float real;``) or ``T* y``
with ``T = float`` hide them. ``cuda.normalize`` resolves typedefs in the body only; the signature is
resolved here (the build's signature guard reads a typedef and what it names as the same type). Template
parameters are substituted in the body only: the definition must stay the template the launch
instantiates, but inside it every use of a parameter means the spec's argument (a value, a type, a
function passed as a template argument: ``op(x)`` becomes ``square(x)``, which ``inline_calls`` inlines).
"""

from __future__ import annotations

import re

from ...cuda.tree import walk
from .passes import Changed, Kernel, PassEnv, Result, register, splice


@register("signature_typedefs", "a parameter type that is a file-level typedef or `using` of a scalar type")
def signature_typedefs(k: Kernel, env: PassEnv) -> Result:
    if not env.typedefs:
        return None
    decl = k.fn.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    if plist is None:
        return None
    edits = [(n.start_byte, n.end_byte, env.typedefs[k.t(n)]) for n in walk(plist, ("type_identifier",))
             if k.t(n) in env.typedefs and k.t(n) not in env.template_args]
    if not edits:
        return None
    return Changed(splice(k.data, edits), "typedef'd parameter types resolved")


@register("template_arguments", "the spec gives the kernel's template arguments")
def template_arguments(k: Kernel, env: PassEnv) -> Result:
    if not env.template_args:
        return None
    edits = []
    for n in walk(k.body, ("identifier", "type_identifier")):
        name = k.t(n)
        if name not in env.template_args:
            continue
        p = n.parent
        if p is not None and p.type == "field_expression" and p.child_by_field_name("field") == n:
            continue
        arg = env.template_args[name]
        plain = n.type == "type_identifier" or arg.isidentifier() or re.fullmatch(r"-?[\d.]+[uUlLfF]*", arg)
        edits.append((n.start_byte, n.end_byte, arg if plain else f"({arg})"))
    if not edits:
        return None
    return Changed(splice(k.data, edits), "template parameters replaced by the spec's arguments in the body")
