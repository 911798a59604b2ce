#!/usr/bin/env python3
"""Build ``bundled/`` for the .vsix: the ``warpforge`` package and every dependency the server imports, so that
installing the extension alone is enough (issue 19 item 1).

Why: the server used to need ``pip install warpforge``, a name that is not published, so a new user had no way
to install it. This follows the convention of Microsoft's Python-tools extension template: the libraries are
installed with ``pip install --target`` at package time (never committed) and the extension starts the server
with the user's interpreter and ``PYTHONPATH`` pointing at them.

Layout (``bundled/`` at the repository root, the .vsix root)::

    bundled/libs/            pure-Python wheels, abi3 and interpreter-independent binaries (tree-sitter-cuda,
                             nvdisasm), and warpforge itself built from this checkout
    bundled/libs-cp311/ ...  wheels built for one CPython version (tree-sitter, msgspec, pydantic-core, jiter,
                             orjson): one folder per version in ``bundle.json``'s ``pythonVersions``
    bundled/pip/             a pinned pip, so pycuda can be installed on first GPU use even by an interpreter
                             without pip (uv venvs, Debian's python3 without python3-pip)
    bundled/libs/warpforge_bundle.json   what was built: target, platforms, versions (the extension reads it)

A .vsix is platform-specific (``vsce package --target``) because binary wheels are: ``--target`` picks the
platform tags from ``extension/src/bundle.json``. The wheels for another platform are downloaded, never built
(``--only-binary=:all:``), so any Linux machine can build every target.

Not bundled: ``bundle.json``'s ``gpuPackages`` (numpy). Only GPU work imports it (the server's start, hints,
specs and the CLI's static commands never do: tests/test_lazy_imports.py), and one copy per CPython version
was 70 of the .vsix's 90 MB. "Install GPU Support" installs it with pycuda, at the lock's pin, for the one
interpreter that runs the server (pycuda needs the package index and numpy anyway).

Usage::

    python3 extension/bundle/bundle.py build --target linux-x64      # what `npm run package` runs
    python3 extension/bundle/bundle.py lock                          # re-pin requirements.txt from pyproject

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SPEC_FILE = ROOT / "extension" / "src" / "bundle.json"
LOCK_FILE = HERE / "requirements.txt"
#: written into bundled/libs; the extension finds the versions and target there
MANIFEST = "warpforge_bundle.json"
#: the server's optional extras are not bundled: pycuda is installed on first GPU use, ray is the user's choice
NOT_BUNDLED = ("pycuda", "ray")


def load_spec() -> dict[str, object]:
    """The shared facts (versions, pins, platform tags) that the extension and the tests read too."""
    spec: dict[str, object] = json.loads(SPEC_FILE.read_text())
    return spec


def version_tag(version: str) -> str:
    """``"3.11"`` -> ``"cp311"``: the folder name and the wheel ABI tag of that CPython."""
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}"


def wheel_tags(dist_info: Path) -> list[str]:
    """The ``Tag:`` lines of an installed wheel's ``WHEEL`` file (``cp311-cp311-manylinux_2_17_x86_64``)."""
    tags = []
    for line in (dist_info / "WHEEL").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Tag":
            tags.append(value.strip())
    return tags


def abi_specific(tags: list[str]) -> bool:
    """True when a wheel only loads in one CPython version: its ABI tag names that version (``cp311``), as
    opposed to ``abi3`` (any later CPython) or ``none`` (pure Python, or a binary Python never loads)."""
    return any(t.split("-")[1].startswith("cp") for t in tags if t.count("-") == 2)


def owners(stage: Path) -> dict[str, Path]:
    """Top-level entry of a ``pip install --target`` folder -> the ``.dist-info`` that installed it (from each
    RECORD). Entries no wheel claims (``bin/`` with console scripts pointing at the build machine's Python)
    are left out."""
    owned: dict[str, Path] = {}
    for dist in stage.glob("*.dist-info"):
        owned[dist.name] = dist
        record = dist / "RECORD"
        if not record.exists():
            continue
        for row in record.read_text().splitlines():
            first = row.split(",", 1)[0].split("/", 1)[0]
            if first and first != "..":
                owned.setdefault(first, dist)
    return owned


def gpu_package_names(spec: dict[str, object]) -> set[str]:
    """Normalised names of ``gpuPackages``: left out of the bundle, installed with GPU support."""
    return {normalise(p.split("==")[0]) for p in spec["gpuPackages"]}  # type: ignore[attr-defined]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def bundled_requirements(spec: dict[str, object], out: Path) -> Path:
    """The lock less ``gpuPackages``, written to ``out`` (what ``build`` installs)."""
    skip = gpu_package_names(spec)
    lines = [line for line in LOCK_FILE.read_text().splitlines()
             if line and not line.startswith("#") and normalise(line.split("==")[0]) not in skip]
    out.write_text("\n".join(lines) + "\n")
    return out


