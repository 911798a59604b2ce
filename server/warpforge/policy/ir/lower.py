"""``lower``: a kernel, as written by anyone, to one canonical text and its IR summary.

Why: the structural rules read kernels from syntax. Rather than teach each rule every spelling, the
kernel is lowered first: the real preprocessor expands the user's macros (``preprocess``), then exact
passes (``pass_*``, and ``cuda.normalize``'s) rewrite each spelling into the one the rules read, and the
summary (``summary``) states the parallel index space, loops, accesses and accumulators.

The lowered text is the kernel's *definition* (with any helpers a candidate put before it): it replaces
the definition in the user's file exactly as a candidate's text does, so a rule's rewrite of it is an
ordinary candidate, and the edit the user accepts lands in their own file. It is never proposed by itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...cuda.model import FileModel, KernelNotFound
from ...cuda.normalize import file_facts, normalize_definition
from ...cuda.parser import parse
from ...spec.expr import ExprError
from ...spec.expr import parse as parse_expr
from ...spec.model import KernelSpec
from . import (  # noqa: F401  (they register the passes)
    pass_block_items,
    pass_calls,
    pass_constants,
    pass_coordinates,
    pass_dead,
    pass_exits,
    pass_item_exits,
    pass_loops,
    pass_mapping,
    pass_memory,
    pass_offset_loop,
    pass_private,
    pass_types,
    pass_unstage,
)
from .pass_calls import file_functions
from .pass_constants import top_level_constants
from .passes import REGISTRY, PassEnv, find_kernel, run_passes
from .preprocess import PreprocessError, expand
from .summary import Summary, summarize

#: the passes in the order they are tried (the runner restarts from the first after every change):
#: what exposes code to the others comes first (instantiation, inlining), memory folding last
ORDER = ("template_arguments", "file_constants", "signature_typedefs", "inline_calls", "hoisted_loop_variable",
         "counter_before_loop", "while_to_for", "loop_private_scalars", "sticky_loop_return", "single_pass_loop",
         "item_exits", "offset_stepped_loop", "copy_propagation", "block_items", "thread_index", "grid_stride_loop",
         "dead_locals", "unstage_tiles",
         "output_coordinates",
         "induction_variable", "view_offset", "register_accumulator")


@dataclass(frozen=True)
class Declined:
    """Why a kernel could not be lowered, at a 1-based line of the user's file (0 when none applies)."""

    reason: str
    line: int = 0


@dataclass(frozen=True)
class Lowered:
    kernel: str
    #: the canonical definition (what the structural rules consume)
    text: str
    #: the definition as given (written, or the candidate's)
    original: str
    summary: Summary
    #: what each pass that changed the text did, in order
    applied: tuple[str, ...] = ()
    #: (pass, why it did not apply, line in ``text``) for passes whose shape was there but not their condition
    skipped: tuple[tuple[str, str, int], ...] = ()
    #: the user's macros the definition used (expanded by nvcc)
    preprocessed: bool = False
    #: 1-based line of the user's file where the definition starts
    start_line: int = 1
    notes: tuple[str, ...] = field(default=())
    #: the launch's grid the canonical text is meant for, where a pass changed how threads map to the work
    #: (``block_items``: one thread per item); None when the candidate's launch holds for it as well
    grid: tuple[str, ...] | None = None

    @property
    def changed(self) -> bool:
        return self.text != self.original


