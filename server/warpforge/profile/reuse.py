"""A baseline profile made once and reused: the key that decides a profile, and its lookup in the workspace store.

Why: an optimize job profiles the original kernel before it searches (Nsight Compute replays the launch once
per metric pass: ~10 s of a 60 s run on an 8192 x 50257 softmax), and every later job on the same kernel
measured the same thing again. A profile is decided by what is built, what is run and what measures it,
so that is the key (``store.ProfileKey``):

- ``unit_hash``: the file (its resolved path and text: the findings name its lines), the translation unit
  as the profiler builds it (``cuda.extract.standalone``, template instantiation included, the file named by
  its resolved path) and what the project's build adds to it (``compiler.build.project_key``: defines, flags,
  the headers it reaches), as the evaluation cache keys its spec;
- the kernel; ``spec_hash``: the spec (``KernelSpec.spec_hash``: sizes, arguments, distributions, launch,
  seeds) and the sizes actually profiled (``profiler.profiled_sizes``: an optimize job caps the profile at
  ``PROFILE_MAX_BYTES``, ``warpforge profile`` runs the spec's own size, so those two share a profile only
  when the cap does not bite);
- ``build``: the architecture, the compiler (path and version) and the Nsight Compute sections collected;
- the GPU as the evaluation cache names it, nvidia-smi's name and driver of the device profiled
  (``gpu.backends.device_identity``, what ``LocalBackend.identity`` answers); the Nsight Compute version;
  and ``PROFILE_VERSION`` with WarpForge's version and a digest of the profile stage's source (analyzers and
  classification change what a report holds).

The profile always runs on this machine's device (``OptimizeSettings.device``), whichever backend evaluates
candidates, so the key names that device even when a Ray cluster measures the search. No key (None) where
the device or ncu cannot be identified: the profile is then made fresh and not kept.

Only complete profiles are kept: Nsight Compute ran (no notice, a parsed profile) and produced measured
findings. A timing-only fallback, static findings or a failure are made again next time: they say what was
missing, and that may be fixed by then.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

from .. import __version__
from ..compiler.build import project_key
from ..compiler.toolchain import ToolMissing, default_arch, toolchain
from ..cuda.extract import standalone
from ..gpu.backends import device_identity
from ..store import ProfileKey, Store
from . import ncu as ncu_mod
from .profiler import Parsed, ProfileReport, profiled_sizes

#: bump when a report of the same launch must not be reused although the profile stage's code is the same
#: (``_code_version`` covers its code: analyzers, classification, parsers)
PROFILE_VERSION = "1"

log = logging.getLogger(__name__)


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:24]


@functools.cache
def _code_version() -> str:
    """A digest of the profile stage's own source (this package, analyzers included), so that a WarpForge whose
    analyzers or classification changed (a development checkout does so without a new version number)
    profiles again instead of replaying findings an older profiler made."""
    here = Path(__file__).resolve().parent
    return _digest(*(f"{p.relative_to(here)}\0{p.read_text(encoding='utf-8', errors='replace')}"
                     for p in sorted(here.rglob("*.py"))))[:12]


def profile_key(file: str, text: str, parsed: Parsed, *, arch: str | None, nvcc: str | None, device: int,
                sections: tuple[str, ...], max_bytes: int | None) -> ProfileKey | None:
    """The key of the profile ``profiler.profile_kernel`` makes with these arguments (see the module
    docstring); None where the GPU, Nsight Compute or the compiler cannot be identified. Blocking: it runs
    nvidia-smi, ``ncu --version`` (once per process) and reads the project's headers."""
    exe = ncu_mod.ncu_path()
    version = ncu_mod.ncu_version(exe) if exe is not None else None
    ident = device_identity(device) if version is not None else None  # no ncu: no profile to keep, ask nothing
    if ident is None or version is None:
        return None
    try:
        compiler = toolchain(nvcc).key
    except ToolMissing:
        return None
    src, model, kernel, spec = parsed
    inst = tuple(spec.template_args) if kernel.template_params else None
    # The unit names its file in ``#line`` directives: named by the resolved path, ``kernels/k.cu`` (the CLI)
    # and ``/work/kernels/k.cu`` (the editor) are one unit, as they are one build and one profile.
    where = str(Path(file).resolve())
    tu = standalone(src, model, kernel, filename=where, instantiate=inst)
    reduced = profiled_sizes(spec, max_bytes)
    return ProfileKey(
        unit_hash=_digest(where, text, tu, project_key(tu, where)),
        kernel=kernel.name,
        spec_hash=_digest(spec.spec_hash(), json.dumps(reduced, sort_keys=True)),
        build=_digest(default_arch(arch), compiler, *sections),
        gpu=ident[0], driver=ident[1], ncu=version, version=f"{PROFILE_VERSION}:{__version__}:{_code_version()}")


def complete(report: ProfileReport) -> bool:
    """A profile worth keeping: Nsight Compute ran and its findings (WF2xx) were made."""
    return (report.notice is None and report.profile is not None and report.profile.ncu is not None
            and any(f.code.startswith("WF2") for f in report.findings))


def remember(store: Store, key: ProfileKey, report: ProfileReport) -> bool:
    """Keep a complete profile for later jobs (True when kept). Best effort: a store that cannot be written
    costs the reuse, never the job."""
    if not complete(report):
        return False
    try:
        store.put_profile(key, report.to_json(), report.seconds.get("total", 0.0))
    except (sqlite3.Error, ValueError, TypeError) as e:  # ValueError: a NaN or infinity JSON cannot hold
        log.warning("the profile of %s was not kept in %s: %s", report.kernel, store.path, e)
        return False
    return True


def reused(store: Store, key: ProfileKey, file: str) -> ProfileReport | None:
    """The stored profile for ``key`` as a report of ``file`` (the name this job gives the file: a profile
    made by the CLI with a relative path serves the editor's absolute one), with ``reused`` saying when and on
    which GPU it was measured and ``seconds`` what the lookup took (``measured`` keeps what measuring took);
    None when there is none or it no longer reads."""
    t0 = time.perf_counter()
    try:
        stored = store.get_profile(key)
    except sqlite3.Error as e:
        log.warning("stored profiles in %s cannot be read: %s", store.path, e)
        return None
    if stored is None:
        return None
    try:
        report = ProfileReport.from_json(stored.report)
    except (KeyError, TypeError, ValueError) as e:  # written by an older layout: profile again
        log.info("the stored profile of %s does not read (%s): profiling again", key.kernel, e)
        return None
    if report.file != file:
        old = report.file
        report.findings = [replace(f, file=file) if f.file == old else f for f in report.findings]
        report.file = file
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(stored.created))
    report.reused = f"{when} on {key.gpu}"
    lookup = time.perf_counter() - t0
    report.seconds = {"measured": stored.seconds, "lookup": lookup, "total": lookup}
    return report
