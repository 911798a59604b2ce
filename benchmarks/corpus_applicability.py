"""Which structural transformation families still apply to each corpus kernel, checked on CPU with nvcc.

Why: the large speedups come from the structural rules (a warp per row, shared-memory tiles, vector loads,
...), and each recognizes a shape in the kernel body. A change to a matcher, to the canonical form or to a
rule's rewrite can silently stop a family from applying to kernels it used to handle; the GPU suite would
notice only as a smaller speedup, much later. So for every naive corpus case (``benchmarks/corpus/*.cu``)
this builds the offline policy the way ``warpforge optimize`` does, asks it for the children of the original
kernel, and for every structural family checks that at least one proposed child gets through the
evaluator's build path: the static guards, the launch resolved at the spec's and the perturbed size, the
translation unit assembled by ``gpu.surgery`` and nvcc run as ``gpu.pool_build.build_job`` runs it
(``compile_cubin`` with the same defines, flags and arch; an entry function for the kernel required).
"Proposed" alone is not enough: a rewrite that does not compile is no better than none, and is exactly
what a rule change tends to produce.

The result, ``{case: [families]}``, is recorded in ``benchmarks/corpus/applicability.json``;
``tests/test_corpus_applicability.py`` fails when a case loses a family it had. Regenerate the record after
an intended change (or when cases are added)::

    python benchmarks/corpus_applicability.py            # print the table and the difference to the record
    python benchmarks/corpus_applicability.py --write    # ... and rewrite the record

Compiles are cached by ``compiler.build`` (in memory and on disk), so a second run costs the proposals only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "server") not in sys.path:
    sys.path.insert(0, str(ROOT / "server"))

from warpforge.compiler.build import compile_cubin  # noqa: E402
from warpforge.cuda import parse  # noqa: E402
from warpforge.cuda.candidate import Candidate  # noqa: E402
from warpforge.cuda.types import file_aliases  # noqa: E402
from warpforge.gpu import guards, surgery  # noqa: E402
from warpforge.gpu.inputs import Layout  # noqa: E402
from warpforge.policy.offline import OfflinePolicy, offline_policy  # noqa: E402
from warpforge.policy.rules import load  # noqa: E402
from warpforge.search.engine import Budget  # noqa: E402
from warpforge.search.optimize import OptimizeRequest  # noqa: E402

CORPUS = ROOT / "benchmarks" / "corpus"
EXPERT = CORPUS / "expert"
RECORD = CORPUS / "applicability.json"
#: the arch the optimize jobs target by default (``OptimizeRequest.arch``); the record is for this one
ARCH = "sm_90"
#: nvcc's limit per build, as the evaluator's ``EngineSettings.compile_timeout``
COMPILE_TIMEOUT = 60.0


def structural_families() -> frozenset[str]:
    """The families whose rule class declares ``structural = True`` (``policy/rules/base.py``).

    Read from the registry rather than listed here, so a new structural rule is checked from the day it is
    registered; ``test_structural_families_are_flagged`` pins the seven known ones against a dropped flag.
    """
    return frozenset(fam for fam, rule in load().items() if rule.structural)


def corpus_cases(corpus: Path = CORPUS) -> list[Path]:
    """The naive cases: ``*.cu`` directly in the corpus folder (``expert/`` holds their optimized twins)."""
    return sorted(p for p in corpus.glob("*.cu") if p.is_file())


def expert_for(case: Path) -> Path | None:
    """The hand-optimized version of a case, when the corpus has one."""
    p = case.parent / "expert" / case.name
    return p if p.is_file() else None


def case_request(path: Path, *, families: Iterable[str] | None = None, arch: str = ARCH,
                 budget: Budget | None = None, strategy: str = "beam") -> OptimizeRequest:
    """The optimize request of a corpus case: its one kernel, no findings (structural rules do not read
    them; they only order the proposals), restricted to ``families`` when given."""
    text = path.read_text(encoding="utf-8")
    kernels = parse(text).kernels
    if len(kernels) != 1:
        raise ValueError(f"{path.name}: a corpus case holds exactly one __global__ kernel, found {len(kernels)}")
    return OptimizeRequest(str(path), text, kernels[0].name, strategy, budget or Budget(), arch=arch,
                           families=set(families) if families is not None else None)


@dataclass
class BuildCheck:
    """One candidate through the evaluator's build path: did it build, and if not, where it stopped."""

    ok: bool
    stage: str  # "built" | "guard" | "launch" | "assemble" | "compile"
    reason: str = ""
    seconds: float = 0.0


