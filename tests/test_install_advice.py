"""Install advice that can be pasted where WarpForge runs: ``pip install -e`` only in a checkout, the package's
extra for a normal install, the extension's own command in the VS Code bundle (``warpforge.install``)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT
from warpforge import install
from warpforge.gpu.supervisor import install_hint, no_gpu_message


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARPFORGE_BUNDLE", raising=False)
    monkeypatch.delenv("WARPFORGE_PYCUDA", raising=False)


def test_a_checkout_gets_an_editable_install_of_the_extra(plain: None, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    src = Path(install.__file__).resolve().parents[2]  # the tree these tests import warpforge from
    assert install.checkout_root() == src and install.how_installed() == "checkout"
    monkeypatch.chdir(src)
    assert install_hint() == "pip install -e '.[gpu]'"
    monkeypatch.chdir(tmp_path)  # elsewhere '.' is not the checkout: the path is spelled out
    assert install_hint() == f"pip install -e '{src}[gpu]'"
    assert install.install_hint("ray") == f"pip install -e '{src}[ray]'"
    assert f"run `pip install -e '{src}[gpu]'` on a machine with a GPU" in no_gpu_message("bench", "no GPU")


def test_the_vscode_bundle_names_the_extensions_command(plain: None, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("WARPFORGE_BUNDLE", str(tmp_path))
    assert install.how_installed() == "bundle"
    assert install_hint() == 'VS Code command "WarpForge: Install GPU Support (pycuda)"'
    monkeypatch.setenv("WARPFORGE_PYCUDA", "pycuda==2026.1")
    assert install_hint().endswith(", which installs pycuda==2026.1") and "pip" not in install_hint()
    ray = install.install_hint("ray")  # no such command in the bundle: how to run from an environment instead
    assert "warpforge.importStrategy" in ray and "fromEnvironment" in ray
    # The extension's command exists under that title.
    assert '"title": "Install GPU Support (pycuda)"' in (ROOT / "package.json").read_text(encoding="utf-8")


def test_an_installed_package_gets_the_extra_by_name(tmp_path: Path) -> None:
    """A copy of the package outside any source tree (as a wheel puts it in site-packages)."""
    site = tmp_path / "site-packages"
    subprocess.run([sys.executable, "-c", "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2], "
                    "ignore=shutil.ignore_patterns('__pycache__'))", str(Path(install.__file__).parent),
                    str(site / "warpforge")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("WARPFORGE_BUNDLE", "WARPFORGE_PYCUDA")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])
    r = subprocess.run([sys.executable, "-c", "from warpforge import install; print(install.how_installed()); "
                        "print(install.install_hint('gpu'))"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120, check=True)
    assert r.stdout.splitlines() == ["package", "pip install 'warpforge[gpu]'"], r.stderr
