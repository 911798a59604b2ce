"""Kernel Tuner on any kernel WarpForge optimizes: the peer WarpForge is compared with.

For each kernel, Kernel Tuner (``lang="PYCUDA"``, brute force) searches the space it can search without
rewriting code, and everything it launches comes from WarpForge's spec of the kernel (``plan``):

- **the source** is the translation unit WarpForge's evaluator builds (``cuda.extract.standalone``: the
  kernel and every declaration it needs), with a templated kernel explicitly instantiated with the spec's
  template arguments; Kernel Tuner is given the kernel's **mangled name** (read from an nvcc build of that
  unit, as the evaluator launches it), so C++ names, namespaces and templates need no ``extern "C"``.
  PyCUDA wraps a source in ``extern "C" { }`` unless the source text holds the words ``extern "C"``
  (Kernel Tuner's PyCUDA backend checks for them); the generated source starts with a comment holding them,
  so C++ linkage is kept (the cause of "this declaration may not have extern "C" linkage" on templates);
- **the space** is the spec's tunables (``@warpforge tune``), each a ``#define`` Kernel Tuner prepends, and,
  for a launch whose block is a constant the kernel only reads through ``blockDim`` (not a compile-time
  constant, not ``__launch_bounds__``) and whose grid follows it, the block size (32…1024; a 2-D block
  8…128 × 1…32);
- **the launch of each configuration** is the spec's own: grid, block and dynamic shared memory are the
  spec's expressions evaluated with that configuration (``KTPlan.launch``). Kernel Tuner computes the grid
  as ``ceil(problem_size / grid_div)``: the plan passes ``problem_size`` as a function returning the spec's
  grid and empty ``grid_div_*`` (a divisor of 1), a block dimension that is not a tunable as a derived
  parameter held to its value by a restriction, and the dynamic shared memory through ``smem_args``;
- **the arguments** are the spec's buffers and scalars at the spec's size (its distributions, seed 0).

Reports per kernel: the time of the kernel's own configuration and of the best one (both in Kernel
Tuner's harness, so its speedup is a ratio within one harness, like WarpForge's), configurations tried,
and time to the best. A kernel with no space to search reports its own configuration alone (speedup 1).

    python benchmarks/kt_suite.py --out kt.json [FILE[:KERNEL] ...]   (GPU machine, `gpu` + `bench` extras;
                                                                        default: every kernels/ file)

Each kernel runs in its own subprocess so one failing configuration space cannot stop the suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))

from warpforge.compiler.build import compile_cubin  # noqa: E402
from warpforge.compiler.project import project_build  # noqa: E402
from warpforge.cuda import SourceText, parse  # noqa: E402
from warpforge.cuda.extract import standalone  # noqa: E402
from warpforge.spec import load_spec  # noqa: E402
from warpforge.spec.expr import ExprError  # noqa: E402
from warpforge.spec.expr import parse as parse_expr  # noqa: E402
from warpforge.spec.model import KernelSpec, ResolvedSpec  # noqa: E402

#: the block sizes searched where the block size is free (a 1-D block the kernel reads from ``blockDim``)
BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
#: ... and of a 2-D block (x, y; at least 32 and at most 1024 threads)
BLOCK_SIZES_2D = ((8, 16, 32, 64, 128), (1, 2, 4, 8, 16, 32))
#: more configurations than this of the spec's tunables are not searched (brute force)
MAX_CONFIGS = 4096
#: why PyCUDA must not wrap the source: Kernel Tuner passes ``no_extern_c`` when these words are in it
LINKAGE_NOTE = ('// Kernel Tuner input made by WarpForge (benchmarks/kt_suite.py). C++ linkage is kept: the words\n'
                '// extern "C" in this comment stop PyCUDA from wrapping the source in them; the kernel is\n'
                '// launched by its mangled name.\n')
DIMS = ("block_size_x", "block_size_y", "block_size_z")
#: a ``__shared__`` array of a size fixed at compile time (``extern __shared__`` arrays follow the launch)
STATIC_SHARED = re.compile(r"(?<!extern )(?<!extern)\b__shared__\b[^;{}()]*\[\s*[^\]\s]")


class PlanError(ValueError):
    """Kernel Tuner cannot be given this kernel; the message says why."""


@dataclass
class KTPlan:
    """Everything ``tune_kernel`` is given for one kernel, derived from its spec (see the module docstring)."""

    file: str
    kernel: str
    #: the name Kernel Tuner launches: the kernel's mangled symbol in ``source``'s build
    symbol: str
    source: str
    #: tunable name -> values (the spec's tunables, then the free block size)
    params: dict[str, list[Any]]
    #: the kernel's own configuration (the spec's default)
    default: dict[str, Any]
    block_names: list[str]
    compiler_options: list[str]
    spec: KernelSpec
    resolved: ResolvedSpec
    #: block dimension -> the literal value or size name Kernel Tuner's block size replaces there (the free ones)
    free: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def tunables(self, config: dict[str, Any]) -> dict[str, str]:
        return {t.name: str(config.get(t.name, t.values[0])) for t in self.spec.tunables}

    def launch(self, config: dict[str, Any]) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory) of ``config``: the spec's launch evaluated with it."""
        r = self.spec.resolve(tunables=self.tunables(config))
        grid, block = list(r.grid), list(r.block)
        smem = int(r.smem)
        for i, token in self.free.items():
            b = int(config.get(DIMS[i], block[i]))
            block[i] = b
            grid[i] = self._with_block(self.spec.launch.grid[i], token, r, b)
            # dynamic shared memory written with the block (``256 * sizeof(float)``) follows it (1-D only)
            if len(self.free) == 1:
                smem = self._with_block(self.spec.launch.smem or "0", token, r, b)
        return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), smem

    @staticmethod
    def _with_block(expr: str, token: str, r: ResolvedSpec, b: int) -> int:
        """A launch expression evaluated with the block size ``b`` in place of the spec's ``token``."""
        if token.isdigit():
            return int(parse_expr(_substitute_literal(expr, int(token))).evaluate({**r.sizes, "__wf_b": b}))
        return int(parse_expr(expr).evaluate({**r.sizes, token: b}))

    def valid(self, config: dict[str, Any]) -> bool:
        """Kernel Tuner's restriction: a derived block parameter equals the block the spec gives ``config``."""
        try:
            _grid, block, _smem = self.launch(config)
        except (ExprError, ValueError, ZeroDivisionError):
            return False
        threads = block[0] * block[1] * block[2]
        return all(int(config.get(n, block[i])) == block[i] for i, n in enumerate(DIMS) if n in self.params) and \
            threads <= 1024 and (len(self.free) < 2 or threads >= 32)

    def restriction(self) -> Callable[..., bool]:
        """``valid`` as Kernel Tuner 1.5 calls a plain-function restriction: with the configuration as a dict
        where the space has several parameters (its "monolithic" form), with the bare values as positional
        arguments where it has one. (Given ``valid`` itself, a one-parameter space passed an ``int``: "'int'
        object has no attribute 'get'" on 20 of the wide sample's 50 kernels; a ``(function, names)`` tuple is
        dropped by Kernel Tuner 1.5's lambda parser: "If you mix lambdas and string-based restrictions".)"""
        names = list(self.params)

        def restriction(*values: Any) -> bool:
            if len(values) == 1 and isinstance(values[0], dict):
                return self.valid(values[0])
            return self.valid(dict(zip(names, values, strict=True)))

        return restriction

    def configs(self) -> list[dict[str, Any]]:
        names = list(self.params)
        out = [dict(zip(names, vals, strict=True)) for vals in itertools.product(*(self.params[n] for n in names))]
        return [c for c in out if self.valid(c)]

    def kt_kwargs(self) -> dict[str, Any]:
        """``tune_kernel``'s keyword arguments besides name, source, problem size, arguments and parameters."""
        kw: dict[str, Any] = {"lang": "PYCUDA", "verbose": False, "strategy": "brute_force",
                              "block_size_names": self.block_names, "grid_div_x": [], "grid_div_y": [],
                              "grid_div_z": [], "restrictions": [self.restriction()],
                              "compiler_options": self.compiler_options}
        if self.resolved.smem or any(self.launch(c)[2] for c in self.configs()):
            kw["smem_args"] = {"size": lambda p: self.launch(p)[2]}
        return kw

    def problem_size(self) -> Callable[[dict[str, Any]], tuple[int, int, int]]:
        """Kernel Tuner's problem size: with a divisor of 1, the grid itself, the spec's for the configuration."""
        return lambda p: self.launch(p)[0]


