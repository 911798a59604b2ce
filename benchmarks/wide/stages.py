"""The funnel's stages for one kernel: preprocess, IR, spec, structural proposals (or why not), nvcc builds.

Each stage is a function returning a small record instead of raising: a kernel that stops at one stage is a
count in the funnel, never a crash of the run. The project's own parts do the work (``cuda.parse``,
``spec.build_spec``, ``policy.offline.OfflinePolicy``, the evaluator's build path as
``benchmarks/corpus_applicability.EvaluatorBuild`` mirrors it); this module only asks them and records.
"""

from __future__ import annotations

import linecache
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from warpforge.cuda import parse
from warpforge.cuda.candidate import Candidate
from warpforge.cuda.model import FileModel, Kernel
from warpforge.cuda.text import SourceText
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules import REGISTRY, Rule, RuleContext, load
from warpforge.policy.rules._structural_rule import StructuralRule
from warpforge.policy.whynot import Decline, RuleCrashed, ask, closest
from warpforge.spec import build_spec
from warpforge.spec.model import KernelSpec, SpecError
from warpforge.spec.resolve import draft_spec

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(_ROOT / "benchmarks"))

from corpus_applicability import EvaluatorBuild  # noqa: E402

#: folders searched for a project's own headers (besides the file's folder and its parents)
INCLUDE_NAMES = frozenset({"include", "inc", "common", "Common", "util", "utils", "src", "llmc", "csrc"})
#: nvcc -E's limit per file
PREPROCESS_TIMEOUT = 60.0
#: children built per proposed family before giving up on it (the first that builds counts)
BUILD_TRIES = 3


# ----------------------------------------------------------------------------- preprocess


def include_dirs(project: Path, file: Path, limit: int = 24) -> list[Path]:
    """The folders nvcc -E gets for ``file``: its own, the project root, then the project's folders named like
    include folders (``INCLUDE_NAMES``), nearest first. Not every parent folder: a project's shim for another
    platform (llm.c's ``dev/unistd.h`` for Windows) would shadow the system header of the same name."""
    out: list[Path] = [file.parent]
    if project not in out:
        out.append(project)
    named = sorted((p for p in project.rglob("*") if p.is_dir() and p.name in INCLUDE_NAMES),
                   key=lambda p: (len(p.relative_to(project).parts), str(p)))
    for p in named:
        if p not in out:
            out.append(p)
    return out[:limit]


@dataclass
class Preprocessed:
    ok: bool
    seconds: float = 0.0
    error: str = ""
    lines: int = 0


def preprocess(project: Path, file: Path, nvcc: str = "nvcc", arch: str = "sm_90") -> Preprocessed:
    """``nvcc -E`` of the whole file as CUDA with its project's include folders; the first error on failure."""
    import time

    t0 = time.perf_counter()
    argv = [nvcc, "-E", "-x", "cu", "-std=c++17", f"-arch={arch}", "--expt-relaxed-constexpr",
            *(f"-I{d}" for d in include_dirs(project, file)), str(file)]
    try:
        res = subprocess.run(argv, capture_output=True, timeout=PREPROCESS_TIMEOUT, cwd=file.parent)
    except subprocess.TimeoutExpired:
        return Preprocessed(False, time.perf_counter() - t0, f"nvcc -E exceeded {PREPROCESS_TIMEOUT:g} s")
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", errors="replace")
        first = next((ln for ln in err.splitlines() if "error" in ln), err.strip().splitlines()[0] if err.strip()
                     else f"nvcc exit {res.returncode}")
        return Preprocessed(False, dt, _short_error(first, project))
    return Preprocessed(True, dt, "", res.stdout.count(b"\n"))


def _short_error(line: str, project: Path) -> str:
    """An nvcc message without the absolute path (the report groups messages by their text)."""
    return line.replace(str(project) + "/", "").strip()[:300]


