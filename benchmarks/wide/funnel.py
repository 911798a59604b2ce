"""The wide yardstick's CPU funnel: every ``__global__`` kernel of the projects in an outside folder, per stage.

Why (issue 27): the rules fire on 41 of 42 kernels of the self-written corpus and on 8 of 48 written by
others. Only a large body of code nobody here wrote says whether a change generalizes. For each kernel:

  parsed        the project's parser (``warpforge.cuda.parse``) found the definition (not only by recovery)
  preprocessed  ``nvcc -E`` of its file with the file's folder and the project's include folders
  lowered       ``warpforge.policy.ir.lower`` (pluggable: "not available" until that package exists)
  spec          ``warpforge.spec.build_spec`` on its file, else joined with a host file of the project that
                launches it, else a hand-written annotation block (``--specs``/<project>/<kernel>.txt):
                an exact spec; else the block "Add benchmark spec" writes, its values guessed where
                inference could not pin them (``spec.guess``; ``--no-guess`` leaves these out)
  families      every structural rule of the offline policy asked for variants (the canonical form too, as
                the policy does): proposed, or declined with the rule's own reason
  built         proposed children through the evaluator's build path (guards, launch, unit, nvcc -cubin)

and whether it has "a serial loop over global memory or a reduction" (``classify``), the denominator the
issue's target is stated over. Results: ``kernels.jsonl`` (one record per kernel) and ``summary.md``
(the funnel, per-family counts, top decline reasons, per-project name, commit and counts)::

    PYTHONPATH=server python -m benchmarks.wide.funnel /work/outside/wide --out /work/outside/wide-out

Projects are the sub-folders ``owner+name`` (``benchmarks.wide.unpack`` writes them, with ``.wide_commit``).
Kernels with the same text in one project are measured once (the duplicates are counted).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from warpforge.cuda import parse
from warpforge.cuda.normalize import file_facts, normalize_definition
from warpforge.cuda.text import SourceText
from warpforge.policy.offline import OfflinePolicy
from warpforge.policy.rules._why import Stage
from warpforge.policy.whynot import Decline, closest

from .classify import classify
from .stages import (
    build_children,
    error_class,
    include_dirs,
    infer_spec,
    lower_kernel,
    nvcc_path,
    preprocess,
    propose_families,
    reason_class,
    start_in,
    structural_rules,
)

SOURCE_EXT = frozenset({".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".inl", ".cxx", ".hxx", ".inc"})
_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*<<<")
_LAUNCH_API = re.compile(r"cudaLaunch\w*\s*\([^;]*?\b([A-Za-z_]\w*)\b")


@dataclass
class KernelRecord:
    """One kernel through the funnel (JSON-able; one line of ``kernels.jsonl``)."""

    project: str
    file: str  # relative to the project
    kernel: str
    line: int
    parsed: bool = True
    parse_note: str = ""
    duplicates: int = 0  # other definitions with the same text in the project
    preprocessed: bool = False
    preprocess_error: str = ""
    ir: str = "not available"
    ir_reason: str = ""
    spec: bool = False
    spec_source: str = ""
    spec_error: str = ""
    #: the spec's guessed lines (``size N``, ``launch``, ...); empty for an exact spec (own, host file, hand)
    spec_guessed: list[str] = field(default_factory=list)
    serial_or_reduction: bool = False
    serial_loop: bool = False
    reduction: bool = False
    grid_stride: bool = False
    loop_why: str = ""
    families: dict[str, dict[str, Any]] = field(default_factory=dict)
    proposed: list[str] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    #: why no proposed child was built: the original itself does not build (``original: ...``; the evaluator would
    #: verify nothing) or the build path could not be set up; "" when children were built
    build_error: str = ""
    #: where no family proposes: the family whose analysis got furthest, its words and stage (``policy.whynot``)
    closest: dict[str, Any] = field(default_factory=dict)
    policy_errors: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


@dataclass
class Project:
    name: str  # owner+name
    root: Path
    commit: str
    origin: str


def projects(root: Path, only: Sequence[str] = ()) -> list[Project]:
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if only and d.name not in only:
            continue
        commit = (d / ".wide_commit").read_text().strip() if (d / ".wide_commit").is_file() else "unknown"
        origin = (d / ".wide_origin").read_text().strip() if (d / ".wide_origin").is_file() else \
            d.name.replace("+", "/", 1)
        out.append(Project(d.name, d, commit, origin))
    return out


def source_files(project: Path) -> Iterator[Path]:
    """Files that may define a kernel: sources and headers whose text mentions ``__global__``."""
    for p in sorted(project.rglob("*")):
        if p.suffix in SOURCE_EXT and p.is_file():
            try:
                if b"__global__" in p.read_bytes():
                    yield p
            except OSError:
                continue


def host_index(project: Path) -> dict[str, list[Path]]:
    """kernel name -> files of the project that launch it (``k<<<``, ``cudaLaunchKernel(k, …)``)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(project.rglob("*")):
        if p.suffix not in SOURCE_EXT or not p.is_file():
            continue
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "<<<" not in text and "cudaLaunch" not in text:
            continue
        names = {m.group(1) for m in _LAUNCH.finditer(text)} | {m.group(1) for m in _LAUNCH_API.finditer(text)}
        for n in names:
            out.setdefault(n, []).append(p)
    return out