def _substitute_literal(expr: str, b: int) -> str:
    """``expr`` with the block literal ``b`` as ``__wf_b`` (and ``b - 1`` as ``(__wf_b - 1)``)."""
    out = re.sub(rf"(?<![\w.]){b - 1}(?![\w.])", "(__wf_b - 1)", expr) if b > 1 else expr
    return re.sub(rf"(?<![\w.]){b}(?![\w.])", "__wf_b", out)


def _free_dims(spec: KernelSpec, body: str, r: ResolvedSpec) -> dict[int, str]:
    """The block dimensions Kernel Tuner may vary ({} when none), with the token each replaces: every dimension
    of the block must be a literal or a size name that no tunable sets and that the kernel never names itself
    (it reads the block through ``blockDim``; no ``__launch_bounds__``), and the same dimension of the grid must
    follow it (its expression names the token and gives the spec's grid with it)."""
    block, grid = spec.launch.block, spec.launch.grid
    if "blockDim" not in body or "__launch_bounds__" in body or len(grid) < len(block) or len(block) > 2:
        return {}
    if STATIC_SHARED.search(body):
        # a tile of fixed size in shared memory indexed by threadIdx (a tiled matmul's ``s_a[16 * 16]``): another
        # block size reads or writes past it (illegal memory accesses that killed Kernel Tuner's context for
        # every configuration after them, cuda_programming's tiled matrixMul on the wide sample)
        return {}
    tunables = {t.name for t in spec.tunables}
    free: dict[int, str] = {}
    for i, raw in enumerate(block):
        token = raw.strip()
        if token in tunables or re.search(rf"(?<![\w.]){re.escape(token)}(?![\w.])", body):
            return {}
        if token.isdigit():
            expr, env = _substitute_literal(grid[i], int(token)), {**r.sizes, "__wf_b": int(token)}
            if "__wf_b" not in expr:
                return {}
        elif token in r.sizes and re.search(rf"(?<![\w.]){re.escape(token)}(?![\w.])", grid[i]):
            expr, env = grid[i], dict(r.sizes)
        else:
            return {}
        try:
            if int(parse_expr(expr).evaluate(env)) != r.grid[i]:
                return {}
        except (ExprError, ValueError, ZeroDivisionError):
            return {}
        free[i] = token
    return free


