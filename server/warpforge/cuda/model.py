"""The source model's types: what a CUDA file contains, as plain immutable data.

Everything carries byte spans into the original file (see ``text.Span``); nothing here holds a
tree-sitter node, so models can be cached, pickled to worker processes and compared.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from .text import Position, SourceText, Span


@dataclass(frozen=True)
class TemplateParam:
    """A template parameter: ``typename T`` (kind "type") or ``int BLOCK`` (kind "value")."""

    name: str
    kind: str
    type: str
    default: str | None
    span: Span


@dataclass(frozen=True)
class Param:
    """A kernel parameter.

    ``type`` is the base type as written without the pointer declarators and without a leading
    ``const`` (e.g. ``float``, ``unsigned int``, ``T``); ``is_const`` says whether the pointee (or the
    scalar) is const; ``is_restrict`` whether the outermost pointer is ``__restrict__``. An unnamed
    parameter gets a generated ``name`` (see ``unnamed``); ``text`` is always what the user wrote.
    """

    name: str
    type: str
    pointer_depth: int
    is_const: bool
    is_restrict: bool
    is_reference: bool
    array_dims: tuple[str, ...]
    text: str
    span: Span
    name_span: Span
    const_span: Span | None
    restrict_span: Span | None
    #: byte offset right after the outermost ``*`` where ``__restrict__`` would be inserted
    star_end: int | None
    #: the user wrote no name (a tag ``std::bool_constant<B>``, ``int /*unused*/``): ``name`` is generated
    #: (``arg2`` for the third parameter) so the spec can refer to it; the user's text keeps no name
    unnamed: bool = False

    @property
    def is_pointer(self) -> bool:
        return self.pointer_depth > 0 or bool(self.array_dims)


@dataclass(frozen=True)
class LaunchBounds:
    """``__launch_bounds__(max_threads[, min_blocks[, max_blocks_per_cluster]])`` as written."""

    args: tuple[str, ...]
    span: Span

    @property
    def max_threads(self) -> str:
        return self.args[0]

    @property
    def min_blocks(self) -> str | None:
        return self.args[1] if len(self.args) > 1 else None


@dataclass(frozen=True)
class Kernel:
    """A ``__global__`` function definition."""

    name: str
    namespace: tuple[str, ...]
    template_params: tuple[TemplateParam, ...]
    params: tuple[Param, ...]
    launch_bounds: LaunchBounds | None
    extern_c: bool
    #: whole definition including any ``template <...>`` and ``extern "C"`` prefix
    span: Span
    #: the function_definition itself (from ``__global__`` or the first specifier to the closing brace)
    definition_span: Span
    #: from the start of the definition to the end of the parameter list
    signature_span: Span
    body_span: Span
    name_span: Span
    params_span: Span
    #: byte offset where a ``__launch_bounds__`` would be inserted (before the declarator)
    declarator_start: int
    #: the ``//`` comment block directly above the kernel, if any
    comment_span: Span | None
    start_line: int
    end_line: int
    #: identifiers the definition refers to (for dependency closure)
    uses: frozenset[str]
    #: True when the kernel was recovered by re-parsing its own text after a syntax error elsewhere
    recovered: bool = False

    @property
    def qualified_name(self) -> str:
        return "::".join((*self.namespace, self.name))

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None


class DeclKind(str, Enum):
    DEVICE_FUNCTION = "device_function"
    HOST_FUNCTION = "host_function"
    GLOBAL = "global"
    MACRO = "macro"
    TYPE = "type"
    #: ``using namespace X;``, ``using X::y;``, ``namespace a = b;`` — scope, always carried along
    USING = "using"
    OTHER = "other"


@dataclass(frozen=True)
class Declaration:
    """A top-level declaration a kernel may depend on.

    ``names`` are the identifiers it defines; ``uses`` those it refers to. ``space`` is the CUDA
    memory space of a global (``__constant__``, ``__device__``, ``__managed__``) or "" otherwise.
    ``wrapper`` holds the text of enclosing preprocessor conditionals or namespaces, outermost first, so
    the declaration can be re-emitted in context.
    """

    kind: DeclKind
    names: tuple[str, ...]
    span: Span
    uses: frozenset[str]
    space: str = ""
    namespace: tuple[str, ...] = ()
    #: the top-level preprocessor conditional this lives in (emitted whole when needed)
    conditional: Span | None = None


@dataclass(frozen=True)
class Include:
    path: str
    system: bool
    span: Span
    #: the top-level ``#if``/``#ifdef`` block it sits in (``None``: unconditional), so an extracted unit keeps
    #: ``#ifdef _WIN32 #include <windows.h> #endif`` conditional
    conditional: Span | None = None


@dataclass(frozen=True)
class LaunchSite:
    """A host-side launch: ``k<<<grid, block, smem, stream>>>(args)``, ``cudaLaunchKernel((void*)k, grid,
    block, args, smem, stream)`` or ``cudaLaunchKernelEx(&cfg, k, args...)`` with ``cfg``'s fields set in the
    same function (``style`` says which).

    Accepting a variant that needs another launch rewrites grid, block and shared memory where each is
    written, so each has its own span; ``config_span`` is the ``<<<...>>>`` of a chevron launch (the call's
    argument list otherwise).
    """

    kernel: str
    template_args: tuple[str, ...]
    grid: str
    block: str
    smem: str | None
    stream: str | None
    args: tuple[str, ...]
    span: Span
    config_span: Span
    #: the host function the launch is in ("" at top level)
    function: str
    line: int
    #: "chevron" (``<<<>>>``), "launch_kernel" (``cudaLaunchKernel``), "launch_kernel_ex" (``cudaLaunchKernelEx``)
    style: str = "chevron"
    #: where grid, block and dynamic shared memory are written (None: not written, or not read)
    grid_span: Span | None = None
    block_span: Span | None = None
    smem_span: Span | None = None
    #: where a shared-memory size the launch does not write yet would go (``cudaLaunchKernel``: after the
    #: argument array; ``cudaLaunchKernelEx``: before the statement holding the call); None for ``<<<>>>``
    smem_insert: int | None = None
    #: the ``cudaLaunchConfig_t`` variable of a ``cudaLaunchKernelEx`` launch (``cfg`` of ``&cfg``)
    config_var: str | None = None
    #: False when the kernel's arguments could not be read (an argument array built elsewhere)
    args_known: bool = True
    #: False when grid or block could not be found (a config struct filled in another function)
    config_known: bool = True

    def config_text(self) -> str:
        """The launch configuration as written, for messages (``<<<n, 256>>>``, ``grid n, block 256``)."""
        if self.style == "chevron":
            parts = [self.grid, self.block, *([self.smem] if self.smem is not None else []),
                     *([self.stream] if self.stream is not None else [])]
            return "<<<" + ", ".join(parts) + ">>>"
        return f"grid {self.grid}, block {self.block}, smem {self.smem or '0'}"


@dataclass(frozen=True)
class SyntaxProblem:
    """A region tree-sitter could not parse, reported once per top-level error."""

    span: Span
    line: int
    message: str


#: kernels named in a one-line message before the rest is counted: a generated file with 500 kernels once
#: made a 4 KB line naming every one
NAMED_KERNELS = 8


def name_list(names: Sequence[str], limit: int = NAMED_KERNELS) -> str:
    """``a, b, c`` — or the first ``limit`` and ``and N more`` — for a one-line message."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"


