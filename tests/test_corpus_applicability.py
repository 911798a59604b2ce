"""The structural families that apply to each corpus kernel do not silently go away.

``benchmarks/corpus_applicability.py`` proposes children of every naive corpus case with the offline
policy and builds, per structural family, children through the evaluator's build path until one builds.
The families that do are recorded in ``benchmarks/corpus/applicability.json``. A case losing a recorded
family is a regression of a rule (or of the canonical form, or of the build) and fails here, naming both;
a gain is printed and passes, to be recorded with ``python benchmarks/corpus_applicability.py --write``.
"""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, needs_nvcc

sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus_applicability as ca

#: the structural families there were when the check was written; each must keep its ``structural`` flag
KNOWN_STRUCTURAL = frozenset({"warp_per_row", "warp_reduce", "reduce_coarsen", "smem_tiling", "smem_transpose",
                              "atomics_privatize", "vectorize", "coarsen_y", "smem_halo", "single_pass"})
#: the corpus the GPU suite and this check are meant to run on has at least this many naive cases
MIN_CASES = 40
REGENERATE = "python benchmarks/corpus_applicability.py --write"


@pytest.fixture(scope="module")
def fresh() -> list[ca.CaseResult]:
    """Every corpus case checked once for the module (two processes: CI machines have two cores)."""
    return ca.check_corpus(ca.corpus_cases(), workers=2)


def test_structural_families_are_flagged() -> None:
    got = ca.structural_families()
    assert got >= KNOWN_STRUCTURAL, f"lost the structural flag: {sorted(KNOWN_STRUCTURAL - got)}"
    assert "grid_stride" not in got  # a launch shape, not a new algorithm


def test_corpus_has_enough_cases() -> None:
    cases = ca.corpus_cases()
    assert len(cases) >= MIN_CASES, f"the corpus has {len(cases)} naive cases in {ca.CORPUS}, want >= {MIN_CASES}"


def test_record_names_known_families() -> None:
    known = ca.structural_families()
    bad = {c: f for c, fams in ca.load_record().items() for f in fams if f not in known}
    assert not bad, f"the record names families that are not structural rules: {bad}"


@needs_nvcc
def test_every_case_is_checkable(fresh: list[ca.CaseResult]) -> None:
    """A case without a spec, or whose original does not build, or that makes a rule raise, measures nothing."""
    assert not ca.problems(fresh), "\n".join(ca.problems(fresh))


@needs_nvcc
def test_no_structural_family_is_lost(fresh: list[ca.CaseResult]) -> None:
    record = ca.load_record()
    now = ca.applicability(fresh)
    diff = ca.compare(record, now)
    print("\n" + ca.table(fresh))
    for case, family in diff.gains:
        print(f"gain: {case} now gets {family} (record it: {REGENERATE})")
    for case in diff.new_cases:
        print(f"new case {case} is not in the record yet ({REGENERATE})")
    lost = [f"{case}: {family} no longer has a child that builds" for case, family in diff.regressions]
    lost += [f"{case}: recorded with {', '.join(record[case])} but no longer in the corpus (removed on purpose? "
             f"{REGENERATE})" for case in diff.missing_cases if record[case]]
    if lost:
        why = {r.case: r for r in fresh}
        detail = []
        for case, family in diff.regressions:
            fr = why[case].families.get(family)
            detail.append(f"  {case}/{family}: " + ("not proposed any more" if fr is None else
                                                    "; ".join(fr.failures[:3]) or "proposed, none built"))
        pytest.fail("structural families lost:\n" + "\n".join(lost + detail))
