"""LSP base-protocol framing that a client cannot wedge: every bad frame gets an answer or ends the connection.

pygls reads ``Content-Length: N\\r\\n`` with an exact, case-sensitive pattern and then blocks on ``read(N)``.
A lower-case or missing header makes it swallow every following line without answering; a length larger
than the body makes it wait forever for bytes that never come; a huge one allocates and waits. The
process stays alive and silent, which an editor cannot tell from a slow server.

This reader replaces pygls' read loop (``WarpForgeServer.start_io`` uses it) and keeps its dispatch:
- header names are case-insensitive (the base protocol's headers are HTTP-style); a header line must be
  ``Name: value`` ending in CRLF, at most ``MAX_HEADER_LINE`` bytes, at most ``MAX_HEADERS`` of them;
- ``Content-Length`` must be present, decimal, and at most ``MAX_MESSAGE_BYTES``;
- once a message has started, all of it must arrive within ``frame_timeout`` seconds, and a body that
  holds another message's header (the announced length ran past the real body) is caught as it arrives;
- any of these ends the connection: the reason is logged (stderr and ``window/logMessage``) and the
  server exits with status 2, so the editor sees a stopped server and can restart it;
- a well-framed body that is not JSON, or JSON that is not a JSON-RPC object, is answered with the
  JSON-RPC error for it (Parse error / Invalid Request) and the connection goes on; a request whose
  params do not fit its method is answered with Invalid params instead of never.

Standard input is read on a daemon thread (never the server's thread pool), so a reader blocked on a
silent pipe neither holds a worker nor keeps the process alive at exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, Protocol

from cattrs import transform_error
from cattrs.errors import BaseValidationError

log = logging.getLogger(__name__)

#: longest header line accepted (real clients send ~60 bytes)
MAX_HEADER_LINE = 1024
#: most header lines in one message (the protocol defines two)
MAX_HEADERS = 16
#: largest message body accepted; VS Code does not sync files over 50 MB to extensions
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: seconds within which a started message must be complete (the variable exists for tests)
FRAME_TIMEOUT = float(os.environ.get("WARPFORGE_LSP_FRAME_TIMEOUT", "10"))
#: the exit status after a framing error ("bad input" in the CLI's exit-code contract)
EXIT_FRAMING = 2

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: another message's header inside a body; valid JSON never contains it (a raw newline cannot appear in a
#: JSON string and a bare word cannot appear outside one)
_HEADER_IN_BODY = re.compile(rb"(?i)content-length[ \t]*:[ \t]*\d+[ \t]*\r?\n")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


class FramingError(Exception):
    """The byte stream is not LSP framing; the connection cannot go on."""


class ChunkSource(Protocol):
    def read(self, n: int = ...) -> Awaitable[bytes]:
        """Some bytes (at most ``n``), or ``b""`` at end of stream."""
        ...


class Writer(Protocol):
    def write(self, data: bytes) -> Any: ...


class StreamChunks:
    """Chunks of a blocking binary stream (stdin), read on a daemon thread and handed to the event loop.

    At most ``depth`` chunks wait for the loop (a semaphore the thread takes before handing one over and the
    loop gives back when it takes one): a client that floods stops being read until the server catches up.
    The thread hands a chunk over with ``call_soon_threadsafe(put_nowait)``: no coroutine is made off the
    loop, so none is left un-awaited when the loop closes first (``queue.put`` through
    ``run_coroutine_threadsafe`` left one each time the server exited).
    """

    def __init__(self, stream: BinaryIO, chunk: int = 65536, depth: int = 16) -> None:
        self._stream = stream
        self._chunk = chunk
        self._slots = threading.Semaphore(depth)
        self._queue: asyncio.Queue[bytes] | None = None

    def read(self, n: int = -1) -> Awaitable[bytes]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._run, args=(loop, self._queue), name="lsp-stdin", daemon=True).start()
        return self._take(self._queue)

    async def _take(self, queue: asyncio.Queue[bytes]) -> bytes:
        data = await queue.get()
        self._slots.release()
        return data

    def _run(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes]) -> None:
        # The file descriptor, not the buffered stream: a daemon thread blocked inside BufferedReader holds
        # its lock, and the interpreter aborts at exit ("could not acquire lock for <stdin>").
        try:
            fd = self._stream.fileno()
            read: Callable[[int], bytes] = lambda n: os.read(fd, n)  # noqa: E731
        except (AttributeError, OSError, ValueError):
            read = getattr(self._stream, "read1", self._stream.read)
        while True:
            try:
                data = read(self._chunk)
            except (OSError, ValueError):
                data = b""
            self._slots.acquire()
            try:
                loop.call_soon_threadsafe(queue.put_nowait, data)
            except RuntimeError:  # the loop is closed: nobody is listening
                return
            if not data:
                return


class LockedWriter:
    """stdout for JSON-RPC frames: one frame at a time (handlers may answer from worker threads)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._stream.write(data)
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            self._stream.close()


def _preview(data: bytes, n: int = 40) -> str:
    text = data[:n].decode("ascii", "backslashreplace")
    return text + ("…" if len(data) > n else "")