class KernelNotFound(LookupError):
    """A kernel asked for by name is not in a file: one error type for every lookup by name.

    The message is one line naming where it looked, the name and the kernels that are there, so every front
    end (the CLI's exit 2, the language server's invalid-params reply, the LLM fixer's error list) can show it
    as is; ``file``, ``name`` and ``kernels`` are kept for callers that word it their own way.
    """

    def __init__(self, file: str, name: str, kernels: tuple[str, ...]) -> None:
        self.file = file
        self.name = name
        self.kernels = kernels
        where = f"{file}: " if file else ""
        close = difflib.get_close_matches(name, kernels, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        listed = name_list(kernels) or "none"
        if len(kernels) > NAMED_KERNELS:
            listed += f"; `warpforge kernels {file or 'FILE'}` lists them all"
        super().__init__(f"{where}no __global__ kernel named `{name}` (kernels here: {listed}){hint}")


@dataclass(frozen=True)
class FileModel:
    """Everything the pipeline needs to know about one CUDA file."""

    kernels: tuple[Kernel, ...]
    declarations: tuple[Declaration, ...]
    includes: tuple[Include, ...]
    launch_sites: tuple[LaunchSite, ...]
    problems: tuple[SyntaxProblem, ...] = field(default=())
    #: top-level text no declaration covers that belongs to the code around it: explicit instantiations
    #: (``template void f<int>(int*);``) and the ``extern "C"`` of a one-item linkage specification (the
    #: item's span starts after it). An extracted unit that copies a conditional block whole cuts the
    #: instantiations and a linkage prefix whose item it cuts (``cuda.extract``).
    instantiations: tuple[Span, ...] = field(default=())
    linkage_prefixes: tuple[Span, ...] = field(default=())

    def kernel(self, name: str) -> Kernel | None:
        for k in self.kernels:
            if k.name == name or k.qualified_name == name:
                return k
        return None

    def require(self, name: str, file: str = "") -> Kernel:
        """The kernel ``name`` (plain or qualified); ``KernelNotFound`` naming ``file`` and the kernels here."""
        k = self.kernel(name)
        if k is None:
            raise KernelNotFound(file, name, tuple(x.name for x in self.kernels))
        return k

    def launches_of(self, kernel: str) -> tuple[LaunchSite, ...]:
        """Every launch of ``kernel`` in the file, whatever its style (see ``LaunchSite``)."""
        return tuple(s for s in self.launch_sites if s.kernel == kernel)

    def readable_launches_of(self, kernel: str) -> tuple[LaunchSite, ...]:
        """The launches of ``kernel`` whose configuration and arguments could both be read (what inference
        may start from)."""
        return tuple(s for s in self.launches_of(kernel) if s.args_known and s.config_known)

    def kernel_at(self, offset: int) -> Kernel | None:
        """The kernel whose definition, or the comment block directly above it, contains byte ``offset``.

        Both ends count as inside, so a cursor just after the closing brace or at the end of the last comment
        line still finds the kernel. Kernels do not nest; should two spans touch, the smaller one wins.
        """
        best: Kernel | None = None
        for k in self.kernels:
            inside = k.span.start <= offset <= k.span.end or (
                k.comment_span is not None and k.comment_span.start <= offset <= k.comment_span.end
            )
            if inside and (best is None or k.span.end - k.span.start < best.span.end - best.span.start):
                best = k
        return best


def kernel_at_position(src: SourceText, model: FileModel, position: Position) -> Kernel | None:
    """The kernel at an LSP position (line, UTF-16 column) of ``src``, the text ``model`` was parsed from."""
    return model.kernel_at(src.offset(position))