def lower(source: str, kernel_name: str, *, path: str | None = None, spec: KernelSpec | None = None,
          defines: Sequence[tuple[str, str]] | Mapping[str, str] = (), include_dirs: Sequence[str] = (),
          definition: str | None = None, keep: Sequence[str] = (), std: str | None = None,
          preprocess: bool = True, grid: Sequence[str] | None = None,
          model: FileModel | None = None, block: Sequence[str] | None = None,
          tunables: Mapping[str, str] | None = None) -> Lowered | Declined:
    """Lower the kernel ``kernel_name`` of the file ``source`` (at ``path``).

    ``definition`` replaces the kernel's definition first (a candidate's text); ``spec`` gives the
    template instantiation and the tunables kept as names (``keep`` adds more); ``defines`` and
    ``include_dirs`` are the build's (``compiler.project``). ``preprocess=False`` skips nvcc (the text is
    lowered as written). ``grid`` is the launch's grid (the candidate's, else the spec's): on a 1-D grid
    a 2-D index flattened by hand is the 1-D index. ``model`` is the file's parse when the caller has it
    (a job parses its file once). ``block`` (the candidate's, else the spec's) and ``tunables`` (the
    candidate's defines) give the block and the scalar parameters as numbers at the spec's sizes: facts of the
    launch a pass may rely on (``unstage_tiles``: a square block equal to the tile)."""
    model = model if model is not None else parse(source)
    defines = tuple(defines.items()) if isinstance(defines, Mapping) else tuple(defines)
    try:
        kernel = model.require(kernel_name, path or "the file")
    except KernelNotFound as e:
        return Declined(str(e))
    data = source.encode("utf-8")
    written = data[kernel.span.start:kernel.span.end].decode("utf-8")
    original = definition if definition is not None else written
    prefix = data[:kernel.span.start].decode("utf-8")
    # the definition on lines of its own, so the line-for-line expansion can be cut out exactly
    spliced = f"{prefix}\n{original}\n{data[kernel.span.end:].decode('utf-8')}"
    start = prefix.count("\n") + 2
    n = original.count("\n") + 1
    full = spliced
    headers = ""
    #: the project's headers where the expansion was skipped: only their struct typedefs are read from them
    #: (``cData`` is ``float2``), not their scalar typedefs or functions, which would change the text the
    #: candidate's build compiles
    skipped_headers = ""
    notes: list[str] = []
    preprocessed = False
    if preprocess and definition is not None:
        # nothing of the user's macros in it: the expansion is the text itself
        preprocess, skipped_headers = _needs_expansion(original, source, path, defines, include_dirs, std)
    if preprocess:
        keep_all = list(keep) + ([t.name for t in spec.tunables] if spec is not None else [])
        try:
            ex = expand(spliced, path=path, defines=defines, include_dirs=include_dirs, keep=keep_all, std=std)
        except PreprocessError as e:
            # back to the user's numbering (one line was added before the definition, one after it)
            line = e.line if e.line < start else e.line - 1 if e.line < start + n else e.line - 2
            return Declined(f"the preprocessor failed: {e}", max(line, 0))
        full = ex.text
        headers = ex.headers
        if ex.stubbed:
            notes.append("headers not found, read as empty: " + ", ".join(ex.stubbed))
        preprocessed = any(start <= ln < start + n for ln in ex.changed)
    lines = full.split("\n")
    text = "\n".join(lines[start - 1:start - 1 + n])
    # the project's headers first: what the file defines itself wins where both define a name
    functions, functors = file_functions(headers + "\n" + full) if headers else file_functions(full)
    facts = file_facts(headers + "\n" + full) if headers else file_facts(full)
    targs: dict[str, str] = {}
    if spec is not None and kernel.template_params:
        targs = {p.name: a for p, a in zip(kernel.template_params, spec.template_args, strict=False)}
    env = PassEnv(functions={k: v for k, v in functions.items() if k != kernel_name}, functors=functors,
                  typedefs=dict(facts.typedefs),
                  aliases=dict((file_facts(skipped_headers + "\n" + full) if skipped_headers else facts).aliases),
                  template_args=targs,
                  grid_dims=_grid_dims(grid if grid is not None else spec.launch.grid if spec is not None else None),
                  constants=top_level_constants(full))
    launch_grid = grid if grid is not None else spec.launch.grid if spec is not None else None
    env.grid = tuple(launch_grid) if launch_grid else ()
    launch_block = block if block is not None else spec.launch.block if spec is not None else None
    env.block = tuple(launch_block) if launch_block else ()
    if spec is not None:
        env.arg_values = _arg_values(spec, [p.name for p in kernel.params if not p.is_pointer])
        env.blocks, env.values, env.names = _launch_facts(
            spec, tuple(block) if block is not None else spec.launch.block,
            [p.name for p in kernel.params if not p.is_pointer], tunables)
        if launch_grid:
            env.grids = _grid_facts(spec, tuple(launch_grid), tunables)
    passes = [REGISTRY[p] for p in ORDER]
    applied: list[str] = []
    skipped: list[tuple[str, str, int]] = []
    lowered_grid: tuple[str, ...] | None = None
    for _ in range(3):  # the passes and normalize's feed each other
        text, done, skip, moved = run_passes(text, kernel_name, env, passes=passes)
        lowered_grid = moved if moved is not None else lowered_grid
        applied += done
        skipped += [(p, s.reason, s.line) for p, s in skip if (p, s.reason, s.line) not in skipped]
        try:
            norm = normalize_definition(text, kernel_name, facts)
        except (ValueError, RecursionError) as e:
            skipped.append(("normalize", f"{type(e).__name__}: {e}", 0))
            break
        if norm == text:
            break
        applied.append("normalize: canonical form (cuda.normalize)")
        text = norm
    k = find_kernel(text, kernel_name)
    if k is None or parse(text).kernel(kernel_name) is None:
        return Declined("the lowered kernel does not parse", kernel.start_line)
    return Lowered(kernel_name, text, original, summarize(k, targs), tuple(applied), tuple(skipped),
                   preprocessed, kernel.start_line, tuple(notes), lowered_grid)


