"""The optimize job, independent of its front end: spec + findings → policy + search → verified diff.

The CLI (``warpforge optimize``) and the language server (Optimize Kernel) both call ``optimize``; they
differ only in how they show progress and what they do with the result. The job works on a snapshot of
the file's text, so the user can keep editing while it runs; the result carries the original kernel text
so accepting it can check that the kernel did not change in the meantime.
"""

from __future__ import annotations

import asyncio
import difflib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import defaults
from ..cuda.candidate import Candidate
from ..cuda.model import DeclKind, FileModel, Kernel
from ..cuda.parser import parse
from ..cuda.reduce import reduce_device
from ..cuda.rewrite import TextEdit, apply_edits, make_edit
from ..cuda.text import SourceText, Span
from ..cuda.workspace import SiteFile
from ..spec.expr import ExprError
from ..spec.expr import parse as parse_expr
from ..spec.model import KernelSpec
from ..spec.resolve import build_spec
from ..spec.sites import Launch, SiteChange, dims_c, site_change
from .beam import BeamConfig, BeamSearch
from .engine import Budget, LimitOf, SearchEngine, SearchEvent, SearchResult
from .mcts import MCTS, MCTSConfig
from .memory import SearchMemory, kernel_key
from .tree import EvaluatorLike, Node, Policy, SearchContext


@dataclass
class OptimizeRequest:
    file: str
    text: str
    kernel: str
    strategy: str = defaults.STRATEGY  # one of defaults.STRATEGIES
    budget: Budget = field(default_factory=Budget)
    findings: Sequence[Any] = ()
    sm_count: int = 132
    arch: str = "sm_90"
    beam: BeamConfig | None = None
    mcts: MCTSConfig | None = None
    #: restrict the offline policy to these families (None: all)
    families: set[str] | None = None
    #: the snapshot already parsed, with its spec (``app.PreparedKernel.parts``): a job parses its file once
    prepared: tuple[SourceText, FileModel, Kernel, KernelSpec] | None = None
    #: search only variants that keep the launch contract (``keeps_launch``): ``--keep-launch``,
    #: ``warpforge.keepLaunch``
    keep_launch: bool = False
    #: whether accepting a candidate leaves no launch site to change by hand (None: every one does); the
    #: winner is chosen with it (``prefer_writable``)
    launch_writable: Callable[[Candidate], bool] | None = None


@dataclass
class OptimizeOutcome:
    request: OptimizeRequest
    spec: KernelSpec
    kernel: Kernel
    result: SearchResult
    #: the original kernel's text at the time of the snapshot (for accept's version check)
    original_kernel_text: str

    @property
    def best(self) -> Node:
        return self.result.best

    def diff(self, node: Node | None = None) -> str:
        node = node or self.result.best
        return kernel_diff(self.request.file, self.request.text, self.kernel, node.candidate, self.spec)

    def new_text(self, node: Node | None = None) -> str:
        """The whole file with the node's variant in place of the kernel (what Accept/--apply write)."""
        node = node or self.result.best
        return apply_candidate(self.request.text, self.kernel, node.candidate, self.spec)


def _dims_c(d: tuple[str, ...]) -> str:
    return dims_c(d)


def _dims_spec(d: tuple[str, ...]) -> str:
    return d[0] if len(d) == 1 else "(" + ", ".join(d) + ")"


class HostCodeRefused(ValueError):
    """Accepting a variant would write host code, or text outside the spec language, into the user's file."""