class EvaluatorBuild:
    """The CPU half of ``gpu.evaluator.Evaluator`` for one kernel: what happens to a candidate before any GPU.

    It mirrors ``Evaluator._pipeline`` up to the build (static guards, then ``_build``: launches at every
    verified size, translation unit, the compile of ``build_job``) with the evaluator's default settings, so
    "builds here" means "the evaluator builds it there" (its SASS guard, which needs the cubin, is not run).
    Kept in step with the evaluator by using the same module functions.
    """

    def __init__(self, policy: OfflinePolicy, arch: str = ARCH, *, odd: bool = True,
                 compile_timeout: float = COMPILE_TIMEOUT) -> None:
        self.policy = policy
        self.arch = arch
        self.timeout = compile_timeout
        self.original = policy.root_candidate()
        spec = policy.spec
        self.variants = ["spec"] + (["odd"] if odd and spec.symbolic else [])
        self.layouts = {v: Layout.from_resolved(spec.resolve(perturbed=(v == "odd")), v) for v in self.variants}
        # the file's typedef/using aliases, as the evaluator passes them to the signature guard
        self.aliases = file_aliases(policy.source, policy.model, policy.file)

    def check(self, cand: Candidate) -> BuildCheck:
        t0 = time.perf_counter()
        p = self.policy
        if cand.source != self.original.source:
            found = guards.check_candidate(p.kernel, self.original.source, cand.source, self.aliases)
            if found:
                return BuildCheck(False, "guard", "; ".join(f.text() for f in found), time.perf_counter() - t0)
        try:
            for v in self.variants:
                surgery.launch(p.spec, self.layouts[v], cand, v)
        except surgery.Rejected as e:
            return BuildCheck(False, "launch", e.reason, time.perf_counter() - t0)
        try:
            tu = surgery.translation_unit(p.source, p.model, p.kernel, p.spec, p.file, self.original.source, cand)
        except surgery.Rejected as e:
            return BuildCheck(False, "assemble", e.reason, time.perf_counter() - t0)
        # ``pool_build.build_job``'s compile, with its arguments; not build_job itself, whose SASS guard (an
        # nvdisasm run per candidate, not cached) would triple the check's time for no compile information.
        res = compile_cubin(tu, arch=self.arch, defines=surgery.defines(p.spec, cand), flags=list(cand.flags),
                            filename=p.file, timeout=self.timeout)
        if res.ok and res.resources_for(p.kernel.name) is not None:
            return BuildCheck(True, "built", "", time.perf_counter() - t0)
        if res.timed_out:
            why = f"compilation exceeded {self.timeout:g} s"
        elif res.ok:
            why = f"the cubin has no entry function for kernel `{p.kernel.name}`"
        else:
            errors = [m for m in res.messages if m.severity == "error"]
            why = (f"{errors[0].file}:{errors[0].line}: {errors[0].text}" if errors else
                   res.log.strip().splitlines()[-1] if res.log.strip() else "nvcc failed")
        return BuildCheck(False, "compile", why, time.perf_counter() - t0)


@dataclass
class FamilyResult:
    """One structural family on one case: how many children it proposed and the first that built."""

    family: str
    proposed: int
    tried: int = 0
    built: str | None = None  # the steps of the first child that built
    failures: list[str] = field(default_factory=list)  # "steps: stage: reason" of children that did not


@dataclass
class CaseResult:
    """Everything the check learned about one corpus case (JSON-able, picklable for the process pool)."""

    case: str
    kernel: str = ""
    error: str = ""  # the case could not be checked at all (no spec, not one kernel, ...)
    original: BuildCheck | None = None
    has_expert: bool = False
    families: dict[str, FamilyResult] = field(default_factory=dict)
    policy_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def applicable(self) -> list[str]:
        """Structural families with at least one child that builds, sorted."""
        return sorted(f for f, r in self.families.items() if r.built is not None)

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["applicable"] = self.applicable
        return d


