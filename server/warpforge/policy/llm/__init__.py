"""The LLM policy (Anthropic): planner, coder, fixer, reflector; natural-language synthesis.

Everything here degrades: with no key, no network or the cost caps reached, ``MixedPolicy`` says so once
and the search continues with WarpForge's own transformations. See docs/llm.md for what is sent and what
it costs.
"""

from .client import (
    BudgetExceeded,
    KeyRejected,
    Ledger,
    LLMClient,
    LLMError,
    MalformedOutput,
    NoKeyError,
    RequestRejected,
    ServiceUnavailable,
    process_ledger,
)
from .config import DEFAULT_MODELS, LLMConfig, Price
from .policy import LLMPolicy, MixedPolicy, policy_for_request
from .synth import SynthResult, synthesize

__all__ = [
    "DEFAULT_MODELS",
    "BudgetExceeded",
    "KeyRejected",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMPolicy",
    "Ledger",
    "MalformedOutput",
    "MixedPolicy",
    "NoKeyError",
    "Price",
    "RequestRejected",
    "ServiceUnavailable",
    "SynthResult",
    "policy_for_request",
    "process_ledger",
    "synthesize",
]