def error_class(message: str) -> str:
    """A message reduced to its kind, for the "top reasons" tables (file names and identifiers stripped)."""
    m = message
    if "No such file or directory" in m or "cannot open source file" in m:
        inc = re.search(r'["<]([^">]+)[">]', m) or re.search(r"fatal error: ([^:]+):", m)
        return f"missing header {inc.group(1) if inc else ''}".strip()
    m = re.sub(r"^[^:]*:\d+(:\d+)?:\s*", "", m)
    m = re.sub(r"`[^`]*`", "`…`", m)
    m = re.sub(r'"[^"]*"', '"…"', m)
    m = re.sub(r"\b\d+\b", "N", m)
    return m[:160]


# ----------------------------------------------------------------------------- the IR (pluggable)


@dataclass
class IrResult:
    status: str  # "not available" | "lowered" | "declined" | "error"
    reason: str = ""


def lower_kernel(file: str, text: str, src: SourceText, model: FileModel, kernel: Kernel,
                 spec: KernelSpec | None, include: Iterable[Path]) -> IrResult:
    """The kernel lowered to the IR (``warpforge.policy.ir.lower``) with the funnel's include folders, or why not.

    ``src`` is unused (the IR reads the text); kept so every stage takes the same arguments."""
    from warpforge.policy.ir import Declined, lower

    try:
        got = lower(text, kernel.name, path=file, spec=spec, include_dirs=[str(p) for p in include], model=model)
    except Exception as e:  # an analysis that crashes is recorded, never the end of the run
        return IrResult("error", f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    if isinstance(got, Declined):
        return IrResult("declined", got.reason + (f" (line {got.line})" if got.line else ""))
    return IrResult("lowered")


# ----------------------------------------------------------------------------- spec


def start_in(sp: SpecResult, original: str, start: int) -> int:
    """Where a kernel that starts at byte ``start`` of ``original`` starts in the spec's text: a hand-written
    or guessed block is inserted above it (shifting it by the block's bytes), a host file is appended after it."""
    if sp.text is None or not (sp.source == "hand-written" or sp.source.startswith("guessed")):
        return start
    return start + sp.shift if sp.shift is not None else start + len(sp.text.encode()) - len(original.encode())


@dataclass
class SpecResult:
    spec: KernelSpec | None
    #: "own file" | "host file <path>" | "hand-written" (exact) | "guessed" | "guessed with host file <path>"
    #: (completed by ``spec.guess`` where inference could not pin a value) | ""
    source: str
    error: str = ""
    #: the text the spec was built from, when it is not the kernel's own file (a host file's launch joined)
    text: str | None = None
    #: bytes inserted above the kernel in ``text`` (a guessed block), when ``text`` also has a host file joined
    shift: int | None = None
    #: where the kernel's own file (with a block inserted above the kernel) ends in ``text`` when a host file is
    #: joined after it: the host part is there for its launch only
    own_end: int | None = None

    def build_text(self, original: str) -> str:
        """The text candidates are built in: the kernel's file as the spec read it, without a joined host file.

        A project's host file repeats what the kernel's file has (llm.c's ``lerp``, a ``cublasCheck`` macro with
        another ``common.h`` included after it): in one unit that is a redefinition, so every candidate of nine
        kernels failed on the wide yardstick for text no build of the kernel's file ever sees."""
        if self.text is None:
            return original
        if self.own_end is None:
            return self.text
        return self.text.encode()[: self.own_end].decode("utf-8", "replace")

    @property
    def exact(self) -> bool:
        """A spec with no guessed value: inferred from the project's own launch, or written by hand."""
        return self.spec is not None and not self.spec.guessed


_INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]', re.M)