def pip(python: str, *args: str) -> None:
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-compile",
           *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def platform_args(tags: list[str], version: str) -> list[str]:
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", version]
    for tag in tags:
        args += ["--platform", tag]
    return args


def distribute(stage: Path, tag: str, libs: Path, versioned: Path, first: bool) -> None:
    """Move what pip installed for one CPython version: version-specific wheels to ``versioned``, the rest
    (identical for every version) to ``libs`` the first time only."""
    owned = owners(stage)
    specific_dists = {dist for dist in set(owned.values()) if abi_specific(wheel_tags(dist))}
    for entry, dist in sorted(owned.items()):
        specific = dist in specific_dists
        if not specific and not first:
            continue
        dest = versioned if specific else libs
        dest.mkdir(parents=True, exist_ok=True)
        shutil.move(str(stage / entry), str(dest / entry))


#: packages whose ``tests`` folders are their own test suites, never imported at run time (numpy's are 17 MB
#: per CPython version)
TEST_SUITES = ("numpy",)


def prune(folder: Path) -> None:
    """No byte code (it is the build machine's), no console scripts (their shebang is the build's Python) and
    no test suites of TEST_SUITES."""
    for cache in list(folder.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(folder / "bin", ignore_errors=True)
    for package in TEST_SUITES:
        for tests in list((folder / package).rglob("tests")):
            if tests.is_dir():
                shutil.rmtree(tests)


def size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def build(target: str, python: str, out: Path) -> None:
    spec = load_spec()
    platforms: dict[str, list[str]] = spec["targets"]  # type: ignore[assignment]
    if target not in platforms:
        sys.exit(f"unknown target {target!r}; bundle.json knows {', '.join(platforms)}")
    versions: list[str] = spec["pythonVersions"]  # type: ignore[assignment]
    start = time.monotonic()
    bundled = out / "bundled"
    shutil.rmtree(bundled, ignore_errors=True)
    libs = bundled / "libs"
    libs.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="warpforge-bundle-") as tmp:
        requirements = bundled_requirements(spec, Path(tmp) / "requirements.txt")
        for i, version in enumerate(versions):
            tag = version_tag(version)
            stage = Path(tmp) / tag
            pip(python, "--target", str(stage), "--no-deps", *platform_args(platforms[target], version),
                "-r", str(requirements))
            distribute(stage, tag, libs, bundled / f"libs-{tag}", first=i == 0)
    # warpforge itself, from this checkout (pure Python: one copy serves every version)
    pip(python, "--target", str(libs), "--no-deps", str(ROOT))
    pip(python, "--target", str(bundled / "pip"), "--no-deps", "--only-binary=:all:", str(spec["pip"]))
    for folder in bundled.iterdir():
        prune(folder)
    manifest = {
        "target": target,
        "platforms": platforms[target],
        "pythonVersions": versions,
        "warpforge": json.loads(subprocess.run(
            [python, "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); import warpforge; "
             "print(json.dumps(warpforge.__version__))", str(libs)], capture_output=True, text=True,
            check=True).stdout),
        "pip": spec["pip"],
        "pycuda": spec["pycuda"],
        "gpuPackages": spec["gpuPackages"],
    }
    (libs / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    sizes = ", ".join(f"{f.name} {size_mb(f):.0f} MB" for f in sorted(bundled.iterdir()))
    print(f"bundled/ for {target} in {time.monotonic() - start:.0f} s: {sizes}", flush=True)


def lock(python: str) -> None:
    """Pin the closure of pyproject's dependencies (less NOT_BUNDLED) for the first bundled version on
    linux-x64; the build installs exactly these with ``--no-deps`` for every version and target."""
    spec = load_spec()
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    deps = [d for d in deps if not d.startswith(NOT_BUNDLED)]
    versions: list[str] = spec["pythonVersions"]  # type: ignore[assignment]
    platforms: dict[str, list[str]] = spec["targets"]  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix="warpforge-lock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
               str(report), "--target", str(Path(tmp) / "t"),
               *platform_args(platforms["linux-x64"], versions[0]), *deps]
        subprocess.run(cmd, check=True)
        installs = json.loads(report.read_text())["install"]
    pins = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs)
    LOCK_FILE.write_text("# The server's dependencies, pinned (extension/bundle/bundle.py lock); bundled into the "
                         ".vsix by `bundle.py build`.\n" + "\n".join(pins) + "\n")
    print(f"{LOCK_FILE.relative_to(ROOT)}: {len(pins)} pins")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="install bundled/ for one target (the .vsix's --target)")
    b.add_argument("--target", default="linux-x64")
    b.add_argument("--python", default=sys.executable, help="the Python whose pip downloads the wheels")
    b.add_argument("--out", type=Path, default=ROOT, help="where bundled/ goes (default: the repository root)")
    lk = sub.add_parser("lock", help="re-pin requirements.txt")
    lk.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(a.target, a.python, a.out)
    else:
        lock(a.python)


if __name__ == "__main__":
    main()
