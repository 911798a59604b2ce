"""The LLM policy for the search, and the mixed policy that pairs it with WarpForge's own rules.

``LLMPolicy.propose`` is the reference design's loop for one node of the tree:

1. reflect — outcomes evaluated since the last reflection become lessons in search memory;
2. repair — a variant this policy proposed that failed compilation or verification in the evaluator is
   re-implemented once by the fixer, with the failure's log, on the node being expanded;
3. plan — the planner proposes hypotheses from the brief (kernel, declarations, spec, findings,
   bottleneck class), the current variant, the path to it, what was already tried, search memory and
   retrieved kernels (and may call SEARCH_DOCS); repeats of the path's hypotheses are dropped;
4. code — one coder call per hypothesis, concurrently;
5. compile — each candidate is compiled here with the evaluator's flags; compile errors go to the fixer
   for at most ``compile_fix_attempts`` rounds, and what still does not compile is a recorded failure.

Why ``MixedPolicy``: the model is good at structural rewrites and poor value for tuning (block sizes,
unroll factors, flags), which the rule library enumerates for free. Both propose for every node of the
same search, so they share its one candidate budget, and the rules tune what the model wrote. When the
model is unavailable — no key, network down, key rejected, cost cap reached — the mixed policy says so
once (a notice) and carries on with the rules alone; an LLM failure never fails the search.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...cuda.candidate import Candidate
from ...cuda.model import FileModel, Kernel
from ...cuda.text import SourceText
from ...rag.backends import default_index_path
from ...rag.index import Index
from ...search.engine import SearchResult
from ...search.memory import SearchMemory, kernel_key
from ...search.tree import Node, SearchContext
from ...spec.model import KernelSpec
from ..offline import OfflinePolicy
from .client import Ledger, LLMClient, LLMError, MalformedOutput, NoKeyError
from .coder import Coder, KernelWriter
from .config import LLMConfig
from .context import LocalCompiler, build_brief
from .fixer import Fixer
from .planner import Hypothesis, Planner, is_repeat, retrieval_snippets
from .reflector import LessonStore, Outcome, Reflector, lesson_lines, memory_lines

log = logging.getLogger("warpforge.llm")

FAILED = ("compile_error", "incorrect", "crashed", "racy", "suspicious", "timeout")
_PATH = re.compile(r"(?:/[\w.+-]+)+/([\w.+-]+)")


def scrub(text: str) -> str:
    """Absolute paths reduced to file names: logs sent to the model must not carry the user's directories."""
    return _PATH.sub(r"\1", text)


@dataclass(frozen=True)
class Failure:
    """An LLM step that produced nothing usable (recorded, reported, never raised)."""

    role: str
    what: str
    detail: str


def _ancestry(node: Node) -> list[Node]:
    """The node and its ancestors, root last."""
    out = []
    n: Node | None = node
    while n is not None:
        out.append(n)
        n = n.parent
    return out


