"""The lowering passes' vocabulary: what a pass sees, what it answers, and the registry that runs them.

Why a registry: every pass is one small module with one stated precondition. It answers ``Changed``
(the kernel text rewritten, exact by construction), ``None`` (nothing of its shape here) or ``Skipped``
(its shape is here but the precondition does not hold; the reason is kept so the summary, and later the
user, can be told why a kernel stayed as it was). The runner applies passes until none changes the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tree_sitter import Node

from ...cuda.parser import parse_tree
from ...cuda.rewrite import splice as splice  # re-exported: the passes import it from here
from ...cuda.tree import node_text, walk


@dataclass(frozen=True)
class FunctionDef:
    """A same-file ``__device__`` function (or a functor's ``operator()``) a call can be replaced by."""

    name: str
    return_type: str
    #: (type as written without ``const``, name, is_reference)
    params: tuple[tuple[str, str, bool], ...]
    #: the body's text without its braces
    body: str
    #: True when the function is a template (not inlined: its types depend on the call)
    template: bool = False


@dataclass
class PassEnv:
    """What passes need from outside the kernel: the file's device functions, functors and scalar typedefs,
    and the spec's instantiation of the kernel's template parameters."""

    functions: dict[str, FunctionDef] = field(default_factory=dict)
    #: functor struct name -> its ``operator()``
    functors: dict[str, FunctionDef] = field(default_factory=dict)
    typedefs: dict[str, str] = field(default_factory=dict)
    #: every typedef of the file (not only scalars: ``cData`` -> ``float2``), for the members of a struct
    aliases: dict[str, str] = field(default_factory=dict)
    #: template parameter name -> the spec's argument
    template_args: dict[str, str] = field(default_factory=dict)
    #: dimensions of the launch's grid (1: ``blockIdx.y/z`` are 0); 0 when unknown
    grid_dims: int = 0
    #: the launch's block at each size of the spec (the spec's size, then the perturbed one); empty when unknown
    blocks: tuple[tuple[int, int, int], ...] = ()
    #: the launch's grid at each size of the spec (as ``blocks``), padded to three; empty when unknown
    grids: tuple[tuple[int, int, int], ...] = ()
    #: at each size of the spec (as ``blocks``): the kernel's scalar parameters the spec gives as numbers
    values: tuple[dict[str, int], ...] = ()
    #: at each size of the spec (as ``blocks``): the spec's numeric tunables, which the text keeps as names
    names: tuple[dict[str, int], ...] = ()
    #: the file's top-level integer constants: name -> value text
    constants: dict[str, str] = field(default_factory=dict)
    #: the launch's grid as the spec (or the candidate) writes it, in spec terms; empty when unknown
    grid: tuple[str, ...] = ()
    #: the launch's block as the spec (or the candidate) writes it, in spec terms; empty when unknown
    block: tuple[str, ...] = ()
    #: the kernel's scalar parameters -> the spec's value expression for each (``OC`` for ``int OC``), in spec
    #: terms: what lets a pass say a launch extent in the kernel's own names (``block_items``' bound)
    arg_values: dict[str, str] = field(default_factory=dict)


class Unmet(Exception):
    """A pass's precondition that does not hold, raised deep in its analysis: the reason, in words, and the node
    it is about (the pass turns it into a ``Skipped`` at that node's line)."""

    def __init__(self, reason: str, node: Node) -> None:
        super().__init__(reason)
        self.reason = reason
        self.node = node


@dataclass(frozen=True)
class Changed:
    text: str
    what: str
    #: the launch's grid the rewritten text computes the original's result under, when a pass changes how
    #: threads map to the work (``block_items``: a block per item becomes a thread per item); None: unchanged
    grid: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Skipped:
    reason: str
    #: 1-based line in the kernel text the pass looked at
    line: int


Result = Changed | Skipped | None


@dataclass(frozen=True)
class Kernel:
    """The kernel's function definition in ``data`` (the candidate's text, parsed)."""

    fn: Node
    body: Node
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")

    def t(self, node: Node) -> str:
        return node_text(node, self.data)

    def line(self, node: Node) -> int:
        return node.start_point[0] + 1


PassFn = Callable[[Kernel, PassEnv], Result]


@dataclass(frozen=True)
class Pass:
    name: str
    #: the precondition, in words (docs and declines quote it)
    precondition: str
    run: PassFn


REGISTRY: dict[str, Pass] = {}


def register(name: str, precondition: str) -> Callable[[PassFn], PassFn]:
    def deco(fn: PassFn) -> PassFn:
        REGISTRY[name] = Pass(name, precondition, fn)
        return fn
    return deco


def find_kernel(text: str, name: str) -> Kernel | None:
    """The definition of the function ``name`` in ``text`` (the last one: helpers come before the kernel)."""
    data = text.encode("utf-8")
    tree = parse_tree(data)
    found: Node | None = None
    for n in walk(tree.root_node, ("function_definition",)):
        d = n.child_by_field_name("declarator")
        while d is not None and d.type not in ("function_declarator",):
            d = d.child_by_field_name("declarator")
        nm = d.child_by_field_name("declarator") if d is not None else None
        if nm is not None and node_text(nm, data).split("::")[-1] == name:
            found = n
    if found is None:
        return None
    body = found.child_by_field_name("body")
    if body is None or body.has_error:
        return None
    return Kernel(found, body, data)


def statements(node: Node | None) -> list[Node]:
    if node is None:
        return []
    if node.type != "compound_statement":
        return [node]
    return [c for c in node.named_children if c.type != "comment"]


def loop_counter(loop: Node) -> tuple[Node, Node] | None:
    """``(name, start)`` of a ``for`` whose initializer declares exactly one variable with a start value
    (``for (int j = a; ...)``), else None: the header the loop passes read before judging its bound and step."""
    init = loop.child_by_field_name("initializer") if loop.type == "for_statement" else None
    if init is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator":
        return None
    name, value = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if name is None or value is None or name.type != "identifier":
        return None
    return name, value


def idents(node: Node, data: bytes, name: str | None = None) -> list[Node]:
    """Identifier nodes (of ``name``) in a subtree, in document order."""
    return [n for n in walk(node, ("identifier",)) if name is None or node_text(n, data) == name]


def declared_names(node: Node, data: bytes) -> set[str]:
    """Every variable a subtree declares (locals, loop variables, parameters of nested lambdas excepted)."""
    out: set[str] = set()
    for n in walk(node, ("declaration", "parameter_declaration")):
        for d in n.children_by_field_name("declarator"):
            cur: Node | None = d
            while cur is not None and cur.type != "identifier":
                cur = cur.child_by_field_name("declarator")
            if cur is not None:
                out.add(node_text(cur, data))
    return out


_EFFECTS = ("assignment_expression", "update_expression", "call_expression", "new_expression",
            "delete_expression", "co_await_expression")


def side_effect_free(node: Node) -> bool:
    """No assignment, increment or call inside (a call might write memory or synchronize)."""
    return next(walk(node, _EFFECTS), None) is None


def run_passes(text: str, kernel: str, env: PassEnv, *, passes: Sequence[Pass] | None = None,
               max_rounds: int = 24) -> tuple[str, list[str], list[tuple[str, Skipped]], tuple[str, ...] | None]:
    """Apply ``passes`` (default: all registered) until none changes the text: (text, what was done, what
    was skipped, the grid a pass says the text is meant for, or None). After every change the first pass is
    tried again."""
    order = list(passes) if passes is not None else list(REGISTRY.values())
    done: list[str] = []
    skipped: dict[tuple[str, str], Skipped] = {}
    grid: tuple[str, ...] | None = None
    for _ in range(max_rounds):
        k = find_kernel(text, kernel)
        if k is None:
            break
        for p in order:
            try:
                got = p.run(k, env)
            except (ValueError, RecursionError) as e:  # overlapping edits: the pass's shape was not plain
                got = Skipped(f"{type(e).__name__}: {e}", k.line(k.fn))
            if isinstance(got, Skipped):
                skipped.setdefault((p.name, got.reason), got)
            elif isinstance(got, Changed) and got.text != text:
                if find_kernel(got.text, kernel) is None:  # a pass must leave parseable text
                    skipped.setdefault((p.name, "its rewrite did not parse"), Skipped("its rewrite did not parse",
                                                                                     k.line(k.fn)))
                    continue
                text = got.text
                grid = got.grid if got.grid is not None else grid
                done.append(f"{p.name}: {got.what}")
                break
        else:
            break
    return text, done, [(name, s) for (name, _), s in skipped.items()], grid
