"""Shared paths and helpers for the CPU test suite."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from warpforge.cuda import FileModel, Position, SourceText, parse
from warpforge.policy.whynot_hint import install as install_why_not

# The static analyzers as `warpforge hints` and the editor run them: WF113 joins them there (it asks the rules,
# which sit above the analyzers' package), so every test sees it, whichever test ran first.
install_why_not()

if TYPE_CHECKING:
    from warpforge.policy.offline import OfflinePolicy

ROOT = Path(__file__).resolve().parents[1]
KERNELS_DIR = ROOT / "kernels"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

#: every reference kernel file (one kernel each)
KERNEL_FILES = sorted(KERNELS_DIR.glob("*.cu"))

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: install the CUDA toolkit (or pip "
                                "nvidia-cuda-nvcc) to check that extracted kernels compile")


@functools.cache
def load(path: Path | str) -> tuple[SourceText, FileModel]:
    """Source and model of a file (cached: models are immutable)."""
    p = Path(path)
    if not p.is_absolute():
        p = FIXTURES / p
    src = SourceText(p.read_bytes())
    return src, parse(src.data)


def lsp_position(text: str, byte_offset: int) -> Position:
    """An independent byte offset -> (line, UTF-16 column) conversion, to check ``SourceText`` against."""
    before = text.encode("utf-8")[:byte_offset].decode("utf-8")
    line = before.count("\n")
    column_text = before[before.rfind("\n") + 1 :]
    return Position(line, len(column_text.encode("utf-16-le")) // 2)


def apply_lsp(text: str, edits: list[tuple[Position, Position, str]]) -> str:
    """Apply edits the way an editor does: by (line, UTF-16 column) ranges on its own string."""
    lines = text.split("\n")

    def index(pos: Position) -> int:
        start = sum(len(line) + 1 for line in lines[: pos.line])
        units = 0
        col = 0
        line = lines[pos.line]
        while units < pos.character:
            units += 2 if ord(line[col]) > 0xFFFF else 1
            col += 1
        return start + col

    out = text
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[: index(start)] + new + out[index(end) :]
    return out


def text_policy(text: str, kernel: str, path: str = "fixture.cu") -> OfflinePolicy:
    """The offline policy over every registered rule for ``kernel`` of a source text written in a test: what
    the rule tests ask of a kernel none of the rules was written against."""
    from warpforge.policy.offline import OfflinePolicy
    from warpforge.policy.rules import REGISTRY
    from warpforge.policy.rules import load as load_rules
    from warpforge.spec.resolve import load_spec

    load_rules()
    src = SourceText(text)
    model = parse(src.data)
    k = model.kernel(kernel)
    assert k is not None
    return OfflinePolicy(path, src, model, k, load_spec(path, kernel, text=text), families=set(REGISTRY))


@pytest.fixture(scope="module")
def gpu_backend() -> Iterator[Any]:
    """One GPU backend (its worker processes) per test module, for the GPU tests built on ``gpu_rules``.
    Requested only by tests that skip where no GPU is present."""
    from warpforge.gpu.evaluator import Backend

    b = Backend()
    yield b
    b.close()
