"""The LLM client through the real ``anthropic`` SDK against a local Messages-API server (no network).

Covers JSON and SSE streaming responses, tool-use parsing (with thinking blocks), retries on 429 / 529 /
500 and on an overloaded error inside a stream, mapped errors (bad key, unreachable), malformed output
(retried once with the error shown to the model, then a ``MalformedOutput``), prompt-cache markers and
their accounting, cost caps, and that the key never reaches a log, an error or a notice.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from dataclasses import replace

import pytest

from fakes.anthropic_server import Block, FakeAnthropic, Reply, error, text, tool
from warpforge.policy.llm.client import (
    BudgetExceeded,
    KeyRejected,
    Ledger,
    LLMClient,
    MalformedOutput,
    NoKeyError,
    ServiceUnavailable,
    usage_cost,
)
from warpforge.policy.llm.config import DEFAULT_MODELS, LLMConfig, Price, price_for
from warpforge.policy.llm.schema import ToolSpec, array, integer, obj, string, validate

KEY = "sk-ant-test-SECRET-0123456789"
ANSWER = ToolSpec("answer", "Return the answer.", obj({"value": integer("the value"), "why": string()}))


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(api_key=KEY) as fake:
        yield fake


def config(api: FakeAnthropic, **kw: object) -> LLMConfig:
    cfg = LLMConfig.from_sources({"baseUrl": api.base_url}, api_key=KEY)
    return replace(cfg, backoff_base_s=0.001, backoff_cap_s=0.01, **kw)  # type: ignore[arg-type]


def client(api: FakeAnthropic, ledger: Ledger | None = None, **kw: object) -> LLMClient:
    return LLMClient(config(api, **kw), ledger=ledger or Ledger())


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_structured_answer_through_the_real_sdk(api: FakeAnthropic, stream: bool) -> None:
    api.queue = [tool("answer", {"value": 42, "why": "because"}, thinking="let me think", text="Here it is.")]
    c = client(api, stream=stream)
    res = run(c.structured("planner", system=["static rules", "kernel brief"], prompt="question", tool=ANSWER,
                           kernel="k1"))
    assert res.value == {"value": 42, "why": "because"}  # type: ignore[attr-defined]
    req = api.requests[0]
    assert req.body["stream"] is True if stream else "stream" not in req.body
    assert req.body["model"] == DEFAULT_MODELS["planner"]
    assert req.headers["authorization"] == f"Bearer {KEY}"
    # the static context is one cached prefix: cache_control on the last system block only
    assert [("cache_control" in b) for b in req.body["system"]] == [False, True]
    assert req.body["tools"][0]["name"] == "answer" and req.body["tools"][0]["strict"] is True
    assert "tool_choice" not in req.body  # current models reject forced tool use
    assert "temperature" not in req.body
    reply = res.replies[0]  # type: ignore[attr-defined]
    assert [b["type"] for b in reply.blocks] == ["thinking", "text", "tool_use"]
    assert reply.blocks[0]["signature"].startswith("sig-")


def test_retries_on_429_529_500_honour_retry_after(api: FakeAnthropic) -> None:
    api.queue = [error(429, "rate_limit_error", retry_after="0.05"), error(529, "overloaded_error"),
                 error(500, "api_error", retry_after=None), tool("answer", {"value": 1, "why": ""})]
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    c = LLMClient(config(api), ledger=Ledger(), sleep=sleep)
    res = run(c.structured("coder", system=["s"], prompt="p", tool=ANSWER))
    assert res.value["value"] == 1  # type: ignore[attr-defined]
    assert len(api.requests) == 4
    assert waits[0] == pytest.approx(0.05)  # retry-after honoured
    assert waits[1] == 0.0
    assert 0 < waits[2] <= 0.01  # no retry-after: exponential backoff with jitter


def test_overloaded_error_inside_a_stream_is_retried(api: FakeAnthropic) -> None:
    api.queue = [Reply(stream_error="overloaded_error"), tool("answer", {"value": 7, "why": "x"})]
    res = run(client(api).structured("coder", system=["s"], prompt="p", tool=ANSWER))
    assert res.value["value"] == 7  # type: ignore[attr-defined]
    assert len(api.requests) == 2


def test_retries_exhausted_is_service_unavailable(api: FakeAnthropic) -> None:
    api.queue = [error(529, "overloaded_error")] * 3
    c = client(api, max_retries=2)
    with pytest.raises(ServiceUnavailable, match="529"):
        run(c.call("coder", system=["s"], messages=[{"role": "user", "content": "p"}]))
    assert len(api.requests) == 3


def test_bad_key_is_key_rejected_without_retries(api: FakeAnthropic) -> None:
    cfg = replace(config(api), api_key="sk-ant-wrong")
    c = LLMClient(cfg, ledger=Ledger())
    with pytest.raises(KeyRejected, match="401"):
        run(c.call("coder", system=["s"], messages=[{"role": "user", "content": "p"}]))
    assert len(api.requests) == 1


def test_unreachable_api_is_service_unavailable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    cfg = replace(LLMConfig.from_sources({"baseUrl": f"http://127.0.0.1:{port}"}, api_key=KEY), max_retries=1,
                  backoff_base_s=0.001)
    with pytest.raises(ServiceUnavailable, match="could not be reached"):
        run(LLMClient(cfg, ledger=Ledger()).call("coder", system=["s"], messages=[{"role": "user", "content": "p"}]))


def test_no_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(NoKeyError, match="ANTHROPIC_API_KEY"):
        LLMClient(LLMConfig.from_sources(), ledger=Ledger())


def test_key_from_environment(monkeypatch: pytest.MonkeyPatch, api: FakeAnthropic) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    cfg = replace(LLMConfig.from_sources({"baseUrl": api.base_url}), backoff_base_s=0.001)
    api.queue = [tool("answer", {"value": 3, "why": ""})]
    res = run(LLMClient(cfg, ledger=Ledger()).structured("coder", system=["s"], prompt="p", tool=ANSWER))
    assert res.value["value"] == 3  # type: ignore[attr-defined]
    assert api.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_malformed_output_is_fed_back_once_then_accepted(api: FakeAnthropic, stream: bool) -> None:
    bad = tool("answer", {"value": "forty-two"}, thinking="hmm")
    api.queue = [bad, tool("answer", {"value": 42, "why": "fixed"})]
    res = run(client(api, stream=stream).structured("coder", system=["s"], prompt="p", tool=ANSWER))
    assert res.value["value"] == 42 and res.malformed_retries == 1  # type: ignore[attr-defined]
    second = api.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"][0]["type"] == "thinking"  # the assistant turn is sent back verbatim
    result = second[2]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == bad.blocks[-1].id
    assert "expected integer" in result["content"] and "missing required property `why`" in result["content"]


def test_malformed_twice_is_a_recorded_failure_not_a_crash(api: FakeAnthropic) -> None:
    api.queue = [text("I think the answer is 42."), tool("answer", {"value": 1})]
    with pytest.raises(MalformedOutput, match="missing required property"):
        run(client(api).structured("coder", system=["s"], prompt="p", tool=ANSWER))
    # the first reply called no tool: the model was told to, as a plain user turn
    assert "did not call the `answer` tool" in api.requests[1].user_text


def test_invalid_json_in_a_stream_is_malformed_and_retried(api: FakeAnthropic) -> None:
    api.queue = [Reply([Block("tool_use", name="answer", input='{"value": 4, "why": x}')], "tool_use"),
                 tool("answer", {"value": 4, "why": "x"})]
    res = run(client(api).structured("coder", system=["s"], prompt="p", tool=ANSWER))
    assert res.value["value"] == 4 and res.malformed_retries == 1  # type: ignore[attr-defined]


def test_helper_tool_mid_generation(api: FakeAnthropic) -> None:
    lookup = ToolSpec("lookup", "Look something up.", obj({"q": string()}))
    api.queue = [tool("lookup", {"q": "warp shuffle"}, thinking="I should look this up"),
                 tool("answer", {"value": 5, "why": "found it"})]
    seen: list[dict[str, object]] = []

    async def handler(inp: dict[str, object]) -> str:
        seen.append(inp)
        return "RESULT: __shfl_xor_sync"

    res = run(client(api).structured("planner", system=["s"], prompt="p", tool=ANSWER,
                                     helpers=[(lookup, handler)]))
    assert res.value["value"] == 5 and res.malformed_retries == 0  # type: ignore[attr-defined]
    assert seen == [{"q": "warp shuffle"}]
    msgs = api.requests[1].body["messages"]
    assert msgs[1]["content"][0]["type"] == "thinking"
    assert msgs[2]["content"][0]["content"] == "RESULT: __shfl_xor_sync"


def test_cost_accounting_with_cache(api: FakeAnthropic) -> None:
    api.queue = [tool("answer", {"value": 1, "why": ""}), tool("answer", {"value": 2, "why": ""})]
    ledger = Ledger()
    c = client(api, ledger=ledger)

    async def twice() -> None:  # one event loop: the SDK's connection pool belongs to it
        for _ in range(2):
            await c.structured("coder", system=["rules " * 200, "brief " * 400], prompt="p", tool=ANSWER, kernel="k")

    run(twice())
    r1, r2 = ledger.records
    assert r1.spend.cache_write_tokens > 0 and r1.spend.cache_read_tokens == 0
    assert r2.spend.cache_read_tokens == r1.spend.cache_write_tokens and r2.spend.cache_write_tokens == 0
    assert r2.spend.usd < r1.spend.usd  # reading the cache costs a tenth of writing it
    price = price_for(DEFAULT_MODELS["coder"])
    s = r1.spend
    assert s.usd == pytest.approx((s.input_tokens * price.input + s.output_tokens * price.output
                                   + s.cache_write_tokens * price.write) / 1e6)
    summary = ledger.summary("k")
    assert summary["kernel"]["calls"] == 2 and summary["roles"]["coder"]["calls"] == 2


def test_usage_cost_prices() -> None:
    p = Price(2.0, 10.0)
    assert p.write == 2.5 and p.read == pytest.approx(0.2)
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 1_000_000}
    assert usage_cost(usage, p).usd == pytest.approx(2.0 + 1.0 + 0.2)
    assert price_for("claude-opus-5-5-20260922").input == 4.0  # longest prefix wins over claude-opus-5
    assert price_for("claude-opus-5").input == 5.0
    assert price_for("some-new-model").input == 10.0  # unknown: priced conservatively


def test_cost_cap_refuses_the_call_before_sending(api: FakeAnthropic) -> None:
    ledger = Ledger()
    c = client(api, ledger=ledger, cap_kernel_usd=0.05)  # one coder call's worst case is 24000 × $20/M
    with pytest.raises(BudgetExceeded, match="cost cap reached for this kernel"):
        run(c.call("coder", system=["s"], messages=[{"role": "user", "content": "p"}], kernel="k"))
    assert api.requests == []
    c2 = client(api, ledger=ledger, cap_total_usd=0.05)
    with pytest.raises(BudgetExceeded, match="total LLM cost cap"):
        run(c2.call("coder", system=["s"], messages=[{"role": "user", "content": "p"}], kernel="k"))


def test_cap_holds_under_concurrency(api: FakeAnthropic) -> None:
    api.responder = lambda req: tool("answer", {"value": 1, "why": ""})
    ledger = Ledger()
    # worst case of one call ≈ 1000 × $20/M + input ≈ $0.02: a $0.05 cap admits two calls in flight, not ten
    c = client(api, ledger=ledger, cap_kernel_usd=0.05, max_tokens={"coder": 1000})

    async def many() -> list[object]:
        return await asyncio.gather(*(c.call("coder", system=["s"], messages=[{"role": "user", "content": "p"}],
                                             kernel="k") for _ in range(10)), return_exceptions=True)

    results = run(many())
    ok = [r for r in results if not isinstance(r, BaseException)]  # type: ignore[attr-defined]
    assert 1 <= len(ok) <= 2
    assert ledger.spent("k") <= 0.05


def test_the_key_is_never_logged(api: FakeAnthropic, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api.queue = [error(529, "overloaded_error"), tool("answer", {"value": 1, "why": ""})]
    c = client(api)
    run(c.structured("coder", system=["s"], prompt="p", tool=ANSWER))
    bad = replace(config(api), api_key="sk-ant-other-SECRET")
    with pytest.raises(KeyRejected) as e:
        run(LLMClient(bad, ledger=Ledger()).call("coder", system=["s"], messages=[{"role": "user", "content": "p"}]))
    assert "SECRET" not in caplog.text and "SECRET" not in str(e.value)
    assert "SECRET" not in repr(c.config) and c.config.public()["api_key"] == "set"


def test_schema_validator() -> None:
    schema = obj({"xs": array(obj({"n": integer(), "s": string(enum=["a", "b"])}))})
    assert validate({"xs": [{"n": 1, "s": "a"}]}, schema) == []
    errors = validate({"xs": [{"n": True, "s": "c", "extra": 1}], "y": 2}, schema)
    assert "$.xs[0].n: expected integer, got boolean" in errors
    assert any("not one of" in e for e in errors)
    assert "$: unexpected property `y`" in errors and "$.xs[0]: unexpected property `extra`" in errors


def test_config_from_settings_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPFORGE_LLM_CAP_KERNEL", "3.5")
    monkeypatch.setenv("WARPFORGE_LLM_MODEL_FIXER", "claude-haiku-4-5")
    cfg = LLMConfig.from_sources({"warpforge": 1, "llm": {"capTotalUsd": "20", "stream": "false",
                                                          "sendContext": "everything"}}, api_key="k")
    assert cfg.cap_kernel_usd == 3.5 and cfg.cap_total_usd == 20.0 and cfg.stream is False
    assert cfg.model_for("fixer") == "claude-haiku-4-5" and cfg.model_for("planner") == DEFAULT_MODELS["planner"]
    assert cfg.send_context == "kernel"  # an unknown value falls back to the safe default
    assert LLMConfig.from_sources({"model": "claude-sonnet-5-5"}).model_for("coder") == "claude-sonnet-5-5"