def check_case(path: Path | str, *, families: Iterable[str] | None = None, arch: str = ARCH,
               all_candidates: bool = False) -> CaseResult:
    """Propose from the original kernel of ``path`` and build children per structural family.

    Per family the children are tried in the policy's order until one builds (``all_candidates``: every
    child is built, to list every failure). The original is built too: when it does not build, the
    evaluator verifies nothing for the case, whatever the rules propose.
    """
    t0 = time.perf_counter()
    path = Path(path)
    res = CaseResult(path.stem, has_expert=expert_for(path) is not None)
    fams = frozenset(families) if families is not None else structural_families()
    try:
        req = case_request(path, families=fams, arch=arch)
        policy = offline_policy(req)
        builder = EvaluatorBuild(policy, arch)
    except Exception as e:  # a broken case is reported, not raised: the other cases still get checked
        res.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        res.seconds = time.perf_counter() - t0
        return res
    res.kernel = policy.kernel.name
    res.original = builder.check(builder.original)
    children = policy.propose_sync(policy.root_candidate())
    res.policy_errors = list(policy.errors)
    res.families = family_builds(builder, children, fams, all_candidates=all_candidates)
    res.seconds = time.perf_counter() - t0
    return res


def family_builds(builder: EvaluatorBuild, children: Iterable[Candidate], families: Iterable[str], *,
                  all_candidates: bool = False) -> dict[str, FamilyResult]:
    """Per family of ``families`` among ``children``: the children built in proposal order until one builds
    (``all_candidates``: all of them). Families with no child are absent from the result."""
    fams = frozenset(families)
    by_family: dict[str, list[Candidate]] = {}
    for c in children:
        if c.family in fams:
            by_family.setdefault(c.family, []).append(c)
    out: dict[str, FamilyResult] = {}
    for fam in sorted(by_family):
        cands = by_family[fam]
        fr = FamilyResult(fam, len(cands))
        for c in cands:
            fr.tried += 1
            got = builder.check(c)
            steps = "+".join(c.steps) or c.family
            if got.ok:
                fr.built = fr.built or steps
                if not all_candidates:
                    break
            else:
                fr.failures.append(f"{steps}: {got.stage}: {got.reason}")
        out[fam] = fr
    return out


def _check_one(args: tuple[str, tuple[str, ...] | None, str, bool]) -> CaseResult:
    path, fams, arch, every = args
    return check_case(path, families=fams, arch=arch, all_candidates=every)


