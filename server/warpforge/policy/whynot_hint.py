"""WF113: no structural rewrite applies to a kernel with a serial loop over memory: which came closest, and why not.

Why: the large speedups come from structural rewrites (a warp per row, shared-memory tiles, a re-dealt
reduction). When none is proposed for a kernel that has work one could re-map (``cuda.loopclass``: a serial
loop over global memory, or a reduction), the user should not have to guess whether the optimizer missed a
spelling or the kernel really cannot be rewritten: the hint names the rewrite that got furthest
(``policy.whynot``) and what blocked it, in the rule's words, at the line of the loop, with the blocking
line as a related location.

It lives in ``policy`` (it asks the rules, and ``profile`` sits below ``policy``) and joins the static
analyzers when a front end calls ``install()`` (the language server's diagnostics, ``warpforge hints``). The
rules and the canonical form are imported on first use, by a kernel that has a serial loop: a file of
elementwise kernels never loads them.

Cheap enough to run on every edit: the answer is cached by the kernel's text, its spec and the file's text
outside kernels (which holds the macros and typedefs the canonical form reads), so editing one kernel asks
the rules about that kernel only. The canonical form is the one the optimizer uses (``OfflinePolicy``).
Without a spec the rules are asked what they can answer without a launch, and a rewrite that needs one says
the spec is missing. A rule that raises is an internal error: logged, and this kernel gets no WF113.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cuda.loopclass import classify
from ..cuda.text import Position, Range
from ..profile.analyzers import REGISTRY, analyzer
from ..profile.context import KernelContext
from ..profile.findings import Finding, Severity, define, make
from ..spec.model import KernelSpec, LaunchSpec

if TYPE_CHECKING:
    from .whynot import Decline


def _headline(message: str, evidence: dict[str, Any]) -> str:
    """The squiggle: which rewrite came closest and where it stopped (the words are in the hover)."""
    fam = evidence.get("closest")
    if not fam:
        return "no structural rewrite applies"
    line = evidence.get("blocked_line")
    return f"no structural rewrite applies; closest {fam}" + (f", blocked at line {line}" if line else "")


define("WF113", "no structural rewrite applies: the closest and what blocked it", Severity.HINT, "source", None,
       headline=_headline)

log = logging.getLogger(__name__)

_CACHE_MAX = 256
_LINES = re.compile(r"\bline=\d+")


@dataclass(frozen=True)
class _Answer:
    """What the rules said about one kernel text: None when a structural rewrite is proposed (or a rule
    crashed); else the closest decline and its line in the kernel's definition (0: none)."""

    closest: Decline | None
    line: int
    families: int


_cache: OrderedDict[str, _Answer] = OrderedDict()
_lock = threading.Lock()


def _placeholder(ctx: KernelContext) -> KernelSpec:
    """A spec with no sizes and a one-block launch, for asking the rules' analyses when the kernel has none
    (``policy.whynot.ask`` with ``has_spec=False`` never trusts an answer that reads the launch)."""
    return KernelSpec(ctx.file, ctx.kernel.name, (), (), LaunchSpec(("1",), ("32",), source="placeholder"))


def _key(ctx: KernelContext, definition: str) -> str:
    data = ctx.src.data
    outside = b"".join(data[a:b] for a, b in _outside_kernels(ctx))
    # the spec without the lines it was read from: a line added above the kernel moves it, changes nothing
    spec = _LINES.sub("", repr(ctx.spec)) if ctx.spec is not None else "-"
    return hashlib.sha256(b"\0".join([definition.encode(), spec.encode(), outside])).hexdigest()


def _outside_kernels(ctx: KernelContext) -> Iterator[tuple[int, int]]:
    at = 0
    for k in sorted(ctx.model.kernels, key=lambda k: k.span.start):
        yield at, k.span.start
        at = max(at, k.span.end)
    yield at, len(ctx.src.data)


def _answer(ctx: KernelContext, definition: str) -> _Answer:
    from .offline import OfflinePolicy
    from .whynot import explain, structural_rules

    spec = ctx.spec if ctx.spec is not None else _placeholder(ctx)
    policy = OfflinePolicy(ctx.file, ctx.src, ctx.model, ctx.kernel, spec)
    root = policy.root_candidate()
    ctxs = [policy.context(root)]
    norm = policy.normalized(root)
    if norm is not None:
        ctxs.append(policy.context(norm))
    rules = structural_rules()
    verdict = explain(ctxs, has_spec=ctx.spec is not None, rules=rules)
    best = verdict.closest
    return _Answer(best, best.line_in(definition) if best is not None else 0, len(rules))


def answer(ctx: KernelContext) -> _Answer | None:
    """The rules' answer for the kernel (cached by text); None when a rule crashed (logged)."""
    definition = ctx.src.slice(ctx.kernel.span)
    key = _key(ctx, definition)
    with _lock:
        got = _cache.get(key)
        if got is not None:
            _cache.move_to_end(key)
            return got
    from .whynot import RuleCrashed

    try:
        got = _answer(ctx, definition)
    except RuleCrashed as e:
        log.error("why-not: rule %s crashed on `%s` in %s: %s", e.family, ctx.kernel.name, ctx.file, e.error,
                  exc_info=e.error)
        return None
    except Exception:  # the canonical form, the policy: an internal error of ours, never the editor's problem
        log.exception("why-not: asking the rules about `%s` in %s failed", ctx.kernel.name, ctx.file)
        return None
    with _lock:
        _cache[key] = got
        while len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
    return got


def _line_range(ctx: KernelContext, line: int) -> Range:
    r = ctx.line_range(line)
    return r if r.end.character > r.start.character else Range(Position(r.start.line, 0), r.end)


NAME = "why-not"


def install() -> None:
    """Add WF113 to the static analyzers (once): what a front end calls before ``analyze_source``."""
    if NAME not in REGISTRY:
        analyzer(NAME, ("WF113",))(why_not)


def why_not(ctx: KernelContext) -> Iterator[Finding]:
    """The WF113 finding of one kernel, or none (see the module docstring)."""
    from .rules._why import Stage

    definition = ctx.src.slice(ctx.kernel.span)
    lc = classify(definition)
    if not lc.counts:
        return
    got = answer(ctx)
    if got is None or got.closest is None:
        return
    d = got.closest
    first = ctx.kernel.start_line  # 0-based line where the definition starts
    at = first + (lc.line or 1)
    blocked = first + got.line if got.line else 0
    where = f" (line {blocked})" if blocked else ""
    if d.stage == Stage.SCOPE and not d.line and d.reason.endswith("does not recognize the kernel's shape"):
        message = (f"No structural rewrite applies: none of the {got.families} structural rules recognizes this "
                   f"kernel's loop or reduction (closest: {d.family}, {d.what})")
    else:
        message = (f"No structural rewrite applies: closest is {d.family} ({d.what}), blocked by: "
                   f"{d.reason}{where}")
    related = ((ctx.line_range(blocked), f"{d.family} stops here: {d.reason}"),) if blocked and blocked != at else ()
    yield make("WF113", ctx.file, _line_range(ctx, at), message, kernel=ctx.kernel.name,
               evidence={"closest": d.family, "stage": d.stage.name.lower(), "reason": d.reason,
                         "blocked_line": blocked or None, "spec": ctx.spec is not None},
               related=related)
