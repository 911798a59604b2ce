"""Static hints for a CUDA file: compile (ptxas), disassemble (SASS), run the analyzers, sort findings.

The first thing a user sees on opening a file, so it must be fast and must never fail as a whole:
- kernels are compiled as standalone translation units (device code only), all missing ones in a single
  nvcc call the first time, then only the kernels whose text changed — results (ptxas numbers, SASS,
  messages) are cached per kernel by the hash of its translation unit, in memory and on disk, so editing
  one kernel of twenty recompiles and disassembles one, in this process or the next;
- a kernel that does not compile gets its compiler errors as WF000 findings at their lines (the kernels
  the errors point at are set aside and the rest compiled again as one batch), and the source-pattern
  analyzers still run on it and on every other kernel;
- a missing nvcc or nvdisasm is one WF002 finding saying what to install, not an exception.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..compiler.build import BuildResult, Resources, compile_cubin, project_key
from ..compiler.files import read_regular
from ..compiler.mangle import base_name
from ..compiler.messages import CompilerMessage
from ..compiler.names import line_alias
from ..compiler.project import reached_headers
from ..compiler.toolchain import ToolMissing, default_arch, find_tool, local_gpu_arch, toolchain
from ..cuda.extract import standalone, standalone_many
from ..cuda.model import FileModel, Kernel
from ..cuda.parser import parse, qualifier_macros
from ..cuda.text import Position, Range, SourceText
from ..defaults import user_cache_dir
from ..spec.annotations import has_annotation
from ..spec.model import KernelSpec, SpecError
from ..spec.problems import Problem, annotation_problems, guessed_values, launch_dimension_problems, near_misses
from ..spec.resolve import build_spec
from .analyzers import load
from .context import KernelContext
from .findings import Finding, Severity, make
from .rootcause import merge_root_causes
from .sass import Instr, SassFunction, disassemble

_INCLUDE_LINE = re.compile(r"^\s*#\s*include\b")

#: beyond this many kernels in one file, only the first ones get compiler/SASS evidence
MAX_COMPILED_KERNELS = 200


@dataclass
class KernelBuild:
    """Compiler evidence for one kernel's translation unit."""

    ok: bool
    resources: Resources | None
    sass: SassFunction | None
    sass_lines: dict[int, Counter[str]]
    messages: list[CompilerMessage]


@dataclass
class HintsReport:
    file: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    compiled: int = 0
    cached: int = 0
    #: nvcc's command and output for each compile this analysis ran (cached results have none): the editor
    #: shows them in its Output channel
    logs: list[str] = field(default_factory=list)


_cache: OrderedDict[str, KernelBuild] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_MAX = 512


def _cache_get(key: str) -> KernelBuild | None:
    with _cache_lock:
        kb = _cache.get(key)
        if kb is not None:
            _cache.move_to_end(key)
        return kb


def _cache_put(key: str, kb: KernelBuild) -> None:
    with _cache_lock:
        _cache[key] = kb
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)


#: bump when KernelBuild's stored form or the SASS line attribution changes
_DISK_VERSION = "kb2"


def _disk_path(key: str) -> Path:
    return user_cache_dir() / "hints" / key[:2] / f"{key}.json"