def hand_spec(specs: Path, project: str, rel_file: str, kernel: str) -> Path | None:
    """A hand-written annotation block for a kernel: ``SPECS/<project>/<file as in the project>/<kernel>.txt``
    (kernel names repeat across files), else ``SPECS/<project>/<kernel>.txt``."""
    for p in (specs / project / rel_file / f"{kernel}.txt", specs / project / f"{kernel}.txt"):
        if p.is_file():
            return p
    return None


@dataclass
class FileJob:
    project: str
    root: str
    file: str
    build: bool
    specs: str | None
    hosts: dict[str, list[str]]
    skip: list[str]  # kernel-text hashes already measured in this project (duplicates)
    guess: bool = True  # complete a spec inference cannot finish with guesses (``spec.guess``)


def _hash(text: str) -> str:
    return hashlib.sha1(re.sub(r"\s+", " ", text).encode()).hexdigest()[:16]


def run_file(job: FileJob) -> list[KernelRecord]:
    """Every kernel of one file through the funnel (the file is preprocessed once)."""
    root, file = Path(job.root), Path(job.file)
    rel = str(file.relative_to(root))
    text = file.read_text(encoding="utf-8", errors="replace")
    src = SourceText(text)
    try:
        model = parse(src.data)
    except Exception as e:
        return [KernelRecord(job.project, rel, "?", 0, parsed=False, parse_note=f"{type(e).__name__}: {e}")]
    if not model.kernels:
        return []
    pre = preprocess(root, file, nvcc_path())
    incs = include_dirs(root, file)
    hosts = {k: [Path(p) for p in v] for k, v in job.hosts.items()}
    facts = None
    out: list[KernelRecord] = []
    for kernel in model.kernels:
        t0 = time.perf_counter()
        ktext = src.slice(kernel.span)
        rec = KernelRecord(job.project, rel, kernel.name, kernel.start_line + 1)
        if _hash(ktext) in job.skip:
            continue
        inside = [p for p in model.problems if kernel.span.start <= p.span.start < kernel.span.end]
        if kernel.recovered or inside:
            rec.parsed = False
            rec.parse_note = ("recovered after a syntax error outside it" if kernel.recovered else
                              f"syntax problem at line {inside[0].line + 1}: {inside[0].message}")
        rec.preprocessed, rec.preprocess_error = pre.ok, pre.error
        try:
            facts = facts or file_facts(text)
            canonical = normalize_definition(ktext, kernel.name, facts)
        except Exception:
            canonical = ktext
        lc = classify(canonical)
        if not lc.counts and canonical != ktext:
            lc = classify(ktext) if classify(ktext).counts else lc
        rec.serial_or_reduction, rec.serial_loop, rec.reduction = lc.counts, lc.serial_loop, lc.reduction
        rec.grid_stride, rec.loop_why = lc.grid_stride, lc.why
        hand = hand_spec(Path(job.specs), job.project, rel, kernel.name) if job.specs else None
        # every stage that runs the project's analyses is under the limit: spec inference follows callers too
        stage = "spec inference"
        try:
            with _time_limit(KERNEL_LIMIT):
                sp = infer_spec(root, file, text, src, model, kernel, hosts, hand, job.guess)
                rec.spec, rec.spec_source, rec.spec_error = sp.spec is not None, sp.source, sp.error
                rec.spec_guessed = list(sp.spec.guessed) if sp.spec is not None else []
                stage = "lowering"
                ir = lower_kernel(str(file), text, src, model, kernel, sp.spec, incs)
                rec.ir, rec.ir_reason = ir.status, ir.reason
                if sp.spec is not None:
                    stage = "proposals and builds"
                    _families(rec, root, file, sp.build_text(text), kernel.name,
                              start_in(sp, text, kernel.span.start), sp.spec, job.build)
        except (Exception, KernelTimeout) as e:  # one kernel's failure is its record, not the run's end
            rec.error = f"{stage}: {type(e).__name__}: {e}"
        rec.seconds = round(time.perf_counter() - t0, 2)
        out.append(rec)
    return out


