"""The offline policy: WarpForge's own transformation library as a search Policy (no API key needed).

It proposes, for a node, every applicable variant of every registered rule, ordered so that rules motivated by
the kernel's findings come first, then families that worked on this kernel before (search memory), then
structural rewrites before tuning ones. ``combine``
(crossover) replays the steps of one branch on top of another.

A rule that finds nothing to do in a candidate is asked again on the candidate's canonical form: the candidate
lowered by ``policy.ir`` (the real preprocessor, then exact passes: device functions inlined, loop variables
declared in their loops, ``while`` loops as ``for``, bumped indices affine, global accumulators in registers,
typedefs and template arguments substituted, and ``cuda.normalize``'s guards as early exits and bumped
pointers as base + offset), and its rewrite then starts from that text. Rules therefore see one shape for
equivalent spellings without each learning every spelling; the canonical text alone is never proposed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..cuda.candidate import Candidate
from ..cuda.model import FileModel, Kernel
from ..cuda.normalize import file_facts, normalize_definition
from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..search.tree import Node, SearchContext
from ..spec.model import KernelSpec
from .ir import Declined, Lowered, build_settings, lower
from .rules import REGISTRY, Rule, RuleContext, load
from .rules._util import refresh_launch_bounds

if TYPE_CHECKING:  # search.optimize brings the search engine: only an optimize request needs it
    from ..search.optimize import OptimizeRequest


@dataclass
class OfflinePolicy:
    file: str
    source: SourceText
    model: FileModel
    kernel: Kernel
    spec: KernelSpec
    findings: Sequence[Any] = ()
    sm_count: int = 132
    arch: str = "sm_90"
    families: set[str] | None = None  # restrict to these families (None: all)
    name: str = "rules"
    errors: list[str] = field(default_factory=list)
    #: candidate text -> its lowered text and the grid it is meant for (None: nothing to lower, or declined)
    _lowered: dict[tuple[str, tuple[str, ...], tuple[str, ...] | None, tuple[str, ...] | None],
                   tuple[str, tuple[str, ...] | None] | None] = field(
        default_factory=dict, repr=False)

    def root_candidate(self) -> Candidate:
        return Candidate(self.kernel.name, self.source.slice(self.kernel.span), family="original",
                         rationale="the kernel as written")

    def context(self, candidate: Candidate) -> RuleContext:
        return RuleContext(self.file, self.source, self.model, self.kernel, self.spec, candidate, self.findings,
                           self.sm_count, self.arch)

    def rules(self) -> list[Rule]:
        load()
        return [r for fam, r in sorted(REGISTRY.items()) if self.families is None or fam in self.families]

    def _ordered(self, rules: list[Rule], memory: dict[str, tuple[int, int, float]]) -> list[Rule]:
        actions = {str(getattr(f, "action", "")) for f in self.findings} | {
            str(getattr(f, "code", "")) for f in self.findings}
        # findings folded into their root cause's (``profile.rootcause``) still motivate their rules
        for f in self.findings:
            evidence = getattr(f, "evidence", None)
            for m in (evidence.get("merged") or []) if isinstance(evidence, dict) else []:
                if isinstance(m, dict):
                    actions |= {str(m.get("action") or ""), str(m.get("code") or "")}

        def key(r: Rule) -> tuple[int, float, int]:
            motivated = 0 if (r.family in actions or any(m in actions for m in r.motivated_by)) else 1
            tries, wins, best = memory.get(r.family, (0, 0, 1.0))
            prior = -(wins / tries) * best if tries else 0.0
            # Then a structural rewrite before a tuning one: a beam node below the root gets two children a round,
            # and in the registry's alphabetical order launch and flag tweaks took both (llm.c's softmax: the
            # warp-per-row child got fast_math and launch_bounds, never the strided vector loads that add 25 %).
            # A structural rule proposes only where its analysis matched, so its proposals are the rare ones.
            return motivated, prior, 0 if r.structural else 1

        return sorted(rules, key=key)

    def lowered(self, candidate: Candidate) -> tuple[str, tuple[str, ...] | None] | None:
        """The candidate's definition lowered by ``policy.ir`` and the launch's grid it is meant for (None when
        the candidate's grid holds); None when unchanged or declined.

        The build's defines and include folders are the project's (``compiler.project``); the spec's
        tunables and the candidate's defines stay names. Without nvcc (or where it fails on the file)
        the passes still run on the text as written."""
        key = (candidate.source, tuple(sorted(candidate.defines)), candidate.grid, candidate.block)
        if key in self._lowered:
            return self._lowered[key]
        defines, includes, std = build_settings(self.file)
        got: Lowered | Declined = Declined("not lowered")
        for pre in (True, False):
            got = lower(self.source.text, self.kernel.name, path=self.file, spec=self.spec, defines=defines,
                        include_dirs=includes, definition=candidate.source, keep=tuple(candidate.defines),
                        std=std, preprocess=pre, grid=candidate.grid, model=self.model,
                        block=candidate.block, tunables=candidate.define_map())
            if not (isinstance(got, Declined) and got.reason.startswith("the preprocessor failed")):
                break
        out: tuple[str, tuple[str, ...] | None] | None = None
        if isinstance(got, Declined):
            self.errors.append(f"lower: {got.reason} (line {got.line})")
        elif got.changed:
            out = (got.text, got.grid)
        self._lowered[key] = out
        return out

    def normalized(self, candidate: Candidate) -> Candidate | None:
        """The candidate in canonical form, or None when that is the text it already has."""
        try:
            low = self.lowered(candidate)
        except (ValueError, RecursionError) as e:  # a pass that cannot parse what it made: keep the original
            self.errors.append(f"lower: {type(e).__name__}: {e}")
            low = None
        if low is not None:
            text, grid = low
            return replace(candidate, source=text) if grid is None else replace(candidate, source=text, grid=grid)
        try:
            text = normalize_definition(candidate.source, candidate.kernel, file_facts(self.source.text))
        except (ValueError, RecursionError) as e:  # a pass that cannot parse what it made: keep the original
            self.errors.append(f"normalize: {type(e).__name__}: {e}")
            return None
        return replace(candidate, source=text) if text != candidate.source else None

    def _rule_context(self, rule: Rule, ctx: RuleContext, canonical: RuleContext | None,
                      param: str | None = None) -> tuple[RuleContext, list[str]]:
        """The context a rule applies in (the candidate's, else its canonical form's) and its parameters."""
        params = rule.variants(ctx)
        if (params if param is None else param in params) or canonical is None or canonical.cand_kernel is None:
            return ctx, params
        return canonical, rule.variants(canonical)

    def _consistent(self, ctx: RuleContext, child: Candidate) -> Candidate | None:
        """Keep a ``__launch_bounds__`` added on this path true to a block size a later step changed.

        A bound below the launch's block makes the launch fail, so every rule that changes the block would
        otherwise need to know about the launch_bounds rule; doing it here keeps rules independent.
        """
        if child.block is None or child.block == ctx.block:
            return child
        fixed = refresh_launch_bounds(self.context(child), child.source, child.block)
        if fixed is None:
            return None
        return child if fixed == child.source else replace(child, source=fixed)

    def _as_written(self, child: Candidate, written: RuleContext, used: RuleContext) -> Candidate:
        """A child made from the lowered text, with each parameter the rule left alone spelled as the user
        wrote it (``real_t* y``, not the ``float* y`` lowering resolved it to): the diff changes no more of the
        user's text than the rewrite needs."""
        if used is written or written.cand_kernel is None or used.cand_kernel is None:
            return child
        src = SourceText(child.source)
        k = parse(src.data).kernel(self.kernel.name)
        if k is None or not (len(k.params) == len(written.cand_kernel.params) == len(used.cand_kernel.params)):
            return child
        edits = [(p.span.start, p.span.end, w.text) for p, w, u in
                 zip(k.params, written.cand_kernel.params, used.cand_kernel.params, strict=True)
                 if p.text == u.text != w.text]
        if not edits:
            return child
        data = src.data
        for start, end, text in sorted(edits, reverse=True):
            data = data[:start] + text.encode("utf-8") + data[end:]
        return replace(child, source=data.decode("utf-8"))

    def child(self, rule: Rule, param: str, used: RuleContext, written: RuleContext) -> Candidate | None:
        """``rule``'s child for ``param`` as the search gets it: applied in ``used`` (the candidate's context
        or its canonical form's), its launch bounds kept consistent, its untouched parameters spelled as in
        ``written``. One path for proposals, replays and the measuring tools (``benchmarks/wide``), which
        built the canonical form's ``__nv_bfloat16* out`` and the guard refused it for ``floatX* out``."""
        child = rule.apply(used, param)
        child = self._consistent(used, child) if child is not None else None
        return self._as_written(child, written, used) if child is not None else None

    def propose_sync(self, candidate: Candidate, memory: dict[str, tuple[int, int, float]] | None = None
                     ) -> list[Candidate]:
        ctx = self.context(candidate)
        if ctx.cand_kernel is None:
            return []
        norm = self.normalized(candidate)
        canonical = self.context(norm) if norm is not None else None
        out: list[Candidate] = []
        for rule in self._ordered(self.rules(), memory or {}):
            try:
                use, params = self._rule_context(rule, ctx, canonical)
                for param in params:
                    child = self.child(rule, param, use, ctx)
                    if child is not None:
                        out.append(child)
            except Exception as e:  # a buggy rule must not stop the others from proposing
                self.errors.append(f"{rule.family}: {type(e).__name__}: {e}")
        return out

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        return await asyncio.to_thread(self.propose_sync, node.candidate, context.memory)

    def update_findings(self, findings: Sequence[Any]) -> None:
        """Order later proposals by these findings (the baseline's profile, arriving mid-search)."""
        self.findings = tuple(findings)

    def replay(self, start: Candidate, steps: Sequence[str]) -> Candidate | None:
        """Apply ``steps`` (``family:param``) in order on top of ``start``; None if one no longer applies."""
        load()
        cur = start
        for step in steps:
            fam, _, param = step.partition(":")
            rule = REGISTRY.get(fam)
            if rule is None:
                return None
            ctx = self.context(cur)
            if ctx.cand_kernel is None:
                return None
            norm = self.normalized(cur)
            written = ctx
            ctx, params = self._rule_context(rule, ctx, self.context(norm) if norm is not None else None, param)
            if param not in params:
                return None
            nxt = self.child(rule, param, ctx, written)
            if nxt is None:
                return None
            cur = nxt
        return cur

    async def combine(self, a: Node, b: Node, context: SearchContext | None) -> Candidate | None:
        """Crossover: b's steps whose families a lacks, replayed on a."""
        fams_a = {s.split(":", 1)[0] for s in a.candidate.steps}
        extra = [s for s in b.candidate.steps if s.split(":", 1)[0] not in fams_a]
        if not extra:
            return None
        child = await asyncio.to_thread(self.replay, a.candidate, extra)
        if child is None:
            return None
        return replace(child, family="crossover",
                       rationale=f"compose {' + '.join(a.families)} with {' + '.join(b.families)}")


def offline_policy(req: OptimizeRequest) -> OfflinePolicy:
    """The rules-only policy for an optimize request (what ``search.optimize`` used to build itself).

    It lives here, not in ``search``, because search only knows the ``Policy`` protocol; front ends that want
    no model pass this one."""
    from ..search.optimize import prepare

    src, model, kernel, spec = prepare(req)
    return OfflinePolicy(req.file, src, model, kernel, spec, req.findings, req.sm_count, req.arch,
                         families=req.families)