def plan(path: Path, kernel: str | None = None, arch: str = "sm_90") -> KTPlan:
    """Kernel Tuner's inputs for ``kernel`` of ``path`` (the only kernel when None); ``PlanError`` says why not.
    Builds the translation unit once with nvcc (CPU only) to read the kernel's mangled name."""
    text = path.read_text(encoding="utf-8")
    src = SourceText(text)
    model = parse(src.data)
    if kernel is None:
        if len(model.kernels) != 1:
            raise PlanError(f"{path.name} has {len(model.kernels)} kernels: name one as FILE:KERNEL")
        kernel = model.kernels[0].name
    k = model.require(kernel, str(path))
    spec = load_spec(path, kernel, text)
    r = spec.resolve()
    inst = tuple(spec.template_args) if k.template_params else None
    tu = standalone(src, model, k, filename=str(path), instantiate=inst)
    notes: list[str] = []
    # tunables the template arguments or the buffer sizes depend on would change the symbol or the problem
    in_template = " ".join(spec.template_args)
    counts = [a.count for a in r.args]
    params: dict[str, list[Any]] = {}
    for t in spec.tunables:
        if re.search(rf"\b{re.escape(t.name)}\b", in_template):
            notes.append(f"{t.name} is kept at {t.values[0]}: the template arguments name it")
            continue
        keep = []
        for v in t.values:
            other = spec.resolve(tunables={t.name: str(v)})
            if [a.count for a in other.args] == counts:
                keep.append(_number(v))
        if len(keep) > 1:
            params[t.name] = keep
    block_names: list[str] = []
    body = src.slice(k.span)
    free = {} if params else _free_dims(spec, body, r)
    for i in range(3):  # Kernel Tuner reads three names; a dimension the spec does not give is 1
        expr = spec.launch.block[i].strip() if i < len(spec.launch.block) else ""
        block_names.append(expr if expr in params else DIMS[i])
    if len(free) == 1:
        params["block_size_x"] = sorted({*BLOCK_SIZES, r.block[0]})
    elif len(free) == 2:
        params["block_size_x"] = sorted({*BLOCK_SIZES_2D[0], r.block[0]})
        params["block_size_y"] = sorted({*BLOCK_SIZES_2D[1], r.block[1]})
    default = {n: params[n][0] for n in params if n in {t.name for t in spec.tunables}}
    for i in free:
        default[DIMS[i]] = r.block[i]
    # derived block dimensions: every value the spec's block takes over the configurations, held by ``valid``
    probe = KTPlan(str(path), kernel, "", "", dict(params), default, block_names, [], spec, r, free)
    combos = probe.configs() if params else [{}]
    if len(combos) > MAX_CONFIGS:
        raise PlanError(f"{len(combos)} configurations of the spec's tunables: more than {MAX_CONFIGS}")
    for i, name in enumerate(block_names[: len(spec.launch.block)]):
        if name in DIMS and name not in params:
            values = sorted({probe.launch(c)[1][i] for c in combos})
            params[name] = values
            default[name] = r.block[i]
    build = compile_cubin(tu, arch=arch, defines={t.name: str(t.values[0]) for t in spec.tunables},
                          filename=str(path))
    res = build.resources_for(kernel) if build.ok else None
    if res is None:
        first = next((m.text for m in build.messages if m.severity == "error"), "no entry function")
        raise PlanError(f"{path.name}: the kernel's translation unit does not build: {first}")
    proj = project_build(str(path))
    options = [f"-I{path.resolve().parent}", *(f"-I{d}" for d in (proj.include_dirs if proj is not None else ()))]
    if all(len(v) == 1 for v in params.values()):
        notes.append("no launch-parameter space: the spec's own launch only")
    return KTPlan(str(path), kernel, res.mangled, LINKAGE_NOTE + tu, params, default, block_names, options, spec,
                  r, free, notes)


