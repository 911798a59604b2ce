"""nvcc -> cubin, with ptxas resource usage per kernel and compiler messages at source lines.

Only device code is compiled (``-cubin``): host code in a candidate is never compiled for the host and
never runs. ``-lineinfo`` is always on so SASS and profiler samples map back to the user's lines.
Results are cached by a hash of (source, flags with the project's own, include folders, the contents of the
headers the unit reaches, arch, compiler), in memory and on disk, because the editor recompiles the same file
on every save and the search re-proposes the same variants. A failed build is kept in memory only. Messages
are read and anchored by ``compiler.messages``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..defaults import user_cache_dir
from .includes import check_includes
from .mangle import base_name
from .messages import CompilerMessage as CompilerMessage  # re-exported: it was defined here
from .messages import anchor, headline, rename
from .messages import parse as parse_log
from .names import line_alias
from .project import ProjectBuild, project_build, source_file
from .sandbox import exit_note, limits_for, run_tool
from .toolchain import ToolMissing, UnsafeArgument, default_arch, define_problem, guard_argv, toolchain


@dataclass(frozen=True)
class Resources:
    """``ptxas -v`` numbers for one function."""

    mangled: str
    name: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0
    is_entry: bool = False


@dataclass
class BuildResult:
    ok: bool
    arch: str
    cubin: bytes = b""
    resources: dict[str, Resources] = field(default_factory=dict)
    messages: list[CompilerMessage] = field(default_factory=list)
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    timed_out: bool = False
    command: list[str] = field(default_factory=list)

    def resources_for(self, kernel: str) -> Resources | None:
        """Resources of the entry function whose (demangled) base name is ``kernel``."""
        for r in self.resources.values():
            if r.is_entry and (r.name == kernel or r.mangled == kernel):
                return r
        return None

    def entry_symbol(self, kernel: str) -> str | None:
        r = self.resources_for(kernel)
        return r.mangled if r else None


_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_BARS = re.compile(r"used (\d+) barriers")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Resource usage per function from ``-Xptxas -v`` output."""
    out: dict[str, dict[str, int | str | bool]] = {}
    entries: set[str] = set()
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            entries.add(m.group(1))
            current = m.group(1)
            out.setdefault(current, {})
            continue
        m = _PROPS.search(line)
        if m:
            current = m.group(1)
            out.setdefault(current, {})
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            out[current].update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
            continue
        m = _USED.search(line)
        if m:
            rest = m.group(2)
            out[current]["registers"] = int(m.group(1))
            if (s := _SMEM.search(rest)) is not None:
                out[current]["shared_bytes"] = int(s.group(1))
            if (c := _CMEM.search(rest)) is not None:
                out[current]["constant_bytes"] = int(c.group(1))
            if (b := _BARS.search(rest)) is not None:
                out[current]["barriers"] = int(b.group(1))
    result: dict[str, Resources] = {}
    for mangled, vals in out.items():
        result[mangled] = Resources(
            mangled=mangled,
            name=base_name(mangled),
            registers=int(vals.get("registers", 0)),
            spill_stores=int(vals.get("spill_stores", 0)),
            spill_loads=int(vals.get("spill_loads", 0)),
            stack_frame=int(vals.get("stack_frame", 0)),
            shared_bytes=int(vals.get("shared_bytes", 0)),
            constant_bytes=int(vals.get("constant_bytes", 0)),
            barriers=int(vals.get("barriers", 0)),
            is_entry=mangled in entries,
        )
    return result


def parse_messages(log: str, default_file: str, files: tuple[str, ...] = ()) -> list[CompilerMessage]:
    """nvcc's messages in every format its tools print (see ``compiler.messages``), not yet anchored."""
    return parse_log(log, default_file, files)


# --------------------------------------------------------------------------- cache
def cache_dir() -> Path:
    """Where cubins are kept by content hash: ``build/`` in the per-user folder (``defaults.user_cache_dir``)."""
    return user_cache_dir() / "build"


_memory: dict[str, BuildResult] = {}
_memory_lock = threading.Lock()
_MEMORY_MAX = 256


def _cache_key(source: str, flags: list[str], arch: str, compiler: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), arch, compiler, "v3"):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:32]


