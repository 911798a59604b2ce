"""Configuration of the LLM policy: models per role, limits, prices, what may be sent.

Why one dataclass: the editor (settings from its secret store), the CLI (environment) and the benchmark
suite configure the same knobs, and every knob that costs money or sends data has one visible default
here. The API key is held with ``repr=False`` and never appears in ``public()``, logs or notices.

Defaults are the current Claude models named in the installed SDK's ``ModelParam`` literals (checked
against the published model pages): Opus 5.5 plans and writes code, Sonnet 5.5 fixes compile errors and
reflects. Prices are per million tokens as published for those models; an unknown model is priced at the
most expensive known rate so that the cost caps err on the safe side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

ROLES = ("planner", "coder", "fixer", "reflector", "synth")

#: role -> model. Opus for the roles whose quality decides the search (what to try, the code itself);
#: Sonnet for the mechanical ones (repairing a compile error, summarizing outcomes).
DEFAULT_MODELS: dict[str, str] = {
    "planner": "claude-opus-5-5",
    "coder": "claude-opus-5-5",
    "fixer": "claude-sonnet-5-5",
    "reflector": "claude-sonnet-5-5",
    "synth": "claude-opus-5-5",
}

#: role -> max_tokens. Thinking tokens count toward it on current models (adaptive thinking is always
#: on for Opus 5.5), so code-writing roles get room for a whole kernel after thinking.
DEFAULT_MAX_TOKENS: dict[str, int] = {
    "planner": 12000,
    "coder": 24000,
    "fixer": 24000,
    "reflector": 4000,
    "synth": 24000,
}


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Cache writes/reads default to the usual 1.25× / 0.1× of input."""

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None

    @property
    def write(self) -> float:
        return self.cache_write if self.cache_write is not None else self.input * 1.25

    @property
    def read(self) -> float:
        return self.cache_read if self.cache_read is not None else self.input * 0.1


#: model-id prefix -> price (longest prefix wins, so dated ids like ``claude-opus-5-5-2026...`` match).
DEFAULT_PRICES: dict[str, Price] = {
    "claude-fable-5": Price(10.0, 50.0),
    "claude-mythos-5": Price(10.0, 50.0),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.50, 0.20),
    "claude-sonnet-5": Price(2.0, 10.0, 2.50, 0.20),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-6": Price(5.0, 25.0),
    "claude-opus-4-7": Price(5.0, 25.0),
    "claude-opus-4-8": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
}

#: what an unknown model is assumed to cost (the most expensive current rate): caps stay conservative
UNKNOWN_MODEL_PRICE = Price(10.0, 50.0)


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price:
    table = {**DEFAULT_PRICES, **(prices or {})}
    best: str | None = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else UNKNOWN_MODEL_PRICE


