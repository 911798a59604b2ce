"""Why no structural rewrite: every structural rule asked why it does not apply, and the closest one picked.

Why: when the library proposes nothing structural for a kernel that walks memory in a serial loop, the user
(and the wide yardstick) needs to know which rewrite nearly applied and what stopped it, in words and at the
line, not "no candidates". Each rule is asked without proposing anything:

* a rule module that exposes ``why_not(ctx) -> NotLegal | None`` (``lane_remap``; the IR remaps) answers
  in its own words; a ``NotLegal`` may carry ``stage`` (default ``SHAPE``);
* any other rule is asked for variants while its ``declined(...)`` notes are recorded (``rules._why``), and
  the note that got furthest is its answer; a ``StructuralRule`` with a recognized shape but no launch that
  fits is at ``LAUNCH``; a rule that says nothing gets a generic line at ``SCOPE``.

The closest decline is the one at the highest stage (``rules._why.Stage``); ties go to a rule that re-maps
the loop (not ``SECONDARY``), then to a decline with a line, then to the registry's order. Asking is pure
analysis (no rewrite is built), and a rule that raises is reported to the caller (``RuleCrashed``), which
decides what a crash means (the hint skips the kernel, the funnel records it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .rules import Rule, RuleContext, load
from .rules._structural_rule import StructuralRule
from .rules._why import Note, Stage, furthest, recording

#: What each family does, in the words the hint uses ("closest is column_split (...)").
WHAT: dict[str, str] = {
    "atomic_aggregate": "one atomic per warp instead of one per thread",
    "coarsen_y": "each thread computes several rows of a 2-D grid",
    "column_split": "a column sum split over many threads, combined with atomics",
    "column_remap": "several threads per column splitting its row walk, partials combined in shared memory",
    "element_remap": "a warp or a block per item, its row loops split over the group",
    "smem_stage": "the loop's shared reads staged tile by tile in shared memory, GEMM-style, or a transpose's tile",
    "lane_remap": "one warp per item, its loop split over the 32 lanes",
    "atomics_privatize": "a histogram's atomics into a per-block copy in shared memory",
    "reduce_coarsen": "a block reduction that first sums several elements per thread",
    "single_pass": "a reduction's two passes fused into one",
    "smem_halo": "a stencil's neighbours staged in a shared-memory tile",
    "smem_padding": "shared-memory rows padded by one bank word against bank conflicts",
    "smem_tiling": "shared-memory tiles of the reused operands (GEMM-style)",
    "smem_transpose": "a transpose through a shared-memory tile",
    "stride_reduce": "a per-thread chunk sum re-dealt as a coalesced grid-stride walk",
    "vectorize": "128-bit vector loads and stores",
    "vectorize_strided": "128-bit vector loads and stores in a loop whose threads stride over a row together",
    "warp_per_row": "one warp (or block) per row, shuffle reductions",
    "warp_reduce": "a shared-memory tree reduction's last steps as warp shuffles",
}

#: a line reference inside a rule's words: " (line 12)"
_LINE_REF = re.compile(r"\s*\(line \d+\)")

NO_SPEC = ("the kernel has no spec (sizes and launch), so no launch can be planned: add `// @warpforge` lines "
           "above it (the \"Add benchmark spec\" action writes them) or launch it from host code in this file")


#: a "(line N)" a rule put in its words: the hint says the line itself, mapped to the user's text
_LINE_SUFFIX = re.compile(r"\s*\(line \d+\)$")


@dataclass(frozen=True)
class Decline:
    """One rule's answer: its family, the words, how far it got, and the 1-based line of the kernel text."""

    family: str
    reason: str
    stage: Stage
    line: int = 0
    #: the text of that line (stripped): the canonical form has other line numbers than the user's text, so
    #: the line is found again in the user's definition by its text (``line_in``)
    text: str = ""

    def line_in(self, definition: str) -> int:
        """The 1-based line of ``definition`` (the kernel as written) this decline points at, 0 if unknown."""
        lines = definition.splitlines()
        if not self.text:
            return 0
        if 0 < self.line <= len(lines) and lines[self.line - 1].strip() == self.text:
            return self.line
        hits = [i + 1 for i, ln in enumerate(lines) if ln.strip() == self.text]
        return min(hits, key=lambda h: abs(h - self.line)) if hits else 0

    @property
    def what(self) -> str:
        return WHAT.get(self.family, self.family.replace("_", " "))


class RuleCrashed(Exception):
    """A rule raised while being asked: an internal error of that rule, not a reason."""

    def __init__(self, family: str, error: BaseException) -> None:
        super().__init__(f"{family}: {type(error).__name__}: {error}")
        self.family = family
        self.error = error


def structural_rules() -> list[Rule]:
    """The structural rules, in the registry's (alphabetical) order."""
    return [r for _, r in sorted(load().items()) if r.structural]


def _own_why_not(rule: Rule) -> object | None:
    """The rule's ``why_not`` (a method, or a function of its module), when it has one."""
    fn = getattr(rule, "why_not", None)
    if fn is None:
        fn = getattr(sys.modules.get(type(rule).__module__), "why_not", None)
    return fn if callable(fn) else None