_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _needs_expansion(definition: str, source: str, path: str | None, defines: Sequence[tuple[str, str]],
                     include_dirs: Sequence[str], std: str | None) -> tuple[bool, str]:
    """Whether a candidate's definition uses one of the file's own macros (or holds a directive).

    The expansion keeps every line without a user macro as written (``preprocess``), so a definition
    with none is its own expansion; the search lowers one candidate per step, and this spares most of
    them a run of nvcc. The macros are the file's, read once per file and build. Also the project's headers as
    expanded (their struct typedefs: ``cData`` is ``float2``)."""
    if any(ln.lstrip().startswith("#") and not ln.lstrip().startswith("#pragma") for ln in definition.split("\n")):
        return True, ""
    try:
        ex = expand(source, path=path, defines=defines, include_dirs=include_dirs, std=std)
    except PreprocessError:
        return True, ""
    return bool(set(_WORD.findall(definition)) & ex.user_macros), ex.headers


def _launch_facts(spec: KernelSpec, block: tuple[str, ...], scalars: Sequence[str],
                  tunables: Mapping[str, str] | None) -> tuple[tuple[tuple[int, int, int], ...],
                                                              tuple[dict[str, int], ...], tuple[dict[str, int], ...]]:
    """At the spec's size and its perturbed one: the launch's block as numbers (padded to three), the
    kernel's scalar parameters whose spec value is an integer, and the numeric tunables (the spec's and the
    candidate's defines: names in the lowered text). Empty when a size or the block cannot be evaluated (a pass
    relying on them then skips)."""
    blocks: list[tuple[int, int, int]] = []
    values: list[dict[str, int]] = []
    names: list[dict[str, int]] = []
    tunable_names = {t.name for t in spec.tunables} | set(tunables or {})
    for perturbed in (False, True):
        try:
            env = spec.size_values(perturbed, dict(tunables) if tunables else None)
            dims = [parse_expr(e).evaluate(env) for e in block]
        except (ExprError, ValueError):
            return (), (), ()
        if not dims or len(dims) > 3 or any(not isinstance(d, int) or d < 1 for d in dims):
            return (), (), ()
        ints = [int(d) for d in dims] + [1] * (3 - len(dims))
        blocks.append((ints[0], ints[1], ints[2]))
        vals: dict[str, int] = {}
        for name in scalars:
            a = spec.arg(name)
            if a is None or a.is_buffer or a.value is None:
                continue
            try:
                v = parse_expr(str(a.value)).evaluate(env)
            except (ExprError, ValueError):
                continue
            if isinstance(v, int):
                vals[name] = v
        values.append(vals)
        names.append({n: v for n, v in env.items() if n in tunable_names and isinstance(v, int)})
    return tuple(blocks), tuple(values), tuple(names)


def _grid_facts(spec: KernelSpec, grid: tuple[str, ...], tunables: Mapping[str, str] | None
                ) -> tuple[tuple[int, int, int], ...]:
    """The launch's grid as numbers (padded to three) at the spec's size and its perturbed one; empty when one
    cannot be evaluated (``item_exits`` then keeps a ``return`` in a pass over the items)."""
    out: list[tuple[int, int, int]] = []
    for perturbed in (False, True):
        try:
            env = spec.size_values(perturbed, dict(tunables) if tunables else None)
            dims = [parse_expr(e).evaluate(env) for e in grid]
        except (ExprError, ValueError):
            return ()
        if not dims or len(dims) > 3 or any(not isinstance(d, int) or d < 1 for d in dims):
            return ()
        ints = [int(d) for d in dims] + [1] * (3 - len(dims))
        out.append((ints[0], ints[1], ints[2]))
    return tuple(out)


def _arg_values(spec: KernelSpec, scalars: Sequence[str]) -> dict[str, str]:
    """The spec's value expression of each scalar parameter it gives one (``int OC`` -> ``OC``)."""
    out: dict[str, str] = {}
    for name in scalars:
        a = spec.arg(name)
        if a is not None and not a.is_buffer and a.value is not None:
            out[name] = " ".join(str(a.value).split())
    return out


def _grid_dims(grid: Sequence[str] | None) -> int:
    """How many dimensions a launch's grid has (trailing ``1``s do not count); 0 when unknown."""
    if not grid:
        return 0
    dims = [g.strip() for g in grid]
    while len(dims) > 1 and dims[-1] == "1":
        dims.pop()
    return len(dims)


def build_settings(path: str | None) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], str | None]:
    """(defines, include folders, -std) of the project's build for the file at ``path`` (none when unknown)."""
    if not path or not Path(path).exists():
        return (), (), None
    from ...compiler.project import project_build

    try:
        b = project_build(path)
    except (OSError, ValueError):
        return (), (), None
    if b is None:
        return (), (), None
    return b.defines, (*b.include_dirs, *b.system_dirs), b.std
