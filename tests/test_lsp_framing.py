"""Framing attacks against the real server process (``python -P -m warpforge serve``, raw bytes on stdin).

For every attack the server must either answer the valid request that follows, or close the connection:
exit within a few seconds with the reason on stderr. Alive and silent (what pygls' own reader did for 6 of
these) fails the test. Where the right outcome is known, the test asserts that one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsp_raw import RawServer, frame, server_env

VALID = {"jsonrpc": "2.0", "id": 99, "method": "shutdown"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RawServer]:
    s = RawServer(tmp_path, server_env(WARPFORGE_LSP_FRAME_TIMEOUT="3"))
    s.initialize(tmp_path)
    yield s
    s.close()


def answered(s: RawServer) -> bool:
    """Send the valid request; True if it is answered, False if the server closed with a logged reason."""
    s.send(frame(VALID))
    resp = s.response(99, timeout=20)
    if resp is not None:
        assert resp.get("result", "missing") is None, resp
        return True
    assert s.exit_status(5) == 2
    assert b"closing the connection, the client broke the LSP framing" in s.stderr, s.stderr.decode()
    assert b"Traceback" not in s.stderr, s.stderr.decode()
    return False


BODY = json.dumps({"jsonrpc": "2.0", "method": "$/setTrace", "params": {"value": "off"}}).encode()

CLOSES = {
    "no Content-Length": b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + BODY,
    "non-numeric length": b"Content-Length: abc\r\n\r\n" + BODY,
    "negative length": b"Content-Length: -5\r\n\r\n" + BODY,
    "huge length": b"Content-Length: 99999999999999\r\n\r\n" + BODY,
    "length past the body": b"Content-Length: %d\r\n\r\n" % (len(BODY) + 40) + BODY,
    "bare LF header": b"Content-Length: %d\n\n" % len(BODY) + BODY,
    "garbage header": b"\x00\xff\xfe binary junk\r\n\r\n" + BODY,
    "endless header line": b"X-Junk: " + b"a" * 200_000,
    "two different lengths": b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + BODY,
    "too many headers": b"".join(b"X-H%d: 1\r\n" % i for i in range(40)) + b"\r\n" + BODY,
}


@pytest.mark.parametrize("attack", sorted(CLOSES))
def test_a_broken_frame_closes_the_connection_with_a_reason(server: RawServer, attack: str) -> None:
    server.send(CLOSES[attack])
    assert not answered(server)


def test_a_length_shorter_than_the_body_answers_or_closes(server: RawServer) -> None:
    server.send(b"Content-Length: %d\r\n\r\n" % (len(BODY) - 7) + BODY)
    answered(server)  # a parse error for the cut body, then the rest is not a header: either outcome is safe
    assert server.proc.poll() is not None or server.response(99, timeout=0.5) is None


def test_a_body_that_stops_half_way_closes_after_the_frame_timeout(server: RawServer) -> None:
    server.send(b"Content-Length: 500\r\n\r\n" + BODY[:20])  # and nothing more, connection left open
    assert server.exit_status(15) == 2
    assert b"did not arrive within 3 s" in server.stderr


def test_a_body_cut_by_end_of_stream_closes(server: RawServer) -> None:
    server.send(b"Content-Length: 500\r\n\r\n" + BODY[:20])
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    assert server.exit_status(10) == 2
    assert b"closed after 20 of 500 body bytes" in server.stderr


def test_header_names_are_case_insensitive(server: RawServer) -> None:
    server.send(b"content-length: %d\r\ncontent-type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(BODY)
                + BODY)
    msg = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "shutdown"}).encode()
    server.send(b"CONTENT-LENGTH: %d\r\n\r\n" % len(msg) + msg)
    resp = server.response(7)
    assert resp is not None and resp["result"] is None


BAD_BODIES = [
    (b"this is not json", -32700, None),
    (b"\xff\xfe\x00 not utf-8", -32700, None),
    (b"[" * 200_000, -32700, None),  # nesting deep enough to exhaust the decoder's recursion
    (b"", -32700, None),
    (b"[1, 2, 3]", -32600, None),
    (b"42", -32600, None),
    (b"null", -32600, None),
    (b'{"id": 3, "method": "shutdown"}', -32600, 3),  # no "jsonrpc": "2.0"
]


def test_a_well_framed_bad_body_is_answered_and_the_connection_goes_on(server: RawServer) -> None:
    for body, code, msg_id in BAD_BODIES:
        server.send(frame(body))
        resp = server.response(msg_id)
        assert resp is not None and resp["error"]["code"] == code, (body[:40], resp)
    assert answered(server)


def test_a_request_whose_params_do_not_fit_is_answered(server: RawServer) -> None:
    server.request(5, "textDocument/codeLens", {"textDocument": 12})
    resp = server.response(5)
    assert resp is not None and resp["error"]["code"] in (-32602, -32603), resp
    assert answered(server)


def test_shutdown_then_exit_leaves_with_status_0(server: RawServer) -> None:
    server.send(frame(VALID))
    assert server.response(99) is not None
    server.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert server.exit_status(10) == 0
    assert b"Traceback" not in server.stderr, server.stderr.decode()