def _disk_get(key: str, file: str) -> KernelBuild | None:
    """A kernel's compiler evidence from an earlier process: a new CLI run or a restarted language server
    skips nvcc *and* nvdisasm (~0.3 s of CPU even for a tiny cubin) for every kernel it has seen."""
    try:
        data = json.loads(_disk_path(key).read_text())
        if data.get("v") != _DISK_VERSION:
            return None
        sass: SassFunction | None = None
        if data["sass"] is not None:
            sd = data["sass"]
            sass = SassFunction(sd["mangled"], sd["name"], tuple(sd["namespace"]),
                                [Instr(*ins) for ins in sd["instructions"]])
        return KernelBuild(
            ok=data["ok"],
            resources=Resources(**data["resources"]) if data["resources"] is not None else None,
            sass=sass,
            sass_lines=sass.lines(file) if sass is not None else {},
            messages=[CompilerMessage(**m) for m in data["messages"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _disk_put(key: str, kb: KernelBuild) -> None:
    sass = kb.sass
    data = {
        "v": _DISK_VERSION, "ok": kb.ok,
        "resources": asdict(kb.resources) if kb.resources is not None else None,
        "messages": [asdict(m) for m in kb.messages],
        "sass": None if sass is None else {
            "mangled": sass.mangled, "name": sass.name, "namespace": list(sass.namespace),
            "instructions": [[i.opcode, i.operands, i.predicate, i.file, i.line] for i in sass.instructions]},
    }
    path = _disk_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache is a slower cache, not an error


def _defines(spec: KernelSpec | None) -> dict[str, str]:
    return {t.name: t.values[0] for t in spec.tunables} if spec is not None else {}


def _match_sass(funcs: dict[str, SassFunction], kernel: Kernel) -> SassFunction | None:
    for f in funcs.values():
        if f.name == kernel.name and (not kernel.namespace or f.namespace[-len(kernel.namespace):] == kernel.namespace):
            return f
    return None


def _kernel_build(kernel: Kernel, build: BuildResult, funcs: dict[str, SassFunction] | None, file: str,
                  messages: list[CompilerMessage]) -> KernelBuild:
    res = build.resources_for(kernel.name) if build.ok else None
    sass = _match_sass(funcs, kernel) if funcs is not None and build.ok else None
    lines = sass.lines(file) if sass is not None else {}
    return KernelBuild(build.ok, res, sass, lines, messages)


class _Compiler:
    """Compiles the kernels of one file, reusing cached per-kernel results."""

    def __init__(self, file: str, src: SourceText, model: FileModel, arch: str, nvcc: str | None) -> None:
        self.file = file
        self.src = src
        self.model = model
        self.arch = arch
        self.nvcc = nvcc
        self.notes: list[str] = []
        self.sass_missing: str | None = None
        self.compiled = 0
        self.cached = 0
        self.logs: list[str] = []
        self._tools = ""
        self._project_keys: dict[str, str] = {}

    def _logged(self, build: BuildResult) -> BuildResult:
        if not build.cached:
            self.logs.append(" ".join(build.command) + "\n" + build.log.strip())
        return build

    def _disasm(self, build: BuildResult) -> dict[str, SassFunction] | None:
        if not build.ok or self.sass_missing is not None:
            return None
        try:
            return disassemble(build.cubin)
        except ToolMissing as e:
            self.sass_missing = str(e)
            return None

    def _key(self, k: Kernel, spec: KernelSpec | None) -> tuple[str, str]:
        inst = spec.template_args if spec is not None and k.template_params and spec.template_args else None
        tu = standalone(self.src, self.model, k, filename=self.file, instantiate=inst)
        # Everything the result depends on besides the unit's text: the project's build (warpforge.toml or
        # compile_commands.json: flags, defines, include folders) and the contents of the headers the unit
        # reaches, so configuring the build or editing a header compiles again instead of replaying. An unusual
        # file name is built under its alias (compiler.names); results kept from before the alias are not reused.
        alias = line_alias(self.file)
        renamed = f"\0{alias}" if alias != self.file else ""
        key = hashlib.sha256(f"{self.arch}\0{sorted(_defines(spec).items())}\0{self.nvcc}\0"
                             f"{self._project_key(tu)}\0{tu}{renamed}".encode()).hexdigest()
        return key, tu

    def _project_key(self, tu: str) -> str:
        """``project_key`` of a unit, once per set of include lines: the kernels of a file share them, and
        the key reads every header they reach."""
        includes = "\n".join(ln for ln in tu.splitlines() if _INCLUDE_LINE.match(ln))
        got = self._project_keys.get(includes)
        if got is None:
            got = self._project_keys[includes] = project_key(includes, self.file)
        return got

    def _tool_key(self) -> str:
        """Which nvcc and nvdisasm produced a cached result (a toolkit upgrade must not reuse old SASS)."""
        try:
            tool = find_tool("nvdisasm")
            st = tool.stat()
            nvdisasm = f"{tool}:{st.st_size}:{st.st_mtime_ns}"  # a reinstalled nvdisasm is another tool
        except (ToolMissing, OSError):
            nvdisasm = "-"
        return f"{toolchain(self.nvcc).key}\0{nvdisasm}"

    def _in_kernel(self, m: CompilerMessage, k: Kernel) -> bool:
        if m.function and m.line <= 0:  # ptxas / nvlink name the function
            return base_name(m.function) == k.name or m.function == k.name
        return Path(m.file).name == Path(self.file).name and k.start_line + 1 <= m.line <= k.end_line + 1

    def _split(self, messages: list[CompilerMessage], kernels: list[Kernel]) -> dict[str, list[CompilerMessage]]:
        """Each kernel's own messages (by line), plus the ones no kernel contains (helpers, ptxas) for all."""
        own: dict[str, list[CompilerMessage]] = {k.name: [] for k in kernels}
        shared: list[CompilerMessage] = []
        for m in messages:
            ks = [k for k in kernels if self._in_kernel(m, k)]
            if ks:
                own[ks[0].name].append(m)
            else:
                shared.append(m)
        return {name: ms + shared for name, ms in own.items()}

    def _store(self, key: str, kb: KernelBuild, out: dict[str, KernelBuild], k: Kernel) -> None:
        """Keep a result in memory and, when the kernel compiled, on disk — unless it lacks SASS only because
        nvdisasm is missing (installing it must bring the SASS hints back) or the compile timed out (it may
        succeed later). A failed build stays in this process only: what made it fail (a header not found, a
        build not configured yet) may be fixed outside anything the key can see, and an error replayed from
        disk after the fix is a false error the user cannot clear."""
        out[k.name] = kb
        if (kb.ok and self.sass_missing is not None) or any(m.code == "timeout" for m in kb.messages):
            return
        _cache_put(key, kb)
        if kb.ok and kb.sass is not None:
            _disk_put(self._disk_key(key), kb)

    def _disk_key(self, key: str) -> str:
        return hashlib.sha256(f"{key}\0{self._tools}".encode()).hexdigest()

    def run(self, kernels: list[Kernel], specs: dict[str, KernelSpec | None]) -> dict[str, KernelBuild]:
        out: dict[str, KernelBuild] = {}
        todo: list[tuple[Kernel, str, str]] = []
        for k in kernels:
            key, tu = self._key(k, specs.get(k.name))
            hit = _cache_get(key)
            if hit is None:
                if not self._tools:
                    self._tools = self._tool_key()  # raises ToolMissing without nvcc, as compiling would
                hit = _disk_get(self._disk_key(key), self.file)
                if hit is not None:
                    _cache_put(key, hit)
            if hit is not None:
                out[k.name] = hit
                self.cached += 1
            else:
                todo.append((k, key, tu))
        if not todo:
            return out
        defines: dict[str, str] = {}
        conflict = False
        for k, _, _ in todo:
            for name, v in _defines(specs.get(k.name)).items():
                conflict |= defines.setdefault(name, v) != v
        # Batches: all missing kernels in one nvcc call and one nvdisasm call. When the batch fails, the
        # kernels its errors point at are set aside with those errors and the rest is compiled again as a
        # batch — so one broken kernel costs one more nvcc call, not one nvcc and one nvdisasm per kernel.
        pending = todo
        for _ in range(4):
            if len(pending) <= 1 or conflict:
                break
            insts = {k.name: s.template_args for k, _, _ in pending
                     if (s := specs.get(k.name)) is not None and k.template_params and s.template_args}
            batch_tu = standalone_many(self.src, self.model, [k for k, _, _ in pending], filename=self.file,
                                       instantiations=insts)
            build = self._logged(compile_cubin(batch_tu, arch=self.arch, defines=defines, filename=self.file,
                                               nvcc=self.nvcc))
            self.compiled += 1
            per_kernel = self._split(build.messages, [k for k, _, _ in pending])
            if build.ok:
                funcs = self._disasm(build)
                for k, key, _ in pending:
                    self._store(key, _kernel_build(k, build, funcs, self.file, per_kernel[k.name]), out, k)
                return out
            errors = [m for m in build.messages if m.severity == "error"]
            broken = {k.name for k, _, _ in pending if any(self._in_kernel(m, k) for m in errors)}
            if build.timed_out or not broken or len(broken) == len(pending) or any(
                    not any(self._in_kernel(m, k) for k, _, _ in pending) for m in errors):
                break  # an error outside the kernels (a helper, a header, ptxas): compile one at a time
            for k, key, _ in pending:
                if k.name in broken:
                    self._store(key, KernelBuild(False, None, None, {}, per_kernel[k.name]), out, k)
            pending = [item for item in pending if item[0].name not in broken]
        # One at a time (in parallel): attributes errors to the kernel that has them, salvages the rest.
        def one(item: tuple[Kernel, str, str]) -> tuple[Kernel, str, KernelBuild]:
            k, key, tu = item
            b = self._logged(compile_cubin(tu, arch=self.arch, defines=_defines(specs.get(k.name)),
                                           filename=self.file, nvcc=self.nvcc))
            return k, key, _kernel_build(k, b, self._disasm(b), self.file, b.messages)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for k, key, kb in pool.map(one, pending):
                self._store(key, kb, out, k)
                self.compiled += 1
        return out


def _message_findings(file: str, src: SourceText, kernel: Kernel, messages: Iterable[CompilerMessage],
                      seen: set[tuple[int, str]]) -> list[Finding]:
    out: list[Finding] = []
    for m in messages:
        if m.severity not in ("error", "warning"):
            continue
        same_file = Path(m.file).name == Path(file).name
        line = m.line if same_file and m.line > 0 else kernel.start_line + 1
        key = (line, m.text)
        if key in seen:
            continue
        seen.add(key)
        evidence: dict[str, str] = {}
        if m.code:
            evidence["compiler_code"] = m.code
        if m.missing_header:
            evidence["missing_header"] = m.missing_header
        if m.origin:
            evidence["reported_in"] = m.origin
        idx = max(0, min(line - 1, src.line_count - 1))
        text = src.line_text(idx)
        indent = len(text) - len(text.lstrip())
        rng = Range(Position(idx, len(text[:indent].encode("utf-16-le")) // 2),
                    Position(idx, len(text.rstrip().encode("utf-16-le")) // 2))
        where = f" (in {m.origin})" if m.origin else "" if same_file or m.line <= 0 else f" (in {m.file}:{m.line})"
        code = "WF000" if m.severity == "error" else "WF001"
        # ptxas and nvlink name functions mangled: say the name the user wrote
        text = m.text.replace(f"'{m.function}'", f"'{base_name(m.function)}'") if m.function else m.text
        out.append(make(code, file, rng, f"{text}{where}", kernel=kernel.name, evidence=evidence))
    return out


_macro_cache: dict[tuple[str, int], dict[str, frozenset[str]]] = {}


def header_macros(text: str | bytes, file: str) -> dict[str, frozenset[str]]:
    """The qualifier macros (``#define DEV __forceinline__ __device__``) of the headers ``file`` reaches, so a
    helper written ``DEV float f()`` with ``DEV`` from a project header parses as the device function it is.
    Each header is read once per modification."""
    out: dict[str, frozenset[str]] = {}
    source = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    try:
        headers = reached_headers(source, file)
    except (OSError, ValueError):
        return out
    for h in sorted(headers):
        try:
            key = (str(h), h.stat().st_mtime_ns)
            got = _macro_cache.get(key)
            if got is None:
                got = _macro_cache[key] = qualifier_macros(read_regular(h))
        except OSError:
            continue
        out.update(got)
    return out


def parse_file(file: str, data: bytes) -> FileModel:
    """``file``'s model with the qualifier macros of its headers known (see ``header_macros``)."""
    return parse(data, macros=header_macros(data, file) if b"#" in data else None)


def analyze_source(
    file: str,
    text: str | bytes,
    *,
    kernels: list[str] | None = None,
    arch: str | None = None,
    nvcc: str | None = None,
    use_compiler: bool = True,
    model: FileModel | None = None,
    merge: bool = True,
) -> HintsReport:
    """All static findings for a file's kernels (or the named ones), sorted by location; with ``merge``, those
    of one root cause folded into one (``rootcause``; off to see what each analyzer says on its own)."""
    src = SourceText(text)
    model = model if model is not None else parse_file(file, src.data)
    report = HintsReport(file)
    targets = [k for k in model.kernels if kernels is None or k.name in kernels]
    report.kernels = [k.name for k in targets]
    arch_assumed = not arch and local_gpu_arch() is None  # neither configured nor seen: "your GPU" in hints
    arch = default_arch(arch)
    specs: dict[str, KernelSpec | None] = {}
    spec_errors: dict[str, str] = {}
    #: problems of an annotation block the user wrote, all of them (an inferred spec that cannot be completed
    #: is no finding), and the warnings: a launch with too few dimensions, directives that are not read
    spec_problems: dict[str, list[Problem]] = {}
    for k in targets:
        spec_problems[k.name] = near_misses(src, k)
        if has_annotation(src, k):
            spec, problems = annotation_problems(src, model, k, file)
            specs[k.name] = spec
            spec_problems[k.name] += problems
            if spec is None and problems:
                spec_errors[k.name] = f"{file}:{problems[0].line or k.start_line + 1}: {problems[0].message}"
        else:
            try:
                specs[k.name] = build_spec(src, model, k, file)
            except SpecError as e:
                specs[k.name] = None
                spec_errors[k.name] = str(e)
        spec = specs[k.name]
        if spec is not None:
            spec_problems[k.name] += launch_dimension_problems(src, k, spec) + guessed_values(src, k, spec)
    builds: dict[str, KernelBuild] = {}
    compiler_missing: str | None = None
    compiler = _Compiler(file, src, model, arch, nvcc)
    if use_compiler and targets:
        to_compile = targets[:MAX_COMPILED_KERNELS]
        if len(targets) > MAX_COMPILED_KERNELS:
            report.notes.append(f"{len(targets)} kernels: compiler and SASS hints cover the first "
                                f"{MAX_COMPILED_KERNELS}")
        try:
            builds = compiler.run(to_compile, specs)
        except ToolMissing as e:
            compiler_missing = str(e)
        report.compiled, report.cached, report.logs = compiler.compiled, compiler.cached, compiler.logs
    registry = load()
    seen_msgs: set[tuple[int, str]] = set()
    for k in targets:
        kb = builds.get(k.name)
        ctx = KernelContext(file, src, model, k, arch=arch, arch_assumed=arch_assumed, spec=specs.get(k.name),
                            spec_error=spec_errors.get(k.name),
                            resources=kb.resources if kb else None, sass=kb.sass if kb else None,
                            sass_lines=kb.sass_lines if kb else {})
        if kb is not None:
            report.findings.extend(_message_findings(file, src, k, kb.messages, seen_msgs))
        for sp in spec_problems.get(k.name, ()):  # each at its line, or the job fails later
            fix = {"title": sp.fix.title, "kind": sp.fix.kind, "line": sp.fix.line, "text": sp.fix.text} \
                if sp.fix is not None else None
            report.findings.append(make("WF003", file, ctx.line_range(sp.line or k.start_line + 1), sp.message,
                                        kernel=k.name, evidence={"spec_fix": fix} if fix else None))
        have = {"source"}
        if ctx.spec is not None:
            have.add("spec")
        if kb is not None and kb.ok and kb.resources is not None:
            have.add("ptxas")
        if kb is not None and kb.sass is not None:
            have.add("sass")
        for a in registry.values():
            if not a.needs <= have:
                continue
            try:
                report.findings.extend(a.fn(ctx))
            except Exception as e:
                report.notes.append(f"analyzer {a.name} failed on `{k.name}`: {type(e).__name__}: {e}")
    first_line = Range(Position(0, 0), Position(0, 0))
    if compiler_missing is not None:
        report.findings.append(make("WF002", file, first_line,
                                    f"{compiler_missing}; compiler, register and SASS hints are off",
                                    severity=Severity.INFO))
    elif compiler.sass_missing is not None:
        report.findings.append(make("WF002", file, first_line, f"{compiler.sass_missing}; SASS hints are off",
                                    severity=Severity.INFO))
    for prob in model.problems:
        report.notes.append(f"{file}:{prob.line + 1}: {prob.message}; the kernels elsewhere are still analyzed")
    if merge:
        report.findings = merge_root_causes(report.findings)  # one root cause, one finding with related lines
    report.findings.sort(key=Finding.sort_key)
    return report


def analyze_file(path: str, **kwargs: object) -> HintsReport:
    """Read ``path`` and analyze it (see ``analyze_source``)."""
    data = Path(path).read_bytes()
    return analyze_source(path, data, **kwargs)  # type: ignore[arg-type]