class LLMPolicy:
    """Proposes structural rewrites written by a model (see the module docstring for the loop)."""

    name = "llm"

    def __init__(
        self,
        file: str,
        source: SourceText,
        model: FileModel,
        kernel: Kernel,
        spec: KernelSpec | None,
        findings: Sequence[Any] = (),
        *,
        config: LLMConfig | None = None,
        client: LLMClient | None = None,
        ledger: Ledger | None = None,
        arch: str = "sm_90",
        index: Index | None = None,
        memory: SearchMemory | None = None,
        lessons: LessonStore | None = None,
        on_notice: Callable[[str], None] | None = None,
        nvcc: str | None = None,
        compile_check: bool = True,
    ) -> None:
        self.file = file
        self.source, self.model, self.kernel, self.spec = source, model, kernel, spec
        self.config = config or LLMConfig.from_sources()
        self.findings = tuple(findings)
        self.index = index
        self.memory = memory
        self.lessons = lessons or LessonStore(memory.store if memory is not None else None)
        self.on_notice = on_notice
        self.notices: list[str] = []
        self.failures: list[Failure] = []
        self.disabled: str | None = None
        self.compile_check = compile_check
        self.brief = build_brief(source, model, kernel, spec, self.findings, send_context=self.config.send_context)
        self.kernel_key = kernel_key(source.slice(kernel.span), spec.spec_hash() if spec is not None else "")
        self.compiler = LocalCompiler(source, model, kernel, spec, arch, nvcc)
        self.client: LLMClient | None = None
        try:
            self.client = client or LLMClient(self.config, ledger=ledger)
        except NoKeyError as e:
            self._degrade(e)
        #: candidate hash -> the hypothesis it implements
        self.hypotheses: dict[str, Hypothesis] = {}
        self._proposed: dict[str, list[Hypothesis]] = {}
        self._repaired: set[str] = set()
        self._reflected: set[str] = set()
        self._sem = asyncio.Semaphore(max(1, self.config.concurrency))
        self._reflecting = asyncio.Lock()
        self.lessons_written = 0

    # ----------------------------------------------------------------- state
    @property
    def enabled(self) -> bool:
        return self.disabled is None and self.client is not None

    def notice(self, message: str) -> None:
        if message in self.notices:
            return
        self.notices.append(message)
        log.info("%s", message)
        if self.on_notice is not None:
            self.on_notice(message)

    def _degrade(self, e: LLMError) -> None:
        if self.disabled is not None:
            return
        self.disabled = str(e)
        if isinstance(e, NoKeyError):
            self.notice(f"{e}; optimizing with WarpForge's own transformations only")
        else:
            self.notice(f"LLM proposals stopped: {e}; continuing with WarpForge's own transformations only")

    def _fail(self, role: str, what: str, detail: str) -> None:
        self.failures.append(Failure(role, what, scrub(detail)[:500]))
        log.info("llm %s failed: %s: %s", role, what, detail[:200])

    def _writer(self) -> KernelWriter:
        assert self.client is not None
        return KernelWriter(self.client, self.brief, self.source, self.model, self.kernel, self.spec)

    def spend(self) -> dict[str, Any]:
        """This job's spend (``job``), this kernel's across jobs (``kernel``), the process's (``total``)."""
        if self.client is None:
            return {}
        return {**self.client.ledger.summary(self.kernel_key), "job": self.client.spend.to_json()}

    def report(self) -> dict[str, Any]:
        """What the job's result shows about the model's part: spend, notices, failures."""
        return {"enabled": self.enabled, "disabled": self.disabled, "notices": list(self.notices),
                "failures": [vars(f) for f in self.failures], "spend": self.spend(),
                "models": {r: self.config.model_for(r) for r in ("planner", "coder", "fixer", "reflector")},
                "lessons": self.lessons_written}

    # ----------------------------------------------------------------- the Policy protocol
    def update_findings(self, findings: Sequence[Any]) -> None:
        """Brief the model with these findings from now on (the baseline's profile, arriving mid-search)."""
        self.findings = tuple(findings)
        self.brief = build_brief(self.source, self.model, self.kernel, self.spec, self.findings,
                                 send_context=self.config.send_context)

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        if not self.enabled or node.depth >= self.config.max_depth:
            return []
        if (node.parent is not None and not node.candidate.family.startswith("llm:")
                and not self.config.rewrite_rule_variants):
            return []  # a tuning variant: the rules tune it further; the model rewrites structure elsewhere
        if node.evaluation is not None and not node.ok:
            return []  # a failed variant is a dead end; its repair is proposed on a node that works
        out: list[Candidate] = []
        try:
            await self._reflect_new(node)
            out.extend(await self._repairs(node, context))
            hyps = await self._plan(node, context)
            out.extend(await self._implement_all(node, context, hyps))
        except LLMError as e:
            if e.degrade:
                self._degrade(e)
            else:
                self._fail(e.role or "llm", "gave up", str(e))
        return out

    # ----------------------------------------------------------------- steps
    def _path(self, node: Node) -> list[tuple[Hypothesis | str, float | None]]:
        path: list[tuple[Hypothesis | str, float | None]] = []
        for n in reversed(_ancestry(node)):
            if n.parent is None:
                continue
            h = self.hypotheses.get(n.candidate.hash)
            label: Hypothesis | str = h if h is not None else f"{n.candidate.family} (rule): {n.candidate.rationale}"
            path.append((label, n.speedup))
        return path

    def _tried(self, node: Node) -> list[Hypothesis]:
        tried = list(self._proposed.get(node.candidate.hash, []))
        for c in node.children:
            h = self.hypotheses.get(c.candidate.hash)
            if h is not None and h not in tried:
                tried.append(h)
        return tried

    async def _plan(self, node: Node, context: SearchContext) -> list[Hypothesis]:
        assert self.client is not None
        cfg = self.config
        notes = self.memory.notes(self.kernel_key) if self.memory is not None else []
        mem = memory_lines(context.memory, [(f, scrub(n)) for f, n in notes])
        mem += lesson_lines(await asyncio.to_thread(self.lessons.recent, self.kernel_key))
        retrieved: list[str] = []
        if cfg.send_retrieved and self.index is not None:
            try:
                retrieved = await asyncio.to_thread(retrieval_snippets, self.index, self.brief, node.candidate,
                                                    cfg.retrieved_k, 2)
            except Exception as e:  # retrieval is help, not a requirement
                self.notice(f"retrieval failed ({type(e).__name__}: {e}); planning without it")
        planner = Planner(self.client, self.brief, index=self.index if cfg.send_retrieved else None,
                          search_rounds=cfg.search_docs_rounds)
        path = self._path(node)
        tried = self._tried(node)
        try:
            proposed = await planner.plan(kernel_key=self.kernel_key, current=node.candidate, root=context.root,
                                          path=path, tried=tried, memory=mem, retrieved=retrieved,
                                          n=cfg.hypotheses_per_node)
        except MalformedOutput as e:
            self._fail("planner", "no valid hypotheses", str(e))
            return []
        earlier = [h for h, _ in path if isinstance(h, Hypothesis)] + tried
        kept: list[Hypothesis] = []
        for h in proposed:
            if not h.title or is_repeat(h, earlier + kept):
                log.debug("planner repeated a hypothesis, dropped: %s", h.title)
                continue
            kept.append(h)
        self._proposed.setdefault(node.candidate.hash, []).extend(kept)
        return kept

    async def _implement_all(self, node: Node, context: SearchContext, hyps: list[Hypothesis]) -> list[Candidate]:
        results = await asyncio.gather(*(self._implement(node, context, h) for h in hyps), return_exceptions=True)
        out: list[Candidate] = []
        fatal: LLMError | None = None
        for h, r in zip(hyps, results, strict=True):
            if isinstance(r, Candidate):
                out.append(r)
            elif isinstance(r, LLMError) and r.degrade:
                fatal = fatal or r
            elif isinstance(r, BaseException):
                if isinstance(r, asyncio.CancelledError):
                    raise r
                self._fail("coder", f"hypothesis `{h.title}`", f"{type(r).__name__}: {r}")
        if fatal is not None:
            self._degrade(fatal)
        return out

    async def _implement(self, node: Node, context: SearchContext, h: Hypothesis) -> Candidate | None:
        async with self._sem:
            if not self.enabled:
                return None
            try:
                cand = await Coder(self._writer()).write(kernel_key=self.kernel_key, base=node.candidate,
                                                         root=context.root, hypothesis=h)
            except MalformedOutput as e:
                self._fail("coder", f"hypothesis `{h.title}`", str(e))
                return None
            return await self._compiled(node.candidate, context.root, h, cand)

    async def _compiled(self, base: Candidate, root: Candidate, h: Hypothesis, cand: Candidate) -> Candidate | None:
        """``cand`` once it compiles here (fixing it from nvcc's messages), or None (a recorded failure)."""
        self.hypotheses[cand.hash] = h
        if cand.dropped:
            self.notice(f"dropped from the model's code for `{h.title}` (not device code): " + "; ".join(cand.dropped))
        if not self.compile_check:
            return cand
        attempts = max(0, self.config.compile_fix_attempts)
        for attempt in range(attempts + 1):
            chk = await asyncio.to_thread(self.compiler.check, cand)
            if not chk.available or chk.ok:
                return cand
            if attempt == attempts:
                first = next((ln for ln in chk.log.splitlines() if "error" in ln), chk.log[:200])
                self._fail("fixer", f"hypothesis `{h.title}` still does not compile after {attempts} fixes", first)
                return None
            try:
                cand = await Fixer(self._writer()).fix(kernel_key=self.kernel_key, base=base, root=root,
                                                       hypothesis=h, failing=cand, log=chk.log, kind="compile")
            except MalformedOutput as e:
                self._fail("fixer", f"hypothesis `{h.title}`", str(e))
                return None
            self.hypotheses[cand.hash] = h
        return None

    async def _repairs(self, node: Node, context: SearchContext) -> list[Candidate]:
        """Re-implement, on ``node``, hypotheses of this policy whose variants failed in the evaluator."""
        cfg = self.config
        if not cfg.repair_failures or cfg.repairs_per_node <= 0:
            return []
        lineage = _ancestry(node)
        root = lineage[-1]
        on_path = {id(n) for n in lineage}
        path_hyps = [h for h, _ in self._path(node) if isinstance(h, Hypothesis)]
        todo: list[Node] = []
        for n in root.walk():
            ev = n.evaluation
            h = self.hypotheses.get(n.candidate.hash)
            if (ev is None or ev.status not in FAILED or h is None or n.candidate.hash in self._repaired
                    or n.parent is None or id(n.parent) not in on_path or is_repeat(h, path_hyps)):
                continue
            todo.append(n)
        out: list[Candidate] = []
        for n in todo[: cfg.repairs_per_node]:
            self._repaired.add(n.candidate.hash)
            h = self.hypotheses[n.candidate.hash]
            ev = n.evaluation
            assert ev is not None
            detail = f"status: {ev.status}\n{ev.reason}"
            evidence = getattr(ev, "evidence", None)
            if isinstance(evidence, dict) and evidence:
                detail += "\n" + "\n".join(f"{k}: {v}" for k, v in list(evidence.items())[:20])
            kind = "compile" if ev.status == "compile_error" else "verification"
            try:
                fixed = await Fixer(self._writer()).fix(kernel_key=self.kernel_key, base=node.candidate,
                                                        root=context.root, hypothesis=h, failing=n.candidate,
                                                        log=scrub(detail), kind=kind)
            except MalformedOutput as e:
                self._fail("fixer", f"repair of `{h.title}`", str(e))
                continue
            c = await self._compiled(node.candidate, context.root, h, fixed)
            if c is not None:
                out.append(c)
        return out

    # ----------------------------------------------------------------- reflection
    def _outcomes(self, root: Node, limit: int = 20) -> list[tuple[Node, Outcome]]:
        out: list[tuple[Node, Outcome]] = []
        for n in root.walk():
            if n.parent is None or n.evaluation is None or n.candidate.hash in self._reflected:
                continue
            h = self.hypotheses.get(n.candidate.hash)
            title = h.title if h is not None else n.candidate.rationale
            ev = n.evaluation
            out.append((n, Outcome(n.candidate.family, title, ev.status, scrub(ev.reason), n.speedup,
                                   n.parent.speedup)))
            if len(out) >= limit:
                break
        return out

    async def _reflect_new(self, node: Node, force: bool = False) -> None:
        if self.client is None or not self.enabled:
            return
        async with self._reflecting:
            root = _ancestry(node)[-1]
            pending = self._outcomes(root)
            if not pending or (len(pending) < max(1, self.config.reflect_every) and not force):
                return
            for n, _ in pending:
                self._reflected.add(n.candidate.hash)
            try:
                lessons = await Reflector(self.client, self.brief).reflect(kernel_key=self.kernel_key,
                                                                           outcomes=[o for _, o in pending])
            except MalformedOutput as e:
                self._fail("reflector", "no lessons", str(e))
                return
            if lessons:
                await asyncio.to_thread(self.lessons.add, self.kernel_key, lessons)
                self.lessons_written += len(lessons)

    async def reflect(self, result: SearchResult) -> None:
        """Turn the outcomes not yet reflected on into lessons (call once a search has finished)."""
        try:
            await self._reflect_new(result.root, force=True)
        except LLMError as e:
            if e.degrade:
                self._degrade(e)
            else:
                self._fail("reflector", "no lessons", str(e))

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()


