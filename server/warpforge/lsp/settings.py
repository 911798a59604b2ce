"""Server settings from ``initializationOptions`` and ``workspace/didChangeConfiguration``.

The API key arrives from the editor's secret store; it is kept out of ``repr`` and logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

_ALIASES = {
    "nvccPath": "nvcc_path", "apiKey": "api_key", "rayAddress": "ray_address", "evaluationBackend": "backend",
    "timeBudget": "time_budget", "maxDocumentSize": "max_document_bytes",
}


@dataclass
class Settings:
    strategy: str = "beam"
    #: maximum candidates per optimize job
    budget: int = 48
    #: wall-clock seconds per optimize job
    time_budget: float = 300.0
    model: str = ""
    api_key: str = field(default="", repr=False)
    nvcc_path: str = ""
    arch: str = ""
    #: "local" (the GPUs of this machine) or "python:MODULE:FUNCTION" — a factory
    #: ``f(job) -> evaluator`` for plugging in another evaluator (the CI tests use a deterministic one)
    backend: str = "local"
    ray_address: str = ""
    #: seconds to wait after an edit before re-analyzing
    debounce: float = 0.6
    #: documents larger than this (bytes of UTF-8) get a notice instead of analysis (see lsp/limits.py)
    max_document_bytes: int = 1_000_000

    def update(self, options: Any) -> list[str]:
        """Apply a (possibly nested under "warpforge") settings object; returns names of changed settings."""
        if not isinstance(options, dict):
            return []
        if isinstance(options.get("warpforge"), dict):
            options = options["warpforge"]
        known = {f.name: f for f in fields(self)}
        changed = []
        for key, value in options.items():
            name = _ALIASES.get(key, key)
            if name not in known or name.startswith("_") or value is None:
                continue
            current = getattr(self, name)
            try:
                value = type(current)(value)
            except (TypeError, ValueError):
                continue
            if value != current:
                setattr(self, name, value)
                changed.append(name)
        return changed

    def public(self) -> dict[str, Any]:
        """Settings safe to log or echo (the key is reduced to whether one is set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        out["api_key"] = "set" if self.api_key else ""
        return out
