"""The Anthropic client of the LLM policy: one place for retries, streaming, caching, cost and caps.

Why a wrapper around the official SDK rather than the SDK's own retry loop: a search makes dozens of
calls per kernel and a user pays for each, so every call goes through the same gate — a hard cost cap
checked *before* the request (spend so far, plus what is in flight, plus this call's worst case must fit),
an accounting of what each call really cost (cached and uncached input, output), retries with backoff
that honour ``retry-after`` on 429 / 5xx / 529 overloaded, and errors mapped to a few kinds the policy
knows how to act on (degrade to the offline policy, record a failure, carry on).

Structured outputs (``structured``) are tool calls parsed strictly: the model answers by calling a tool
whose input is validated against its schema; a malformed answer is fed back once (as an error
``tool_result``) and then becomes a ``MalformedOutput`` — a recorded failure, never a crash. Helper tools
(SEARCH_DOCS) are executed mid-generation and their results returned to the model.

The API key is given to the SDK and nowhere else: it is not logged, not put in errors or notices.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import prompts
from .config import LLMConfig, Price
from .schema import ToolSpec, validate

if TYPE_CHECKING:  # the SDK is imported by the first client made: ~1 s that a CLI call or a language
    import anthropic  # server with no key never needs to pay (tests/test_lazy_imports.py)

log = logging.getLogger("warpforge.llm")

#: status codes worth retrying: timeout, conflict, rate limit, server errors, 529 overloaded
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
#: error types of an ``error`` event inside a 200 stream that are transient
RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})


# --------------------------------------------------------------------------- errors
class LLMError(Exception):
    """Something the LLM policy cannot get past for this call.

    ``degrade`` says whether the policy should stop using the model for the rest of the job (no key,
    network down, key rejected, cost cap reached) or only give up on this one call (malformed output).
    """

    kind = "error"
    degrade = True

    def __init__(self, message: str, *, role: str = "") -> None:
        super().__init__(message)
        self.role = role


class NoKeyError(LLMError):
    kind = "no_key"


class BudgetExceeded(LLMError):
    kind = "budget"


class ServiceUnavailable(LLMError):
    """Network errors, timeouts, or retries on 429/5xx/529 exhausted."""

    kind = "unavailable"


class KeyRejected(LLMError):
    kind = "key_rejected"


class RequestRejected(LLMError):
    """A 4xx that retrying will not fix (bad request, unknown model, too large)."""

    kind = "request"


class MalformedOutput(LLMError):
    """The model did not produce valid structured output, even after being told what was wrong."""

    kind = "malformed"
    degrade = False


class _StreamJSONError(Exception):
    """The SDK could not parse a tool's streamed JSON (a malformed answer, not a transport failure)."""


# --------------------------------------------------------------------------- accounting
@dataclass
class Spend:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    usd: float = 0.0

    def add(self, other: Spend) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.usd += other.usd

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_write_tokens": self.cache_write_tokens, "cache_read_tokens": self.cache_read_tokens,
                "usd": round(self.usd, 6)}


def usage_cost(usage: Any, price: Price) -> Spend:
    """What one response's ``usage`` cost: uncached input, cache writes (5 min / 1 h), cache reads, output."""
    def num(name: str, src: Any = usage) -> int:
        v = getattr(src, name, None) if not isinstance(src, Mapping) else src.get(name)
        return int(v) if isinstance(v, (int, float)) else 0

    inp = num("input_tokens")
    out = num("output_tokens")
    write = num("cache_creation_input_tokens")
    read = num("cache_read_input_tokens")
    creation = getattr(usage, "cache_creation", None) if not isinstance(usage, Mapping) else usage.get(
        "cache_creation")
    write_1h = num("ephemeral_1h_input_tokens", creation) if creation is not None else 0
    write_5m = max(0, write - write_1h)
    usd = (inp * price.input + out * price.output + write_5m * price.write + write_1h * 2.0 * price.input
           + read * price.read) / 1e6
    return Spend(1, inp, out, write, read, usd)