class MixedPolicy:
    """LLM rewrites and rule-based tuning in one search, one candidate budget; rules alone when needed."""

    name = "llm+rules"

    def __init__(self, llm: LLMPolicy, offline: OfflinePolicy) -> None:
        self.llm = llm
        self.offline = offline

    @property
    def notices(self) -> list[str]:
        return self.llm.notices

    async def propose(self, node: Node, context: SearchContext) -> list[Candidate]:
        rules = asyncio.ensure_future(self.offline.propose(node, context))
        written: list[Candidate] = []
        if self.llm.enabled:
            try:
                written = await self.llm.propose(node, context)
            except Exception as e:  # an LLM-side bug must not cost the search its rule proposals
                self.llm._fail("llm", "propose", f"{type(e).__name__}: {e}")
                self.llm.notice(f"LLM proposals stopped after an internal error ({type(e).__name__}); "
                                "continuing with WarpForge's own transformations only")
                self.llm.disabled = self.llm.disabled or f"internal error: {e}"
        tuned = await rules
        # Model-written variants first: the beam takes families round-robin in first-seen order, and MCTS
        # keeps this order among equally promising families.
        return [*written, *tuned]

    def update_findings(self, findings: Sequence[Any]) -> None:
        self.llm.update_findings(findings)
        self.offline.update_findings(findings)

    async def combine(self, a: Node, b: Node, context: SearchContext | None) -> Candidate | None:
        """Crossover by the rules: b's rule steps replayed on a (or a's on b, when a is model-written)."""
        child = await self.offline.combine(a, b, context)
        if child is None:
            child = await self.offline.combine(b, a, context)
        return child

    async def reflect(self, result: SearchResult) -> None:
        await self.llm.reflect(result)

    async def aclose(self) -> None:
        await self.llm.aclose()