class Framer:
    """Splits a chunk stream into message bodies, enforcing the rules in the module docstring."""

    def __init__(self, source: ChunkSource, *, max_body: int = MAX_MESSAGE_BYTES,
                 frame_timeout: float = FRAME_TIMEOUT) -> None:
        self._source = source
        self._buf = bytearray()
        self._max_body = max_body
        self._timeout = frame_timeout

    async def _fill(self, deadline: float | None, what: str) -> bool:
        """Append the next chunk; False at end of stream. Past ``deadline`` the message is incomplete."""
        loop = asyncio.get_running_loop()
        try:
            if deadline is None:
                data = await self._source.read(65536)
            else:
                data = await asyncio.wait_for(self._source.read(65536), max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise FramingError(f"{what} did not arrive within {self._timeout:g} s of the message's start") from None
        if not data:
            return False
        self._buf += data
        return True

    async def next_body(self) -> bytes | None:
        """The next message's body, or None at a clean end of stream (between messages)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        headers: dict[str, str] = {}
        while True:
            nl = self._buf.find(b"\n", 0, MAX_HEADER_LINE + 1)
            if nl < 0:
                if len(self._buf) > MAX_HEADER_LINE:
                    raise FramingError(f"a header line longer than {MAX_HEADER_LINE} bytes: "
                                       f"`{_preview(bytes(self._buf))}`")
                if self._buf and deadline is None:
                    deadline = loop.time() + self._timeout
                if not await self._fill(deadline, "the message header"):
                    if not self._buf and not headers:
                        return None
                    raise FramingError("the connection closed in the middle of a message header")
                continue
            if deadline is None:
                deadline = loop.time() + self._timeout
            line = bytes(self._buf[: nl + 1])
            del self._buf[: nl + 1]
            if not line.endswith(b"\r\n"):
                raise FramingError(f"a header line that does not end in CRLF: `{_preview(line)}`")
            content = line[:-2]
            if not content:
                break
            name, sep, value = content.partition(b":")
            if not sep or not _TOKEN.fullmatch(name):
                raise FramingError(f"not a `Name: value` header line: `{_preview(line)}`")
            if len(headers) >= MAX_HEADERS:
                raise FramingError(f"more than {MAX_HEADERS} header lines in one message")
            key = name.decode("ascii").lower()
            val = value.strip().decode("latin-1")
            if key in headers and headers[key] != val:
                raise FramingError(f"two different `{name.decode('ascii')}` headers in one message")
            headers[key] = val
        length = headers.get("content-length")
        if length is None:
            raise FramingError("a message without a Content-Length header")
        if not re.fullmatch(r"[0-9]{1,15}", length):
            raise FramingError(f"Content-Length `{_preview(length.encode('latin-1'))}` is not a byte count")
        n = int(length)
        if n > self._max_body:
            raise FramingError(f"Content-Length {n} is over the limit of {self._max_body} bytes")
        checked = 0
        while len(self._buf) < n:
            # A body still waiting for bytes that already holds a header: the announced length ran past the
            # real body into the next message, which will now wait for an answer that cannot come.
            if _HEADER_IN_BODY.search(self._buf, max(0, checked - 64)):
                raise FramingError(f"Content-Length {n} is longer than the message body (the next message's "
                                   "header is inside it)")
            checked = len(self._buf)
            if not await self._fill(deadline, f"the {n}-byte body"):
                raise FramingError(f"the connection closed after {len(self._buf)} of {n} body bytes")
        body = bytes(self._buf[:n])
        del self._buf[:n]
        return body


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id if isinstance(msg_id, (int, str)) else None,
            "error": {"code": code, "message": message}}


def frame(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def mismatch(e: BaseException) -> str:
    """Why a message does not fit its method's types, on one line: each field that is wrong and what it should
    be (``expected int @ $.params.text_document.version``), not cattrs' nested exception groups."""
    text = "; ".join(transform_error(e)) if isinstance(e, BaseValidationError) else f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:300]


def dispatch(protocol: Any, body: bytes, writer: Writer) -> None:
    """Decode one body and hand it to pygls' protocol; answer what pygls would leave unanswered."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as e:
        if _HEADER_IN_BODY.search(body):
            raise FramingError("Content-Length is longer than the message body (the next message's header "
                               "is inside it)") from None
        log.warning("a message that is not JSON (%s): %s", type(e).__name__, _preview(body))
        writer.write(frame(_error(None, PARSE_ERROR, f"Parse error: the message is not JSON ({e})")))
        return
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
        what = "a JSON-RPC 2.0 object" if isinstance(data, dict) else f"a JSON {type(data).__name__}, not an object"
        log.warning("an invalid message (%s): %s", what, _preview(body))
        writer.write(frame(_error(data.get("id") if isinstance(data, dict) else None, INVALID_REQUEST,
                                  f"Invalid Request: expected a JSON-RPC 2.0 message object, got {what}")))
        return
    is_request = "id" in data and isinstance(data.get("method"), str)
    try:
        message = protocol.structure_message(data)
    except Exception as e:
        why = mismatch(e.__cause__ or e)
        log.warning("a message that does not fit its method %r: %s", data.get("method"), why)
        if is_request:
            writer.write(frame(_error(data["id"], INVALID_PARAMS, f"Invalid params for {data.get('method')}: {why}")))
        return
    if isinstance(message, dict):  # not a JSON-RPC message pygls knows how to route
        if is_request:
            writer.write(frame(_error(data["id"], INVALID_REQUEST, "Invalid Request")))
        return
    try:
        protocol.handle_message(message)
    except Exception:
        log.exception("handling %r failed", data.get("method"))
        if is_request:
            writer.write(frame(_error(data["id"], -32603, "Internal error while handling the request")))


async def pump(protocol: Any, source: ChunkSource, writer: Writer, *, max_body: int = MAX_MESSAGE_BYTES,
               frame_timeout: float = FRAME_TIMEOUT) -> str | None:
    """Read and dispatch messages until end of stream (None) or a framing error (its reason)."""
    framer = Framer(source, max_body=max_body, frame_timeout=frame_timeout)
    while True:
        try:
            body = await framer.next_body()
            if body is None:
                return None
            dispatch(protocol, body, writer)
        except FramingError as e:
            return str(e)
