"""How WarpForge was installed, and so how to add an optional extra (``gpu``, ``ray``, ``llm``) to it.

Advice is only useful when it can be pasted: ``pip install -e '.[gpu]'`` works in a checkout's root and
nowhere else, ``pip install 'warpforge[gpu]'`` is the command for a normal install, and the VS Code
extension's bundled server has neither (its interpreter is the user's, its libraries are in the extension):
there the extension's own command installs the pinned pycuda into the extension's storage.

Three ways, told apart without importing anything heavy:

- ``bundle``: the extension sets ``WARPFORGE_BUNDLE`` (its bundle's folder) when it runs its bundled server;
- ``checkout``: this package sits in a source tree (``server/warpforge`` next to the project's
  ``pyproject.toml``): an editable install or ``PYTHONPATH=server``;
- ``package``: anything else (a wheel in site-packages).
"""

from __future__ import annotations

import os
import shlex
from functools import cache
from pathlib import Path
from typing import Literal

How = Literal["bundle", "checkout", "package"]

#: set by the VS Code extension when it runs its bundled server (the bundle's folder)
BUNDLE_ENV = "WARPFORGE_BUNDLE"
#: set by the VS Code extension: pycuda's pinned requirement, which its install command installs
PYCUDA_ENV = "WARPFORGE_PYCUDA"
#: the extension's command that installs the pinned pycuda (extension/package.json)
GPU_COMMAND = "WarpForge: Install GPU Support (pycuda)"


@cache
def checkout_root() -> Path | None:
    """The source tree this package is imported from, or None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "warpforge"' in text else None


def how_installed() -> How:
    if os.environ.get(BUNDLE_ENV):
        return "bundle"
    return "checkout" if checkout_root() is not None else "package"


def pip_command(extra: str) -> str:
    """The shell command that adds ``extra`` to this installation (pip's, not the extension's)."""
    root = checkout_root()
    if root is None:
        return f"pip install 'warpforge[{extra}]'"
    try:
        here = Path.cwd().resolve() == root
    except OSError:
        here = False
    return f"pip install -e '.[{extra}]'" if here else f"pip install -e {shlex.quote(f'{root}[{extra}]')}"


def install_hint(extra: str = "gpu") -> str:
    """How to add ``extra`` here: the extension's command in its bundle (for ``gpu``, naming the pin it installs),
    else the pip command that fits a checkout or a normal install."""
    if how_installed() == "bundle":
        if extra == "gpu":
            pinned = os.environ.get(PYCUDA_ENV, "").strip()
            return f'VS Code command "{GPU_COMMAND}"' + (f", which installs {pinned}" if pinned else "")
        return (f"the editor's bundled server has no `{extra}` extra: set `warpforge.importStrategy` to "
                f"`fromEnvironment` and `pip install 'warpforge[{extra}]'` into the interpreter it uses")
    return pip_command(extra)