def _load_disk(key: str) -> BuildResult | None:
    d = cache_dir() / key[:2] / key
    meta = d / "result.json"
    if not meta.is_file():
        return None
    try:
        data = json.loads(meta.read_text())
        cubin = (d / "kernel.cubin").read_bytes() if data["ok"] else b""
    except (OSError, ValueError, KeyError):
        return None
    if data["ok"] and data.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():
        return None  # an entry from before the checksum, or bytes not matching it: build again
    return BuildResult(
        ok=data["ok"], arch=data["arch"], cubin=cubin,
        resources={k: Resources(**v) for k, v in data["resources"].items()},
        messages=[CompilerMessage(**m) for m in data["messages"]],
        log=data["log"], seconds=data["seconds"], cached=True, command=data.get("command", []),
    )


def _store_disk(key: str, res: BuildResult) -> None:
    """Write an entry so that a reader in another process never sees a partial one.

    Parallel compiles of one translation unit (candidates that differ only in their launch) store the same
    key at once. Both files are written to temporary names and renamed into place, and the metadata carries
    the cubin's checksum, which ``_load_disk`` verifies: before this, a reader could load a cubin another
    process was rewriting, and the GPU refused it ("device kernel image is invalid"; 14 of 219 SGEMM-heavy
    evaluations on 2 H200s).
    """
    d = cache_dir() / key[:2] / key
    try:
        d.mkdir(parents=True, exist_ok=True)
        if res.ok:
            tmp_cubin = d / f"kernel.cubin.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp_cubin.write_bytes(res.cubin)
            tmp_cubin.replace(d / "kernel.cubin")
        data = {
            "ok": res.ok, "arch": res.arch, "log": res.log, "seconds": res.seconds, "command": res.command,
            "cubin_sha256": hashlib.sha256(res.cubin).hexdigest() if res.ok else None,
            "resources": {k: asdict(v) for k, v in res.resources.items()},
            "messages": [asdict(m) for m in res.messages],
        }
        tmp = d / f"result.json.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(d / "result.json")
    except OSError:
        pass  # a read-only cache is a slower cache, not an error


#: the fixed names a compile uses inside its private temporary folder: nothing the user named (file, folder)
#: reaches nvcc's command line, which nvcc turns into shell commands (see ``toolchain.UnsafeArgument``)
SOURCE_NAME = "kernel.cu"
CUBIN_NAME = "kernel.cubin"
INCLUDE_LINK = "include{}"

#: options a caller or a candidate may add, beyond the fixed ones. An allow-list, because other options
#: can name a program for nvcc to run (``-ccbin``, ``-Xcompiler -wrapper,...``, ``--options-file``) or
#: reach a sub-command's shell without quotes (``-Xptxas`` values are pasted into ptxas's command as is).
_NVCC_FLAG = re.compile(
    r"--?(use_fast_math|use-fast-math|extra-device-vectorization|expt-relaxed-constexpr|extended-lambda|"
    r"restrict|lineinfo|generate-line-info|device-debug|G|O[0-3]|"
    r"(ftz|prec-div|prec-sqrt|fmad|rdc|relocatable-device-code)=(true|false)|"
    r"maxrregcount=\d{1,4}|std=c\+\+(14|17|20))"
)
_PTXAS_FLAG = re.compile(
    r"--?(O[0-3]|v|verbose|warn-spills|warn-on-spills|warn-lmem-usage|warn-on-local-memory-usage|"
    r"warn-double-usage|warn-on-double-precision-use|allow-expensive-optimizations=(true|false)|"
    r"maxrregcount=\d{1,4}|def-load-cache=\w+|def-store-cache=\w+|fmad=(true|false)|"
    r"register-usage-level=\d{1,2})"
)
_PTXAS_OPTION = ("-Xptxas", "--ptxas-options")


def flag_problem(flags: list[str]) -> str | None:
    """Why these extra nvcc options may not be used (None when every one is allowed)."""
    it = iter(flags)
    for f in it:
        if f in _PTXAS_OPTION or f.startswith(tuple(o + "=" for o in _PTXAS_OPTION)):
            value = f.split("=", 1)[1] if "=" in f else next(it, "")
            bad = [v for v in value.split(",") if not _PTXAS_FLAG.fullmatch(v)]
            if bad or not value:
                return f"the ptxas option `{bad[0] if bad else value}` is not one WarpForge passes on"
        elif f.startswith("-D"):
            name, _, value = (f[2:] or next(it, "")).partition("=")
            why = define_problem(name, value)
            if why is not None:
                return why
        elif not _NVCC_FLAG.fullmatch(f):
            return (f"the nvcc option `{f}` is not one WarpForge passes on (allowed: -use_fast_math, "
                    "-maxrregcount=N, -O0..3, -ftz/-prec-div/-prec-sqrt/-fmad=true|false, -rdc=true, -Xptxas -O3, -D)")
    return None


