"""Natural language → kernel: OptiML's Mixture-of-Thoughts generator, verified against a reference.

The user describes a kernel in a comment and gives a spec and a reference with the same signature — an
existing kernel, or a deliberately simple one they wrote — that defines the right answer. Several
strategy prompts (direct, vectorized, cooperative, tiled: ``prompts/synth_strategies.md``) each produce a
candidate; each is compiled here (compile errors go to the fixer, bounded), then verified and timed
against the reference when an evaluator is given. The best verified candidate — or, without an evaluator,
the first that compiles, labelled unverified — is offered as text to insert: the description, the spec
annotation and the kernel under its new name. Nothing is written to the file by this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...cuda.candidate import Candidate
from ...cuda.parser import parse
from ...cuda.text import SourceText
from ...search.tree import EvaluatorLike
from ...spec.resolve import build_spec
from . import prompts
from .client import Ledger, LLMClient, LLMError, MalformedOutput
from .coder import SUBMIT, KernelWriter
from .config import LLMConfig
from .context import LocalCompiler, build_brief
from .fixer import Fixer
from .planner import Hypothesis, system_for


@dataclass
class SynthCandidate:
    strategy: str
    candidate: Candidate | None
    #: "verified" | "incorrect" | "compiled" | "compile_error" | "failed"
    status: str
    detail: str = ""
    speedup: float | None = None


@dataclass
class SynthResult:
    name: str
    best: SynthCandidate | None
    candidates: list[SynthCandidate] = field(default_factory=list)
    #: text to insert (description, spec annotation, kernel) — None when nothing usable was produced
    insertion: str | None = None
    verified: bool = False
    notices: list[str] = field(default_factory=list)
    spend: dict[str, Any] = field(default_factory=dict)


def strategies() -> dict[str, str]:
    return prompts.load("synth_strategies").sections()


def rename_kernel(source: str, old: str, new: str) -> str:
    """The candidate's code with its kernel (only the definition's name) renamed."""
    src = SourceText(source)
    k = parse(src.data).kernel(old)
    if k is None:
        return source
    data = src.data
    return (data[: k.name_span.start] + new.encode() + data[k.name_span.end :]).decode("utf-8", errors="replace")


async def synthesize(
    description: str,
    *,
    file: str,
    text: str,
    reference: str,
    name: str | None = None,
    strategy_names: Sequence[str] | None = None,
    config: LLMConfig | None = None,
    client: LLMClient | None = None,
    ledger: Ledger | None = None,
    evaluator: EvaluatorLike | None = None,
    arch: str = "sm_90",
    nvcc: str | None = None,
) -> SynthResult:
    """Kernels for ``description`` by several strategies, checked against the kernel ``reference`` in ``text``."""
    cfg = config or LLMConfig.from_sources()
    src = SourceText(text)
    model = parse(src.data)
    ref = model.require(reference, file)
    spec = build_spec(src, model, ref, file)
    target = name or f"{ref.name}_synth"
    result = SynthResult(target, None)
    try:
        llm = client or LLMClient(cfg, ledger=ledger)
    except LLMError as e:
        result.notices.append(f"{e}; natural-language synthesis needs the model")
        return result
    brief = build_brief(src, model, ref, spec, (), send_context=cfg.send_context)
    root = Candidate(ref.name, src.slice(ref.span), family="original", rationale="the reference kernel")
    key = f"synth:{root.hash}"
    writer = KernelWriter(llm, brief, src, model, ref, spec)
    compiler = LocalCompiler(src, model, ref, spec, arch, nvcc)
    table = strategies()
    chosen = [s for s in (strategy_names or list(table)) if s in table]
    sem = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(strategy: str) -> SynthCandidate:
        async with sem:
            prompt = "\n".join([
                "## What the kernel must compute (the user's description)", description.strip(), "",
                f"## Strategy: {strategy}", table[strategy], "",
                "## Task",
                f"Write a complete kernel named `{ref.name}` with the reference's exact signature, computing what "
                "the reference computes, following the strategy; answer by calling `submit_kernel`.",
            ])
            try:
                res = await llm.structured("synth", system=system_for("synth", brief), prompt=prompt, tool=SUBMIT,
                                           kernel=key, check=writer.checker(root))
            except MalformedOutput as e:
                return SynthCandidate(strategy, None, "failed", str(e))
            hyp = Hypothesis(f"{strategy} implementation of: {description.strip()[:200]}", strategy,
                             change=table[strategy])
            cand = writer.candidate(res.value, root, f"synth:{strategy}", hyp.title, f"synth:{strategy}")
            for attempt in range(cfg.compile_fix_attempts + 1):
                chk = await asyncio.to_thread(compiler.check, cand)
                if not chk.available:
                    return SynthCandidate(strategy, cand, "compiled", "not compiled here (no nvcc)")
                if chk.ok:
                    return SynthCandidate(strategy, cand, "compiled")
                if attempt == cfg.compile_fix_attempts:
                    return SynthCandidate(strategy, cand, "compile_error", chk.log)
                try:
                    cand = await Fixer(writer).fix(kernel_key=key, base=root, root=root, hypothesis=hyp,
                                                   failing=cand, log=chk.log, kind="compile")
                except MalformedOutput as e:
                    return SynthCandidate(strategy, cand, "compile_error", str(e))
            return SynthCandidate(strategy, cand, "compile_error")

    outcomes = await asyncio.gather(*(one(s) for s in chosen), return_exceptions=True)
    for s, o in zip(chosen, outcomes, strict=True):
        if isinstance(o, SynthCandidate):
            result.candidates.append(o)
        elif isinstance(o, LLMError):
            result.candidates.append(SynthCandidate(s, None, "failed", str(o)))
            if o.degrade and str(o) not in result.notices:
                result.notices.append(str(o))
        elif isinstance(o, BaseException):
            result.candidates.append(SynthCandidate(s, None, "failed", f"{type(o).__name__}: {o}"))
    if evaluator is not None:
        for sc in result.candidates:
            if sc.status != "compiled" or sc.candidate is None:
                continue
            try:
                ev = await evaluator.evaluate(sc.candidate)
            except Exception as e:
                sc.status, sc.detail = "failed", f"evaluator error: {type(e).__name__}: {e}"
                continue
            if ev.status == "ok":
                sc.status, sc.speedup = "verified", ev.speedup
            else:
                sc.status, sc.detail = "incorrect" if ev.status == "incorrect" else ev.status, ev.reason
        verified = [c for c in result.candidates if c.status == "verified"]
        result.best = max(verified, key=lambda c: c.speedup or 0.0) if verified else None
        result.verified = result.best is not None
    else:
        result.best = next((c for c in result.candidates if c.status == "compiled"), None)
        if result.best is not None:
            result.notices.append("no evaluator: the offered kernel compiles but is not verified or timed")
    if result.best is not None and result.best.candidate is not None:
        result.insertion = insertion_text(description, spec.to_annotation(), rename_kernel(
            result.best.candidate.source, ref.name, target), result.best, result.verified)
    result.spend = llm.ledger.summary(key)
    if client is None:
        await llm.aclose()
    return result


def insertion_text(description: str, annotation: str, code: str, best: SynthCandidate, verified: bool) -> str:
    lines = [f"// {ln}".rstrip() for ln in description.strip().splitlines()]
    if verified and best.speedup is not None:
        lines.append(f"// warpforge: synthesized ({best.strategy} strategy), verified against the reference, "
                     f"{best.speedup:.2f}x its speed")
    else:
        lines.append(f"// warpforge: synthesized ({best.strategy} strategy); compiles, NOT yet verified")
    return "\n".join([*lines, annotation.rstrip(), code.rstrip()]) + "\n"
