"""The project's own build, read: include folders, defines, ``-std``, ``-arch`` and safe flags for one source file.

Why: a kernel that includes a project header (``#include "ops/helpers.cuh"``), or uses a macro the build
defines (``-DUSE_BF16``), compiles only with the project's include path and defines. Without them every
build WarpForge makes (hints, profiles, candidates) fails or, worse, compiles other code than the project
does. So every build (``compiler.build.compile_cubin``) asks here for the settings of the file it builds.

Where the settings come from, nearest first: for each folder from the file's own up to the root,
``warpforge.toml`` (its ``[build]`` table), then ``compile_commands.json``, then ``build/compile_commands.json``
(clangd's convention; CMake writes it with ``CMAKE_EXPORT_COMPILE_COMMANDS=ON``, Bear for Makefiles); a
``warpforge.toml`` may name a database elsewhere (``compile_commands = "out/rel/compile_commands.json"``). In a
compilation database the entry for the file itself is used, else one of a file in the same folder, else the
first CUDA entry (a header has no entry of its own; clangd guesses the same way).

What is kept is an allow-list, because the database is text in the user's workspace and nvcc turns options
into commands (``-ccbin`` names a program, ``-Xcompiler -fplugin=...`` loads one, ``--run`` runs the output):

* kept: ``-I``/``--include-path``, ``-isystem``/``--system-include``, ``-D``/``--define-macro``,
  ``-U``/``--undefine-macro``, ``-std``/``--std``, ``-arch``/``--gpu-architecture``/``-gencode``/
  ``--generate-code`` (read as an sm number),
  ``--expt-relaxed-constexpr``, ``--expt-extended-lambda``/``--extended-lambda``, ``-O0..3``, and the
  project's own math options (``-use_fast_math``, ``-ftz``/``-prec-div``/``-prec-sqrt``/``-fmad=true|false``):
  the measured code must be the code the project builds;
* ignored (meaningless for a device-only compile): the compiler itself, the source, ``-c``, ``-o X``,
  dependency-file options (``-M*``), ``-x cu``, host warnings (``-W...``), ``-g``, ``-fPIC``,
  ``-forward-unknown-to-host-compiler``;
* refused, with the reason: everything else, in particular ``-ccbin``, ``-Xcompiler``/``--compiler-options``,
  ``-Xlinker``, ``-Xptxas`` (WarpForge sets ptxas's options), ``--run``, ``-include``. An ``--options-file``
(CMake puts include folders in one) is read, once, and its options go through the same list.

A define whose value a shell could interpret is refused as ``compiler.toolchain.define_problem`` says; an include
folder that does not exist is dropped (nvcc would ignore it too). What was dropped is kept in ``dropped``.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from .messages import header_lines
from .toolchain import define_problem

#: ``-arch``/``-gencode`` values: ``sm_90``, ``sm_90a``, ``compute_90``, ``arch=compute_90,code=sm_90``
_SM = re.compile(r"(?:sm|compute)_(\d{2,3}[af]?)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STD = re.compile(r"c\+\+(11|14|17|20)")
_KEEP_EXACT = {
    "--expt-relaxed-constexpr": "--expt-relaxed-constexpr", "-expt-relaxed-constexpr": "--expt-relaxed-constexpr",
    "--expt-extended-lambda": "--extended-lambda", "-expt-extended-lambda": "--extended-lambda",
    "--extended-lambda": "--extended-lambda", "-extended-lambda": "--extended-lambda",
    "-use_fast_math": "-use_fast_math", "--use_fast_math": "-use_fast_math", "--use-fast-math": "-use_fast_math",
}
_KEEP = re.compile(r"--?(O[0-3]|(ftz|prec-div|prec-sqrt|fmad)=(true|false))")
_IGNORE_EXACT = {"-c", "--compile", "-g", "-fPIC", "-forward-unknown-to-host-compiler",
                 "--forward-unknown-to-host-compiler", "-MD", "-MMD", "-MP", "-lineinfo", "--generate-line-info",
                 "-G", "--device-debug", "-cubin", "-ptx", "--cubin", "--ptx", "-rdc=true", "-rdc=false", "-dc"}
#: options that take the next argument as their value and are ignored with it
_IGNORE_WITH_VALUE = {"-o", "--output-file", "-MF", "-MT", "-MQ", "-x", "--x", "--dependency-output"}
#: options refused outright (they name or load programs, or change what runs), with their value if they take one
_REFUSE_WITH_VALUE = {"-ccbin": "names the host compiler to run", "--compiler-bindir": "names the host compiler to run",
                      "-Xcompiler": "passes options to the host compiler (which can load plugins)",
                      "--compiler-options": "passes options to the host compiler (which can load plugins)",
                      "-Xlinker": "passes options to the linker", "--linker-options": "passes options to the linker",
                      "-Xptxas": "WarpForge sets ptxas's options itself",
                      "--ptxas-options": "WarpForge sets ptxas's options itself",
                      "-include": "forces a header into every unit", "--pre-include": "forces a header into every unit",
                      "--run-args": "runs the program"}


@dataclass(frozen=True)
class ProjectBuild:
    """What the project's build says about compiling one file, already checked (see the module's allow-list)."""

    #: the file the settings were read from (``.../compile_commands.json`` or ``.../warpforge.toml``)
    origin: str
    #: the source file whose entry was used (the file itself, a neighbour, or "" for warpforge.toml)
    entry: str = ""
    include_dirs: tuple[str, ...] = ()
    system_dirs: tuple[str, ...] = ()
    defines: tuple[tuple[str, str], ...] = ()
    undefines: tuple[str, ...] = ()
    std: str | None = None
    arch: str | None = None
    flags: tuple[str, ...] = ()
    #: ``option: why`` for every option not passed on
    dropped: tuple[str, ...] = ()

    def define_map(self) -> dict[str, str]:
        return dict(self.defines)

    def summary(self) -> str:
        """One line for logs and reports: where the settings came from and what they hold."""
        parts = [f"{len(self.include_dirs) + len(self.system_dirs)} include folder(s)",
                 f"{len(self.defines)} define(s)"]
        if self.std:
            parts.append(f"-std={self.std}")
        if self.arch:
            parts.append(f"-arch={self.arch}")
        if self.flags:
            parts.append(" ".join(self.flags))
        if self.dropped:
            parts.append(f"{len(self.dropped)} option(s) not passed on")
        return f"{self.origin}: " + ", ".join(parts)


def _arch_of(value: str) -> str | None:
    m = _SM.findall(value)
    return f"sm_{m[-1]}" if m else None


def read_arguments(args: list[str], directory: Path, origin: str, entry: str = "") -> ProjectBuild:
    """The settings in one compile command's arguments (the compiler at ``args[0]`` and the source included)."""
    incs: list[str] = []
    sys_incs: list[str] = []
    defines: dict[str, str] = {}
    undefs: list[str] = []
    std: str | None = None
    arch: str | None = None
    flags: list[str] = []
    dropped: list[str] = []

    def folder(value: str, into: list[str], opt: str) -> None:
        p = (directory / value).resolve() if not Path(value).is_absolute() else Path(value).resolve()
        if p.is_dir():
            if str(p) not in into:
                into.append(str(p))
        else:
            dropped.append(f"{opt}{value}: not a folder")

    def define(value: str) -> None:
        name, eq, val = value.partition("=")
        val = val if eq else "1"
        why = define_problem(name, val)
        if why is not None:
            dropped.append(f"-D{value}: {why}")
        else:
            defines[name] = val

    def split(opt: str, long: tuple[str, ...], i: int) -> tuple[str | None, int]:
        """The value of ``opt`` as ``-Ivalue``, ``--long=value`` or ``-I value``; (None, i) if ``a`` is not it."""
        a = args[i]
        for name in long:
            if a == name:
                return (args[i + 1] if i + 1 < len(args) else ""), i + 2
            if a.startswith(name + "="):
                return a[len(name) + 1:], i + 1
        if a == opt:
            return (args[i + 1] if i + 1 < len(args) else ""), i + 2
        if opt and a.startswith(opt) and len(a) > len(opt) and not opt.startswith("--"):
            return a[len(opt):].lstrip("=") if opt in ("-arch", "-std", "-gencode") else a[len(opt):], i + 1
        return None, i

    args = _expand_options_files(args, directory, dropped)
    i = 1
    src_name = Path(entry).name if entry else ""
    while i < len(args):
        a = args[i]
        if a in _IGNORE_WITH_VALUE:
            i += 2
            continue
        if a in _IGNORE_EXACT or a.startswith(("-W", "-M", "--Werror", "-Werror")) or (
                src_name and Path(a).name == src_name and not a.startswith("-")):
            i += 1
            continue
        if a[:2] in ("-o", "-x") and len(a) > 2 and not a.startswith("--"):
            i += 1  # -ofile / -xcu
            continue
        if a.startswith(tuple(f"{o}=" for o in _IGNORE_WITH_VALUE)):
            i += 1
            continue
        handled = False
        for opt, long, act in (("-isystem", ("--system-include",), "sys"), ("-I", ("--include-path",), "inc"),
                               ("-D", ("--define-macro",), "def"), ("-U", ("--undefine-macro",), "undef"),
                               ("-std", ("--std",), "std"), ("-arch", ("--gpu-architecture",), "arch"),
                               ("-gencode", ("--generate-code",), "arch")):
            value, nxt = split(opt, long, i)
            if value is None:
                continue
            handled = True
            if act == "sys":
                folder(value, sys_incs, "-isystem ")
            elif act == "inc":
                folder(value, incs, "-I")
            elif act == "def":
                define(value)
            elif act == "undef":
                if _IDENT.fullmatch(value):
                    undefs.append(value)
                else:
                    dropped.append(f"-U{value}: not a macro name")
            elif act == "std":
                if _STD.fullmatch(value):
                    std = value
                else:
                    dropped.append(f"-std={value}: not a C++ standard nvcc 13 takes for device code")
            else:
                got = _arch_of(value)
                if got is None:
                    dropped.append(f"{a}: no sm or compute architecture in it")
                else:
                    arch = arch or got  # the first one the project names
            i = nxt
            break
        if handled:
            continue
        if a in _KEEP_EXACT:
            if _KEEP_EXACT[a] not in flags:
                flags.append(_KEEP_EXACT[a])
            i += 1
            continue
        if _KEEP.fullmatch(a):
            flags.append(a)
            i += 1
            continue
        refused = next(((o, why) for o, why in _REFUSE_WITH_VALUE.items()
                        if a == o or a.startswith(o + "=") or a.startswith(o + ",")), None)
        if refused is not None:
            takes_next = a == refused[0]
            dropped.append(f"{a}{' ' + args[i + 1] if takes_next and i + 1 < len(args) else ''}: refused, {refused[1]}")
            i += 2 if takes_next else 1
            continue
        if not a.startswith("-"):
            dropped.append(f"{a}: another input file")
        elif a in ("--run", "-run", "-R"):
            dropped.append(f"{a}: refused, it runs the program")
        else:
            dropped.append(f"{a}: refused, not on the allow-list of options WarpForge passes on")
        i += 1
    return ProjectBuild(origin=origin, entry=entry, include_dirs=tuple(incs), system_dirs=tuple(sys_incs),
                        defines=tuple(defines.items()), undefines=tuple(undefs), std=std, arch=arch,
                        flags=tuple(flags), dropped=tuple(dropped))