def _from_note(family: str, note: Note | None, fallback: str, stage: Stage) -> Decline:
    if note is None:
        return Decline(family, fallback, stage)
    return Decline(family, note.reason, note.stage, note.line)


def ask(rule: Rule, ctx: RuleContext, *, has_spec: bool = True) -> Decline | None:
    """Why ``rule`` proposes nothing for ``ctx`` (None: it has variants). Without a spec (``has_spec`` False;
    ``ctx`` then carries a placeholder), only the analysis is asked and a launch question is "no spec"."""
    try:
        got = _ask(rule, ctx, has_spec)
        return replace(got, reason=_LINE_SUFFIX.sub("", got.reason)) if got is not None else None
    except Exception as e:
        if not has_spec:  # a rule that reads the placeholder spec: how far it got is unknown, the spec is missing
            return Decline(rule.family, NO_SPEC, Stage.SHAPE)
        raise RuleCrashed(rule.family, e) from e


def _ask(rule: Rule, ctx: RuleContext, has_spec: bool) -> Decline | None:
    fam = rule.family
    own = _own_why_not(rule)
    if own is not None:
        got = own(ctx)  # type: ignore[operator]
        if got is not None:
            # "(line N)" inside the words counts lines of the text the rule read (the canonical form, the kernel
            # alone), not the user's file: dropped, the hint gives the blocking line itself, mapped back
            words = _LINE_REF.sub("", str(getattr(got, "reason", got)))
            return Decline(fam, words, Stage(int(getattr(got, "stage", Stage.SHAPE))),
                           int(getattr(got, "line", 0) or 0))
        if not has_spec:
            return Decline(fam, NO_SPEC, Stage.LAUNCH)
        return None if rule.variants(ctx) else Decline(fam, "no launch of the spec fits the rewrite", Stage.LAUNCH)
    with recording() as notes:
        if isinstance(rule, StructuralRule):
            shape = rule.analyse(ctx)
            if shape is None:
                return _from_note(fam, furthest(notes), f"{fam} does not recognize the kernel's shape", Stage.SCOPE)
            if not has_spec:
                return Decline(fam, NO_SPEC, Stage.LAUNCH)
            if rule.launches(ctx, shape[0], shape[1]):
                return None
            note = furthest(notes)
            return _from_note(fam, note if note is not None and note.stage >= Stage.LAUNCH else None,
                              "the shape is recognized, but no launch of the spec fits the rewrite", Stage.LAUNCH)
        if rule.variants(ctx):
            return None if has_spec else Decline(fam, NO_SPEC, Stage.LAUNCH)
        return _from_note(fam, furthest(notes), f"{fam} does not recognize the kernel's shape", Stage.SCOPE)


#: families that do not re-map a serial loop or a reduction (they coarsen threads, widen accesses, pad shared
#: memory): at the same stage, a rule that would take the loop itself is the more useful answer ("the loop writes
#: memory `c[...]`" rather than "the row index has no bound")
SECONDARY = frozenset({"coarsen_y", "vectorize", "vectorize_strided", "smem_padding"})


#: families whose planner another family falls back to (``lane_remap`` asks ``element_remap``'s ``plan_items`` when
#: its one-loop plan declines on the kernel's form): at the same stage the primary family's words are the answer
FALLBACK = frozenset({"element_remap"})


def _rank(d: Decline) -> tuple[int, bool, bool, bool]:
    return int(d.stage), d.family not in SECONDARY, d.line > 0, d.family not in FALLBACK


def closest(declines: Sequence[Decline]) -> Decline | None:
    """The decline that got furthest: highest stage, then a rule that re-maps loops (not ``SECONDARY``), then one
    with a line, then a primary rule (not ``FALLBACK``), then the first given."""
    best: Decline | None = None
    for d in declines:
        if best is None or _rank(d) > _rank(best):
            best = d
    return best


@dataclass(frozen=True)
class Verdict:
    """Every structural rule's answer for one kernel: the families that propose, and the others' declines."""

    proposed: tuple[str, ...]
    declines: tuple[Decline, ...]

    @property
    def closest(self) -> Decline | None:
        return None if self.proposed else closest(self.declines)


def explain(ctxs: Sequence[RuleContext], *, has_spec: bool = True, rules: Sequence[Rule] | None = None) -> Verdict:
    """Ask every structural rule on each context (the kernel as written, then its canonical form, as the
    offline policy does): a family proposes if it has variants on any; else its furthest decline counts."""
    proposed: list[str] = []
    declines: list[Decline] = []
    for rule in rules if rules is not None else structural_rules():
        answers: list[Decline] = []
        for ctx in ctxs:
            if ctx.cand_kernel is None:
                continue
            d = ask(rule, ctx, has_spec=has_spec)
            if d is None:
                proposed.append(rule.family)
                break
            lines = ctx.candidate.definition.splitlines()
            text = lines[d.line - 1].strip() if 0 < d.line <= len(lines) else ""
            answers.append(replace(d, text=text))
        else:
            # as far on both forms: the canonical form's words (the last asked), which the rule is applied to when
            # the kernel as written gives it nothing; a spelling the lowering already resolved is not the blocker
            best = closest(answers[::-1])
            if best is not None:
                declines.append(best)
    return Verdict(tuple(proposed), tuple(declines))
