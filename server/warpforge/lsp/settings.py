"""Server settings from ``initializationOptions`` and ``workspace/didChangeConfiguration``.

The API key arrives from the editor's secret store; it is kept out of ``repr`` and logs. What the editor shows
(code lenses on or off, hint codes excluded, the least severity shown) is decided here, on the server, so
every client gets the same filter and the CLI, which never reads these settings, is unaffected.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, fields
from typing import Any

from .. import defaults

log = logging.getLogger(__name__)

_ALIASES = {
    "nvccPath": "nvcc_path", "apiKey": "api_key", "rayAddress": "ray_address", "evaluationBackend": "backend",
    "timeBudget": "time_budget", "maxDocumentSize": "max_document_bytes", "storePath": "store_path",
    "keepLaunch": "keep_launch",
}
#: the editor's dotted settings, by the name the extension sends and by their own name
_DOTTED = {"codeLens.enabled": "code_lens_enabled", "hints.exclude": "hints_exclude",
           "hints.minSeverity": "hints_min_severity"}
_ALIASES.update(_DOTTED)
_ALIASES.update({"codeLensEnabled": "code_lens_enabled", "hintsExclude": "hints_exclude",
                 "hintsMinSeverity": "hints_min_severity"})
#: the severities a hint may have, most severe first (``hints_min_severity`` names one)
SEVERITIES = ("error", "warning", "info", "hint")
_EDITOR_NAMES = {v: k for k, v in _ALIASES.items()} | {v: k for k, v in _DOTTED.items()}
#: numeric settings and their lower bound (exclusive for the budgets: a job of 0 candidates does nothing)
_MINIMUM = {"budget": (1, True), "time_budget": (0.0, False), "debounce": (0.0, True), "max_document_bytes": (1, True)}


@dataclass
class Settings:
    strategy: str = defaults.STRATEGY
    #: maximum candidates per optimize job
    budget: int = defaults.BUDGET
    #: wall-clock seconds per optimize job
    time_budget: float = defaults.TIME_BUDGET
    model: str = ""
    api_key: str = field(default="", repr=False)
    nvcc_path: str = ""
    arch: str = ""
    #: "local" (the GPUs of this machine) or "python:MODULE:FUNCTION" — a factory
    #: ``f(job) -> evaluator`` for plugging in another evaluator (the CI tests use a deterministic one)
    backend: str = defaults.EVALUATION_BACKEND
    ray_address: str = ""
    #: the workspace store's file or folder; "" keeps it in the user's cache, keyed by the workspace
    store_path: str = ""
    #: search only variants that keep the kernel's launch contract (no host launch site changes)
    keep_launch: bool = False
    #: seconds to wait after an edit before re-analyzing
    debounce: float = 0.6
    #: documents larger than this (bytes of UTF-8) get a notice instead of analysis (see lsp/limits.py)
    max_document_bytes: int = 1_000_000
    #: code lenses above kernels (Optimize · Profile · spec · the result); off: none at all
    code_lens_enabled: bool = True
    #: hint codes not shown ("WF104"), or code prefixes ending in * ("WF2*": every profiler finding)
    hints_exclude: list[str] = field(default_factory=list)
    #: the least severe hint shown: error | warning | info | hint (all)
    hints_min_severity: str = "hint"
    #: why each rejected value was rejected since the last ``take_rejected`` (for the editor to show)
    _rejected: list[str] = field(default_factory=list, repr=False)

    def update(self, options: Any) -> list[str]:
        """Apply a (possibly nested under "warpforge") settings object; returns names of changed settings.

        A value of the wrong type or out of range (``budget: "lots"``, ``timeBudget: -5``) keeps the setting
        as it was and is logged with what to write instead — an optimize job must never start on it."""
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
            problem = _check(name, value, current)
            if problem is not None:
                msg = (f"setting warpforge.{_EDITOR_NAMES.get(name, name)} = {value!r} ignored: {problem}; "
                       f"keeping {current!r}")
                log.warning("%s", msg)
                self._rejected.append(msg)
                continue
            value = list(value) if isinstance(current, list) else type(current)(value)
            if value != current:
                setattr(self, name, value)
                changed.append(name)
        return changed

    def shows(self, code: str, severity: str) -> bool:
        """Whether a hint of ``code`` at ``severity`` (one of ``SEVERITIES``) is shown to the user."""
        if SEVERITIES.index(severity) > SEVERITIES.index(self.hints_min_severity):
            return False
        return not any(code == x or (x.endswith("*") and code.startswith(x[:-1])) for x in self.hints_exclude)

    def take_rejected(self) -> list[str]:
        """The rejection messages since the last call (each said once)."""
        out, self._rejected = self._rejected, []
        return out

    def public(self) -> dict[str, Any]:
        """Settings safe to log or echo (the key is reduced to whether one is set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        out["api_key"] = "set" if self.api_key else ""
        return out


def _check(name: str, value: Any, current: Any) -> str | None:
    """Why ``value`` cannot be setting ``name`` (whose value now is ``current``); None when it can."""
    kind = type(current)
    if kind is bool:
        return None if isinstance(value, bool) else "expected true or false"
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "expected a list of hint codes such as [\"WF104\", \"WF2*\"]"
        return None
    if name == "hints_min_severity":
        return None if value in SEVERITIES else f"expected one of {', '.join(SEVERITIES)}"
    if kind is str:
        return None if isinstance(value, str) else "expected text"
    if kind is bool:
        return None if isinstance(value, bool) else "expected true or false"
    # JSON numbers only: "48" or true are not a budget, whatever Python's int() would make of them.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a {'whole ' if kind is int else ''}number"
    if kind is int and value != int(value):
        return "expected a whole number"
    if not math.isfinite(value):
        return "expected a finite number"
    bound = _MINIMUM.get(name)
    if bound is not None:
        low, inclusive = bound
        if value < low or (value == low and not inclusive):
            return f"must be {'at least' if inclusive else 'above'} {low}"
    return None