@dataclass(frozen=True)
class CallRecord:
    role: str
    model: str
    kernel: str
    ok: bool
    attempts: int
    seconds: float
    spend: Spend
    error: str = ""
    #: the versions of the prompts the call used (``common@v1+coder@v1``), to trace results to prompts
    prompt: str = ""


class Ledger:
    """Spend per kernel and in total, with reservations so concurrent calls cannot overshoot a cap.

    One ledger lives for the process by default (``process_ledger``): the language server's session and
    the benchmark suite share the total cap across jobs; a kernel's spend accumulates across its jobs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = Spend()
        self.kernels: dict[str, Spend] = {}
        self.roles: dict[str, Spend] = {}
        self.records: list[CallRecord] = []
        self._reserved_total = 0.0
        self._reserved: dict[str, float] = {}

    def spent(self, kernel: str) -> float:
        with self._lock:
            return self.kernels[kernel].usd if kernel in self.kernels else 0.0

    def reserve(self, kernel: str, usd: float, cap_kernel: float, cap_total: float) -> None:
        """Hold ``usd`` for a call about to be made; ``BudgetExceeded`` if a cap would be crossed."""
        with self._lock:
            k_spent = self.kernels[kernel].usd if kernel in self.kernels else 0.0
            k_res = self._reserved.get(kernel, 0.0)
            if k_spent + k_res + usd > cap_kernel:
                raise BudgetExceeded(
                    f"LLM cost cap reached for this kernel: ${k_spent:.2f} spent of ${cap_kernel:.2f} "
                    f"(the next call could cost up to ${usd:.2f})")
            if self.total.usd + self._reserved_total + usd > cap_total:
                raise BudgetExceeded(
                    f"total LLM cost cap reached: ${self.total.usd:.2f} spent of ${cap_total:.2f} "
                    f"(the next call could cost up to ${usd:.2f})")
            self._reserved[kernel] = k_res + usd
            self._reserved_total += usd

    def release(self, kernel: str, usd: float) -> None:
        with self._lock:
            self._reserved[kernel] = max(0.0, self._reserved.get(kernel, 0.0) - usd)
            self._reserved_total = max(0.0, self._reserved_total - usd)

    def record(self, rec: CallRecord) -> None:
        with self._lock:
            self.total.add(rec.spend)
            self.kernels.setdefault(rec.kernel, Spend()).add(rec.spend)
            self.roles.setdefault(rec.role, Spend()).add(rec.spend)
            self.records.append(rec)

    def summary(self, kernel: str | None = None) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"total": self.total.to_json(),
                                   "roles": {r: s.to_json() for r, s in self.roles.items()},
                                   "prompts": sorted({r.prompt for r in self.records if r.prompt})}
            if kernel is not None:
                out["kernel"] = (self.kernels.get(kernel) or Spend()).to_json()
            return out


_PROCESS_LEDGER = Ledger()


def process_ledger() -> Ledger:
    return _PROCESS_LEDGER


# --------------------------------------------------------------------------- replies
@dataclass
class Reply:
    """One model response, content blocks as plain dicts (ready to be sent back as the assistant turn)."""

    role: str
    model: str
    blocks: list[dict[str, Any]]
    stop_reason: str | None
    spend: Spend

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.blocks if b.get("type") == "text")


@dataclass
class Structured:
    """A validated structured answer and how it was obtained."""

    value: dict[str, Any]
    replies: list[Reply] = field(default_factory=list)
    malformed_retries: int = 0
    helper_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


#: a helper tool's implementation: input -> text returned to the model as the tool result
ToolHandler = Callable[[dict[str, Any]], Awaitable[str]]


def _block_dict(block: Any) -> dict[str, Any]:
    """An SDK content block as the dict the Messages API accepts back in an assistant turn."""
    t = getattr(block, "type", None)
    if t == "text":
        return {"type": "text", "text": block.text}
    if t == "tool_use":
        inp = block.input if isinstance(block.input, dict) else {}
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": inp}
    if t == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if t == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    d: dict[str, Any] = block.model_dump(mode="json", exclude_none=True) if hasattr(block, "model_dump") else {}
    d.pop("parsed_output", None)
    return d


def _retry_after(e: anthropic.APIStatusError) -> float | None:
    headers = getattr(getattr(e, "response", None), "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    s = headers.get("retry-after")
    if s:
        try:
            return float(s)
        except ValueError:
            return None
    return None


def _error_type(e: anthropic.APIStatusError) -> str:
    body = e.body
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping):
            return str(err.get("type") or "")
        return str(body.get("type") or "")
    return ""


def prompt_tag(role: str) -> str:
    """``common@vN+ROLE@vM`` for a role with a prompt file, else ""."""
    try:
        return f"{prompts.load('common').tag}+{prompts.load(role).tag}"
    except (OSError, ValueError):
        return ""


def _estimate_tokens(*parts: Any) -> int:
    """A conservative input-token estimate (≈3 characters per token; real text runs near 4)."""
    chars = sum(len(json.dumps(p, ensure_ascii=False)) for p in parts)
    return chars // 3 + 64


# --------------------------------------------------------------------------- client
class LLMClient:
    """Calls one model per role through the official SDK, within the configured caps."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        ledger: Ledger | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_text: Callable[[str, str], None] | None = None,
    ) -> None:
        key = config.resolved_key()
        if key is None:
            raise NoKeyError("no Anthropic API key (set ANTHROPIC_API_KEY, or run \"WarpForge: Set API Key\" in "
                             "the editor)")
        self.config = config
        self.ledger = ledger if ledger is not None else process_ledger()
        #: what this client's calls cost: one client per job, so this is the job's accounting
        self.spend = Spend()
        self._sleep = sleep
        self.on_text = on_text
        import anthropic

        timeout = anthropic.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        # The SDK's own retries are off: ours honour the cost gate and are counted per call.
        self._sdk = anthropic.AsyncAnthropic(api_key=key, base_url=config.base_url, max_retries=0, timeout=timeout)

    async def aclose(self) -> None:
        await self._sdk.close()

    # ----------------------------------------------------------------- one call
    def _system(self, system: Sequence[str]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": s} for s in system if s]
        if self.config.prompt_cache and blocks:
            cc: dict[str, Any] = {"type": "ephemeral"}
            if self.config.cache_ttl != "5m":
                cc["ttl"] = self.config.cache_ttl
            # Marks the end of the static prefix (tools + system): later calls of this role on this kernel
            # read it from the cache at a tenth of the input price.
            blocks[-1]["cache_control"] = cc
        return blocks

    async def call(
        self,
        role: str,
        *,
        system: Sequence[str],
        messages: list[dict[str, Any]],
        tools: Sequence[ToolSpec] = (),
        kernel: str = "",
    ) -> Reply:
        """One request (with retries). Raises ``LLMError`` subclasses; ``_StreamJSONError`` on bad tool JSON."""
        cfg = self.config
        model = cfg.model_for(role)
        max_tokens = cfg.max_tokens_for(role)
        price = cfg.price(model)
        sys_blocks = self._system(system)
        tool_params = [t.param(strict=cfg.strict_tools) for t in tools]
        est_in = _estimate_tokens(sys_blocks, messages, tool_params)
        worst = (est_in * max(price.input, price.write) + max_tokens * price.output) / 1e6
        self.ledger.reserve(kernel, worst, cfg.cap_kernel_usd, cfg.cap_total_usd)
        kwargs: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "system": sys_blocks,
                                  "messages": messages}
        if tool_params:
            kwargs["tools"] = tool_params
        if effort := cfg.effort.get(role):
            kwargs["output_config"] = {"effort": effort}
        import anthropic

        t0 = time.monotonic()
        attempt = 0
        spend = Spend()
        try:
            while True:
                attempt += 1
                partial: list[Any] = []
                try:
                    msg = await (self._stream(role, kwargs, partial) if cfg.stream else self._create(kwargs))
                except _StreamJSONError:
                    if partial:  # the model produced (and we pay for) an answer we could not parse
                        spend.add(usage_cost(partial[-1], price))
                    raise
                except anthropic.APIStatusError as e:
                    if partial:  # a stream that failed after message_start still billed its input
                        spend.add(usage_cost(partial[-1], price))
                    if self._retryable(e) and attempt <= cfg.max_retries:
                        await self._sleep(self._delay(e, attempt))
                        continue
                    raise self._mapped(e, role) from e
                except anthropic.APIConnectionError as e:  # includes APITimeoutError
                    if partial:
                        spend.add(usage_cost(partial[-1], price))
                    if attempt <= cfg.max_retries:
                        await self._sleep(self._delay(None, attempt))
                        continue
                    what = "timed out" if isinstance(e, anthropic.APITimeoutError) else "could not be reached"
                    raise ServiceUnavailable(f"the Anthropic API {what} after {attempt} attempts",
                                             role=role) from e
                spend.add(usage_cost(msg.usage, price))
                self.spend.add(spend)
                blocks = [_block_dict(b) for b in msg.content]
                reply = Reply(role, str(msg.model or model), blocks, msg.stop_reason, spend)
                self.ledger.record(CallRecord(role, model, kernel, True, attempt, time.monotonic() - t0, spend,
                                              prompt=prompt_tag(role)))
                log.debug("llm %s: %s, %d in (+%d cached) / %d out tokens, $%.4f", role, model,
                          spend.input_tokens, spend.cache_read_tokens, spend.output_tokens, spend.usd)
                return reply
        except (LLMError, _StreamJSONError) as e:
            self.spend.add(spend)
            self.ledger.record(CallRecord(role, model, kernel, False, attempt, time.monotonic() - t0, spend,
                                          f"{type(e).__name__}: {e}", prompt_tag(role)))
            raise
        finally:
            self.ledger.release(kernel, worst)

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        return await self._sdk.messages.create(**kwargs)

    async def _stream(self, role: str, kwargs: dict[str, Any], partial: list[Any]) -> Any:
        try:
            async with self._sdk.messages.stream(**kwargs) as stream:
                async for event in stream:
                    if event.type == "message_start":
                        partial.append(event.message.usage)
                    elif event.type == "text" and self.on_text is not None:
                        self.on_text(role, event.text)
                return await stream.get_final_message()
        except ValueError as e:  # the SDK failed to parse a tool's partial JSON
            raise _StreamJSONError(str(e)) from e

    @staticmethod
    def _retryable(e: anthropic.APIStatusError) -> bool:
        if e.status_code in RETRYABLE_STATUS or e.status_code >= 500:
            return True
        # An ``error`` event inside a 200 stream: overloaded / rate limited mid-response.
        return e.status_code < 400 and _error_type(e) in RETRYABLE_ERROR_TYPES

    def _delay(self, e: anthropic.APIStatusError | None, attempt: int) -> float:
        cfg = self.config
        if e is not None and (ra := _retry_after(e)) is not None:
            return max(0.0, min(ra, cfg.max_retry_after_s))
        backoff = min(cfg.backoff_cap_s, cfg.backoff_base_s * (2 ** (attempt - 1)))
        return float(backoff * random.uniform(0.5, 1.0))

    def _mapped(self, e: anthropic.APIStatusError, role: str) -> LLMError:
        status = e.status_code
        etype = _error_type(e) or "error"
        if status in (401, 403):
            return KeyRejected(f"the Anthropic API rejected the key ({status} {etype})", role=role)
        if self._retryable(e):
            return ServiceUnavailable(f"the Anthropic API kept failing ({status} {etype}) after "
                                      f"{self.config.max_retries} retries", role=role)
        msg = getattr(e, "api_message", None) or ""
        return RequestRejected(f"the Anthropic API refused the request ({status} {etype}){': ' + msg if msg else ''}",
                               role=role)

    # ----------------------------------------------------------------- structured output
    async def structured(
        self,
        role: str,
        *,
        system: Sequence[str],
        prompt: str,
        tool: ToolSpec,
        kernel: str = "",
        helpers: Sequence[tuple[ToolSpec, ToolHandler]] = (),
        helper_rounds: int = 2,
        check: Callable[[dict[str, Any]], list[str]] | None = None,
    ) -> Structured:
        """Ask for an answer through ``tool``; validate it (schema, then ``check``); retry once if malformed.

        Forced tool choice is not used: current models (Opus 5.5, Fable 5.1) reject it, so the prompt asks
        for the call and a reply without it counts as malformed. Helper tools run between turns, at most
        ``helper_rounds`` times, and do not count as malformed.
        """
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        tools = [tool, *(spec for spec, _ in helpers)]
        handlers = {spec.name: h for spec, h in helpers}
        out = Structured({})
        rounds = 0
        while True:
            try:
                reply = await self.call(role, system=system, messages=messages, tools=tools, kernel=kernel)
            except _StreamJSONError as e:
                problem = f"the tool input was not valid JSON ({e})"
                if out.malformed_retries >= 1:
                    raise MalformedOutput(f"{role}: {problem}", role=role) from e
                out.malformed_retries += 1
                continue  # nothing usable to show the model: ask again
            out.replies.append(reply)
            uses = reply.tool_uses
            answer = next((u for u in uses if u.get("name") == tool.name), None)
            asked = [u for u in uses if u.get("name") in handlers]
            if answer is not None:
                inp = answer.get("input")
                errors = validate(inp, tool.schema) if isinstance(inp, dict) else ["$: the input is not an object"]
                if not errors and check is not None and isinstance(inp, dict):
                    errors = check(inp)
                if not errors and isinstance(inp, dict):
                    out.value = inp
                    return out
                if reply.stop_reason == "max_tokens":
                    errors = ["the answer was cut off by max_tokens", *errors]
                problem = "; ".join(errors[:8])
            elif asked and rounds < helper_rounds:
                rounds += 1
                results: list[dict[str, Any]] = []
                for u in uses:
                    inp = u.get("input") if isinstance(u.get("input"), dict) else {}
                    assert isinstance(inp, dict)
                    if u.get("name") in handlers:
                        out.helper_calls.append((str(u.get("name")), inp))
                        try:
                            text = await handlers[str(u.get("name"))](inp)
                            results.append({"type": "tool_result", "tool_use_id": u["id"], "content": text})
                        except Exception as e:  # a failing lookup is the model's information, not our crash
                            results.append({"type": "tool_result", "tool_use_id": u["id"], "is_error": True,
                                            "content": f"{type(e).__name__}: {e}"})
                    else:
                        results.append({"type": "tool_result", "tool_use_id": u["id"], "is_error": True,
                                        "content": "not executed"})
                messages = [*messages, {"role": "assistant", "content": reply.blocks},
                            {"role": "user", "content": results}]
                continue
            elif asked:
                problem = f"too many `{asked[0].get('name')}` calls; answer now with `{tool.name}`"
            else:
                problem = f"the reply did not call the `{tool.name}` tool"
                if reply.stop_reason == "max_tokens":
                    problem += " (it was cut off by max_tokens)"
            if out.malformed_retries >= 1:
                raise MalformedOutput(f"{role}: {problem}", role=role)
            out.malformed_retries += 1
            messages = [*messages, *self._feedback(reply, tool, problem)]

    @staticmethod
    def _feedback(reply: Reply, tool: ToolSpec, problem: str) -> list[dict[str, Any]]:
        """The assistant turn as given, then a user turn saying what was wrong (tool_result per tool_use)."""
        sendable = [b for b in reply.blocks if b.get("type") in ("text", "tool_use", "thinking", "redacted_thinking")]
        if not any(b.get("type") in ("text", "tool_use") for b in sendable):
            # Nothing but (possibly cut-off) thinking: start over with a reminder instead.
            return [{"role": "assistant", "content": "(no answer)"},
                    {"role": "user", "content": f"{problem}. Answer by calling `{tool.name}`."}]
        results: list[dict[str, Any]] = []
        for u in reply.tool_uses:
            msg = (f"Invalid input: {problem}. Call `{tool.name}` again with input that matches its schema "
                   "exactly." if u.get("name") == tool.name else "not executed")
            results.append({"type": "tool_result", "tool_use_id": u["id"], "is_error": True, "content": msg})
        if not results:
            results.append({"type": "text", "text": f"{problem}. Answer by calling `{tool.name}`."})
        return [{"role": "assistant", "content": sendable}, {"role": "user", "content": results}]
