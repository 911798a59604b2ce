"""The prompts of the LLM roles, as versioned Markdown files next to this module.

Why files: a prompt is product behaviour that people review and change, so it lives where it can be read
as text and diffed; its version (the ``<!-- prompt: NAME v N -->`` first line) is recorded with every
call so a result can be traced to the prompt that produced it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

_HEADER = re.compile(r"<!--\s*prompt:\s*(?P<name>[\w-]+)\s+v(?P<version>\d+)\s*-->")


@dataclass(frozen=True)
class Prompt:
    name: str
    version: int
    text: str

    @property
    def tag(self) -> str:
        return f"{self.name}@v{self.version}"

    def sections(self) -> dict[str, str]:
        """``## heading`` -> body, for prompt files that hold several variants (synthesis strategies)."""
        out: dict[str, str] = {}
        current: str | None = None
        lines: list[str] = []
        for line in self.text.splitlines():
            if line.startswith("## "):
                if current is not None:
                    out[current] = "\n".join(lines).strip()
                current, lines = line[3:].strip(), []
            elif current is not None:
                lines.append(line)
        if current is not None:
            out[current] = "\n".join(lines).strip()
        return out


@functools.cache
def load(name: str) -> Prompt:
    """The prompt ``name`` (file ``NAME.md``); its header must name it and give a version."""
    text = resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
    m = _HEADER.search(text.splitlines()[0] if text else "")
    if m is None or m.group("name") != name:
        raise ValueError(f"prompt {name}.md must start with `<!-- prompt: {name} vN -->`")
    body = text.split("\n", 1)[1].strip() if "\n" in text else ""
    return Prompt(name, int(m.group("version")), body)