def check_corpus(paths: Sequence[Path], *, workers: int = 2, families: Iterable[str] | None = None,
                 arch: str = ARCH, all_candidates: bool = False) -> list[CaseResult]:
    """``check_case`` over many cases, ``workers`` processes at a time (proposing is Python, so threads would
    serialize it; nvcc runs in a child process either way). Results come back in ``paths`` order."""
    fams = tuple(sorted(families)) if families is not None else None
    jobs = [(str(p), fams, arch, all_candidates) for p in paths]
    if workers <= 1 or len(jobs) <= 1:
        return [_check_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as ex:
        return list(ex.map(_check_one, jobs))


def applicability(results: Iterable[CaseResult]) -> dict[str, list[str]]:
    """``{case: sorted structural families with a child that builds}``: what the record holds."""
    return {r.case: r.applicable for r in sorted(results, key=lambda r: r.case)}


def load_record(path: Path = RECORD) -> dict[str, list[str]]:
    """The recorded applicability (empty when there is no record yet)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): sorted(str(f) for f in v) for k, v in data.items()}


def write_record(table: dict[str, list[str]], path: Path = RECORD) -> None:
    path.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n", encoding="utf-8")


@dataclass
class Diff:
    """Fresh applicability against the record: lost families fail the test, the rest is news."""

    regressions: list[tuple[str, str]]  # (case, family) the record has and the fresh result lacks
    gains: list[tuple[str, str]]  # (case, family) new since the record
    missing_cases: list[str]  # recorded cases no longer in the corpus (removed or renamed)
    new_cases: list[str]  # cases the record does not know yet

    def text(self) -> str:
        lines = [f"REGRESSION {c}: {f} no longer has a child that builds" for c, f in self.regressions]
        lines += [f"gain {c}: {f} now has a child that builds" for c, f in self.gains]
        lines += [f"case {c} is recorded but no longer in the corpus" for c in self.missing_cases]
        lines += [f"case {c} is not recorded yet" for c in self.new_cases]
        return "\n".join(lines)


def compare(old: dict[str, list[str]], new: dict[str, list[str]]) -> Diff:
    """Families lost per case (regressions) and gained; a case missing from ``new`` is not a regression
    here (it may have been renamed on purpose); callers that check a subset pass only that subset."""
    regressions = [(c, f) for c in sorted(old) if c in new for f in old[c] if f not in new[c]]
    gains = [(c, f) for c in sorted(new) for f in new[c] if f not in old.get(c, [])]
    return Diff(regressions, gains, sorted(set(old) - set(new)), sorted(set(new) - set(old)))


def table(results: Sequence[CaseResult], families: Sequence[str] | None = None) -> str:
    """One row per case, one column per structural family: ``Y`` built, ``p`` proposed but nothing built,
    ``.`` not proposed; plus the original's build and the seconds the case took."""
    fams = list(families) if families is not None else sorted(structural_families())
    short = {f: f.replace("atomics_", "at_").replace("reduce_", "red_").replace("smem_", "sm_") for f in fams}
    width = max([len(r.case) for r in results] + [4])
    head = f"{'case':<{width}}  " + " ".join(f"{short[f]:>{max(len(short[f]), 3)}}" for f in fams)
    lines = [head + "  orig  expert     s"]
    for r in results:
        cells = []
        for f in fams:
            fr = r.families.get(f)
            mark = "." if fr is None else ("Y" if fr.built is not None else "p")
            cells.append(f"{mark:>{max(len(short[f]), 3)}}")
        orig = "ERR" if r.error else ("ok" if r.original is not None and r.original.ok else "FAIL")
        lines.append(f"{r.case:<{width}}  " + " ".join(cells) +
                     f"  {orig:>4}  {'yes' if r.has_expert else '-':>6} {r.seconds:5.1f}")
    n = len(results)
    got = sum(1 for r in results if r.applicable)
    lines.append(f"{got}/{n} cases with at least one structural family that builds")
    return "\n".join(lines)


def problems(results: Sequence[CaseResult]) -> list[str]:
    """Cases that cannot be checked or whose original does not build, and rule exceptions: corpus or rule
    bugs that make every other number about the case meaningless."""
    out = []
    for r in results:
        if r.error:
            out.append(f"{r.case}: {r.error}")
        elif r.original is not None and not r.original.ok:
            out.append(f"{r.case}: the original kernel does not build ({r.original.stage}: {r.original.reason})")
        out.extend(f"{r.case}: rule error: {e}" for e in r.policy_errors)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--write", action="store_true", help=f"rewrite the record ({RECORD.relative_to(ROOT)})")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="folder of naive cases (default: %(default)s)")
    ap.add_argument("--cases", nargs="*", default=None, help="only these cases (file stems)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--arch", default=ARCH)
    ap.add_argument("--all", action="store_true", help="build every proposed child, not the first that builds")
    ap.add_argument("--verbose", "-v", action="store_true", help="list children that did not build")
    ap.add_argument("--json", type=Path, default=None, help="also write the full per-case results here")
    args = ap.parse_args(argv)
    paths = corpus_cases(args.corpus)
    if args.cases:
        paths = [p for p in paths if p.stem in set(args.cases)]
    t0 = time.perf_counter()
    results = check_corpus(paths, workers=args.workers, arch=args.arch, all_candidates=args.all)
    wall = time.perf_counter() - t0
    print(table(results))
    for line in problems(results):
        print("PROBLEM", line)
    if args.verbose:
        for r in results:
            for fr in r.families.values():
                for f in fr.failures:
                    print(f"  {r.case}: {f}")
    fresh = applicability(results)
    record_path = args.corpus / "applicability.json"
    old = load_record(record_path)
    if args.cases:
        old = {c: v for c, v in old.items() if c in fresh}
    diff = compare(old, fresh)
    if diff.text():
        print(diff.text())
    print(f"{len(results)} cases in {wall:.1f} s with {args.workers} workers")
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
    if args.write:
        merged = {**load_record(record_path), **fresh} if args.cases else fresh
        write_record(merged, record_path)
        print(f"wrote {record_path}")
        return 0
    return 1 if diff.regressions else 0


if __name__ == "__main__":
    sys.exit(main())
