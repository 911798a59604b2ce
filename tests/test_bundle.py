"""The .vsix's bundled server (extension/bundle/bundle.py, extension/src/bundle.json): which wheel goes to the
shared ``bundled/libs`` and which to a per-CPython ``bundled/libs-cpXY``, checked on what pip really writes for
``--target`` (two small wheels made here, installed offline with the same flags the build uses), and the pins
the extension installs by.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = json.loads((ROOT / "extension" / "src" / "bundle.json").read_text())


def _bundle_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bundle_build", ROOT / "extension" / "bundle" / "bundle.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bundle = _bundle_module()


def _wheel(folder: Path, name: str, tag: str, files: dict[str, str], entry_points: str = "") -> Path:
    """A wheel as build backends write it: the files, METADATA, WHEEL with its tag, RECORD with hashes."""
    dist = f"{name}-1.0.dist-info"
    purelib = "true" if "none" in tag else "false"
    content = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
               f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"}
    if entry_points:
        content[f"{dist}/entry_points.txt"] = entry_points
    record = []
    for path, text in content.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    whl = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for path, text in content.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return whl


def test_abi_tags_decide_what_is_shared() -> None:
    assert bundle.abi_specific(["cp311-cp311-manylinux_2_17_x86_64"])  # numpy, pydantic-core, msgspec
    assert not bundle.abi_specific(["cp310-abi3-manylinux_2_17_x86_64"])  # tree-sitter-cuda: any CPython >= 3.10
    assert not bundle.abi_specific(["py3-none-manylinux2014_x86_64"])  # nvdisasm: a binary Python never loads
    assert not bundle.abi_specific(["py3-none-any"])
    assert bundle.version_tag("3.14") == "cp314"


def test_pip_target_output_is_split_into_shared_and_per_version_folders(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "purepkg", "py3-none-any", {"purepkg/__init__.py": "X = 1\n"},
           entry_points="[console_scripts]\npurecli = purepkg:X\n")
    for tag in ("cp311", "cp312"):
        _wheel(wheels, "binpkg", f"{tag}-{tag}-manylinux_2_17_x86_64",
               {"binpkg/__init__.py": f"ABI = {tag!r}\n", "binpkg.libs/libfake.so": tag})
    out = tmp_path / "bundled"
    libs = out / "libs"
    for i, version in enumerate(("3.11", "3.12")):
        stage = tmp_path / f"stage-{version}"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-index", "--find-links", str(wheels), "--target", str(stage), "--no-deps",
                        *bundle.platform_args(["manylinux_2_17_x86_64"], version), "purepkg==1.0", "binpkg==1.0"],
                       check=True)
        assert (stage / "bin" / "purecli").exists()  # what pip writes and the bundle must not carry
        bundle.distribute(stage, bundle.version_tag(version), libs, out / f"libs-{bundle.version_tag(version)}",
                          first=i == 0)
    for folder in out.iterdir():
        bundle.prune(folder)
    assert sorted(p.name for p in libs.iterdir()) == ["purepkg", "purepkg-1.0.dist-info"]
    for tag in ("cp311", "cp312"):
        versioned = out / f"libs-{tag}"
        assert sorted(p.name for p in versioned.iterdir()) == ["binpkg", "binpkg-1.0.dist-info", "binpkg.libs"]
        assert (versioned / "binpkg" / "__init__.py").read_text() == f"ABI = {tag!r}\n"


def test_every_install_is_pinned_and_matches_the_package() -> None:
    """pycuda and pip are installed by exact name==version, never a bare name; the lock pins every
    dependency of pyproject (less the extras installed otherwise) and the minimum Python is pyproject's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert re.fullmatch(r"pycuda==\d+(\.\d+)+", SPEC["pycuda"])
    assert re.fullmatch(r"pip==\d+(\.\d+)+", SPEC["pip"])
    gpu_extra = next(d for d in project["optional-dependencies"]["gpu"] if d.startswith("pycuda"))
    floor = tuple(int(x) for x in gpu_extra.split(">=")[1].split("."))
    assert tuple(int(x) for x in SPEC["pycuda"].split("==")[1].split(".")) >= floor
    assert project["requires-python"] == ">={}.{}".format(*SPEC["pythonMin"])
    assert SPEC["pythonVersions"][0] == "{}.{}".format(*SPEC["pythonMin"])
    lock = [line for line in (ROOT / "extension" / "bundle" / "requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.]+", line) for line in lock), lock
    pinned = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in lock}
    for dep in project["dependencies"]:
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ \[;]", dep)[0]).lower()
        assert name in pinned, f"{name} is a dependency of warpforge but not bundled"
    assert not pinned & {"pycuda", "ray"}


def test_gpu_packages_leave_the_bundle_at_the_locks_pin(tmp_path: Path) -> None:
    """numpy is installed with pycuda (Install GPU Support), not carried once per CPython in the .vsix: its pin
    there is the lock's, and the requirements the build installs are the lock less exactly those names."""
    lock = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower(): line
            for line in (ROOT / "extension" / "bundle" / "requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")}
    assert SPEC["gpuPackages"] == [lock["numpy"]]
    built = bundle.bundled_requirements(SPEC, tmp_path / "r.txt").read_text().splitlines()
    assert "numpy" not in {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in built}
    assert sorted(built) == sorted(v for k, v in lock.items() if k != "numpy")
    gpu_support = (ROOT / "extension" / "src" / "gpuSupport.ts").read_text()
    assert "PYCUDA_REQUIREMENT, ...GPU_PACKAGES]" in gpu_support  # the install command carries them


@pytest.mark.skipif(not (ROOT / "bundled" / "libs" / bundle.MANIFEST).exists(), reason="no bundle built here")
def test_a_built_bundle_serves_this_interpreter() -> None:
    """After `npm run bundle`: this interpreter imports the server from the bundle alone (-I: no site-packages,
    no PYTHONPATH of its own; the bundle's folders on sys.path as the extension puts them on PYTHONPATH), and
    the bundle carries no numpy (Install GPU Support brings it)."""
    tag = bundle.version_tag(f"{sys.version_info[0]}.{sys.version_info[1]}")
    paths = [str(ROOT / "bundled" / f"libs-{tag}"), str(ROOT / "bundled" / "libs")]
    assert not any((Path(p) / "numpy").exists() for p in paths), "numpy is bundled"
    code = (f"import sys; sys.path[:0] = {paths!r}; import warpforge.lsp.server, tree_sitter_cuda, pydantic_core; "
            "print(warpforge.__file__)")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(ROOT / "bundled" / "libs"))