def infer_spec(project: Path, file: Path, text: str, src: SourceText, model: FileModel, kernel: Kernel,
               hosts: dict[str, list[Path]], hand: Path | None, guess: bool = True) -> SpecResult:
    """The kernel's spec: inferred from its own file's launch; else from a host file of the project that
    launches it (the host file's text after the kernel file's, its include of the kernel file blanked); else
    a hand-written annotation block from ``hand`` (``<wide-specs>/<project>/<kernel>.txt``); else, with
    ``guess``, the block "Add benchmark spec" writes, its guesses marked (``guessed_spec``; ``SpecResult.exact``
    tells the two apart). An exact spec is always tried first: a guess never replaces one."""
    try:
        return SpecResult(build_spec(src, model, kernel, str(file)), "own file")
    except SpecError as e:
        first = f"{e}".splitlines()[0]
    except Exception as e:  # inference must not stop the run; the message is the funnel's record
        first = f"{type(e).__name__}: {e}"
    joined_hosts: list[tuple[str, str]] = []
    for host in hosts.get(kernel.name, []):
        if host == file:
            continue
        try:
            htext = host.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        htext = _INCLUDE_LINE.sub(lambda m: "" if Path(m.group(1)).name == file.name else m.group(0), htext)
        joined = text.rstrip("\n") + "\n" + htext
        try:
            jsrc = SourceText(joined)
            jmodel = parse(jsrc.data)
            jk = next((k for k in jmodel.kernels if k.name == kernel.name and k.span.start == kernel.span.start),
                      None)
            if jk is None:
                continue
            joined_hosts.append((joined, str(host.relative_to(project))))
            spec = build_spec(jsrc, jmodel, jk, str(file))
            return SpecResult(spec, f"host file {host.relative_to(project)}", text=joined,
                              own_end=len(text.rstrip("\n").encode()) + 1)
        except Exception as e:  # one host file of several; its reason is the telling one (no launch in the own)
            first = f"with host file {host.relative_to(project)}: " + (
                f"{e}".splitlines()[0] if isinstance(e, SpecError) else f"{type(e).__name__}: {e}")
    if hand is not None and hand.is_file():
        block = hand.read_text(encoding="utf-8")
        at = src.line_starts[src.line_of(kernel.span.start)]
        joined = (src.data[:at] + block.rstrip("\n").encode() + b"\n" + src.data[at:]).decode("utf-8", "replace")
        try:
            jsrc = SourceText(joined)
            jmodel = parse(jsrc.data)
            jk = jmodel.require(kernel.name, str(file))
            return SpecResult(build_spec(jsrc, jmodel, jk, str(file)), "hand-written", text=joined)
        except Exception as e:
            return SpecResult(None, "", f"hand-written spec {hand}: {type(e).__name__}: {e}")
    if guess:
        for joined, where in [*joined_hosts[:1], (text, "")]:
            got = guessed_spec(file, joined, kernel, where)
            if got is not None and where and got.shift is not None:
                got.own_end = len(text.rstrip("\n").encode()) + 1 + got.shift
            if got is not None:
                got.error = _short_error(first, project)  # why no exact spec: kept beside the guess
                return got
    return SpecResult(None, "", _short_error(first, project))


def guessed_spec(file: Path, text: str, kernel: Kernel, host: str = "") -> SpecResult | None:
    """The spec "Add benchmark spec" writes when inference cannot finish (``spec.resolve.draft_spec``: exact
    values kept, the rest guessed by ``spec.guess``), read back as the user gets it: the block inserted above
    the kernel in ``text`` (the kernel's file, or it joined with a host file) and built again. None when the
    written block does not build (a texture object, a struct passed by value: nothing to guess)."""
    try:
        src = SourceText(text)
        model = parse(src.data)
        k = next((k for k in model.kernels if k.name == kernel.name and k.span.start == kernel.span.start), None)
        if k is None:
            return None
        block = draft_spec(src, model, k, str(file)).annotation()
        at = src.line_starts[src.line_of(k.span.start)]
        joined = (src.data[:at] + block.encode() + src.data[at:]).decode("utf-8", "replace")
        jsrc = SourceText(joined)
        jmodel = parse(jsrc.data)
        shift = len(block.encode())
        jk = next((x for x in jmodel.kernels if x.name == k.name and x.span.start == k.span.start + shift), None)
        if jk is None:
            return None
        spec = build_spec(jsrc, jmodel, jk, str(file))
    except Exception:  # a guess that does not read back is no spec
        return None
    return SpecResult(spec, "guessed" + (f" with host file {host}" if host else ""), text=joined, shift=shift)


# ----------------------------------------------------------------------------- rule proposals and declines