def _number(v: Any) -> Any:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() else f


def arguments(p: KTPlan) -> list[Any]:
    """The kernel's arguments as numpy values: the spec's buffers (its distributions, seed 0) and scalars."""
    import numpy as np

    rng = np.random.default_rng(0)
    np_types = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "uint32": np.uint32,
                "int64": np.int64, "uint64": np.uint64, "float16": np.float16, "int8": np.int8, "uint8": np.uint8,
                "int16": np.int16, "uint16": np.uint16}
    out: list[Any] = []
    for a in p.resolved.args:
        t = np_types.get(a.dtype, np.float32)
        if a.count is None:
            out.append(t(a.value if a.value is not None else 0))
            continue
        d = a.distribution
        if d is None or d.kind == "zeros":
            arr = np.zeros(a.count, dtype=t)
        elif d.kind == "int":
            arr = rng.integers(int(d.a), int(d.b), a.count).astype(t)
        elif d.kind == "normal":
            arr = rng.normal(d.a, d.b, a.count).astype(t)
        elif d.kind == "const":
            arr = np.full(a.count, d.a, dtype=t)
        else:
            arr = rng.uniform(d.a, d.b, a.count).astype(t)
        out.append(arr)
    return out


def run_one(path: Path, kernel: str | None) -> dict[str, Any]:
    """In a subprocess: tune one kernel with Kernel Tuner."""
    from kernel_tuner import tune_kernel

    name = path.name + (f":{kernel}" if kernel else "")
    try:
        p = plan(path, kernel)
    except PlanError as e:
        return {"file": name, "skipped": str(e)}
    t0 = time.perf_counter()
    params = p.params
    results, envinfo = tune_kernel(p.symbol, p.source, p.problem_size(), arguments(p), params, **p.kt_kwargs())
    wall = time.perf_counter() - t0
    ok = [x for x in results if isinstance(x.get("time"), (int, float))]
    if not ok:
        return {"file": name, "kernel": p.kernel, "error": "no configuration ran", "notes": p.notes}
    best_i = min(range(len(ok)), key=lambda i: ok[i]["time"])
    default = next((x for x in ok if all(x.get(k) == v for k, v in p.default.items())), None)
    # time to best: compile + verification + benchmark time of the configurations up to the best one
    spent = 0.0
    for x in ok[: best_i + 1]:
        spent += sum(float(x.get(k, 0.0) or 0.0) for k in ("compile_time", "verification_time", "benchmark_time",
                                                            "framework_time", "strategy_time"))
    return {"file": name, "kernel": p.kernel, "symbol": p.symbol, "configs": len(ok), "wall_s": round(wall, 2),
            "default_ms": default["time"] if default else None, "best_ms": ok[best_i]["time"],
            "best": {k: ok[best_i][k] for k in params}, "default": p.default,
            "speedup": (default["time"] / ok[best_i]["time"]) if default else None,
            "seconds_to_best": round(spent / 1000.0, 2), "verified": False, "notes": p.notes,
            "version": envinfo.get("kernel_tuner_version")}


def _targets(names: list[str]) -> list[tuple[Path, str | None]]:
    if not names:
        return [(f, None) for f in sorted((ROOT / "kernels").glob("*.cu"))]
    out: list[tuple[Path, str | None]] = []
    for n in names:
        file, _, kernel = n.partition(":") if not Path(n).is_file() else (n, "", "")
        out.append((Path(file), kernel or None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="kt_suite.json")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per kernel")
    ap.add_argument("files", nargs="*", help="FILE or FILE:KERNEL (default: every kernels/ file)")
    args = ap.parse_args()
    if args.one:
        file, _, kernel = args.one.partition("::")
        print(json.dumps(run_one(Path(file), kernel or None)))
        return
    rows = []
    for f, kernel in _targets(args.files):
        label = f.name + (f":{kernel}" if kernel else "")
        try:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one", f"{f}::{kernel or ''}"], capture_output=True,
                                  text=True, timeout=args.timeout)
            process_s = time.perf_counter() - t0  # Kernel Tuner's whole run, start-up (imports, data) included
            line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            row = json.loads(line) if line.startswith("{") else {"file": label, "error": proc.stderr[-500:]}
            row["process_s"] = round(process_s, 2)
        except subprocess.TimeoutExpired:
            row = {"file": label, "error": "timeout"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=2))  # kept row by row: a stopped run keeps what it did
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
