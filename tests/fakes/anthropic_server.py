"""A local stand-in for the Anthropic Messages API: stdlib HTTP on 127.0.0.1, the real wire protocol.

Why: no machine in CI reaches api.anthropic.com, yet the LLM path must be tested through the official SDK
(its request building, SSE parsing, tool-use accumulation, error classes). This server speaks what the SDK
expects: ``POST /v1/messages`` answered as a JSON ``Message`` or, with ``"stream": true``, as server-sent
events with an ``event:`` line on every event in the documented order (message_start, ping, per content
block content_block_start / text_delta | input_json_delta | thinking_delta + signature_delta /
content_block_stop, message_delta with usage, message_stop), written chunk by chunk. Errors are the API's
JSON error bodies with the status codes the SDK maps (401, 429 with ``retry-after``, 500, 529 overloaded),
and an ``error`` event inside a 200 stream. Prompt caching is simulated: a request whose system prompt
carries ``cache_control`` reports ``cache_creation_input_tokens`` the first time its prefix is seen and
``cache_read_input_tokens`` after.

Replies are scripted: a ``responder(request) -> Reply`` function, or a queue of replies.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass
class Block:
    type: str  # "text" | "tool_use" | "thinking"
    text: str = ""
    name: str = ""
    input: Any = None  # dict, or a str sent verbatim as partial JSON (to script malformed JSON)
    signature: str = ""
    id: str = field(default_factory=lambda: f"toolu_{next(_ids):06d}")


@dataclass
class Reply:
    blocks: list[Block] = field(default_factory=list)
    stop_reason: str = "end_turn"
    #: HTTP error instead of a message
    status: int = 200
    error_type: str = ""
    message: str = ""
    retry_after: str | None = None
    #: a 200 stream that fails with an ``error`` event after message_start
    stream_error: str = ""
    #: multiply the reported token usage (to script expensive calls)
    usage_scale: float = 1.0


def tool(name: str, input: Any, *, thinking: str | None = None, text: str | None = None,
         usage_scale: float = 1.0) -> Reply:
    blocks = []
    if thinking is not None:
        blocks.append(Block("thinking", text=thinking, signature="sig-" + hashlib.sha1(thinking.encode()).hexdigest()))
    if text is not None:
        blocks.append(Block("text", text=text))
    blocks.append(Block("tool_use", name=name, input=input))
    return Reply(blocks, "tool_use", usage_scale=usage_scale)


def text(t: str) -> Reply:
    return Reply([Block("text", text=t)], "end_turn")


def error(status: int, etype: str, message: str = "", retry_after: str | None = "0") -> Reply:
    return Reply(status=status, error_type=etype, message=message or etype, retry_after=retry_after)


@dataclass
class Request:
    """A request as received (headers lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def system_text(self) -> str:
        s = self.body.get("system")
        if isinstance(s, str):
            return s
        return "\n".join(str(b.get("text", "")) for b in s or [] if isinstance(b, dict))

    @property
    def role(self) -> str:
        m = re.search(r"Your role: \*\*([\w ]+)\*\*", self.system_text)
        return m.group(1) if m else ""

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self.body.get("tools") or []]

    @property
    def user_text(self) -> str:
        out: list[str] = []
        for m in self.body.get("messages") or []:
            if m.get("role") != "user":
                continue
            c = m.get("content")
            if isinstance(c, str):
                out.append(c)
            else:
                for b in c or []:
                    if b.get("type") == "text":
                        out.append(str(b.get("text", "")))
                    elif b.get("type") == "tool_result":
                        cc = b.get("content")
                        out.append(cc if isinstance(cc, str) else json.dumps(cc))
        return "\n".join(out)

    @property
    def first_user_text(self) -> str:
        msgs = self.body.get("messages") or []
        if not msgs:
            return ""
        c = msgs[0].get("content")
        return c if isinstance(c, str) else json.dumps(c)

    def tool_results(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages") or []
        if not msgs or msgs[-1].get("role") != "user" or isinstance(msgs[-1].get("content"), str):
            return []
        return [b for b in msgs[-1]["content"] if b.get("type") == "tool_result"]


Responder = Callable[[Request], Reply]


class FakeAnthropic:
    """``with FakeAnthropic(responder) as api: Anthropic(base_url=api.base_url, api_key=api.api_key)``."""

    def __init__(self, responder: Responder | None = None, *, api_key: str = "test-key",
                 model_echo: bool = True) -> None:
        self.responder = responder
        self.queue: list[Reply] = []
        self.api_key = api_key
        self.requests: list[Request] = []
        self.model_echo = model_echo
        self._cache: set[str] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def by_role(self, role: str) -> list[Request]:
        return [r for r in self.requests if r.role == role]

    # ----------------------------------------------------------------- protocol
    def _next(self, req: Request) -> Reply:
        if self.responder is not None:
            return self.responder(req)
        with self._lock:
            if not self.queue:
                return error(500, "api_error", "the fake has no scripted reply left", None)
            return self.queue.pop(0)

    def _usage(self, req: Request, reply: Reply, content_json: str) -> dict[str, int]:
        total = max(1, len(json.dumps(req.body)) // 4)
        cached_upto: int | None = None
        system = req.body.get("system")
        if isinstance(system, list):
            for i, b in enumerate(system):
                if isinstance(b, dict) and b.get("cache_control"):
                    cached_upto = i
        usage = {"input_tokens": total, "output_tokens": max(1, len(content_json) // 4),
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if cached_upto is not None and isinstance(system, list):
            prefix = json.dumps([req.body.get("tools"), system[: cached_upto + 1]], sort_keys=True)
            ptok = min(total, len(prefix) // 4)
            key = hashlib.sha256(f"{req.body.get('model')}\0{prefix}".encode()).hexdigest()
            with self._lock:
                hit = key in self._cache
                self._cache.add(key)
            usage["input_tokens"] = total - ptok
            usage["cache_read_input_tokens" if hit else "cache_creation_input_tokens"] = ptok
        return {k: int(v * reply.usage_scale) for k, v in usage.items()}

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        req = Request(h.path, headers, body)
        with self._lock:
            self.requests.append(req)
        if not h.path.startswith("/v1/messages"):
            return self._json(h, 404, {"type": "error", "error": {"type": "not_found_error", "message": h.path}})
        auth = headers.get("authorization", "")
        key = auth[7:] if auth.startswith("Bearer ") else headers.get("x-api-key", "")
        if key != self.api_key:
            return self._json(h, 401, {"type": "error", "error": {"type": "authentication_error",
                                                                  "message": "invalid x-api-key"}})
        reply = self._next(req)
        if reply.status != 200:
            extra = {"retry-after": reply.retry_after} if reply.retry_after is not None else {}
            return self._json(h, reply.status, {"type": "error", "error": {"type": reply.error_type,
                                                                           "message": reply.message}}, extra)
        content = [self._content(b) for b in reply.blocks]
        usage = self._usage(req, reply, json.dumps(content))
        model = str(body.get("model", "claude-fake")) if self.model_echo else "claude-fake"
        msg_id = f"msg_{next(_ids):06d}"
        if body.get("stream"):
            return self._stream(h, msg_id, model, reply, usage)
        self._json(h, 200, {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
                            "stop_reason": reply.stop_reason, "stop_sequence": None, "usage": usage})

    @staticmethod
    def _content(b: Block) -> dict[str, Any]:
        if b.type == "text":
            return {"type": "text", "text": b.text}
        if b.type == "thinking":
            return {"type": "thinking", "thinking": b.text, "signature": b.signature}
        inp = b.input if not isinstance(b.input, str) else {}
        return {"type": "tool_use", "id": b.id, "name": b.name, "input": inp}

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("request-id", f"req_{next(_ids):06d}")
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _stream(self, h: BaseHTTPRequestHandler, msg_id: str, model: str, reply: Reply, usage: dict[str, int]) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("cache-control", "no-cache")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("request-id", f"req_{next(_ids):06d}")
        h.end_headers()

        def send(event: str, data: dict[str, Any]) -> None:
            chunk = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            h.wfile.flush()

        start_usage = {**usage, "output_tokens": 1}
        send("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
        send("ping", {"type": "ping"})
        if reply.stream_error:
            send("error", {"type": "error", "error": {"type": reply.stream_error, "message": "Overloaded"}})
        else:
            for i, b in enumerate(reply.blocks):
                if b.type == "text":
                    send("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "text", "text": ""}})
                    for piece in _pieces(b.text, 24):
                        send("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "text_delta", "text": piece}})
                elif b.type == "thinking":
                    start = {"type": "thinking", "thinking": "", "signature": ""}
                    send("content_block_start", {"type": "content_block_start", "index": i, "content_block": start})
                    for piece in _pieces(b.text, 24):
                        send("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "thinking_delta", "thinking": piece}})
                    send("content_block_delta", {"type": "content_block_delta", "index": i,
                                                 "delta": {"type": "signature_delta", "signature": b.signature}})
                else:
                    send("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                        "type": "tool_use", "id": b.id, "name": b.name, "input": {}}})
                    raw = b.input if isinstance(b.input, str) else json.dumps(b.input)
                    for piece in _pieces(raw, 40):
                        send("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "input_json_delta", "partial_json": piece}})
                send("content_block_stop", {"type": "content_block_stop", "index": i})
            send("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                                   "usage": {"output_tokens": usage["output_tokens"]}})
            send("message_stop", {"type": "message_stop"})
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


def _pieces(s: str, n: int) -> list[str]:
    return [s[i : i + n] for i in range(0, len(s), n)] or [""]