class _Rejections:
    """Messages of the exceptions the rule modules raise to decline (``_Reject("…")``, ``_No``), recorded as
    they are constructed: the last one before a rule answers "no variants" is its reason in its own words.

    The rules catch these internally and return nothing, so the funnel learns the reason without any rule
    changing. Only exception classes defined in ``warpforge.policy.rules.*`` are wrapped.
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self._local = threading.local()
        self._patched = False

    def patch(self) -> None:
        if self._patched:
            return
        load()
        log = self.log
        for name, mod in list(sys.modules.items()):
            if not name.startswith("warpforge.policy.rules") or mod is None:
                continue
            for obj in list(vars(mod).values()):
                if (isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == name
                        and not getattr(obj, "_wide_patched", False)):
                    orig = obj.__init__

                    def init(self: BaseException, *a: object, _orig: Any = orig, **k: object) -> None:
                        _orig(self, *a, **k)
                        log.append(str(a[0]) if a and str(a[0]) else _raise_site(sys._getframe(1)))

                    obj.__init__ = init  # type: ignore[method-assign]
                    obj._wide_patched = True  # type: ignore[attr-defined]
        self._patched = True


REJECTIONS = _Rejections()


def _raise_site(frame: FrameType) -> str:
    """Where a bare ``raise _Reject`` declined: ``module.function:line`` and the check (the ``if`` above the
    raise, or the raise's own line) with its comment; most rules raise without a message."""
    code = frame.f_code
    mod = Path(code.co_filename).stem
    line = frame.f_lineno
    raw = linecache.getline(code.co_filename, line)
    text = raw.strip()
    check = text
    if text.startswith("raise"):
        # the enclosing statement: the nearest line above that is indented less than the raise
        indent = len(raw) - len(raw.lstrip())
        for i in range(line - 1, max(0, line - 40), -1):
            up = linecache.getline(code.co_filename, i)
            if up.strip() and len(up) - len(up.lstrip()) < indent:
                if up.strip().startswith(("if ", "elif ", "else", "for ", "while ", "except", "with ")):
                    check = f"{up.strip()} … {text}"
                break
    return f"in {mod}.{code.co_name} line {line}: {check}"[:240]


def reason_class(message: str) -> str:
    """A decline reason for the "top reasons" table: names in backticks and quotes folded, the site kept."""
    m = re.sub(r"`[^`]*`", "`…`", message)
    return re.sub(r'"[^"]*"', '"…"', m)[:200]


@dataclass
class FamilyOutcome:
    family: str
    proposed: int = 0
    declined: str = ""  # the reason, when nothing was proposed
    #: how far the rule's analysis got before it declined (``rules._why.Stage`` name), and the line of the
    #: kernel text (the form it was asked on) that blocked it
    stage: str = ""
    blocked_line: int = 0
    on_canonical: bool = False  # proposed only on the canonical form (``cuda.normalize``)
    built: str = ""  # the steps of the first child that built
    build_failures: list[str] = field(default_factory=list)


def structural_rules() -> list[Rule]:
    return [r for _, r in sorted(load().items()) if r.structural]


def _decline_reason(rule: Rule, ctx: RuleContext) -> str:
    """Why ``rule`` has no variants in ``ctx``: its own rejection message, else which step came back empty."""
    REJECTIONS.log.clear()
    if isinstance(rule, StructuralRule):
        try:
            got = rule.analyse(ctx)
        except Exception as e:
            return f"analysis raised {type(e).__name__}: {e}"
        if got is not None:
            try:
                launches = rule.launches(ctx, got[0], got[1])
            except Exception as e:
                return f"launch planning raised {type(e).__name__}: {e}"
            return "shape recognized, but no launch fits the spec" if not launches else "no child could be written"
        if REJECTIONS.log:
            return REJECTIONS.log[-1]
        return "shape not recognized"
    try:
        rule.variants(ctx)
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"
    return REJECTIONS.log[-1] if REJECTIONS.log else "shape not recognized"


def _why_not(rule: Rule, ctxs: list[RuleContext]) -> Decline | None:
    """The rule's furthest decline over the forms it is asked on (``policy.whynot.ask``), in its words; where a
    rule gives none yet (it still declines silently), the raise site the old funnel recorded stands in."""
    got: list[Decline] = []
    for c in ctxs:
        if c.cand_kernel is None:
            continue
        d = ask(rule, c)
        if d is None:
            return None
        if d.stage == 0 and not d.line and d.reason.endswith("does not recognize the kernel's shape"):
            d = Decline(d.family, _decline_reason(rule, c), d.stage)
        got.append(d)
    return closest(got[::-1])  # at equal distance the canonical form's words (``whynot.explain`` does the same)


def propose_families(policy: OfflinePolicy, root: Candidate) -> tuple[dict[str, FamilyOutcome], list[Candidate]]:
    """Every structural rule asked for variants of the original (and, when it has none there, of the
    canonical form, as ``OfflinePolicy.propose_sync`` does); declines carry their reason."""
    REJECTIONS.patch()
    ctx = policy.context(root)
    norm = policy.normalized(root)
    canonical = policy.context(norm) if norm is not None else None
    outcomes: dict[str, FamilyOutcome] = {}
    children: list[Candidate] = []
    for rule in structural_rules():
        out = FamilyOutcome(rule.family)
        outcomes[rule.family] = out
        REJECTIONS.log.clear()
        try:
            use, params = policy._rule_context(rule, ctx, canonical)
        except Exception as e:
            out.declined = f"rule error: {type(e).__name__}: {e}"
            continue
        if not params:
            try:
                d = _why_not(rule, [ctx] + ([canonical] if canonical is not None else []))
            except RuleCrashed as e:
                out.declined = f"rule error: {type(e.error).__name__}: {e.error}"
                continue
            if d is None:  # asked again, it answers differently: the raise site is all there is
                where = canonical if canonical is not None and canonical.cand_kernel is not None else ctx
                out.declined = _decline_reason(rule, where)
            else:
                out.declined, out.stage, out.blocked_line = d.reason, d.stage.name.lower(), d.line
            continue
        out.on_canonical = use is not ctx
        for p in params:
            try:
                child = policy.child(rule, p, use, ctx)
            except Exception as e:
                out.build_failures.append(f"{rule.family}:{p}: apply raised {type(e).__name__}: {e}")
                continue
            if child is not None:
                out.proposed += 1
                children.append(child)
        if out.proposed == 0:
            out.declined = "variants offered, but no child could be written"
    return outcomes, children


def build_children(policy: OfflinePolicy, outcomes: dict[str, FamilyOutcome], children: list[Candidate],
                   arch: str = "sm_90", timeout: float = 60.0) -> str:
    """Build proposed children with nvcc through the evaluator's build path, per family until one builds
    (at most ``BUILD_TRIES``). Returns an error when the build path could not even be set up, or when the
    original itself does not build: the evaluator then verifies nothing, and a child's failure would be the
    original's (a template argument the spec guessed that the kernel cannot take, a header the machine lacks),
    not the rule's, so no child is built and each proposing family records ``original: <why>``."""
    try:
        builder = EvaluatorBuild(policy, arch, compile_timeout=timeout)
        first = builder.check(builder.original) if children else None
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        for o in outcomes.values():
            if o.proposed:
                o.build_failures.append(f"build setup: {msg}")
        return msg
    if first is not None and not first.ok:
        msg = f"original: {first.stage}: {first.reason[:300]}"
        for o in outcomes.values():
            if o.proposed:
                o.build_failures.append(msg)
        return msg
    by_family: dict[str, list[Candidate]] = {}
    for c in children:
        by_family.setdefault(c.family, []).append(c)
    for fam, cands in by_family.items():
        out = outcomes[fam]
        for c in cands[:BUILD_TRIES]:
            got = builder.check(c)
            steps = "+".join(c.steps) or c.family
            if got.ok:
                out.built = steps
                break
            out.build_failures.append(f"{steps}: {got.stage}: {got.reason[:300]}")
    return ""


def nvcc_path() -> str:
    """nvcc as the project's toolchain finds it (``WARPFORGE_NVCC`` honoured there), else on PATH."""
    try:
        from warpforge.compiler.toolchain import toolchain

        return str(toolchain().nvcc)
    except Exception:
        return os.environ.get("NVCC", "nvcc")


__all__ = ["REGISTRY", "FamilyOutcome", "IrResult", "Preprocessed", "SpecResult", "build_children",
           "error_class", "include_dirs", "infer_spec", "lower_kernel", "preprocess", "propose_families",
           "structural_rules"]