def default_index(config: LLMConfig) -> Index | None:
    """The embedded index when it exists and holds something (retrieval is optional)."""
    if not config.send_retrieved:
        return None
    path = default_index_path()
    if not path.is_file():
        return None
    try:
        from ...rag.sqlite_fts import SqliteBackend

        backend = SqliteBackend(path)
        return Index(backend) if backend.count() > 0 else None
    except Exception:
        return None


def policy_for_request(
    req: Any,
    *,
    config: LLMConfig | None = None,
    api_key: str | None = None,
    settings: dict[str, Any] | None = None,
    memory: SearchMemory | None = None,
    index: Index | None = None,
    ledger: Ledger | None = None,
    client: LLMClient | None = None,
    on_notice: Callable[[str], None] | None = None,
    nvcc: str | None = None,
) -> MixedPolicy:
    """The policy for an ``OptimizeRequest``: LLM + rules, or rules alone with a notice when there is no key.

    ``api_key`` is what the editor passes from its secret store; without it ``ANTHROPIC_API_KEY`` is used.
    """
    from ...search.optimize import prepare

    src, model, kernel, spec = prepare(req)
    cfg = config or LLMConfig.from_sources(settings, api_key=api_key)
    if api_key and config is not None:
        from dataclasses import replace

        cfg = replace(cfg, api_key=api_key)
    offline = OfflinePolicy(req.file, src, model, kernel, spec, req.findings, req.sm_count, req.arch,
                            families=req.families)
    llm = LLMPolicy(req.file, src, model, kernel, spec, req.findings, config=cfg, client=client, ledger=ledger,
                    arch=req.arch, index=index if index is not None else default_index(cfg), memory=memory,
                    on_notice=on_notice, nvcc=nvcc)
    return MixedPolicy(llm, offline)