def _float_env(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        return None


@dataclass(frozen=True)
class LLMConfig:
    """Everything the LLM policy may be told. Construct with ``from_sources`` to merge env and settings."""

    #: explicit key (the editor's secret store); None: ``ANTHROPIC_API_KEY`` from the environment
    api_key: str | None = field(default=None, repr=False)
    #: Messages API endpoint; None: the SDK's default (or ``ANTHROPIC_BASE_URL``)
    base_url: str | None = None
    models: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    max_tokens: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_MAX_TOKENS))
    #: role -> ``output_config.effort`` ("low" ... "max"); absent: the model's default
    effort: Mapping[str, str] = field(default_factory=dict)
    stream: bool = True
    timeout_s: float = 600.0
    connect_timeout_s: float = 15.0
    #: retries of one request on 429 / 408 / 409 / 5xx / 529 overloaded / connection errors
    max_retries: int = 4
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    #: longest ``retry-after`` honoured; a longer one counts as the service being unavailable
    max_retry_after_s: float = 60.0
    cap_kernel_usd: float = 10.0
    cap_total_usd: float = 50.0
    prices: Mapping[str, Price] = field(default_factory=dict)
    #: hypotheses the planner is asked for per node
    hypotheses_per_node: int = 3
    #: LLM proposals only for nodes at most this deep (deeper nodes get the rules only)
    max_depth: int = 3
    #: also ask the model to rewrite variants that only the rules changed (tuning); off by default: the model
    #: rewrites the original and its own variants, the rules tune all of them, and crossover composes
    rewrite_rule_variants: bool = False
    #: coder/fixer calls in flight at once
    concurrency: int = 4
    #: local compile → fixer rounds per candidate before it is dropped as a recorded failure
    compile_fix_attempts: int = 2
    #: re-implement a hypothesis whose variant failed verification or compilation in the evaluator, once
    repair_failures: bool = True
    repairs_per_node: int = 2
    #: "kernel": the kernel, the declarations it needs, its spec and findings; "file": the whole file too
    send_context: str = "kernel"
    #: include snippets retrieved from the configured index in the planner's prompt
    send_retrieved: bool = True
    retrieved_k: int = 4
    #: how many SEARCH_DOCS calls the planner may make in one planning turn
    search_docs_rounds: int = 2
    prompt_cache: bool = True
    cache_ttl: str = "5m"
    #: ``strict: true`` on the structured-output tools
    strict_tools: bool = True
    #: run the reflector once this many new outcomes have accumulated
    reflect_every: int = 4

    # ----------------------------------------------------------------- queries
    def model_for(self, role: str) -> str:
        return self.models.get(role) or DEFAULT_MODELS.get(role, DEFAULT_MODELS["coder"])

    def max_tokens_for(self, role: str) -> int:
        return int(self.max_tokens.get(role) or DEFAULT_MAX_TOKENS.get(role, 8000))

    def price(self, model: str) -> Price:
        return price_for(model, self.prices)

    def resolved_key(self) -> str | None:
        """The key to use, or None: an explicit one wins over ``ANTHROPIC_API_KEY``."""
        key = self.api_key if self.api_key else os.environ.get("ANTHROPIC_API_KEY")
        return key.strip() if key and key.strip() else None

    def public(self) -> dict[str, Any]:
        """Settings safe to show or log: the key reduced to whether one is set."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "api_key":
                continue
            v = getattr(self, f.name)
            out[f.name] = dict(v) if isinstance(v, Mapping) else v
        out["prices"] = {k: vars(p) for k, p in self.prices.items()}
        out["api_key"] = "set" if self.resolved_key() else ""
        return out

    # ----------------------------------------------------------------- construction
    def with_model(self, model: str) -> LLMConfig:
        """Every role on one model (the editor's single ``model`` setting)."""
        return replace(self, models={r: model for r in ROLES})

    @classmethod
    def from_sources(cls, settings: Mapping[str, Any] | None = None, *, api_key: str | None = None) -> LLMConfig:
        """Defaults, then the environment, then ``settings`` (editor or suite), then an explicit key.

        Recognised settings (camelCase or snake_case): ``apiKey``, ``model`` (all roles), ``models``
        (role -> id), ``baseUrl``, ``capKernelUsd``, ``capTotalUsd``, ``stream``, ``sendContext``,
        ``hypothesesPerNode``, ``maxRetries``, ``timeoutS``, ``effort`` (role -> level). Environment:
        ``WARPFORGE_LLM_MODEL`` / ``WARPFORGE_LLM_MODEL_<ROLE>``, ``WARPFORGE_LLM_CAP_KERNEL``,
        ``WARPFORGE_LLM_CAP_TOTAL``, ``WARPFORGE_LLM_SEND`` ("kernel" | "file").
        """
        cfg = cls()
        env_models = dict(cfg.models)
        if m := os.environ.get("WARPFORGE_LLM_MODEL"):
            env_models = {r: m for r in ROLES}
        for r in ROLES:
            if m := os.environ.get(f"WARPFORGE_LLM_MODEL_{r.upper()}"):
                env_models[r] = m
        changes: dict[str, Any] = {"models": env_models}
        if (v := _float_env("WARPFORGE_LLM_CAP_KERNEL")) is not None:
            changes["cap_kernel_usd"] = v
        if (v := _float_env("WARPFORGE_LLM_CAP_TOTAL")) is not None:
            changes["cap_total_usd"] = v
        if (s := os.environ.get("WARPFORGE_LLM_SEND")) in ("kernel", "file"):
            changes["send_context"] = s
        cfg = replace(cfg, **changes)
        if settings:
            cfg = cfg.updated(settings)
        if api_key:
            cfg = replace(cfg, api_key=api_key)
        return cfg

    def updated(self, settings: Mapping[str, Any]) -> LLMConfig:
        """A copy with ``settings`` applied; unknown keys and values of the wrong type are ignored."""
        if isinstance(settings.get("llm"), Mapping):
            settings = {**settings, **settings["llm"]}
        aliases = {"apiKey": "api_key", "baseUrl": "base_url", "capKernelUsd": "cap_kernel_usd",
                   "capTotalUsd": "cap_total_usd", "sendContext": "send_context", "maxRetries": "max_retries",
                   "hypothesesPerNode": "hypotheses_per_node", "timeoutS": "timeout_s", "maxDepth": "max_depth",
                   "promptCache": "prompt_cache", "sendRetrieved": "send_retrieved",
                   "compileFixAttempts": "compile_fix_attempts", "rewriteRuleVariants": "rewrite_rule_variants",
                   "reflectEvery": "reflect_every", "repairFailures": "repair_failures"}
        known = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        cur = self
        for key, value in settings.items():
            name = aliases.get(key, key)
            if value is None or value == "":
                continue
            if name == "model" and isinstance(value, str):
                cur = cur.with_model(value)
                continue
            if name in ("models", "max_tokens", "effort") and isinstance(value, Mapping):
                base = dict(getattr(cur, name))
                base.update({str(k): v for k, v in value.items()})
                changes[name] = base
                continue
            if name not in known or name in ("prices", "models", "max_tokens", "effort"):
                continue
            current = getattr(cur, name)
            try:
                if isinstance(current, bool):
                    value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
                elif current is None:
                    value = str(value)
                else:
                    value = type(current)(value)
            except (TypeError, ValueError):
                continue
            changes[name] = value
        out = replace(cur, **changes)
        if out.send_context not in ("kernel", "file"):
            out = replace(out, send_context="kernel")
        return out