#: what a define's value may hold once written into a ``#define`` line or a comment: one line of an expression
_DEFINE_VALUE = re.compile(r"[A-Za-z0-9_ .+\-*/%()<>=!&|^~?:,]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def checked_definition(text: str, kernel: Kernel, candidate: Candidate) -> str:
    """The text Accept writes in place of ``kernel``: the candidate reduced to device code (``cuda.reduce``).

    Why a check here and not only where candidates are made: this is the one place every variant passes
    through on its way into the user's file, whoever wrote it. A top-level construct the user's text does
    not already hold must be device code; anything else refuses the whole variant (``HostCodeRefused``)
    rather than writing part of it. Launch expressions, define values and flags are written into host code,
    ``#define`` lines and comments, so they must be spec expressions or plain one-line values.
    """
    where = f"the variant of `{kernel.name}`"
    reduced = reduce_device(candidate.definition, kernel=kernel.name, file_text=text)
    bad = reduced.host_dropped
    if bad:
        listed = "; ".join(str(d) for d in bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise HostCodeRefused(f"{where} was not written: it holds code that is not device code and that the file "
                              f"does not have ({listed}); re-run Optimize")
    if reduced.kernel(kernel.name) is None:
        raise HostCodeRefused(f"{where} was not written: its kernel could not be read as device code")
    for what, dims in (("grid", candidate.grid), ("block", candidate.block),
                       ("smem", (candidate.smem,) if candidate.smem is not None else None)):
        for d in dims or ():
            try:
                parse_expr(d)
            except ExprError as e:
                raise HostCodeRefused(f"{where} was not written: its {what} `{d}` is not a spec expression "
                                      f"({str(e).splitlines()[0]})") from e
    for name, value in candidate.defines.items():
        if not _IDENT.fullmatch(name) or not _DEFINE_VALUE.fullmatch(value) or "/*" in value or "//" in value:
            raise HostCodeRefused(f"{where} was not written: its define {name}={value!r} is not an identifier set "
                                  "to a one-line expression")
    for flag in candidate.flags:
        if any(c in flag for c in "\r\n\0"):
            raise HostCodeRefused(f"{where} was not written: a compile flag spans lines")
    return reduced.source.rstrip()


def apply_candidate(text: str, kernel: Kernel, candidate: Candidate, spec: KernelSpec | None = None,
                    model: FileModel | None = None) -> str:
    """The file text with the candidate in place: the kernel definition, and what its launch needs.

    A variant verified with a different launch (block size, warp per row, a vectorized grid) is only
    correct with that launch, so accepting it updates where the launch is defined: the annotation's
    ``launch`` line when the spec is annotated, and the host launch sites in this file where their new
    launch can be written mechanically (``launch_changes``; the other files' are ``apply_workspace``'s).
    A tunable's chosen value becomes the default of its ``#ifndef``/``#define`` and comes first in the
    ``tune`` line; a define the file does not guard becomes an ``#ifndef NAME``/``#define NAME V``/``#endif``
    default above the kernel. Compile flags cannot live in the source: they are stated in a comment above
    the kernel, and the variant is a build change (``build_change``), which front ends say.
    Raises ``HostCodeRefused`` when the variant would add host code (``checked_definition``). ``model`` is
    ``text``'s parse when the caller has it (a job's ``PreparedKernel``), so the file is not parsed again.
    """
    definition = checked_definition(text, kernel, candidate)
    src = SourceText(text)
    model = model if model is not None else parse(src.data)
    edits: list[TextEdit] = [make_edit(src, kernel.span, definition)]
    notes: list[str] = []
    guards: list[str] = []
    lo = candidate.launch
    if lo is not None and spec is not None:
        grid = lo.grid or spec.launch.grid
        block = lo.block or spec.launch.block
        smem = lo.smem if lo.smem is not None else spec.launch.smem
        if spec.launch.source in ("annotation", "guessed") and spec.launch.line is not None:
            line = spec.launch.line - 1
            old = src.line_text(line)
            prefix = old[: old.index("@warpforge")] + "@warpforge launch "
            new = f"{prefix}grid={_dims_spec(grid)}, block={_dims_spec(block)}" + (
                f", smem={smem}" if smem not in ("0", "") else "")
            start = src.line_starts[line]
            edits.append(make_edit(src, Span(start, start + len(old.encode())), new))
        elif not model.launches_of(kernel.name):
            notes.append(f"launch with grid {_dims_c(grid)} and block {_dims_c(block)}")
    # The host launches in this file (a launch override, or a tunable the launch is written with), each
    # rewritten in its own names where that is mechanical (``spec.sites``); the others are left as they are
    # and reported by ``launch_changes``.
    for change in launch_changes(src, model, kernel, candidate, spec):
        if change.mechanical:
            edits.extend(change.edits)
    for name, value in candidate.defines.items():
        # A name the file defines outside any conditional wins over -D in every build, the evaluator's
        # included: the value measured was the file's own, and the file keeps it.
        done = any(name in d.names and d.conditional is None and d.kind is DeclKind.MACRO
                   for d in model.declarations)
        for d in model.declarations:
            if name in d.names and d.conditional is not None:
                old = src.slice(d.span)
                m = re.match(rf"(#\s*define\s+{re.escape(name)}\s+)(\S.*?)(\s*)$", old, re.S)
                if m:
                    edits.append(make_edit(src, d.span, m.group(1) + value + m.group(3)))
                    done = True
        if spec is not None and kernel.comment_span is not None:
            first = src.line_of(kernel.comment_span.start)
            for ln in range(first, src.line_of(kernel.comment_span.end) + 1):
                t = src.line_text(ln)
                m = re.match(rf"(.*@warpforge\s+tune\s+{re.escape(name)}\s*=\s*)(.*)$", t)
                if m:
                    vals = [v.strip() for v in m.group(2).split(",") if v.strip() and v.strip() != value]
                    start = src.line_starts[ln]
                    edits.append(make_edit(src, Span(start, start + len(t.encode())),
                                           m.group(1) + ", ".join([value, *vals])))
        # A tunable only a ``tune`` line names has no default in the file: it gets one too, so the
        # accepted file builds with the value measured unless the build passes its own -D (as it did before).
        if not done:
            guards.append(_ifndef_default(name, value))
    if guards:
        start = kernel.comment_span.start if kernel.comment_span is not None else kernel.span.start
        edits.append(make_edit(src, Span(start, start), "".join(guards)))
    if candidate.flags:
        notes.append(f"compile with {' '.join(candidate.flags)}")
    if notes:
        edits[0] = make_edit(src, kernel.span, "\n".join(f"// warpforge: {n}" for n in notes) + "\n" + definition)
    return apply_edits(src, edits)


def keeps_launch(candidate: Candidate, spec: KernelSpec) -> bool:
    """Does the candidate launch the kernel as the spec does (no override, or one equal to the spec's, and
    every tunable the spec's launch is written with at its default)? Such a variant keeps the launch
    contract: no host launch site has to change for it."""
    launch_names = set(re.findall(r"[A-Za-z_]\w*", " ".join(
        (*spec.launch.grid, *spec.launch.block, spec.launch.smem or "0"))))
    for t in spec.tunables:
        if t.name in launch_names and str(candidate.defines.get(t.name, t.values[0])) != str(t.values[0]):
            return False  # a tunable the launch is written with takes another value: the launch changes
    lo = candidate.launch
    if lo is None:
        return True

    def norm(x: tuple[str, ...] | str) -> tuple[str, ...]:
        return tuple("".join(d.split()) for d in ((x,) if isinstance(x, str) else x))

    def same(a: tuple[str, ...] | str | None, b: tuple[str, ...] | str) -> bool:
        return a is None or norm(a) == norm(b)

    return same(lo.grid, spec.launch.grid) and same(lo.block, spec.launch.block) and same(
        lo.smem if lo.smem is not None else None, spec.launch.smem or "0")


def variant_launch(candidate: Candidate, spec: KernelSpec) -> Launch:
    """The launch a candidate was verified with, in the spec's names (its overrides over the spec's)."""
    lo = candidate.launch
    grid = (lo.grid if lo is not None and lo.grid else None) or spec.launch.grid
    block = (lo.block if lo is not None and lo.block else None) or spec.launch.block
    smem = lo.smem if lo is not None and lo.smem is not None else spec.launch.smem
    return Launch(tuple(grid), tuple(block), smem or "0")


def launch_changes(src: SourceText, model: FileModel, kernel: Kernel, candidate: Candidate, spec: KernelSpec | None,
                   others: Sequence[SiteFile] = ()) -> list[SiteChange]:
    """What accepting ``candidate`` does to every host launch of ``kernel``: the sites in its own file
    (``src``/``model``, path None) and in ``others`` (the workspace's, ``cuda.workspace``). Empty when the
    variant keeps the launch contract. Each change is mechanical (its edits are written on accept) or
    says why not and what to write (``spec.sites``)."""
    if spec is None or keeps_launch(candidate, spec):
        return []
    original = Launch(tuple(spec.launch.grid), tuple(spec.launch.block), spec.launch.smem or "0")
    new = variant_launch(candidate, spec)
    params = [p.name for p in kernel.params]
    defines = candidate.define_map()
    # a launch inside the kernel's own definition (dynamic parallelism) is the variant's business, not the host's
    out = [site_change(spec, params, original, new, defines, src, model, site)
           for site in model.launches_of(kernel.name) if not (kernel.span.start <= site.span.start < kernel.span.end)]
    for f in others:
        fsrc = f.source
        out.extend(site_change(spec, params, original, new, defines, fsrc, f.model, site, f.path) for site in f.sites)
    return out


@dataclass
class WorkspaceChange:
    """Accepting a variant across the workspace: the kernel's file, every other file whose launches are
    rewritten (path -> (old text, new text)), and every launch site's change (``SiteChange``)."""

    file: str
    old_text: str
    new_text: str
    files: dict[Path, tuple[str, str]]
    changes: list[SiteChange]
    root: Path | None = None
    #: the text of every other file with a launch site, as it was read (what the sites' edits apply to)
    originals: dict[Path, str] = field(default_factory=dict)

    @property
    def manual(self) -> list[SiteChange]:
        """The sites that need a launch change the user must make (not written)."""
        return [c for c in self.changes if not c.mechanical]

    @property
    def needs_launch_change(self) -> bool:
        return bool(self.manual)

    def messages(self) -> list[str]:
        """One line per launch site whose configuration changes (``file:line: old -> new``, and why not
        written for the manual ones), the manual ones first."""
        ordered = sorted(self.changes, key=lambda c: c.mechanical)
        return [c.message(self.root) for c in ordered]

    def name(self, path: Path) -> str:
        if self.root is not None:
            try:
                return str(path.resolve().relative_to(self.root.resolve()))
            except ValueError:
                pass
        return str(path)

    def diff(self, label: str | None = None) -> str:
        """A unified diff of every file that changes, then, under a ``needs a launch change`` header, the
        exact change each manual site needs (shown as a diff of its file, not written)."""
        name = label or self.file
        if Path(name).is_absolute():
            name = self.name(Path(name))
        out = [_unified(self.old_text, self.new_text, name)]
        for path, (old, new) in sorted(self.files.items()):
            out.append(_unified(old, new, self.name(path)))
        by_file: dict[Path | None, list[SiteChange]] = {}
        for c in self.manual:
            by_file.setdefault(c.path, []).append(c)
        for where, changes in by_file.items():
            before = self.old_text if where is None else self.originals.get(where)
            if before is None:
                continue
            edits = [e for c in changes for e in c.edits]
            try:
                proposed = apply_edits(SourceText(before), edits) if edits else before
            except ValueError:
                proposed = before
            shown = name if where is None else self.name(where)
            header = "".join(f"# needs a launch change (not applied): {c.message(self.root)}\n" for c in changes)
            out.append(header + _unified(before, proposed, shown, " (needs a launch change: not applied)"))
        return "".join(out)


def _unified(old: str, new: str, name: str, note: str = "") -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}{note}", n=3))


def apply_workspace(file: str, text: str, kernel: Kernel, candidate: Candidate, spec: KernelSpec | None,
                    model: FileModel | None = None, others: Sequence[SiteFile] = (),
                    root: Path | None = None) -> WorkspaceChange:
    """``apply_candidate`` across the workspace: the kernel's file with the variant in place (and its own
    launches), and each other file in ``others`` with its launches rewritten where that is mechanical.
    A site that cannot be rewritten is left as it is and listed (``WorkspaceChange.manual``)."""
    src = SourceText(text)
    model = model if model is not None else parse(src.data)
    new_text = apply_candidate(text, kernel, candidate, spec, model)
    changes = launch_changes(src, model, kernel, candidate, spec, others)
    files: dict[Path, tuple[str, str]] = {}
    by_path = {f.path: f for f in others}
    for path in dict.fromkeys(c.path for c in changes if c.path is not None and c.mechanical):
        f = by_path[path]
        edits = [e for c in changes if c.path == path and c.mechanical for e in c.edits]
        if edits:
            files[path] = (f.text, apply_edits(f.source, edits))
    return WorkspaceChange(file, text, new_text, files, changes, root, {f.path: f.text for f in others})


def _ifndef_default(name: str, value: str) -> str:
    """A define the file does not guard, as a default above the kernel: the build may still override it.

    Why not a ``-D`` note: the project's build never reads a note, so the accepted code would run with
    another value than the one measured (issue 18, item 2). ``checked_definition`` has already held the
    name to an identifier and the value to a one-line expression."""
    return f"#ifndef {name}\n#define {name} {value}\n#endif\n"


def build_change(candidate: Candidate) -> str | None:
    """The line that says a variant changes the project's build (None when its source carries everything)."""
    if not candidate.build_flags:
        return None
    return f"build change: compile with {' '.join(candidate.build_flags)} (the project's build must add it)"


def candidate_notes(candidate: Candidate) -> list[str]:
    """What a variant needs besides its source text: its launch configuration, defines and flags.

    Flags come last, each marked as a build change (``Candidate.build_flags``)."""
    notes = []
    if candidate.grid is not None:
        notes.append(f"grid ({', '.join(candidate.grid)})")
    if candidate.block is not None:
        notes.append(f"block ({', '.join(candidate.block)})")
    if candidate.smem is not None:
        notes.append(f"{candidate.smem} bytes of dynamic shared memory")
    notes.extend(f"-D{k}={v}" for k, v in candidate.defines.items())
    notes.extend(f"build change: {f}" for f in candidate.build_flags)
    return notes


def kernel_diff(file: str, text: str, kernel: Kernel, candidate: Candidate, spec: KernelSpec | None = None,
                model: FileModel | None = None) -> str:
    new = apply_candidate(text, kernel, candidate, spec, model)
    return "".join(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{file}", tofile=f"b/{file}", n=3))


def make_search(
    req: OptimizeRequest,
    policy: Policy,
    evaluator: EvaluatorLike,
    *,
    cancel: asyncio.Event | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    limit_of: LimitOf | None = None,
) -> SearchEngine:
    # A variant must be at least 1 % faster (and outside the timing noise) to count as a win.
    if req.strategy == "mcts":
        return MCTS(policy, evaluator, budget=req.budget, cancel=cancel, on_event=on_event, config=req.mcts,
                    min_speedup=1.01, limit_of=limit_of)
    if req.strategy != "beam":
        raise ValueError(f"unknown strategy `{req.strategy}`: use beam or mcts")
    return BeamSearch(policy, evaluator, budget=req.budget, cancel=cancel, on_event=on_event, config=req.beam,
                      min_speedup=1.01, limit_of=limit_of)


def prepare(req: OptimizeRequest) -> tuple[SourceText, FileModel, Kernel, KernelSpec]:
    """Parse the snapshot and build the kernel's spec (raises SpecError / KernelNotFound with clear messages);
    the request's ``prepared`` parts when the job made them already."""
    if req.prepared is not None:
        return req.prepared
    src = SourceText(req.text)
    model = parse(src.data)
    kernel = model.require(req.kernel, req.file)
    spec = build_spec(src, model, kernel, req.file)
    return src, model, kernel, spec


async def optimize(
    req: OptimizeRequest,
    evaluator: EvaluatorLike,
    *,
    policy: Policy,
    cancel: asyncio.Event | None = None,
    on_event: Callable[[SearchEvent], None] | None = None,
    memory: SearchMemory | None = None,
    on_search: Callable[[SearchEngine], object] | None = None,
    limit_of: LimitOf | None = None,
) -> OptimizeOutcome:
    """Run one optimization. ``on_search`` receives the engine before it starts (for live search trees);
    ``limit_of`` reads a node's time against the kernel's physical limit (``profile.limit``, given by the
    job, which sits above this package), and the search stops once its best is within 5 % of it.

    ``policy`` is any implementation of the ``Policy`` protocol (``search.tree``); the rules-only one is
    ``policy.offline.offline_policy(req)``. Search never imports a policy: they sit above it.
    """
    src, _model, kernel, spec = prepare(req)
    root = Candidate(kernel.name, src.slice(kernel.span), family="original", rationale="the kernel as written")
    key = kernel_key(root.definition, spec.spec_hash())
    context = SearchContext(root=root, findings=req.findings, memory=memory.summary(key) if memory else {})
    if req.keep_launch:
        policy = LaunchKeeping(policy, spec)
    search = make_search(req, policy, evaluator, cancel=cancel, on_event=on_event, limit_of=limit_of)
    if on_search is not None:
        on_search(search)
    result = await search.run(root, context)
    if not (cancel is not None and cancel.is_set()):
        started = req.budget.started if req.budget.started is not None else time.monotonic() - result.seconds
        await confirm_winner(result, evaluator, writable=req.launch_writable,
                             deadline=replace(req.budget, started=started).deadline())
    if memory is not None:
        memory.record_result(key, result)
    return OptimizeOutcome(req, spec, kernel, result, root.definition)


class LaunchKeeping:
    """A policy restricted to variants that keep the launch contract (``keeps_launch``): what
    ``--keep-launch`` and ``warpforge.keepLaunch`` search, for programs whose launches must not change.
    Children of a dropped proposal are never proposed, so the whole search stays inside the contract."""

    def __init__(self, inner: Policy, spec: KernelSpec) -> None:
        self.inner = inner
        self.spec = spec
        self.name = getattr(inner, "name", "policy")
        #: proposals dropped because they change the launch (for the result's notes)
        self.dropped = 0

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        out = []
        for c in await self.inner.propose(node, context):
            if keeps_launch(c, self.spec):
                out.append(c)
            else:
                self.dropped += 1
        return out

    def update_findings(self, findings: Sequence[Any]) -> None:
        update_findings(self.inner, findings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def update_findings(policy: Policy, findings: Sequence[Any]) -> bool:
    """Hand a policy findings that arrived mid-search (the baseline's profile, ``app.optimize``): proposals
    made after this are ordered (rules) or briefed (model) by them. False for a policy that cannot take them
    (a plug-in's): it keeps the findings it started with."""
    fn = getattr(policy, "update_findings", None)
    if fn is None:
        return False
    fn(findings)
    return True


#: a winner whose launch can be written at every site is preferred over a faster one that needs a launch change
#: by hand while its speedup is at least this fraction of the faster one's
PREFER_WRITABLE_RATIO = 0.9


def prefer_writable(ranked: list[Node], writable: Callable[[Candidate], bool] | None) -> list[Node]:
    """``ranked`` (verified winners, fastest first) reordered so that a variant that needs a launch change the
    user must make by hand does not win over one that does not, unless it is clearly faster: the first
    writable winner within ``PREFER_WRITABLE_RATIO`` of the fastest moves to the front. A winner kept in
    front that still needs a launch change is labelled where it is shown (``WorkspaceChange``)."""
    if writable is None or not ranked or writable(ranked[0].candidate):
        return ranked
    top = ranked[0].speedup or 0.0
    for i, n in enumerate(ranked[1:], start=1):
        if (n.speedup or 0.0) < PREFER_WRITABLE_RATIO * top:
            break
        if writable(n.candidate):
            return [n, *ranked[:i], *ranked[i + 1:]]
    return ranked


async def confirm_winner(result: SearchResult, evaluator: EvaluatorLike, tries: int = 3,
                         writable: Callable[[Candidate], bool] | None = None,
                         deadline: float | None = None) -> None:
    """Run the best variants under compute-sanitizer (memcheck, racecheck) before one is offered.

    A winner that fails (an out-of-bounds access the output comparison could not see, a race) is marked
    with the sanitizer's verdict in the tree and the next best verified variant is tried. So is a winner
    whose speedup Nsight Compute's kernel durations contradict (``gpu.confirm``: its evaluation keeps the
    measurement and says it is not significant). Evaluators without a sanitizer (plug-ins, the CI fixture)
    are taken as they are. ``deadline`` (monotonic) is when the user's wait ends: the checks fit in it (the
    sanitizer capped, the confirmation skipped with a note), and no further winner is tried after it.
    """
    # fastest first; among equals the first evaluated, as the search itself chose
    by_speed = sorted((n for n in result.nodes if n.verified and n is not result.root and (n.speedup or 0) > 1.01
                       and SearchEngine._significant(n)),
                      key=lambda n: (-(n.speedup or 0), getattr(n, "eval_index", None) or 0))
    ranked = prefer_writable(by_speed, writable)
    sanitize = getattr(evaluator, "sanitize", None)
    if sanitize is None:
        if ranked and ranked[0] is not by_speed[0]:
            result.best = ranked[0]
        return
    for i, node in enumerate(ranked[:tries]):
        if i and deadline is not None and time.monotonic() >= deadline:
            break  # the first winner is always checked (capped); further ones only while time is left
        checked = await sanitize(node.candidate, deadline=deadline) if deadline is not None else \
            await sanitize(node.candidate)
        if checked.status == "ok" and not _contradicted(checked):
            result.best = node
            return
        node.evaluation = checked
    if ranked:
        result.best = result.root  # nothing passed the sanitizer: offer nothing rather than an unchecked variant


def _contradicted(evaluation: Any) -> bool:
    """Did the winner's speedup confirmation (ncu) disagree with its timing? (False where none was made.)"""
    conf = getattr(getattr(evaluation, "timing", None), "confirmation", None)
    return getattr(conf, "agrees", None) is False