_OPTIONS_FILE = ("--options-file", "-optf")


def _expand_options_files(args: list[str], directory: Path, dropped: list[str]) -> list[str]:
    """``args`` with each ``--options-file F`` replaced by F's options (CMake writes its include folders there).

    Reading the file runs nothing; its options go through the same allow-list as the rest. An options file
    inside an options file is not followed (it is dropped with a note)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = None
        if a in _OPTIONS_FILE and i + 1 < len(args):
            name, i = args[i + 1], i + 2
        elif a.startswith(tuple(o + "=" for o in _OPTIONS_FILE)):
            name, i = a.split("=", 1)[1], i + 1
        else:
            out.append(a)
            i += 1
            continue
        path = directory / name
        try:
            inner = shlex.split(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            dropped.append(f"--options-file {name}: not readable ({e})")
            continue
        for j, b in enumerate(inner):
            if b in _OPTIONS_FILE or b.startswith(tuple(o + "=" for o in _OPTIONS_FILE)):
                dropped.append(f"{b} in {name}: an options file inside an options file is not followed")
                inner[j] = ""
        out.extend(b for b in inner if b)
    return out


def _entry_args(entry: dict[str, object]) -> list[str]:
    args = entry.get("arguments")
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        return [str(a) for a in args]
    command = entry.get("command")
    if isinstance(command, str):
        return shlex.split(command)
    return []


def from_compile_commands(db: Path, file: Path) -> ProjectBuild | None:
    """The settings of ``file`` in a compilation database (None when it has no CUDA entry to go by)."""
    try:
        entries = json.loads(db.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entries, list):
        return None
    target = file.resolve()

    def path_of(e: dict[str, object]) -> Path:
        d = Path(str(e.get("directory", db.parent)))
        f = Path(str(e.get("file", "")))
        return (f if f.is_absolute() else d / f).resolve()

    usable = [e for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str) and _entry_args(e)]
    cuda = [e for e in usable if path_of(e).suffix in (".cu", ".cuh")]
    chosen = next((e for e in usable if path_of(e) == target), None) \
        or next((e for e in cuda if path_of(e).parent == target.parent), None) \
        or (cuda[0] if cuda else None)
    if chosen is None:
        return None
    directory = Path(str(chosen.get("directory", db.parent)))
    return read_arguments(_entry_args(chosen), directory, str(db), str(path_of(chosen)))


def _database_of(path: Path) -> Path | None:
    """The compilation database a ``warpforge.toml`` names (``compile_commands = "build/compile_commands.json"``)."""
    try:
        build = tomllib.loads(path.read_text(encoding="utf-8")).get("build")
    except (OSError, ValueError):
        return None
    db = build.get("compile_commands") if isinstance(build, dict) else None
    return (path.parent / db).resolve() if isinstance(db, str) and db else None


def _merged(base: ProjectBuild, extra: ProjectBuild, origin: str) -> ProjectBuild:
    """``base`` (a database's settings) with ``extra``'s (the toml's own keys) added; ``extra`` wins on defines."""
    def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
        return a + tuple(x for x in b if x not in a)

    return ProjectBuild(origin=origin, entry=base.entry, include_dirs=union(base.include_dirs, extra.include_dirs),
                        system_dirs=union(base.system_dirs, extra.system_dirs),
                        defines=tuple({**base.define_map(), **extra.define_map()}.items()),
                        undefines=union(base.undefines, extra.undefines), std=extra.std or base.std,
                        arch=extra.arch or base.arch, flags=union(base.flags, extra.flags),
                        dropped=base.dropped + extra.dropped)


def from_toml(path: Path, file: Path | None = None) -> ProjectBuild | None:
    """The settings of a ``warpforge.toml``'s ``[build]`` table: ``include``, ``defines``, ``std``, ``arch``, ``flags``,
    ``compile_commands``.

    ``defines`` is a table (``{ TILE = 16, USE_BF16 = true }``) or a list of ``NAME=VALUE`` strings. They are
    read through the same allow-list as a compile command: the file is the user's, but the checks are the same.
    ``compile_commands`` names a compilation database (relative to the toml) whose entry for ``file`` is used,
    with the table's other keys added: a CMake build folder that is not ``build/`` (the quick fix for a header
    nvcc did not find writes it).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    build = data.get("build")
    if not isinstance(build, dict):
        return None
    db = _database_of(path)
    if db is not None and file is not None:
        base = from_compile_commands(db, file) if db.is_file() else None
        rest = from_toml_table(build, path)
        if base is None:
            return replace(rest, dropped=(*rest.dropped, f"compile_commands = {db}: no CUDA entry to go by"))
        return _merged(base, rest, f"{path} ({db})")
    return from_toml_table(build, path)


def from_toml_table(build: dict[str, object], path: Path) -> ProjectBuild:
    """The ``[build]`` table's own keys (see ``from_toml``)."""
    args = ["nvcc"]
    includes = build.get("include", []) or []
    for inc in includes if isinstance(includes, list) else [includes]:
        args.append(f"-I{inc}")
    defs = build.get("defines", {}) or {}
    items = defs.items() if isinstance(defs, dict) else (str(d).partition("=")[::2] for d in defs)  # type: ignore[attr-defined]
    for name, value in items:
        v = ("1" if value else "0") if isinstance(value, bool) else str(value)
        args.append(f"-D{name}={v}" if v != "" else f"-D{name}")
    if build.get("std"):
        args.append(f"-std={build['std']}")
    if build.get("arch"):
        args.append(f"-arch={build['arch']}")
    flags = build.get("flags", []) or []
    args.extend(str(f) for f in (flags if isinstance(flags, list) else [flags]))
    return read_arguments(args, path.parent, str(path))


_lock = threading.Lock()
_cache: dict[tuple[str, str, float, float], ProjectBuild | None] = {}


def config_for(file: str | Path) -> Path | None:
    """The build description that governs ``file``: nearest ``warpforge.toml`` or compilation database."""
    p = Path(file)
    try:
        start = p.resolve().parent
    except OSError:
        return None
    for d in (start, *start.parents):
        for cand in (d / "warpforge.toml", d / "compile_commands.json", d / "build" / "compile_commands.json"):
            if cand.is_file():
                if cand.name == "warpforge.toml":
                    try:
                        if "build" not in tomllib.loads(cand.read_text(encoding="utf-8")):
                            continue
                    except (OSError, ValueError):
                        continue
                return cand
    return None


def source_file(file: str | Path) -> Path | None:
    """``file`` resolved when it names a file on disk; None for a made-up name (``kernel.cu``, a name with a NUL)."""
    try:
        p = Path(file)
        return p.resolve() if p.is_file() else None
    except (OSError, ValueError):
        return None


def project_build(file: str | Path) -> ProjectBuild | None:
    """The project's settings for ``file`` (None when the file is not on disk or no build description governs it).

    Cached by (file, description, its modification time): every build of a search asks, and a rebuilt
    database is read again."""
    p = source_file(file)
    if p is None:
        return None
    cfg = config_for(p)
    if cfg is None:
        return None
    try:
        db = _database_of(cfg) if cfg.name == "warpforge.toml" else None
        key = (str(p.resolve()), str(cfg), cfg.stat().st_mtime, db.stat().st_mtime if db and db.is_file() else 0.0)
    except OSError:
        return None
    with _lock:
        if key in _cache:
            return _cache[key]
    got = from_toml(cfg, p) if cfg.name == "warpforge.toml" else from_compile_commands(cfg, p)
    with _lock:
        _cache[key] = got
    return got


@dataclass(frozen=True)
class RefusedOption:
    """One option of the project's build that WarpForge does not pass on, where it is written."""

    origin: str
    #: the option as written (with its value when it takes one)
    option: str
    why: str
    #: 1-based line of ``origin`` where the option is written (0 when it cannot be found, e.g. an options file)
    line: int

    def warning(self) -> str:
        """One line in the compiler format: ``origin:line: warning: ...``."""
        where = f"{self.origin}:{self.line}" if self.line else self.origin
        return f"{where}: warning: `{self.option}` is not passed on to nvcc: {self.why}"


def refused_options(build: ProjectBuild) -> list[RefusedOption]:
    """The options of ``build`` that were not passed on (its ``dropped``), each with the line that writes it.

    Why: a dropped ``-ccbin`` or ``-Xcompiler`` used to vanish without a word, and the user wondered why a
    WarpForge build differs from theirs; each is shown where it is written (the CLI on stderr, the editor as
    a diagnostic on the file)."""
    try:
        lines = Path(build.origin).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    out: list[RefusedOption] = []
    for entry in build.dropped:
        option, _, why = entry.partition(": ")
        first = option.split()[0] if option.split() else option
        quoted = (json.dumps(first)[1:-1], first)
        line = next((i + 1 for i, text in enumerate(lines) if any(q in text for q in quoted)), 0)
        out.append(RefusedOption(build.origin, option, why, line))
    return out


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_refused(file: str | Path) -> list[str]:
    """The warning lines (``refused_options``) for ``file``'s project build, each config file once per process:
    what the CLI prints on stderr before it works on a file (empty when there is nothing new to say)."""
    build = project_build(file)
    if build is None or not build.dropped:
        return []
    with _warned_lock:
        if build.origin in _warned:
            return []
        _warned.add(build.origin)
    return [r.warning() for r in refused_options(build)]


def reached_headers(source: str, file: str | Path) -> set[Path]:
    """The headers ``source`` (the text of ``file``) reaches through its includes, in its own folder and the
    project's include folders: the files whose edit changes what a build of ``file`` compiles."""
    own = source_file(file)
    proj = project_build(file)
    dirs = ([str(own.parent)] if own is not None else []) + (
        [*proj.include_dirs, *proj.system_dirs] if proj is not None else [])
    return set(header_lines(source, own.parent if own is not None else None, dirs))