#: seconds one kernel's proposals and builds may take (a rule's analysis that runs away is a finding, not a hang)
KERNEL_LIMIT = 240


class KernelTimeout(BaseException):
    """A BaseException: the project's analyses catch ``Exception`` broadly, and must not swallow the limit."""


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """Raise ``KernelTimeout`` in this (main) thread after ``seconds``; a no-op where SIGALRM is unavailable."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(_sig: int, _frame: object) -> None:
        raise KernelTimeout(f"exceeded {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _families(rec: KernelRecord, root: Path, file: Path, text: str, name: str, start: int, spec: Any,
              build: bool) -> None:
    src = SourceText(text)
    model = parse(src.data)
    kernel = next((k for k in model.kernels if k.name == name and k.span.start == start), None) or \
        model.require(name, str(file))
    policy = OfflinePolicy(str(file), src, model, kernel, spec,
                           families={r.family for r in structural_rules()})
    # the build finds the project's headers as nvcc -E did: its include folders on CPATH (with the vendor ones)
    base = os.environ.get("WIDE_CPATH_BASE", os.environ.get("CPATH", ""))
    os.environ["WIDE_CPATH_BASE"] = base
    os.environ["CPATH"] = os.pathsep.join([str(d) for d in include_dirs(root, file)] + ([base] if base else []))
    outcomes, children = propose_families(policy, policy.root_candidate())
    if build and children:
        rec.build_error = build_children(policy, outcomes, children)
    rec.policy_errors = list(policy.errors)
    rec.families = {f: {k: v for k, v in asdict(o).items() if k != "family"} for f, o in outcomes.items()}
    rec.proposed = sorted(f for f, o in outcomes.items() if o.proposed)
    if not rec.proposed:
        best = closest([Decline(f, o.declined, Stage[o.stage.upper()], o.blocked_line)
                        for f, o in outcomes.items() if o.declined and o.stage])
        if best is not None:
            rec.closest = {"family": best.family, "reason": best.reason, "stage": best.stage.name.lower(),
                           "line": best.line}
    rec.built = sorted(f for f, o in outcomes.items() if o.built)


def plan(root: Path, *, only: Sequence[str] = (), build: bool = True, specs: Path | None = None,
         limit: int | None = None, guess: bool = True) -> tuple[list[Project], list[FileJob], dict[str, int]]:
    """The projects, one job per file with a kernel, and per project the number of duplicate kernels skipped."""
    projs = projects(root, only)
    jobs: list[FileJob] = []
    dups: dict[str, int] = {}
    for pr in projs:
        hosts = {k: [str(p) for p in v] for k, v in host_index(pr.root).items()}
        seen: set[str] = set()
        skip_total = 0
        files = list(source_files(pr.root))
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            model = parse(text)
            skip: list[str] = []
            for k in model.kernels:
                h = _hash(SourceText(text).slice(k.span))
                if h in seen:
                    skip.append(h)
                    skip_total += 1
                seen.add(h)
            if len(skip) == len(model.kernels):
                continue
            jobs.append(FileJob(pr.name, str(pr.root), str(f), build, str(specs) if specs else None,
                                {k: v for k, v in hosts.items() if k in {kk.name for kk in model.kernels}}, skip,
                                guess))
        dups[pr.name] = skip_total
    if limit is not None:
        jobs = jobs[:limit]
    return projs, jobs, dups


#: host-side vendor library headers the CUDA toolkit here lacks (cuBLAS, cuDNN, ... are separate packages). Their
#: real headers go on CPATH with ``--vendor-include`` (the headers of the ``nvidia-*`` wheels); a name found in
#: none of those gets an empty stand-in, so a file including it for host code still preprocesses (a kernel that
#: really uses the library then fails to build, as it should)
VENDOR_HEADERS = ("cublas.h", "cublas_v2.h", "cublasLt.h", "cublas_api.h", "cudnn.h", "cufft.h", "cusparse.h",
                  "cusolverDn.h", "curand.h", "nccl.h", "nvToolsExt.h", "mpi.h")


def vendor_includes(out: Path, dirs: Sequence[Path] = ()) -> list[Path]:
    """Put ``dirs`` and a folder of empty stand-ins (``out/stubs``, for the rest) on CPATH; returns them."""
    d = out / "stubs"
    for name in VENDOR_HEADERS:
        if any((v / name).is_file() for v in dirs):
            continue
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(f"/* empty stand-in for {name} (not installed here): benchmarks/wide/funnel.py */\n")
    paths = [*dirs, d]
    os.environ["CPATH"] = os.pathsep.join([str(p) for p in paths] + [x for x in [os.environ.get("CPATH", "")] if x])
    return paths


def run(root: Path, out: Path, *, workers: int = 2, only: Sequence[str] = (), build: bool = True,
        specs: Path | None = None, limit: int | None = None, vendor: Sequence[Path] = (),
        guess: bool = True) -> list[KernelRecord]:
    """The funnel over every project under ``root``; writes ``out/kernels.jsonl``, ``meta.json``, ``summary.md``."""
    out.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("CPATH", "WARPFORGE_CACHE", "WIDE_CPATH_BASE")}
    try:
        vendor_includes(out, vendor)
        # the build cache is keyed by source, not by CPATH: a cache of its own keeps other header sets' results out
        os.environ["WARPFORGE_CACHE"] = str(out / "cache")
        return _run(root, out, workers=workers, only=only, build=build, specs=specs, limit=limit, vendor=vendor,
                    guess=guess)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(root: Path, out: Path, *, workers: int, only: Sequence[str], build: bool, specs: Path | None,
         limit: int | None, vendor: Sequence[Path], guess: bool = True) -> list[KernelRecord]:
    projs, jobs, dups = plan(root, only=only, build=build, specs=specs, limit=limit, guess=guess)
    records: list[KernelRecord] = []
    t0 = time.perf_counter()
    with (out / "kernels.jsonl").open("w", encoding="utf-8") as fh:
        def take(recs: list[KernelRecord]) -> None:
            for r in recs:
                records.append(r)
                fh.write(json.dumps(asdict(r)) + "\n")
            fh.flush()
            print(f"  {len(records)} kernels, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

        if workers <= 1:
            for j in jobs:
                take(run_file(j))
        else:
            with ProcessPoolExecutor(max_workers=workers) as ex:
                for fut in as_completed([ex.submit(run_file, j) for j in jobs]):
                    take(fut.result())
    meta = {"projects": [{"name": p.name, "origin": p.origin, "commit": p.commit, "duplicates": dups.get(p.name, 0)}
                         for p in projs], "seconds": round(time.perf_counter() - t0, 1), "build": build,
            "vendor_include": [str(v) for v in vendor]}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "summary.md").write_text(summary(records, meta))
    return records


def load(out: Path) -> tuple[list[KernelRecord], dict[str, Any]]:
    recs = [KernelRecord(**json.loads(line)) for line in (out / "kernels.jsonl").read_text().splitlines() if line]
    meta = json.loads((out / "meta.json").read_text()) if (out / "meta.json").is_file() else {"projects": []}
    return recs, meta


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else f"{a}/0"


def summary(records: Sequence[KernelRecord], meta: dict[str, Any]) -> str:
    """The aggregate markdown: funnel, rates over the denominator, per family, top declines, per project."""
    n = len(records)
    fams = [r.family for r in structural_rules()]
    parsed = [r for r in records if r.parsed]
    lines = ["# Wide yardstick: CPU funnel", ""]
    den = [r for r in records if r.serial_or_reduction]
    with_spec = [r for r in records if r.spec]
    exact = [r for r in with_spec if not r.spec_guessed]
    prop = [r for r in records if r.proposed]
    built = [r for r in records if r.built]
    irs = Counter(r.ir for r in records)
    lines += ["| stage | kernels |", "|---|---|",
              f"| kernels (distinct per project) | {n} |",
              f"| parsed cleanly | {_pct(len(parsed), n)} |",
              f"| preprocessed (nvcc -E) | {_pct(sum(r.preprocessed for r in records), n)} |",
              f"| lowered to the IR | {_pct(irs.get('lowered', 0), n)} "
              f"({', '.join(f'{k}: {v}' for k, v in sorted(irs.items()))}) |",
              f"| spec available | {_pct(len(with_spec), n)}: exact {len(exact)}, guessed "
              f"{len(with_spec) - len(exact)} |",
              f"| a structural family proposed | {_pct(len(prop), n)} |",
              f"| a proposed candidate builds (nvcc -cubin sm_90) | {_pct(len(built), n)} |",
              f"| proposed, but the original itself does not build (no child built) | "
              f"{sum(1 for r in prop if r.build_error.startswith('original'))} |", ""]
    den_spec = [r for r in den if r.spec]
    den_exact = [r for r in den_spec if not r.spec_guessed]
    lines += ["Rates (\"structural candidate that builds\"):", "",
              f"- over the kernels with a serial loop over global memory or a reduction: "
              f"{_pct(sum(1 for r in den if r.built), len(den))}; of those with a spec: "
              f"{_pct(sum(1 for r in den_spec if r.built), len(den_spec))}",
              f"- the same counting only exact specs (guessed ones as no spec): "
              f"{_pct(sum(1 for r in den_exact if r.built), len(den))}; of those with an exact spec: "
              f"{_pct(sum(1 for r in den_exact if r.built), len(den_exact))}",
              f"- loop/reduction kernels with a spec: exact {len(den_exact)}, guessed "
              f"{len(den_spec) - len(den_exact)} of {len(den)}; proposed: exact "
              f"{sum(1 for r in den_exact if r.proposed)}, guessed "
              f"{sum(1 for r in den_spec if r.proposed and r.spec_guessed)}; builds: exact "
              f"{sum(1 for r in den_exact if r.built)}, guessed "
              f"{sum(1 for r in den_spec if r.built and r.spec_guessed)}",
              f"- over the whole corpus: {_pct(len(built), n)}; of those with a spec: "
              f"{_pct(len(built), len(with_spec))}", ""]
    spec_src = Counter("guessed" if r.spec_guessed else r.spec_source.split(" ")[0]
                       + (" file" if r.spec_source.startswith("host") else "") for r in with_spec)
    lines += [f"Spec sources: {', '.join(f'{k}: {v}' for k, v in spec_src.most_common())}", ""]
    lines += ["| family | proposed | builds | declined (with a spec) |", "|---|---|---|---|"]
    for f in fams:
        p = sum(1 for r in records if f in r.proposed)
        b = sum(1 for r in records if f in r.built)
        d = sum(1 for r in with_spec if f not in r.proposed and f in r.families)
        lines.append(f"| {f} | {p} | {b} | {d} |")
    lines.append("")
    blocked = [r for r in den_spec if not r.proposed and r.closest]
    for title, counter in (
        ("Top blocking reasons where nothing structural is proposed (the closest family and its words; kernels "
         "with a serial loop or reduction and a spec)", Counter(
            f"{r.closest['family']}: {reason_class(r.closest['reason'])}" for r in blocked)),
        ("Closest family where nothing structural is proposed", Counter(
            f"{r.closest['family']} (got to {r.closest['stage']})" for r in blocked)),
        ("Top decline reasons (family: reason, kernels with a spec)", Counter(
            f"{f}: {reason_class(o.get('declined') or '')}" for r in with_spec for f, o in r.families.items()
            if o.get("declined"))),
        ("Top build failures of proposed candidates", Counter(
            f"{f}: {error_class(o['build_failures'][0].split(': ', 1)[-1])}" for r in records
            for f, o in r.families.items() if o.get("proposed") and not o.get("built") and o.get("build_failures"))),
        ("Top spec failures", Counter(error_class(r.spec_error) for r in records if not r.spec)),
        ("Guessed lines of guessed specs (what inference could not pin)", Counter(
            g.split(" ")[0] for r in records for g in r.spec_guessed)),
        ("Top preprocess failures", Counter(error_class(r.preprocess_error) for r in records if not r.preprocessed)),
        ("IR declines", Counter(error_class(r.ir_reason) for r in records if r.ir == "declined")),
    ):
        if not counter:
            continue
        lines += [f"{title}:", "", "| kernels | reason |", "|---|---|"]
        lines += [f"| {c} | {reason.replace('|', '/')} |" for reason, c in counter.most_common(15)]
        lines.append("")
    lines += ["| project | commit | kernels | dup. skipped | parsed | preproc. | spec | loop/red. | proposed "
              "| builds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    by: dict[str, list[KernelRecord]] = {}
    for r in records:
        by.setdefault(r.project, []).append(r)
    for p in meta.get("projects", []):
        rs = by.get(p["name"], [])
        lines.append(f"| {p['origin']} | {p['commit'][:12]} | {len(rs)} | {p.get('duplicates', 0)} | "
                     f"{sum(r.parsed for r in rs)} | {sum(r.preprocessed for r in rs)} | {sum(r.spec for r in rs)} | "
                     f"{sum(r.serial_or_reduction for r in rs)} | {sum(bool(r.proposed) for r in rs)} | "
                     f"{sum(bool(r.built) for r in rs)} |")
    lines += ["", f"{len(meta.get('projects', []))} projects; run took {meta.get('seconds', '?')} s"
              + ("" if meta.get("build", True) else " (builds skipped)"), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the outside folder of projects (owner+name sub-folders)")
    ap.add_argument("--out", type=Path, required=True, help="where kernels.jsonl, meta.json and summary.md go")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2: the machine's cores are shared)")
    ap.add_argument("--projects", nargs="*", default=(), help="only these project folders")
    ap.add_argument("--no-build", action="store_true", help="skip the nvcc builds of proposed candidates")
    ap.add_argument("--specs", type=Path, default=None,
                    help="hand-written annotation blocks: SPECS/<project>/<kernel>.txt (default: none)")
    ap.add_argument("--vendor-include", type=Path, action="append", default=[],
                    help="a folder of vendor library headers (cuBLAS, cuRAND, cuDNN) for nvcc, via CPATH; repeatable")
    ap.add_argument("--no-guess", action="store_true",
                    help="exact specs only: do not complete a spec inference cannot finish with guesses")
    ap.add_argument("--limit", type=int, default=None, help="only the first N files (a quick look)")
    ap.add_argument("--summary", action="store_true", help="only rewrite summary.md from OUT's records")
    args = ap.parse_args(argv)
    if args.summary:
        recs, meta = load(args.out)
        if not meta.get("projects"):  # a run stopped before its end: the projects from ROOT
            meta["projects"] = [{"name": p.name, "origin": p.origin, "commit": p.commit, "duplicates": "?"}
                                for p in projects(args.root)]
        (args.out / "summary.md").write_text(summary(recs, meta))
        print((args.out / "summary.md").read_text())
        return 0
    run(args.root, args.out, workers=args.workers, only=args.projects, build=not args.no_build, specs=args.specs,
        limit=args.limit, vendor=args.vendor_include, guess=not args.no_guess)
    print((args.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