def _refused(arch: str, filename: str, why: str) -> BuildResult:
    """The not-ok result of a compile that was never started because an argument was unsafe."""
    text = f"not compiled: {why}"
    return BuildResult(ok=False, arch=arch, messages=[CompilerMessage(filename, 0, "error", "unsafe", text)],
                       log=text)


#: quoted and angle includes: a project header is often included as ``<act/act.h>`` through an -I folder
_ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">\n]+)[">]', re.MULTILINE)


def _local_headers(source: str, dirs: list[str], limit: int = 200) -> str:
    """A digest of the headers the unit's includes reach in ``dirs`` (followed through their own
    quoted includes, at most ``limit`` files): part of the cache key, so an edited project header rebuilds."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    todo = [(source, dirs)]
    while todo and len(seen) < limit:
        text, where = todo.pop()
        for name in _ANY_INCLUDE.findall(text):
            for d in where:
                p = Path(d) / name
                try:
                    if not p.is_file():
                        continue
                    p = p.resolve()
                    if p in seen:
                        break
                    seen.add(p)
                    body = p.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    break
                h.update(str(p).encode() + b"\0" + body.encode() + b"\1")
                todo.append((body, [str(p.parent), *dirs]))
                break
    return h.hexdigest()[:16] if seen else ""


def project_key(source: str, filename: str) -> str:
    """What a build of ``source`` as ``filename`` takes from outside the unit: the project's settings and the
    headers its quoted includes reach. Part of the evaluator's cache key, so a changed ``-D`` in the project's
    build or an edited header is measured again instead of replayed."""
    proj = project_build(filename)
    own = source_file(filename)
    dirs = [str(own.parent)] if own is not None else []
    if proj is not None:
        dirs += [*proj.include_dirs, *proj.system_dirs]
    headers = _local_headers(source, dirs)
    if proj is None and not headers:
        return ""
    return hashlib.sha256(f"{proj!r}\0{headers}".encode()).hexdigest()[:16]


def _link_includes(tmp: Path, include_dirs: list[str], start: int = 0) -> dict[str, str]:
    """Expose each include folder inside ``tmp`` under a fixed name; returns {link path: the user's folder}."""
    links: dict[str, str] = {}
    for i, inc in enumerate(include_dirs, start=start):
        link = tmp / INCLUDE_LINK.format(i)
        link.symlink_to(Path(inc).resolve(), target_is_directory=True)
        links[str(link)] = inc
    return links


def _c_string(text: str) -> str:
    """``text`` as ``cuda.extract`` writes it inside a ``#line`` directive."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "?").replace("\r", "?")


def _alias_line_names(source: str, filename: str) -> str:
    """``#line N "filename"`` directives renamed to ``names.line_alias(filename)`` when the name holds a quote,
    backslash or line break.

    cicc copies the ``#line`` name into the PTX ``.file`` directive without escaping it, and ptxas then
    rejects the PTX: such a file would never compile. The alias is stable (not the temporary source's path):
    it stays in the cubin's line table, where the SASS and profiler readers recognise it (``names.same_file``);
    messages map it back to ``filename``.
    """
    alias = line_alias(filename)
    if alias == filename:
        return source
    directive = re.compile(r'^(#line \d+ )"' + re.escape(_c_string(filename)) + r'"$', re.MULTILINE)
    return directive.sub(lambda m: f'{m.group(1)}"{alias}"', source)


def _map_names(log: str, names: dict[str, str]) -> str:
    """The log with the fixed temporary names replaced by what the user knows them as (longest first)."""
    for fixed in sorted(names, key=len, reverse=True):
        log = log.replace(fixed, names[fixed])
    return log


#: what nvcc's tools print when an allocation fails (the sandbox's address-space cap)
_OUT_OF_MEMORY = re.compile(r"out of memory|cannot allocate memory|memory exhausted", re.IGNORECASE)


def _map_build_dir(text: str, build: str) -> str:
    """``text`` without the private build folder: a path through it (``/tmp/warpforge-build-x/../../etc/h``, the
    preprocessor's spelling of a quoted include climbing out of it) becomes the file it names; one of the
    compile's own files (nvcc's intermediates) becomes its bare name. Runs after ``_map_names``."""
    def one(m: re.Match[str]) -> str:
        path = os.path.normpath(m.group(0))
        if path == build or path.startswith(build + os.sep):
            return os.path.basename(path) or "the build folder"
        return path
    return re.sub(re.escape(build) + r"(?:/[^\s\"'()<>:,;]*)?", one, text)


def compile_cubin(
    source: str,
    *,
    arch: str | None = None,
    defines: dict[str, str] | None = None,
    flags: list[str] | None = None,
    filename: str = "kernel.cu",
    include_dirs: list[str] | None = None,
    timeout: float = 120.0,
    nvcc: str | None = None,
    use_cache: bool = True,
    project: ProjectBuild | bool | None = True,
) -> BuildResult:
    """Compile device code to a cubin. Never raises for bad source: ``ok`` is False and messages say why.

    ``filename`` is only what messages call the source: the compile itself uses ``kernel.cu`` in a private
    temporary folder, include folders are linked there under fixed names, and a define, option or path
    that a shell could interpret gives a not-ok result without running anything. Raises ``ToolMissing``
    when there is no nvcc at all (the caller reports it once).

    ``project`` is the project's own build for the file (``compiler.project``): True (the default) reads it
    for ``filename`` when that is a file on disk, False builds without it. Its include folders (and the
    file's own folder, where nvcc looks for quoted includes first), defines, ``-std`` and allowed flags go
    into every compile, so a kernel that includes a project header compiles as it does in the project; its
    ``-arch`` is used only when the caller names none (a cubin must run on the GPU it is evaluated on). The
    caller's defines (tunables, a candidate's) override the project's.
    """
    tc = toolchain(nvcc)
    proj = project_build(filename) if project is True else (project or None)
    arch = default_arch(arch or (proj.arch if proj is not None else None))
    include_dirs = list(include_dirs or [])
    system_dirs: list[str] = []
    own = source_file(filename) if project is not False else None
    if own is not None and str(own.parent) not in include_dirs:
        include_dirs.insert(0, str(own.parent))
    if proj is not None:
        include_dirs += [d for d in proj.include_dirs if d not in include_dirs]
        system_dirs = list(proj.system_dirs)
        defines = {**proj.define_map(), **(defines or {})}
    for k, v in sorted((defines or {}).items()):
        why = define_problem(k, str(v))
        if why is not None:
            return _refused(arch, filename, why)
    why = flag_problem(list(flags or []))
    if why is not None:
        return _refused(arch, filename, why)
    # Includes are checked before anything runs: a device file is refused at its line, a file outside the
    # project is warned about (``compiler.includes``).
    include_msgs = [CompilerMessage(p.file, p.line, p.severity, "include", p.text) for p in check_includes(
        source, filename, include_dirs=include_dirs, system_dirs=system_dirs, nvcc=tc.nvcc,
        build_dir=str(Path(tempfile.gettempdir()) / "warpforge-build-unit"), own=source_file(filename))]
    if any(m.severity == "error" for m in include_msgs):
        return BuildResult(ok=False, arch=arch, messages=include_msgs,
                           log="\n".join(f"{m.file}:{m.line}: {m.severity}: {m.text}" for m in include_msgs))
    std = proj.std if proj is not None and proj.std else "c++17"
    all_flags = ["-cubin", f"-arch={arch}", "-lineinfo", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage",
                 f"-std={std}"]
    for k, v in sorted((defines or {}).items()):
        all_flags.append(f"-D{k}={v}")
    if proj is not None:
        all_flags.extend(f"-U{u}" for u in proj.undefines if u not in (defines or {}))
        all_flags.extend(f for f in proj.flags if f not in (flags or []))
    all_flags.extend(flags or [])
    # The cache key names the user's include folders and what the unit's quoted includes hold (a header
    # edited since the last build must not replay the old cubin); the command names their links.
    # The unit as nvcc sees it (an unusual file name under its alias): the key is of what is compiled, so a
    # cubin built under another alias is not replayed.
    source = _alias_line_names(source, filename)
    headers = _local_headers(source, [*include_dirs, *system_dirs])
    key = _cache_key(source, [*all_flags, *(f"-I{inc}" for inc in include_dirs),
                              *(f"-isystem{inc}" for inc in system_dirs), headers], arch, tc.key)
    if use_cache:
        with _memory_lock:
            hit = _memory.get(key)
        if hit is not None:
            return BuildResult(**{**hit.__dict__, "cached": True})
        disk = _load_disk(key)
        if disk is not None:
            with _memory_lock:
                _memory[key] = disk
            return disk
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warpforge-build-") as tmp:
        src_path = Path(tmp) / SOURCE_NAME
        src_path.write_text(source, encoding="utf-8")
        out_path = Path(tmp) / CUBIN_NAME
        try:
            links = _link_includes(Path(tmp), include_dirs)
            sys_links = _link_includes(Path(tmp), system_dirs, start=len(include_dirs))
        except OSError as e:
            return _refused(arch, filename, f"an include folder could not be linked ({e.strerror})")
        names = {**links, **sys_links, str(src_path): filename}
        if line_alias(filename) != filename:
            names[line_alias(filename)] = filename
        try:
            cmd = guard_argv("nvcc", [str(tc.nvcc), *all_flags, *(f"-I{link}" for link in links),
                                      *(a for link in sys_links for a in ("-isystem", link)),
                                      "-o", str(out_path), str(src_path)])
        except UnsafeArgument as e:
            fix = "set TMPDIR to a plain folder" if tmp in e.argument else "install nvcc under a plain path"
            return _refused(arch, filename, f"{e.why} (in `{e.argument[:80]}`; {fix})")
        # nvcc's own intermediate files go to TMPDIR: keep them in this private folder too.
        env = {**os.environ, "TMPDIR": tmp}
        # The sandbox closes stdin, caps memory and file size, and kills nvcc's whole group at the timeout.
        try:
            proc = run_tool(cmd, tool="nvcc", timeout=timeout, cwd=tmp, env=env, merge_stderr=True)
            log, returncode, timed_out = proc.stdout, proc.returncode, False
        except subprocess.TimeoutExpired as e:
            log, returncode, timed_out = str(e.output or ""), None, True
        except OSError as e:
            raise ToolMissing("nvcc", f"{tc.nvcc} could not be started: {e}") from e
        stopped = exit_note(returncode, "nvcc")
        seconds = time.perf_counter() - t0
        # Messages are read from the log as nvcc wrote it (fixed, plain names), then renamed: a user's name
        # may hold parentheses or line breaks that a message line cannot be read back from.
        raw = log or ""
        parsed = rename(parse_messages(raw, str(src_path), files=(filename, line_alias(filename))), names)
        parsed = [replace(m, file=_map_build_dir(m.file, tmp), text=_map_build_dir(_map_names(m.text, names), tmp),
                          chain=tuple((_map_build_dir(f, tmp), n) for f, n in m.chain)) for m in parsed]
        messages = include_msgs + anchor(parsed, filename, source, own.parent if own is not None else None,
                                         [*include_dirs, *system_dirs])
        log = _map_build_dir(_map_names(raw, names), tmp)
        if timed_out:
            log += f"\nnvcc: compilation exceeded {timeout:.0f} s and was killed"
        if stopped is not None:
            log += f"\n{stopped}"
            messages.append(CompilerMessage(filename, 0, "error", "limit", stopped))
        ok = returncode == 0 and not timed_out and out_path.is_file()
        cubin = out_path.read_bytes() if ok else b""
    if timed_out:
        messages.append(CompilerMessage(filename, 0, "error", "timeout",
                                        f"compilation exceeded {timeout:.0f} s (a compile bomb?)"))
    elif not ok and _OUT_OF_MEMORY.search(log):
        messages.append(CompilerMessage(filename, 0, "error", "limit",
                                        f"nvcc ran out of memory under its cap ({limits_for('nvcc').describe()}): "
                                        "set WARPFORGE_COMPILE_MEMORY_MB to raise it if the unit really needs more"))
    elif not ok and not any(m.severity == "error" for m in messages):
        messages.append(CompilerMessage(filename, 0, "error", "nvcc", headline(log)))
    res = BuildResult(ok=ok, arch=arch, cubin=cubin, resources=parse_ptxas(log), messages=messages, log=log,
                      seconds=seconds, cached=False, timed_out=timed_out, command=cmd)
    if use_cache and not timed_out:
        with _memory_lock:
            if len(_memory) >= _MEMORY_MAX:
                _memory.pop(next(iter(_memory)))
            _memory[key] = res
        if ok:  # a failure may be fixed outside the key (a header installed): it stays in this process only
            _store_disk(key, res)
    return res
