"""Messages a client should not send, and the server's own loose ends (issue 26 item 10).

- A notification whose fields have the wrong types (a didOpen with a string version, a number for the
  document) is logged as ONE line naming each wrong field, never pygls' 30-line traceback, and the server
  answers the next request: the real server process, raw frames (``lsp_raw``).
- The stdin reader hands chunks to the event loop without making a coroutine off it, so a chunk read after
  the loop closed leaves no "coroutine 'Queue.put' was never awaited" behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsp_raw import RawServer, server_env
from warpforge.lsp.framing import StreamChunks


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RawServer]:
    s = RawServer(tmp_path, server_env())
    s.initialize(tmp_path)
    yield s
    s.close()


def log_lines(s: RawServer, needle: str) -> list[str]:
    return [line for line in s.stderr.decode().splitlines() if needle in line]


def test_a_did_open_with_wrong_field_types_is_one_log_line(server: RawServer, tmp_path: Path) -> None:
    uri = (tmp_path / "k.cu").as_uri()
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "cuda", "version": "one",
                                                            "text": "__global__ void k() {}\n"}})
    server.notify("textDocument/didOpen", {"textDocument": 5})
    server.notify("textDocument/didChange", {"textDocument": {"uri": 7}, "contentChanges": "x"})
    # Still up: the next request is answered (and its own wrong params are answered as such).
    server.request(4, "textDocument/codeLens", {"textDocument": 12})
    resp = server.response(4)
    assert resp is not None and resp["error"]["code"] == -32602, resp
    assert resp["error"]["message"] == ("Invalid params for textDocument/codeLens: invalid value for type, "
                                        "expected str @ $.params.text_document.uri")
    # A number where a string goes is read as its text by the protocol library: a document that is not open,
    # which gets no lenses (it was read from disk: a FileNotFoundError with its traceback sent back).
    server.request(5, "textDocument/codeLens", {"textDocument": {"uri": 12}})
    assert server.response(5) == {"jsonrpc": "2.0", "id": 5, "result": []}
    server.request(9, "shutdown")
    assert server.response(9) == {"jsonrpc": "2.0", "id": 9, "result": None}
    server.notify("exit")
    assert server.exit_status(10) == 0
    stderr = server.stderr.decode()
    assert "Traceback" not in stderr and "Exception Group" not in stderr and "cattrs" not in stderr, stderr
    lines = log_lines(server, "does not fit its method")
    assert len(lines) == 4, stderr  # one per bad message, nothing else (the lens for `12` is no error)
    assert lines[0].endswith("'textDocument/didOpen': invalid value for type, expected int @ "
                             "$.params.text_document.version"), lines[0]
    assert "expected str @ $.params.text_document.uri" in lines[1]
    assert "required field missing @ $.params.text_document.version" in lines[2]


def _reader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "lsp-stdin"}


def test_a_chunk_read_after_the_loop_closed_leaves_no_coroutine_behind() -> None:
    r, w = os.pipe()
    before = _reader_threads()
    with os.fdopen(r, "rb", buffering=0) as stream:
        chunks = StreamChunks(stream, chunk=4, depth=1)
        loop = asyncio.new_event_loop()

        async def first() -> bytes:
            return await chunks.read()

        os.write(w, b"abcd")
        assert loop.run_until_complete(first()) == b"abcd"
        (reader,) = _reader_threads() - before
        loop.close()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            os.write(w, b"efgh")  # read by the thread, for a loop that is gone
            os.close(w)
            reader.join(timeout=10)
            gc.collect()
        assert not reader.is_alive()
        assert not [c for c in caught if "never awaited" in str(c.message)], [str(c.message) for c in caught]


def test_back_pressure_holds_the_reader_at_the_depth() -> None:
    """At most ``depth`` chunks wait for the loop: the thread stops reading until the loop takes one."""
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as stream:
        chunks = StreamChunks(stream, chunk=1, depth=2)

        async def run() -> list[bytes]:
            first = await chunks.read()  # starts the thread
            os.write(w, b"bcdef")
            await asyncio.sleep(0.3)
            queue = chunks._queue
            assert queue is not None and queue.qsize() <= 2  # c and d wait, e is read and held, f not read
            got = [first]
            for _ in range(5):
                got.append(await chunks.read())
            return got

        os.write(w, b"a")
        got = asyncio.run(run())
        os.close(w)
    assert b"".join(got) == b"abcdef"
